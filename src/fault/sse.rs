//! `sse` (HTTP layer): on `text/event-stream` responses, counted in whole
//! events (an event ends at a blank line): `stall_after_events` — then
//! silence, the connection open; `drop_after_events` — then a close or a
//! reset (`then`); `event_delay` — each event late; `malformed_after_events`
//! — the next event's `data:` is not valid JSON (`malformed = "json"`), or
//! the stream ends in the middle of an event (`malformed = "truncate"`).

use std::time::Duration;

use super::http_match::RequestMatch;
use super::http_status::After;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

/// How the stream goes wrong after its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breakage {
    /// Nothing more, the connection open.
    Stall,
    /// The connection ends: cleanly or with an RST.
    Drop(After),
    /// One event whose `data:` is not valid JSON, then the stream goes on.
    BadJson,
    /// Half an event, then the stream ends.
    Truncate,
}

#[derive(Debug, Clone)]
pub(crate) struct Sse {
    /// After how many whole events it breaks, and how (none: only delays).
    breaks: Option<(u64, Breakage)>,
    event_delay: Duration,
    matcher: RequestMatch,
}

impl Kind for Sse {
    const INFO: KindInfo = KindInfo {
        name: "sse",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a server-sent event stream stalls, drops, slows or turns malformed after N events",
        params: &[
            ("stall_after_events", "a number", "after N whole events nothing more, the connection open"),
            ("drop_after_events", "a number", "after N events the connection ends"),
            ("then", "close (default) or reset", "how it ends, with drop_after_events"),
            ("malformed_after_events", "a number", "event N+1 is malformed"),
            ("malformed", "json (default) or truncate", "data that is not JSON, or half an event and the end"),
            ("event_delay", "a duration, default 0", "each event this much later"),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let stall = f.integer_in("stall_after_events", 0, u64::MAX)?;
        let drop = f.integer_in("drop_after_events", 0, u64::MAX)?;
        let malformed_after = f.integer_in("malformed_after_events", 0, u64::MAX)?;
        let then = match f.choice("then", &["close", "reset"])? {
            Some("reset") => After::Reset,
            _ => After::Close,
        };
        let malformed = f.choice("malformed", &["json", "truncate"])?;
        let event_delay = f.duration("event_delay")?.unwrap_or_default();
        let given = [stall.is_some(), drop.is_some(), malformed_after.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(f.table_error(
                "give at most one of stall_after_events, drop_after_events and malformed_after_events",
            ));
        }
        if malformed.is_some() && malformed_after.is_none() {
            return Err(f.table_error("malformed goes with malformed_after_events"));
        }
        let breaks = match (stall, drop, malformed_after) {
            (Some(n), _, _) => Some((n, Breakage::Stall)),
            (_, Some(n), _) => Some((n, Breakage::Drop(then))),
            (_, _, Some(n)) if malformed == Some("truncate") => Some((n, Breakage::Truncate)),
            (_, _, Some(n)) => Some((n, Breakage::BadJson)),
            _ => None,
        };
        if breaks.is_none() && event_delay.is_zero() {
            return Err(f.table_error(
                "give stall_after_events, drop_after_events, malformed_after_events or event_delay",
            ));
        }
        Ok(Sse {
            breaks,
            event_delay,
            matcher: RequestMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        match self.breaks {
            Some((n, Breakage::Stall)) => p.push(("stall_after_events", n.to_string())),
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
            None => {}
        }
        if !self.event_delay.is_zero() {
            p.push(("event_delay", format_duration(self.event_delay)));
        }
        p.extend(self.matcher.params());
        p
    }
}

impl Sse {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn breaks(&self) -> Option<(u64, Breakage)> {
        self.breaks
    }

    pub(crate) fn event_delay(&self) -> Duration {
        self.event_delay
    }
}
