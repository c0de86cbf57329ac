//! Streamed events on the wire: a `text/event-stream` payload split into
//! whole events (each ends at a blank line; CRLF, LF and CR line ends
//! alike, split anywhere across reads), or an NDJSON / JSON Lines one into
//! lines (each a JSON value: Ollama's and other local model servers'
//! streams); the two ways `sse` spoils one — its JSON made invalid at the
//! same length, or half of it — the way it patches one's JSON and changes
//! its type, and the provider's error event in either form.

use super::eventstream::{self, Frame};
use crate::fault::sse::EventPatch;
pub(crate) use crate::protocol::events::{Format, error_event};

/// One event block as it arrived, blank line (or LF) included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) bytes: Vec<u8>,
    /// Whether it carries a field (`data:`, `event:` …) or, in JSON lines,
    /// more than whitespace: comment-only and empty blocks dispatch nothing
    /// to the client and are not counted.
    pub(crate) counts: bool,
}

/// The most of one event held back while it is incomplete: a longer one
/// (an upstream that never ends its event) goes on in pieces, uncounted.
const MAX_EVENT: usize = 1024 * 1024;

/// Splits a payload arriving in pieces into event blocks.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    format: Format,
    cur: Vec<u8>,
    /// Bytes of the current line so far, its end excluded.
    line: usize,
    /// The last byte was a CR: an LF next belongs to the same line end.
    after_cr: bool,
    has_field: bool,
    /// Part of an event too long to hold went on: the rest of it, up to
    /// its blank line (or LF), goes uncounted too. In a binary event
    /// stream: bytes that were no frame came, and the rest goes uncounted
    /// (no frame boundary can be found after them).
    spilled: bool,
    /// In a binary event stream: bytes of a frame too long to hold still
    /// to pass uncounted before the next frame.
    skip: usize,
}

impl Splitter {
    pub(crate) fn new(format: Format) -> Splitter {
        Splitter {
            format,
            ..Splitter::default()
        }
    }

    /// The blocks that `data` completes.
    pub(crate) fn push(&mut self, data: &[u8]) -> Vec<Block> {
        if self.format == Format::AwsEventStream {
            return self.push_frames(data);
        }
        let mut out = Vec::new();
        for &b in data {
            self.cur.push(b);
            let ends = match self.format {
                Format::EventStream => self.event_stream_byte(b),
                Format::JsonLines => self.json_lines_byte(b),
                Format::AwsEventStream => unreachable!("split by push_frames"),
            };
            if ends {
                out.push(self.take(true));
            } else if self.cur.len() >= MAX_EVENT {
                out.push(Block {
                    bytes: std::mem::take(&mut self.cur),
                    counts: false,
                });
                self.spilled = true;
            }
        }
        out
    }

