//! The SYN gate's driver: connect-phase faults and connect-phase truth.
//!
//! Every new outbound SYN in the namespace is queued (NFQUEUE) to netchaos
//! before the redirect, while it still names its real destination. This
//! module reads the queue and answers each SYN; what it answers is decided
//! elsewhere — the connection's faults by [`connect::plan`], what a failed
//! dial means to the client by [`connect::fate_of_dial`], and
//! retransmissions (same source and initial sequence number) get the first
//! SYN's fate from the gate's memory ([`super::gate`]):
//!
//! * `refuse`: accept the SYN with a mark that the ruleset answers with an
//!   RST, so `connect()` fails with ECONNREFUSED;
//! * `connect_timeout`: drop it, and every retransmission;
//! * `connect_delay`: hold it for the delay, then go on;
//! * otherwise dial the real destination first, holding the SYN: if the
//!   upstream accepts, let the SYN through (the relay takes over the dialled
//!   socket when it accepts the client); if it refuses, answer RST; if it is
//!   unreachable, ICMP unreachable of the same kind; if it never answers,
//!   keep dropping. So the client's `connect()` sees what it would have
//!   seen without netchaos — never "connected, then reset".
//!
//! The accepted SYN's mark also carries the connection's `loss` rule, which
//! the ruleset copies onto the connection (conntrack mark). The relay's own
//! dials from inside the namespace pass with a verdict mark the redirect
//! skips — recognised by their 4-tuple, never by a mark their socket set.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::socket::{MsgFlags, recv};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;
use tracing::Instrument;

use super::gate::{Fate, Seen, Syn};
use super::nfqueue::{self, Verdict};
use super::nft::{QUEUE, marks};
use super::sandbox::Sandbox;
use crate::events::{ConnInfo, Dst, FaultHit, Outcome};
use crate::fault::Chosen;
use crate::fault::connect::{self, SynFate};
use crate::fault::path::Path;
use crate::plan::{ConnMeta, Flow};
use crate::relay::{self, Handoff, Relay, Route};

/// Reads the addresses, ports and sequence number of a TCP SYN in an IPv4
/// or IPv6 packet (no extension headers); `None` for anything else.
pub(crate) fn parse_syn(p: &[u8]) -> Option<Syn> {
    let (src, dst, _, tcp) = nfqueue::tcp_packet(p)?;
    if tcp.len() < 14 || tcp[13] & 0x12 != 0x02 {
        return None; // not a bare SYN
    }
    Some(Syn {
        src,
        dst,
        isn: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
    })
}

/// Reads the queue and answers every SYN, until the task is dropped.
pub(crate) async fn run(queue: OwnedFd, relay: Arc<Relay>, sandbox: Arc<Sandbox>) {
    // A SYN's hold counts from when the kernel queued it, not from when
    // this task woke to read it (from idle, a fraction of a millisecond).
    if !nfqueue::stamp_packets(&queue) {
        tracing::debug!("SYN gate: no queue stamps; SYNs dated when read");
    }
    let queue = match nfqueue::into_async(queue) {
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
        let (now, wall) = (Instant::now(), SystemTime::now());
        for p in nfqueue::packets(&buf[..n]) {
            let queued = relay::arrival::dated(p.queued, now, wall);
            on_packet(p, queued, &queue, &relay, &sandbox).await;
        }
    }
}

