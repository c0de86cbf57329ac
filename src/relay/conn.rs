//! One relayed connection, from accept to teardown: find the destination,
//! decide the faults (seeded), dial the upstream (or answer in its place for
//! `respond`), run the two directions, and end the way the peers or the
//! faults say — FIN, RST, or a clean close.
//!
//! Errors stay in this task: they are recorded and never reach the accept
//! loop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{DirEnd, Endpoint, Relay, Target, pipeline, sockopt, splice};
use crate::events::{ConnInfo, FaultHit};
use crate::fault::{Direction, FaultKind, Partition, StageCtx};
use crate::intercept::{FlowPartition, Sandbox};
use crate::plan::{Chosen, ConnMeta};

/// How a connection ended, as the event log and summary say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Both sides sent FIN.
    Fin,
    /// RST (from a peer, or a fault) delivered to both sides.
    Reset,
    /// A fault closed the connection cleanly.
    Closed,
    /// The upstream could not be reached; the client was reset.
    DialFailed,
    /// netchaos shut down while the connection was open.
    Aborted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Fin => "fin",
            Outcome::Reset => "reset",
            Outcome::Closed => "closed",
            Outcome::DialFailed => "dial_failed",
            Outcome::Aborted => "aborted",
        }
    }
}

/// Serves one accepted client until the connection ends or netchaos stops.
pub async fn serve(relay: Arc<Relay>, client: TcpStream, peer: SocketAddr, ep: Arc<Endpoint>) {
    let opened = Instant::now();
    sockopt::tune(&client);
    // A client the SYN gate let through comes with its decisions and its
    // upstream, dialled while its SYN was held.
    let handoff = match &ep.target {
        Target::Transparent(sb) => sb.gate.take(peer),
        _ => None,
    };
    let mut dest = destination(&ep, &client).await;
    let first = dest.addrs.first().copied();
    let (seq, chosen, upstream) = match handoff {
        Some(h) => {
            dest.names = h.names;
            (h.seq, h.chosen, h.upstream)
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
            (
                seq,
                relay.plan.decide(&meta, seq, relay.epoch.elapsed()),
                None,
            )
        }
    };
    let info = Arc::new(ConnInfo {
        id: seq,
        client: peer,
        dst: first.map_or_else(|| dest.label.clone(), |a| a.to_string()),
        host: dest.names.first().cloned(),
        proxy: Some(ep.name.clone()),
    });
    relay.events.conn_open(&info);
    let partition: Option<Arc<dyn Partition>> = match &ep.target {
        Target::Transparent(sb) => Some(Arc::new(FlowPartition {
            sandbox: sb.clone(),
            client: peer,
        })),
        _ => None,
    };
    let conn = Conn {
        relay: &relay,
        info: &info,
        chosen,
        opened,
        partition,
    };
    let work = conn.run(&client, dest, upstream);
    let (outcome, bytes) = tokio::select! {
        r = work => r,
        _ = relay.abort.cancelled() => (Outcome::Aborted, [0, 0]),
    };
    relay
        .events
        .conn_close(&info, outcome.as_str(), bytes, opened.elapsed());
}

/// Where a connection goes.
struct Dest {
    /// Addresses to try, in order.
    addrs: Vec<SocketAddr>,
    /// Names the destination is known by (for rules and the event log).
    names: Vec<String>,
    /// What to call the destination when it has no address.
    label: String,
    /// Dial through the namespace instead of from the host.
    inside: Option<Arc<Sandbox>>,
    /// Why there is no address, if there is none.
    error: Option<(&'static str, String)>,
}

async fn destination(ep: &Endpoint, client: &TcpStream) -> Dest {
    let mut d = Dest {
        addrs: Vec::new(),
        names: Vec::new(),
        label: String::new(),
        inside: None,
        error: None,
    };
    match &ep.target {
        Target::Fixed(upstream) => {
            d.label = upstream.clone();
            match resolve(upstream).await {
                Ok((host, addrs)) => {
                    d.names.extend(host);
                    d.addrs = addrs;
                }
                Err(e) => d.error = Some(("resolve_failed", e)),
            }
        }
        Target::Transparent(sandbox) => match sockopt::original_dst(client) {
            Ok(dst) => {
                d.names = sandbox.names.names(dst.ip());
                if is_loopback(dst) && sandbox.listens_inside(dst) {
                    d.inside = Some(sandbox.clone());
                }
                d.addrs.push(dst);
            }
            Err(e) => {
                d.label = "unknown".into();
                d.error = Some((
                    "no_original_destination",
                    format!("cannot read the original destination: {e}"),
                ));
            }
        },
        Target::Inside { port, sandbox } => {
            d.addrs = vec![
                SocketAddr::from(([127, 0, 0, 1], *port)),
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, *port)),
            ];
            d.inside = Some(sandbox.clone());
        }
    }
    d
}

