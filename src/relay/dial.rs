//! Where a connection goes and how it gets there: the destination of each
//! kind of endpoint (a configured upstream, the original destination of an
//! intercepted connection, a port inside the namespace), name resolution,
//! and dialling — from the host, or from inside the namespace — with the
//! failure named the way the client would have met it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use super::interception::{Interception, Route};
use super::{Endpoint, Target};
use crate::fault::connect::DialFailure;
use crate::socket::sockopt;

/// Where a connection goes.
pub(crate) struct Dest {
    /// Addresses to try, in order.
    pub addrs: Vec<SocketAddr>,
    /// Names the destination is known by (for rules and the event log).
    pub names: Vec<String>,
    /// What to call the destination when it has no address.
    pub label: String,
    /// Dial through the namespace instead of from the host.
    inside: Option<Arc<dyn Interception>>,
    /// An intercepted connection's namespace, whose route to the address
    /// decides where it is dialled from.
    routed: Option<Arc<dyn Interception>>,
    /// Why there is no address, if there is none.
    pub error: Option<(&'static str, String)>,
    /// A host the built-in mock answers for: dialled at the mock instead.
    pub mock: Option<Mocked>,
}

/// A connection the mock answers in the upstream's place.
#[derive(Debug, Clone)]
pub(crate) struct Mocked {
    /// Where the mock listens (netchaos's own namespace).
    pub at: SocketAddr,
    pub api: crate::mock::Api,
}

impl Mocked {
    fn of(s: &crate::mock::stands::Stand, stands: &crate::mock::stands::Stands) -> Mocked {
        Mocked {
            at: stands.at(),
            api: s.api,
        }
    }
}

impl Dest {
    /// Where the relay dials from: inside the namespace, or the host
    /// (`None`). An intercepted connection's route is asked here, only
    /// when the relay dials: one the SYN gate dialled never needs it, and
    /// asking lists the namespace's listeners (two netlink dumps).
    pub(crate) fn dial_from(&self) -> Option<Arc<dyn Interception>> {
        if let (Some(ns), Some(&dst)) = (&self.routed, self.addrs.first())
            && ns.route(dst) == Route::Inside
        {
            return Some(ns.clone());
        }
        self.inside.clone()
    }
}

/// Where a client of `ep` goes; a host in `mocks` goes to the mock
/// (a configured upstream is then not even resolved).
pub(crate) async fn destination(
    ep: &Endpoint,
    client: &TcpStream,
    mocks: Option<&crate::mock::stands::Stands>,
) -> Dest {
    let mut d = Dest {
        addrs: Vec::new(),
        names: Vec::new(),
        label: String::new(),
        inside: None,
        routed: None,
        error: None,
        mock: None,
    };
    match &ep.target {
        Target::Fixed(upstream) => {
            d.label = upstream.clone();
            let host = crate::plan::upstream_host(upstream);
            // The host's stand-in address, with the upstream's port: as
            // under `run`, where the DNS layer gives it.
            if let Some((m, s)) = mocks.and_then(|m| m.by_name(&host).map(|s| (m, s))) {
                let port = upstream
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse().ok())
                    .unwrap_or(443);
                d.names.push(s.host.clone());
                d.addrs.push(SocketAddr::from((s.v4, port)));
                d.mock = Some(Mocked::of(s, m));
                return d;
            }
            match resolve(upstream).await {
                Ok((host, addrs)) => {
                    d.names.extend(host);
                    d.addrs = addrs;
                }
                Err(e) => d.error = Some(("resolve_failed", e.to_string())),
            }
        }
        Target::Transparent(ns) => match sockopt::original_dst(client) {
            Ok(dst) => {
                d.names = ns.names(dst.ip());
                d.routed = Some(ns.clone());
                d.addrs.push(scoped(dst));
                if let Some((m, s)) = mocks.and_then(|m| m.by_ip(dst.ip()).map(|s| (m, s))) {
                    if !d.names.contains(&s.host) {
                        d.names.insert(0, s.host.clone());
                    }
                    d.mock = Some(Mocked::of(s, m));
                }
            }
            Err(e) => {
                d.label = "unknown".into();
                d.error = Some((
                    "no_original_destination",
                    format!("cannot read the original destination: {e}"),
                ));
            }
        },
        Target::Inside { port, ns } => {
            d.addrs = vec![
                SocketAddr::from(([127, 0, 0, 1], *port)),
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, *port)),
            ];
            d.inside = Some(ns.clone());
        }
    }
    d
}

