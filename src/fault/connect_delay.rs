//! `connect_delay` (connect layer): the SYN gate holds the client's SYN for
//! `delay ± jitter` before letting the handshake go ahead, so the delay is
//! spent inside `connect()`, not in the first read.

use std::time::Duration;

use rand::Rng;

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConnectDelay {
    delay: Duration,
    jitter: Duration,
}

impl Kind for ConnectDelay {
    const INFO: KindInfo = KindInfo {
        name: "connect_delay",
        layer: Layer::Connect,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "the handshake completes only after delay ± jitter",
        params: &[
            ("delay", "a duration, required", "how long connect() takes"),
            ("jitter", "a duration, default 0", "± this much, uniform"),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"300ms\")"))?;
        let jitter = f.duration("jitter")?.unwrap_or_default();
        Ok(ConnectDelay { delay, jitter })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("delay", format_duration(self.delay))];
        if !self.jitter.is_zero() {
            p.push(("jitter", format_duration(self.jitter)));
        }
        p
    }
}

impl ConnectDelay {
    /// This connection's delay, from its own random source.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let j = self.jitter.as_secs_f64();
        let d = self.delay.as_secs_f64() + rng.random_range(-j..=j);
        Duration::from_secs_f64(d.max(0.0))
    }
}
