//! The SYN gate's memory: which SYNs it has seen and what it decided for
//! them (so that retransmissions share the first SYN's fate), the upstreams
//! it dialled while holding them (for the relay to take over), and the
//! relay's own dials, which pass. No I/O and no clock of its own: the
//! caller says what time it is.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::relay::Handoff;

/// How long a decided SYN is remembered, to give retransmissions its fate.
pub(crate) const REMEMBER: Duration = Duration::from_secs(120);
/// How long a dialled upstream waits for the relay to accept the client.
pub(crate) const HANDOFF_TTL: Duration = Duration::from_secs(30);
/// How long a SYN is remembered once the relay has its connection: the
/// client stops retransmitting when the handshake completes, so only
/// duplicates already in flight can still come. Keeping these for all of
/// [`REMEMBER`] made the table (and its sweeps) grow with the connection
/// rate times two minutes.
pub(crate) const CLAIMED_TTL: Duration = Duration::from_secs(10);
/// The table size below which only the periodic sweep runs.
const SWEEP_MIN: usize = 1024;
/// A sweep every this many new SYNs, whatever the size.
const SWEEP_EVERY: usize = 256;

/// A parsed outbound SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Syn {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Initial sequence number: the same on retransmissions.
    pub isn: u32,
}

/// What the gate answers a SYN, as remembered for its retransmissions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Being decided: retransmissions are dropped meanwhile.
    Held,
    /// Accepted with this packet mark.
    Accept(u32),
    Drop,
}

/// What [`Gate::see`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A retransmission of a SYN seen before: its fate.
    Again(Fate),
    /// A new connection: remembered as held; decide it, then
    /// [`Gate::settle`].
    New,
}

struct Entry {
    isn: u32,
    fate: Fate,
    at: Instant,
    handoff: Option<Handoff>,
    /// The relay took this connection over.
    claimed: bool,
}

/// A connection as the gate saw its SYN: (client, original destination).
/// Both are needed: a client may use one source port for connections to
/// different destinations at the same time.
type Key = (SocketAddr, SocketAddr);

/// The relay's own dial, as its SYN shows it: (local address where the
/// dial bound one, local port, destination address, destination port).
type OwnKey = (Option<IpAddr>, u16, IpAddr, u16);

struct Table {
    entries: HashMap<Key, Entry>,
    /// SYNs remembered since the last sweep.
    since_sweep: usize,
    /// Sweep at once when the table reaches this size (twice what the last
    /// sweep left, so sweeping stays amortised O(1) per SYN).
    sweep_at: usize,
}

/// The gate's memory, shared with the relay.
pub(crate) struct Gate {
    table: Mutex<Table>,
    /// Dials the relay is making from inside the namespace: their SYNs
    /// pass uninterceptable. Known by 4-tuple, which no other socket can
    /// hold at the same time — unlike a socket mark, which any process
    /// with CAP_NET_RAW in the namespace can set.
    own: Mutex<HashSet<OwnKey>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                since_sweep: 0,
                sweep_at: SWEEP_MIN,
            }),
            own: Mutex::new(HashSet::new()),
        }
    }
}

impl Gate {
    /// Looks a SYN up; a new one is remembered as held. Now and then (and
    /// whenever the table is large) old entries are forgotten first.
    pub(crate) fn see(&self, syn: &Syn, now: Instant) -> Seen {
        let mut t = self.table.lock().expect("gate lock");
        if let Some(e) = t.entries.get(&(syn.src, syn.dst)) {
            if e.isn == syn.isn && now.saturating_duration_since(e.at) < REMEMBER {
                return Seen::Again(e.fate);
            }
        }
        t.since_sweep += 1;
        if t.entries.len() >= t.sweep_at || t.since_sweep >= SWEEP_EVERY {
            sweep(&mut t, now);
        }
        let entry = Entry {
            isn: syn.isn,
            fate: Fate::Held,
            at: now,
            handoff: None,
            claimed: false,
        };
        t.entries.insert((syn.src, syn.dst), entry);
        Seen::New
    }

