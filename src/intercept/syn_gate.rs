//! The SYN gate: connect-phase faults and connect-phase truth.
//!
//! Every new outbound SYN in the namespace is queued (NFQUEUE) to netchaos
//! before the redirect, while it still names its real destination. The gate
//! decides the connection's faults once — retransmitted SYNs (same source
//! and initial sequence number) share the first one's fate — and then:
//!
//! * `refuse`: accept the SYN with a mark that the ruleset answers with an
//!   RST, so `connect()` fails with ECONNREFUSED;
//! * `connect_timeout`: drop it, and every retransmission;
//! * `connect_delay`: hold it for the delay, then go on;
//! * otherwise dial the real destination first, holding the SYN: if the
//!   upstream accepts, let the SYN through (the relay takes over the dialled
//!   socket when it accepts the client); if it refuses, answer RST; if it is
//!   unreachable, ICMP host-unreachable; if it never answers, keep dropping.
//!   So the client's `connect()` sees what it would have seen without
//!   netchaos — never "connected, then reset".
//!
//! The accepted SYN's mark also carries the connection's `loss` rule, which
//! the ruleset copies onto the connection (conntrack mark).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{MsgFlags, recv};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::nfqueue::{self, Verdict};
use super::nft::{LossRule, QUEUE, marks};
use super::sandbox::Sandbox;
use crate::events::{ConnInfo, FaultHit};
use crate::fault::{Direction, FaultKind, FaultSpec, Stream};
use crate::plan::{Chosen, ConnMeta, Flow, Plan};
use crate::relay::{self, DialError, Relay};
use crate::ruleset::ConnFaults;

/// How long a decided SYN is remembered, to give retransmissions its fate.
const REMEMBER: Duration = Duration::from_secs(120);
/// How long a dialled upstream waits for the relay to accept the client.
const HANDOFF_TTL: Duration = Duration::from_secs(30);
/// How long a SYN is remembered once the relay has its connection: the
/// client stops retransmitting when the handshake completes, so only
/// duplicates already in flight can still come. Keeping these for all of
/// [`REMEMBER`] made the table (and its sweeps) grow with the connection
/// rate times two minutes.
const CLAIMED_TTL: Duration = Duration::from_secs(10);
/// The table size below which only the periodic sweep runs.
const SWEEP_MIN: usize = 1024;

/// What the relay takes over when it accepts a gated client.
pub struct Handoff {
    pub seq: u64,
    /// The connection's rules and draws (it follows them while it runs).
    pub faults: ConnFaults,
    pub names: Vec<String>,
    /// The upstream, already connected (none for `respond`, or for a
    /// service inside the namespace).
    pub upstream: Option<TcpStream>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Being decided: retransmissions are dropped meanwhile.
    Held,
    Accept(u32),
    Drop,
}

struct Entry {
    isn: u32,
    fate: Fate,
    at: Instant,
    handoff: Option<Handoff>,
    /// The relay took this connection over.
    claimed: bool,
}

impl Entry {
    /// A SYN seen now, its fate being decided.
    fn held(isn: u32) -> Entry {
        Entry {
            isn,
            fate: Fate::Held,
            at: Instant::now(),
            handoff: None,
            claimed: false,
        }
    }
}

/// A connection as the gate saw its SYN: (client, original destination).
/// Both are needed: a client may use one source port for connections to
/// different destinations at the same time.
type Key = (SocketAddr, SocketAddr);

/// The relay's own dial, as its SYN shows it: (local port, destination
/// address, destination port).
type OwnKey = (u16, IpAddr, u16);

/// The gate's memory of SYNs, shared with the relay.
pub struct Gate {
    entries: Mutex<HashMap<Key, Entry>>,
    /// Dials the relay is making from inside the namespace: their SYNs
    /// pass uninterceptable. Known by 4-tuple, which no other socket can
    /// hold at the same time — unlike a socket mark, which any process
    /// with CAP_NET_RAW in the namespace can set.
    own: Mutex<std::collections::HashSet<OwnKey>>,
    losses: LossTable,
    /// SYNs remembered since the last sweep.
    since_sweep: std::sync::atomic::AtomicUsize,
    /// Sweep at once when the table reaches this size (twice what the last
    /// sweep left, so sweeping stays amortised O(1) per SYN).
    sweep_at: std::sync::atomic::AtomicUsize,
}

