//! How streamed answers carry their events, as faults name them: the
//! formats (an event stream, JSON lines, AWS frames), told by media type,
//! and a provider's error event in each.

/// The media types of NDJSON / JSON Lines bodies, under every name in use
/// (lowercase).
pub(crate) const JSON_LINES: &[&str] = &[
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "application/jsonlines",
];

/// How a stream's payload is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Format {
    /// `text/event-stream`: blocks of fields, each ending at a blank line.
    #[default]
    EventStream,
    /// NDJSON / JSON Lines: each line (ended by LF; a CR before it is the
    /// JSON's whitespace) is one JSON value, and one event.
    JsonLines,
    /// AWS's binary event stream (Amazon Bedrock): length-prefixed frames
    /// ([`super::eventstream`]); each event frame is an event.
    AwsEventStream,
}

impl Format {
    /// How a body streams events, by its media type (a `Content-Type`):
    /// an event stream, NDJSON / JSON Lines (under any of the names in
    /// use) or AWS frames; `None` for a body that is not one.
    pub(crate) fn of_media_type(content_type: &str) -> Option<Format> {
        let media = content_type.split(';').next()?.trim();
        let is = |m: &&str| media.eq_ignore_ascii_case(m);
        if is(&"text/event-stream") {
            Some(Format::EventStream)
        } else if JSON_LINES.iter().any(is) {
            Some(Format::JsonLines)
        } else if is(&"application/vnd.amazon.eventstream") {
            Some(Format::AwsEventStream)
        } else {
            None
        }
    }
}

/// A provider's error event as `format` carries it: an event-stream event
/// (`event:` if it has a type, then its `data:`), or its data as one line.
pub(crate) fn error_event(
    format: Format,
    event: Option<&str>,
    data: &serde_json::Value,
) -> Vec<u8> {
    match format {
        Format::JsonLines => format!("{data}\n").into_bytes(),
        // Bedrock's exception frame: the type is the exception's.
        Format::AwsEventStream => {
            super::eventstream::Frame::exception(event.unwrap_or("internalServerException"), data)
                .encode()
        }
        Format::EventStream => {
            let event = event.map(|e| format!("event: {e}\n")).unwrap_or_default();
            format!("{event}data: {data}\n\n").into_bytes()
        }
    }
}