    /// Records the decision for a SYN (and the upstream dialled for it).
    /// Only the SYN's own entry: a new connection on the same tuple may have
    /// taken its place meanwhile.
    pub(crate) fn settle(&self, syn: &Syn, fate: Fate, handoff: Option<Handoff>) {
        let mut t = self.table.lock().expect("gate lock");
        if let Some(e) = t
            .entries
            .get_mut(&(syn.src, syn.dst))
            .filter(|e| e.isn == syn.isn)
        {
            e.fate = fate;
            e.handoff = handoff;
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
    pub(crate) fn take(&self, client: SocketAddr, dst: SocketAddr) -> Option<Handoff> {
        let mut t = self.table.lock().expect("gate lock");
        if let Some(e) = t
            .entries
            .get_mut(&(client, dst))
            .filter(|e| e.handoff.is_some())
        {
            e.claimed = true;
            return e.handoff.take();
        }
        let e = t
            .entries
            .iter_mut()
            .filter(|((src, d), e)| e.handoff.is_some() && *d == dst && src.ip() == client.ip())
            .min_by_key(|(_, e)| e.at)?
            .1;
        e.claimed = true;
        e.handoff.take()
    }

    /// Whether the connection of `syn` still has an upstream waiting for
    /// the relay (not taken over, not forgotten).
    pub(crate) fn waiting(&self, syn: &Syn) -> bool {
        let t = self.table.lock().expect("gate lock");
        t.entries
            .get(&(syn.src, syn.dst))
            .is_some_and(|e| e.isn == syn.isn && e.handoff.is_some())
    }

    /// Takes back the upstream dialled for `syn` that the relay never took
    /// over (its client gave up).
    pub(crate) fn reclaim(&self, syn: &Syn) -> Option<Handoff> {
        let mut t = self.table.lock().expect("gate lock");
        t.entries
            .get_mut(&(syn.src, syn.dst))
            .filter(|e| e.isn == syn.isn)
            .and_then(|e| e.handoff.take())
    }

    /// Marks a dial of the relay's own, from `local` to `dst`, until the
    /// returned guard is dropped (once it is connected or failed). A dial
    /// bound to an address (one that keeps a client's port, which the
    /// client knows) is known by that address too, so that another socket
    /// of the namespace on that port cannot pass for it.
    pub(crate) fn expect_own(&self, local: SocketAddr, dst: SocketAddr) -> OwnDial<'_> {
        let ip = Some(local.ip()).filter(|ip| !ip.is_unspecified());
        let key = (ip, local.port(), dst.ip(), dst.port());
        self.own.lock().expect("gate lock").insert(key);
        OwnDial { gate: self, key }
    }

    /// Whether the SYN is one of the relay's own dials.
    pub(crate) fn is_own(&self, syn: &Syn) -> bool {
        let own = self.own.lock().expect("gate lock");
        let (port, ip, dport) = (syn.src.port(), syn.dst.ip(), syn.dst.port());
        own.contains(&(Some(syn.src.ip()), port, ip, dport))
            || own.contains(&(None, port, ip, dport))
    }

    /// SYNs remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().expect("gate lock").entries.len()
    }
}

/// Forgets old SYNs, connections the relay has had for a while, and
/// upstreams nobody claimed; gives memory back when the table shrank.
fn sweep(t: &mut Table, now: Instant) {
    t.entries.retain(|_, e| {
        let age = now.saturating_duration_since(e.at);
        age < REMEMBER
            && !(e.handoff.is_some() && age > HANDOFF_TTL)
            && !(e.claimed && age > CLAIMED_TTL)
    });
    if t.entries.capacity() > 4 * t.entries.len().max(SWEEP_MIN) {
        t.entries.shrink_to(2 * t.entries.len());
    }
    t.sweep_at = (2 * t.entries.len()).max(SWEEP_MIN);
    t.since_sweep = 0;
}

