//! When a one-shot stream fault fires: after `after_bytes` of its
//! direction, or `after` a time since the connection opened — and the
//! pass-through up to that moment, shared by stall, reset, close and
//! blackout.

use tokio::time::Instant;

use super::{Gone, Item, ItemKind, Next, StageCtx, StageIo};
use crate::settings::{Fields, ProfileError};
use std::time::Duration;

/// Reads the `after_bytes` / `after` trigger shared by stall, reset and close.
/// Neither means "at once" (after zero bytes).
pub(crate) fn parse_trigger(f: &mut Fields) -> Result<Trigger, ProfileError> {
    let bytes = f.size("after_bytes")?;
    let time = f.duration("after")?;
    match (bytes, time) {
        (Some(_), Some(_)) => Err(f.table_error("give either after_bytes or after, not both")),
        (Some(n), None) => Ok(Trigger::Bytes(n)),
        (None, Some(t)) => Ok(Trigger::Time(t)),
        (None, None) => Ok(Trigger::Bytes(0)),
    }
}

/// When a one-shot stream fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Once this many bytes have passed in the direction.
    Bytes(u64),
    /// This long after the connection opened.
    Time(Duration),
}

impl Trigger {
    pub(crate) fn param(&self) -> (&'static str, String) {
        match self {
            Trigger::Bytes(n) => ("after_bytes", n.to_string()),
            Trigger::Time(t) => ("after", crate::units::format_duration(*t)),
        }
    }
}

/// How [`pass_until`] ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Until {
    /// The trigger fired; the part of the crossing chunk beyond the mark, if
    /// any, is handed back (a stall holds it, a reset drops it).
    Fired(Option<Item>),
    /// The input ended, or the trigger can no longer fire.
    Ended,
    /// The stage is being removed.
    Stopped,
}

/// Passes items until `trigger` fires (and the window is open), splitting
/// the chunk that crosses the byte mark. Shared by stall, reset, close and
/// blackout.
pub(crate) async fn pass_until(
    trigger: Trigger,
    ctx: &StageCtx,
    io: &mut StageIo,
) -> Result<Until, Gone> {
    let mut passed: u64 = 0;
    let deadline = match trigger {
        Trigger::Time(t) => Some((ctx.opened + t).max(ctx.window_start())),
        Trigger::Bytes(_) => None,
    };
    // The clock is read here, not left to the timer: the runtime's timer
    // fires up to a tick late, and a byte that arrives at or after the
    // deadline must not slip through meanwhile (a `timeout` toxic in force
    // when the connection opens holds its first byte).
    let due = |now: Instant| deadline.is_some_and(|d| now >= d);
    loop {
        let now = Instant::now();
        if due(now) {
            return fire_at(ctx, io, now).await;
        }
        let next = tokio::select! {
            biased;
            _ = sleep_opt(deadline) => return fire_at(ctx, io, Instant::now()).await,
            n = io.next() => n,
        };
        let item = match next {
            Next::Item(item) => item,
            Next::Ended => return Ok(Until::Ended),
            Next::Stopped => return Ok(Until::Stopped),
        };
        let Trigger::Bytes(limit) = trigger else {
            if due(item.at.max(Instant::now())) && ctx.active_at(Instant::now()) {
                // It arrived when the fault was due: it is held with the rest.
                return Ok(Until::Fired(Some(item)));
            }
            io.send(item).await?;
            continue;
        };
        let active = ctx.active_at(Instant::now());
        match &item.kind {
            // A zero-byte trigger fires at the first byte.
            ItemKind::Data(bytes) if active && passed + bytes.len() as u64 > limit => {
                let keep = (limit.saturating_sub(passed)) as usize;
                if keep > 0 {
                    io.send(Item::data(item.at, bytes.slice(..keep))).await?;
                }
                return Ok(Until::Fired(Some(Item::data(item.at, bytes.slice(keep..)))));
            }
            ItemKind::Data(bytes) => {
                passed += bytes.len() as u64;
                io.send(item).await?;
            }
            _ => io.send(item).await?,
        }
    }
}

/// The time trigger came due at `now`: it fires, or, outside the fault's
/// window, lets the rest pass unharmed.
async fn fire_at(ctx: &StageCtx, io: &mut StageIo, now: Instant) -> Result<Until, Gone> {
    if ctx.active_at(now) {
        return Ok(Until::Fired(None));
    }
    io.pass_rest().await;
    Ok(Until::Ended)
}

async fn sleep_opt(deadline: Option<Instant>) {
    match deadline {
        Some(t) => crate::timer::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
