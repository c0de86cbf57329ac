//! What a `run` connection holds in front of a server that does not read,
//! so that the client's `send()` blocks where a real path's would.
//!
//! Directly, the bytes a client can write before `send()` blocks are its
//! own send buffer (autotuned to the path: ~0.66 MB over an Ethernet veth
//! here, 4 MB towards a server on loopback) and the server's receive
//! buffer. Under `run` the client's socket sits on the namespace's
//! loopback, where the kernel autotunes a send buffer to megabytes from the
//! first window on (the MSS is 65,483), and the relay's buffers come on
//! top: 5.2 MB where the veth took 0.77. So in `run`'s own namespace:
//!
//! * the agent bounds the namespace's TCP send buffers ([`CLIENT_SEND_MAX`],
//!   its `tcp_wmem` maximum): the client's socket holds little;
//! * the relay's socket on the client's side receives into a small fixed
//!   buffer and reads little ahead while the upstream has no room
//!   ([`READ_AHEAD`]);
//! * the upstream socket, which sees the real path and autotunes to it as
//!   the client's own socket would have, holds what that socket would,
//!   less what the local leg already holds ([`Balance`]).
//!
//! Relay sockets inside the namespace (to the command's own services, and
//! every client-side socket) get a fixed send buffer of the size a host
//! socket may autotune to (`wmem_max` caps it where netchaos may not
//! force it), so the bound stays the client's. What it costs: a server the
//! command runs itself has the bounded send buffer too; its downloads are
//! balanced on the relay's side instead (the relay's socket towards the
//! client holds what that server's would have).
//!
//! This applies to every connection of `run`'s, whichever path carries
//! its bytes; the fast path alone reads ahead less and balances (a
//! faulted stream or the HTTP layer holds what its stages hold). Measured
//! against a real path and for throughput: docs/fidelity.md
//! ("Back-pressure"), docs/benchmarks.md.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::fault::Direction;
use crate::socket::sockopt;

/// The largest send buffer a socket in `run`'s namespace autotunes to
/// (the namespace's `tcp_wmem` maximum): 128 KiB still carries loopback's
/// rate, while a non-reading server leaves the client little queued.
pub(crate) const CLIENT_SEND_MAX: usize = 128 << 10;
/// The relay's receive buffer on the client's side (the kernel doubles
/// it): the window the client's socket sends into. Smaller cost uploads
/// their rate (32 KiB: 9.6–14.4 Gbit/s on loopback against 19).
const CLIENT_RECV: usize = 64 << 10;
/// How far the relay reads ahead of an upstream that has no room.
pub(crate) const READ_AHEAD: usize = 16 << 10;
/// What the local leg holds in front of a server that does not read —
/// the client's bounded send buffer, the relay's receive queue and its
/// read-ahead — as measured against the veth path, given back by the
/// upstream socket.
const LOCAL_HOLD: usize = 128 << 10;

/// How one connection's relay sockets are sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holding {
    /// The client is in a namespace whose send buffers netchaos bounded.
    bounded: bool,
}

impl Holding {
    /// For a client from a namespace whose send buffers are `bounded`.
    pub(crate) fn new(bounded: bool) -> Holding {
        Holding { bounded }
    }

    /// Sizes the relay's socket on the client's side, if this connection
    /// is sized at all (then its receive buffer is fixed, not grown).
    pub(crate) fn client_leg(&self, s: &TcpStream) -> bool {
        if !self.bounded {
            return false;
        }
        let _ = socket2::SockRef::from(s).set_recv_buffer_size(CLIENT_RECV);
        // Else downloads would be bounded too (loopback: 9.4–11.5 Gbit/s
        // against 17–19).
        sockopt::force_send_buffer(s, host_send_max());
        true
    }

    /// Sizes the upstream socket; `inside`: dialled inside the namespace,
    /// whose bound it must not have.
    pub(crate) fn upstream(&self, s: &TcpStream, inside: bool) {
        if self.bounded && inside {
            sockopt::force_send_buffer(s, host_send_max());
        }
    }

    /// How `dir`'s relay buffers behave, with `growth` for its source;
    /// `inside`: the upstream was dialled inside the namespace.
    pub(crate) fn buffers(
        &self,
        dir: Direction,
        inside: bool,
        growth: sockopt::RecvGrowth,
    ) -> Buffers {
        // Downloads: only a server in the namespace lost its buffer. (Its
        // stream then also keeps the relay's receive buffer at 256 KiB,
        // which still carried 15.5–21 Gbit/s.)
        let sized = self.bounded && (dir == Direction::Upstream || inside);
        Buffers {
            // Bytes that went into a balanced destination are not bytes
            // the path took: the source's buffer must not grow on them.
            growth: if sized {
                sockopt::RecvGrowth::fixed()
            } else {
                growth
            },
            read_ahead: sized.then_some(READ_AHEAD),
            balance: sized.then(Balance::default),
        }
    }
}

/// One direction's buffers on the fast path.
pub(crate) struct Buffers {
    /// The source's receive buffer ([`sockopt::RecvGrowth`]).
    pub(crate) growth: sockopt::RecvGrowth,
    /// While bytes wait for the destination, reads take no more than
    /// this much in all (`None`: up to the whole bulk buffer); a read made
    /// when nothing waits takes what the socket holds.
    pub(crate) read_ahead: Option<usize>,
    /// The destination's unsent limit, kept to its send buffer.
    pub(crate) balance: Option<Balance>,
}

