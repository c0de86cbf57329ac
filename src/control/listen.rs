//! A proxy's `listen` as Toxiproxy (Go's `net.Listen`) takes it: a host
//! name is resolved (`localhost:0` listens on `127.0.0.1`, the first IPv4
//! address), an empty or unspecified host listens on every address (shown
//! as `[::]:PORT`), and what goes wrong is a 500 in Go's words — `listen
//! tcp 127.0.0.1:3310: bind: address already in use`, `listen tcp: address
//! local373: missing port in address`.

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
pub(crate) async fn bind(listen: &str) -> Result<(TcpListener, String), ApiError> {
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
        let (l, shown) = bind("localhost:0").await.unwrap();
        assert!(shown.starts_with("127.0.0.1:"), "{shown}");
        assert_ne!(l.local_addr().unwrap().port(), 0);
        let taken = shown.clone();
        let e = bind(&taken).await.unwrap_err();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            e.message,
            format!("listen tcp {taken}: bind: address already in use")
        );
        drop(l);
        let e = bind("local373").await.unwrap_err();
        assert_eq!(
            e.message,
            "listen tcp: address local373: missing port in address"
        );
        let (_, any) = bind(":0").await.unwrap();
        assert!(
            any.starts_with("[::]:") || any.starts_with("0.0.0.0:"),
            "{any}"
        );
    }
}
