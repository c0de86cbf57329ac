//! What one mocked API answers, before any socket: a status, headers and
//! a payload with its moments — sent whole once ready (a JSON answer), or
//! a stream whose events each leave when ready (server-sent events). The
//! per-API modules build these; [`super::server`] sends them.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use serde_json::Value;

/// One answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(Cow<'static, str>, String)>,
    pub(crate) payload: Payload,
}

/// An answer's body and when it leaves (offsets from the request's
/// arrival).
#[derive(Debug)]
pub(crate) enum Payload {
    /// Sent whole, head and all, `at` once ready.
    Whole { at: Duration, bytes: Bytes },
    /// The head at once; each event at its moment.
    Stream(Vec<(Duration, Bytes)>),
    /// A recorded answer: its head at `head_at`, its chunks at theirs,
    /// with a length when it had one.
    Recorded {
        head_at: Duration,
        chunks: Vec<(Duration, Bytes)>,
        length: Option<u64>,
    },
}

impl Reply {
    /// A JSON answer, ready `at`.
    pub(crate) fn json(status: u16, body: &Value, at: Duration) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            payload: Payload::Whole {
                at,
                bytes: Bytes::from(body.to_string()),
            },
        }
    }

    /// A stream of server-sent events.
    pub(crate) fn events(events: Vec<(Duration, Bytes)>) -> Reply {
        Reply {
            status: 200,
            headers: vec![
                (
                    "content-type".into(),
                    "text/event-stream; charset=utf-8".into(),
                ),
                ("cache-control".into(), "no-cache".into()),
            ],
            payload: Payload::Stream(events),
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The value of header `name` (the first), if set.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every byte of the body, in order (for tests).
    #[cfg(test)]
    pub(crate) fn body(&self) -> Vec<u8> {
        match &self.payload {
            Payload::Whole { bytes, .. } => bytes.to_vec(),
            Payload::Stream(events) | Payload::Recorded { chunks: events, .. } => {
                events.iter().flat_map(|(_, b)| b.to_vec()).collect()
            }
        }
    }
}

/// One server-sent event: its `event:` line (if named) and its data.
pub(crate) fn sse(event: Option<&str>, data: &Value) -> Bytes {
    match event {
        Some(e) => Bytes::from(format!("event: {e}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

/// A fresh identifier: `prefix` then `n` characters of `alphabet`.
pub(crate) fn id(prefix: &str, n: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    let mut s = String::with_capacity(prefix.len() + n);
    s.push_str(prefix);
    s.extend((0..n).map(|_| alphabet[rng.random_range(0..alphabet.len())] as char));
    s
}

pub(crate) const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub(crate) const HEX: &[u8] = b"0123456789abcdef";

/// Seconds since the Unix epoch (the `created` of OpenAI's answers).
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A moment `after` from now, as RFC 3339 (a rate-limit reset).
pub(crate) fn rfc3339_in(after: Duration) -> String {
    let t = time::OffsetDateTime::now_utc() + after;
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A request body read as a JSON object, or why not (as the message of
/// the provider's own 400).
pub(crate) fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("the request body must be a JSON object".into()),
        Err(e) => Err(format!("the request body is not valid JSON: {e}")),
    }
}

/// A positive integer field, if present: `Err` with the field's name when
/// it is not one.
pub(crate) fn positive(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<u64>, ()> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(()),
        },
    }
}

/// Whether the client asked for a stream (`"stream": true`).
pub(crate) fn streams(o: &serde_json::Map<String, Value>) -> bool {
    o.get("stream").and_then(Value::as_bool).unwrap_or(false)
}
