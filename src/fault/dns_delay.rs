//! `dns_delay` (DNS layer): the answer to a matching query is held for
//! `delay` (± `jitter`) before it reaches the client: time spent in name
//! resolution, before the connect even starts.

use std::time::Duration;

use rand::Rng;

use super::acts::DnsAct;
use super::dns_match::QueryMatch;
use super::dns_match::QueryView;
use super::dns_timeout::MATCH_PARAMS;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone)]
pub(crate) struct DnsDelay {
    delay: Duration,
    jitter: Duration,
    matcher: QueryMatch,
}

impl Kind for DnsDelay {
    const INFO: KindInfo = KindInfo {
        name: "dns_delay",
        layer: Layer::Dns,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "the answer to a matching DNS query is held: slow name resolution",
        params: &[
            (
                "delay",
                "a duration, required",
                "how long the answer is held",
            ),
            ("jitter", "a duration, default 0", "± this much, uniform"),
            MATCH_PARAMS[0],
            MATCH_PARAMS[1],
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"300ms\")"))?;
        let jitter = f.duration("jitter")?.unwrap_or_default();
        Ok(DnsDelay {
            delay,
            jitter,
            matcher: QueryMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("delay", format_duration(self.delay))];
        if !self.jitter.is_zero() {
            p.push(("jitter", format_duration(self.jitter)));
        }
        p.extend(self.matcher.params());
        p
    }

    fn on_query(
        &self,
        q: &QueryView<'_>,
        _udp: bool,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<DnsAct> {
        self.matcher()
            .matches(q)
            .then(|| DnsAct::Hold(self.sample(rng)))
    }
}

impl DnsDelay {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }

    /// This query's delay, from its own random source.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let j = self.jitter.as_secs_f64();
        Duration::from_secs_f64((self.delay.as_secs_f64() + rng.random_range(-j..=j)).max(0.0))
    }
}
