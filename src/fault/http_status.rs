//! `http_status` (HTTP layer): the request is answered in the upstream's
//! place — `status`, `headers`, `body` (or `body_file`), `retry_after` — and
//! the upstream never sees it; the connection stays usable for the next
//! request unless `then = "close" | "reset"`. `envelope = "anthropic" |
//! "openai" | "gemini" | "bedrock"` shapes the body and headers as that provider's
//! errors are shaped (a 529 `overloaded_error`, a 429 `rate_limit_error`
//! with `retry-after`, Google's `RESOURCE_EXHAUSTED` with a `RetryInfo`, Bedrock's
//! `ThrottlingException`),
//! so its SDK takes the error for its own.

use bytes::Bytes;

use super::acts::{HttpAct, Reply};
use super::http_match::{RequestMatch, named_values};
use super::http_reply::{self, ANSWERS_HERE, AnswerPhase, CannedReply};
use super::{Kind, KindInfo, Layer, Stream};
use crate::provider::Provider;
use crate::settings::{Fields, ProfileError};

/// What happens to the connection after a canned reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// It stays open for the next request (keep-alive).
    Keep,
    /// A clean close after the reply.
    Close,
    /// An RST after the reply.
    Reset,
}

#[derive(Debug, Clone)]
pub(crate) struct HttpStatus {
    status: u16,
    /// gRPC calls' answer (`grpc_status`), over HTTP/2.
    grpc: Option<crate::protocol::grpc::Answer>,
    reply: CannedReply,
    /// `envelope = "auto"`: each provider's status and reply, the one
    /// for the provider a request goes to taken per request.
    auto: Option<std::sync::Arc<[(Provider, u16, CannedReply)]>>,
    then: After,
    phase: AnswerPhase,
    matcher: RequestMatch,
    /// For display: the reply's parameters as given, beyond its status.
    given: Given,
}

/// A canned reply's parameters as given (`body`, `envelope`, …, and its
/// extra `headers`), shown by `check` and the event log.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Given {
    pub(crate) plain: Vec<(&'static str, String)>,
    pub(crate) headers: Vec<(String, String)>,
}

impl Given {
    /// Notes `key` as given, if it was.
    pub(crate) fn note(&mut self, key: &'static str, value: Option<String>) {
        if let Some(v) = value {
            self.plain.push((key, v));
        }
    }

    pub(crate) fn named_headers(&self) -> Vec<(&'static str, String, String)> {
        self.headers
            .iter()
            .map(|(k, v)| ("headers", k.clone(), v.clone()))
            .collect()
    }
}

const PARAMS: &[(&str, &str, &str)] = &[
    (
        "status",
        "an HTTP status 200-599; required unless grpc_status is given",
        "the answer's status",
    ),
    (
        "grpc_status",
        "a gRPC status: 0-16, or a name like UNAVAILABLE",
        "gRPC calls (over HTTP/2) get it as a trailers-only answer: grpc-status, grpc-message (body), grpc-retry-pushback-ms (retry_after); other requests get status (default: the code's HTTP status)",
    ),
    (
        "envelope",
        "anthropic, openai, gemini or bedrock",
        "a provider-shaped error body and headers",
    ),
    (
        "body",
        "a string",
        "the answer's body (default: the provider's error, or the status's name)",
    ),
    (
        "body_file",
        "a path (regular file, at most 1MiB)",
        "…or a file's bytes",
    ),
    (
        "retry_after",
        "a duration",
        "a Retry-After header (whole seconds, rounded up; an envelope also gives the exact value: retry-after-ms, or Gemini's RetryInfo)",
    ),
    (
        "headers",
        "\"Name: value\" strings, or a table (headers.Name in flags)",
        "more headers",
    ),
    (
        "then",
        "keep (default), close or reset",
        "what the connection does after the answer",
    ),
    (
        "phase",
        "request (default) or response",
        "in the upstream's place, or instead of the upstream's answer (it saw the request)",
    ),
];

