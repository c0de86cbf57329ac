//! AWS's binary event stream (`application/vnd.amazon.eventstream`), in
//! which Amazon Bedrock streams answers: frames of a prelude (total and
//! header lengths, CRC-32 of both), typed headers (`:message-type`,
//! `:event-type`, `:exception-type` …), a payload and a CRC-32 of all
//! before it. What `sse` needs of it: where each frame ends, a frame with
//! its payload or event type changed (CRCs made right again, so that the
//! client's SDK reads the change and not a checksum error), and Bedrock's
//! own exception frame. A Bedrock `chunk` carries the model provider's
//! event as base64 JSON in `{"bytes": …}`: patches act on that JSON.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

/// Prelude (total length, header length, prelude CRC) and message CRC.
const PRELUDE: usize = 12;
const CRC: usize = 4;
/// Header value type tags (the stream's wire format).
const TYPE_STRING: u8 = 7;
const TYPE_BYTES: u8 = 6;

/// A frame's length from its prelude, once its 12 bytes have come: its
/// CRC right, and room for the prelude and the message CRC. `Err(())`:
/// these bytes are no frame (the stream is not what its content type
/// says), and nothing after them can be split.
pub(crate) fn frame_len(head: &[u8]) -> Result<Option<usize>, ()> {
    let Some(p) = head.get(..PRELUDE) else {
        return Ok(None);
    };
    let total = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize;
    let crc = u32::from_be_bytes([p[8], p[9], p[10], p[11]]);
    if crc32(&p[..8]) != crc || total < PRELUDE + CRC {
        return Err(());
    }
    Ok(Some(total))
}

/// The most bytes a header's string value holds (its length is a u16).
pub(crate) const MAX_HEADER_VALUE: usize = u16::MAX as usize;

/// One header: its name, type tag and raw value bytes (length included
/// for strings and byte arrays, as on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    name: Vec<u8>,
    kind: u8,
    value: Vec<u8>,
}

impl Header {
    /// A string header; a value longer than a header holds is cut to
    /// [`MAX_HEADER_VALUE`] bytes (`sse` refuses a longer `set_event`).
    fn string(name: &str, value: &str) -> Header {
        let value = &value.as_bytes()[..value.len().min(MAX_HEADER_VALUE)];
        let mut v = (value.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(value);
        Header {
            name: name.as_bytes().to_vec(),
            kind: TYPE_STRING,
            value: v,
        }
    }

    /// A string header's text.
    fn text(&self) -> Option<&str> {
        (self.kind == TYPE_STRING)
            .then(|| std::str::from_utf8(self.value.get(2..)?).ok())
            .flatten()
    }
}

/// A frame taken apart. Only a frame whose lengths and CRCs are right is:
/// anything else passes as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    headers: Vec<Header>,
    pub(crate) payload: Vec<u8>,
}

/// Bytes each header value type takes after its tag (`None`: a length
/// prefix of 2 bytes says).
fn fixed_len(kind: u8) -> Option<Option<usize>> {
    Some(match kind {
        0 | 1 => Some(0),
        2 => Some(1),
        3 => Some(2),
        4 => Some(4),
        5 | 8 => Some(8),
        9 => Some(16),
        TYPE_BYTES | TYPE_STRING => None,
        _ => return None,
    })
}

