//! gRPC's side of an answer in the upstream's place: its status codes (by
//! number or canonical name), the HTTP status each corresponds to (the
//! mapping of `google.rpc.Code`), and the "trailers-only" response a gRPC
//! server sends when a call fails before any message: HTTP 200 whose one
//! HEADERS frame carries `grpc-status`, `grpc-message` and, when the
//! server asks the client to wait before retrying, `grpc-retry-pushback-ms`
//! (gRFC A6).

use std::time::Duration;

/// The status codes, by number: (name, the HTTP status of the same
/// meaning, what a server says with it).
const CODES: [(&str, u16, &str); 17] = [
    ("OK", 200, ""),
    ("CANCELLED", 499, "The operation was cancelled."),
    ("UNKNOWN", 500, "Unknown error."),
    (
        "INVALID_ARGUMENT",
        400,
        "Request contains an invalid argument.",
    ),
    (
        "DEADLINE_EXCEEDED",
        504,
        "Deadline expired before operation could complete.",
    ),
    ("NOT_FOUND", 404, "Requested entity was not found."),
    ("ALREADY_EXISTS", 409, "The entity already exists."),
    (
        "PERMISSION_DENIED",
        403,
        "The caller does not have permission.",
    ),
    (
        "RESOURCE_EXHAUSTED",
        429,
        "Resource has been exhausted (e.g. check quota).",
    ),
    ("FAILED_PRECONDITION", 400, "Precondition check failed."),
    ("ABORTED", 409, "The operation was aborted."),
    (
        "OUT_OF_RANGE",
        400,
        "Operation was attempted past the valid range.",
    ),
    ("UNIMPLEMENTED", 501, "Operation is not implemented."),
    ("INTERNAL", 500, "Internal error."),
    ("UNAVAILABLE", 503, "The service is currently unavailable."),
    ("DATA_LOSS", 500, "Unrecoverable data loss or corruption."),
    (
        "UNAUTHENTICATED",
        401,
        "Request had invalid authentication credentials.",
    ),
];

/// What `grpc_status` accepts, for errors.
pub(crate) const CODE_FORM: &str =
    "a gRPC status: a number from 0 to 16 or a name like UNAVAILABLE or RESOURCE_EXHAUSTED";

/// A gRPC status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Code(u8);

impl Code {
    /// `14`, `UNAVAILABLE`, `unavailable` (and `CANCELED`, Go's spelling).
    pub(crate) fn parse(text: &str) -> Result<Code, &'static str> {
        let t = text.trim();
        if let Ok(n) = t.parse::<u8>() {
            return if (n as usize) < CODES.len() {
                Ok(Code(n))
            } else {
                Err(CODE_FORM)
            };
        }
        let upper = t.to_ascii_uppercase().replace(['-', ' '], "_");
        let upper = if upper == "CANCELED" {
            "CANCELLED".to_string()
        } else {
            upper
        };
        CODES
            .iter()
            .position(|(name, ..)| *name == upper)
            .map(|i| Code(i as u8))
            .ok_or(CODE_FORM)
    }

    pub(crate) fn number(self) -> u8 {
        self.0
    }

    pub(crate) fn name(self) -> &'static str {
        CODES[self.0 as usize].0
    }

    /// The HTTP status of the same meaning (what a non-gRPC request gets).
    pub(crate) fn http_status(self) -> u16 {
        CODES[self.0 as usize].1
    }

    /// What a server says with it, when the fault gives no message.
    pub(crate) fn message(self) -> &'static str {
        CODES[self.0 as usize].2
    }
}

/// A failed call's answer: its code, message and retry pushback.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) code: Code,
    pub(crate) message: String,
    pub(crate) pushback: Option<Duration>,
}

