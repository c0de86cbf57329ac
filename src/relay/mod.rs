//! The relay engine: listeners, the accept loop, and shutdown.
//!
//! The accept loop only accepts and spawns: each connection gets its own
//! task ([`conn`]) that resolves, decides faults, dials and relays, so a slow
//! or dead upstream never holds up the next client. Each direction of a
//! connection either takes the fast path ([`fast`]) or, when faults touch
//! its bytes, runs a pipeline of fault stages ([`pipeline`]).
//!
//! The relay knows nothing of namespaces, nftables or the SYN gate: where a
//! connection came from and how to reach inside is asked of an
//! [`Interception`] ([`interception`]), which `intercept` implements. It
//! never imports `intercept`, `control` or `commands`.

pub(crate) mod answer;
pub(crate) mod arrival;
pub(crate) mod conn;
pub(crate) mod dial;
pub(crate) mod fast;
pub(crate) mod holding;
pub(crate) mod interception;
pub(crate) mod own;
pub(crate) mod pipeline;

use std::io;
use std::net::SocketAddr;

use crate::socket::sockopt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::events::Events;
use crate::plan::Flow;
use crate::ruleset::RuleSet;

pub(crate) use crate::socket::is_loopback;
pub(crate) use conn::EndpointTls;
pub(crate) use interception::{Handoff, Interception, PeerQueues, PeerSockets, Route};
pub(crate) use pipeline::RESET_DRAIN;

/// The socket a direction reads from.
#[derive(Clone, Copy)]
pub(crate) struct SrcSocket<'a> {
    pub(crate) socket: &'a tokio::net::TcpStream,
    /// The other direction found the socket reset (its write failed), so
    /// that the end of stream a read then reports is that RST, not a FIN.
    pub(crate) reset: &'a std::sync::atomic::AtomicBool,
    /// How often its answers may still wait briefly for a FIN behind them
    /// ([`answer`]): only a server on this host's do.
    pub(crate) waits: &'a answer::Waits,
}

/// How one direction of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirEnd {
    /// FIN delivered to the destination; the other direction may go on.
    Fin,
    /// The connection must be aborted with RST on both sides.
    Reset,
    /// The destination reset the connection under a write: the other
    /// direction, which reads from that socket, still carries what the
    /// destination sent before its RST; then both sides are reset.
    DstReset,
    /// A fault closed the stream: close the connection cleanly.
    Close,
}

/// Where a listener's connections go.
pub(crate) struct Endpoint {
    /// The proxy's name (rules can match it), or what the listener is for.
    pub name: Arc<str>,
    pub target: Target,
    pub flow: Flow,
    /// Closes the listener and ends its connections (a proxy disabled or
    /// deleted through the API).
    pub cancel: CancellationToken,
    /// Fires once the listener is closed.
    pub closed: CancellationToken,
    /// TLS served to its clients or spoken to its upstream.
    pub tls: EndpointTls,
    /// How a client's connection ends when netchaos gives up on it.
    pub ends: EndStyle,
}

/// How a client's connection ends when netchaos gives up on it: its
/// upstream cannot be reached, or its proxy is disabled, removed or
/// pointed elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EndStyle {
    /// An RST: the client's read fails (ECONNRESET), as close as an
    /// explicit proxy comes to a refused connect. `netchaos proxy`'s
    /// listeners.
    Rst,
    /// A FIN: the client reads the end of the stream, as Toxiproxy does.
    /// Proxies of the control API.
    Fin,
}

impl Endpoint {
    pub(crate) fn new(name: impl Into<Arc<str>>, target: Target, flow: Flow) -> Endpoint {
        Endpoint {
            name: name.into(),
            target,
            flow,
            cancel: CancellationToken::new(),
            closed: CancellationToken::new(),
            tls: EndpointTls::default(),
            ends: EndStyle::Rst,
        }
    }

    /// The same endpoint, ending given-up connections `ends`.
    pub(crate) fn ending(mut self, ends: EndStyle) -> Endpoint {
        self.ends = ends;
        self
    }

    /// The same endpoint, with TLS on its client or upstream side.
    pub(crate) fn with_tls(mut self, tls: EndpointTls) -> Endpoint {
        self.tls = tls;
        self
    }