async fn on_packet(
    p: nfqueue::Packet,
    queued: Instant,
    queue: &Arc<AsyncFd<OwnedFd>>,
    relay: &Arc<Relay>,
    sandbox: &Arc<Sandbox>,
) {
    let Some(syn) = parse_syn(&p.payload) else {
        verdict(queue, p.id, Verdict::Accept(None)).await;
        return;
    };
    // The relay's own dial (retransmissions too): past the redirect. Any
    // other SYN gets a verdict of ours, which replaces whatever mark its
    // socket set.
    if sandbox.gate.is_own(&syn) {
        verdict(queue, p.id, Verdict::Accept(Some(marks::RELAY))).await;
        return;
    }
    match sandbox.gate.see(&syn, Instant::now()) {
        Seen::Again(fate) => verdict(queue, p.id, verdict_of(fate)).await,
        Seen::New => {
            let (queue, relay, sandbox) = (queue.clone(), relay.clone(), sandbox.clone());
            let span = tracing::info_span!("syn", client = %syn.src, dst = %syn.dst);
            tokio::spawn(
                async move {
                    let (fate, handoff) = decide(syn, queued, &relay, &sandbox).await;
                    let dialled = handoff.as_ref().and_then(|h| {
                        let info = h.upstream.as_ref().map(|_| h.seq)?;
                        Some((info, h.names.first().cloned()))
                    });
                    sandbox.gate.settle(&syn, fate, handoff);
                    verdict(&queue, p.id, verdict_of(fate)).await;
                    if let Some((seq, host)) = dialled {
                        close_if_abandoned(syn, seq, host, &relay, &sandbox).await;
                    }
                }
                .instrument(span),
            );
        }
    }
}

/// How often a held or dialling connection checks that its client is
/// still there.
const CLIENT_CHECK: Duration = Duration::from_millis(250);

/// Whether the client of `syn` closed its socket: it gave up connecting
/// (its own connect timeout), and a real path would never have put it
/// through.
fn gave_up(syn: &Syn, sandbox: &Sandbox) -> bool {
    !sandbox.client_waiting(syn.src, syn.dst)
}

/// Resolves once the client of `syn` has given up (checked every
/// [`CLIENT_CHECK`]).
async fn until_given_up(syn: &Syn, sandbox: &Sandbox) {
    loop {
        tokio::time::sleep(CLIENT_CHECK).await;
        if gave_up(syn, sandbox) {
            return;
        }
    }
}

/// After the SYN passed with an upstream dialled for it: the relay takes
/// the upstream over within the handshake. If the client gave up instead
/// (it closed its socket while its SYN was held, and answered the late
/// SYN-ACK with an RST), the upstream is closed unused — at once, not when
/// netchaos exits — and the attempt counted as abandoned.
async fn close_if_abandoned(
    syn: Syn,
    seq: u64,
    host: Option<String>,
    relay: &Arc<Relay>,
    sandbox: &Arc<Sandbox>,
) {
    let deadline = Instant::now() + crate::intercept::gate::HANDOFF_TTL;
    loop {
        tokio::time::sleep(CLIENT_CHECK).await;
        if !sandbox.gate.waiting(&syn) {
            return;
        }
        if gave_up(&syn, sandbox) || Instant::now() >= deadline {
            if let Some(h) = sandbox.gate.reclaim(&syn) {
                if let Some(up) = &h.upstream {
                    crate::socket::sockopt::set_linger_zero(up);
                }
                let mock = relay
                    .opts
                    .mocks
                    .as_ref()
                    .and_then(|m| m.by_ip(syn.dst.ip()))
                    .map(|s| s.api.name());
                let info = conn_info(seq, &syn, host, mock, (relay, sandbox));
                abandoned(relay, &info);
            }
            return;
        }
    }
}

/// The event-log identity of the connection of `syn`.
fn conn_info(
    seq: u64,
    syn: &Syn,
    host: Option<String>,
    mock: Option<&'static str>,
    (relay, sandbox): (&Arc<Relay>, &Arc<Sandbox>),
) -> Arc<ConnInfo> {
    Arc::new(ConnInfo {
        id: seq,
        client: syn.src,
        dst: Dst::Addr(syn.dst),
        host,
        proxy: Some(sandbox.label.clone()),
        counters: relay.events.stats.proxy(&sandbox.label),
        faulted: Default::default(),
        marks: Default::default(),
        mock,
    })
}

/// Records an attempt its client abandoned.
fn abandoned(relay: &Relay, info: &ConnInfo) {
    relay
        .events
        .stats
        .abandoned
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    relay.events.conn_open(info);
    relay
        .events
        .conn_close(info, Outcome::Abandoned, Duration::ZERO, None);
}