/// A link-local IPv6 destination with the namespace's `lo` as its scope
/// (the original destination comes without one; inside `run`'s namespace
/// `lo` is the only interface).
fn scoped(dst: SocketAddr) -> SocketAddr {
    match dst {
        SocketAddr::V6(mut v6)
            if v6.scope_id() == 0 && (v6.ip().segments()[0] & 0xffc0) == 0xfe80 =>
        {
            v6.set_scope_id(1);
            SocketAddr::V6(v6)
        }
        other => other,
    }
}

/// Resolves `host:port`: the host's name (when it is not a literal) and its
/// addresses.
async fn resolve(upstream: &str) -> Result<(Option<String>, Vec<SocketAddr>), ResolveError> {
    if let Ok(a) = upstream.parse::<SocketAddr>() {
        return Ok((None, vec![a]));
    }
    let host = upstream.rsplit_once(':').map(|(h, _)| h.to_string());
    match tokio::net::lookup_host(upstream).await {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(ResolveError(format!("{upstream} resolved to no address")))
            } else {
                Ok((host, addrs))
            }
        }
        Err(e) => Err(ResolveError(format!("cannot resolve {upstream}: {e}"))),
    }
}

/// An upstream name that did not resolve.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ResolveError(String);

/// Why a dial failed: its class (what the client would have met) and the
/// kernel's words.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct DialError {
    pub failure: DialFailure,
    pub message: String,
}

impl DialError {
    /// The relay error kind for events and counters.
    pub(crate) fn kind(&self) -> &'static str {
        self.failure.kind()
    }
}

/// How the upstream side of a connection should look to the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Whatever the route to the server gives.
    #[default]
    Native,
    /// An Ethernet path's MSS even to a server on this host, for faults that
    /// cut the path (a blackout): over loopback's 64 KiB MSS the server's
    /// TCP autotunes its send buffer to megabytes, so it could go on
    /// writing through a partition that would block it on a real network.
    Ethernet,
}

impl Shape {
    /// The shape a connection with these faults needs.
    pub(crate) fn for_faults(faults: &[crate::fault::Chosen]) -> Shape {
        if faults
            .iter()
            .any(|c| matches!(c.spec.kind, crate::fault::FaultKind::Blackout(_)))
        {
            Shape::Ethernet
        } else {
            Shape::Native
        }
    }

    /// The MSS to advertise to `addr`, where the route's own would not do:
    /// an Ethernet path's (1500 bytes less the IP and TCP headers) to a
    /// server on loopback.
    fn mss(self, addr: SocketAddr) -> Option<u32> {
        if self == Shape::Native || !crate::socket::is_loopback(addr) {
            return None;
        }
        // An IPv4-mapped peer is IPv4 on the wire.
        match addr {
            SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_none() => Some(1440),
            _ => Some(1460),
        }
    }
}

