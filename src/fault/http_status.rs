//! `http_status` (HTTP layer): the request is answered in the upstream's
//! place — `status`, `headers`, `body` (or `body_file`), `retry_after` — and
//! the upstream never sees it; the connection stays usable for the next
//! request unless `then = "close" | "reset"`. `envelope = "anthropic" |
//! "openai"` shapes the body and headers as that provider's errors are
//! shaped (a 529 `overloaded_error`, a 429 `rate_limit_error` with
//! `retry-after`), so its SDK takes the error for its own.

use std::time::Duration;

use bytes::Bytes;

use super::http_match::RequestMatch;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, Node, ProfileError, node_text};

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
    /// The whole reply: status line, headers, body.
    reply: Bytes,
    /// The same with `connection: close` (for a request after which the
    /// connection cannot go on).
    reply_closing: Bytes,
    then: After,
    matcher: RequestMatch,
    summary: String,
    /// For display: what the reply says beyond its status.
    retry_after: Option<Duration>,
    headers: Vec<String>,
}

const PARAMS: &[(&str, &str, &str)] = &[
    ("status", "an HTTP status 100-599, required", "the answer's status"),
    ("envelope", "anthropic or openai", "a provider-shaped error body and headers"),
    ("body", "a string", "the answer's body (default: the provider's error, or the status's name)"),
    ("body_file", "a path (regular file, at most 1MiB)", "…or a file's bytes"),
    ("retry_after", "a duration", "a Retry-After header (whole seconds, rounded up)"),
    ("headers", "\"Name: value\" strings", "more headers"),
    ("then", "keep (default), close or reset", "what the connection does after the answer"),
];

impl Kind for HttpStatus {
    const INFO: KindInfo = KindInfo {
        name: "http_status",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request is answered with a status (429, 529, 503 …) the upstream never sees",
        params: PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let status = f
            .integer_in("status", 100, 599)?
            .ok_or_else(|| f.table_error("missing \"status\" (an HTTP status like 429)"))?
            as u16;
        let envelope = f.choice("envelope", &["anthropic", "openai"])?;
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
        let headers = f.strings("headers")?;
        let extra = header_lines(f, headers)?;
        let then = match f.choice("then", &["keep", "close", "reset"])? {
            Some("close") => After::Close,
            Some("reset") => After::Reset,
            _ => After::Keep,
        };
        let matcher = RequestMatch::parse(f)?;
        let (content_type, default_body, provider_headers) =
            reply_parts(envelope, status, retry_after);
        let (body, source) = match (body, body_file) {
            (Some(b), _) => (b, "body".to_string()),
            (None, Some((b, shown))) => (b, format!("file {shown}")),
            (None, None) => (
                default_body,
                envelope.map_or("default body".into(), |p| format!("{p} envelope")),
            ),
        };
        let mut head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
            reason(status),
            body.len()
        );
        if let Some(r) = retry_after {
            head.push_str(&format!("retry-after: {}\r\n", ceil_secs(r)));
        }
        for h in provider_headers.iter().chain(&extra) {
            head.push_str(h);
            head.push_str("\r\n");
        }
        let closing = format!("{head}connection: close\r\n\r\n");
        if then != After::Keep {
            head.push_str("connection: close\r\n");
        }
        head.push_str("\r\n");
        let with_body = |head: String| {
            let mut reply = head.into_bytes();
            reply.extend_from_slice(&body);
            Bytes::from(reply)
        };
        Ok(HttpStatus {
            status,
            reply: with_body(head),
            reply_closing: with_body(closing),
            then,
            matcher,
            summary: source,
            retry_after,
            headers: extra,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![
            ("status", self.status.to_string()),
            ("reply", self.summary.clone()),
        ];
        if let Some(r) = self.retry_after {
            p.push(("retry_after", crate::units::format_duration(r)));
        }
        if !self.headers.is_empty() {
            p.push(("headers", self.headers.join(", ")));
        }
        match self.then {
            After::Keep => {}
            After::Close => p.push(("then", "close".into())),
            After::Reset => p.push(("then", "reset".into())),
        }
        p.extend(self.matcher.params());
        p
    }
}

impl HttpStatus {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    /// The reply, as the client receives it (`closing`: the connection
    /// ends after it, and the reply says so).
    pub(crate) fn reply(&self, closing: bool) -> Bytes {
        if closing {
            self.reply_closing.clone()
        } else {
            self.reply.clone()
        }
    }

