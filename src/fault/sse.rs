//! `sse` (HTTP layer): on `text/event-stream` responses, counted in whole
//! events (an event ends at a blank line), on NDJSON ones, counted in
//! lines (each a JSON value: Ollama's streams), and on AWS's binary event
//! stream (Amazon Bedrock's), counted in event frames, over HTTP/1.1 and
//! HTTP/2 alike, and on gRPC responses over HTTP/2, counted in messages
//! ([`crate::http::h2_stream`]):
//! `stall_after_events` — then
//! silence, the connection open (for good, or for `stall_for`, and then
//! the stream goes on: a slow first token after the headers, a pause
//! mid-answer that a client's read timeout should or should not ride
//! out); `drop_after_events` — then a close or a
//! reset (`then`); `event_delay` — each event late; `malformed_after_events`
//! — the next event's JSON (its `data:`, or the line) is not valid
//! (`malformed = "json"`), or
//! the stream ends in the middle of an event (`malformed = "truncate"`);
//! `error_after_events` — the provider's own mid-stream error event
//! (`envelope`: Anthropic's `event: error` with an `overloaded_error`,
//! OpenAI's `data: {"error": …}`, OpenAI's Responses API's `event: error`,
//! Gemini's `data: {"error": …}` in Google's shape, Ollama's error line,
//! which an NDJSON stream gets when no envelope is given, Bedrock's
//! exception frame, which AWS's binary event stream always gets),
//! then the stream ends, as those APIs end a stream they cannot finish
//! after its 200; `patch_json` / `patch_ops`
//! — each event whose `data:` (or line) is JSON (those named by `event`,
//! a glob)
//! gets a JSON merge patch or a JSON Patch, so that a streamed answer ends
//! otherwise (Anthropic's `message_delta` `stop_reason` turned
//! `max_tokens`, OpenAI's last chunk's `finish_reason` turned `length`);
//! `set_event` — those events' type (`event:` line) renamed, with a patch
//! only where it applied (OpenAI's Responses stream ending in
//! `response.incomplete` instead of `response.completed`).

use std::time::Duration;

use wildmatch::WildMatch;

use super::acts::HttpAct;
use super::http_match::RequestMatch;
use super::http_status::After;
use super::json_edit::JsonEdit;
use super::{Kind, KindInfo, Layer, Stream};
use crate::protocol::events::Format;
use crate::provider::{bedrock, ollama};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

/// How the stream goes wrong after its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breakage {
    /// Nothing more, the connection open: for good, or for a while
    /// (the upstream's bytes wait in its socket), then the rest.
    Stall(Option<Duration>),
    /// The connection ends: cleanly or with an RST.
    Drop(After),
    /// One event whose `data:` is not valid JSON, then the stream goes on.
    BadJson,
    /// Half an event, then the stream ends.
    Truncate,
    /// The provider's error event ([`Sse::error_event`]), then the end.
    Error,
}

