//! `--record DIR`: each HTTP exchange a real upstream answered, kept as
//! it passed — the request (credentials redacted), the upstream's status,
//! headers and body, and the moment of each body chunk from the request's
//! end — and written as a cassette file ([`crate::mock::cassette`]) for
//! `--mock-from DIR` to replay. A tape rides on its attempt's record
//! ([`super::attempt`]): only an exchange to a host name that went to the
//! client as the upstream sent it, whole, with no fault acting on it or
//! set to follow it, is written.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::mock::cassette::{self, Chunk, Interaction, REDACTED, Recorder};

static RECORDER: OnceLock<Recorder> = OnceLock::new();

/// Bytes of one request's body kept, at most (a larger one is not
/// recorded).
const MAX_REQUEST: usize = 8 << 20;
/// Bytes of one response's body kept, at most.
const MAX_RESPONSE: usize = 32 << 20;

/// Parts of a request header's or query parameter's name that mark its
/// value as a credential (kept as `[redacted]`): `Authorization`,
/// `x-api-key`, `x-goog-api-key`, `Cookie`, `x-amz-security-token`,
/// gateways' `helicone-auth` or `x-portkey-api-key`, a `?key=`, an
/// `X-Amz-Signature` …
const SECRET_PARTS: &[&str] = &[
    "auth",
    "key",
    "token",
    "secret",
    "cookie",
    "signature",
    "credential",
    "password",
    "session",
    "sig",
];

/// Whether a header's or parameter's name says its value is a secret.
fn secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_PARTS.iter().any(|p| n.contains(p))
}

/// Response headers not recorded: cookies the upstream set are the
/// session of whoever recorded.
const DROPPED_RESPONSE_HEADERS: &[&str] = &["set-cookie", "set-cookie2"];

/// Records this run's exchanges into `dir` (made if need be).
pub(crate) fn start(dir: &Path) -> std::io::Result<()> {
    let r = Recorder::open(dir)?;
    let _ = RECORDER.set(r);
    Ok(())
}

/// Whether this run records.
pub(crate) fn recording() -> bool {
    RECORDER.get().is_some()
}

/// Where this run records and how many exchanges it wrote.
pub(crate) fn written() -> Option<(&'static Path, u64)> {
    RECORDER.get().map(|r| {
        (
            r.dir(),
            r.written.load(std::sync::atomic::Ordering::Relaxed),
        )
    })
}

/// One exchange as it passes.
pub(crate) struct Tape {
    request: cassette::Request,
    proto: &'static str,
    body: Vec<u8>,
    /// When the request's last byte went on: answers' moments count from
    /// here, as a provider's clock does (and the mock's, replaying).
    ended: Instant,
    status: Option<u16>,
    headers: Vec<(String, String)>,
    head_at: Duration,
    chunks: Vec<(Duration, BytesMut)>,
    size: usize,
    /// Why it cannot be written, if it cannot.
    spoilt: Option<&'static str>,
}

