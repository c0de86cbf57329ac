//! The packet delay line: `packet_latency` and `packet_rate` on the real
//! packets of a flow, where the kernel has no netem to do it (or netchaos
//! may not use it). The ruleset queues the packets of delayed flows
//! ([`nft::marks::DELAYED`]) to [`nft::DELAY_QUEUE`] on their way into the
//! namespace's `lo`; this task reads each packet's addresses and length
//! (never its payload), asks the flow's [`Path`] when it comes out, and
//! gives the kernel its verdict then — accept, or drop when the link's
//! queue is full. The kernel holds the packets meanwhile (at most
//! [`MAXLEN`]); a flow whose path is unknown (netchaos lost track of it)
//! passes at once.
//!
//! A flow is known by its client's endpoint: the source of client→server
//! packets, the destination of server→client ones (after the redirect, the
//! server side is the relay's listener or, in replies, the original
//! destination).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{MsgFlags, recv, send};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::nfqueue::{self, Verdict};
use super::nft;
use crate::fault::Direction;
use crate::fault::path::Path;

/// Packets the kernel holds for the line: 100 ms of a 1.5 Gbit/s flow at
/// MTU 1500; beyond it the kernel drops, as a full router queue would.
pub(crate) const MAXLEN: u32 = 16_384;
/// Flows remembered at most (a flow is some 200 bytes); the longest idle
/// is forgotten first.
const MAX_FLOWS: usize = 65_536;
/// A flow idle this long is forgotten (its packets would pass at once).
const IDLE: Duration = Duration::from_secs(600);
/// Packets released together: those due within this of the first.
const SLACK: Duration = Duration::from_micros(20);

struct Flow {
    path: Path,
    seen: Instant,
}

/// The paths of the delayed flows, by client endpoint.
#[derive(Default)]
pub(crate) struct DelayLine {
    flows: Mutex<HashMap<SocketAddr, Flow>>,
}

impl DelayLine {
    /// The flow from `client` crosses `path` from now on (a reused
    /// endpoint's old path is replaced).
    pub(crate) fn add(&self, client: SocketAddr, path: Path) {
        let now = Instant::now();
        let mut flows = self.flows.lock().expect("delay line lock");
        if flows.len() >= MAX_FLOWS {
            flows.retain(|_, f| now.duration_since(f.seen) < IDLE);
            if flows.len() >= MAX_FLOWS
                && let Some(oldest) = flows.iter().min_by_key(|(_, f)| f.seen).map(|(k, _)| *k)
            {
                flows.remove(&oldest);
            }
        }
        flows.insert(client, Flow { path, seen: now });
    }

    /// When the packet from `src` to `dst` of `len` bytes, arriving at
    /// `now`, comes out: `Some(None)` for a flow the line does not know (at
    /// once), `None` when its link drops it.
    fn admit(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        len: usize,
        now: Instant,
    ) -> Option<Option<Instant>> {
        let mut flows = self.flows.lock().expect("delay line lock");
        let (flow, dir) = if let Some(f) = flows.get_mut(&src) {
            (f, Direction::Upstream)
        } else if let Some(f) = flows.get_mut(&dst) {
            (f, Direction::Downstream)
        } else {
            return Some(None);
        };
        flow.seen = now;
        flow.path.link(dir).admit(now, len).map(Some)
    }

    fn forget_idle(&self, now: Instant) {
        let mut flows = self.flows.lock().expect("delay line lock");
        flows.retain(|_, f| now.duration_since(f.seen) < IDLE);
    }
}

/// A TCP packet's endpoints and its length on the wire (IP length, plus an
/// Ethernet header as a link would carry it); `None` for anything else.
pub(crate) fn endpoints(p: &[u8]) -> Option<(SocketAddr, SocketAddr, usize)> {
    let (src, dst, len, tcp): (IpAddr, IpAddr, usize, &[u8]) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if p.len() < ihl + 4 || p[9] != 6 {
                return None;
            }
            let a = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let b = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
            (a.into(), b.into(), len, &p[ihl..])
        }
        6 => {
            if p.len() < 44 || p[6] != 6 {
                return None;
            }
            let a: [u8; 16] = p[8..24].try_into().ok()?;
            let b: [u8; 16] = p[24..40].try_into().ok()?;
            let len = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
            (
                Ipv6Addr::from(a).into(),
                Ipv6Addr::from(b).into(),
                len,
                &p[40..],
            )
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    Some((
        SocketAddr::new(src, sport),
        SocketAddr::new(dst, dport),
        len + 14,
    ))
}