impl Gate {
    pub fn new(losses: LossTable) -> Gate {
        Gate {
            entries: Mutex::new(HashMap::new()),
            own: Mutex::new(std::collections::HashSet::new()),
            losses,
            since_sweep: std::sync::atomic::AtomicUsize::new(0),
            sweep_at: std::sync::atomic::AtomicUsize::new(SWEEP_MIN),
        }
    }

    /// The decisions and dialled upstream for a client the relay accepted
    /// (`client` as the relay sees it, `dst` its original destination).
    ///
    /// The redirect may have given the client another source port: when
    /// its redirected tuple clashes with an earlier connection's that
    /// conntrack still remembers (same client port, another original
    /// destination, both now pointing at the relay), NAT picks a free port.
    /// The gate, which saw the SYN before NAT, then knows it by its old
    /// port; the oldest unclaimed upstream dialled for the same client
    /// address and destination is this connection's (they are equivalent:
    /// fresh connections to the same place).
    pub fn take(&self, client: SocketAddr, dst: Option<SocketAddr>) -> Option<Handoff> {
        let dst = dst?;
        let mut entries = self.entries.lock().expect("gate lock");
        if let Some(e) = entries
            .get_mut(&(client, dst))
            .filter(|e| e.handoff.is_some())
        {
            e.claimed = true;
            return e.handoff.take();
        }
        let e = entries
            .iter_mut()
            .filter(|((src, d), e)| e.handoff.is_some() && *d == dst && src.ip() == client.ip())
            .min_by_key(|(_, e)| e.at)?
            .1;
        e.claimed = true;
        e.handoff.take()
    }

    /// Marks a dial of the relay's own, from `local_port` to `dst`, until
    /// the returned guard is dropped (once it is connected or failed).
    pub fn expect_own(&self, local_port: u16, dst: SocketAddr) -> OwnDial<'_> {
        let key = (local_port, dst.ip(), dst.port());
        self.own.lock().expect("gate lock").insert(key);
        OwnDial { gate: self, key }
    }

    fn is_own(&self, syn: &Syn) -> bool {
        let key = (syn.src.port(), syn.dst.ip(), syn.dst.port());
        self.own.lock().expect("gate lock").contains(&key)
    }

    fn settle(&self, key: Key, isn: u32, fate: Fate, handoff: Option<Handoff>) {
        let mut entries = self.entries.lock().expect("gate lock");
        // Only the SYN's own entry: a new connection on the same tuple may
        // have taken its place meanwhile.
        if let Some(e) = entries.get_mut(&key).filter(|e| e.isn == isn) {
            e.fate = fate;
            e.handoff = handoff;
        }
    }

    /// Forgets old SYNs, connections the relay has had for a while, and
    /// upstreams nobody claimed; gives memory back when the table shrank.
    fn sweep(&self, entries: &mut HashMap<Key, Entry>) {
        let now = Instant::now();
        entries.retain(|_, e| {
            let age = now.duration_since(e.at);
            age < REMEMBER
                && !(e.handoff.is_some() && age > HANDOFF_TTL)
                && !(e.claimed && age > CLAIMED_TTL)
        });
        if entries.capacity() > 4 * entries.len().max(SWEEP_MIN) {
            entries.shrink_to(2 * entries.len());
        }
        self.sweep_at.store(
            (2 * entries.len()).max(SWEEP_MIN),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// A dial of the relay's own in progress (see [`Gate::expect_own`]).
pub struct OwnDial<'a> {
    gate: &'a Gate,
    key: OwnKey,
}

impl Drop for OwnDial<'_> {
    fn drop(&mut self) {
        self.gate.own.lock().expect("gate lock").remove(&self.key);
    }
}

/// The plan's `loss` faults, numbered for the ruleset (at most 255).
#[derive(Default)]
pub struct LossTable {
    entries: Vec<(Arc<FaultSpec>, LossRule)>,
}