/// Whether `a` is a loopback address (IPv4-mapped ones included).
pub fn is_loopback(a: SocketAddr) -> bool {
    match a.ip() {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Resolves `host:port`: the host's name (when it is not a literal) and its
/// addresses.
async fn resolve(upstream: &str) -> Result<(Option<String>, Vec<SocketAddr>), String> {
    if let Ok(a) = upstream.parse::<SocketAddr>() {
        return Ok((None, vec![a]));
    }
    let host = upstream.rsplit_once(':').map(|(h, _)| h.to_string());
    match tokio::net::lookup_host(upstream).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(format!("{upstream} resolved to no address"))
            } else {
                Ok((host, addrs))
            }
        }
        Err(e) => Err(format!("cannot resolve {upstream}: {e}")),
    }
}

/// Connects to `addr` from inside the namespace, with a socket the agent
/// made there.
async fn dial_inside(sandbox: &Arc<Sandbox>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let sb = sandbox.clone();
    let std_sock = tokio::task::spawn_blocking(move || sb.socket_inside(addr.is_ipv6()))
        .await
        .map_err(std::io::Error::other)??;
    tokio::net::TcpSocket::from_std_stream(std_sock)
        .connect(addr)
        .await
}

struct Conn<'a> {
    relay: &'a Arc<Relay>,
    info: &'a Arc<ConnInfo>,
    chosen: Vec<Chosen>,
    opened: Instant,
    partition: Option<Arc<dyn Partition>>,
}

/// Why a dial failed, as the client would have seen it.
#[derive(Debug)]
pub enum DialError {
    /// RST: the client should see ECONNREFUSED.
    Refused(String),
    /// No route, host unreachable: EHOSTUNREACH.
    Unreachable(String),
    /// No answer within the dial timeout.
    Timeout(String),
    Other(String),
}

impl DialError {
    /// The relay error kind for events and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            DialError::Refused(_) => "dial_refused",
            DialError::Unreachable(_) => "dial_unreachable",
            DialError::Timeout(_) => "dial_timeout",
            DialError::Other(_) => "dial_failed",
        }
    }
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Refused(m)
            | DialError::Unreachable(m)
            | DialError::Timeout(m)
            | DialError::Other(m) => f.write_str(m),
        }
    }
}

/// Connects to `addr` from the host's network namespace.
pub async fn dial_host(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, DialError> {
    dial_with(addr, timeout, TcpStream::connect(addr)).await
}

async fn dial_with(
    addr: SocketAddr,
    timeout: Duration,
    connect: impl Future<Output = std::io::Result<TcpStream>>,
) -> Result<TcpStream, DialError> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => {
            let msg = format!("connect to {addr}: {e}");
            Err(match e.raw_os_error() {
                Some(libc::ECONNREFUSED) => DialError::Refused(msg),
                Some(libc::EHOSTUNREACH | libc::ENETUNREACH) => DialError::Unreachable(msg),
                Some(libc::ETIMEDOUT) => DialError::Timeout(msg),
                _ => DialError::Other(msg),
            })
        }
        Err(_) => Err(DialError::Timeout(format!(
            "connect to {addr}: no answer within {}",
            crate::units::format_duration(timeout)
        ))),
    }
}