    pub(crate) fn then(&self) -> After {
        self.then
    }
}

/// `headers = ["Name: value", …]`, each checked to be one header line.
pub(crate) fn header_lines(
    f: &Fields,
    headers: Option<Vec<Node>>,
) -> Result<Vec<String>, ProfileError> {
    let mut lines = Vec::new();
    for h in headers.unwrap_or_default() {
        let text = node_text(&h);
        if !text.contains(':') || text.contains(['\r', '\n']) {
            return Err(f.error(
                "headers",
                &h.loc,
                format!("expected \"Name: value\", got {text:?}"),
            ));
        }
        lines.push(text);
    }
    Ok(lines)
}

/// A reply's content type, default body and extra headers: a provider's
/// error with an `envelope`, else the status's name as text.
pub(crate) fn reply_parts(
    envelope: Option<&str>,
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    match envelope {
        Some(p) => envelope_for(p, status, retry_after),
        None => (
            "text/plain; charset=utf-8",
            format!("{status} {}\n", reason(status)).into_bytes(),
            Vec::new(),
        ),
    }
}

pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A provider's error as its API sends it: content type, body, headers.
fn envelope_for(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    let mut headers = Vec::new();
    if let Some(r) = retry_after {
        // Both SDKs read the millisecond form first.
        headers.push(format!("retry-after-ms: {}", r.as_millis()));
    }
    let body = if provider == "anthropic" {
        let (kind, message) = match status {
            400 => ("invalid_request_error", "Invalid request"),
            401 => ("authentication_error", "invalid x-api-key"),
            402 => ("billing_error", "Your credit balance is too low to access the Anthropic API."),
            403 => ("permission_error", "Your API key does not have permission to use the specified resource."),
            404 => ("not_found_error", "Not found"),
            413 => ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
            429 => ("rate_limit_error", "This request would exceed your organization's rate limit. (injected by netchaos)"),
            504 => ("timeout_error", "Request timed out"),
            529 => ("overloaded_error", "Overloaded"),
            s if s >= 500 => ("api_error", "Internal server error"),
            // Anthropic's documentation: also used for other 4xx codes.
            s if s >= 400 => ("invalid_request_error", "Error"),
            _ => ("api_error", "Error"),
        };
        headers.push("request-id: req_netchaos_injected".into());
        serde_json::json!({
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": "req_netchaos_injected"
        })
    } else {
        let (kind, code, message) = match status {
            400 => ("invalid_request_error", None, "Invalid request"),
            401 => ("invalid_request_error", Some("invalid_api_key"), "Incorrect API key provided."),
            404 => ("invalid_request_error", None, "Not found"),
            429 => ("requests", Some("rate_limit_exceeded"), "Rate limit reached for requests (injected by netchaos)"),
            503 => ("server_error", None, "The server is overloaded or not ready yet."),
            s if s >= 500 => ("server_error", None, "The server had an error while processing your request."),
            _ => ("invalid_request_error", None, "Error"),
        };
        headers.push("x-request-id: req_netchaos_injected".into());
        if status == 429 {
            headers.push("x-ratelimit-remaining-requests: 0".into());
            if let Some(r) = retry_after {
                headers.push(format!("x-ratelimit-reset-requests: {}s", ceil_secs(r)));
            }
        }
        serde_json::json!({
            "error": {"message": message, "type": kind, "param": null, "code": code}
        })
    };
    ("application/json", body.to_string().into_bytes(), headers)
}

/// The reason phrase of a status (what real servers send).
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        412 => "Precondition Failed",
        415 => "Unsupported Media Type",
        418 => "I'm a teapot",
        425 => "Too Early",
        426 => "Upgrade Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        511 => "Network Authentication Required",
        529 => "Site is overloaded",
        _ => "Status",
    }
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
        let text = String::from_utf8(s.reply(false).to_vec()).unwrap();
        assert!(text.starts_with("HTTP/1.1 529 Site is overloaded\r\n"), "{text}");
        assert!(text.contains("content-type: application/json\r\n"), "{text}");
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "overloaded_error");
        let s = status(&[("status", "429"), ("envelope", "openai"), ("retry_after", "1500ms")]);
        let text = String::from_utf8(s.reply(false).to_vec()).unwrap();
        assert!(text.contains("retry-after: 2\r\n"), "{text}");
        assert!(text.contains("retry-after-ms: 1500\r\n"), "{text}");
        assert!(text.contains("\"code\":\"rate_limit_exceeded\""), "{text}");
        assert!(!text.contains("connection: close"), "keep-alive by default: {text}");
    }

    /// Each status carries the error type Anthropic documents for it (the
    /// SDK picks its class by status, but handlers read `.type`).
    #[test]
    fn anthropic_error_types_follow_the_status() {
        let kind = |code: &str| {
            let s = status(&[("status", code), ("envelope", "anthropic")]);
            let text = String::from_utf8(s.reply(false).to_vec()).unwrap();
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
        let text = String::from_utf8(s.reply(false).to_vec()).unwrap();
        assert!(text.ends_with("content-length: 4\r\nconnection: close\r\n\r\ndown"), "{text}");
        assert_eq!(s.then(), After::Close);
        assert!(spec("http_status", &[]).unwrap_err().message.contains("missing \"status\""));
        let e = spec("http_status", &[("status", "503"), ("headers", "nocolon")]).unwrap_err();
        assert!(e.message.contains("expected \"Name: value\""), "{e}");
    }
}