    /// Closes the listener (and ends its connections); completes once the
    /// port is free.
    pub(crate) async fn close(&self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.closed.cancelled()).await;
    }
}

/// How the destination of a connection is found.
pub(crate) enum Target {
    /// `netchaos proxy`: a configured `host:port`, resolved per connection.
    Fixed(String),
    /// Interception: wherever the client meant to go (its original
    /// destination before the redirect), dialled where the interception
    /// says ([`Interception::route`]).
    Transparent(Arc<dyn Interception>),
    /// `--expose`: a port inside the namespace, reached from the host.
    Inside {
        port: u16,
        ns: Arc<dyn Interception>,
    },
}

/// Relay settings from the command line.
#[derive(Debug, Clone)]
pub(crate) struct RelayOptions {
    /// How long to wait for an upstream to accept before resetting the
    /// client.
    pub dial_timeout: Duration,
    /// Most connections open at once (see [`Relay::serve`]).
    pub max_connections: usize,
    /// How long an idle connection's peer may leave keepalive probes
    /// unanswered before the relay gives up on it (a vanished host).
    pub peer_timeout: Duration,
    /// Terminating and re-originating TLS for the HTTP layer (`--tls`, or
    /// a listener's TLS), when set up.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// `--end`: how every explicit endpoint ends given-up connections
    /// (`None`: each kind's default).
    pub ends: Option<EndStyle>,
    /// The hosts the built-in mock answers for (`--mock`), never dialled:
    /// their connections go to the mock instead.
    pub mocks: Option<Arc<crate::mock::stands::Stands>>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            dial_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            peer_timeout: DEFAULT_PEER_TIMEOUT,
            tls: None,
            ends: None,
            mocks: None,
        }
    }
}

impl RelayOptions {
    /// The options from the command line and the environment; a malformed
    /// `NETCHAOS_PEER_TIMEOUT` or `NETCHAOS_HTTP_MEMORY` is an error (the
    /// latter sets the HTTP layer's budget, one for the process).
    pub(crate) fn new(
        dial_timeout: Duration,
        max_connections: Option<u32>,
    ) -> Result<RelayOptions, BadEnv> {
        crate::http::budget::set_limit(http_memory_from_env()?);
        Ok(RelayOptions {
            dial_timeout,
            max_connections: max_connections.map_or_else(default_max_connections, |n| n as usize),
            peer_timeout: peer_timeout_from_env()?,
            tls: None,
            ends: None,
            mocks: None,
        })
    }
}

/// See [`RelayOptions::peer_timeout`].
pub(crate) const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// `NETCHAOS_PEER_TIMEOUT` (a duration like `5s`, at least 1s) overrides
/// the default; the tests use it to see a vanished peer given up on
/// quickly.
fn peer_timeout_from_env() -> Result<Duration, BadEnv> {
    let Some(v) = std::env::var_os("NETCHAOS_PEER_TIMEOUT") else {
        return Ok(DEFAULT_PEER_TIMEOUT);
    };
    let text = v.to_string_lossy().into_owned();
    let bad = |expected: &str| BadEnv {
        name: "NETCHAOS_PEER_TIMEOUT",
        value: text.clone(),
        expected: expected.to_string(),
    };
    match crate::units::parse_duration(&text) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        Ok(_) => Err(bad("at least 1s")),
        Err(e) => Err(bad(e)),
    }
}

/// `NETCHAOS_HTTP_MEMORY` (a size like `512MiB`, at least 16 MiB)
/// overrides the HTTP layer's memory budget ([`crate::http::budget`]).
fn http_memory_from_env() -> Result<usize, BadEnv> {
    use crate::http::budget::{DEFAULT_LIMIT, MIN_LIMIT};
    let Some(v) = std::env::var_os("NETCHAOS_HTTP_MEMORY") else {
        return Ok(DEFAULT_LIMIT);
    };
    let text = v.to_string_lossy().into_owned();
    let bad = |expected: &str| BadEnv {
        name: "NETCHAOS_HTTP_MEMORY",
        value: text.clone(),
        expected: expected.to_string(),
    };
    match crate::units::parse_size(&text).map(usize::try_from) {
        Ok(Ok(n)) if n >= MIN_LIMIT => Ok(n),
        Ok(_) => Err(bad("at least 16MiB")),
        Err(e) => Err(bad(e)),
    }
}

