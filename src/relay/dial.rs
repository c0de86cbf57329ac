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

use super::{Endpoint, Target, sockopt};
use crate::intercept::Sandbox;

/// Where a connection goes.
pub struct Dest {
    /// Addresses to try, in order.
    pub addrs: Vec<SocketAddr>,
    /// Names the destination is known by (for rules and the event log).
    pub names: Vec<String>,
    /// What to call the destination when it has no address.
    pub label: String,
    /// Dial through the namespace instead of from the host.
    pub inside: Option<Arc<Sandbox>>,
    /// Why there is no address, if there is none.
    pub error: Option<(&'static str, String)>,
}

pub async fn destination(ep: &Endpoint, client: &TcpStream) -> Dest {
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
                if sandbox.dials_inside()
                    || sandbox.is_own(dst)
                    || (is_loopback(dst) && sandbox.listens_inside(dst))
                {
                    d.inside = Some(sandbox.clone());
                }
                d.addrs.push(scoped(dst));
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

/// Connects to `addr` from inside the namespace, with a socket made there
/// (by the agent, or by netchaos's thread in the namespace). Its port is
/// bound first and the SYN gate told, so that its SYN passes the redirect.
pub async fn dial_inside(sandbox: &Arc<Sandbox>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let sb = sandbox.clone();
    let std_sock = tokio::task::spawn_blocking(move || sb.socket_inside(addr.is_ipv6()))
        .await
        .map_err(std::io::Error::other)??;
    let sock = tokio::net::TcpSocket::from_std_stream(std_sock);
    let any: SocketAddr = if addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    sock.bind(any)?;
    let _own = sandbox.gate.expect_own(sock.local_addr()?.port(), addr);
    sock.connect(addr).await
}

/// Why a dial failed, as the client would have seen it.
#[derive(Debug)]
pub enum DialError {
    /// RST: the client should see ECONNREFUSED.
    Refused(String),
    /// Host unreachable: EHOSTUNREACH.
    Unreachable(String),
    /// No route to the network: ENETUNREACH.
    NetUnreachable(String),
    /// A firewall on the way refused it (ICMP administratively prohibited).
    Prohibited(String),
    /// No answer within the dial timeout.
    Timeout(String),
    /// Anything else (an address the host cannot use, no descriptors):
    /// the client's connect fails at once rather than hang.
    Other(String),
}

impl DialError {
    /// The relay error kind for events and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            DialError::Refused(_) => "dial_refused",
            DialError::Unreachable(_) => "dial_unreachable",
            DialError::NetUnreachable(_) => "dial_net_unreachable",
            DialError::Prohibited(_) => "dial_prohibited",
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
            | DialError::NetUnreachable(m)
            | DialError::Prohibited(m)
            | DialError::Timeout(m)
            | DialError::Other(m) => f.write_str(m),
        }
    }
}

/// Connects to `addr`, from inside the namespace when `inside` is given,
/// else from the host's.
pub async fn dial(
    addr: SocketAddr,
    timeout: Duration,
    inside: Option<&Arc<Sandbox>>,
) -> Result<TcpStream, DialError> {
    match inside {
        Some(sb) => dial_with(addr, timeout, dial_inside(sb, addr)).await,
        None => dial_host(addr, timeout).await,
    }
}

/// Connects to `addr` from the host's network namespace.
pub async fn dial_host(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, DialError> {
    dial_with(addr, timeout, TcpStream::connect(addr)).await
}

pub async fn dial_with(
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
                Some(libc::EHOSTUNREACH | libc::EHOSTDOWN) => DialError::Unreachable(msg),
                Some(libc::ENETUNREACH | libc::ENETDOWN) => DialError::NetUnreachable(msg),
                Some(libc::EACCES | libc::EPERM) => DialError::Prohibited(msg),
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
