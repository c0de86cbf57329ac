//! One memory budget for the whole HTTP layer: what its connections hold
//! beyond a small allowance each — bytes read and passed on but not yet
//! written ([`Flow`]), a head read in pieces, a body held whole to match
//! or rewrite it ([`Lease`]).
//!
//! When it is spent nothing waits on another connection (a few deaf
//! upstreams must not stall everyone): a direction reads in small pieces,
//! one round at a time (it waits for what it sent to be written); a
//! request head that needs more is answered 431 and its connection
//! closed; a response head is relayed as bytes; a body is no longer held
//! (it passes on as it comes, unmatched, as one larger than
//! [`super::exchange::MAX_BODY`] does). Each refusal is counted, and the
//! first is logged.
//!
//! Memory given back is returned to the system too: glibc keeps what is
//! freed in its arenas, so after a burst (2,500 connections sending large
//! heads took 2.5 GB, and kept it after they closed) the budget asks it to
//! trim, at most once a second, and once more when the last connection of
//! the HTTP layer has gone (a flood's tail stayed otherwise: RSS idle +
//! 32-39 MiB, under CPU contention).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

/// The budget unless `NETCHAOS_HTTP_MEMORY` says otherwise.
pub(crate) const DEFAULT_LIMIT: usize = 256 << 20;
/// The smallest budget `NETCHAOS_HTTP_MEMORY` may set.
pub(crate) const MIN_LIMIT: usize = 16 << 20;

static LIMIT: AtomicUsize = AtomicUsize::new(DEFAULT_LIMIT);
static USED: AtomicUsize = AtomicUsize::new(0);
/// Times something was refused for want of budget.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Sets the budget (at start, from `NETCHAOS_HTTP_MEMORY`).
pub(crate) fn set_limit(bytes: usize) {
    LIMIT.store(bytes.max(MIN_LIMIT), Ordering::Relaxed);
}

/// Bytes taken now, the limit, and how often something was refused.
pub(crate) fn usage() -> (usize, usize, u64) {
    (
        USED.load(Ordering::Relaxed),
        LIMIT.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    )
}

/// Whether the budget is spent: directions read small.
pub(crate) fn spent() -> bool {
    USED.load(Ordering::Relaxed) >= LIMIT.load(Ordering::Relaxed)
}

/// Counts a refusal (`what` was refused), and says so once per run.
pub(crate) fn refused(what: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    REFUSED.fetch_add(1, Ordering::Relaxed);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "the HTTP layer's memory budget ({} MiB, NETCHAOS_HTTP_MEMORY) is spent: {what} (counted in netchaos_http_memory_refusals_total)",
            LIMIT.load(Ordering::Relaxed) >> 20
        );
    }
}

/// Bytes taken from the budget, given back when dropped.
#[derive(Debug, Default)]
pub(crate) struct Lease(usize);

impl Lease {
    /// Holds `n` bytes in all: more only within the limit (`false`, the
    /// lease unchanged, when that would pass it); less gives the rest back.
    pub(crate) fn hold(&mut self, n: usize) -> bool {
        if n <= self.0 {
            give_back(self.0 - n);
            self.0 = n;
            return true;
        }
        let more = n - self.0;
        let limit = LIMIT.load(Ordering::Relaxed);
        let taken = USED.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
            (u + more <= limit).then_some(u + more)
        });
        if taken.is_ok() {
            self.0 = n;
        }
        taken.is_ok()
    }

    /// `n` bytes counted whether or not the budget has them: bytes already
    /// read (the budget decides whether more are).
    fn counted(n: usize) -> Lease {
        USED.fetch_add(n, Ordering::AcqRel);
        Lease(n)
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        give_back(self.0);
    }
}

fn give_back(n: usize) {
    if n > 0 {
        USED.fetch_sub(n, Ordering::AcqRel);
        trim::freed(n);
    }
}

/// One direction's bytes passed on and not yet written (its chunks in the
/// connection's pipeline, or in the HTTP/2 engine's pipe): counted in the
/// budget until the last piece of each is dropped.
#[derive(Clone, Default)]
pub(crate) struct Flow(Arc<FlowState>);

#[derive(Default)]
struct FlowState {
    out: AtomicUsize,
    written: Notify,
}

impl Flow {
    /// `bytes`, counted as this direction's until they are dropped.
    pub(crate) fn tag(&self, bytes: Bytes) -> Bytes {
        let n = bytes.len();
        self.0.out.fetch_add(n, Ordering::AcqRel);
        Bytes::from_owner(Tagged {
            bytes,
            flow: self.0.clone(),
            _lease: Lease::counted(n),
        })
    }