/// An environment variable with a value netchaos cannot use.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?}: expected {expected}")]
pub(crate) struct BadEnv {
    name: &'static str,
    value: String,
    expected: String,
}

/// What the open-files limit allows: each connection holds two sockets; a
/// third of the limit per connection leaves room for the control API's own
/// connections (bounded), the event log, DNS and everything else.
pub(crate) fn default_max_connections() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    // 64 for netchaos itself, 512 for the control API (its own cap).
    (soft.saturating_sub(64 + 512) / 3).clamp(16, 100_000) as usize
}

/// The DNS layer and how its resolvers are reached (`None`: from the host).
pub(crate) type DnsService = (Arc<crate::dns::DnsLayer>, Option<Arc<dyn Interception>>);

/// The running relay: shared by the accept loops and every connection.
pub(crate) struct Relay {
    pub rules: Arc<RuleSet>,
    pub events: Arc<Events>,
    /// When netchaos started: `active` windows count from here.
    pub epoch: Instant,
    pub opts: RelayOptions,
    seq: AtomicU64,
    /// Connections open now (accepted and not yet ended).
    open: AtomicUsize,
    /// Signalled each time a connection ends (paused listeners wait on it).
    freed: Notify,
    /// Stops the accept loops.
    stop: CancellationToken,
    /// Ends the connections still open after the drain period.
    abort: CancellationToken,
    tasks: TaskTracker,
    /// The DNS layer, under interception: TCP port 53 goes to it, with
    /// resolvers dialled from the host or (`Some`) through the namespace.
    dns: OnceLock<DnsService>,
    /// Where peers in netchaos's own namespace can be looked at: the
    /// clients of explicit proxies, upstreams on this host.
    host_sockets: OnceLock<Arc<dyn PeerSockets>>,
}

impl Relay {
    pub(crate) fn new(rules: Arc<RuleSet>, events: Arc<Events>, opts: RelayOptions) -> Arc<Relay> {
        Arc::new(Relay {
            rules,
            events,
            epoch: Instant::now(),
            opts,
            seq: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            freed: Notify::new(),
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            tasks: TaskTracker::new(),
            dns: OnceLock::new(),
            host_sockets: OnceLock::new(),
        })
    }

    /// Lets connections look at their peers' sockets in netchaos's own
    /// namespace, to reset each only once it has read what came before
    /// (set once; without it, a reset waits only for the acknowledgement).
    pub(crate) fn see_host_sockets(&self, sockets: Arc<dyn PeerSockets>) {
        let _ = self.host_sockets.set(sockets);
    }

    pub(crate) fn host_sockets(&self) -> Option<Arc<dyn PeerSockets>> {
        self.host_sockets.get().cloned()
    }

    /// Starts the DNS layer of an interception (once): the forwarder's
    /// queries and TCP port 53 both go through it, to `resolvers`.
    pub(crate) fn start_dns(
        &self,
        names: Arc<crate::dns::NameTable>,
        resolvers: Vec<SocketAddr>,
        inside: Option<Arc<dyn Interception>>,
    ) -> Arc<crate::dns::DnsLayer> {
        let layer = Arc::new(crate::dns::DnsLayer::new(
            self.rules.clone(),
            self.events.clone(),
            self.epoch,
            names,
            Arc::new(resolvers),
            self.opts.mocks.clone(),
        ));
        let _ = self.dns.set((layer.clone(), inside));
        layer
    }