/// A dial of the relay's own in progress (see [`Gate::expect_own`]).
pub(crate) struct OwnDial<'a> {
    gate: &'a Gate,
    key: OwnKey,
}

impl Drop for OwnDial<'_> {
    fn drop(&mut self) {
        self.gate.own.lock().expect("gate lock").remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ConnMeta, Flow, Plan};

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
            syn_at: std::time::Instant::now(),
        }
    }

    fn syn(src: &str, dst: &str, isn: u32) -> Syn {
        Syn {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            isn,
        }
    }

    /// A SYN seen at `at` and accepted, with an upstream for the relay.
    fn accepted(gate: &Gate, s: &Syn, seq: u64, at: Instant) {
        assert_eq!(gate.see(s, at), Seen::New);
        gate.settle(s, Fate::Accept(1), Some(handoff(seq)));
    }

    #[test]
    fn retransmissions_get_the_first_syns_fate_until_it_is_forgotten() {
        let (gate, t0) = (Gate::default(), Instant::now());
        let s = syn("127.0.0.1:40000", "10.0.0.1:80", 9);
        assert_eq!(gate.see(&s, t0), Seen::New);
        assert_eq!(gate.see(&s, t0), Seen::Again(Fate::Held), "while deciding");
        gate.settle(&s, Fate::Drop, None);
        assert_eq!(
            gate.see(&s, t0 + Duration::from_secs(60)),
            Seen::Again(Fate::Drop)
        );
        // After REMEMBER, the same tuple and ISN are a new connection.
        assert_eq!(gate.see(&s, t0 + REMEMBER), Seen::New);
        // Another ISN on the same tuple is a new connection at once.
        let s2 = Syn { isn: 10, ..s };
        assert_eq!(gate.see(&s2, t0 + REMEMBER), Seen::New);
    }

    #[test]
    fn one_source_port_to_two_destinations_keeps_two_handoffs() {
        let (gate, t0) = (Gate::default(), Instant::now());
        accepted(&gate, &syn("127.0.0.1:40000", "127.0.0.1:80", 1), 1, t0);
        accepted(&gate, &syn("127.0.0.1:40000", "127.0.0.1:81", 2), 2, t0);
        let c = "127.0.0.1:40000".parse().unwrap();
        let h81 = gate.take(c, "127.0.0.1:81".parse().unwrap()).unwrap();
        let h80 = gate.take(c, "127.0.0.1:80".parse().unwrap()).unwrap();
        assert_eq!((h80.seq, h81.seq), (1, 2));
        assert!(gate.take(c, "127.0.0.1:80".parse().unwrap()).is_none());
    }

    #[test]
    fn a_remapped_source_port_finds_the_oldest_handoff_to_its_destination() {
        let (gate, t0) = (Gate::default(), Instant::now());
        let ms = Duration::from_millis;
        accepted(&gate, &syn("127.0.0.1:40000", "127.0.0.1:80", 1), 1, t0);
        accepted(
            &gate,
            &syn("127.0.0.1:40001", "127.0.0.1:81", 2),
            2,
            t0 + ms(1),
        );
        accepted(
            &gate,
            &syn("127.0.0.1:40002", "127.0.0.1:80", 3),
            3,
            t0 + ms(2),
        );
        // NAT gave the client port 5000: never a handoff for another
        // destination, the oldest for its own.
        let seen = "127.0.0.1:5000".parse().unwrap();
        let dst = "127.0.0.1:80".parse().unwrap();
        assert_eq!(gate.take(seen, dst).unwrap().seq, 1);
        assert_eq!(gate.take(seen, dst).unwrap().seq, 3);
        assert!(gate.take(seen, dst).is_none());
    }

    #[test]
    fn a_sweep_forgets_claimed_connections_but_keeps_dropped_syns() {
        let (gate, t0) = (Gate::default(), Instant::now());
        accepted(&gate, &syn("127.0.0.1:40000", "127.0.0.1:80", 1), 1, t0);
        accepted(&gate, &syn("127.0.0.1:40001", "127.0.0.1:80", 2), 2, t0);
        let dropped = syn("127.0.0.1:40002", "127.0.0.1:80", 3);
        gate.see(&dropped, t0);
        gate.settle(&dropped, Fate::Drop, None);
        let c = "127.0.0.1:40000".parse().unwrap();
        assert!(gate.take(c, "127.0.0.1:80".parse().unwrap()).is_some());
        // Past CLAIMED_TTL (not past HANDOFF_TTL): a sweep.
        let later = t0 + CLAIMED_TTL + Duration::from_secs(1);
        sweep(&mut gate.table.lock().unwrap(), later);
        let t = gate.table.lock().unwrap();
        let left: Vec<u16> = t.entries.keys().map(|(src, _)| src.port()).collect();
        assert!(
            !left.contains(&40000),
            "the claimed connection is forgotten"
        );
        assert!(left.contains(&40001), "an unclaimed upstream still waits");
        assert!(left.contains(&40002), "a dropped SYN keeps its fate");
        drop(t);
        // Past HANDOFF_TTL, the unclaimed upstream goes too.
        sweep(
            &mut gate.table.lock().unwrap(),
            t0 + HANDOFF_TTL + Duration::from_secs(1),
        );
        assert_eq!(gate.len(), 1);
    }

    #[test]
    fn the_table_is_swept_as_it_grows() {
        let (gate, t0) = (Gate::default(), Instant::now());
        for i in 0..(SWEEP_MIN as u32 + 10) {
            let s = syn(&format!("127.0.0.1:{}", 20000 + i), "10.0.0.1:80", i);
            gate.see(&s, t0);
            gate.settle(&s, Fate::Drop, None);
        }
        assert!(gate.len() > SWEEP_MIN, "nothing is old yet");
        // Two minutes later, within SWEEP_EVERY new SYNs, the old ones go.
        for i in 0..SWEEP_EVERY as u32 {
            gate.see(
                &syn(&format!("127.0.0.2:{}", 20000 + i), "10.0.0.1:80", i),
                t0 + REMEMBER,
            );
        }
        assert!(gate.len() <= SWEEP_EVERY, "{} left", gate.len());
    }

    #[test]
    fn a_late_decision_does_not_land_on_a_newer_syn() {
        let (gate, t0) = (Gate::default(), Instant::now());
        let newer = syn("127.0.0.1:40000", "127.0.0.1:80", 7);
        gate.see(&newer, t0);
        // The decision for an older SYN (ISN 6) on the same tuple.
        gate.settle(&Syn { isn: 6, ..newer }, Fate::Drop, Some(handoff(1)));
        assert_eq!(gate.see(&newer, t0), Seen::Again(Fate::Held));
        assert!(gate.take(newer.src, newer.dst).is_none());
    }

    #[test]
    fn a_dial_bound_to_an_address_is_known_by_it() {
        let gate = Gate::default();
        let s = syn("192.0.2.1:41000", "127.0.0.1:8080", 1);
        let _own = gate.expect_own(s.src, s.dst);
        assert!(gate.is_own(&s));
        // The client that port belongs to, or anyone else on it, is not.
        assert!(!gate.is_own(&Syn {
            src: "127.0.0.2:41000".parse().unwrap(),
            ..s
        }));
    }

    #[test]
    fn the_relays_own_dials_are_known_while_they_last() {
        let gate = Gate::default();
        let s = syn("10.0.0.2:41000", "10.0.0.1:443", 1);
        assert!(!gate.is_own(&s));
        {
            let _own = gate.expect_own("0.0.0.0:41000".parse().unwrap(), s.dst);
            assert!(gate.is_own(&s));
            assert!(!gate.is_own(&Syn {
                dst: "10.0.0.1:444".parse().unwrap(),
                ..s
            }));
        }
        assert!(!gate.is_own(&s), "forgotten once the dial is done");
    }
}