impl LossTable {
    pub fn from_plan(plan: &Plan) -> Result<LossTable, String> {
        let mut entries = Vec::new();
        for spec in plan.rules.iter().flat_map(|r| r.faults.iter()) {
            if let FaultKind::Loss(l) = &spec.kind {
                let index = u8::try_from(entries.len() + 1)
                    .map_err(|_| "at most 255 loss faults are supported".to_string())?;
                let direction = match spec.stream {
                    Stream::Upstream => Some("original"),
                    Stream::Downstream => Some("reply"),
                    Stream::Both => None,
                };
                entries.push((
                    spec.clone(),
                    LossRule {
                        index,
                        ppm: l.ppm(),
                        direction,
                    },
                ));
            }
        }
        Ok(LossTable { entries })
    }

    pub fn rules(&self) -> Vec<LossRule> {
        self.entries.iter().map(|(_, r)| *r).collect()
    }

    fn index_of(&self, spec: &Arc<FaultSpec>) -> Option<u8> {
        self.entries
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, spec))
            .map(|(_, r)| r.index)
    }
}

/// A parsed outbound SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syn {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Initial sequence number: the same on retransmissions.
    pub isn: u32,
}

/// Reads the addresses, ports and sequence number of a TCP SYN in an IPv4
/// or IPv6 packet (no extension headers); `None` for anything else.
pub fn parse_syn(p: &[u8]) -> Option<Syn> {
    let (src, dst, tcp): (IpAddr, IpAddr, &[u8]) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if p.len() < ihl + 20 || p[9] != 6 {
                return None;
            }
            let a = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let b = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            (a.into(), b.into(), &p[ihl..])
        }
        6 => {
            if p.len() < 60 || p[6] != 6 {
                return None;
            }
            let a: [u8; 16] = p[8..24].try_into().ok()?;
            let b: [u8; 16] = p[24..40].try_into().ok()?;
            (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into(), &p[40..])
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    let isn = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let flags = tcp[13];
    if flags & 0x12 != 0x02 {
        return None; // not a bare SYN
    }
    Some(Syn {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        isn,
    })
}

/// Reads the queue and settles every SYN, until the task is dropped.
pub async fn run(queue: OwnedFd, relay: Arc<Relay>, sandbox: Arc<Sandbox>) {
    if let Err(e) = nix::fcntl::fcntl(
        &queue,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    ) {
        tracing::error!("SYN gate: {e}");
        return;
    }
    // SAFETY: `queue` is an OwnedFd moved into the AsyncFd, so the
    // descriptor stays open and the same for the AsyncFd's whole life.
    let queue = match unsafe { AsyncFd::register(queue) } {
        Ok(q) => Arc::new(q),
        Err(e) => {
            tracing::error!("SYN gate: {e}");
            return;
        }
    };
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let Ok(mut guard) = queue.readable().await else {
            return;
        };
        let n = match guard.try_io(|q| {
            recv(q.get_ref().as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(std::io::Error::from)
        }) {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                // ENOBUFS: the kernel could not hand us some packets and
                // dropped them; their clients retransmit the SYNs.
                tracing::warn!("SYN gate: {e}");
                continue;
            }
            Err(_would_block) => continue,
        };
        for p in nfqueue::packets(&buf[..n]) {
            on_packet(p, &queue, &relay, &sandbox);
        }
    }
}

fn on_packet(
    p: nfqueue::Packet,
    queue: &Arc<AsyncFd<OwnedFd>>,
    relay: &Arc<Relay>,
    sandbox: &Arc<Sandbox>,
) {
    let Some(syn) = parse_syn(&p.payload) else {
        verdict(queue, p.id, Verdict::Accept(None));
        return;
    };
    // The relay's own dial (retransmissions too): past the redirect. Any
    // other SYN gets a verdict of ours, which replaces whatever mark its
    // socket set.
    if sandbox.gate.is_own(&syn) {
        verdict(queue, p.id, Verdict::Accept(Some(marks::RELAY)));
        return;
    }
    {
        let mut entries = sandbox.gate.entries.lock().expect("gate lock");
        if let Some(e) = entries.get(&(syn.src, syn.dst)) {
            if e.isn == syn.isn && e.at.elapsed() < REMEMBER {
                // A retransmission: the first SYN's fate.
                let v = match e.fate {
                    Fate::Held | Fate::Drop => Verdict::Drop,
                    Fate::Accept(mark) => Verdict::Accept(Some(mark)),
                };
                drop(entries);
                verdict(queue, p.id, v);
                return;
            }
        }
        // Now and then (and whenever the table is large), forget old SYNs
        // and close upstreams nobody claimed.
        let n = sandbox
            .gate
            .since_sweep
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let full = entries.len()
            >= sandbox
                .gate
                .sweep_at
                .load(std::sync::atomic::Ordering::Relaxed);
        if full || n % 256 == 255 {
            sandbox.gate.sweep(&mut entries);
        }
        entries.insert((syn.src, syn.dst), Entry::held(syn.isn));
    }
    let (queue, relay, sandbox) = (queue.clone(), relay.clone(), sandbox.clone());
    tokio::spawn(async move {
        let (fate, handoff) = decide(syn, &relay, &sandbox).await;
        sandbox
            .gate
            .settle((syn.src, syn.dst), syn.isn, fate, handoff);
        let v = match fate {
            Fate::Accept(mark) => Verdict::Accept(Some(mark)),
            Fate::Drop | Fate::Held => Verdict::Drop,
        };
        verdict(&queue, p.id, v);
    });
}