    /// [`Splitter::push`] for a binary event stream: whole frames, each an
    /// event if it is an event frame that parses (CRCs right). A frame
    /// longer than [`MAX_EVENT`] passes on in pieces, uncounted; bytes that
    /// cannot begin a frame, and all after them, pass on uncounted.
    fn push_frames(&mut self, data: &[u8]) -> Vec<Block> {
        if self.spilled {
            return vec![Block {
                bytes: data.to_vec(),
                counts: false,
            }];
        }
        self.cur.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.cur.len());
                let rest = self.cur.split_off(n);
                out.push(Block {
                    bytes: std::mem::replace(&mut self.cur, rest),
                    counts: false,
                });
                self.skip -= n;
                if self.cur.is_empty() {
                    return out;
                }
            }
            match eventstream::frame_len(&self.cur) {
                Ok(Some(total)) if total > MAX_EVENT => self.skip = total,
                Ok(Some(total)) if self.cur.len() >= total => {
                    let rest = self.cur.split_off(total);
                    let bytes = std::mem::replace(&mut self.cur, rest);
                    let counts = Frame::parse(&bytes).is_some_and(|f| f.is_event());
                    out.push(Block { bytes, counts });
                }
                Ok(_) => return out,
                Err(()) => {
                    self.spilled = true;
                    out.push(Block {
                        bytes: std::mem::take(&mut self.cur),
                        counts: false,
                    });
                    return out;
                }
            }
        }
    }

    /// One more byte of an event stream: whether it ends the event (the
    /// end of a blank line).
    fn event_stream_byte(&mut self, b: u8) -> bool {
        if std::mem::replace(&mut self.after_cr, false) && b == b'\n' {
            return false;
        }
        match b {
            b'\r' | b'\n' => {
                self.after_cr = b == b'\r';
                std::mem::replace(&mut self.line, 0) == 0
            }
            _ => {
                if self.line == 0 && b != b':' {
                    self.has_field = true;
                }
                self.line += 1;
                false
            }
        }
    }

    /// One more byte of JSON lines: whether it ends the line; one with
    /// more than whitespace counts.
    fn json_lines_byte(&mut self, b: u8) -> bool {
        if b == b'\n' {
            return true;
        }
        if !b.is_ascii_whitespace() {
            self.has_field = true;
        }
        false
    }

    /// What is held, as a block that counts if `whole` and it has a field
    /// and no part of it went on uncounted; the flags start over.
    fn take(&mut self, whole: bool) -> Block {
        let field = std::mem::replace(&mut self.has_field, false);
        let spilled = std::mem::replace(&mut self.spilled, false);
        Block {
            bytes: std::mem::take(&mut self.cur),
            counts: whole && field && !spilled,
        }
    }

    /// What is held at the body's end. In JSON lines a last line without
    /// its LF is a whole line (it counts if not blank); in an event stream
    /// it is an unfinished event, which a client drops (it does not).
    pub(crate) fn finish(&mut self) -> Block {
        // An unfinished frame is no event.
        self.take(self.format == Format::JsonLines)
    }
}

/// The block with its JSON (its first `data:` value, or the line) made
/// invalid, at the same length (so that any framing stays right): the
/// value cut to its first half and padded with spaces.
pub(crate) fn spoil(block: &[u8], format: Format) -> Vec<u8> {
    let span = match format {
        // The frame's JSON spoiled (a Bedrock chunk's: the model's event
        // inside it), its CRCs right.
        Format::AwsEventStream => {
            return eventstream::respoil(block, |payload| {
                if let Some((start, end)) = json_span(payload) {
                    spoil_value(&mut payload[start..end]);
                }
            });
        }
        Format::JsonLines => json_span(block),
        Format::EventStream => lines(block)
            .into_iter()
            .find(|(s, e, _)| block[*s..*e].starts_with(b"data:"))
            .map(|(start, end, _)| {
                let v = start + 5;
                (v + usize::from(block.get(v) == Some(&b' ')), end)
            }),
    };
    let mut out = block.to_vec();
    if let Some((v, end)) = span {
        spoil_value(&mut out[v..end]);
    }
    out
}

/// A JSON value made invalid in place: cut to its first half, padded with
/// spaces.
fn spoil_value(value: &mut [u8]) {
    let keep = value.len() / 2;
    for b in &mut value[keep..] {
        *b = b' ';
    }
    // A half that is still JSON (a number's digits) starts wrong.
    if serde_json::from_slice::<serde_json::Value>(value).is_ok() {
        value[0] = b'{';
    }
}

