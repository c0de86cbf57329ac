//! A proxy's `listen` as Toxiproxy (Go's `net.Listen`) takes it: a host
//! name is resolved (`localhost:0` listens on `127.0.0.1`, the first IPv4
//! address), an empty or unspecified host listens on every address (shown
//! as `[::]:PORT`), and what goes wrong is a 500 in Go's words — `listen
//! tcp 127.0.0.1:3310: bind: address already in use`, `listen tcp: address
//! local373: missing port in address`.
//!
//! A root netchaos does not listen for a local client that is not root
//! where that client could not listen itself — a privileged port, or an
//! address beyond the API's own interface (a loopback-only service would
//! otherwise be one proxy away from the network) — unless the operator
//! said so (`--api-listen-allow`); see [`refusal`].

use std::net::{IpAddr, SocketAddr};

use axum::http::StatusCode;
use tokio::net::TcpListener;

use super::model::ApiError;
use crate::relay::{self, BindFailure};

fn go_error(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// An address as Go prints a listener's: `127.0.0.1:80`, `[::]:80`.
pub(crate) fn shown(addr: SocketAddr) -> String {
    addr.to_string()
}

/// Go's `SplitHostPort` (an empty address is every host, any port).
fn split(listen: &str) -> Result<(&str, &str), ApiError> {
    if listen.is_empty() {
        return Ok(("", ""));
    }
    let missing = || {
        go_error(format!(
            "listen tcp: address {listen}: missing port in address"
        ))
    };
    if let Some(rest) = listen.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| {
            go_error(format!(
                "listen tcp: address {listen}: missing ']' in address"
            ))
        })?;
        let port = after.strip_prefix(':').ok_or_else(missing)?;
        return Ok((host, port));
    }
    let (host, port) = listen.rsplit_once(':').ok_or_else(missing)?;
    if host.contains(':') {
        return Err(go_error(format!(
            "listen tcp: address {listen}: too many colons in address"
        )));
    }
    Ok((host, port))
}

/// Binds `listen`; the listener and the address it listens on.
pub(crate) async fn bind(listen: &str, allow: bool) -> Result<(TcpListener, String), ApiError> {
    let (host, port) = split(listen)?;
    let port: u16 = match port {
        "" => 0,
        p => p
            .parse()
            .map_err(|_| go_error(format!("listen tcp: address {listen}: unknown port")))?,
    };
    let ip = match host {
        "" => None,
        h => match h.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() => None,
            Ok(ip) => Some(ip),
            Err(_) => Some(resolve(h, port).await?),
        },
    };
    if !allow && let Some(why) = CLIENT.try_with(|c| refusal(c, ip, port)).ok().flatten() {
        return Err(ApiError::new(StatusCode::FORBIDDEN, why));
    }
    let listener = match ip {
        None => relay::bind_any(port),
        Some(ip) => relay::bind(SocketAddr::new(ip, port)),
    }
    .map_err(|e| {
        let why = match e.failure {
            BindFailure::InUse => "address already in use",
            BindFailure::Denied => "permission denied",
            BindFailure::NotLocal => "cannot assign requested address",
            BindFailure::Other => e.reason.as_str(),
        };
        go_error(format!("listen tcp {}: bind: {why}", e.addr))
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| go_error(format!("listen tcp {listen}: {e}")))?;
    Ok((listener, shown(bound)))
}

tokio::task_local! {
    /// The API client whose request is being served (set around each
    /// request by the API's guard).
    pub(crate) static CLIENT: ApiClient;
}

/// Both ends of an API client's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApiClient {
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// Why `client` may not have a root netchaos listen on `ip` (`None`: every
/// address) and `port`, if it may not: its socket is on this host and not
/// root's (or it is the wrapped command's, through the relay), and the
/// port is privileged or the address is beyond the API's interface. A
/// client whose socket is not on this host is remote: exposing the API
/// was the operator's choice.
pub(crate) fn refusal(client: &ApiClient, ip: Option<IpAddr>, port: u16) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        // The kernel holds netchaos to its own user's rights.
        return None;
    }
    let local = canonical(client.local.ip());
    let privileged = port != 0 && port < unprivileged_port_start();
    let beyond = match ip.map(canonical) {
        None => true,
        Some(ip) => !(ip.is_loopback() || ip == local),
    };
    if !(privileged || beyond) {
        return None;
    }
    // Whatever address it came from (a local user may bind the host's
    // public address): its socket, if it is on this host, says who.
    // A connection the relay made for the wrapped command
    // (`--api-for-command`) is the command's, whoever owns the socket.
    let whom = if crate::relay::own::is_for_command(client.peer) {
        "the wrapped command".to_string()
    } else {
        match crate::intercept::sock_diag::peer_uid(client.peer, client.local) {
            Ok(Some(0)) => return None,
            Ok(Some(u)) => format!("a local client of uid {u}"),
            Ok(None) => return None,
            Err(_) => "a local client whose owner is unknown".to_string(),
        }
    };
    let what = match (privileged, beyond) {
        (true, true) => format!("a privileged port ({port}) on an address beyond the API's own"),
        (true, false) => format!("a privileged port ({port})"),
        _ => "an address beyond the API's own interface".to_string(),
    };
    Some(format!(
        "netchaos runs as root and will not listen on {what} for {whom}, who could not listen there \
         itself; the operator may allow it with --api-listen-allow"
    ))
}

/// The first port an unprivileged process may listen on.
fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

/// IPv4-mapped IPv6 addresses as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address `listen` would be shown as once listening (a host name
/// resolved as [`bind`] resolves it), when it names one port: to tell a
/// proxy asked for again as it is (`localhost:7070`, shown as
/// `127.0.0.1:7070`) from one asked to move.
pub(crate) async fn as_shown(listen: &str) -> Option<String> {
    let (host, port) = split(listen).ok()?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let ip = match host {
        "" => None,
        h => match h.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() => None,
            Ok(ip) => Some(ip),
            Err(_) => Some(resolve(h, port).await.ok()?),
        },
    };
    Some(match ip {
        Some(ip) => shown(SocketAddr::new(ip, port)),
        None => format!("[::]:{port}"),
    })
}

/// A host name's address to listen on: the first IPv4 one, as Go prefers.
async fn resolve(host: &str, port: u16) -> Result<IpAddr, ApiError> {
    let no_such = || go_error(format!("listen tcp: lookup {host}: no such host"));
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| no_such())?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.ip())
        .ok_or_else(no_such)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolve_and_errors_read_as_go_writes_them() {
        let (l, shown) = bind("localhost:0", false).await.unwrap();
        assert!(shown.starts_with("127.0.0.1:"), "{shown}");
        assert_ne!(l.local_addr().unwrap().port(), 0);
        let taken = shown.clone();
        let e = bind(&taken, false).await.unwrap_err();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            e.message,
            format!("listen tcp {taken}: bind: address already in use")
        );
        drop(l);
        let e = bind("local373", false).await.unwrap_err();
        assert_eq!(
            e.message,
            "listen tcp: address local373: missing port in address"
        );
        let (_, any) = bind(":0", false).await.unwrap();
        assert!(
            any.starts_with("[::]:") || any.starts_with("0.0.0.0:"),
            "{any}"
        );
    }
}
