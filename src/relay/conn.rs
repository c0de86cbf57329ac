//! One relayed connection, from accept to teardown: find the destination,
//! decide the faults (seeded), dial the upstream (or answer in its place for
//! `respond`), run the two directions, and end the way the peers or the
//! faults say — FIN, RST, or a clean close.
//!
//! The connection follows its rules while it runs: when the control API
//! changes a rule's faults, each direction relinks its pipeline (or leaves
//! the fast path for it); when a rule or proxy is disabled, the
//! connection ends.
//!
//! Errors stay in this task: they are recorded and never reach the accept
//! loop.

mod http;
#[cfg(test)]
mod tests;

pub(crate) use http::EndpointTls;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::dial::{self, Dest, DialError};
use super::holding::Holding;
use super::interception::{Interception, PeerQueues, PeerSockets};
use super::pipeline::{self, Feed, Wanted};
use super::{DirEnd, Endpoint, Relay, Target, fast};
use crate::events::{ConnInfo, Dst, FaultHit, Meter, Outcome, RelayPath};
use crate::fault::Chosen;
use crate::fault::http_reply::is_head_request;
use crate::fault::{Direction, FaultKind, Partition, StageCtx};
use crate::plan::ConnMeta;
use crate::socket::peer::Sink;
use crate::socket::sockopt;

/// How often, and how long each time, `respond` waits for the rest of a
/// request's method when its first bytes came in pieces.
const METHOD_WAITS: usize = 20;
const METHOD_WAIT: Duration = Duration::from_millis(5);

