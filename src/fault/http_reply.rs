//! A canned HTTP/1.1 reply, as `http_status` and `respond` send it, with
//! the body and headers a provider's `envelope` gives one
//! ([`crate::provider`]).
//!
//! The head (with and without `connection: close`) is kept apart from the
//! body: a HEAD request gets the head alone, with the length the body would
//! have had (RFC 9110 §9.3.2) — a body after it would be read as the start
//! of the next response. A 204 or 304 has no body and no length at all, a
//! 205 a length of 0.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::http_match::RequestMatch;
use crate::settings::{Fields, ProfileError};

use crate::provider::ceil_secs;
use crate::provider::{ID_DIGITS, REQUEST_ID};

/// A canned reply's `status`: 200-599. A 1xx is interim, not an answer
/// (the client would wait on for the real one), and is refused as such.
pub(crate) fn status(f: &mut Fields) -> Result<Option<u16>, ProfileError> {
    let loc = f.loc().to_string();
    let Some(s) = f.integer_in("status", 100, 599)? else {
        return Ok(None);
    };
    if s < 200 {
        return Err(f.error(
            "status",
            &loc,
            format!("{s} is an interim status, not an answer: give 200-599"),
        ));
    }
    Ok(Some(s as u16))
}

/// When an answering fault (`http_status`, `http_abort`) acts: in the
/// upstream's place, or once the upstream has answered — it did the work
/// (charged, wrote, sent the mail), and the client never learns.
/// Why an answer in the upstream's place has no response to look at.
pub(crate) const ANSWERS_HERE: &str =
    "this answers in the upstream's place (add phase = \"response\" to answer after it)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerPhase {
    Request,
    Response,
}

impl AnswerPhase {
    /// A fault's `phase` and request match: in the request phase there is
    /// no response yet, so `response_status` and `response_header` are
    /// refused, saying `why` (what the fault does then).
    pub(crate) fn parse_with_match(
        f: &mut Fields,
        why: &str,
    ) -> Result<(AnswerPhase, RequestMatch), ProfileError> {
        let phase = match f.choice("phase", &["request", "response"])? {
            Some("response") => AnswerPhase::Response,
            _ => AnswerPhase::Request,
        };
        let matcher = RequestMatch::parse(f)?;
        if phase == AnswerPhase::Request {
            matcher.no_response_yet(f, why)?;
        }
        Ok((phase, matcher))
    }

