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
//! (`conn.rs`), and a few times per connection ([`Waits`]): a server that
//! keeps its connections open pays it once, and its round trips do not.
//!
//! Measured (release builds, 2 cores, five runs of 400 tries, server and
//! client in the command's namespace), the FIN not yet there when the
//! client looked, against 0 directly: a server in its own process 63–178
//! unheld, 1–5 held 10 µs, 0–1 held 20 µs; a thread of the client's
//! process, as urllib3 has it, 59–329 unheld, 0–1 held 20 µs.

use std::sync::atomic::{AtomicU8, Ordering};
// The standard clock, not tokio's: a wait this short is not a timer, and
// under a paused tokio clock (in-process tests) it would never end.
use std::time::{Duration, Instant};

/// How long an answer waits. (200 ms in unit tests, which then see it
/// whatever the machine's load.)
pub(crate) const HOLD: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_micros(20)
};

/// The waits a connection may make: [`MOST`](Waits::MOST), as a server
/// may answer in a few writes (a head, then a body) before it closes;
/// none after one that nothing followed (the server keeps its connections
/// open), nor once bytes keep following (a stream: each piece would wait
/// for the next). Shared by the fast path and the pipeline, which may
/// carry the same direction one after the other.
#[derive(Debug, Default)]
pub(crate) struct Waits(AtomicU8);

/// No waits, for ever ([`Waits::none`]).
static NONE: Waits = Waits(AtomicU8::new(0));

impl Waits {
    pub(crate) const MOST: u8 = 4;

    /// No waits: a source that is not a local server (a client). Never
    /// allowed any ([`allow`](Waits::allow) is for a connection's own).
    pub(crate) fn none() -> &'static Waits {
        &NONE
    }

    /// Allows the waits: the source is a local server in the path.
    pub(crate) fn allow(&self) {
        self.0.store(Self::MOST, Ordering::Relaxed);
    }

    /// Whether an answer may wait now.
    pub(crate) fn left(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// Counts a wait: `followed`, something came behind the answer.
    pub(crate) fn spent(&self, followed: bool) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                (left > 0).then_some(if followed { left - 1 } else { 0 })
            });
    }
}

/// Looks for what follows an answer (`look`: `None` while nothing has
/// come) until something does or [`HOLD`] is over (`None`). The wait is
/// shorter than any timer the runtime has, so it looks again and again,
/// yielding between looks to the other connections and to the kernel's
/// scheduler: the server may be waiting for this CPU to close its socket
/// (without the kernel's yield, a server in another process missed a
/// 10 µs hold 2–91 times in 400 instead of 1–5).
pub(crate) async fn wait_for<T>(mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + HOLD;
    loop {
        if let Some(found) = look() {
            return Some(found);
        }
        if Instant::now() >= until {
            return None;
        }
        let _ = nix::sched::sched_yield();
        tokio::task::yield_now().await;
    }
}

/// The two ends of a test: a local server that answers, and the client
/// that reads the answer through the relay.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use tokio::net::TcpStream;

    /// A connection over loopback: its blocking end, and its end for the
    /// relay, set up as the relay sets up its sockets (`TCP_INQ`).
    pub(crate) fn connection() -> (std::net::TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (theirs, _) = l.accept().unwrap();
        theirs.set_nonblocking(true).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let theirs = TcpStream::from_std(theirs).unwrap();
        crate::socket::sockopt::set_options(&theirs, Duration::from_secs(60));
        (ours, theirs)
    }

    /// The server writes `answer` and shuts down 20 ms later; the client
    /// reads, then looks at once: the bytes it read, whether the FIN was
    /// there when it looked, and what it read next (0: the FIN).
    pub(crate) fn answer_then_fin(
        mut server: std::net::TcpStream,
        mut client: std::net::TcpStream,
        answer: &'static [u8],
    ) -> std::thread::JoinHandle<(Vec<u8>, bool, usize)> {
        std::thread::spawn(move || {
            server.write_all(answer).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            server.shutdown(std::net::Shutdown::Write).unwrap();
            let mut buf = vec![0u8; answer.len() + 16];
            let mut got = 0;
            while got < answer.len() {
                let n = client.read(&mut buf[got..]).unwrap();
                assert!(n > 0, "the connection ended before the answer");
                got += n;
            }
            let mut p = libc::pollfd {
                fd: client.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, a local, for the duration of the call.
            let at_once = unsafe { libc::poll(&mut p, 1, 0) };
            let then = client.read(&mut buf).unwrap();
            (buf[..got].to_vec(), at_once == 1, then)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_waits_a_few_times_and_never_after_a_wait_nothing_followed() {
        assert!(!Waits::none().left());
        let w = Waits::default();
        assert!(!w.left(), "not a local server in the path");
        w.allow();
        for _ in 0..Waits::MOST {
            assert!(w.left());
            w.spent(true);
        }
        assert!(!w.left(), "bytes kept following: a stream");
        w.allow();
        w.spent(false);
        assert!(!w.left(), "nothing followed: the server keeps it open");
    }
}