/// Serves one accepted client until the connection ends or netchaos stops;
/// `inherits`: the client socket has the relay's options from its listener.
pub(crate) async fn serve(
    relay: Arc<Relay>,
    client: TcpStream,
    peer: SocketAddr,
    ep: Arc<Endpoint>,
    inherits: bool,
) {
    let opened = Instant::now();
    // A client whose send buffer `run` bounded meets a relay sized to
    // match ([`Holding`]): its receive buffer is fixed, not grown.
    let holding = Holding::new(match &ep.target {
        Target::Transparent(ns) => ns.sends_bounded(),
        Target::Fixed(_) | Target::Inside { .. } => false,
    });
    let client_capped = if holding.client_leg(&client) {
        if !inherits {
            sockopt::set_options(&client, relay.opts.peer_timeout);
        }
        false
    } else if inherits {
        sockopt::tune_accepted(&client)
    } else {
        sockopt::tune(&client, relay.opts.peer_timeout)
    };
    // A client the SYN gate let through comes with its decisions and its
    // upstream, dialled while its SYN was held.
    let mut dest = dial::destination(&ep, &client, relay.opts.mocks.as_deref()).await;
    let first = dest.addrs.first().copied();
    // The namespace's DNS over TCP belongs to the DNS layer.
    if let (Target::Transparent(_), Some(dst)) = (&ep.target, first)
        && ep.flow == crate::plan::Flow::Outbound
        && let Some((layer, inside)) = relay.dns_for(dst)
    {
        let timeout = relay.opts.dial_timeout;
        let dial = |r: SocketAddr| async move {
            dial::dial(
                r,
                timeout,
                inside.as_ref(),
                dial::Shape::Native,
                super::own::Dialer::Netchaos,
            )
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
        };
        // Netchaos stopping, or the endpoint going, ends it as any relayed
        // connection ends.
        tokio::select! {
            _ = crate::dns::tcp::serve(layer.clone(), client, peer, dial) => {}
            _ = relay.abort.cancelled() => {}
            _ = relay.stopping() => {}
            _ = ep.cancel.cancelled() => {}
        }
        return;
    }
    let handoff = match &ep.target {
        Target::Transparent(ns) if ep.flow == crate::plan::Flow::Outbound => {
            first.and_then(|dst| ns.claim(peer, dst))
        }
        _ => None,
    };
    let mut syn_at = None;
    let (seq, mut faults, upstream) = match handoff {
        Some(h) => {
            // (The gate named a mocked host already.)
            dest.names = h.names;
            syn_at = Some(h.syn_at);
            (h.seq, h.faults, h.upstream)
        }
        None => {
            let seq = relay.next_seq();
            let meta = ConnMeta {
                flow: ep.flow,
                proxy: matches!(ep.target, Target::Fixed(_)).then_some(&*ep.name),
                ip: first.map(|a| a.ip()),
                names: &dest.names,
                port: first.map_or(0, |a| a.port()),
            };
            (seq, relay.rules.connect(&meta, seq), None)
        }
    };
    let info = Arc::new(ConnInfo {
        id: seq,
        client: peer,
        dst: first.map_or_else(|| Dst::Label(dest.label.clone()), Dst::Addr),
        host: dest.names.first().cloned(),
        proxy: Some(ep.name.clone()),
        counters: relay.events.stats.proxy(&ep.name),
        faulted: Default::default(),
        marks: Default::default(),
        mock: dest.mock.as_ref().map(|m| m.api.name()),
    });
    if let Some(at) = syn_at {
        info.marks.syn(at);
    }
    // Every log line of this connection names it.
    let span = tracing::info_span!("conn", id = seq, client = %peer, dst = %info.dst);
    async move {
        relay.events.conn_open(&info);
        if faults.disabled() {
            give_up(&client, ep.ends);
            relay
                .events
                .conn_close(&info, Outcome::Disabled, opened.elapsed(), None);
            return;
        }
        let (chosen_tx, chosen) = watch::channel(Arc::new(faults.chosen(relay.epoch.elapsed())));
        let partition: Option<Arc<dyn Partition>> = match &ep.target {
            Target::Transparent(ns) => Some(ns.partition(peer)),
            _ => None,
        };
        let client_sight = match &ep.target {
            Target::Transparent(ns) => Some(Sight::Redirected(ns.clone())),
            Target::Fixed(_) | Target::Inside { .. } => relay.host_sockets().map(Sight::Host),
        };
        let conn = Conn {
            relay: &relay,
            info: &info,
            chosen,
            opened,
            partition,
            tls: &ep.tls,
            ends: ep.ends,
            dialer: match ep.target {
                Target::Transparent(_) => super::own::Dialer::Client { from: Some(peer) },
                _ => super::own::Dialer::Netchaos,
            },
            protocol: faults.protocol(),
            path: OnceLock::new(),
            capped: [AtomicBool::new(client_capped), AtomicBool::new(false)],
            holding,
            upstream_inside: AtomicBool::new(false),
            in_path: !matches!(ep.target, Target::Fixed(_)),
            answer_waits: Default::default(),
            reset: Default::default(),
            sights: [
                client_sight.map_or_else(OnceLock::new, OnceLock::from),
                OnceLock::new(),
            ],
        };
        let ended = faults.end_signals();
        // Follows the connection's rules: each change republishes its faults.
        let follow = async {
            loop {
                faults.changed().await;
                chosen_tx.send_replace(Arc::new(faults.chosen(relay.epoch.elapsed())));
            }
        };
        let outcome = tokio::select! {
            r = conn.run(&client, dest, upstream) => r,
            _ = follow => unreachable!("following never ends"),
            _ = wait_any(&ended) => {
                give_up(&client, ep.ends);
                Outcome::Disabled
            }
            _ = ep.cancel.cancelled() => {
                give_up(&client, ep.ends);
                Outcome::Disabled
            }
            _ = relay.abort.cancelled() => Outcome::Aborted,
        };
        relay
            .events
            .conn_close(&info, outcome, opened.elapsed(), conn.path.get().copied());
    }
    .instrument(span)
    .await
}