impl Conn<'_> {
    async fn run(
        self,
        client: &TcpStream,
        dest: Dest,
        dialled: Option<TcpStream>,
    ) -> (Outcome, [u64; 2]) {
        let respond = self.chosen.iter().find_map(|c| match &c.spec.kind {
            FaultKind::Respond(r) => Some((c, r.clone())),
            _ => None,
        });
        if let Some((chosen, r)) = respond {
            self.hit(chosen, None).fire();
            return Box::pin(self.respond(client, r)).await;
        }
        if let Some((kind, e)) = dest.error {
            self.relay.events.relay_error(self.info, kind, &e);
            return reset_client(client);
        }
        // The seam for connect-phase truth: today a failed dial resets the
        // client, which has already connected to us.
        let upstream = match dialled {
            Some(s) => s,
            None => match self.dial(&dest.addrs, dest.inside.as_ref()).await {
                Ok(s) => s,
                Err(e) => {
                    self.relay
                        .events
                        .relay_error(self.info, e.kind(), &e.to_string());
                    sockopt::set_linger_zero(client);
                    return (Outcome::DialFailed, [0, 0]);
                }
            },
        };
        sockopt::tune(&upstream);
        let up = self.direction(client, &upstream, Direction::Upstream);
        let down = self.direction(&upstream, client, Direction::Downstream);
        let (outcome, bytes) = run_pair(up, down, client, Some(&upstream)).await;
        teardown(outcome, client, Some(&upstream)).await;
        (outcome, bytes)
    }

    async fn dial(
        &self,
        addrs: &[SocketAddr],
        inside: Option<&Arc<Sandbox>>,
    ) -> Result<TcpStream, DialError> {
        let mut last = DialError::Other("no address to dial".into());
        let timeout = self.relay.opts.dial_timeout;
        for addr in addrs {
            let r = match inside {
                Some(sb) => dial_with(*addr, timeout, dial_inside(sb, *addr)).await,
                None => dial_host(*addr, timeout).await,
            };
            match r {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
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

    /// The stages for one direction, in rule and fault order.
    fn stages(&self, dir: Direction) -> Vec<(FaultKind, StageCtx)> {
        self.chosen
            .iter()
            .filter(|c| c.spec.stream.includes(dir) && c.spec.kind.has_stage())
            .map(|c| {
                let ctx = StageCtx {
                    dir,
                    rng: c.rng(dir),
                    window: c.spec.active,
                    epoch: self.relay.epoch,
                    opened: self.opened,
                    hit: self.hit(c, Some(dir)),
                    partition: self.partition.clone(),
                };
                (c.spec.kind.clone(), ctx)
            })
            .collect()
    }

    /// A fault-free direction splices; one with faults runs the pipeline.
    async fn direction(&self, src: &TcpStream, dst: &TcpStream, dir: Direction) -> (DirEnd, u64) {
        let stages = self.stages(dir);
        let stats = &self.relay.events.stats;
        if stages.is_empty() {
            splice::run(src, dst, dir, stats).await
        } else {
            // Boxed: the pipeline's state is large, and an idle fault-free
            // connection should not carry room for it.
            Box::pin(pipeline::run(
                pipeline::Source::Socket(src),
                dst,
                dir,
                stages,
                stats,
            ))
            .await
        }
    }

    /// `respond`: the canned reply flows down the downstream pipeline (so
    /// other downstream faults still apply); what the client sends is read
    /// and discarded.
    async fn respond(
        &self,
        client: &TcpStream,
        r: crate::fault::respond::Respond,
    ) -> (Outcome, [u64; 2]) {
        if r.wait_request {
            let _ = tokio::time::timeout(
                crate::fault::respond::Respond::REQUEST_WAIT,
                client.readable(),
            )
            .await;
        }
        let stats = &self.relay.events.stats;
        let down = pipeline::run(
            pipeline::Source::Script(r.script()),
            client,
            Direction::Downstream,
            self.stages(Direction::Downstream),
            stats,
        );
        let up = discard(client);
        let (outcome, bytes) = run_pair(up, down, client, None).await;
        teardown(outcome, client, None).await;
        (outcome, bytes)
    }
}

fn reset_client(client: &TcpStream) -> (Outcome, [u64; 2]) {
    sockopt::set_linger_zero(client);
    (Outcome::DialFailed, [0, 0])
}

/// Reads and drops what the client sends (nobody upstream wants it).
async fn discard(client: &TcpStream) -> (DirEnd, u64) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0u64;
    loop {
        if client.readable().await.is_err() {
            return (DirEnd::Reset, total);
        }
        match client.try_read(&mut buf) {
            Ok(0) => return (DirEnd::Fin, total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return (DirEnd::Reset, total),
        }
    }
}

/// Runs both directions to their end. A RST or a close in either ends the
/// connection at once; after one direction delivered its FIN, an error on
/// its source socket (the peer's RST, noticed even while the other direction
/// is held by a stall) ends it too.
async fn run_pair(
    up: impl Future<Output = (DirEnd, u64)>,
    down: impl Future<Output = (DirEnd, u64)>,
    client: &TcpStream,
    upstream: Option<&TcpStream>,
) -> (Outcome, [u64; 2]) {
    tokio::pin!(up, down);
    let mut bytes = [0u64; 2];
    let (mut up_done, mut down_done) = (false, false);
    let verdict = |end: DirEnd| match end {
        DirEnd::Fin => None,
        DirEnd::Reset => Some(Outcome::Reset),
        DirEnd::Close => Some(Outcome::Closed),
    };
    loop {
        tokio::select! {
            (end, n) = &mut up, if !up_done => {
                bytes[0] = n;
                up_done = true;
                if let Some(o) = verdict(end) { return (o, bytes); }
            }
            (end, n) = &mut down, if !down_done => {
                bytes[1] = n;
                down_done = true;
                if let Some(o) = verdict(end) { return (o, bytes); }
            }
            _ = socket_error(Some(client)), if up_done => return (Outcome::Reset, bytes),
            _ = socket_error(upstream), if down_done && upstream.is_some() => return (Outcome::Reset, bytes),
        }
        if up_done && down_done {
            return (Outcome::Fin, bytes);
        }
    }
}

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
        Outcome::Reset | Outcome::DialFailed | Outcome::Aborted => {
            for s in socks.into_iter().flatten() {
                sockopt::set_linger_zero(s);
            }
        }
        Outcome::Closed => {
            // FIN to both, then read (and drop) until each peer closes too,
            // so that unread bytes do not turn the close into an RST.
            for s in socks.into_iter().flatten() {
                sockopt::shutdown_write(s);
            }
            let _ = tokio::time::timeout(CLOSE_LINGER, async {
                futures_util::join!(discard(client), async {
                    if let Some(u) = upstream {
                        discard(u).await;
                    }
                });
            })
            .await;
        }
        Outcome::Fin => {}
    }
}