/// Connects to `addr`, from inside the namespace when `inside` is given,
/// else from the host's.
pub(crate) async fn dial(
    addr: SocketAddr,
    timeout: Duration,
    inside: Option<&Arc<dyn Interception>>,
    shape: Shape,
    dialer: super::own::Dialer,
) -> Result<TcpStream, DialError> {
    use super::own::{self, Dialer, Kind};
    let from = inside.map_or_else(own::host_ns, |ns| ns.netns());
    let local = |ip| match inside {
        Some(ns) => ns.is_local(ip),
        None => own::is_host_address(ip),
    };
    let reached = own::reached(from, addr, local);
    if let Some(kind) = reached.filter(|k| !own::may_dial(*k, dialer)) {
        return Err(DialError {
            failure: DialFailure::Own,
            message: format!(
                "connect to {addr}: refused: it is netchaos's own {} (never dialled on a client's behalf{})",
                match kind {
                    Kind::Api => "control API",
                    Kind::Proxy => "proxy listener",
                    Kind::Relay => "relay listener",
                },
                match kind {
                    Kind::Relay => "",
                    _ => "; `run --api-for-command` lets the command reach the API",
                }
            ),
        });
    }
    // `--api-for-command`: the API is told which connections are the
    // command's (not the relay's root-owned sockets they come from).
    let to_api = reached == Some(Kind::Api);
    let mss = shape.mss(addr);
    let from = match dialer {
        Dialer::Client { from } => from,
        Dialer::Netchaos => None,
    };
    let s = match inside {
        Some(ns) => dial_with(addr, timeout, ns.dial_inside(addr, mss, from)).await,
        None => {
            dial_with(
                addr,
                timeout,
                connect_host(addr, mss, from.map(|f| f.port())),
            )
            .await
        }
    }?;
    if to_api && let Ok(l) = s.local_addr() {
        own::dialled_for_command(l);
    }
    Ok(s)
}

/// Connects from the host's namespace, advertising `mss` when given. A
/// handshake that is over when `connect()` returns (a server on this
/// host: loopback answers within the call) is taken as it is, with no
/// turn of the event loop and no timer armed; otherwise the socket is
/// awaited. A connection the server has reset by then is still one it
/// accepted: its client connects, then meets the reset.
async fn connect_host(
    addr: SocketAddr,
    mss: Option<u32>,
    port: Option<u16>,
) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = || -> std::io::Result<Socket> {
        let sock = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )?;
        if let Some(mss) = mss {
            sock.set_tcp_mss(mss)?;
        }
        Ok(sock)
    };
    // From the client's own source port where the host has it free (the
    // server sees the port the client bound, as directly); else any.
    let mut sock = socket()?;
    let mut bound = false;
    if let Some(p) = port.filter(|p| *p != 0) {
        let any = SocketAddr::new(
            match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
            },
            p,
        );
        bound = sock.bind(&any.into()).is_ok();
        if !bound {
            sock = socket()?;
        }
    }
    let pending = match sock.connect(&addr.into()) {
        Ok(()) => false,
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            !sockopt::connected_or_failed(&sock)
        }
        // That 4-tuple is taken on the host: any port will do.
        Err(e)
            if bound
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL)
                ) =>
        {
            return Box::pin(connect_host(addr, mss, None)).await;
        }
        Err(e) => return Err(e),
    };
    let stream = TcpStream::from_std(std::net::TcpStream::from(sock))?;
    if pending {
        stream.writable().await?;
    }
    match stream.take_error()? {
        // Connected, and already reset: a server that answered and reset
        // before this task looked (the relay relays both; see
        // `sockopt::tune_upstream`). A refused connect is ECONNREFUSED.
        Some(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => Ok(stream),
        Some(e) => Err(e),
        None => Ok(stream),
    }
}

pub(crate) async fn dial_with(
    addr: SocketAddr,
    timeout: Duration,
    connect: impl Future<Output = std::io::Result<TcpStream>>,
) -> Result<TcpStream, DialError> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(DialError {
            failure: DialFailure::from_errno(e.raw_os_error()),
            message: format!("connect to {addr}: {e}"),
        }),
        Err(_) => Err(DialError {
            failure: DialFailure::Timeout,
            message: format!(
                "connect to {addr}: no answer within {}",
                crate::units::format_duration(timeout)
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ethernet_shape_lowers_the_mss_only_towards_loopback() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(Shape::Ethernet.mss(at("127.0.0.1:80")), Some(1460));
        assert_eq!(Shape::Ethernet.mss(at("[::1]:80")), Some(1440));
        assert_eq!(Shape::Ethernet.mss(at("[::ffff:127.0.0.1]:80")), Some(1460));
        // A remote server's route has its own MSS.
        assert_eq!(Shape::Ethernet.mss(at("192.0.2.1:80")), None);
        assert_eq!(Shape::Native.mss(at("127.0.0.1:80")), None);
    }
}