/// Ends a client netchaos gives up on, the endpoint's way: an RST, or a
/// FIN (Toxiproxy's way; what the client sent unread may still turn it
/// into an RST, as with Toxiproxy).
fn give_up(client: &TcpStream, ends: super::EndStyle) {
    match ends {
        super::EndStyle::Rst => sockopt::set_linger_zero(client),
        super::EndStyle::Fin => sockopt::shutdown_write(client),
    }
}

async fn wait_any(tokens: &[tokio_util::sync::CancellationToken]) {
    if tokens.is_empty() {
        return std::future::pending().await;
    }
    futures_util::future::select_all(tokens.iter().map(|t| Box::pin(t.cancelled()))).await;
}

struct Conn<'a> {
    relay: &'a Arc<Relay>,
    info: &'a Arc<ConnInfo>,
    /// Whom its dials are for ([`super::own`]).
    dialer: super::own::Dialer,
    /// The connection's faults, republished when its rules change.
    chosen: watch::Receiver<Arc<Vec<Chosen>>>,
    opened: Instant,
    partition: Option<Arc<dyn Partition>>,
    /// Where TLS is served or spoken for this endpoint.
    tls: &'a EndpointTls,
    /// `match.protocol` of the connection's rules.
    protocol: Option<crate::plan::Protocol>,
    /// How a connection given up on ends.
    ends: super::EndStyle,
    /// The path the bytes took (`splice`: the fast path, by the name it had
    /// when it used `splice(2)`; `pipeline`, `http`, `https`), once known:
    /// for the event log and the counters.
    path: OnceLock<RelayPath>,
    /// Whether the client's and the upstream's receive buffers are
    /// bounded ([`sockopt::tune`]), so that the fast path grows them.
    capped: [AtomicBool; 2],
    /// How its relay sockets are sized.
    holding: Holding,
    /// Whether the upstream was dialled inside the client's namespace.
    upstream_inside: AtomicBool,
    /// Whether the relay stands in for the client's path (interception,
    /// `--expose`), where it must not be seen, rather than being a proxy
    /// the client chose to connect to.
    in_path: bool,
    /// How often the upstream's answers may still wait briefly for a FIN
    /// behind them ([`super::answer`]): a server on this host, in the path.
    /// Not behind `netchaos proxy`: there the client talks to a proxy, and
    /// gets the FIN a hop later as through any other (Toxiproxy, socat,
    /// haproxy); the wait would cost each new connection there its length.
    answer_waits: super::answer::Waits,
    /// Whether a write found the client's, or the upstream's, socket
    /// reset: a read of it that then finds the end of the stream has met
    /// that RST, not a FIN.
    reset: [AtomicBool; 2],
    /// Where the client's and the upstream's own sockets can be looked
    /// at, once known ([`reset_delivered`]).
    sights: [OnceLock<Sight>; 2],
}

/// Where a peer's own socket can be looked at.
enum Sight {
    /// In netchaos's own namespace.
    Host(Arc<dyn PeerSockets>),
    /// In an intercepted namespace, connected to the relay socket.
    Inside(Arc<dyn Interception>),
    /// In an intercepted namespace, connected to the destination it meant
    /// (the redirect's original one), not to the relay socket's address.
    Redirected(Arc<dyn Interception>),
}

impl Sight {
    /// How the socket at the other end of `s` stands, if it can be seen.
    fn queues(&self, s: &TcpStream) -> Option<PeerQueues> {
        let src = s.peer_addr().ok()?;
        match self {
            Sight::Host(sockets) => sockets.queues(src, s.local_addr().ok()?),
            Sight::Inside(ns) => ns.peer_queues(src, s.local_addr().ok()?),
            Sight::Redirected(ns) => ns.peer_queues(src, sockopt::original_dst(s).ok()?),
        }
    }
}

/// A direction's view of the connection's faults.
struct DirFeed<'c> {
    conn: &'c Conn<'c>,
    rx: watch::Receiver<Arc<Vec<Chosen>>>,
    dir: Direction,
}