impl Frame {
    /// A whole frame, checked.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Frame> {
        let total = frame_len(bytes).ok()??;
        if bytes.len() != total {
            return None;
        }
        let header_len = u32::from_be_bytes(bytes[4..8].try_into().ok()?) as usize;
        let prelude_crc = u32::from_be_bytes(bytes[8..12].try_into().ok()?);
        let end = total - CRC;
        let message_crc = u32::from_be_bytes(bytes[end..].try_into().ok()?);
        if crc32(&bytes[..8]) != prelude_crc
            || crc32(&bytes[..end]) != message_crc
            || PRELUDE + header_len > end
        {
            return None;
        }
        let mut h = &bytes[PRELUDE..PRELUDE + header_len];
        let mut headers = Vec::new();
        while let Some((&n, rest)) = h.split_first() {
            let name = rest.get(..n as usize)?.to_vec();
            let (&kind, rest) = rest.get(n as usize..)?.split_first()?;
            let len = match fixed_len(kind)? {
                Some(len) => len,
                None => 2 + u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize,
            };
            headers.push(Header {
                name,
                kind,
                value: rest.get(..len)?.to_vec(),
            });
            h = &rest[len..];
        }
        Some(Frame {
            headers,
            payload: bytes[PRELUDE + header_len..end].to_vec(),
        })
    }

    /// The frame on the wire, lengths and CRCs computed.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut headers = Vec::new();
        for h in &self.headers {
            headers.push(h.name.len() as u8);
            headers.extend_from_slice(&h.name);
            headers.push(h.kind);
            headers.extend_from_slice(&h.value);
        }
        let total = PRELUDE + headers.len() + self.payload.len() + CRC;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32(&out).to_be_bytes());
        out.extend_from_slice(&headers);
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(&crc32(&out).to_be_bytes());
        out
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name == name.as_bytes())
            .and_then(Header::text)
    }

    /// `:message-type` `event` (or none said): not an exception or error.
    pub(crate) fn is_event(&self) -> bool {
        self.header(":message-type").is_none_or(|t| t == "event")
    }

    /// The `:event-type` (Bedrock: `chunk`, or the Converse API's
    /// `contentBlockDelta`, `messageStop` …).
    pub(crate) fn event_type(&self) -> Option<&str> {
        self.header(":event-type")
    }

    /// The same frame with another `:event-type` (added if it had none).
    pub(crate) fn set_event_type(&mut self, name: &str) {
        let new = Header::string(":event-type", name);
        match self.headers.iter_mut().find(|h| h.name == b":event-type") {
            Some(h) => *h = new,
            None => self.headers.push(new),
        }
    }

    /// The JSON the event carries: a Bedrock `chunk`'s decoded `bytes`
    /// (the model provider's own event), else the payload itself; and
    /// whether it was wrapped.
    pub(crate) fn json(&self) -> Option<(serde_json::Value, bool)> {
        let payload: serde_json::Value = serde_json::from_slice(&self.payload).ok()?;
        if let Some(inner) = payload.get("bytes").and_then(|b| b.as_str()) {
            let raw = BASE64.decode(inner).ok()?;
            return Some((serde_json::from_slice(&raw).ok()?, true));
        }
        Some((payload, false))
    }

    /// A Bedrock `chunk`'s event as its bytes (decoded from base64), if
    /// this frame is one.
    pub(crate) fn wrapped_bytes(&self) -> Option<Vec<u8>> {
        let payload: serde_json::Value = serde_json::from_slice(&self.payload).ok()?;
        BASE64.decode(payload.get("bytes")?.as_str()?).ok()
    }

    /// The chunk carrying `event` as its bytes, its other fields kept.
    pub(crate) fn set_wrapped_bytes(&mut self, event: &[u8]) {
        let Ok(mut payload) = serde_json::from_slice::<serde_json::Value>(&self.payload) else {
            return;
        };
        if let Some(obj) = payload.as_object_mut() {
            obj.insert("bytes".into(), BASE64.encode(event).into());
            self.payload = payload.to_string().into_bytes();
        }
    }

    /// The frame carrying `json` where [`Frame::json`] found its JSON (a
    /// wrapped event's other fields, such as Bedrock's `p` padding, kept).
    pub(crate) fn set_json(&mut self, json: &serde_json::Value, wrapped: bool) {
        match wrapped {
            true => self.set_wrapped_bytes(json.to_string().as_bytes()),
            false => self.payload = json.to_string().into_bytes(),
        }
    }

    /// An event frame of this type carrying `payload`.
    #[cfg(test)]
    pub(crate) fn event(event_type: &str, payload: &[u8]) -> Frame {
        Frame {
            headers: vec![
                Header::string(":event-type", event_type),
                Header::string(":content-type", "application/json"),
                Header::string(":message-type", "event"),
            ],
            payload: payload.to_vec(),
        }
    }

    /// Bedrock's exception frame: `:exception-type` names it (the SDK
    /// raises it by that name) and the payload says why.
    pub(crate) fn exception(kind: &str, payload: &serde_json::Value) -> Frame {
        Frame {
            headers: vec![
                Header::string(":exception-type", kind),
                Header::string(":content-type", "application/json"),
                Header::string(":message-type", "exception"),
            ],
            payload: payload.to_string().into_bytes(),
        }
    }
}