#[derive(Debug, Clone)]
pub(crate) struct Sse {
    /// After how many whole events it breaks, and how (none: only delays).
    breaks: Option<(u64, Breakage)>,
    event_delay: Duration,
    matcher: RequestMatch,
    /// With `error_after_events`: the provider's error event (boxed: the
    /// other faults stay small).
    error: Option<Box<ErrorEvent>>,
    /// `envelope = "auto"`: each provider's error event (by envelope
    /// name), the one for the provider a request goes to taken per request.
    auto: Option<std::sync::Arc<[(&'static str, ErrorEvent)]>>,
    /// A JSON patch for events' data and/or a new type, and which events
    /// (by the glob on their `event:` name) get them.
    patch: Option<EventPatch>,
}

/// A provider's mid-stream error: its event type (in an event stream) and
/// data, and for display the envelope and error type as given.
#[derive(Debug, Clone)]
struct ErrorEvent {
    event: Option<&'static str>,
    data: serde_json::Value,
    /// The data as an NDJSON stream's line: the same, or with no envelope
    /// given Ollama's error (the servers that stream NDJSON are Ollama's
    /// kind, and its SDK cannot raise another provider's error shape).
    line: serde_json::Value,
    provider: &'static str,
    /// Whether `envelope` was given, not defaulted.
    given: bool,
    kind: String,
    /// In AWS's binary event stream: Bedrock's exception type and its
    /// payload (another envelope has no frame of its own there: Bedrock
    /// reports every provider's mid-stream failure this way).
    aws: (String, serde_json::Value),
}

#[derive(Debug, Clone)]
pub(crate) struct EventPatch {
    /// For the data (none: only a new type). An event whose patch fails
    /// (a `test` op) keeps its type too: the patch is the condition.
    pub(crate) patch: Option<JsonEdit>,
    /// The type the event then has (its `event:` line).
    pub(crate) set_event: Option<String>,
    /// As given, and as matched; none: every event.
    event: Option<(String, WildMatch)>,
}

impl EventPatch {
    /// Whether an event of this type (`message` when it names none) gets
    /// the patch and the new type.
    pub(crate) fn applies_to(&self, event: &str) -> bool {
        self.event.as_ref().is_none_or(|(_, g)| g.matches(event))
    }
}

impl Kind for Sse {
    const INFO: KindInfo = KindInfo {
        name: "sse",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "an event stream (server-sent events, NDJSON lines, AWS event-stream frames: Bedrock, or a gRPC response's messages) stalls (for good or a while), drops, slows or turns malformed after N events, or has its events' JSON patched or their type changed",
        params: &[
            (
                "stall_after_events",
                "a number",
                "after N whole events nothing more, the connection open",
            ),
            (
                "stall_for",
                "a duration like 10s, default for good",
                "with stall_after_events: the silence ends and the stream goes on (0 events: headers, then a slow first event)",
            ),
            (
                "drop_after_events",
                "a number",
                "after N events the connection ends",
            ),
            (
                "then",
                "close (default) or reset",
                "how it ends, with drop_after_events",
            ),
            (
                "malformed_after_events",
                "a number",
                "event N+1 is malformed",
            ),
            (
                "malformed",
                "json (default) or truncate",
                "data that is not JSON, or half an event and the end",
            ),
            (
                "error_after_events",
                "a number",
                "after N events the provider's error event, then the end",
            ),
            (
                "envelope",
                "anthropic (default), openai, openai-responses, gemini, ollama or bedrock",
                "whose error event, with error_after_events",
            ),
            (
                "error_type",
                "a string",
                "its error type (default overloaded_error; openai and openai-responses: server_error, the code; gemini: INTERNAL, a google.rpc code name; ollama: the error's text; bedrock: modelStreamErrorException, an exception of Bedrock's streams)",
            ),
            (
                "event_delay",
                "a duration, default 0",
                "each event this much later",
            ),
            (
                "patch_json",
                "a JSON merge patch (RFC 7396) like '{\"delta\": {\"stop_reason\": \"max_tokens\"}}', or a table",
                "each event whose data is JSON gets it (a stream with a length is then ended by a close)",
            ),
            (
                "patch_ops",
                "a JSON Patch (RFC 6902) like '[{\"op\": \"test\", \"path\": \"/choices/0/finish_reason\", \"value\": \"stop\"}, {\"op\": \"replace\", …}]'",
                "…or operations at JSON Pointers: an event whose op fails (a test) passes as it came",
            ),
            (
                "set_event",
                "an event type like response.incomplete",
                "the events get this type (their event: line, or an AWS frame's :event-type), with a patch only those it applied to; an NDJSON line has none to change",
            ),
            (
                "event",
                "a glob like message_delta, default any",
                "only events of this type (an NDJSON line is a message; an AWS frame's is its :event-type), with patch_json, patch_ops or set_event",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let stall = f.integer_in("stall_after_events", 0, u64::MAX)?;
        let stall_for = f.duration("stall_for")?;
        let drop = f.integer_in("drop_after_events", 0, u64::MAX)?;
        let malformed_after = f.integer_in("malformed_after_events", 0, u64::MAX)?;
        let then = match f.choice("then", &["close", "reset"])? {
            Some("reset") => After::Reset,
            _ => After::Close,
        };
        let malformed = f.choice("malformed", &["json", "truncate"])?;
        let error_after = f.integer_in("error_after_events", 0, u64::MAX)?;
        let envelope = f.choice(
            "envelope",
            &[
                "anthropic",
                "openai",
                "openai-responses",
                "gemini",
                "ollama",
                "bedrock",
                "auto",
            ],
        )?;
        let error_type = f.string("error_type")?;
        if envelope == Some("auto") && error_type.is_some() {
            return Err(f.table_error(
                "error_type names one provider's error: give an envelope with it, not auto",
            ));
        }
        let event_delay = f.duration("event_delay")?.unwrap_or_default();
        let patch = JsonEdit::parse(f)?;
        let set_event = f.string("set_event")?;
        if let Some(name) = &set_event {
            // A line end would start another field of the stream.
            if name.is_empty() || name.contains(['\r', '\n']) {
                return Err(f.table_error(
                    "set_event must be an event type on one line, not empty (like response.incomplete)",
                ));
            }
            // An AWS frame's header holds at most 64 KiB.
            if name.len() > crate::protocol::eventstream::MAX_HEADER_VALUE {
                return Err(f.table_error("set_event is longer than an event type can be (64 KiB)"));
            }
            // A client keeps a trailing space as part of the type.
            if name.trim() != name {
                return Err(f.table_error(format!(
                    "set_event {name:?} starts or ends with a space, which would be part of the type"
                )));
            }
        }
        let event = f.string("event")?;
        if event.is_some() && patch.is_none() && set_event.is_none() {
            return Err(f.table_error(
                "event goes with patch_json, patch_ops or set_event (it names the events to change)",
            ));
        }
        let patch = (patch.is_some() || set_event.is_some()).then(|| EventPatch {
            patch,
            set_event,
            event: event.map(|e| {
                let g = WildMatch::new(&e);
                (e, g)
            }),
        });
        let given = [
            stall.is_some(),
            drop.is_some(),
            malformed_after.is_some(),
            error_after.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(f.table_error(
                "give at most one of stall_after_events, drop_after_events, malformed_after_events \
                 and error_after_events",
            ));
        }
        if stall_for.is_some() && stall.is_none() {
            return Err(f.table_error(
                "stall_for goes with stall_after_events (after how many events the silence starts)",
            ));
        }
        if stall_for.is_some_and(|d| d.is_zero()) {
            return Err(
                f.table_error("stall_for must be longer than 0 (leave it out to stall for good)")
            );
        }
        if malformed.is_some() && malformed_after.is_none() {
            return Err(f.table_error("malformed goes with malformed_after_events"));
        }
        if (envelope.is_some() || error_type.is_some()) && error_after.is_none() {
            return Err(f.table_error("envelope and error_type go with error_after_events"));
        }
        let breaks = match (stall, drop, malformed_after, error_after) {
            (Some(n), ..) => Some((n, Breakage::Stall(stall_for))),
            (_, Some(n), ..) => Some((n, Breakage::Drop(then))),
            (_, _, Some(n), _) if malformed == Some("truncate") => Some((n, Breakage::Truncate)),
            (_, _, Some(n), _) => Some((n, Breakage::BadJson)),
            (.., Some(n)) => Some((n, Breakage::Error)),
            _ => None,
        };
        if breaks.is_none() && event_delay.is_zero() && patch.is_none() {
            return Err(f.table_error(
                "give stall_after_events, drop_after_events, malformed_after_events, \
                 error_after_events, event_delay, patch_json, patch_ops or set_event",
            ));
        }
        // One provider's error event (`auto`: Anthropic's until a request
        // says otherwise).
        let build = |envelope: Option<&'static str>, error_type: Option<String>, n: u64| {
            let provider = envelope.unwrap_or("anthropic");
            if error_type.as_deref() == Some("") {
                return Err(f.table_error("error_type must not be empty"));
            }
            let kind =
                error_type.unwrap_or_else(|| crate::provider::default_stream_error(provider));
            crate::provider::check_stream_error(provider, &kind).map_err(|e| f.table_error(e))?;
            let (event, data) = crate::provider::stream_error(provider, &kind, n);
            let aws_kind = match provider {
                "bedrock" => kind.clone(),
                _ => bedrock::STREAM_ERROR.to_string(),
            };
            let aws = (aws_kind.clone(), bedrock::exception(&aws_kind));
            let line = match envelope {
                Some(_) => data.clone(),
                None => ollama::stream_error(ollama::STREAM_ERROR).1,
            };
            Ok(ErrorEvent {
                event,
                data,
                line,
                provider,
                given: envelope.is_some(),
                kind,
                aws,
            })
        };
        let (error, auto) = match (error_after, envelope) {
            (Some(n), Some("auto")) => {
                let each = [
                    "anthropic",
                    "openai",
                    "openai-responses",
                    "gemini",
                    "bedrock",
                ]
                .into_iter()
                .map(|p| {
                    build(Some(p), None, n).map(|mut e| {
                        // NDJSON streams keep Ollama's, as with no envelope.
                        e.line = ollama::stream_error(ollama::STREAM_ERROR).1;
                        e.given = false;
                        (p, e)
                    })
                })
                .collect::<Result<Vec<_>, ProfileError>>()?;
                (Some(Box::new(each[0].1.clone())), Some(each.into()))
            }
            (Some(n), _) => (Some(Box::new(build(envelope, error_type, n)?)), None),
            (None, _) => (None, None),
        };
        Ok(Sse {
            breaks,
            event_delay,
            matcher: RequestMatch::parse(f)?,
            error,
            auto,
            patch,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        match self.breaks {
            Some((n, Breakage::Stall(d))) => {
                p.push(("stall_after_events", n.to_string()));
                if let Some(d) = d {
                    p.push(("stall_for", format_duration(d)));
                }
            }
            Some((n, Breakage::Drop(then))) => {
                p.push(("drop_after_events", n.to_string()));
                if then == After::Reset {
                    p.push(("then", "reset".into()));
                }
            }
            Some((n, Breakage::BadJson)) => p.push(("malformed_after_events", n.to_string())),
            Some((n, Breakage::Truncate)) => {
                p.push(("malformed_after_events", n.to_string()));
                p.push(("malformed", "truncate".into()));
            }
            Some((n, Breakage::Error)) => {
                p.push(("error_after_events", n.to_string()));
                // A defaulted envelope is not shown: given, it would hold
                // for NDJSON streams too.
                if self.auto.is_some() {
                    p.push(("envelope", "auto".into()));
                } else if let Some(e) = &self.error {
                    if e.given {
                        p.push(("envelope", e.provider.into()));
                    }
                    p.push(("error_type", e.kind.clone()));
                }
            }
            None => {}
        }
        if !self.event_delay.is_zero() {
            p.push(("event_delay", format_duration(self.event_delay)));
        }
        if let Some(e) = &self.patch {
            p.extend(e.patch.as_ref().map(JsonEdit::param));
            if let Some(name) = &e.set_event {
                p.push(("set_event", name.clone()));
            }
            if let Some((glob, _)) = &e.event {
                p.push(("event", glob.clone()));
            }
        }
        p.extend(self.matcher.params());
        p
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
        Some(HttpAct::Events(self.for_request(host, path)))
    }
}

impl Sse {
    /// This fault as it acts on a request to `host` for `path`: with
    /// `envelope = "auto"`, that provider's error event.
    pub(crate) fn for_request(&self, host: Option<&str>, path: &str) -> Sse {
        let mut s = self.clone();
        if let Some(auto) = &self.auto {
            use crate::provider::Provider;
            let name = match Provider::of(host, path) {
                Provider::OpenAi
                    if path
                        .split('?')
                        .next()
                        .is_some_and(|p| p.ends_with("/responses")) =>
                {
                    "openai-responses"
                }
                p => p.name(),
            };
            if let Some((_, e)) = auto.iter().find(|(n, _)| *n == name) {
                s.error = Some(Box::new(e.clone()));
            }
        }
        s
    }

    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn breaks(&self) -> Option<(u64, Breakage)> {
        self.breaks
    }

    pub(crate) fn patch(&self) -> Option<&EventPatch> {
        self.patch.as_ref()
    }

    /// `error_type`, as given or defaulted, with `error_after_events`.
    pub(crate) fn error_type(&self) -> Option<&str> {
        self.error.as_ref().map(|e| e.kind.as_str())
    }

    /// The error event `error_after_events` sends in a stream of this
    /// format: its type (an event stream's, or the exception's in AWS's)
    /// and its data (an NDJSON stream's: its line).
    pub(crate) fn error_event(&self, format: Format) -> Option<(Option<&str>, &serde_json::Value)> {
        self.error.as_ref().map(|e| match format {
            Format::JsonLines => (None, &e.line),
            Format::AwsEventStream => (Some(e.aws.0.as_str()), &e.aws.1),
            Format::EventStream => (e.event, &e.data),
        })
    }
}

/// How long a stream's faults (in rule order) hold each counted event,
/// and which of them do (each counted where it acts).
pub(crate) fn event_delays(faults: &[(super::Chosen, Sse)]) -> (Duration, Vec<usize>) {
    let mut total = Duration::ZERO;
    let mut acting = Vec::new();
    for (i, (_, s)) in faults.iter().enumerate() {
        if !s.event_delay.is_zero() {
            total += s.event_delay;
            acting.push(i);
        }
    }
    (total, acting)
}

/// The first of a stream's faults (in rule order) whose malformed (or
/// truncated) event the `nth` counted one is.
pub(crate) fn spoiling(faults: &[(super::Chosen, Sse)], nth: u64) -> Option<usize> {
    faults.iter().position(|(_, s)| {
        matches!(s.breaks, Some((n, Breakage::BadJson | Breakage::Truncate))
            if n.checked_add(1) == Some(nth))
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;

    /// The error event as an event stream carries it.
    fn wire(s: &Sse) -> String {
        let (event, data) = s.error_event(Format::EventStream).unwrap();
        let bytes = crate::protocol::events::error_event(
            crate::protocol::events::Format::EventStream,
            event,
            data,
        );
        String::from_utf8(bytes).unwrap()
    }

    fn sse(pairs: &[(&str, &str)]) -> Result<Sse, ProfileError> {
        spec("sse", pairs).map(|s| match s.kind {
            FaultKind::Sse(s) => s,
            _ => unreachable!(),
        })
    }

    #[test]
    fn error_events_are_the_providers() {
        let a = sse(&[("error_after_events", "3")]).unwrap();
        assert_eq!(a.breaks(), Some((3, Breakage::Error)));
        let text = wire(&a);
        assert!(text.starts_with("event: error\ndata: "), "{text}");
        assert!(text.ends_with("\n\n"), "{text}");
        let data: serde_json::Value =
            serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(data["type"], "error");
        assert_eq!(data["error"]["type"], "overloaded_error");
        let o = sse(&[("error_after_events", "0"), ("envelope", "openai")]).unwrap();
        let text = wire(&o);
        assert!(text.starts_with("data: {\"error\":"), "{text}");
        assert!(text.contains("\"type\":\"server_error\""), "{text}");
        let t = sse(&[("error_after_events", "1"), ("error_type", "api_error")]).unwrap();
        assert!(wire(&t).contains("\"api_error\""));
        let r = sse(&[
            ("error_after_events", "5"),
            ("envelope", "openai-responses"),
        ])
        .unwrap();
        let text = wire(&r);
        assert!(text.starts_with("event: error\ndata: {"), "{text}");
        let data: serde_json::Value =
            serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(data["type"], "error");
        assert_eq!(data["code"], "server_error");
        assert_eq!(data["sequence_number"], 5);
        let g = sse(&[("error_after_events", "1"), ("envelope", "gemini")]).unwrap();
        assert_eq!(
            wire(&g),
            "data: {\"error\":{\"code\":500,\"message\":\"An internal error has occurred.\",\"status\":\"INTERNAL\"}}\n\n"
        );
        let g = sse(&[
            ("error_after_events", "1"),
            ("envelope", "gemini"),
            ("error_type", "UNAVAILABLE"),
        ]);
        assert!(wire(&g.unwrap()).contains("\"code\":503"));
        let e = sse(&[
            ("error_after_events", "1"),
            ("envelope", "gemini"),
            ("error_type", "overloaded"),
        ]);
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("not a google.rpc code name")
        );
        let o = sse(&[("error_after_events", "0"), ("envelope", "ollama")]).unwrap();
        let (event, data) = o.error_event(Format::EventStream).unwrap();
        assert_eq!(
            (event, data["error"].as_str()),
            (None, Some(ollama::STREAM_ERROR))
        );
        // On an NDJSON stream: Ollama's error unless an envelope is given.
        let (_, line) = a.error_event(Format::JsonLines).unwrap();
        assert_eq!(line["error"].as_str(), Some(ollama::STREAM_ERROR));
        let given = sse(&[("error_after_events", "1"), ("envelope", "anthropic")]).unwrap();
        let (_, line) = given.error_event(Format::JsonLines).unwrap();
        assert_eq!(line["error"]["type"], "overloaded_error");
        let b = sse(&[("error_after_events", "2"), ("envelope", "bedrock")]).unwrap();
        let (kind, data) = b.error_event(Format::AwsEventStream).unwrap();
        assert_eq!(kind, Some("modelStreamErrorException"));
        assert_eq!(data["originalStatusCode"], 500);
        let t = sse(&[
            ("error_after_events", "2"),
            ("envelope", "bedrock"),
            ("error_type", "throttlingException"),
        ]);
        assert_eq!(
            t.unwrap().error_event(Format::AwsEventStream).unwrap().0,
            Some("throttlingException")
        );
        let e = sse(&[
            ("error_after_events", "1"),
            ("envelope", "bedrock"),
            ("error_type", "ThrottlingException"),
        ]);
        assert!(e.unwrap_err().message.contains("throttlingException"));
        // Another envelope: an AWS stream still gets Bedrock's own.
        let (kind, _) = a.error_event(Format::AwsEventStream).unwrap();
        assert_eq!(kind, Some("modelStreamErrorException"));
        let e = sse(&[("error_after_events", "1"), ("error_type", "")]).unwrap_err();
        assert!(e.to_string().contains("must not be empty"), "{e}");
        assert!(sse(&[("envelope", "openai"), ("event_delay", "1ms")]).is_err());
        assert!(sse(&[("error_after_events", "1"), ("drop_after_events", "1")]).is_err());
    }

    #[test]
    fn a_patch_is_json_and_event_goes_with_it() {
        let p = sse(&[("patch_json", r#"{"a": 1}"#), ("event", "message_*")]).unwrap();
        assert!(p.patch().unwrap().applies_to("message_delta"));
        assert!(!p.patch().unwrap().applies_to("ping"));
        let p = sse(&[("stall_after_events", "1"), ("stall_for", "2s")]).unwrap();
        let pause = Breakage::Stall(Some(std::time::Duration::from_secs(2)));
        assert_eq!(p.breaks(), Some((1, pause)));
        let long = "x".repeat(70_000);
        for (bad, says) in [
            (
                vec![("set_event", long.as_str())],
                "longer than an event type can be",
            ),
            (vec![("event", "x")], "event goes with patch_json"),
            (
                vec![("stall_for", "1s")],
                "stall_for goes with stall_after_events",
            ),
            (
                vec![("stall_after_events", "1"), ("stall_for", "0s")],
                "longer than 0",
            ),
            (
                vec![("patch_json", "{\"a\":")],
                "expected a JSON merge patch",
            ),
            (vec![], "patch_ops or set_event"),
            (vec![("set_event", "a\ndata: x")], "on one line"),
            (vec![("set_event", "")], "on one line"),
            (vec![("set_event", "a ")], "starts or ends with a space"),
            (
                vec![("patch_ops", r#"[{"op": "swap", "path": "/a"}]"#)],
                "expected a JSON Patch (RFC 6902)",
            ),
            (
                vec![("patch_ops", r#"[{"op": "remove", "path": "a"}]"#)],
                "expected a JSON Patch (RFC 6902)",
            ),
            (vec![("patch_ops", "[]")], "an empty JSON Patch"),
            (
                vec![("patch_ops", r#"{"op": "remove", "path": "/a"}"#)],
                "a list of",
            ),
            (
                vec![
                    ("patch_ops", r#"[{"op": "remove", "path": "/a"}]"#),
                    ("patch_json", "{}"),
                ],
                "not both",
            ),
        ] {
            let e = sse(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
