//! A client's TLS ClientHello, read without consuming it (`MSG_PEEK`): what
//! server name and application protocols it asks for decides whether the
//! connection is terminated at all, and the handshake itself then reads
//! the hello for real.

use std::time::Duration;

use tokio::net::TcpStream;

use super::HTTP11;

/// What a ClientHello asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The server name (SNI), if the client sent one.
    pub(crate) server_name: Option<String>,
    /// The application protocols it offers (ALPN), in its order.
    pub(crate) alpn: Vec<Vec<u8>>,
}

impl Hello {
    /// Whether it offers ALPN at all.
    pub(crate) fn offers_alpn(&self) -> bool {
        !self.alpn.is_empty()
    }

    /// Whether netchaos can speak what it offers: HTTP/1.1, or no ALPN.
    pub(crate) fn speaks_http1(&self) -> bool {
        self.alpn.is_empty() || self.alpn.iter().any(|p| p == HTTP11)
    }

    /// Whether it offers HTTP/2 (gRPC's clients offer nothing else).
    pub(crate) fn offers_h2(&self) -> bool {
        self.alpn.iter().any(|p| p == super::H2)
    }

    /// The protocol netchaos agrees to with no upstream to ask (an
    /// answer of its own, a faulty certificate, a plaintext upstream):
    /// HTTP/1.1 when the client speaks it, else HTTP/2; none when it
    /// offers no ALPN. With an upstream, the client is agreed what the
    /// upstream chose ([`super::alpn`]).
    pub(crate) fn agreed(&self) -> Option<Vec<u8>> {
        match self.offers_alpn() {
            false => None,
            true if self.speaks_http1() => Some(HTTP11.to_vec()),
            true => Some(super::H2.to_vec()),
        }
    }
}

/// The largest hello looked at (one TLS record, and a second for the rest).
const MAX_HELLO: usize = 32 * 1024;
/// How long a client may take to send its whole hello.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Reads the client's hello without consuming it; `None` when the bytes
/// are not a TLS hello, or it does not arrive whole in time.
pub(crate) async fn peek(sock: &TcpStream) -> Option<Hello> {
    let mut buf = vec![0u8; MAX_HELLO];
    let deadline = tokio::time::Instant::now() + HELLO_WAIT;
    let mut seen = 0;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        match parse(&buf[..n]) {
            Parsed::Hello(h) => return Some(h),
            Parsed::Invalid => return None,
            Parsed::Partial if n == MAX_HELLO => return None,
            Parsed::Partial => {}
        }
        // More is coming: `peek` returns at once while bytes wait, so
        // wait a little for them.
        if n == seen {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        seen = n;
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

enum Parsed {
    Hello(Hello),
    Partial,
    Invalid,
}

fn parse(mut bytes: &[u8]) -> Parsed {
    let mut acceptor = rustls::server::Acceptor::default();
    while !bytes.is_empty() {
        match acceptor.read_tls(&mut bytes) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Parsed::Invalid,
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => {
            let hello = accepted.client_hello();
            Parsed::Hello(Hello {
                server_name: hello.server_name().map(str::to_string),
                alpn: hello
                    .alpn()
                    .map(|protocols| protocols.map(<[u8]>::to_vec).collect())
                    .unwrap_or_default(),
            })
        }
        Ok(None) => Parsed::Partial,
        Err(_) => Parsed::Invalid,
    }
}