    /// For display: only the non-default phase is shown.
    pub(crate) fn param(self) -> Option<(&'static str, String)> {
        (self == AnswerPhase::Response).then(|| ("phase", "response".into()))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CannedReply {
    /// Status line and headers, keep-alive.
    keep: Bytes,
    /// The same, saying `connection: close`.
    close: Bytes,
    body: Bytes,
    /// It carries a [`REQUEST_ID`] (an envelope's), made fresh per reply.
    ids: bool,
}

impl CannedReply {
    /// A reply with `status`: `body`, else the envelope's error or the
    /// status's name; a `retry-after` header (whole seconds, rounded up)
    /// and `extra` header lines. `always_close`: the connection ends after
    /// it whatever the request, and the reply says so. An error (for the
    /// profile's reader) when a body is given to a status that has none.
    pub(crate) fn build(
        status: u16,
        envelope: Option<&str>,
        body: Option<Vec<u8>>,
        retry_after: Option<Duration>,
        extra: &[String],
        always_close: bool,
    ) -> Result<CannedReply, String> {
        let bodiless = matches!(status, 204 | 205 | 304);
        if bodiless && (body.is_some() || envelope.is_some()) {
            return Err(format!(
                "a {status} reply has no body: drop body and envelope"
            ));
        }
        let (content_type, default_body, provider) = reply_parts(envelope, status, retry_after);
        let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        let body = match bodiless {
            // 205's framing is not bodiless by status, as 204's and 304's is.
            true if status == 205 => {
                head.push_str("content-length: 0\r\n");
                Vec::new()
            }
            true => Vec::new(),
            false => {
                let body = body.unwrap_or(default_body);
                head.push_str(&format!(
                    "content-type: {content_type}\r\ncontent-length: {}\r\n",
                    body.len()
                ));
                body
            }
        };
        if let Some(r) = retry_after {
            head.push_str(&format!("retry-after: {}\r\n", ceil_secs(r)));
        }
        for h in provider.iter().chain(extra) {
            head.push_str(h);
            head.push_str("\r\n");
        }
        let close = Bytes::from(format!("{head}connection: close\r\n\r\n"));
        let keep = match always_close {
            true => close.clone(),
            false => Bytes::from(format!("{head}\r\n")),
        };
        let ids = envelope.is_some_and(|e| e == "anthropic" || e == "openai");
        Ok(CannedReply {
            keep,
            close,
            body: Bytes::from(body),
            ids,
        })
    }

    /// The reply as sent: `closing`, the connection ends after it (and the
    /// reply says so); `head_only`, it answers a HEAD request.
    pub(crate) fn bytes(&self, closing: bool, head_only: bool) -> Bytes {
        let head = if closing { &self.close } else { &self.keep };
        let body = match head_only {
            true => &[][..],
            false => &self.body[..],
        };
        if !self.ids && body.is_empty() {
            return head.clone();
        }
        let mut out = BytesMut::with_capacity(head.len() + body.len());
        out.extend_from_slice(head);
        out.extend_from_slice(body);
        if self.ids {
            fresh_ids(&mut out);
        }
        out.freeze()
    }
}

/// Gives every [`REQUEST_ID`] in `reply` the same fresh digits.
fn fresh_ids(reply: &mut [u8]) {
    let needle = REQUEST_ID.as_bytes();
    let digits: [u8; 12] = rand::random();
    let hex: Vec<u8> = digits
        .iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect();
    let mut i = 0;
    while i + needle.len() <= reply.len() {
        if &reply[i..i + needle.len()] == needle {
            reply[i + ID_DIGITS..i + needle.len()].copy_from_slice(&hex);
            i += needle.len();
        } else {
            i += 1;
        }
    }
}

/// What a request's first bytes say about its method being HEAD (methods
/// are case-sensitive): `None` while too few have arrived to tell.
pub(crate) fn is_head_request(first: &[u8]) -> Option<bool> {
    const HEAD: &[u8] = b"HEAD ";
    match first.len() >= HEAD.len() {
        true => Some(first.starts_with(HEAD)),
        false if HEAD.starts_with(first) => None,
        false => Some(false),
    }
}

/// A reply's content type, default body and extra headers: a provider's
/// error with an `envelope`, else the status's name as text.
fn reply_parts(
    envelope: Option<&str>,
    status: u16,
    retry_after: Option<Duration>,
) -> (&'static str, Vec<u8>, Vec<String>) {
    match envelope {
        Some(p) => crate::provider::error_reply(p, status, retry_after),
        None => (
            "text/plain; charset=utf-8",
            format!("{status} {}\n", reason(status)).into_bytes(),
            Vec::new(),
        ),
    }
}

/// The reason phrase of a status (what real servers send).
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        205 => "Reset Content",
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

    #[test]
    fn a_head_request_gets_the_head_with_the_bodys_length() {
        let r = CannedReply::build(503, None, Some(b"down".to_vec()), None, &[], false).unwrap();
        let whole = r.bytes(false, false);
        assert!(
            whole.ends_with(b"content-length: 4\r\n\r\ndown"),
            "{whole:?}"
        );
        let head = r.bytes(true, true);
        assert!(
            head.ends_with(b"content-length: 4\r\nconnection: close\r\n\r\n"),
            "{head:?}"
        );
        assert_eq!(is_head_request(b"HEAD / HTTP/1.1\r\n"), Some(true));
        assert_eq!(is_head_request(b"HEADER"), Some(false));
        assert_eq!(is_head_request(b"head / HTTP/1.1\r\n"), Some(false));
        assert_eq!(is_head_request(b"HEA"), None);
        assert_eq!(is_head_request(b"GE"), Some(false));
    }

    #[test]
    fn no_content_and_not_modified_have_no_body_and_1xx_is_no_answer() {
        let r = CannedReply::build(204, None, None, None, &[], false).unwrap();
        assert_eq!(
            &r.bytes(false, false)[..],
            b"HTTP/1.1 204 No Content\r\n\r\n"
        );
        let r = CannedReply::build(205, None, None, None, &[], false).unwrap();
        assert_eq!(
            &r.bytes(false, false)[..],
            b"HTTP/1.1 205 Reset Content\r\ncontent-length: 0\r\n\r\n"
        );
        let e = CannedReply::build(304, Some("openai"), None, None, &[], false).unwrap_err();
        assert!(e.contains("a 304 reply has no body"), "{e}");
        let e = spec("http_status", &[("status", "204"), ("body", "x")]).unwrap_err();
        assert!(e.message.contains("a 204 reply has no body"), "{e}");
        for kind in ["http_status", "respond"] {
            let e = spec(kind, &[("status", "103")]).unwrap_err();
            assert!(
                e.message.contains("103 is an interim status"),
                "{kind}: {e}"
            );
        }
    }
}