/// The block with `p` applied, or `None` when it does not apply: another
/// event type (`message` when it names none), data that is not JSON
/// (`[DONE]`) or a patch that fails, or nothing that would change. The
/// data goes as one `data:` line where the first was, a new type as one
/// `event:` line where the first was (or first, when there was none); the
/// other fields (`id:` …), comments and line ends stay as they came.
pub(crate) fn patch(block: &[u8], p: &EventPatch, format: Format) -> Option<Vec<u8>> {
    match format {
        Format::JsonLines => return patch_line(block, p),
        Format::AwsEventStream => return patch_frame(block, p),
        Format::EventStream => {}
    }
    let lines: Vec<(&[u8], &[u8])> = lines(block)
        .into_iter()
        .map(|(start, end, stop)| (&block[start..end], &block[end..stop]))
        .collect();
    let value = field_value;
    // The last `event` names it; an empty one, or none, is `message`.
    let event = lines
        .iter()
        .filter_map(|(l, _)| value(l, b"event"))
        .next_back()
        .filter(|e| !e.is_empty())
        .map_or("message".to_string(), |e| {
            String::from_utf8_lossy(&e).into_owned()
        });
    // Without data it is no event (a client dispatches none): a comment,
    // a retry.
    let data: Vec<Vec<u8>> = lines
        .iter()
        .filter_map(|(l, _)| value(l, b"data"))
        .collect();
    if data.is_empty() {
        return None;
    }
    let (data, rename) = changes(p, &event, || {
        serde_json::from_slice(&data.join(&b'\n')).ok()
    })?;
    let mut out = Vec::with_capacity(block.len() + 64);
    let (mut data_written, mut event_written) = (data.is_none(), rename.is_none());
    // A new `event:` line for an event that had none goes before its first
    // field, after any empty line first (the LF of the CRLF that ended the
    // event before: a line there would end this one) and after a BOM (only
    // the stream's first bytes may carry one).
    let insert_at = match rename {
        Some(_) if !lines.iter().any(|(l, _)| value(l, b"event").is_some()) => {
            lines.iter().position(|(l, _)| !l.is_empty())
        }
        _ => None,
    };
    for (i, (l, end)) in lines.iter().enumerate() {
        let mut l: &[u8] = l;
        if let (Some(name), true) = (rename, insert_at == Some(i)) {
            if let Some(rest) = l.strip_prefix(b"\xEF\xBB\xBF") {
                out.extend_from_slice(b"\xEF\xBB\xBF");
                l = rest;
            }
            out.extend_from_slice(format!("event: {name}").as_bytes());
            out.extend_from_slice(if end.is_empty() { b"\n" } else { end });
            event_written = true;
        }
        if let (Some(now), Some(_)) = (&data, value(l, b"data")) {
            if std::mem::replace(&mut data_written, true) {
                continue;
            }
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(now.to_string().as_bytes());
        } else if let (Some(name), Some(_)) = (rename, value(l, b"event")) {
            if std::mem::replace(&mut event_written, true) {
                continue;
            }
            out.extend_from_slice(format!("event: {name}").as_bytes());
        } else {
            out.extend_from_slice(l);
        }
        out.extend_from_slice(end);
    }
    Some(out)
}

/// The value of `field` on line `l`, if that is its name, as the
/// event-stream format reads a field line: the name up to the first colon
/// (the whole line without one), the value after it and one space.
fn field_value(l: &[u8], field: &[u8]) -> Option<Vec<u8>> {
    let l = l.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(l);
    let v = match l.iter().position(|b| *b == b':') {
        Some(i) if &l[..i] == field => &l[i + 1..],
        None if l == field => &[][..],
        _ => return None,
    };
    Some(v.strip_prefix(b" ").unwrap_or(v).to_vec())
}

/// [`patch`] for a JSON line: its JSON patched, the whitespace around it
/// kept. A line has no type: it is a `message` to `event`, and `set_event`
/// leaves it as it is.
fn patch_line(block: &[u8], p: &EventPatch) -> Option<Vec<u8>> {
    let (start, end) = json_span(block)?;
    let (now, _) = changes(p, "message", || {
        serde_json::from_slice(&block[start..end]).ok()
    })?;
    let now = now?;
    let mut out = block[..start].to_vec();
    out.extend_from_slice(now.to_string().as_bytes());
    out.extend_from_slice(&block[end..]);
    Some(out)
}

/// [`patch`] for a binary event-stream frame: its type is its
/// `:event-type` (what `event` matches and `set_event` changes); the JSON
/// patched is a Bedrock chunk's own event (base64 in `bytes`), or the
/// payload; lengths and CRCs are made right.
fn patch_frame(block: &[u8], p: &EventPatch) -> Option<Vec<u8>> {
    let mut frame = Frame::parse(block).filter(Frame::is_event)?;
    let event = frame.event_type().unwrap_or("message").to_string();
    let mut wrapped = false;
    let (data, rename) = changes(p, &event, || {
        frame.json().map(|(v, w)| {
            wrapped = w;
            v
        })
    })?;
    if let Some(now) = data {
        frame.set_json(&now, wrapped);
    }
    if let Some(name) = rename {
        frame.set_event_type(name);
    }
    Some(frame.encode())
}