    /// Accepts on `listener` and relays each connection to `ep`, until
    /// netchaos stops or the endpoint is cancelled.
    ///
    /// At `max_connections` (and when the process runs out of descriptors
    /// or memory) the listener stops listening — connections that already
    /// completed the handshake are served first — so that new clients are
    /// refused at connect by the kernel (RST: ECONNREFUSED) instead of
    /// being accepted and dropped; it listens again once a connection ends.
    pub(crate) fn serve(self: &Arc<Self>, listener: TcpListener, ep: impl Into<Arc<Endpoint>>) {
        let relay = self.clone();
        let ep = ep.into();
        let (ns, kind) = match &ep.target {
            Target::Transparent(ns) => (ns.netns(), own::Kind::Relay),
            Target::Fixed(_) | Target::Inside { .. } => (own::host_ns(), own::Kind::Proxy),
        };
        // The socket's own namespace where netchaos may ask (an attached
        // namespace's inbound listener is not where its target says).
        let ns = own::ns_of_socket(&listener).unwrap_or(ns);
        let registered = listener
            .local_addr()
            .ok()
            .map(|a| own::register(ns, a, kind));
        self.tasks.spawn(async move {
            let _registered = registered;
            relay.accept_loop(listener, &ep).await;
            // The listener is closed (dropped) by now: its port is free.
            ep.closed.cancel();
        });
    }

    async fn accept_loop(self: &Arc<Self>, listener: TcpListener, ep: &Arc<Endpoint>) {
        let mut listener = listener;
        // Set once here, the relay's socket options come with every socket
        // the listener accepts from now on; the ones already waiting in its
        // backlog copied it untuned and are tuned one by one.
        let inherits = sockopt::tune_listener(&listener, self.opts.peer_timeout);
        self.accept_waiting(&socket2::SockRef::from(&listener), ep, false);
        loop {
            if self.at_capacity() {
                match self.pause(listener, ep, Pause::Limit, inherits).await {
                    Some(l) => listener = l,
                    None => return,
                }
                continue;
            }
            let accepted = tokio::select! {
                _ = self.stop.cancelled() => {
                    // Connections the kernel completed already are served
                    // in the drain (closing the listener would reset them).
                    self.accept_waiting(&socket2::SockRef::from(&listener), ep, inherits);
                    return;
                }
                _ = ep.cancel.cancelled() => return,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((sock, peer)) => self.spawn_conn(sock, peer, ep, inherits),
                Err(e) if out_of_resources(&e) => {
                    tracing::warn!("accept: {e}");
                    match self.pause(listener, ep, Pause::Resources, inherits).await {
                        Some(l) => listener = l,
                        None => return,
                    }
                }
                Err(e) => accept_error(&e).await,
            }
        }
    }

    /// Whether the connection limit is reached.
    pub(crate) fn at_capacity(&self) -> bool {
        self.open.load(Ordering::Acquire) >= self.opts.max_connections
    }

