//! What netchaos offers an upstream in ALPN: what the client offered (of
//! the protocols netchaos speaks, in the client's order), so that the
//! upstream chooses as it would for the client directly, and the client
//! is agreed what the upstream chose. A client offering h2 and HTTP/1.1
//! (curl, Go, Java, httpx) keeps HTTP/2 where the upstream speaks it, and
//! HTTP/1.1 where it does not; one offering h2 alone (gRPC, httpx with
//! `http1=False`) reaches an upstream that speaks only h2, and one
//! offering HTTP/1.1 alone is refused by such an upstream as it would be
//! directly.

use super::{H2, HTTP11, Hello};

/// The protocols offered to an upstream, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// No ALPN: a client that offered none.
    Nothing,
    Http11,
    /// HTTP/2 alone: the client speaks nothing else (an upstream that
    /// agrees to anything else fails).
    H2,
    H2ThenHttp11,
    Http11ThenH2,
}

impl Offer {
    /// Every offer, each with its own client configuration.
    pub(crate) const ALL: [Offer; 5] = [
        Offer::Nothing,
        Offer::Http11,
        Offer::H2,
        Offer::H2ThenHttp11,
        Offer::Http11ThenH2,
    ];

    /// What the client of `hello` offered, of what netchaos speaks, in its
    /// order.
    pub(crate) fn of(hello: &Hello) -> Offer {
        let mut ours = hello
            .alpn
            .iter()
            .filter(|p| p.as_slice() == H2 || p.as_slice() == HTTP11);
        match (
            ours.next().map(Vec::as_slice),
            ours.next().map(Vec::as_slice),
        ) {
            _ if !hello.offers_alpn() => Offer::Nothing,
            (Some(H2), Some(HTTP11)) => Offer::H2ThenHttp11,
            (Some(HTTP11), Some(H2)) => Offer::Http11ThenH2,
            (Some(H2), _) => Offer::H2,
            _ => Offer::Http11,
        }
    }

    /// Its protocols, in order.
    pub(crate) fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Offer::Nothing => vec![],
            Offer::Http11 => vec![HTTP11.to_vec()],
            Offer::H2 => vec![H2.to_vec()],
            Offer::H2ThenHttp11 => vec![H2.to_vec(), HTTP11.to_vec()],
            Offer::Http11ThenH2 => vec![HTTP11.to_vec(), H2.to_vec()],
        }
    }

    /// Its place in [`Offer::ALL`].
    pub(crate) fn index(self) -> usize {
        Offer::ALL
            .iter()
            .position(|o| *o == self)
            .expect("every offer is listed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(alpn: &[&str]) -> Hello {
        Hello {
            server_name: None,
            alpn: alpn.iter().map(|p| p.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn the_upstream_is_offered_what_the_client_offered() {
        assert_eq!(Offer::of(&hello(&[])), Offer::Nothing);
        assert_eq!(Offer::of(&hello(&["http/1.1"])), Offer::Http11);
        assert_eq!(Offer::of(&hello(&["h2"])), Offer::H2);
        assert_eq!(Offer::of(&hello(&["h2", "http/1.1"])), Offer::H2ThenHttp11);
        assert_eq!(Offer::of(&hello(&["http/1.1", "h2"])), Offer::Http11ThenH2);
        // What netchaos does not speak is left out.
        assert_eq!(
            Offer::of(&hello(&["spdy/3", "h2", "x", "http/1.1"])),
            Offer::H2ThenHttp11
        );
        for (i, o) in Offer::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
        }
        assert_eq!(
            Offer::H2ThenHttp11.protocols(),
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }
}