/// What `p` makes of an event of type `event` whose JSON `json` reads:
/// its new JSON and its new type (each `None` when it stays), or `None`
/// when `p` does not apply (another type, a patch that fails, which keeps
/// the type too) or changes nothing. Objects and arrays only: a scalar
/// (`"ping"`, `42`) is not a message to patch.
fn changes<'p>(
    p: &'p EventPatch,
    event: &str,
    json: impl FnOnce() -> Option<serde_json::Value>,
) -> Option<(Option<serde_json::Value>, Option<&'p str>)> {
    if !p.applies_to(event) {
        return None;
    }
    let data = match &p.patch {
        Some(edit) => {
            let was = json().filter(|v| v.is_object() || v.is_array())?;
            let now = edit.apply(&was)?;
            (now != was).then_some(now)
        }
        None => None,
    };
    let rename = p.set_event.as_deref().filter(|name| *name != event);
    (data.is_some() || rename.is_some()).then_some((data, rename))
}

/// Where a JSON line's text is: from its first byte that is not
/// whitespace to its last.
fn json_span(block: &[u8]) -> Option<(usize, usize)> {
    let start = block.iter().position(|b| !b.is_ascii_whitespace())?;
    let end = block.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
    Some((start, end))
}

/// A block's lines: where each starts, where its text ends, and where
/// its line end (CRLF, LF or CR) does.
fn lines(block: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let end = block[i..]
            .iter()
            .position(|b| *b == b'\n' || *b == b'\r')
            .map_or(block.len(), |p| i + p);
        let stop = match (block.get(end), block.get(end + 1)) {
            (Some(b'\r'), Some(b'\n')) => end + 2,
            (Some(_), _) => end + 1,
            (None, _) => end,
        };
        out.push((i, end, stop));
        i = stop;
    }
    out
}

