//! A local server's answer waits briefly for a FIN behind it.
//!
//! Over loopback a server's `close()` puts the FIN in its client's socket
//! before it returns, so a client told of the close by other means (a
//! thread, a pipe: urllib3's check of a pooled connection the server
//! closed) finds it there at once. Through the relay the FIN needs a turn
//! of its own: read, then `shutdown()`. When the relay read the answer
//! while the server's `close()` was still running (the FIN landed 1–5 µs
//! later), the client often looked first. An answer that emptied its
//! source therefore waits [`HOLD`] for what follows it, and leaves with the
//! FIN when one comes (the fast path, `fast.rs`; the fault path's writer,
//! `pipeline.rs`).
//!
//! Only for a server on this host, where the relay stands in for the path
//! (`conn.rs`), and once per connection: the first answer that nothing
//! follows ends the holding, so a server that keeps its connections open
//! pays it once and its round trips do not.
//!
//! Measured (release builds, 2 cores, five runs of 400 tries, server and
//! client in the command's namespace), the FIN not yet there when the
//! client looked, against 0 directly: a server in its own process 63–178
//! unheld, 1–5 held 10 µs, 0–1 held 20 µs; a thread of the client's
//! process, as urllib3 has it, 59–329 unheld, 0–1 held 20 µs.

use std::time::{Duration, Instant};

/// How long an answer waits. (200 ms in unit tests, which then see it
/// whatever the machine's load.)
pub(crate) const HOLD: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_micros(20)
};

/// One answer's wait: shorter than any timer the runtime has, so the
/// waiter looks again and again, and yields between looks.
pub(crate) struct Wait {
    until: Instant,
}

impl Wait {
    pub(crate) fn start() -> Wait {
        Wait {
            until: Instant::now() + HOLD,
        }
    }

    /// Yields, then says whether to look again (`false`: the time is up).
    /// It yields to the other connections and to the kernel's scheduler:
    /// the server may be waiting for this CPU to close its socket (without
    /// the kernel's yield, a server in another process missed a 10 µs
    /// hold 2–91 times in 400 instead of 1–5).
    pub(crate) async fn again(&self) -> bool {
        if Instant::now() >= self.until {
            return false;
        }
        let _ = nix::sched::sched_yield();
        tokio::task::yield_now().await;
        true
    }
}