fn verdict(queue: &AsyncFd<OwnedFd>, id: u32, v: Verdict) {
    // A verdict is a few dozen bytes; retry briefly if the socket is full.
    for _ in 0..100 {
        match nfqueue::send_verdict(queue.get_ref(), QUEUE, id, v) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(100))
            }
            Err(e) => {
                tracing::warn!("SYN gate verdict: {e}");
                return;
            }
            Ok(()) => return,
        }
    }
}

/// One connection's fate: its faults, then the upstream's own answer.
async fn decide(syn: Syn, relay: &Arc<Relay>, sandbox: &Arc<Sandbox>) -> (Fate, Option<Handoff>) {
    let seq = relay.next_seq();
    let names = sandbox.names.names(syn.dst.ip());
    let meta = ConnMeta {
        flow: Flow::Outbound,
        proxy: None,
        ip: Some(syn.dst.ip()),
        names: &names,
        port: syn.dst.port(),
    };
    let elapsed = relay.epoch.elapsed();
    let mut faults = relay.rules.connect(&meta, seq);
    let chosen = faults.chosen(elapsed);
    let info = Arc::new(ConnInfo {
        id: seq,
        client: syn.src,
        dst: syn.dst.to_string(),
        host: names.first().cloned(),
        proxy: Some(sandbox.label.clone()),
        counters: relay.events.stats.proxy(&sandbox.label),
    });
    let hit = |c: &Chosen| {
        FaultHit::new(
            relay.events.clone(),
            info.clone(),
            c.rule.clone(),
            c.spec.clone(),
            None,
        )
    };
    // Ended here: recorded as a connection that never reached the relay.
    let ended = |outcome: &str| {
        relay.events.conn_open(&info);
        relay
            .events
            .conn_close(&info, outcome, [0, 0], Duration::ZERO);
    };
    if relay.at_capacity() {
        relay.events.refused_at_limit(&info);
        return (Fate::Accept(marks::REFUSE), None);
    }
    for c in chosen.iter().filter(|c| c.spec.active.contains(elapsed)) {
        match &c.spec.kind {
            FaultKind::Refuse(_) => {
                hit(c).fire();
                ended("refused");
                return (Fate::Accept(marks::REFUSE), None);
            }
            FaultKind::ConnectTimeout(_) => {
                hit(c).fire();
                ended("connect_timeout");
                return (Fate::Drop, None);
            }
            FaultKind::ConnectDelay(d) => {
                hit(c).fire();
                tokio::time::sleep(d.sample(&mut c.rng(Direction::Upstream))).await;
            }
            _ => {}
        }
    }
    let respond = chosen
        .iter()
        .any(|c| matches!(c.spec.kind, FaultKind::Respond(_)));
    // Under `run`, a service of the command's own on loopback is dialled by
    // the relay later, through the agent; everything else is dialled now,
    // while the SYN waits: from the host, or (attach, in-place) from inside.
    let from_inside = sandbox.dials_inside();
    // The namespace's own addresses are never dialled from the host, where
    // they would be someone else: nothing listening inside is a refusal,
    // as it would be without netchaos.
    let own = !from_inside && sandbox.is_own(syn.dst);
    let listening_inside = (own || relay::is_loopback(syn.dst)) && sandbox.listens_inside(syn.dst);
    if own && !listening_inside && !respond {
        ended("dial_refused");
        return (Fate::Accept(marks::REFUSE), None);
    }
    let later = !from_inside && listening_inside;
    let upstream = if respond || later {
        None
    } else {
        let inside = from_inside.then_some(sandbox);
        match relay::dial::dial(syn.dst, relay.opts.dial_timeout, inside).await {
            Ok(s) => Some(s),
            Err(e) => {
                relay.events.relay_error(&info, e.kind(), &e.to_string());
                ended("dial_failed");
                // What the client would have met without netchaos; only a
                // silent upstream leaves it waiting.
                return match e {
                    DialError::Refused(_) => (Fate::Accept(marks::REFUSE), None),
                    DialError::Unreachable(_) | DialError::Other(_) => {
                        (Fate::Accept(marks::UNREACHABLE), None)
                    }
                    DialError::NetUnreachable(_) => (Fate::Accept(marks::NET_UNREACHABLE), None),
                    DialError::Prohibited(_) => (Fate::Accept(marks::PROHIBITED), None),
                    DialError::Timeout(_) => (Fate::Drop, None),
                };
            }
        }
    };
    let loss = chosen
        .iter()
        .filter(|c| c.spec.active.contains(elapsed))
        .find_map(|c| sandbox.gate.losses.index_of(&c.spec).map(|i| (c, i)));
    if let Some((c, _)) = loss {
        hit(c).fire();
    }
    let mark = marks::TRACK | u32::from(loss.map_or(0, |(_, i)| i));
    let handoff = Handoff {
        seq,
        faults,
        names,
        upstream,
    };
    (Fate::Accept(mark), Some(handoff))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_syn(flags: u8) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p[16..20].copy_from_slice(&[10, 1, 2, 3]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&443u16.to_be_bytes());
        p[24..28].copy_from_slice(&0xdeadbeefu32.to_be_bytes());
        p[33] = flags;
        p
    }

    #[test]
    fn parses_ipv4_and_ipv6_syns() {
        let s = parse_syn(&v4_syn(0x02)).unwrap();
        assert_eq!(s.src, "192.0.2.1:40000".parse().unwrap());
        assert_eq!(s.dst, "10.1.2.3:443".parse().unwrap());
        assert_eq!(s.isn, 0xdeadbeef);
        assert!(
            parse_syn(&v4_syn(0x12)).is_none(),
            "SYN-ACK is not a new connection"
        );
        assert!(parse_syn(&v4_syn(0x10)).is_none());
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[6] = 6;
        v6[23] = 1; // ::1
        v6[39] = 1;
        v6[40..42].copy_from_slice(&1234u16.to_be_bytes());
        v6[42..44].copy_from_slice(&80u16.to_be_bytes());
        v6[53] = 0x02;
        let s = parse_syn(&v6).unwrap();
        assert_eq!(s.dst, "[::1]:80".parse().unwrap());
        assert!(parse_syn(&[0x45]).is_none());
        assert!(parse_syn(&[]).is_none());
    }

    fn handoff(seq: u64) -> Handoff {
        let rules = crate::ruleset::RuleSet::from_plan(&Plan::default());
        let meta = ConnMeta {
            flow: Flow::Outbound,
            proxy: None,
            ip: None,
            names: &[],
            port: 0,
        };
        Handoff {
            seq,
            faults: rules.connect(&meta, seq),
            names: Vec::new(),
            upstream: None,
        }
    }

    fn remember(gate: &Gate, src: &str, dst: &str, isn: u32, seq: u64) {
        let key = (src.parse().unwrap(), dst.parse().unwrap());
        gate.entries.lock().unwrap().insert(key, Entry::held(isn));
        gate.settle(key, isn, Fate::Accept(marks::TRACK), Some(handoff(seq)));
        std::thread::sleep(Duration::from_millis(2)); // distinct ages
    }

    #[test]
    fn one_source_port_to_two_destinations_keeps_two_handoffs() {
        let gate = Gate::new(LossTable::default());
        remember(&gate, "127.0.0.1:40000", "127.0.0.1:80", 1, 1);
        remember(&gate, "127.0.0.1:40000", "127.0.0.1:81", 2, 2);
        let c = "127.0.0.1:40000".parse().unwrap();
        let h81 = gate.take(c, Some("127.0.0.1:81".parse().unwrap())).unwrap();
        let h80 = gate.take(c, Some("127.0.0.1:80".parse().unwrap())).unwrap();
        assert_eq!((h80.seq, h81.seq), (1, 2));
        assert!(
            gate.take(c, Some("127.0.0.1:80".parse().unwrap()))
                .is_none()
        );
    }

    #[test]
    fn a_remapped_source_port_finds_the_oldest_handoff_to_its_destination() {
        let gate = Gate::new(LossTable::default());
        remember(&gate, "127.0.0.1:40000", "127.0.0.1:80", 1, 1);
        remember(&gate, "127.0.0.1:40001", "127.0.0.1:81", 2, 2);
        remember(&gate, "127.0.0.1:40002", "127.0.0.1:80", 3, 3);
        // NAT gave the client port 5000: never a handoff for another
        // destination, the oldest for its own.
        let seen = "127.0.0.1:5000".parse().unwrap();
        let h = gate
            .take(seen, Some("127.0.0.1:80".parse().unwrap()))
            .unwrap();
        assert_eq!(h.seq, 1);
        let h = gate
            .take(seen, Some("127.0.0.1:80".parse().unwrap()))
            .unwrap();
        assert_eq!(h.seq, 3);
        assert!(
            gate.take(seen, Some("127.0.0.1:80".parse().unwrap()))
                .is_none()
        );
        assert!(gate.take(seen, None).is_none());
    }

    #[test]
    fn a_sweep_forgets_claimed_connections_but_keeps_dropped_syns() {
        let gate = Gate::new(LossTable::default());
        remember(&gate, "127.0.0.1:40000", "127.0.0.1:80", 1, 1);
        remember(&gate, "127.0.0.1:40001", "127.0.0.1:80", 2, 2);
        let dropped = (
            "127.0.0.1:40002".parse().unwrap(),
            "127.0.0.1:80".parse().unwrap(),
        );
        gate.entries.lock().unwrap().insert(dropped, Entry::held(3));
        gate.settle(dropped, 3, Fate::Drop, None);
        let c = "127.0.0.1:40000".parse().unwrap();
        assert!(
            gate.take(c, Some("127.0.0.1:80".parse().unwrap()))
                .is_some()
        );
        // Age everything past CLAIMED_TTL (but not past HANDOFF_TTL).
        let mut entries = gate.entries.lock().unwrap();
        for e in entries.values_mut() {
            e.at -= CLAIMED_TTL + Duration::from_secs(1);
        }
        gate.sweep(&mut entries);
        let left: Vec<u16> = entries.keys().map(|(src, _)| src.port()).collect();
        assert!(
            !left.contains(&40000),
            "the claimed connection is forgotten"
        );
        assert!(left.contains(&40001), "an unclaimed upstream still waits");
        assert!(left.contains(&40002), "a dropped SYN keeps its fate");
    }

    #[test]
    fn a_late_decision_does_not_land_on_a_newer_syn() {
        let gate = Gate::new(LossTable::default());
        let key = (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:80".parse().unwrap(),
        );
        gate.entries.lock().unwrap().insert(key, Entry::held(7));
        // The decision for an older SYN (ISN 6) on the same tuple.
        gate.settle(key, 6, Fate::Drop, Some(handoff(1)));
        let e = &gate.entries.lock().unwrap()[&key];
        assert_eq!(e.fate, Fate::Held);
        assert!(e.handoff.is_none());
    }

    #[test]
    fn loss_faults_are_numbered_by_identity() {
        let spec = |p| Arc::new(crate::fault::testing::spec("loss", p).unwrap());
        let a = spec(&[("percent", "10"), ("stream", "upstream")]);
        let b = spec(&[("percent", "1")]);
        let plan = Plan {
            rules: vec![Arc::new(crate::plan::Rule {
                name: "r".into(),
                matcher: Default::default(),
                faults: vec![a.clone(), b.clone()],
                loc: String::new(),
            })],
            ..Plan::default()
        };
        let t = LossTable::from_plan(&plan).unwrap();
        assert_eq!(t.index_of(&a), Some(1));
        assert_eq!(t.index_of(&b), Some(2));
        let rules = t.rules();
        assert_eq!(
            (rules[0].ppm, rules[0].direction),
            (100_000, Some("original"))
        );
        assert_eq!((rules[1].ppm, rules[1].direction), (10_000, None));
    }
}
