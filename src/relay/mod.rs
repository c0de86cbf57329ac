//! The relay engine: listeners, the accept loop, and shutdown.
//!
//! The accept loop only accepts and spawns: each connection gets its own
//! task ([`conn`]) that resolves, decides faults, dials and relays, so a slow
//! or dead upstream never holds up the next client. Each direction of a
//! connection either splices ([`splice`]) or, when faults touch its bytes,
//! runs a pipeline of fault stages ([`pipeline`]).

pub mod conn;
pub mod dial;
pub mod pipeline;
pub mod sockopt;
pub mod splice;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::events::Events;
use crate::intercept::Sandbox;
use crate::plan::Flow;
use crate::ruleset::RuleSet;

pub use dial::{DialError, dial_host, is_loopback};
pub use pipeline::RESET_DRAIN;

/// How one direction of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirEnd {
    /// FIN delivered to the destination; the other direction may go on.
    Fin,
    /// The connection must be aborted with RST on both sides.
    Reset,
    /// A fault closed the stream: close the connection cleanly.
    Close,
}

/// Where a listener's connections go.
pub struct Endpoint {
    /// The proxy's name (rules can match it), or what the listener is for.
    pub name: Arc<str>,
    pub target: Target,
    pub flow: Flow,
    /// Closes the listener and ends its connections (a proxy disabled or
    /// deleted through the API).
    pub cancel: CancellationToken,
    /// Fires once the listener is closed.
    pub closed: CancellationToken,
}

impl Endpoint {
    pub fn new(name: impl Into<Arc<str>>, target: Target, flow: Flow) -> Endpoint {
        Endpoint {
            name: name.into(),
            target,
            flow,
            cancel: CancellationToken::new(),
            closed: CancellationToken::new(),
        }
    }

    /// Closes the listener (and ends its connections); completes once the
    /// port is free.
    pub async fn close(&self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.closed.cancelled()).await;
    }
}

/// How the destination of a connection is found.
pub enum Target {
    /// `netchaos proxy`: a configured `host:port`, resolved per connection.
    Fixed(String),
    /// `netchaos run`: wherever the client meant to go (its original
    /// destination before the redirect), dialled from the host's network
    /// namespace — unless it is a loopback address where the wrapped
    /// command itself listens, which stays inside.
    Transparent(Arc<Sandbox>),
    /// `--expose`: a port inside the namespace, reached from the host.
    Inside { port: u16, sandbox: Arc<Sandbox> },
}

/// Relay settings from the command line.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// How long to wait for an upstream to accept before resetting the
    /// client.
    pub dial_timeout: Duration,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            dial_timeout: Duration::from_secs(30),
        }
    }
}

/// The running relay: shared by the accept loops and every connection.
pub struct Relay {
    pub rules: Arc<RuleSet>,
    pub events: Arc<Events>,
    /// When netchaos started: `active` windows count from here.
    pub epoch: Instant,
    pub opts: RelayOptions,
    seq: AtomicU64,
    /// Stops the accept loops.
    stop: CancellationToken,
    /// Ends the connections still open after the drain period.
    abort: CancellationToken,
    tasks: TaskTracker,
}

impl Relay {
    pub fn new(rules: Arc<RuleSet>, events: Arc<Events>, opts: RelayOptions) -> Arc<Relay> {
        Arc::new(Relay {
            rules,
            events,
            epoch: Instant::now(),
            opts,
            seq: AtomicU64::new(0),
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            tasks: TaskTracker::new(),
        })
    }

    /// Accepts on `listener` and relays each connection to `ep`, until
    /// netchaos stops or the endpoint is cancelled.
    pub fn serve(self: &Arc<Self>, listener: TcpListener, ep: impl Into<Arc<Endpoint>>) {
        let relay = self.clone();
        let ep = ep.into();
        self.tasks.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = relay.stop.cancelled() => return,
                    _ = ep.cancel.cancelled() => return,
                    r = listener.accept() => r,
                };
                match accepted {
                    Ok((sock, peer)) => {
                        relay
                            .tasks
                            .spawn(conn::serve(relay.clone(), sock, peer, ep.clone()));
                    }
                    Err(e) => accept_error(&e).await,
                }
            }
        });
    }

    /// Stops accepting, lets open connections finish for up to `drain`,
    /// then ends the rest.
    pub async fn shutdown(&self, drain: Duration) {
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
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Accept errors are never fatal: out of descriptors or memory, the loop
/// pauses briefly (the kernel keeps the backlog) instead of spinning.
async fn accept_error(e: &io::Error) {
    let pause = match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            tracing::warn!("accept: {e}; pausing new connections briefly");
            Duration::from_millis(100)
        }
        Some(libc::ECONNABORTED | libc::EINTR) => return,
        _ => {
            tracing::warn!("accept: {e}");
            Duration::from_millis(10)
        }
    };
    tokio::time::sleep(pause).await;
}

/// Why a listener could not be opened, in words that say what to do.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {reason}")]
pub struct BindError {
    pub addr: SocketAddr,
    pub reason: String,
}

/// Opens a listener with a clear error for the usual mistakes (needs a
/// running tokio runtime).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, BindError> {
    let l = bind_std(addr)?;
    TcpListener::from_std(l).map_err(|e| BindError {
        addr,
        reason: e.to_string(),
    })
}

/// [`bind`] without a runtime: a non-blocking std listener.
pub fn bind_std(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    let fail = |reason: String| BindError { addr, reason };
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
        .map_err(|e| fail(e.to_string()))?;
    // A restarted netchaos must not trip over its own TIME_WAIT sockets.
    let _ = sock.set_reuse_address(true);
    if addr.is_ipv6() {
        let _ = sock.set_only_v6(true);
    }
    sock.set_nonblocking(true)
        .map_err(|e| fail(e.to_string()))?;
    sock.bind(&addr.into()).map_err(|e| {
        fail(match e.raw_os_error() {
            Some(libc::EADDRINUSE) => "address already in use (another process holds this port; stop it or choose another port)".into(),
            Some(libc::EACCES) => format!(
                "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a port above 1023 such as {})",
                addr.port().saturating_add(8000).max(1024)
            ),
            Some(libc::EADDRNOTAVAIL) => "address not available (no local interface has this address)".into(),
            _ => e.to_string(),
        })
    })?;
    sock.listen(1024).map_err(|e| fail(e.to_string()))?;
    Ok(sock.into())
}
