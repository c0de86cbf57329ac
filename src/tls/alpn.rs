//! What netchaos offers an upstream in ALPN, and what each upstream was
//! seen to agree to.
//!
//! netchaos speaks HTTP/1.1 to a client that offers it (its HTTP faults
//! are complete there: `sse` acts on plain event streams), and so offers
//! the upstream HTTP/1.1 alone. An upstream that speaks only HTTP/2 (a
//! gRPC server) agrees to nothing then — grpcio and Go let an HTTP/1.1
//! offer through without ALPN rather than refuse it (RFC 7301 §3.2 allows
//! either) — and would be spoken HTTP/1.1 to and reset the client, though
//! the client (curl, Go, Java, httpx) offered HTTP/2 as well and reaches
//! it directly. So when the client offers both and the upstream agrees to
//! nothing, the upstream is dialled once more offering HTTP/2 first, and
//! the client is agreed whatever the upstream chose. What an upstream
//! answered is remembered for a while ([`REMEMBERED`]), so that later
//! connections to it pay no second dial; an upstream redeployed meanwhile
//! is asked again after that.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The protocols offered to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// HTTP/1.1 alone: the client speaks it.
    Http11,
    /// HTTP/2 alone: the client speaks nothing else (an upstream that
    /// agrees to anything else fails).
    H2,
    /// HTTP/2, then HTTP/1.1: to an upstream that agreed to nothing when
    /// offered HTTP/1.1, for a client that offers both.
    H2OrHttp11,
}

/// What an upstream that agreed to nothing when offered HTTP/1.1 alone
/// did when offered [`Offer::H2OrHttp11`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It agreed to HTTP/2: it speaks nothing else.
    H2Only,
    /// Not HTTP/2: it does not do ALPN (an HTTP/1.1 server), or chose
    /// HTTP/1.1 this time.
    NoAlpn,
}

/// How long what an upstream did is trusted.
const REMEMBERED: Duration = Duration::from_secs(600);

/// Upstreams remembered at most; beyond, the memory starts afresh (a
/// forgotten upstream costs one more dial).
const MAX_SEEN: usize = 4096;

/// What upstreams (address and verified name) were seen to do.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    seen: Mutex<HashMap<(SocketAddr, String), (Seen, Instant)>>,
}

impl Memory {
    /// What to offer the upstream at `addr`, verified as `name`, for a
    /// client that speaks HTTP/1.1 and, `client_h2`, offers HTTP/2 too.
    pub(crate) fn offer(&self, addr: SocketAddr, name: &str, client_h2: bool) -> Offer {
        if client_h2 && self.get(addr, name) == Some(Seen::H2Only) {
            Offer::H2OrHttp11
        } else {
            Offer::Http11
        }
    }

    /// Whether an upstream that agreed to nothing when offered HTTP/1.1 is
    /// worth a second dial offering HTTP/2 (not if it was seen not to do
    /// ALPN at all).
    pub(crate) fn worth_asking(&self, addr: SocketAddr, name: &str) -> bool {
        self.get(addr, name).is_none()
    }

    pub(crate) fn learn(&self, addr: SocketAddr, name: &str, seen: Seen) {
        let mut m = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX_SEEN {
            m.clear();
        }
        m.insert((addr, name.to_string()), (seen, Instant::now()));
    }

    fn get(&self, addr: SocketAddr, name: &str) -> Option<Seen> {
        self.get_at(addr, name, Instant::now())
    }

    fn get_at(&self, addr: SocketAddr, name: &str, now: Instant) -> Option<Seen> {
        let m = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(addr, name.to_string()))
            .filter(|(_, at)| now.saturating_duration_since(*at) < REMEMBERED)
            .map(|(seen, _)| *seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_seen_to_speak_only_h2_is_offered_it_at_once() {
        let m = Memory::default();
        let a: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        assert_eq!(m.offer(a, "api", true), Offer::Http11);
        assert!(m.worth_asking(a, "api"));
        m.learn(a, "api", Seen::H2Only);
        m.learn(b, "api", Seen::NoAlpn);
        assert_eq!(m.offer(a, "api", true), Offer::H2OrHttp11);
        // A client offering HTTP/1.1 alone is offered it alone.
        assert_eq!(m.offer(a, "api", false), Offer::Http11);
        // Another name at the same address is another upstream.
        assert_eq!(m.offer(a, "other", true), Offer::Http11);
        assert!(!m.worth_asking(a, "api") && !m.worth_asking(b, "api"));
        assert_eq!(m.offer(b, "api", true), Offer::Http11);
        // Forgotten after a while: asked again.
        let later = Instant::now() + REMEMBERED + Duration::from_secs(1);
        assert_eq!(m.get_at(a, "api", later), None);
    }

    #[test]
    fn the_memory_is_bounded() {
        let m = Memory::default();
        for port in 0..=MAX_SEEN as u16 {
            m.learn(SocketAddr::from(([127, 0, 0, 1], port)), "x", Seen::NoAlpn);
        }
        assert!(m.seen.lock().unwrap().len() <= MAX_SEEN);
    }
}
