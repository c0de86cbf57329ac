//! `http_truncate` (HTTP layer): a matching request's response body is cut
//! after `after_bytes` bytes of it, with a clean close or a reset (`then`).
//! The framing is left as a real cut leaves it: a `content-length` the body
//! never reaches, a chunk that never ends.

use super::acts::HttpAct;
use super::http_match::RequestMatch;
use super::http_status::After;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct HttpTruncate {
    after_bytes: u64,
    then: After,
    matcher: RequestMatch,
}

impl Kind for HttpTruncate {
    const INFO: KindInfo = KindInfo {
        name: "http_truncate",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request's response body is cut after N bytes",
        params: &[
            (
                "after_bytes",
                "a size, default 0",
                "body bytes that arrive before the cut",
            ),
            (
                "then",
                "close (default) or reset",
                "a clean close or an RST",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let after_bytes = f.size("after_bytes")?.unwrap_or(0);
        let then = match f.choice("then", &["close", "reset"])? {
            Some("reset") => After::Reset,
            _ => After::Close,
        };
        Ok(HttpTruncate {
            after_bytes,
            then,
            matcher: RequestMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("after_bytes", self.after_bytes.to_string())];
        if self.then == After::Reset {
            p.push(("then", "reset".into()));
        }
        p.extend(self.matcher.params());
        p
    }

    fn request_match(&self) -> Option<&RequestMatch> {
        Some(self.matcher())
    }

    fn on_request(
        &self,
        _rng: &mut rand_chacha::ChaCha8Rng,
        _host: Option<&str>,
        _path: &str,
    ) -> Option<HttpAct> {
        Some(HttpAct::Truncate(self.clone()))
    }
}

impl HttpTruncate {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn after_bytes(&self) -> u64 {
        self.after_bytes
    }

    pub(crate) fn then(&self) -> After {
        self.then
    }
}