/// A frame whose JSON is spoiled at the same length (`spoil` makes the
/// bytes), CRCs made right: the SDK finds bad JSON, not a bad checksum.
/// A Bedrock `chunk`'s JSON is the model's event inside it (the envelope
/// stays valid, as Bedrock's always is: botocore would otherwise yield an
/// empty chunk, which Anthropic's SDK skips without a word); another
/// frame's is its payload. A frame that does not parse is returned as it
/// came.
pub(crate) fn respoil(block: &[u8], spoil: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let Some(mut frame) = Frame::parse(block) else {
        return block.to_vec();
    };
    match frame.wrapped_bytes() {
        Some(mut event) => {
            spoil(&mut event);
            frame.set_wrapped_bytes(&event);
        }
        None => spoil(&mut frame.payload),
    }
    frame.encode()
}

/// CRC-32 (IEEE), as the event stream's checksums are.
fn crc32(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(inner: &serde_json::Value) -> Frame {
        let payload = serde_json::json!({"bytes": BASE64.encode(inner.to_string()), "p": "abcd"});
        Frame::event("chunk", payload.to_string().as_bytes())
    }

    #[test]
    fn a_frame_encodes_and_parses_back() {
        let f = chunk(&serde_json::json!({"type": "message_stop"}));
        let wire = f.encode();
        assert_eq!(frame_len(&wire), Ok(Some(wire.len())));
        assert_eq!(Frame::parse(&wire), Some(f.clone()));
        assert_eq!(f.event_type(), Some("chunk"));
        assert!(f.is_event());
        assert_eq!(
            f.json(),
            Some((serde_json::json!({"type": "message_stop"}), true))
        );
    }

    /// The known frame from AWS's event stream documentation (no headers,
    /// payload `{'foo':'bar'}`), byte for byte.
    #[test]
    fn the_documented_frame_is_read_and_made_alike() {
        let wire: &[u8] = &[
            0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xFD, 0x52, 0x8C, 0x5A, 0x7B, 0x27,
            0x66, 0x6F, 0x6F, 0x27, 0x3A, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7D, 0xC3, 0x65, 0x39,
            0x36,
        ];
        let f = Frame::parse(wire).expect("parses");
        assert_eq!(f.payload, b"{'foo':'bar'}");
        assert_eq!(f.encode(), wire);
    }

    #[test]
    fn a_bad_checksum_or_length_is_no_frame() {
        let mut wire = chunk(&serde_json::json!({})).encode();
        let n = wire.len();
        wire[n - 1] ^= 1;
        assert_eq!(Frame::parse(&wire), None);
        // A prelude whose CRC is wrong, or too short a frame.
        assert_eq!(frame_len(&wire[..4].repeat(3)), Err(()));
        let mut short = vec![0, 0, 0, 3, 0, 0, 0, 0];
        short.extend_from_slice(&crc32(&short).to_be_bytes());
        assert_eq!(frame_len(&short), Err(()));
        assert_eq!(frame_len(&wire[..11]), Ok(None));
    }

    #[test]
    fn a_patched_chunk_keeps_its_padding_and_an_event_type_can_change() {
        let mut f = chunk(&serde_json::json!({"type": "message_delta"}));
        f.set_json(&serde_json::json!({"type": "message_delta", "x": 1}), true);
        f.set_event_type("other");
        let back = Frame::parse(&f.encode()).unwrap();
        assert_eq!(back.event_type(), Some("other"));
        assert_eq!(back.json().unwrap().0["x"], 1);
        let payload: serde_json::Value = serde_json::from_slice(&back.payload).unwrap();
        assert_eq!(payload["p"], "abcd");
    }

    #[test]
    fn an_exception_frame_says_its_type() {
        let f = Frame::exception(
            "throttlingException",
            &serde_json::json!({"message": "slow"}),
        );
        let back = Frame::parse(&f.encode()).unwrap();
        assert!(!back.is_event());
        assert_eq!(back.header(":exception-type"), Some("throttlingException"));
    }

    #[test]
    fn a_spoiled_payload_comes_with_right_checksums() {
        // A chunk: the event inside it spoiled, the envelope still JSON.
        let wire = chunk(&serde_json::json!({"type": "x"})).encode();
        let spoiled = respoil(&wire, |p| p[0] = b' ');
        assert_eq!(spoiled.len(), wire.len());
        let f = Frame::parse(&spoiled).expect("checksums right");
        assert!(serde_json::from_slice::<serde_json::Value>(&f.payload).is_ok());
        assert_eq!(f.wrapped_bytes().unwrap()[0], b' ');
        assert!(f.json().is_none());
        // Another frame: its payload.
        let wire = Frame::event("messageStop", br#"{"stopReason":"end_turn"}"#).encode();
        let f = Frame::parse(&respoil(&wire, |p| p[0] = b' ')).unwrap();
        assert_eq!(f.payload[0], b' ');
    }
}
