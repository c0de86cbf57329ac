//! What the relay needs from interception (`netchaos run`, `attach`,
//! `--in-place`), stated here and implemented by [`crate::intercept`]: the
//! relay never reaches into namespaces, nftables or the SYN gate itself.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::fault::Partition;
use crate::ruleset::ConnFaults;

/// Where a destination is reached from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// netchaos's own network namespace (`run`: the host's).
    Host,
    /// The intercepted namespace: a service of the command's own, the
    /// namespace's own addresses, or every destination of an existing
    /// namespace (`attach`, `--in-place`).
    Inside,
}

/// What the relay takes over when it accepts a client whose SYN the gate
/// held: the decisions made for it, and the upstream dialled meanwhile.
pub(crate) struct Handoff {
    pub seq: u64,
    /// The connection's rules and draws (it follows them while it runs).
    pub faults: ConnFaults,
    pub names: Vec<String>,
    /// The upstream, already connected (none for `respond`, or for a
    /// service inside the namespace, dialled when the relay has the client).
    pub upstream: Option<TcpStream>,
    /// When the SYN arrived: the handshake was held from then on (the
    /// connect phase the event log's close line reports as `syn_ms`).
    pub syn_at: std::time::Instant,
}

/// How a peer's own socket stands, as socket diagnostics report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerQueues {
    /// Bytes it received that its owner has not read yet.
    pub unread: usize,
    /// Bytes its owner wrote that the relay has not acknowledged: more
    /// than a moment's worth when the relay stopped taking them.
    pub unacked: usize,
}

/// Where the relay can look at the sockets at the other end of its own
/// (the kernel's socket diagnostics, in the namespace they live in).
pub(crate) trait PeerSockets: Send + Sync {
    /// The queues of the TCP socket bound to `src` and connected to `dst`,
    /// if there is one.
    fn queues(&self, src: SocketAddr, dst: SocketAddr) -> Option<PeerQueues>;
}

pub(crate) type DialFuture<'a> = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send + 'a>>;

/// One intercepted namespace, as the relay sees it.
pub(crate) trait Interception: Send + Sync {
    /// Names `ip` is known by (learned from the namespace's DNS answers).
    fn names(&self, ip: IpAddr) -> Vec<String>;

    /// The decisions and upstream of a client the relay accepted, if the
    /// SYN gate held its SYN (`client` as the relay sees it, `dst` its
    /// original destination).
    fn claim(&self, client: SocketAddr, dst: SocketAddr) -> Option<Handoff>;

    /// Where a connection to `dst` is dialled from.
    fn route(&self, dst: SocketAddr) -> Route;

    /// Connects to `dst` from inside the namespace, so that interception
    /// lets the connection through; advertising `mss` when given. `from`,
    /// the client's own source, is what the server should see where the
    /// namespace can show it.
    fn dial_inside(
        &self,
        dst: SocketAddr,
        mss: Option<u32>,
        from: Option<SocketAddr>,
    ) -> DialFuture<'_>;

    /// The namespace's identity (the inode of its `ns/net`; 0 if unknown),
    /// to tell netchaos's own listeners in it apart ([`super::own`]).
    fn netns(&self) -> u64;

    /// Whether `ip` is one of the namespace's own addresses (loopback
    /// included): what a listener on every address there accepts.
    fn is_local(&self, ip: IpAddr) -> bool;

    /// Whether netchaos bounded the TCP send buffers of the namespace's
    /// sockets (`run`'s own namespace), so that the relay holds what a
    /// path would ([`super::holding`]).
    fn sends_bounded(&self) -> bool;

    /// Packet-level control of `client`'s flow (blackouts).
    fn partition(&self, client: SocketAddr) -> Arc<dyn Partition>;

    /// The queues of the namespace's TCP socket bound to `src` and
    /// connected to `dst`, if there is one ([`PeerSockets`]).
    fn peer_queues(&self, src: SocketAddr, dst: SocketAddr) -> Option<PeerQueues>;
}