impl Tape {
    /// A tape for a request, when the run records.
    pub(crate) fn begin(
        proto: &'static str,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &[(String, String)],
    ) -> Option<Tape> {
        if !recording() {
            return None;
        }
        // Only what a replay can stand in for: a request to a host name
        // (an address cannot be mocked: a metadata service's, a peer's),
        // in origin form.
        let named = host.is_some_and(|h| crate::plan::is_mockable_host(&cassette::normal_host(h)));
        if !named || !path.starts_with('/') || method.eq_ignore_ascii_case("CONNECT") {
            return None;
        }
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                let v = if secret(&k) {
                    REDACTED.into()
                } else {
                    v.clone()
                };
                (k, v)
            })
            .collect();
        Some(Tape {
            request: cassette::Request {
                method: Some(method.to_string()),
                host: host.map(cassette::normal_host),
                path: Some(redact_query(path)),
                headers,
                ..Default::default()
            },
            proto,
            body: Vec::new(),
            ended: Instant::now(),
            status: None,
            headers: Vec::new(),
            head_at: Duration::ZERO,
            chunks: Vec::new(),
            size: 0,
            spoilt: None,
        })
    }

    /// Request body bytes (its payload: de-chunked) go on.
    pub(crate) fn request_body(&mut self, b: &[u8]) {
        self.ended = Instant::now();
        if self.spoilt.is_some() {
            return;
        }
        if self.body.len() + b.len() > MAX_REQUEST {
            self.spoil("its request body is too large to keep");
            return;
        }
        self.body.extend_from_slice(b);
    }

    /// It will not be written, for `why`: what it holds is let go.
    pub(crate) fn spoil(&mut self, why: &'static str) {
        self.spoilt.get_or_insert(why);
        self.body = Vec::new();
        self.chunks = Vec::new();
    }

    /// The upstream's head.
    pub(crate) fn head(&mut self, status: u16, headers: &[(String, String)]) {
        self.head_at = self.ended.elapsed();
        self.status = Some(status);
        self.headers = headers
            .iter()
            .filter(|(k, _)| {
                !DROPPED_RESPONSE_HEADERS
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(k))
            })
            .cloned()
            .collect();
    }

    /// Response body bytes (its payload) go to the client now.
    pub(crate) fn response_body(&mut self, b: &[u8]) {
        if self.spoilt.is_some() || b.is_empty() {
            return;
        }
        self.size += b.len();
        if self.size > MAX_RESPONSE {
            self.spoil("its response body is too large to keep");
            return;
        }
        let at = self.ended.elapsed();
        // Bytes within a millisecond of the last go with it.
        match self.chunks.last_mut() {
            Some((t, last)) if at.saturating_sub(*t) < Duration::from_millis(1) => {
                last.extend_from_slice(b);
            }
            _ => self.chunks.push((at, BytesMut::from(b))),
        }
    }

    /// Writes it, when it is whole and was the upstream's own answer.
    pub(crate) fn finish(mut self, upstream_answered_whole: bool) {
        let Some(r) = RECORDER.get() else { return };
        if let Some(why) = self.spoilt {
            tracing::debug!(
                "--record: {} {} not recorded: {why}",
                self.request.method.as_deref().unwrap_or(""),
                self.request.path.as_deref().unwrap_or("")
            );
            return;
        }
        let Some(status) = self.status.filter(|_| upstream_answered_whole) else {
            return;
        };
        // What a cassette cannot hold or a replay cannot send: an interim
        // or switching answer, a header value that is not visible ASCII.
        let sendable = self
            .headers
            .iter()
            .all(|(k, v)| cassette::sendable_header(k, v));
        if status < 200 || !sendable {
            tracing::debug!(
                "--record: a {status} answer not recorded (a replay could not send it)"
            );
            return;
        }
        self.request.set_body(&self.body);
        let interaction = Interaction {
            request: self.request,
            response: cassette::Response {
                status,
                headers: self.headers,
                head_ms: Some(cassette::ms(self.head_at)),
                chunks: Some(
                    self.chunks
                        .iter()
                        .map(|(at, b)| Chunk::of(*at, b))
                        .collect(),
                ),
                ..Default::default()
            },
            recorded: Some(serde_json::json!({
                "by": concat!("netchaos ", env!("CARGO_PKG_VERSION")),
                "proto": self.proto,
                "at": time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
            })),
        };
        r.write(&interaction);
    }
}

/// A path whose key-carrying query parameters are `[redacted]`.
fn redact_query(path: &str) -> String {
    let Some((p, q)) = path.split_once('?') else {
        return path.to_string();
    };
    let q: Vec<String> = q
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if secret(k) => format!("{k}={}", cassette::urlencode(REDACTED)),
            _ => kv.to_string(),
        })
        .collect();
    format!("{p}?{}", q.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_queries_are_redacted() {
        assert_eq!(
            redact_query("/v1beta/models/g:generateContent?alt=sse&key=AIza123"),
            "/v1beta/models/g:generateContent?alt=sse&key=%5Bredacted%5D"
        );
        assert_eq!(redact_query("/v1/messages"), "/v1/messages");
        assert_eq!(
            redact_query("/o?X-Amz-Signature=ab&X-Amz-Credential=c&alt=sse&page_token=t"),
            "/o?X-Amz-Signature=%5Bredacted%5D&X-Amz-Credential=%5Bredacted%5D&alt=sse\
             &page_token=%5Bredacted%5D"
        );
        for h in [
            "Authorization",
            "x-api-key",
            "x-amz-security-token",
            "helicone-auth",
            "Cookie",
        ] {
            assert!(secret(h), "{h}");
        }
        assert!(!secret("content-type") && !secret("anthropic-version"));
    }
}