    /// Connections open now.
    pub(crate) fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// `inherits`: the socket came with the relay's options from its
    /// listener ([`sockopt::tune_listener`]).
    fn spawn_conn(
        self: &Arc<Self>,
        sock: TcpStream,
        peer: SocketAddr,
        ep: &Arc<Endpoint>,
        inherits: bool,
    ) {
        self.open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.clone());
        // Boxed: a connection's future is ~5 KB (both directions' state
        // inline), which tokio would otherwise copy into the task's cell at
        // spawn and write again, whole, when it finishes; a box is made and
        // filled once.
        let serve = Box::pin(conn::serve(self.clone(), sock, peer, ep.clone(), inherits));
        self.tasks.spawn(serve.map(move |()| drop(slot)));
    }

    /// Serves every connection waiting in `sock`'s backlog now, without
    /// blocking; `inherits`: they have the relay's options from it.
    fn accept_waiting(
        self: &Arc<Self>,
        sock: &socket2::SockRef<'_>,
        ep: &Arc<Endpoint>,
        inherits: bool,
    ) {
        while let Ok((s, peer)) = sock.accept() {
            let Some(peer) = peer.as_socket() else {
                continue;
            };
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            if let Ok(s) = TcpStream::from_std(s.into()) {
                self.spawn_conn(s, peer, ep, inherits);
            }
        }
    }

    /// Stops listening until there is room again (or, out of resources,
    /// for at most a second); `None` when netchaos stops meanwhile.
    ///
    /// The listener leaves the reactor while it is paused and comes back as
    /// a new registration: shutting a listening socket down reports a hang-up,
    /// which tokio keeps as a final state of the old registration.
    async fn pause(
        self: &Arc<Self>,
        listener: TcpListener,
        ep: &Arc<Endpoint>,
        why: Pause,
        inherits: bool,
    ) -> Option<TcpListener> {
        let listener = match listener.into_std() {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("{}: cannot pause the listener: {e}", ep.name);
                return None;
            }
        };
        let sock = socket2::SockRef::from(&listener);
        // Whoever already completed the handshake is served, not reset (the
        // limit is exceeded by at most what the backlog held).
        self.accept_waiting(&sock, ep, inherits);
        // A listening socket that is shut down for reading stops listening
        // (new SYNs get an RST) but keeps its address; `listen` resumes it.
        let paused = sock.shutdown(std::net::Shutdown::Read);
        if let Err(e) = &paused {
            tracing::warn!("{}: cannot stop listening: {e}", ep.name);
        } else {
            self.events.listener_paused(why.as_str());
            match why {
                Pause::Limit => tracing::warn!(
                    "{}: {} connections open, the limit (--max-connections): new connections are refused until one ends",
                    ep.name,
                    self.open_connections()
                ),
                Pause::Resources => tracing::warn!(
                    "{}: out of file descriptors or memory: new connections are refused until one ends",
                    ep.name
                ),
            }
        }
        let go_on = loop {
            let freed = self.freed.notified();
            if why == Pause::Limit && !self.at_capacity() {
                break true;
            }
            tokio::select! {
                _ = self.stop.cancelled() => break false,
                _ = ep.cancel.cancelled() => break false,
                _ = freed => if why == Pause::Resources { break true },
                _ = tokio::time::sleep(Duration::from_secs(1)), if why == Pause::Resources => break true,
            }
        };
        if !go_on {
            return None;
        }
        if paused.is_ok() {
            if let Err(e) = sock.listen(1024) {
                tracing::error!("{}: cannot listen again: {e}", ep.name);
                return None;
            }
            tracing::info!("{}: accepting connections again", ep.name);
        }
        match TcpListener::from_std(listener) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::error!("{}: cannot listen again: {e}", ep.name);
                None
            }
        }
    }

    /// The DNS layer, when an intercepted connection to `dst` is DNS over
    /// TCP (port 53) that it serves.
    pub(crate) fn dns_for(&self, dst: SocketAddr) -> Option<&DnsService> {
        self.dns.get().filter(|_| dst.port() == 53)
    }

    /// Completes when netchaos begins to stop (before the drain).
    pub(crate) async fn stopping(&self) {
        self.stop.cancelled().await
    }

    /// A token cancelled when netchaos begins to stop, for a task that
    /// cannot borrow the relay (an HTTP/2 connection's engine).
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops accepting, lets open connections finish for up to `drain`,
    /// then ends the rest.
    pub(crate) async fn shutdown(&self, drain: Duration) {
        self.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(drain, self.tasks.wait())
            .await
            .is_err()
        {
            self.abort.cancel();
            self.tasks.wait().await;
        }
    }

    /// The next connection's sequence number (1, 2, …): its id in events,
    /// and, with the seed, what decides its faults.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Why a listener stopped listening for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// `--max-connections` reached.
    Limit,
    /// Out of file descriptors or memory.
    Resources,
}

impl Pause {
    fn as_str(self) -> &'static str {
        match self {
            Pause::Limit => "limit",
            Pause::Resources => "resources",
        }
    }
}

fn out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Other accept errors are never fatal either: the loop goes on after a
/// short pause (so that it cannot spin).
async fn accept_error(e: &io::Error) {
    if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR)) {
        return;
    }
    tracing::warn!("accept: {e}");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// One open connection's place under the limit; freed when its task ends
/// (or is dropped).
struct Slot(Arc<Relay>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify_waiters();
    }
}

/// Why a listener could not be opened, in words that say what to do.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {reason}")]
pub(crate) struct BindError {
    pub(crate) addr: SocketAddr,
    pub(crate) failure: BindFailure,
    pub(crate) reason: String,
}

/// The kind of a [`BindError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BindFailure {
    /// Another socket holds the address (EADDRINUSE).
    InUse,
    /// A privileged port (EACCES).
    Denied,
    /// No local interface has the address (EADDRNOTAVAIL).
    NotLocal,
    Other,
}