/// The first half of a block: an event cut off in the middle.
pub(crate) fn half(block: &[u8]) -> &[u8] {
    &block[..(block.len() / 2).max(1).min(block.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::patch`] on an event stream.
    fn patch(block: &[u8], p: &EventPatch) -> Option<Vec<u8>> {
        super::patch(block, p, Format::EventStream)
    }

    fn spoil(block: &[u8]) -> Vec<u8> {
        super::spoil(block, Format::EventStream)
    }

    /// AWS's binary frames split across reads, counted when they are
    /// event frames that check out; bytes that are no frame, and all after
    /// them, pass uncounted; an unfinished frame at the end is no event.
    #[test]
    fn aws_frames_are_events_too() {
        let frame = |json: &str| Frame::event("chunk", json.as_bytes()).encode();
        let a = frame(r#"{"n":1}"#);
        let b =
            eventstream::Frame::exception("throttlingException", &serde_json::json!({})).encode();
        let mut wire = a.clone();
        wire.extend_from_slice(&b);
        let mut split = Splitter::new(Format::AwsEventStream);
        let mut got = Vec::new();
        for piece in wire.chunks(7) {
            got.extend(split.push(piece));
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].bytes, a);
        // An exception frame does not count: it is not an event.
        assert_eq!((got[0].counts, got[1].counts), (true, false));
        assert!(split.finish().bytes.is_empty());
        let mut split = Splitter::new(Format::AwsEventStream);
        assert!(split.push(&a[..10]).is_empty());
        assert!(!split.finish().counts);
        // A frame too long to hold passes in pieces, uncounted; the next
        // one counts.
        let big = Frame::event("chunk", &vec![b' '; MAX_EVENT]).encode();
        let mut split = Splitter::new(Format::AwsEventStream);
        let mut got = Vec::new();
        for piece in big.chunks(64 << 10).chain([&a[..]]) {
            got.extend(split.push(piece));
        }
        let passed: usize = got
            .iter()
            .filter(|b| !b.counts)
            .map(|b| b.bytes.len())
            .sum();
        assert_eq!(passed, big.len());
        assert_eq!(got.last().map(|b| (&b.bytes, b.counts)), Some((&a, true)));
        let mut split = Splitter::new(Format::AwsEventStream);
        let junk = split.push(b"data: not a frame\n\n");
        assert_eq!(junk.len(), 1);
        assert!(!junk[0].counts);
        assert!(!split.push(&a).iter().any(|b| b.counts));
    }

    /// JSON lines: split at LF alone, blank lines not counted, patched and
    /// spoiled in the JSON, the whitespace around it kept; a line is a
    /// `message` and has no type to change.
    #[test]
    fn json_lines_are_events_too() {
        let wire = b"{\"a\":1}\r\n\n  \n{\"done\":true,\"done_reason\":\"stop\"}\n{\"b\":";
        for step in 1..wire.len() {
            let mut s = Splitter::new(Format::JsonLines);
            let got: Vec<Block> = wire.chunks(step).flat_map(|c| s.push(c)).collect();
            let counted: Vec<&[u8]> = got
                .iter()
                .filter(|b| b.counts)
                .map(|b| b.bytes.as_slice())
                .collect();
            assert_eq!(
                counted,
                [
                    &b"{\"a\":1}\r\n"[..],
                    b"{\"done\":true,\"done_reason\":\"stop\"}\n"
                ],
                "{step}"
            );
            // The last line, without its LF, is a line all the same.
            let last = s.finish();
            assert!(last.counts && last.bytes == b"{\"b\":", "{step}");
            let all: Vec<u8> = got
                .iter()
                .flat_map(|b| b.bytes.clone())
                .chain(last.bytes)
                .collect();
            assert_eq!(all, wire, "no byte lost or moved");
            assert!(!s.finish().counts, "nothing left");
        }
        // A blank last line does not count; in an event stream, an
        // unfinished event does not either.
        let mut s = Splitter::new(Format::JsonLines);
        s.push(b"{}\n \r");
        assert!(!s.finish().counts);
        let mut s = Splitter::default();
        s.push(b"data: 1\n");
        assert!(!s.finish().counts);
        let spec = |pairs: &[(&str, &str)]| match crate::fault::testing::spec("sse", pairs)
            .unwrap()
            .kind
        {
            crate::fault::FaultKind::Sse(s) => s.patch().unwrap().clone(),
            _ => unreachable!(),
        };
        let ops = r#"[{"op": "test", "path": "/done_reason", "value": "stop"}, {"op": "replace", "path": "/done_reason", "value": "length"}]"#;
        let p = spec(&[("patch_ops", ops)]);
        assert_eq!(
            super::patch(b" {\"done_reason\": \"stop\"}\r\n", &p, Format::JsonLines).unwrap(),
            b" {\"done_reason\":\"length\"}\r\n"
        );
        assert_eq!(
            super::patch(b"{\"done_reason\":null}\n", &p, Format::JsonLines),
            None
        );
        let typed = spec(&[("patch_ops", ops), ("set_event", "x"), ("event", "message")]);
        assert_eq!(
            super::patch(b"{\"done_reason\":\"stop\"}\n", &typed, Format::JsonLines).unwrap(),
            b"{\"done_reason\":\"length\"}\n"
        );
        assert_eq!(
            super::patch(b"{}\n", &spec(&[("set_event", "x")]), Format::JsonLines),
            None
        );
        let bad = super::spoil(b"{\"message\":{\"content\":\"hi\"}}\r\n", Format::JsonLines);
        assert_eq!(bad.len(), 30);
        assert!(bad.ends_with(b"\r\n"));
        assert!(serde_json::from_slice::<serde_json::Value>(&bad).is_err());
        let data = serde_json::json!({"error": "x"});
        assert_eq!(
            error_event(Format::JsonLines, Some("error"), &data),
            b"{\"error\":\"x\"}\n"
        );
        assert_eq!(
            error_event(Format::EventStream, Some("error"), &data),
            b"event: error\ndata: {\"error\":\"x\"}\n\n"
        );
    }

    #[test]
    fn an_events_json_data_is_patched_and_the_rest_kept() {
        let spec = |pairs: &[(&str, &str)]| match crate::fault::testing::spec("sse", pairs)
            .unwrap()
            .kind
        {
            crate::fault::FaultKind::Sse(s) => s.patch().unwrap().clone(),
            _ => unreachable!(),
        };
        let p = spec(&[
            ("patch_json", r#"{"delta": {"stop_reason": "max_tokens"}}"#),
            ("event", "message_delta"),
        ]);
        let block = b"event: message_delta\r\nid: 7\r\ndata: {\"type\":\"message_delta\",\r\ndata: \"delta\":{\"stop_reason\":\"end_turn\"}}\r\n\r\n";
        let out = String::from_utf8(patch(block, &p).unwrap()).unwrap();
        assert_eq!(
            out,
            "event: message_delta\r\nid: 7\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"}}\r\n\r\n"
        );
        // Another type, data that is not JSON, nothing changed: untouched.
        assert_eq!(patch(b"event: ping\ndata: {}\n\n", &p), None);
        assert_eq!(patch(b"event: message_delta\ndata: [DONE]\n\n", &p), None);
        let same = b"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"max_tokens\"}}\n\n";
        assert_eq!(patch(same, &p), None);
        // No `event`: every event, untyped ones (`message`) too; a scalar
        // is not patched.
        let all = spec(&[("patch_json", r#"{"x": 1}"#)]);
        assert_eq!(patch(b"data:{}\n\n", &all).unwrap(), b"data: {\"x\":1}\n\n");
        assert_eq!(patch(b"data: \"ping\"\n\n", &all), None);
        // An empty `event:`, or a bare `event` line, names `message`.
        let msg = spec(&[("patch_json", r#"{"x": 1}"#), ("event", "message")]);
        assert!(patch(b"event:\ndata: {}\n\n", &msg).is_some());
        assert!(patch(b"event: a\nevent\ndata: {}\n\n", &msg).is_some());
        assert!(patch(b"event: a\ndata: {}\n\n", &msg).is_none());
        // A JSON Patch whose test fails leaves the event as it came.
        let ops = spec(&[(
            "patch_ops",
            r#"[{"op": "test", "path": "/c/0/f", "value": "stop"}, {"op": "replace", "path": "/c/0/f", "value": "length"}]"#,
        )]);
        assert_eq!(
            patch(b"data: {\"c\":[{\"f\":\"stop\"}]}\n\n", &ops).unwrap(),
            b"data: {\"c\":[{\"f\":\"length\"}]}\n\n"
        );
        assert_eq!(patch(b"data: {\"c\":[{\"f\":null}]}\n\n", &ops), None);
        assert_eq!(patch(b"data: {\"c\":[]}\n\n", &ops), None);
        // A new type, with a patch: only where the patch applied, the
        // `event:` line where it was, every other line as it came.
        let mut done = ops.clone();
        done.set_event = Some("end.cut".into());
        assert_eq!(
            patch(
                b"id: 1\r\nevent: end\r\nevent: end.ok\r\ndata: {\"c\":[{\"f\":\"stop\"}]}\r\n\r\n",
                &done
            )
            .unwrap(),
            b"id: 1\r\nevent: end.cut\r\ndata: {\"c\":[{\"f\":\"length\"}]}\r\n\r\n"
        );
        assert_eq!(
            patch(b"event: end\ndata: {\"c\":[{\"f\":null}]}\n\n", &done),
            None
        );
        // Alone: a rename; an untyped event gets an `event:` line; one
        // already of that type is left.
        let renamed = spec(&[("set_event", "b"), ("event", "a")]);
        assert_eq!(
            patch(b"event: a\ndata: x\n\n", &renamed).unwrap(),
            b"event: b\ndata: x\n\n"
        );
        assert_eq!(patch(b"event: c\ndata: x\n\n", &renamed), None);
        let typed = spec(&[("set_event", "b")]);
        assert_eq!(
            patch(b"data: x\r\n\r\n", &typed).unwrap(),
            b"event: b\r\ndata: x\r\n\r\n"
        );
        assert_eq!(patch(b"event: b\ndata: x\n\n", &typed), None);
        assert_eq!(patch(b": keep-alive\n\n", &typed), None);
    }

    /// The event types a client reads from `wire`, as the event-stream
    /// format dispatches them (a BOM at the start skipped; an event without
    /// data is none).
    fn types_read(wire: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(wire);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let (mut out, mut kind, mut data) = (Vec::new(), String::new(), false);
        for line in text.replace("\r\n", "\n").replace('\r', "\n").split('\n') {
            match line
                .split_once(':')
                .map(|(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)))
            {
                _ if line.is_empty() => {
                    if data {
                        out.push(if kind.is_empty() {
                            "message".into()
                        } else {
                            kind.clone()
                        });
                    }
                    (kind, data) = (String::new(), false);
                }
                Some(("event", v)) => kind = v.into(),
                Some(("data", _)) => data = true,
                _ => {}
            }
        }
        out
    }

    /// A new type for events that named none, through the splitter as a
    /// stream comes (CRLF, LF, CR, a BOM first): every event read with it.
    #[test]
    fn a_new_type_reaches_the_client_whatever_the_line_ends() {
        let typed = match crate::fault::testing::spec("sse", &[("set_event", "x")])
            .unwrap()
            .kind
        {
            crate::fault::FaultKind::Sse(s) => s.patch().unwrap().clone(),
            _ => unreachable!(),
        };
        for wire in [
            &b"data: 1\r\n\r\ndata: 2\r\n\r\n: keep\r\n\r\ndata: 3\r\n\r\n"[..],
            b"\xEF\xBB\xBFdata: 1\n\ndata: 2\n\ndata: 3\n\n",
            b"data: 1\r\rdata: 2\r\rdata: 3\r\r",
            b"\xEF\xBB\xBFdata: 1\r\n\r\nid: 2\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n",
        ] {
            assert_eq!(types_read(wire), ["message"; 3], "{wire:?}");
            let mut s = Splitter::default();
            let out: Vec<u8> = s
                .push(wire)
                .iter()
                .flat_map(|b| patch(&b.bytes, &typed).unwrap_or_else(|| b.bytes.clone()))
                .chain(s.finish().bytes)
                .collect();
            assert_eq!(
                types_read(&out),
                ["x"; 3],
                "{wire:?} became {:?}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    #[test]
    fn the_rest_of_an_event_too_long_to_hold_is_not_counted() {
        let mut s = Splitter::default();
        let mut long = b"data: ".to_vec();
        long.extend(std::iter::repeat_n(b'x', MAX_EVENT + 10));
        long.extend_from_slice(b"\ndata: {}\n\ndata: 1\n\n");
        let blocks = s.push(&long);
        let counted: Vec<&Block> = blocks.iter().filter(|b| b.counts).collect();
        assert_eq!(counted.len(), 1, "only the event after it");
        assert_eq!(counted[0].bytes, b"data: 1\n\n");
    }

    #[test]
    fn blocks_split_anywhere_with_any_line_ends() {
        let wire = b": ping\n\nevent: a\ndata: {\"x\":1}\n\ndata: 2\r\n\r\ndata: 3\r\rdata: par";
        for step in 1..wire.len() {
            let mut s = Splitter::default();
            let mut got = Vec::new();
            for piece in wire.chunks(step) {
                got.extend(s.push(piece));
            }
            let counted: Vec<&[u8]> = got
                .iter()
                .filter(|b| b.counts)
                .map(|b| b.bytes.as_slice())
                .collect();
            assert_eq!(counted.len(), 3, "step {step}: {got:?}");
            assert_eq!(counted[0], b"event: a\ndata: {\"x\":1}\n\n");
            let all: Vec<u8> = got
                .iter()
                .flat_map(|b| b.bytes.clone())
                .chain(s.finish().bytes)
                .collect();
            assert_eq!(all, wire, "no byte lost or moved");
        }
    }

    #[test]
    fn spoiled_data_is_not_json_and_keeps_its_length() {
        for block in [
            &b"event: delta\ndata: {\"type\":\"content_block_delta\",\"text\":\"hi\"}\n\n"[..],
            b"data: 12345\n\n",
            b"data: [DONE]\n\n",
            b"data:{}\n\n",
        ] {
            let bad = spoil(block);
            assert_eq!(bad.len(), block.len());
            let text = String::from_utf8(bad).unwrap();
            let data = text.lines().find_map(|l| l.strip_prefix("data:")).unwrap();
            assert!(
                serde_json::from_str::<serde_json::Value>(data).is_err(),
                "{data:?}"
            );
        }
        assert_eq!(half(b"data: abcd\n\n"), b"data: ");
        assert!(!half(b"data: x\n\n").ends_with(b"\n\n"));
    }
}
