//! `http_delay` (HTTP layer): a matching request is held before it is
//! forwarded (`phase = "request"`), or its response's headers are held
//! (`phase = "headers"`, the default): a slow time to first byte, with the
//! connection itself as fast as ever.

use std::time::Duration;

use rand::Rng;

use super::acts::HttpAct;
use super::http_match::RequestMatch;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

/// Where the delay goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the request reaches the upstream.
    Request,
    /// Before the response's headers reach the client.
    Headers,
}

#[derive(Debug, Clone)]
pub(crate) struct HttpDelay {
    delay: Duration,
    jitter: Duration,
    phase: Phase,
    matcher: RequestMatch,
}

impl Kind for HttpDelay {
    const INFO: KindInfo = KindInfo {
        name: "http_delay",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request, or its response's headers, is held: a slow time to first byte",
        params: &[
            ("delay", "a duration, required", "how long"),
            ("jitter", "a duration, default 0", "± this much, uniform"),
            (
                "phase",
                "headers (default) or request",
                "hold the response's headers, or the request",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"3s\")"))?;
        let jitter = f.duration("jitter")?.unwrap_or_default();
        let phase = match f.choice("phase", &["headers", "request"])? {
            Some("request") => Phase::Request,
            _ => Phase::Headers,
        };
        let matcher = RequestMatch::parse(f)?;
        if phase == Phase::Request {
            matcher.no_response_yet(
                f,
                "phase = \"request\" holds the request, before any response",
            )?;
        }
        Ok(HttpDelay {
            delay,
            jitter,
            phase,
            matcher,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("delay", format_duration(self.delay))];
        if !self.jitter.is_zero() {
            p.push(("jitter", format_duration(self.jitter)));
        }
        p.push((
            "phase",
            if self.phase == Phase::Request {
                "request"
            } else {
                "headers"
            }
            .into(),
        ));
        p.extend(self.matcher.params());
        p
    }

    fn request_match(&self) -> Option<&RequestMatch> {
        Some(self.matcher())
    }

    fn on_request(
        &self,
        rng: &mut rand_chacha::ChaCha8Rng,
        _host: Option<&str>,
        _path: &str,
    ) -> Option<HttpAct> {
        Some(HttpAct::Hold(self.phase(), self.sample(rng)))
    }
}

impl HttpDelay {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// This request's delay, from its own random source.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let j = self.jitter.as_secs_f64();
        Duration::from_secs_f64((self.delay.as_secs_f64() + rng.random_range(-j..=j)).max(0.0))
    }
}