    /// Waits, while the budget is spent, for what this direction passed on
    /// to be written: one round of small reads at a time then.
    pub(crate) async fn room(&self) {
        loop {
            let written = self.0.written.notified();
            if !spent() || self.0.out.load(Ordering::Acquire) == 0 {
                return;
            }
            // Each chunk written wakes it: the budget may have room again
            // before all are (tokio's Notify keeps a wake that came before
            // the wait).
            written.await;
        }
    }
}

/// A chunk's bytes and its place in the budget and its direction.
struct Tagged {
    bytes: Bytes,
    flow: Arc<FlowState>,
    _lease: Lease,
}

impl AsRef<[u8]> for Tagged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Tagged {
    fn drop(&mut self) {
        self.flow.out.fetch_sub(self.bytes.len(), Ordering::AcqRel);
        self.flow.written.notify_one();
    }
}

/// Giving freed memory back to the system.
mod trim {
    use super::*;

    /// Freed since the last trim; a trim is due past [`DUE`], or past
    /// [`IDLE_DUE`] once no connection is left in the HTTP layer (the end
    /// of a burst: what its last closes freed, under `DUE`, would
    /// otherwise stay with the process until the next burst).
    static FREED: AtomicUsize = AtomicUsize::new(0);
    static PENDING: AtomicBool = AtomicBool::new(false);
    /// Connections in the HTTP layer now ([`super::Connection`]).
    pub(super) static LIVE: AtomicUsize = AtomicUsize::new(0);
    const DUE: usize = 32 << 20;
    const IDLE_DUE: usize = 1 << 20;

    fn due(freed: usize) -> bool {
        freed >= DUE || (freed >= IDLE_DUE && LIVE.load(Ordering::Acquire) == 0)
    }
    /// A trim waits this long after it is due (the rest of a burst of
    /// closes frees in the meantime), and then another may not come
    /// sooner.
    const AFTER: Duration = Duration::from_secs(1);

    /// `n` bytes the HTTP layer held were freed.
    pub(super) fn freed(n: usize) {
        if !due(FREED.fetch_add(n, Ordering::Relaxed) + n) || PENDING.swap(true, Ordering::AcqRel) {
            return;
        }
        // Outside a runtime (unit tests): no trim.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            PENDING.store(false, Ordering::Release);
            return;
        };
        rt.spawn(async {
            loop {
                tokio::time::sleep(AFTER).await;
                FREED.store(0, Ordering::Relaxed);
                let _ = tokio::task::spawn_blocking(release).await;
                tokio::time::sleep(AFTER).await;
                // Freed meanwhile (the end of the burst): once more.
                if due(FREED.load(Ordering::Relaxed)) {
                    continue;
                }
                PENDING.store(false, Ordering::Release);
                // Unless it became due as the flag went down.
                if !due(FREED.load(Ordering::Relaxed)) || PENDING.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }

    /// Asks the allocator to give its free pages back.
    fn release() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim takes the allocator's own locks; any thread
        // may call it at any time.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Held by a connection through the HTTP layer while it runs: its end
/// (however its tasks are dropped) frees what it held outside the budget
/// (its small buffers), and many ending together, or the last one, make a
/// trim due.
pub(crate) struct Connection(());

impl Connection {
    pub(crate) fn new() -> Connection {
        trim::LIVE.fetch_add(1, Ordering::AcqRel);
        Connection(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        trim::LIVE.fetch_sub(1, Ordering::AcqRel);
        trim::freed(CONNECTION_BASE);
    }
}

/// What a connection holds outside the budget, about (its reads' buffers
/// and the chunks of its allowance), for [`Connection`].
const CONNECTION_BASE: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease holds within the limit only, gives back what it no longer
    /// holds, and everything when dropped; tagged bytes count until their
    /// last piece goes.
    #[test]
    fn leases_and_tags_count_what_is_held() {
        let limit = usage().1;
        let mut a = Lease::default();
        assert!(a.hold(1000));
        assert!(!a.hold(limit + 1), "never past the limit");
        assert_eq!(a.held(), 1000);
        assert!(a.hold(10));
        assert_eq!(a.held(), 10);
        // (Other tests share the budget: only its bounds are certain.)
        assert!(usage().0 >= 10);
        drop(a);
        let flow = Flow::default();
        let b = flow.tag(Bytes::from(vec![7u8; 500]));
        let piece = b.slice(10..20);
        drop(b);
        assert_eq!(flow.0.out.load(Ordering::Relaxed), 500);
        assert_eq!(&piece[..], &[7u8; 10]);
        drop(piece);
        assert_eq!(flow.0.out.load(Ordering::Relaxed), 0);
    }
}
