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
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nix::sys::socket::{MsgFlags, recv};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::nfqueue::{self, Verdict};
use super::nft;
use crate::fault::Direction;
use crate::fault::path::Path;
use crate::relay::arrival;
use crate::timer;

/// Packets the kernel holds for the line: 100 ms of a 1.5 Gbit/s flow at
/// MTU 1500; beyond it the kernel drops, as a full router queue would.
pub(crate) const MAXLEN: u32 = 16_384;
/// Flows remembered at most (a flow is some 200 bytes); beyond, new
/// connections are not delayed (and netchaos says so once).
const MAX_FLOWS: usize = 65_536;
/// A flow forgotten without its connection's end (a client that gave up
/// before the relay accepted it): idle this long.
const IDLE: Duration = Duration::from_secs(6 * 3600);
/// After its connection ends a flow is kept this much longer than its
/// path's delay, for the last packets (FIN, the final ACKs) still to cross.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Packets released together: those due within this of the first.
const SLACK: Duration = Duration::from_micros(20);
/// How often ended and idle flows are swept.
const SWEEP: Duration = Duration::from_secs(1);

struct Flow {
    path: Path,
    /// When its SYN was let through: a connection that began before it
    /// was someone else's on the same endpoint.
    added: Instant,
    seen: Instant,
    /// When it may be forgotten, once its connection has ended.
    gone_at: Option<Instant>,
}

/// The paths of the delayed flows, by client endpoint.
#[derive(Default)]
pub(crate) struct DelayLine {
    flows: Mutex<HashMap<SocketAddr, Flow>>,
    warned_full: std::sync::atomic::AtomicBool,
}

impl DelayLine {
    /// The flow from `client` crosses `path` from now on (a reused
    /// endpoint's old path is replaced); `false` when the line remembers
    /// as many flows as it may, and this one is not delayed.
    pub(crate) fn add(&self, client: SocketAddr, path: Path) -> bool {
        let now = Instant::now();
        let mut flows = self.flows.lock().expect("delay line lock");
        if flows.len() >= MAX_FLOWS && !flows.contains_key(&client) {
            sweep(&mut flows, now);
            if flows.len() >= MAX_FLOWS {
                if !self
                    .warned_full
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(
                        "the packet delay line holds {MAX_FLOWS} flows: new connections pass undelayed until some end"
                    );
                }
                return false;
            }
        }
        flows.insert(
            client,
            Flow {
                path,
                added: now,
                seen: now,
                gone_at: None,
            },
        );
        true
    }

    /// `client`'s connection, accepted at `opened`, has ended: its flow
    /// goes once the packets still on the path have crossed it. A flow
    /// added after `opened` belongs to a newer connection from a reused
    /// endpoint, and stays.
    pub(crate) fn closed(&self, client: SocketAddr, opened: std::time::Instant) {
        let now = Instant::now();
        let opened = Instant::from_std(opened);
        if let Some(f) = self.flows.lock().expect("delay line lock").get_mut(&client)
            && f.added <= opened
        {
            f.gone_at = Some(now + f.path.longest_delay() + CLOSE_GRACE);
        }
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

    fn sweep(&self, now: Instant) {
        sweep(&mut self.flows.lock().expect("delay line lock"), now);
    }
}

/// Forgets the flows whose connection ended (and the packets after it have
/// crossed), and those idle past [`IDLE`].
fn sweep(flows: &mut HashMap<SocketAddr, Flow>, now: Instant) {
    flows.retain(|_, f| f.gone_at.is_none_or(|t| t > now) && now.duration_since(f.seen) < IDLE);
}

/// A TCP packet's endpoints and its length on the wire (IP length, plus an
/// Ethernet header as a link would carry it); `None` for anything else.
pub(crate) fn endpoints(p: &[u8]) -> Option<(SocketAddr, SocketAddr, usize)> {
    let (src, dst, len, _) = nfqueue::tcp_packet(p)?;
    Some((src, dst, len + 14))
}