/// Reads the queue and releases every packet at its time, until the task
/// is dropped.
pub(crate) async fn run(queue: OwnedFd, line: Arc<DelayLine>) {
    if let Err(e) = nix::fcntl::fcntl(
        &queue,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    ) {
        tracing::error!("packet delay line: {e}");
        return;
    }
    // SAFETY: `queue` is an OwnedFd moved into the AsyncFd, so the
    // descriptor stays open and the same for the AsyncFd's whole life.
    let queue = match unsafe { AsyncFd::register(queue) } {
        Ok(q) => q,
        Err(e) => {
            tracing::error!("packet delay line: {e}");
            return;
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    // (release time, arrival order, packet id)
    let mut held: BinaryHeap<Reverse<(Instant, u64, u32)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut batch = Vec::with_capacity(64 * 1024);
    let mut next_sweep = Instant::now() + IDLE;
    let mut warned = false;
    let alarm = crate::timer::Alarm::new();
    loop {
        let due = held.peek().map(|Reverse((t, _, _))| *t);
        tokio::select! {
            biased;
            _ = alarm.sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
            ready = queue.readable() => {
                let Ok(mut guard) = ready else { return };
                // Everything queued now, up to a bound, then releases.
                for _ in 0..256 {
                    let n = match guard.try_io(|q| {
                        recv(q.get_ref().as_raw_fd(), &mut buf, MsgFlags::empty())
                            .map_err(std::io::Error::from)
                    }) {
                        Ok(Ok(n)) => n,
                        Ok(Err(e)) => {
                            // ENOBUFS: the kernel dropped packets it could
                            // not hand over; their senders retransmit.
                            if !warned {
                                tracing::warn!("packet delay line: {e} (packets dropped)");
                                warned = true;
                            }
                            continue;
                        }
                        Err(_would_block) => break,
                    };
                    let now = Instant::now();
                    for p in nfqueue::packets(&buf[..n]) {
                        let fate = match endpoints(&p.payload) {
                            Some((src, dst, len)) => line.admit(src, dst, len, now),
                            None => Some(None),
                        };
                        match fate {
                            Some(Some(at)) if at > now => {
                                held.push(Reverse((at, order, p.id)));
                                order += 1;
                            }
                            Some(_) => nfqueue::push_verdict(&mut batch, nft::DELAY_QUEUE, p.id, Verdict::Accept(None)),
                            None => nfqueue::push_verdict(&mut batch, nft::DELAY_QUEUE, p.id, Verdict::Drop),
                        }
                    }
                }
            }
        }
        let now = Instant::now();
        while let Some(Reverse((t, _, id))) = held.peek().copied() {
            if t > now + SLACK {
                break;
            }
            held.pop();
            nfqueue::push_verdict(&mut batch, nft::DELAY_QUEUE, id, Verdict::Accept(None));
        }
        flush(&queue, &mut batch).await;
        if now >= next_sweep {
            line.forget_idle(now);
            next_sweep = now + IDLE;
        }
    }
}

/// Sends the batched verdicts (netlink takes many messages per `send`; a
/// batch is cut at 60 KiB to stay within one datagram).
async fn flush(queue: &AsyncFd<OwnedFd>, batch: &mut Vec<u8>) {
    const CHUNK: usize = 60 * 1024;
    let mut at = 0;
    while at < batch.len() {
        // Cut on a message boundary: every verdict is the same length.
        let one = nfqueue::verdict_msg(nft::DELAY_QUEUE, 0, Verdict::Accept(None)).len();
        let drop_len = nfqueue::verdict_msg(nft::DELAY_QUEUE, 0, Verdict::Drop).len();
        debug_assert_eq!(one, drop_len);
        let end = (at + CHUNK / one * one).min(batch.len());
        let Ok(mut guard) = queue.writable().await else {
            break;
        };
        match guard.try_io(|q| {
            send(q.get_ref().as_raw_fd(), &batch[at..end], MsgFlags::empty())
                .map_err(std::io::Error::from)
        }) {
            Ok(Ok(_)) => at = end,
            Ok(Err(e)) => {
                tracing::warn!("packet delay line verdicts: {e}");
                break;
            }
            Err(_would_block) => continue,
        }
    }
    batch.clear();
}