impl Feed for DirFeed<'_> {
    async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }

    fn wanted(&mut self) -> Vec<Wanted> {
        let list = self.rx.borrow_and_update().clone();
        list.iter()
            .filter(|c| c.spec.stream.includes(self.dir) && c.spec.kind.has_stage())
            .map(|c| Wanted {
                id: c.id,
                spec: c.spec.clone(),
                ctx: self.conn.stage_ctx(c, self.dir),
            })
            .collect()
    }
}

impl Conn<'_> {
    async fn run(&self, client: &TcpStream, dest: Dest, dialled: Option<TcpStream>) -> Outcome {
        let first = self.chosen.borrow().clone();
        let respond = first.iter().find_map(|c| match &c.spec.kind {
            FaultKind::Respond(r) => Some((c, r.clone())),
            _ => None,
        });
        if let Some((chosen, r)) = respond {
            self.hit(chosen, None).fire();
            return Box::pin(self.respond(client, r, dest.addrs.first().copied())).await;
        }
        if let Some((kind, e)) = dest.error {
            self.relay.events.relay_error(self.info, kind, &e);
            give_up(client, self.ends);
            return Outcome::DialFailed;
        }
        // A mocked host's connection goes to the mock, from netchaos's own
        // place; others from inside the namespace where its route says.
        let from = match &dest.mock {
            Some(_) => None,
            None => dest.dial_from(),
        };
        // Without the SYN gate (explicit proxies), a failed dial can only
        // reset the client, which has already connected to us.
        let upstream = match dialled {
            Some(s) => s,
            None => match match &dest.mock {
                Some(m) => self.dial_mock(m.at).await,
                None => self.dial(&dest.addrs, from.as_ref()).await,
            } {
                Ok(s) => s,
                Err(e) => {
                    self.relay
                        .events
                        .relay_error(self.info, e.kind(), &e.to_string());
                    give_up(client, self.ends);
                    return Outcome::DialFailed;
                }
            },
        };
        self.info.marks.dialled();
        let sight = match &from {
            Some(ns) => Some(Sight::Inside(ns.clone())),
            None => self.relay.host_sockets().map(Sight::Host),
        };
        if let Some(sight) = sight {
            let _ = self.sights[1].set(sight);
        }
        let tuned = sockopt::tune_upstream(
            &upstream,
            self.relay.opts.peer_timeout,
            self.partitioned(&first),
        );
        self.capped[1].store(tuned.grows, Ordering::Relaxed);
        self.holding.upstream(&upstream, from.is_some());
        self.upstream_inside
            .store(from.is_some(), Ordering::Relaxed);
        if self.in_path && sockopt::peer_is_local(&upstream) {
            self.answer_waits.allow();
        }
        self.reset[1].store(tuned.reset, Ordering::Relaxed);
        // The mock speaks HTTP in the clear: a mocked connection always
        // goes through the HTTP layer, which ends the client's TLS.
        let mocked = dest.mock.is_some();
        let records = self.relay.events.follows_http();
        if mocked || http::wanted(&first, self.tls, self.protocol, records) {
            let dst = dest.addrs.first().copied();
            let inside = from.clone();
            if let Some(done) =
                Box::pin(self.http(client, &upstream, self.tls, dst, inside, mocked)).await
            {
                return done;
            }
            if mocked {
                // Not HTTP the mock can answer (a protocol it does not
                // speak): never its bytes to the cleartext mock.
                self.relay.events.relay_error(
                    self.info,
                    "mock_not_http",
                    "the built-in mock answers HTTP only; this connection carried something else",
                );
                self.teardown(Outcome::Reset, client, Some(&upstream)).await;
                return Outcome::Reset;
            }
        }
        let stages = first.iter().any(|c| c.spec.kind.has_stage());
        let _ = self.path.set(if stages {
            RelayPath::Pipeline
        } else {
            RelayPath::Splice
        });
        let up = self.direction(client, &upstream, Direction::Upstream);
        let down = self.direction(&upstream, client, Direction::Downstream);
        let outcome = run_pair(up, down, client, Some(&upstream)).await;
        self.teardown(outcome, client, Some(&upstream)).await;
        outcome
    }

    /// Whether a partition may cut this connection's upstream stream, which
    /// then must find the relay holding little of it.
    fn partitioned(&self, faults: &[Chosen]) -> bool {
        self.partition.is_some() && dial::Shape::for_faults(faults) == dial::Shape::Ethernet
    }

    async fn dial(
        &self,
        addrs: &[SocketAddr],
        inside: Option<&Arc<dyn Interception>>,
    ) -> Result<TcpStream, DialError> {
        let mut last = DialError {
            failure: crate::fault::connect::DialFailure::Other,
            message: "no address to dial".into(),
        };
        let timeout = self.relay.opts.dial_timeout;
        let shape = dial::Shape::for_faults(&self.chosen.borrow());
        for addr in addrs {
            match dial::dial(*addr, timeout, inside, shape, self.dialer).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connects to the mock standing in for the upstream: from netchaos's
    /// own namespace, as netchaos (not on the client's behalf).
    async fn dial_mock(&self, at: SocketAddr) -> Result<TcpStream, DialError> {
        dial::dial(
            at,
            self.relay.opts.dial_timeout,
            None,
            dial::Shape::Native,
            super::own::Dialer::Netchaos,
        )
        .await
    }

    fn hit(&self, c: &Chosen, dir: Option<Direction>) -> FaultHit {
        FaultHit::new(
            self.relay.events.clone(),
            self.info.clone(),
            c.rule.clone(),
            c.spec.clone(),
            dir,
        )
    }

    /// The context of one fault's stage in one direction.
    fn stage_ctx(&self, c: &Chosen, dir: Direction) -> StageCtx {
        StageCtx {
            dir,
            rng: c.rng(dir),
            window: c.spec.active,
            epoch: self.relay.epoch,
            opened: self.opened,
            hit: Box::new(self.hit(c, Some(dir))),
            partition: self.partition.clone(),
        }
    }

    fn meter(&self) -> Meter<'_> {
        Meter {
            global: &self.relay.events.stats,
            proxy: &self.info.counters,
            marks: &self.info.marks,
        }
    }

    fn feed(&self, dir: Direction) -> DirFeed<'_> {
        DirFeed {
            conn: self,
            rx: self.chosen.clone(),
            dir,
        }
    }

    /// Whether `dir`'s chunks may be dated by the kernel's receive stamp:
    /// not the client's, while a path fault holds its packets in the delay
    /// line after the stamp (a `latency` on top would absorb that delay).
    fn arrivals_stamped(&self, dir: Direction) -> bool {
        dir != Direction::Upstream
            || !self
                .chosen
                .borrow()
                .iter()
                .any(|c| crate::fault::path::is_path_fault(&c.spec.kind))
    }

    /// A fault-free direction takes the fast path; once a byte fault
    /// applies (now or later) it runs the pipeline.
    async fn direction(&self, src: &TcpStream, dst: &TcpStream, dir: Direction) -> DirEnd {
        let mut feed = self.feed(dir);
        let meter = self.meter();
        // The source of the upstream direction is the client.
        let growth = |fresh| {
            let capped = self.capped[dir.index()].load(Ordering::Relaxed);
            sockopt::RecvGrowth::new(src, capped, fresh)
        };
        let inside = self.upstream_inside.load(Ordering::Relaxed);
        let (src_reset, dst_reset) = (&self.reset[dir.index()], &self.reset[1 - dir.index()]);
        let ended = |end: DirEnd| {
            if end == DirEnd::DstReset {
                dst_reset.store(true, Ordering::Relaxed);
            }
            end
        };
        let from = super::SrcSocket {
            socket: src,
            reset: src_reset,
            waits: match dir {
                Direction::Downstream => &self.answer_waits,
                Direction::Upstream => super::answer::Waits::none(),
            },
        };
        if feed.wanted().is_empty() {
            let bufs = self.holding.buffers(dir, inside, growth(true));
            match fast::run(from, dst, dir, &meter, &mut feed, bufs).await {
                fast::Ended::End(end) => return ended(end),
                fast::Ended::Faulted => {}
            }
        }
        // Boxed: the pipeline's state is large, and an idle fault-free
        // connection should not carry room for it.
        let stamped = self.arrivals_stamped(dir);
        let (end, _) = Box::pin(pipeline::run(
            pipeline::Source::Socket(from, growth(false), stamped),
            Sink::Tcp(dst),
            dir,
            &mut feed,
            &meter,
        ))
        .await;
        ended(end)
    }

    /// `respond`: the canned reply flows down the downstream pipeline (so
    /// other downstream faults still apply); what the client sends is read
    /// and discarded. With TLS set up, a TLS client is answered inside TLS
    /// (the upstream still never contacted).
    async fn respond(
        &self,
        client: &TcpStream,
        r: crate::fault::respond::Respond,
        dst: Option<SocketAddr>,
    ) -> Outcome {
        let tls = self.relay.opts.tls.clone();
        // The first bytes: a TLS hello, or a request (a HEAD's answer has
        // no body).
        let mut probe = [0u8; 5];
        let mut head_only = None;
        if r.waits_for_request() || tls.is_some() {
            // `peek`, not `readable`: readiness may be a false positive (as
            // it is for the first connection of a fresh runtime), and the
            // reply must not overtake the request it answers.
            if let Ok(Ok(n)) = tokio::time::timeout(
                crate::fault::respond::Respond::REQUEST_WAIT,
                client.peek(&mut probe),
            )
            .await
            {
                head_only = is_head_request(&probe[..n]);
                // A method in pieces ("HE", "AD "): a short, bounded wait
                // for the rest, peeked again.
                for _ in 0..METHOD_WAITS {
                    if head_only.is_some() {
                        break;
                    }
                    tokio::time::sleep(METHOD_WAIT).await;
                    if let Ok(n) = client.peek(&mut probe).await {
                        head_only = is_head_request(&probe[..n]);
                    }
                }
            }
        }
        if let (Some(tls), 0x16) = (tls, probe[0]) {
            let _ = self.path.set(RelayPath::Https);
            return match self.accept_tls(&tls, client, dst).await {
                Ok(side) => self.respond_on(client, r, side, true, false).await,
                Err(ended) => ended,
            };
        }
        let head_only = head_only.unwrap_or(false);
        self.respond_on(client, r, http::Side::plain(client), false, head_only)
            .await
    }

    async fn respond_on<'s>(
        &self,
        client: &'s TcpStream,
        r: crate::fault::respond::Respond,
        side: http::Side<'s>,
        tls: bool,
        mut head_only: bool,
    ) -> Outcome {
        let http::Side { mut read, sink, .. } = side;
        if tls && r.waits_for_request() {
            // Inside TLS, the request is the first application data.
            let mut first = bytes::BytesMut::with_capacity(16 * 1024);
            let wait = crate::fault::respond::Respond::REQUEST_WAIT;
            let read_more = tokio::time::timeout(wait, async {
                // Records (the method in pieces) until the method is known.
                for _ in 0..METHOD_WAITS {
                    match tokio::io::AsyncReadExt::read_buf(&mut read, &mut first).await {
                        Ok(n) if n > 0 => {}
                        _ => return None,
                    }
                    if let Some(h) = is_head_request(&first) {
                        return Some(h);
                    }
                }
                None
            });
            head_only = read_more.await.ok().flatten().unwrap_or(false);
        }
        let meter = self.meter();
        let mut feed = self.feed(Direction::Downstream);
        let down = async {
            let (end, _) = pipeline::run(
                pipeline::Source::Script(r.script(head_only)),
                sink,
                Direction::Downstream,
                &mut feed,
                &meter,
            )
            .await;
            end
        };
        let outcome = if tls {
            run_pair(discard_from(read), down, client, None).await
        } else {
            run_pair(discard(client), down, client, None).await
        };
        self.teardown(outcome, client, None).await;
        outcome
    }

    /// Ends the connection as `outcome` says. A reset reaches each side as
    /// a path delivers a peer's RST ([`reset_delivered`]), each side on
    /// its own.
    async fn teardown(&self, outcome: Outcome, client: &TcpStream, upstream: Option<&TcpStream>) {
        if outcome != Outcome::Reset {
            return teardown(outcome, client, upstream).await;
        }
        futures_util::join!(reset_delivered(client, self.sights[0].get()), async {
            if let Some(u) = upstream {
                reset_delivered(u, self.sights[1].get()).await;
            }
        });
    }
}