impl Answer {
    /// The trailers-only response's headers, beside `:status 200`.
    pub(crate) fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("content-type", "application/grpc".to_string()),
            ("grpc-status", self.code.number().to_string()),
        ];
        if !self.message.is_empty() {
            h.push(("grpc-message", percent_encode(shortened(&self.message))));
        }
        if let Some(p) = self.pushback {
            h.push(("grpc-retry-pushback-ms", p.as_millis().to_string()));
        }
        h
    }
}

/// Whether a request is a gRPC call (its content type, `application/grpc`
/// with or without a `+proto`/`+json` suffix or parameters).
pub(crate) fn is_call(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("content-type") && {
            let v = v.trim().to_ascii_lowercase();
            v == "application/grpc"
                || v.starts_with("application/grpc+")
                || v.starts_with("application/grpc;")
        }
    })
}

/// The name of status code `n` (`UNAVAILABLE` for 14), if it is one.
pub(crate) fn code_name(n: u64) -> Option<&'static str> {
    CODES.get(usize::try_from(n).ok()?).map(|c| c.0)
}

/// How a call ended, as `headers` (its trailers, or a trailers-only
/// answer's head) say: `grpc-status`, and `grpc-message` decoded.
pub(crate) fn ended(headers: &hyper::http::HeaderMap) -> Option<(u32, String)> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some((code, message))
}

/// `grpc-message` as sent: `%XX` decoded (a malformed escape is kept as
/// it is, as the protocol asks of clients), then read as UTF-8.
fn percent_decode(b: &[u8]) -> String {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A message of at most [`MAX_MESSAGE`] bytes (cut at a character): a
/// `body_file`'s whole text would pass clients' metadata limits (8 KiB in
/// grpc's), and the call would fail for that instead.
fn shortened(s: &str) -> &str {
    let mut end = s.len().min(MAX_MESSAGE);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest `grpc-message` sent, before its encoding.
const MAX_MESSAGE: usize = 1024;

/// `grpc-message` is percent-encoded: every byte outside printable ASCII,
/// and `%` itself (the gRPC over HTTP/2 protocol).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_number_and_name() {
        assert_eq!(Code::parse("14").unwrap().name(), "UNAVAILABLE");
        assert_eq!(Code::parse("resource_exhausted").unwrap().number(), 8);
        assert_eq!(Code::parse("Canceled").unwrap().number(), 1);
        assert_eq!(Code::parse("UNAVAILABLE").unwrap().http_status(), 503);
        assert!(Code::parse("17").is_err() && Code::parse("SLOW").is_err());
    }

    #[test]
    fn a_trailers_only_answer() {
        let a = Answer {
            code: Code::parse("RESOURCE_EXHAUSTED").unwrap(),
            message: "quota: 100% used ✓".into(),
            pushback: Some(Duration::from_millis(1500)),
        };
        let h = a.headers();
        assert!(h.contains(&("grpc-status", "8".into())));
        assert!(h.contains(&("grpc-message", "quota: 100%25 used %E2%9C%93".into())));
        assert!(h.contains(&("grpc-retry-pushback-ms", "1500".into())));
        let long = Answer {
            message: "é".repeat(1000),
            ..a
        };
        let m = &long
            .headers()
            .into_iter()
            .find(|(k, _)| *k == "grpc-message")
            .unwrap()
            .1;
        assert_eq!(m.len(), 512 * 6, "1024 bytes, each byte as %XX");
        let mut head = hyper::http::HeaderMap::new();
        for (k, v) in a.headers() {
            head.insert(k, v.parse().unwrap());
        }
        let said = ended(&head).unwrap();
        assert_eq!(
            said,
            (8, "quota: 100% used ✓".to_string()),
            "decoded as sent"
        );
        head.insert("grpc-message", "50%+ %zz".parse().unwrap());
        assert_eq!(ended(&head).unwrap().1, "50%+ %zz", "bad escapes kept");
        let call = |ct: &str| is_call(&[("Content-Type".into(), ct.into())]);
        assert!(call("application/grpc") && call("application/grpc+proto"));
        assert!(!call("application/grpc-web") && !call("application/json"));
    }
}