impl Buffers {
    /// What a read may take now, with `held` bytes waiting for the
    /// destination and `room` free.
    pub(crate) fn readable(&self, held: usize, room: usize) -> usize {
        match self.read_ahead {
            Some(most) if held > 0 => room.min(most.saturating_sub(held)),
            _ => room,
        }
    }

    /// The destination refused bytes (its queue is full); when to look at
    /// it again, if a look is due ([`Buffers::recheck`]).
    /// While looks are due, a refusal costs nothing: the next look does
    /// what it would.
    pub(crate) fn refused(&mut self, dst: &TcpStream) -> Option<Instant> {
        let b = self.balance.as_mut()?;
        if b.step.is_some() {
            return None;
        }
        b.rebalance(dst);
        b.step = Some(FIRST_RECHECK);
        Some(Instant::now() + FIRST_RECHECK)
    }

    /// A look at a destination that refused bytes: autotuning may have
    /// grown its buffer since, on the acknowledgements of bytes it had
    /// sent (the kernel says nothing of that while the unsent limit keeps
    /// the socket unwritable). The next look, if one is due: at doubling
    /// intervals, while acknowledgements may still come.
    pub(crate) fn recheck(&mut self, dst: &TcpStream) -> Option<Instant> {
        let b = self.balance.as_mut()?;
        b.rebalance(dst);
        let step = b.step.take()? * 2;
        (step <= LAST_RECHECK).then(|| {
            b.step = Some(step);
            Instant::now() + step
        })
    }
}

/// The first look at a refusing destination's buffer, after a refusal.
const FIRST_RECHECK: Duration = Duration::from_millis(1);
/// The last look's interval: a second after a refusal, its path's
/// acknowledgements have come.
const LAST_RECHECK: Duration = Duration::from_millis(512);

/// Keeps the destination socket's unsent limit at its send buffer less
/// [`LOCAL_HOLD`]: with the server's window closed, the socket then holds
/// what the client's own would have, less what sits before it.
pub(crate) struct Balance {
    /// The limit set.
    set: usize,
    /// The interval to the next look, while looks are due.
    step: Option<Duration>,
}

impl Default for Balance {
    fn default() -> Balance {
        Balance {
            // What every relay socket starts with.
            set: sockopt::NOTSENT_LOWAT as usize,
            step: None,
        }
    }
}

impl Balance {
    fn rebalance(&mut self, dst: &TcpStream) {
        let limit = unsent_limit(sockopt::send_buffer(dst));
        // Raising the limit wakes the relay's writer (the kernel calls the
        // socket's write-space callback).
        if limit != self.set && sockopt::set_notsent_lowat(dst, limit).is_ok() {
            self.set = limit;
        }
    }
}

/// The unsent limit for a socket whose send buffer is `buffer` bytes:
/// never below the relay's usual one.
fn unsent_limit(buffer: usize) -> usize {
    buffer
        .saturating_sub(LOCAL_HOLD)
        .max(sockopt::NOTSENT_LOWAT as usize)
}

/// Where the calling thread's namespace keeps its TCP send buffers'
/// minimum, default and maximum.
pub(crate) const TCP_WMEM: &str = "/proc/sys/net/ipv4/tcp_wmem";

/// `tcp_wmem`'s three figures, from its text.
pub(crate) fn tcp_wmem(text: &str) -> Option<[usize; 3]> {
    let f: Vec<usize> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    f.try_into().ok()
}

/// The send buffer a socket in netchaos's own namespace may autotune to
/// (its `tcp_wmem` maximum; Linux's default when unreadable).
fn host_send_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string(TCP_WMEM)
            .ok()
            .and_then(|s| tcp_wmem(&s))
            .map_or(4 << 20, |[_, _, max]| max)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsent_limit_gives_back_the_local_hold_but_never_goes_below_the_usual() {
        let usual = sockopt::NOTSENT_LOWAT as usize;
        assert_eq!(unsent_limit(0), usual);
        assert_eq!(unsent_limit(usual + LOCAL_HOLD), usual);
        assert_eq!(unsent_limit(4 << 20), (4 << 20) - LOCAL_HOLD);
    }

    #[test]
    fn read_ahead_is_bounded_only_while_bytes_wait() {
        let growth = || sockopt::RecvGrowth::fixed();
        let run = Holding::new(true).buffers(Direction::Upstream, false, growth());
        assert_eq!(run.readable(0, 512 << 10), 512 << 10, "nothing waits");
        assert_eq!(run.readable(4096, 512 << 10), READ_AHEAD - 4096);
        assert_eq!(run.readable(READ_AHEAD + 1, 512 << 10), 0);
        let down = Holding::new(true).buffers(Direction::Downstream, false, growth());
        assert_eq!(down.readable(4096, 512 << 10), 512 << 10);
        assert!(down.balance.is_none(), "an outside server keeps its buffer");
        let proxy = Holding::new(false).buffers(Direction::Upstream, false, growth());
        assert_eq!(proxy.readable(4096, 512 << 10), 512 << 10);
        assert!(proxy.balance.is_none());
        let inside = Holding::new(true).buffers(Direction::Downstream, true, growth());
        assert_eq!(inside.readable(4096, 512 << 10), READ_AHEAD - 4096);
        assert!(inside.balance.is_some(), "a server inside lost its buffer");
    }
}
