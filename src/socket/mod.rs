//! Sockets as the engines use them, below the relay and the HTTP layer
//! both: the options and queries tokio does not offer ([`sockopt`]), and
//! a peer as a direction writes to it, its TCP socket or a TLS session
//! over it ([`peer`]).

pub(crate) mod peer;
pub(crate) mod sockopt;

use std::net::SocketAddr;

/// Whether `a` is a loopback address (IPv4-mapped ones included).
pub(crate) fn is_loopback(a: SocketAddr) -> bool {
    match a.ip() {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}