impl Kind for HttpStatus {
    const INFO: KindInfo = KindInfo {
        name: "http_status",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request is answered with a status (429, 529, 503 …): in the upstream's place, or (phase=response) instead of its answer",
        params: PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let grpc_code = f.with_text(
            "grpc_status",
            crate::protocol::grpc::CODE_FORM,
            crate::protocol::grpc::Code::parse,
        )?;
        let status = match (http_reply::status(f)?, grpc_code) {
            (Some(s), _) => s,
            (None, Some(c)) => c.http_status(),
            (None, None) => {
                return Err(f.table_error(
                    "missing \"status\" (an HTTP status like 429) or \"grpc_status\"",
                ));
            }
        };
        let envelope = f.choice("envelope", crate::provider::ENVELOPES)?;
        // `body = "text"` is the answer's body; `body.model = "…"` (a
        // table) is the request match's.
        let body = match f.is_table("body") {
            true => None,
            false => f.string("body")?.map(String::into_bytes),
        };
        let body_file = f.file("body_file")?;
        if body.is_some() && body_file.is_some() {
            return Err(f.table_error("give body or body_file, not both"));
        }
        let retry_after = f.duration("retry_after")?;
        let headers = reply_headers(f)?;
        let extra = lines(&headers);
        let then = match f.choice("then", &["keep", "close", "reset"])? {
            Some("close") => After::Close,
            Some("reset") => After::Reset,
            _ => After::Keep,
        };
        let (phase, matcher) = AnswerPhase::parse_with_match(f, ANSWERS_HERE)?;
        let mut given = Given {
            headers,
            ..Given::default()
        };
        given.note("envelope", envelope.map(str::to_string));
        given.note(
            "body",
            body.as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
        );
        given.note(
            "body_file",
            body_file.as_ref().map(|(_, shown)| shown.clone()),
        );
        given.note(
            "retry_after",
            retry_after.map(crate::units::format_duration),
        );
        given.note("grpc_status", grpc_code.map(|c| c.name().to_string()));
        let body = body.or(body_file.map(|(b, _)| b));
        let grpc = grpc_code.map(|code| crate::protocol::grpc::Answer {
            code,
            message: match &body {
                Some(b) => String::from_utf8_lossy(b).trim_end().to_string(),
                None => code.message().to_string(),
            },
            pushback: retry_after,
        });
        let always_close = then != After::Keep;
        let auto = match envelope {
            Some("auto") => Some(
                Provider::ALL
                    .iter()
                    .map(|p| {
                        let s = p.status_for(status);
                        CannedReply::build(
                            s,
                            Some(p.name()),
                            body.clone(),
                            retry_after,
                            &extra,
                            always_close,
                        )
                        .map(|r| (*p, s, r))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| f.table_error(&e))?
                    .into(),
            ),
            _ => None,
        };
        let first = envelope.map(|e| if e == "auto" { "anthropic" } else { e });
        let reply = CannedReply::build(status, first, body, retry_after, &extra, always_close)
            .map_err(|e| f.table_error(&e))?;
        Ok(HttpStatus {
            status,
            grpc,
            auto,
            reply,
            then,
            phase,
            matcher,
            given,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("status", self.status.to_string())];
        p.extend(self.given.plain.iter().cloned());
        match self.then {
            After::Keep => {}
            After::Close => p.push(("then", "close".into())),
            After::Reset => p.push(("then", "reset".into())),
        }
        p.extend(self.phase.param());
        p.extend(self.matcher.params());
        p
    }

    fn named_params(&self) -> Vec<(&'static str, String, String)> {
        self.given.named_headers()
    }

    fn request_match(&self) -> Option<&RequestMatch> {
        Some(self.matcher())
    }

    fn on_request(
        &self,
        _rng: &mut rand_chacha::ChaCha8Rng,
        host: Option<&str>,
        path: &str,
    ) -> Option<HttpAct> {
        Some(HttpAct::Answer(
            self.phase(),
            Reply::Status(Box::new(self.for_request(host, path))),
        ))
    }
}

impl HttpStatus {
    /// This fault as it answers a request to `host` for `path`: with
    /// `envelope = "auto"`, that provider's status and error.
    pub(crate) fn for_request(&self, host: Option<&str>, path: &str) -> HttpStatus {
        let mut s = self.clone();
        if let Some(auto) = &self.auto {
            let p = Provider::of(host, path);
            if let Some((_, status, reply)) = auto.iter().find(|(q, _, _)| *q == p) {
                s.status = *status;
                s.reply = reply.clone();
            }
        }
        s
    }

    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The reply, as the client receives it (`closing`: the connection
    /// ends after it, and the reply says so; `head_only`: it answers a
    /// HEAD request).
    pub(crate) fn reply(&self, closing: bool, head_only: bool) -> Bytes {
        self.reply.bytes(closing, head_only)
    }

    pub(crate) fn then(&self) -> After {
        self.then
    }

    /// The extra `headers` the answer carries.
    pub(crate) fn extra_headers(&self) -> &[(String, String)] {
        &self.given.headers
    }

    /// The answer a gRPC call gets (`grpc_status`), if one was given.
    pub(crate) fn grpc(&self) -> Option<&crate::protocol::grpc::Answer> {
        self.grpc.as_ref()
    }

    pub(crate) fn phase(&self) -> AnswerPhase {
        self.phase
    }
}

/// `headers = ["Name: value", …]`, each checked to be one header line.
/// The `headers` of a canned reply (`"Name: value"` strings, a table, or
/// `headers.Name = value`), as (name, value).
pub(crate) fn reply_headers(f: &mut Fields) -> Result<Vec<(String, String)>, ProfileError> {
    let pairs = named_values(f, "headers", ':')?;
    for (name, value) in &pairs {
        if name.is_empty() || format!("{name}{value}").contains(['\r', '\n']) {
            return Err(f.table_error(format!(
                "headers: expected \"Name: value\" on one line, got {name:?}: {value:?}"
            )));
        }
    }
    Ok(pairs)
}

/// Header lines of (name, value) pairs.
pub(crate) fn lines(pairs: &[(String, String)]) -> Vec<String> {
    pairs.iter().map(|(k, v)| format!("{k}: {v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::spec;
    use super::*;
    use crate::fault::FaultKind;

    fn status(pairs: &[(&str, &str)]) -> HttpStatus {
        match spec("http_status", pairs).unwrap().kind {
            FaultKind::HttpStatus(s) => s,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_provider_envelope_the_sdk_recognises() {
        let s = status(&[("status", "529"), ("envelope", "anthropic")]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 529 Site is overloaded\r\n"),
            "{text}"
        );
        assert!(
            text.contains("content-type: application/json\r\n"),
            "{text}"
        );
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "overloaded_error");
        let s = status(&[
            ("status", "429"),
            ("envelope", "openai"),
            ("retry_after", "1500ms"),
        ]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(text.contains("retry-after: 2\r\n"), "{text}");
        assert!(text.contains("retry-after-ms: 1500\r\n"), "{text}");
        assert!(text.contains("\"code\":\"rate_limit_exceeded\""), "{text}");
        assert!(
            !text.contains("connection: close"),
            "keep-alive by default: {text}"
        );
        // Google's: the rpc code's name beside the number, and when to come
        // back as a RetryInfo detail (and Retry-After); no OpenAI headers.
        let s = status(&[
            ("status", "429"),
            ("envelope", "gemini"),
            ("retry_after", "1500ms"),
        ]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(
            text.contains("content-type: application/json; charset=UTF-8\r\n"),
            "{text}"
        );
        assert!(
            text.contains("retry-after: 2\r\n") && !text.contains("retry-after-ms"),
            "{text}"
        );
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["code"], 429);
        assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(body["error"]["details"][0]["retryDelay"], "1.5s");
        let s = status(&[("status", "503"), ("envelope", "gemini")]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(text.contains(r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#), "{text}");
    }

    /// Bedrock's: the exception's name where AWS's SDKs read the code.
    #[test]
    fn a_grpc_status_gives_calls_their_failure_and_others_its_http_status() {
        let s = status(&[("grpc_status", "resource_exhausted"), ("retry_after", "2s")]);
        assert_eq!(s.status(), 429, "the code's HTTP status for other requests");
        let g = s.grpc().unwrap();
        assert_eq!(
            (g.code.number(), g.pushback),
            (8, Some(std::time::Duration::from_secs(2)))
        );
        assert!(g.message.starts_with("Resource has been exhausted"));
        let s = status(&[("status", "503"), ("grpc_status", "14"), ("body", "down\n")]);
        assert_eq!(
            (s.status(), s.grpc().unwrap().message.as_str()),
            (503, "down")
        );
        let e = spec("http_status", &[("path", "/x")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing \"status\"") && e.contains("grpc_status"),
            "{e}"
        );
        let e = spec("http_status", &[("grpc_status", "SLOW")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a gRPC status"), "{e}");
    }

    #[test]
    fn bedrock_errors_name_their_exception() {
        let s = status(&[("status", "429"), ("envelope", "bedrock")]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(
            text.contains("x-amzn-ErrorType: ThrottlingException:"),
            "{text}"
        );
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .starts_with("Too many requests")
        );
        for (code, want) in [
            ("503", "ServiceUnavailableException"),
            ("502", "InternalServerException"),
            ("422", "ValidationException"),
        ] {
            let s = status(&[("status", code), ("envelope", "bedrock")]);
            let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
            assert!(
                text.contains(&format!("x-amzn-ErrorType: {want}:")),
                "{text}"
            );
        }
    }

    /// Each status carries the error type Anthropic documents for it (the
    /// SDK picks its class by status, but handlers read `.type`).
    #[test]
    fn anthropic_error_types_follow_the_status() {
        let kind = |code: &str| {
            let s = status(&[("status", code), ("envelope", "anthropic")]);
            let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
            let body: serde_json::Value =
                serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            body["error"]["type"].as_str().unwrap().to_string()
        };
        for (code, want) in [
            ("402", "billing_error"),
            ("504", "timeout_error"),
            ("422", "invalid_request_error"),
            ("429", "rate_limit_error"),
            ("502", "api_error"),
        ] {
            assert_eq!(kind(code), want, "{code}");
        }
    }

    #[test]
    fn framing_is_exact_and_then_closes() {
        let s = status(&[("status", "503"), ("body", "down"), ("then", "close")]);
        let text = String::from_utf8(s.reply(false, false).to_vec()).unwrap();
        assert!(
            text.ends_with("content-length: 4\r\nconnection: close\r\n\r\ndown"),
            "{text}"
        );
        assert_eq!(s.then(), After::Close);
        assert!(
            spec("http_status", &[])
                .unwrap_err()
                .message
                .contains("missing \"status\"")
        );
        let e = spec("http_status", &[("status", "503"), ("headers", "nocolon")]).unwrap_err();
        assert!(e.message.contains("expected \"Name: value\""), "{e}");
    }
}