fn verdict_of(fate: Fate) -> Verdict {
    match fate {
        Fate::Accept(mark) => Verdict::Accept(Some(mark)),
        Fate::Held | Fate::Drop => Verdict::Drop,
    }
}

/// Sends a verdict.
async fn verdict(queue: &AsyncFd<OwnedFd>, id: u32, v: Verdict) {
    if let Err(e) = nfqueue::send_async(queue, &nfqueue::verdict_msg(QUEUE, id, v)).await {
        tracing::warn!("SYN gate verdict: {e}");
    }
}

/// The mark (or drop) that gives a SYN its fate; `loss` numbers the
/// connection's loss rule.
fn gate_fate(fate: SynFate, loss: u8) -> Fate {
    match fate {
        SynFate::Pass => Fate::Accept(marks::TRACK | u32::from(loss)),
        SynFate::Refuse => Fate::Accept(marks::REFUSE),
        SynFate::HostUnreachable => Fate::Accept(marks::UNREACHABLE),
        SynFate::NetUnreachable => Fate::Accept(marks::NET_UNREACHABLE),
        SynFate::Prohibited => Fate::Accept(marks::PROHIBITED),
        SynFate::Drop => Fate::Drop,
    }
}

/// One connection's fate: its faults, then the upstream's own answer.
/// `queued`: when the kernel queued the SYN.
async fn decide(
    syn: Syn,
    queued: Instant,
    relay: &Arc<Relay>,
    sandbox: &Arc<Sandbox>,
) -> (Fate, Option<Handoff>) {
    // DNS over TCP is the DNS layer's (its faults, the run's resolvers):
    // through to the relay, which hands it over.
    if relay.dns_for(syn.dst).is_some() {
        return (gate_fate(SynFate::Pass, 0), None);
    }
    let syn_at = queued.into_std();
    let seq = relay.next_seq();
    let mut names = sandbox.names.names(syn.dst.ip());
    // A host the built-in mock answers for: the mock is dialled instead.
    let mocked = relay.opts.mocks.as_ref().and_then(|m| {
        m.by_ip(syn.dst.ip())
            .map(|s| (m.at(), s.host.clone(), s.api))
    });
    if let Some((_, host, _)) = &mocked
        && !names.contains(host)
    {
        names.insert(0, host.clone());
    }
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
    let info = conn_info(
        seq,
        &syn,
        names.first().cloned(),
        mocked.as_ref().map(|(_, _, api)| api.name()),
        (relay, sandbox),
    );
    let hit = |c: &Chosen| {
        FaultHit::new(
            relay.events.clone(),
            info.clone(),
            c.rule.clone(),
            c.spec.clone(),
            None,
        )
        .fire()
    };
    // Ended here: recorded as a connection that never reached the relay.
    let ended = |outcome: Outcome| {
        relay.events.conn_open(&info);
        relay
            .events
            .conn_close(&info, outcome, Duration::ZERO, None);
    };
    let plan = connect::plan(&chosen, elapsed, relay.at_capacity());
    plan.delayed_by.iter().for_each(|c| hit(c));
    if !plan.delay.is_zero() {
        // A client that gives up meanwhile is never put through, and
        // nothing is dialled for it.
        let given_up = tokio::select! {
            _ = crate::timer::sleep_until(queued + plan.delay) => gave_up(&syn, sandbox),
            _ = until_given_up(&syn, sandbox) => true,
        };
        if given_up {
            abandoned(relay, &info);
            return (Fate::Drop, None);
        }
    }
    let (dial, loss, path) = match plan.verdict {
        connect::Verdict::Refuse(None) => {
            relay.events.refused_at_limit(&info);
            return (gate_fate(SynFate::Refuse, 0), None);
        }
        connect::Verdict::Refuse(Some(c)) => {
            hit(c);
            ended(Outcome::Refused);
            return (gate_fate(SynFate::Refuse, 0), None);
        }
        connect::Verdict::BlackHole(c) => {
            hit(c);
            ended(Outcome::ConnectTimeout);
            return (gate_fate(SynFate::Drop, 0), None);
        }
        connect::Verdict::Proceed { dial, loss, path } => (dial, loss, path),
    };
    // Under `run`, what lives inside the namespace (a service of the
    // command's, its own addresses) is dialled by the relay later, through
    // the agent; everything else is dialled now, while the SYN waits: from
    // the host, or (attach, in-place) from inside. The namespace's own
    // addresses are never dialled from the host, where they would be
    // someone else: nothing listening inside is a refusal, as it would be
    // without netchaos.
    let from_inside = sandbox.dials_inside() && mocked.is_none();
    let later = !from_inside && mocked.is_none() && sandbox.route(syn.dst) == Route::Inside;
    if later && dial && sandbox.is_own(syn.dst) && !sandbox.listens_inside(syn.dst) {
        ended(Outcome::DialFailed);
        return (gate_fate(SynFate::Refuse, 0), None);
    }
    let upstream = if !dial || later {
        None
    } else {
        let inside: Option<Arc<dyn relay::Interception>> =
            from_inside.then(|| sandbox.clone() as Arc<dyn relay::Interception>);
        let shape = relay::dial::Shape::for_faults(&chosen);
        let (to, dialer) = match &mocked {
            Some((at, ..)) => (*at, relay::own::Dialer::Netchaos),
            None => (
                syn.dst,
                relay::own::Dialer::Client {
                    from: Some(syn.src),
                },
            ),
        };
        let dialling =
            relay::dial::dial(to, relay.opts.dial_timeout, inside.as_ref(), shape, dialer);
        // A dial lasts no longer than the client's attempt: when the
        // client gives up, the relay's SYNs stop too.
        let dialled = tokio::select! {
            r = dialling => r,
            _ = until_given_up(&syn, sandbox) => {
                abandoned(relay, &info);
                return (Fate::Drop, None);
            }
        };
        match dialled {
            Ok(s) => Some(s),
            Err(e) => {
                relay.events.relay_error(&info, e.kind(), &e.to_string());
                ended(Outcome::DialFailed);
                return (gate_fate(connect::fate_of_dial(Err(e.failure)), 0), None);
            }
        }
    };
    let loss_index = loss.and_then(|c| {
        let i = sandbox.losses.index_of(&c.spec)?;
        hit(c);
        Some(i)
    });
    // Before the SYN is let through: the SYN itself crosses the path.
    let added = match (&sandbox.delay_line, Path::of(&path, Instant::now())) {
        (Some(line), Some(p)) => line.add(syn.src, p),
        _ => false,
    };
    let delayed = if added {
        path.iter().for_each(|c| hit(c));
        marks::DELAYED
    } else {
        0
    };
    let fate = match gate_fate(SynFate::Pass, loss_index.unwrap_or(0)) {
        Fate::Accept(mark) => Fate::Accept(mark | delayed),
        other => other,
    };
    let handoff = Handoff {
        seq,
        faults,
        names,
        upstream,
        syn_at,
    };
    (fate, Some(handoff))
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

    #[test]
    fn every_fate_has_its_mark() {
        assert_eq!(gate_fate(SynFate::Pass, 3), Fate::Accept(marks::TRACK | 3));
        assert_eq!(gate_fate(SynFate::Refuse, 3), Fate::Accept(marks::REFUSE));
        assert_eq!(gate_fate(SynFate::Drop, 0), Fate::Drop);
        for f in [
            SynFate::HostUnreachable,
            SynFate::NetUnreachable,
            SynFate::Prohibited,
        ] {
            let Fate::Accept(m) = gate_fate(f, 0) else {
                panic!()
            };
            assert_eq!(m & 0xffff_0000, marks::BASE, "{f:?}");
        }
    }
}