/// Reads the queue and releases every packet at its time, until the task
/// is dropped.
pub(crate) async fn run(queue: OwnedFd, line: Arc<DelayLine>) {
    // Each packet dated by when the kernel queued it, not when this task
    // woke to read it (from idle, tens to hundreds of microseconds later).
    if !nfqueue::stamp_packets(&queue) {
        tracing::debug!("packet delay line: no queue stamps; packets dated when read");
    }
    let queue = match nfqueue::into_async(queue) {
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
    let mut next_sweep = Instant::now() + SWEEP;
    let mut warned = false;
    // Without a timerfd (fd exhaustion), or on a paused clock, the
    // runtime's timer: coarser. Chosen once, not per packet.
    let alarm = timer::Alarm::new()
        .ok()
        .filter(|_| !timer::on_runtime_clock());
    loop {
        let due = held.peek().map(|Reverse((t, _, _))| *t);
        tokio::select! {
            biased;
            _ = release_at(alarm.as_ref(), due.unwrap_or_else(Instant::now)), if due.is_some() => {}
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
                    let (now, wall) = (Instant::now(), SystemTime::now());
                    for p in nfqueue::packets(&buf[..n]) {
                        let queued = arrival::dated(p.queued, now, wall);
                        let fate = match endpoints(&p.payload) {
                            Some((src, dst, len)) => line.admit(src, dst, len, queued),
                            None => Some(None),
                        };
                        match fate {
                            // Through the heap even when due now: a flow's
                            // earlier packets may be due too, and go first.
                            Some(Some(at)) => {
                                held.push(Reverse((at, order, p.id)));
                                order += 1;
                            }
                            Some(None) => nfqueue::push_verdict(&mut batch, nft::DELAY_QUEUE, p.id, Verdict::Accept(None)),
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
            line.sweep(now);
            next_sweep = now + SWEEP;
        }
    }
}

/// Waits until `at` for the next release. When that is more than
/// [`QUIET`] away the CPU is likely to fall deep asleep and wake late
/// (here, after 25 ms idle: 0.15 ms at the median, 0.3 ms at p90; twice
/// per handshake, the SYN's release and the SYN-ACK's), so the alarm is
/// set [`QUIET_LEAD`] early and the rest is spun: at most that much CPU
/// per `QUIET` waited, and never while packets come densely (a bulk
/// transfer's releases are microseconds apart).
async fn release_at(alarm: Option<&timer::Alarm>, at: Instant) {
    let Some(a) = alarm else {
        return tokio::time::sleep_until(at).await;
    };
    let quiet = at.saturating_duration_since(Instant::now()) > QUIET;
    let wake = if quiet { at - QUIET_LEAD } else { at };
    if a.wait_until(wake).await.is_err() {
        return tokio::time::sleep_until(at).await;
    }
    if quiet {
        timer::spin_until(at).await;
    }
}

/// How early the alarm for a release after a quiet is set: past the p90
/// of a wake from idle (the stream timers' [`timer::SPIN`] covers the
/// median; a handshake crosses the line twice, so its tail counts twice).
/// Packet latency 50 ms, connect p50 over the no-fault connect: +0.36 ms
/// with SPIN, +0.23 with this (4 interleaved rounds of 100 connects; the
/// p99s were within each other's noise).
const QUIET_LEAD: Duration = Duration::from_micros(500);

/// A wait for a release further away than this ends in a spin (see
/// [`release_at`]).
const QUIET: Duration = Duration::from_millis(5);

/// Sends the batched verdicts (netlink takes many messages per `send`; a
/// batch is cut at 60 KiB to stay within one datagram). Should a batch be
/// refused, each verdict is sent on its own: a packet left without one
/// would hold its place in the kernel's queue for good.
async fn flush(queue: &AsyncFd<OwnedFd>, batch: &mut Vec<u8>) {
    // Every verdict message has the same length (no mark attribute).
    let one = nfqueue::verdict_msg(nft::DELAY_QUEUE, 0, Verdict::Accept(None)).len();
    let chunk = 60 * 1024 / one * one;
    let mut at = 0;
    while at < batch.len() {
        let end = (at + chunk).min(batch.len());
        match nfqueue::send_async(queue, &batch[at..end]).await {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!("packet delay line verdicts: {e}; sending them one by one");
                for m in batch[at..end].chunks(one) {
                    if let Err(e) = nfqueue::send_async(queue, m).await {
                        tracing::warn!("packet delay line verdict: {e}");
                    }
                }
            }
        }
        at = end;
    }
    batch.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::Chosen;
    use std::sync::Arc;

    fn path(delay: &str) -> Path {
        let c = Chosen {
            id: 1,
            rule: "r".into(),
            spec: Arc::new(
                crate::fault::testing::spec("packet_latency", &[("delay", delay)]).unwrap(),
            ),
            seed: 1,
        };
        Path::of(&[&c], Instant::now()).unwrap()
    }

    fn v4(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, len: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn endpoints_and_wire_length_of_tcp_packets_only() {
        let (s, d, len) =
            endpoints(&v4([127, 0, 0, 1], 40000, [127, 0, 0, 1], 8080, 1500)).unwrap();
        assert_eq!(s, "127.0.0.1:40000".parse().unwrap());
        assert_eq!(d, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(len, 1514, "IP length and an Ethernet header");
        let mut udp = v4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 60);
        udp[9] = 17;
        assert!(endpoints(&udp).is_none());
        let mut short_header = v4([1, 1, 1, 1], 1, [2, 2, 2, 2], 2, 60);
        short_header[0] = 0x41;
        assert!(
            endpoints(&short_header).is_none(),
            "an IHL below 5 is not a header"
        );
        assert!(endpoints(&[0x60; 20]).is_none());
        assert!(endpoints(&[]).is_none());
    }

    #[test]
    fn a_flow_is_found_both_ways_and_forgotten_after_its_connection() {
        let line = DelayLine::default();
        let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let relay: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let server: SocketAddr = "10.0.0.1:443".parse().unwrap();
        assert!(line.add(client, path("20ms")));
        let t0 = Instant::now();
        let up = line.admit(client, relay, 100, t0).unwrap().unwrap();
        let down = line.admit(server, client, 100, t0).unwrap().unwrap();
        assert_eq!(
            (up - t0, down - t0),
            (Duration::from_millis(10), Duration::from_millis(10))
        );
        assert_eq!(
            line.admit(server, relay, 100, t0),
            Some(None),
            "another flow passes"
        );
        line.closed(client, std::time::Instant::now());
        line.sweep(Instant::now() + Duration::from_secs(1));
        assert!(
            line.admit(client, relay, 100, t0).unwrap().is_some(),
            "kept for the last packets"
        );
        line.sweep(Instant::now() + Duration::from_secs(3));
        assert_eq!(line.admit(client, relay, 100, t0), Some(None), "forgotten");
    }

    #[test]
    fn an_old_connection_ending_leaves_a_reused_endpoints_new_flow() {
        let line = DelayLine::default();
        let client: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let relay: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let old_opened = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        // The endpoint's next SYN, while the old connection's relay task
        // is still ending.
        assert!(line.add(client, path("20ms")));
        line.closed(client, old_opened);
        line.sweep(Instant::now() + Duration::from_secs(3));
        assert!(
            line.admit(client, relay, 100, Instant::now())
                .unwrap()
                .is_some(),
            "the new flow is still delayed"
        );
    }
}