/// Opens a listener with a clear error for the usual mistakes (needs a
/// running tokio runtime).
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    let l = bind_std(addr)?;
    TcpListener::from_std(l).map_err(|e| BindError {
        addr,
        failure: BindFailure::Other,
        reason: e.to_string(),
    })
}

/// [`bind`] without a runtime: a non-blocking std listener.
pub(crate) fn bind_std(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    // Port 0: a free port is chosen first and then bound by number (see
    // [`numbered`]); if another socket takes it in between, try again.
    for _ in 0..16 {
        match bind_once(numbered(addr).map_err(|e| BindError {
            addr,
            failure: BindFailure::Other,
            reason: e.to_string(),
        })?) {
            Err(e) if addr.port() == 0 && e.failure == BindFailure::InUse => {
                continue;
            }
            r => return r,
        }
    }
    bind_once(addr)
}

/// `addr` with a port of 0 replaced by a port that is free now.
///
/// A listener must be bound to its port by number: when it stops
/// listening for a while (the connection limit), Linux keeps a port that
/// was asked for by number, but gives back one it picked itself and picks
/// another when listening resumes.
pub(crate) fn numbered(addr: SocketAddr) -> io::Result<SocketAddr> {
    if addr.port() != 0 {
        return Ok(addr);
    }
    let probe = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if addr.is_ipv6() {
        let _ = probe.set_only_v6(true);
    }
    probe.bind(&addr.into())?;
    let port = probe
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| io::Error::other("no port"))?;
    Ok(SocketAddr::new(addr.ip(), port))
}

/// A listener on every address, IPv6 and IPv4 alike (`[::]` without
/// IPV6_V6ONLY), as Go listens for `:PORT` or `0.0.0.0:PORT`; plain IPv4
/// where the host has no IPv6.
pub(crate) fn bind_any(port: u16) -> Result<TcpListener, BindError> {
    let v6 = SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port);
    let l = match numbered(v6).map_err(|e| BindError {
        addr: v6,
        failure: BindFailure::Other,
        reason: e.to_string(),
    }) {
        Ok(at) => bind_socket(at, false),
        Err(e) => Err(e),
    };
    let l = match l {
        Ok(l) => l,
        Err(e) if e.failure == BindFailure::Other || e.failure == BindFailure::NotLocal => {
            return bind(SocketAddr::new(
                std::net::Ipv4Addr::UNSPECIFIED.into(),
                port,
            ));
        }
        Err(e) => return Err(e),
    };
    TcpListener::from_std(l).map_err(|e| BindError {
        addr: v6,
        failure: BindFailure::Other,
        reason: e.to_string(),
    })
}

fn bind_once(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    bind_socket(addr, true)
}

fn bind_socket(addr: SocketAddr, v6_only: bool) -> Result<std::net::TcpListener, BindError> {
    let fail = |reason: String| BindError {
        addr,
        failure: BindFailure::Other,
        reason,
    };
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
        .map_err(|e| fail(e.to_string()))?;
    // A restarted netchaos must not trip over its own TIME_WAIT sockets.
    let _ = sock.set_reuse_address(true);
    if addr.is_ipv6() {
        let _ = sock.set_only_v6(v6_only);
    }
    sock.set_nonblocking(true)
        .map_err(|e| fail(e.to_string()))?;
    sock.bind(&addr.into()).map_err(|e| {
        let (failure, reason) = match e.raw_os_error() {
            Some(libc::EADDRINUSE) => (
                BindFailure::InUse,
                "address already in use (another process holds this port; stop it or choose another port)".into(),
            ),
            Some(libc::EACCES) => (
                BindFailure::Denied,
                format!(
                    "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a port above 1023 such as {})",
                    addr.port().saturating_add(8000).max(1024)
                ),
            ),
            Some(libc::EADDRNOTAVAIL) => (
                BindFailure::NotLocal,
                "address not available (no local interface has this address)".into(),
            ),
            _ => (BindFailure::Other, e.to_string()),
        };
        BindError {
            addr,
            failure,
            reason,
        }
    })?;
    sock.listen(1024).map_err(|e| fail(e.to_string()))?;
    Ok(sock.into())
}
