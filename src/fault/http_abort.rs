//! `http_abort` (HTTP layer): a matching request is never forwarded and
//! never answered — the client's connection is reset (or closed) where the
//! response would begin, so the client sees the connection fail with its
//! request sent (ECONNRESET, "connection reset by peer", an SDK's
//! connection error). Chaos Mesh's HTTPChaos `abort` on requests. Earlier
//! pipelined requests still get their responses first.
//!
//! `phase = "response"`: the request is forwarded and the upstream does
//! its work; the connection fails where its response would reach the
//! client (Chaos Mesh's `abort` on responses) — what makes a retry charge
//! twice.

use super::acts::{HttpAct, Reply};
use super::http_match::RequestMatch;
use super::http_reply::{ANSWERS_HERE, AnswerPhase};
use super::http_status::After;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct HttpAbort {
    then: After,
    phase: AnswerPhase,
    matcher: RequestMatch,
}

impl Kind for HttpAbort {
    const INFO: KindInfo = KindInfo {
        name: "http_abort",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request is never answered: the connection is reset (or closed), before the upstream sees it or (phase=response) after it answered",
        params: &[
            (
                "then",
                "reset (default) or close",
                "an RST or a clean close, with no response",
            ),
            (
                "phase",
                "request (default) or response",
                "before the upstream sees the request, or once it has answered (its answer is lost)",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let then = match f.choice("then", &["reset", "close"])? {
            Some("close") => After::Close,
            _ => After::Reset,
        };
        let (phase, matcher) = AnswerPhase::parse_with_match(f, ANSWERS_HERE)?;
        Ok(HttpAbort {
            then,
            phase,
            matcher,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![];
        if self.then == After::Close {
            p.push(("then", "close".into()));
        }
        p.extend(self.phase.param());
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
        Some(HttpAct::Answer(
            self.phase(),
            Reply::Abort(Box::new(self.clone())),
        ))
    }
}

impl HttpAbort {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn then(&self) -> After {
        self.then
    }

    pub(crate) fn phase(&self) -> AnswerPhase {
        self.phase
    }
}