/// The longest pause between two looks at whether a peer has read.
const READ_POLL_MAX: Duration = Duration::from_millis(64);

/// Resets `s` as a path delivers its peer's RST: behind everything
/// written to it, acknowledged by the peer's kernel (an RST sent earlier
/// discards what is unsent), and — where the peer's socket can be seen —
/// read by the peer. An RST that arrives while data waits unread is, for
/// some clients, the end of the stream: Linux reports the data, and a
/// client that takes the hang-up seen with it for the end (libuv: Node)
/// never reads the error. A peer that is itself stuck writing to the
/// relay is not waited for: it reads only once its write fails, which
/// this RST does (an early answer to an upload). Bounded by
/// [`RESET_DRAIN`](super::RESET_DRAIN) in all.
async fn reset_delivered(s: &TcpStream, sight: Option<&Sight>) {
    let deadline = Instant::now() + super::RESET_DRAIN;
    sockopt::drain(s, super::RESET_DRAIN).await;
    if let Some(sight) = sight {
        // Looked at again after 1, 2, 4… ms (at most READ_POLL_MAX): a
        // reader is usually quick, and one that never reads costs a dozen
        // looks, not a thousand.
        let mut pause = Duration::from_millis(1);
        while Instant::now() < deadline {
            match sight.queues(s) {
                Some(q) if q.unread > 0 && q.unacked == 0 => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(READ_POLL_MAX);
                }
                _ => break,
            }
        }
    }
    sockopt::set_linger_zero(s);
    sockopt::abort(s);
}

