//! `respond`: the upstream is never contacted. The client gets canned bytes —
//! `data`, the contents of `file`, or an HTTP reply built from `status`,
//! `body`, `retry_after` and `envelope` (a provider's error, as
//! `http_status` shapes it, with no upstream at all) — and then the
//! connection is closed cleanly,
//! reset, or left open and silent (`then = "close" | "reset" | "stall"`).
//!
//! The relay feeds [`Respond::script`] into the downstream pipeline in place
//! of an upstream socket, so other downstream faults (latency, slicer, …)
//! still apply to the canned reply.

use std::time::Duration;

use bytes::Bytes;

use super::http_reply::{self, CannedReply};
use super::http_status::{Given, lines, reply_headers};
use super::{ItemKind, Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    Close,
    Reset,
    Stall,
}

/// What the client gets.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    /// Bytes as given (`data`, `file`).
    Bytes(Bytes),
    /// An HTTP reply (`status`): a HEAD request gets its head alone.
    Http(CannedReply),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Respond {
    reply: Reply,
    then: Then,
    /// Wait for the client's first bytes (its request) before replying.
    wait_request: bool,
    /// How the data was given, for display.
    given: Given,
}

impl Kind for Respond {
    const INFO: KindInfo = KindInfo {
        name: "respond",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: false,
        stages: false,
        about: "the upstream is never contacted; the client gets canned bytes",
        params: &[
            ("data", "a string", "the bytes to send"),
            (
                "file",
                "a path (regular file, at most 1MiB)",
                "…or a file's bytes",
            ),
            (
                "status",
                "an HTTP status 200-599",
                "…or an HTTP reply with this status",
            ),
            ("body", "a string", "the HTTP reply's body"),
            (
                "retry_after",
                "a duration",
                "a Retry-After header (whole seconds, rounded up; an envelope also gives the exact value)",
            ),
            (
                "envelope",
                "anthropic, openai, gemini or bedrock",
                "the HTTP reply as that provider's error",
            ),
            (
                "headers",
                "\"Name: value\" strings, or a table (headers.Name in flags)",
                "more HTTP headers",
            ),
            (
                "then",
                "close (default), reset or stall",
                "after the bytes: FIN, RST or silence",
            ),
            (
                "wait_request",
                "true (default) or false",
                "wait for the client's first bytes",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let data = f.string("data")?;
        let file = f.file("file")?;
        let status = http_reply::status(f)?;
        let body = f.string("body")?;
        let retry_after = f.duration("retry_after")?;
        let headers = reply_headers(f)?;
        let extra = lines(&headers);
        let envelope = f.choice("envelope", crate::provider::ENVELOPES)?;
        let given = [data.is_some(), file.is_some(), status.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(f.table_error(
                "give exactly one of data (the bytes to send), file (a path) or status (an HTTP status code)",
            ));
        }
        if status.is_none()
            && (body.is_some()
                || retry_after.is_some()
                || !headers.is_empty()
                || envelope.is_some())
        {
            return Err(f.table_error("body, retry_after, envelope and headers go with status"));
        }
        let mut given = Given {
            headers,
            ..Given::default()
        };
        let reply = if let Some(d) = data {
            given.note("data", Some(d.clone()));
            Reply::Bytes(Bytes::from(d.into_bytes()))
        } else if let Some((bytes, shown)) = file {
            given.note("file", Some(shown));
            Reply::Bytes(Bytes::from(bytes))
        } else {
            let status = status.expect("checked above");
            given.note("status", Some(status.to_string()));
            given.note("envelope", envelope.map(str::to_string));
            given.note("body", body.clone());
            given.note(
                "retry_after",
                retry_after.map(crate::units::format_duration),
            );
            let body = body.map(String::into_bytes);
            let reply = CannedReply::build(status, envelope, body, retry_after, &extra, true)
                .map_err(|e| f.table_error(&e))?;
            Reply::Http(reply)
        };
        let then = match f.choice("then", &["close", "reset", "stall"])? {
            Some("reset") => Then::Reset,
            Some("stall") => Then::Stall,
            _ => Then::Close,
        };
        let wait_request = f.boolean("wait_request")?.unwrap_or(true);
        Ok(Respond {
            reply,
            then,
            wait_request,
            given,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let then = match self.then {
            Then::Close => "close",
            Then::Reset => "reset",
            Then::Stall => "stall",
        };
        let mut p = self.given.plain.clone();
        p.push(("then", then.into()));
        p.push(("wait_request", self.wait_request.to_string()));
        p
    }

    fn named_params(&self) -> Vec<(&'static str, String, String)> {
        self.given.named_headers()
    }
}

impl Respond {
    /// What the client receives, in order; `stall` ends the script without
    /// an end, so the pipeline stays open and silent. `head_only`: the
    /// request was a HEAD.
    pub(crate) fn script(&self, head_only: bool) -> Vec<ItemKind> {
        let data = match &self.reply {
            Reply::Bytes(b) => b.clone(),
            Reply::Http(r) => r.bytes(true, head_only),
        };
        let mut items = vec![ItemKind::Data(data)];
        match self.then {
            Then::Close => items.push(ItemKind::Close),
            Then::Reset => items.push(ItemKind::Reset),
            Then::Stall => {}
        }
        items
    }

    /// Whether to wait for the client's first bytes (its request) first.
    pub(crate) fn waits_for_request(&self) -> bool {
        self.wait_request
    }

    /// How long to wait for a request before replying anyway.
    pub(crate) const REQUEST_WAIT: Duration = Duration::from_secs(10);
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;

    fn reply_text(r: &Respond, head_only: bool) -> String {
        match r.script(head_only).first() {
            Some(ItemKind::Data(d)) => String::from_utf8(d.to_vec()).unwrap(),
            other => panic!("no data first: {other:?}"),
        }
    }

    fn respond(pairs: &[(&str, &str)]) -> Result<Respond, ProfileError> {
        spec("respond", pairs).map(|s| match s.kind {
            FaultKind::Respond(r) => r,
            _ => unreachable!(),
        })
    }

    #[test]
    fn builds_an_http_reply() {
        let r = respond(&[("status", "429"), ("retry_after", "5s")]).unwrap();
        let text = reply_text(&r, false);
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nretry-after: 5\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n429 Too Many Requests\n"), "{text}");
        assert_eq!(r.script(false).last(), Some(&ItemKind::Close));
    }

    /// Offline (no upstream to reach), an SDK still gets its provider's
    /// error: the envelope's body and headers, in a reply that closes.
    #[test]
    fn an_envelope_needs_no_upstream() {
        let r = respond(&[
            ("status", "529"),
            ("envelope", "anthropic"),
            ("retry_after", "1500ms"),
        ])
        .unwrap();
        let text = reply_text(&r, false);
        assert!(
            text.starts_with("HTTP/1.1 529 Site is overloaded\r\n"),
            "{text}"
        );
        assert!(
            text.contains("content-type: application/json\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nretry-after: 2\r\n"),
            "rounded up: {text}"
        );
        assert!(text.contains("\r\nretry-after-ms: 1500\r\n"), "{text}");
        let body: serde_json::Value =
            serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["type"], "overloaded_error");
        assert!(respond(&[("data", "x"), ("envelope", "openai")]).is_err());
    }

    #[test]
    fn exactly_one_source() {
        assert!(respond(&[]).is_err());
        assert!(respond(&[("data", "x"), ("status", "503")]).is_err());
        assert!(respond(&[("data", "x"), ("body", "y")]).is_err());
        let r = respond(&[("data", "hello"), ("then", "stall")]).unwrap();
        assert_eq!(
            r.script(false),
            vec![ItemKind::Data(Bytes::from_static(b"hello"))]
        );
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = respond(&[("file", "/nonexistent/reply.bin")]).unwrap_err();
        assert!(
            e.message
                .contains("cannot read file /nonexistent/reply.bin"),
            "{e}"
        );
    }
}