/// Reads and drops what a TLS client sends.
async fn discard_from(mut read: impl tokio::io::AsyncRead + Unpin) -> DirEnd {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tokio::io::AsyncReadExt::read(&mut read, &mut buf).await {
            Ok(0) => return DirEnd::Fin,
            Ok(_) => {}
            Err(_) => return DirEnd::Reset,
        }
    }
}

/// Lets the upstream go as a client that closed its socket does: once
/// what was sent to it is acknowledged, its FIN ends it cleanly, and
/// anything more it sends (already waiting, or later; a TLS close_notify
/// too, as a closed socket's kernel would) is answered with an RST. A server streaming into the closed connection learns it at its
/// next write, as without netchaos, instead of writing on into a relay
/// that reads and drops.
async fn let_go(upstream: &TcpStream) {
    sockopt::drain(upstream, CLOSE_LINGER).await;
    let mut scratch = [0u8; 1];
    loop {
        if upstream.readable().await.is_err() {
            return;
        }
        match upstream.try_read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {
                sockopt::abort(upstream);
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Reads and drops what the client sends (nobody upstream wants it).
async fn discard(client: &TcpStream) -> DirEnd {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if client.readable().await.is_err() {
            return DirEnd::Reset;
        }
        match client.try_read(&mut buf) {
            Ok(0) => return DirEnd::Fin,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return DirEnd::Reset,
        }
    }
}

/// Runs both directions to their end. A RST or a close in either ends the
/// connection at once; after one direction delivered its FIN, an error on
/// its source socket (the peer's RST, noticed even while the other direction
/// is held by a stall) ends it too. (The bytes each way are the meter's.)
async fn run_pair(
    up: impl Future<Output = DirEnd>,
    down: impl Future<Output = DirEnd>,
    client: &TcpStream,
    upstream: Option<&TcpStream>,
) -> Outcome {
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let verdict = |end: DirEnd| match end {
        DirEnd::Fin | DirEnd::DstReset => None,
        DirEnd::Reset => Some(Outcome::Reset),
        DirEnd::Close => Some(Outcome::Closed),
    };
    // An RST on a socket is normally met by the direction that reads it,
    // after the bytes that came before it. But that direction may be stuck
    // writing to a peer that reads nothing; then, after a grace period for
    // whatever can still move, the reset is passed on anyway, so that a
    // connection never outlives both of its peers.
    // A direction whose destination reset under a write leaves the other
    // direction to carry what that peer sent before its RST (an answer to
    // an upload it would not take), within the same grace.
    let (mut reset_seen, mut reset) = (false, false);
    let grace = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(grace);
    loop {
        tokio::select! {
            end = &mut up, if !up_done => {
                up_done = true;
                if let Some(o) = verdict(end) { return o; }
                if end == DirEnd::DstReset {
                    reset = true;
                    if !reset_seen {
                        reset_seen = true;
                        grace.as_mut().reset(tokio::time::Instant::now() + RESET_GRACE);
                    }
                }
            }
            end = &mut down, if !down_done => {
                down_done = true;
                if let Some(o) = verdict(end) { return o; }
                if end == DirEnd::DstReset {
                    reset = true;
                    if !reset_seen {
                        reset_seen = true;
                        grace.as_mut().reset(tokio::time::Instant::now() + RESET_GRACE);
                    }
                }
            }
            _ = socket_error(Some(client)), if !reset_seen => {
                if up_done { return Outcome::Reset; }
                reset_seen = true;
                grace.as_mut().reset(tokio::time::Instant::now() + RESET_GRACE);
            }
            _ = socket_error(upstream), if !reset_seen && upstream.is_some() => {
                if down_done { return Outcome::Reset; }
                reset_seen = true;
                grace.as_mut().reset(tokio::time::Instant::now() + RESET_GRACE);
            }
            _ = &mut grace, if reset_seen => return Outcome::Reset,
        }
        if up_done && down_done {
            return if reset { Outcome::Reset } else { Outcome::Fin };
        }
    }
}

/// How long bytes that arrived before a peer's RST may still take to be
/// delivered when the direction carrying them is stuck.
const RESET_GRACE: Duration = Duration::from_secs(1);

/// Completes when the socket reports an error (an RST arrived).
async fn socket_error(s: Option<&TcpStream>) {
    match s {
        Some(s) => {
            let _ = s.ready(Interest::ERROR).await;
        }
        None => std::future::pending().await,
    }
}

/// How long a clean close waits for the peers' own FIN before closing.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

async fn teardown(outcome: Outcome, client: &TcpStream, upstream: Option<&TcpStream>) {
    let socks = [Some(client), upstream];
    match outcome {
        Outcome::Reset
        | Outcome::DialFailed
        | Outcome::Aborted
        | Outcome::Disabled
        | Outcome::Refused
        | Outcome::Abandoned
        | Outcome::ConnectTimeout => {
            for s in socks.into_iter().flatten() {
                sockopt::set_linger_zero(s);
            }
        }
        Outcome::Closed => {
            // FIN to both. The client's input is read (and dropped) until
            // it closes too, so that unread bytes do not turn the close
            // into an RST that could destroy what it has not read yet.
            // The upstream is let go as a client that closed its socket.
            for s in socks.into_iter().flatten() {
                sockopt::shutdown_write(s);
            }
            let _ = tokio::time::timeout(CLOSE_LINGER, async {
                futures_util::join!(discard(client), async {
                    if let Some(u) = upstream {
                        let_go(u).await;
                    }
                });
            })
            .await;
        }
        Outcome::Fin => {}
    }
}
