//! A connection through the HTTP layer: find out what it carries (the
//! client's first bytes: an HTTP request, a TLS hello, or neither), set up
//! TLS where netchaos terminates or originates it, and run the HTTP
//! layer's two sides as the readers of the connection's two pipelines —
//! so stream faults still act on the bytes after the HTTP faults.
//!
//! A connection that carries neither HTTP/1.1 nor TLS netchaos may
//! terminate is handed back untouched: it is relayed as bytes (and
//! on the fast path, when no stream fault touches it).

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::{Conn, run_pair};
use crate::events::{Outcome, RelayPath};
use crate::fault::tls_error::TlsFailure;
use crate::fault::{Chosen, Direction, FaultKind};
use crate::http::exchange::{self, Exchange};
use crate::http::h2;
use crate::plan::Protocol;
use crate::relay::dial;
use crate::relay::interception::Interception;
use crate::relay::pipeline::{self, Source};
use crate::socket::peer::{Sink, TcpRef, TlsEnd, TlsRead};
use crate::socket::sockopt;
use crate::tls::{self, Hello, Tls, Verdict};
use tokio_rustls::server;

/// How an endpoint's connections meet TLS.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndpointTls {
    /// Serve TLS to clients, with the run's certificates (`--tls` on a
    /// listener).
    pub serve: bool,
    /// Speak TLS to the upstream, verified as this name (`proxy
    /// --upstream-tls HOST:PORT`); requests are sent with this Host.
    pub upstream: Option<String>,
}

impl EndpointTls {
    pub(crate) fn is_plain(&self) -> bool {
        !self.serve && self.upstream.is_none()
    }
}

/// What a `tls_error` fault shows a TLS client.
enum Shown {
    /// No fault: the authority's good certificate.
    Good,
    /// A certificate the client should refuse.
    Bad(Arc<rustls::sign::CertifiedKey>),
    /// No certificate: silence or an RST.
    Silent(Silence),
}

/// A `tls_error` that shows no certificate, and which fault it is (a
/// stall ends when the fault is removed or its window closes).
struct Silence {
    failure: TlsFailure,
    id: u64,
    window: crate::units::Window,
}

/// What a connection turned out to carry.
enum Carries {
    Http,
    /// HTTP/2 in the clear, with prior knowledge (its preface first).
    H2,
    Tls(Hello),
    /// Something else (or the server speaks first): relay it as bytes.
    Other,
}

type Reader<'a> = Box<dyn AsyncRead + Send + Unpin + 'a>;

/// One side of the connection, after TLS (if any).
pub(super) struct Side<'a> {
    pub(super) read: Reader<'a>,
    pub(super) sink: Sink<'a>,
    /// How its TLS stream ended (never set without TLS).
    pub(super) end: TlsEnd,
}

impl<'a> Side<'a> {
    pub(super) fn plain(sock: &'a TcpStream) -> Side<'a> {
        Side {
            read: Box::new(TcpRef(sock)),
            sink: Sink::Tcp(sock),
            end: TlsEnd::default(),
        }
    }

    fn tls<S: AsyncRead + AsyncWrite + Send + Unpin + 'a>(
        stream: S,
        sock: &'a TcpStream,
    ) -> Side<'a> {
        let (read, write) = tokio::io::split(stream);
        let end = TlsEnd::default();
        Side {
            read: Box::new(TlsRead::new(read, end.clone())),
            sink: Sink::Tls {
                session: Box::new(write),
                socket: sock,
                source: TlsEnd::default(),
            },
            end,
        }
    }

    /// Each side's sink ends as the other side's stream ended.
    fn join(a: &mut Side<'a>, b: &mut Side<'a>) {
        a.sink.follow(&b.end);
        b.sink.follow(&a.end);
    }
}

/// Whether a connection with these faults goes through the HTTP layer.
/// `records`: every attempt is to be recorded (`--records`), so every
/// connection not matched as `tcp` is followed (one that is not HTTP
/// passes untouched).
pub(super) fn wanted(
    chosen: &[Chosen],
    ep: &EndpointTls,
    protocol: Option<Protocol>,
    records: bool,
) -> bool {
    match protocol {
        _ if !ep.is_plain() => true,
        Some(Protocol::Tcp) => false,
        Some(Protocol::Http) => true,
        None => records || chosen.iter().any(|c| c.spec.kind.info().needs_http_layer()),
    }
}

/// What the HTTP layer runs over: the two sides (after TLS, if any).
struct Sides<'a> {
    client: Side<'a>,
    upstream: Side<'a>,
    /// The TLS server name the client asked for.
    sni: Option<String>,
    path: RelayPath,
    /// The client speaks HTTP/2.
    h2: bool,
    /// The name TLS to the upstream verifies, when netchaos speaks it,
    /// and what its certificate was judged.
    up_tls: Option<(String, Verdict)>,
}

/// Why there are no [`Sides`]: the connection carries something the HTTP
/// layer leaves alone (`None`: relayed as bytes), or it ended so.
type NoSides = Option<Outcome>;

/// Where the connection goes, as the HTTP layer sets it up.
struct Setup<'e> {
    ep: &'e EndpointTls,
    /// Where the client dialled its server (under interception).
    dst: Option<SocketAddr>,
    /// The upstream is the built-in mock, spoken to in the clear.
    mocked: bool,
}

/// A TLS client being terminated, and what its sides are set up from.
struct Terminating<'a, 'h> {
    tls: &'h Arc<Tls>,
    client: &'a TcpStream,
    upstream: &'a TcpStream,
    hello: &'h Hello,
    /// The server name it asked for (or its destination's address).
    name: String,
    /// Its destination, where it dialled its server (not netchaos's own
    /// listener), unless that is the mock.
    intercepting: Option<String>,
}

/// What the client is agreed to, over TLS.
struct Agreed {
    /// HTTP/2.
    h2: bool,
    /// The protocol the client's handshake agrees to (ALPN).
    agree: Option<Vec<u8>>,
    /// What the upstream's certificate was judged (none without TLS to
    /// it).
    judged: Option<Verdict>,
}

impl Conn<'_> {
    /// Runs the connection through the HTTP layer; `None` when it carries
    /// something else, untouched: the caller relays it as bytes.
    /// `mocked`: the upstream is the built-in mock, spoken to in the clear
    /// whatever TLS the endpoint would speak to the real one.
    pub(super) async fn http(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        ep: &EndpointTls,
        dst: Option<SocketAddr>,
        inside: Option<Arc<dyn Interception>>,
        mocked: bool,
    ) -> Option<Outcome> {
        let tls = self.relay.opts.tls.clone();
        let setup = Setup { ep, dst, mocked };
        let sides = match self.carries(client, upstream, ep, tls.is_some()).await {
            Carries::Other => return None,
            Carries::Http => self.plain_sides(client, upstream, &setup, false).await,
            Carries::H2 => self.plain_sides(client, upstream, &setup, true).await,
            Carries::Tls(hello) => {
                self.tls_sides(&tls?, client, upstream, &setup, &hello)
                    .await
            }
        };
        match sides {
            Ok(sides) => Some(self.run_http(client, upstream, ep, inside, sides).await),
            Err(ended) => ended,
        }
    }

    /// What the connection carries, from the client's first bytes.
    async fn carries(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        ep: &EndpointTls,
        tls: bool,
    ) -> Carries {
        if ep.serve {
            return match tls::hello::peek(client).await {
                Some(h) => Carries::Tls(h),
                None => Carries::Other,
            };
        }
        match sniff(client, upstream, tls).await {
            // `match.protocol = "http"`: HTTP, whatever came first.
            Carries::Other if self.protocol == Some(Protocol::Http) => Carries::Http,
            c => c,
        }
    }

    /// HTTP in the clear from the client: to the upstream as it is, or
    /// over TLS netchaos speaks to it (`proxy --upstream-tls`) — with no
    /// client's TLS to decide, only to a trusted upstream.
    async fn plain_sides<'a>(
        &self,
        client: &'a TcpStream,
        upstream: &'a TcpStream,
        s: &Setup<'_>,
        h2: bool,
    ) -> Result<Sides<'a>, NoSides> {
        let mut up_tls = None;
        let up = match s.ep.upstream.as_ref().filter(|_| !s.mocked) {
            Some(name) => match self
                .tls_upstream(upstream, name, offer_for(h2))
                .await
                .and_then(|(side, _, v)| v.clone().into_result().map(|()| (side, v)))
            {
                Ok((side, verdict)) => {
                    up_tls = Some((name.clone(), verdict));
                    side
                }
                Err(e) if h2 => return Err(Some(self.upstream_failed(client, upstream, name, &e))),
                Err(e) => return Err(Some(self.bad_gateway(client, upstream, name, &e).await)),
            },
            None => Side::plain(upstream),
        };
        Ok(Sides {
            client: Side::plain(client),
            upstream: up,
            sni: None,
            path: RelayPath::Http,
            h2,
            up_tls,
        })
    }

    /// A TLS client: a `tls_error` fault's certificate (or silence)
    /// shown, or the client left untouched (no HTTP fault could act on
    /// it, its destination pinned, no protocol netchaos speaks); else TLS
    /// to the upstream where netchaos speaks it, and the client's
    /// handshake terminated on the run's certificate.
    async fn tls_sides<'a>(
        &self,
        tls: &Arc<Tls>,
        client: &'a TcpStream,
        upstream: &'a TcpStream,
        s: &Setup<'_>,
        hello: &Hello,
    ) -> Result<Sides<'a>, NoSides> {
        let ep = s.ep;
        let name = server_name(hello, client, if ep.serve { None } else { s.dst });
        // The destination, where the client dialled its server (not
        // netchaos's own listener).
        let intercepting = match s.dst {
            Some(a) if !ep.serve && ep.upstream.is_none() => {
                Some(tls::pinned::Pinned::destination(&name, a.port()))
            }
            _ => None,
        };
        let t = Terminating {
            tls,
            client,
            upstream,
            hello,
            name,
            intercepting: intercepting.filter(|_| !s.mocked),
        };
        let faulty = self.faulty(&t).await?;
        if faulty.is_none() {
            self.untouched(&t)?;
        }
        let mut agreed = Agreed {
            h2: match &faulty {
                Some(s) => s.get_ref().1.alpn_protocol() == Some(tls::H2),
                None => !hello.speaks_http1(),
            },
            // Without TLS to the upstream, HTTP/1.1 when the client offers
            // it; with it, what the upstream chose of what it offered.
            agree: hello.agreed(),
            judged: None,
        };
        // The mock speaks both, as the providers' hosts do: the client gets
        // HTTP/2 where it offers it, as it would there.
        if s.mocked && faulty.is_none() && hello.offers_h2() {
            agreed.h2 = true;
            agreed.agree = Some(tls::H2.to_vec());
        }
        let mut up_tls = None;
        let up = if (ep.serve && ep.upstream.is_none()) || s.mocked {
            Side::plain(upstream)
        } else {
            let up_name = ep.upstream.clone().unwrap_or_else(|| t.name.clone());
            let side = self
                .tls_upstream_side(&t, &up_name, faulty.is_some(), &mut agreed)
                .await?;
            up_tls = agreed.judged.clone().map(|v| (up_name, v));
            side
        };
        let session = match faulty {
            Some(session) => session,
            None => self.accept_client(&t, &agreed).await?,
        };
        Ok(Sides {
            client: Side::tls(session, client),
            upstream: up,
            sni: hello.server_name.clone(),
            path: RelayPath::Https,
            h2: agreed.h2,
            up_tls,
        })
    }

    /// A `tls_error` fault: the handshake fails as against a broken
    /// server, before the upstream is spoken to (its own TLS could only
    /// fail in other ways, or be slow). The session of a client that took
    /// the faulty certificate (it verifies nothing): on, as against such a
    /// server, unless it chose a protocol netchaos cannot speak.
    async fn faulty<'a>(
        &self,
        t: &Terminating<'a, '_>,
    ) -> Result<Option<server::TlsStream<TcpRef<'a>>>, NoSides> {
        let key = match self.tls_fault(t.tls, &t.name) {
            Shown::Good => return Ok(None),
            Shown::Silent(silence) => {
                return Err(Some(
                    self.tls_silent(t.client, Some(t.upstream), silence).await,
                ));
            }
            Shown::Bad(key) => key,
        };
        match t.tls.accept_showing(TcpRef(t.client), key, t.hello).await {
            // The client refused the certificate, as meant.
            Err(e) => {
                tracing::debug!("TLS client refused the faulty certificate: {e}");
                Err(Some(self.closed_https(t.upstream)))
            }
            Ok(s)
                if s.get_ref()
                    .1
                    .alpn_protocol()
                    .is_some_and(|p| p != tls::HTTP11 && p != tls::H2) =>
            {
                Err(Some(self.closed_https(t.upstream)))
            }
            Ok(s) => Ok(Some(s)),
        }
    }

    /// Whether a TLS client is left untouched (`Err(None)`: relayed as
    /// bytes). Under interception, a client no HTTP fault could act on
    /// (each one's `host` another than its server's), or whose destination
    /// saw a client refuse the run's certificate, is not terminated: it
    /// reaches its server untouched. (A mocked destination is always
    /// terminated: the mock speaks in the clear, and is the client's
    /// server.) Nor is one that offers no protocol netchaos speaks.
    fn untouched(&self, t: &Terminating<'_, '_>) -> Result<(), NoSides> {
        if let Some(dest) = t.intercepting.as_deref() {
            if self.protocol.is_none() && !self.may_fault(&t.name, dest) {
                tracing::debug!(
                    "TLS for {}: no HTTP fault could act on it: relayed as bytes",
                    t.name
                );
                return Err(None);
            }
            if t.tls.pinned().contains(dest) {
                self.relay.events.tls_passed(dest);
                return Err(None);
            }
        }
        if !t.hello.speaks_http1() && !t.hello.offers_h2() {
            tracing::debug!(
                "TLS client offers neither HTTP/1.1 nor HTTP/2 (ALPN): relayed as bytes"
            );
            return Err(None);
        }
        Ok(())
    }

    /// TLS to the upstream (`up_name`), offering the client's own offer
    /// (of what netchaos speaks) so that it gets the protocol it would
    /// directly — or, once it was shown a faulty certificate (`faulty`),
    /// the protocol it agreed to. `agreed` takes what the upstream chose
    /// and how its certificate was judged.
    async fn tls_upstream_side<'a>(
        &self,
        t: &Terminating<'a, '_>,
        up_name: &str,
        faulty: bool,
        agreed: &mut Agreed,
    ) -> Result<Side<'a>, NoSides> {
        let offer = match faulty {
            true => offer_for(agreed.h2),
            false => tls::alpn::Offer::of(t.hello),
        };
        match self.tls_upstream(t.upstream, up_name, offer).await {
            // A client that accepted a `tls_error` certificate is not taken
            // to accept whatever flaw the upstream's has: closed, as below.
            Ok((_, _, Verdict::Untrusted { why, .. })) if faulty => {
                let why = format!("TLS to {up_name}: {why}");
                self.relay
                    .events
                    .relay_error(self.info, "upstream_tls_untrusted", &why);
                Err(Some(self.closed_https(t.upstream)))
            }
            Ok((side, chosen, verdict)) => {
                if !faulty {
                    // Nothing agreed: a client that offers HTTP/1.1 speaks
                    // it, one offering h2 alone was refused (above).
                    agreed.h2 = chosen.as_deref() == Some(tls::H2);
                    agreed.agree = chosen;
                }
                agreed.judged = Some(verdict);
                Ok(side)
            }
            // The client's handshake is done: it can only be closed (what
            // a server whose backend is gone does).
            Err(e) if faulty => {
                let why = format!("TLS to {up_name}: {e}");
                self.relay
                    .events
                    .relay_error(self.info, "upstream_tls_failed", &why);
                Err(Some(self.closed_https(t.upstream)))
            }
            Err(e) => Err(Some(
                self.refuse_tls(t.tls, t.client, t.upstream, &t.name, t.hello, &e)
                    .await,
            )),
        }
    }

    /// The client's handshake, on the run's certificate for its name (a
    /// stand-in with the upstream's flaw, where it has one).
    async fn accept_client<'a>(
        &self,
        t: &Terminating<'a, '_>,
        agreed: &Agreed,
    ) -> Result<server::TlsStream<TcpRef<'a>>, NoSides> {
        let judged = agreed.judged.as_ref();
        let name = &t.name;
        let accepted = t
            .tls
            .accept(TcpRef(t.client), name, agreed.agree.clone(), judged)
            .await;
        // A stand-in with the upstream's flaw: the client took it
        // (`completed`), or refused it, as it would the upstream's.
        let flawed = |completed: bool| {
            let Some(Verdict::Untrusted { why, .. }) = judged else {
                return;
            };
            let (kind, said) = if completed {
                (
                    "upstream_tls_unverified",
                    format!(
                        "TLS to {name}: {why}; the client completed its handshake \
                         on the stand-in certificate with that flaw: what it sends \
                         goes to the upstream unverified, as it would directly"
                    ),
                )
            } else {
                (
                    "upstream_tls_untrusted",
                    format!(
                        "TLS to {name}: {why}; the client refused the stand-in \
                         certificate with that flaw, as it would the upstream's"
                    ),
                )
            };
            self.relay.events.relay_error(self.info, kind, &said);
        };
        let dest = t.intercepting.as_deref();
        match accepted {
            Ok(s) => {
                flawed(true);
                Ok(s)
            }
            // Shown a stand-in as untrusted as its upstream's certificate,
            // the client refused it: closed, as by a server whose
            // certificate is refused.
            Err(e) if judged.is_some_and(|v| !v.is_trusted()) => {
                tracing::debug!("TLS client refused the stand-in certificate: {e}");
                self.refused(t.tls, dest, &e, judged);
                flawed(false);
                Err(Some(self.closed_https(t.upstream)))
            }
            Err(e) => {
                if !self.refused(t.tls, dest, &e, judged) {
                    tracing::debug!("TLS handshake with the client failed: {e}");
                }
                let _ = self.path.set(RelayPath::Https);
                sockopt::set_linger_zero(t.client);
                sockopt::set_linger_zero(t.upstream);
                Err(Some(Outcome::Reset))
            }
        }
    }

    /// The HTTPS connection is closed after its client's handshake, its
    /// upstream reset (it never saw a request).
    fn closed_https(&self, upstream: &TcpStream) -> Outcome {
        let _ = self.path.set(RelayPath::Https);
        sockopt::set_linger_zero(upstream);
        Outcome::Closed
    }

    /// The HTTP layer over the two sides: the HTTP/2 engine, or HTTP/1.1's
    /// two sides as the readers of the connection's pipelines.
    async fn run_http(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        ep: &EndpointTls,
        inside: Option<Arc<dyn Interception>>,
        sides: Sides<'_>,
    ) -> Outcome {
        let Sides {
            client: mut client_side,
            upstream: mut upstream_side,
            sni,
            path,
            h2,
            up_tls,
        } = sides;
        Side::join(&mut client_side, &mut upstream_side);
        let _ = self.path.set(path);
        let x = Exchange {
            faults: self.chosen.clone(),
            epoch: self.relay.epoch,
            events: self.relay.events.clone(),
            conn: self.info.clone(),
            sni,
            rewrite_host: ep.upstream.clone(),
            stopping: self.relay.stop_token(),
        };
        if h2 {
            let reach = h2::Reach {
                tls: ep.upstream.is_some() || (path == RelayPath::Https && !ep.serve),
                redial: self.redial(upstream, inside, up_tls),
                moved_on: Default::default(),
            };
            return self
                .h2(client, upstream, client_side, upstream_side, x, reach)
                .await;
        }
        let (requests, responses) = exchange::sides(x);
        let meter = self.meter();
        let mut up_feed = self.feed(Direction::Upstream);
        let mut down_feed = self.feed(Direction::Downstream);
        let client_read = client_side.read;
        let upstream_read = upstream_side.read;
        let up = pipeline::run(
            Source::Driven(Box::new(move |out| {
                Box::pin(requests.run(client_read, out))
            })),
            upstream_side.sink,
            Direction::Upstream,
            &mut up_feed,
            &meter,
        );
        let down = pipeline::run(
            Source::Driven(Box::new(move |out| {
                Box::pin(responses.run(upstream_read, out))
            })),
            client_side.sink,
            Direction::Downstream,
            &mut down_feed,
            &meter,
        );
        let (up, down) = (up.map(|(end, _)| end), down.map(|(end, _)| end));
        let outcome = run_pair(Box::pin(up), Box::pin(down), client, Some(upstream)).await;
        self.teardown(outcome, client, Some(upstream)).await;
        outcome
    }

    /// Terminates a TLS client whose hello is waiting (`respond` over
    /// TLS: no upstream to verify); when it cannot be, how the connection
    /// ended (a failed handshake is reset).
    pub(super) async fn accept_tls<'s>(
        &self,
        tls: &Tls,
        client: &'s TcpStream,
        dst: Option<SocketAddr>,
    ) -> Result<Side<'s>, Outcome> {
        let failed = || {
            sockopt::set_linger_zero(client);
            Outcome::Reset
        };
        let Some(hello) = tls::hello::peek(client).await else {
            return Err(failed());
        };
        let name = server_name(&hello, client, dst);
        let accepted = match self.tls_fault(tls, &name) {
            Shown::Good => {
                tls.accept(TcpRef(client), &name, hello.agreed(), None)
                    .await
            }
            Shown::Bad(key) => tls.accept_showing(TcpRef(client), key, &hello).await,
            Shown::Silent(silence) => return Err(self.tls_silent(client, None, silence).await),
        };
        accepted.map(|s| Side::tls(s, client)).map_err(|e| {
            tracing::debug!("TLS handshake with the client failed: {e}");
            failed()
        })
    }

    /// Records a client's refusal of the certificate it was shown for
    /// `dest` (a transparently intercepted destination), when it says the
    /// client trusts a CA of its own: the certificate was from the run's
    /// CA for the stores that accept the upstream, or a stand-in whose
    /// issuer no store knows (the upstream's own CA, which the client may
    /// pin). Not one with the upstream's own flaw (expired, another
    /// name…), which the client refuses directly too. `dest`'s later
    /// connections are relayed untouched: whatever the client trusts, it
    /// then meets what it would have directly. Whether it was recorded.
    fn refused(
        &self,
        tls: &Tls,
        dest: Option<&str>,
        e: &std::io::Error,
        judged: Option<&Verdict>,
    ) -> bool {
        let (Some(dest), Some(alert)) = (dest, tls::pinned::refusal(e)) else {
            return false;
        };
        if let Some(Verdict::Untrusted {
            shown: tls::verdict::StandIn::Flawed { .. },
            ..
        }) = judged
        {
            return false;
        }
        let remembered = tls.pinned().refused(dest);
        self.relay
            .events
            .tls_refused(self.info, dest, alert, remembered);
        true
    }

    /// Whether an HTTP or TLS fault of this connection (active now or not)
    /// could act on a TLS connection to `name` (`dest`: with its port, as
    /// a Host header may say it): a `host` it matches, or none.
    fn may_fault(&self, name: &str, dest: &str) -> bool {
        self.chosen.borrow().iter().any(|c| match &c.spec.kind {
            FaultKind::TlsError(t) => t.applies_to(name),
            k if k.info().needs_http_layer() => k
                .request_match()
                .is_none_or(|m| m.may_match_host(name) || m.may_match_host(dest)),
            _ => false,
        })
    }

    /// What this connection's `tls_error` fault (the first that applies to
    /// `name`) shows the client; the fault is counted when it acts.
    fn tls_fault(&self, tls: &Tls, name: &str) -> Shown {
        let chosen = self.chosen.borrow().clone();
        let now = self.relay.epoch.elapsed();
        let Some((c, failure)) = chosen.iter().find_map(|c| match &c.spec.kind {
            FaultKind::TlsError(t) if t.applies_to(name) && c.spec.active.contains(now) => {
                Some((c, t.failure()))
            }
            _ => None,
        }) else {
            return Shown::Good;
        };
        let shown = match tls.authority().faulty_leaf(name, failure) {
            Ok(Some(key)) => Shown::Bad(Arc::new(key)),
            Ok(None) => Shown::Silent(Silence {
                failure,
                id: c.id,
                window: c.spec.active,
            }),
            Err(e) => {
                tracing::warn!("tls_error: cannot make the certificate for {name:?}: {e}");
                return Shown::Good;
            }
        };
        self.hit(c, None).fire();
        shown
    }

    /// A `tls_error` that shows no certificate: an RST once the hello is
    /// in, or silence until the client gives up (its handshake timeout).
    /// A stall also ends when the fault is removed or its window closes:
    /// the hello is gone by then, so the connection is closed.
    async fn tls_silent(
        &self,
        client: &TcpStream,
        upstream: Option<&TcpStream>,
        silence: Silence,
    ) -> Outcome {
        let _ = self.path.set(RelayPath::Https);
        if let Some(up) = upstream {
            sockopt::set_linger_zero(up);
        }
        if silence.failure == TlsFailure::Reset {
            sockopt::set_linger_zero(client);
            return Outcome::Reset;
        }
        // Read and dropped: the hello, and whatever the client sends until
        // it closes (netchaos stopping ends this too), or the fault ends:
        // removed, or its window (as the API last set it) closed.
        let (mut from, mut sink) = (TcpRef(client), tokio::io::sink());
        let copy = tokio::io::copy(&mut from, &mut sink);
        tokio::pin!(copy);
        let mut chosen = self.chosen.clone();
        let mut end = silence.window.end;
        loop {
            let closes = async {
                match end {
                    Some(end) => tokio::time::sleep_until(self.relay.epoch + end).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut copy => break,
                _ = closes => break,
                r = chosen.changed() => {
                    let now = chosen.borrow_and_update().clone();
                    match now.iter().find(|c| c.id == silence.id) {
                        Some(c) if r.is_ok() => end = c.spec.active.end,
                        _ => break,
                    }
                }
            }
        }
        sockopt::shutdown_write(client);
        Outcome::Closed
    }

    /// TLS to the upstream, offering `offer`; the side, the protocol the
    /// upstream agreed to, and its certificate's verdict.
    async fn tls_upstream<'a>(
        &self,
        upstream: &'a TcpStream,
        name: &str,
        offer: tls::alpn::Offer,
    ) -> std::io::Result<(Side<'a>, Option<Vec<u8>>, Verdict)> {
        let tls = self
            .relay
            .opts
            .tls
            .clone()
            .ok_or_else(|| std::io::Error::other("TLS is not set up"))?;
        let (s, verdict) = tls.connect(TcpRef(upstream), name, offer).await?;
        let agreed = s.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Ok((Side::tls(s, upstream), agreed, verdict))
    }

    /// How the upstream is dialled again, for this connection's faults now.
    fn again(&self) -> DialAgain {
        let faults = self.chosen.borrow().clone();
        DialAgain {
            timeout: self.relay.opts.dial_timeout,
            peer_timeout: self.relay.opts.peer_timeout,
            shape: dial::Shape::for_faults(&faults),
            partitioned: self.partitioned(&faults),
            dialer: self.dialer,
        }
    }

    /// The upstream's TLS handshake failed: the client, whose hello is
    /// still unread, fails as it would have without netchaos — shown a
    /// certificate it does not trust when the upstream's could not be
    /// used (no certificate, or a key it does not hold), reset otherwise.
    async fn refuse_tls(
        &self,
        tls: &Arc<Tls>,
        client: &TcpStream,
        upstream: &TcpStream,
        name: &str,
        hello: &Hello,
        e: &std::io::Error,
    ) -> Outcome {
        let _ = self.path.set(RelayPath::Https);
        let kind = self.upstream_tls_failed(name, e);
        sockopt::set_linger_zero(upstream);
        // The upstream speaks none of the protocols the client offered (an
        // h2-only server, an HTTP/1.1-only client): neither does netchaos,
        // and the client gets the alert it would have got.
        if hello.offers_alpn() && tls::refused_protocols(e) {
            let none = Some(b"netchaos/none".to_vec());
            if let Err(e) = tls.accept(TcpRef(client), name, none, None).await {
                tracing::debug!("TLS client told no protocol is agreed: {e}");
            }
            return Outcome::Closed;
        }
        if kind == "upstream_tls_untrusted" {
            let stand_in = Verdict::Untrusted {
                why: rustls::Error::General(e.to_string()),
                shown: tls::verdict::StandIn::SelfSigned,
            };
            if let Ok(mut s) = tls
                .accept(TcpRef(client), name, hello.agreed(), Some(&stand_in))
                .await
            {
                let _ = tokio::io::AsyncWriteExt::shutdown(&mut s).await;
            }
            return Outcome::Closed;
        }
        sockopt::set_linger_zero(client);
        Outcome::Reset
    }

    /// Records why TLS to the upstream `name` failed, and says which kind
    /// of failure it was: its certificate not trusted, or anything else.
    fn upstream_tls_failed(&self, name: &str, e: &std::io::Error) -> &'static str {
        let kind = if tls::is_certificate_error(e) {
            "upstream_tls_untrusted"
        } else {
            "upstream_tls_failed"
        };
        self.relay
            .events
            .relay_error(self.info, kind, &format!("TLS to {name}: {e}"));
        kind
    }

    /// A plaintext client of a proxy whose upstream's TLS failed: a 502
    /// that says why, then the connection closes.
    async fn bad_gateway(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        name: &str,
        e: &std::io::Error,
    ) -> Outcome {
        let _ = self.path.set(RelayPath::Http);
        self.upstream_tls_failed(name, e);
        sockopt::set_linger_zero(upstream);
        let body = format!("netchaos: TLS to {name}: {e}\n");
        let reply = format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        // The request is read first: the reply must not overtake it.
        let mut probe = [0u8; 1];
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(5), client.peek(&mut probe)).await;
        if sockopt::write_all(client, reply.as_bytes()).await.is_ok() {
            self.meter().add(Direction::Downstream, reply.len() as u64);
        }
        self.teardown(Outcome::Closed, client, None).await;
        Outcome::Closed
    }
}

impl Conn<'_> {
    /// An HTTP/2 connection: the engine between two in-memory pipes, the
    /// client's side through the connection's pipelines (its stream
    /// faults), the upstream's relayed as it is.
    async fn h2(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        client_side: Side<'_>,
        mut upstream_side: Side<'_>,
        x: Exchange,
        reach: h2::Reach,
    ) -> Outcome {
        let (engine_client, ours) = tokio::io::duplex(H2_PIPE);
        let (engine_upstream, theirs) = tokio::io::duplex(H2_PIPE);
        let (end, ending) = h2::ending();
        let moved_on = reach.moved_on.clone();
        let engine = h2::engine(
            x,
            engine_client,
            Box::new(engine_upstream),
            reach,
            end.clone(),
        );
        let (from_engine, to_engine) = tokio::io::split(ours);
        let meter = self.meter();
        let mut up_feed = self.feed(Direction::Upstream);
        let mut down_feed = self.feed(Direction::Downstream);
        let client_read = client_side.read;
        // Cancelled when the engine has ended: the client's bytes have no
        // reader any more.
        let engine_gone = tokio_util::sync::CancellationToken::new();
        let gone = engine_gone.clone();
        let up = pipeline::run(
            Source::Driven(Box::new(move |out| {
                Box::pin(h2::requests(client_read, out, gone))
            })),
            Sink::Local(Box::new(to_engine)),
            Direction::Upstream,
            &mut up_feed,
            &meter,
        );
        let down = pipeline::run(
            Source::Driven(Box::new(move |out| {
                Box::pin(h2::responses(from_engine, ending, out))
            })),
            client_side.sink,
            Direction::Downstream,
            &mut down_feed,
            &meter,
        );
        let upstream_read = upstream_side.read;
        let leg = h2::upstream_leg(
            theirs,
            upstream_read,
            &mut upstream_side.sink,
            end,
            moved_on,
        );
        // The upstream's socket is the leg's to watch (its reset is the
        // client's only until a connection dialled again replaces it).
        let (up, down) = (up.map(|(end, _)| end), down.map(|(end, _)| end));
        let pair = run_pair(Box::pin(up), Box::pin(down), client, None);
        tokio::pin!(pair, engine, leg);
        let (mut engine_done, mut leg_done) = (false, false);
        let outcome = loop {
            tokio::select! {
                r = &mut pair => break r,
                () = &mut engine, if !engine_done => {
                    engine_done = true;
                    engine_gone.cancel();
                }
                () = &mut leg, if !leg_done => leg_done = true,
            }
        };
        self.teardown(outcome, client, Some(upstream)).await;
        outcome
    }

    /// How the HTTP/2 engine dials the upstream again when the upstream
    /// sends its connection away (a GOAWAY: a server's connection age): the
    /// same address, from the same place, TLS verifying the same name.
    fn redial(
        &self,
        upstream: &TcpStream,
        inside: Option<Arc<dyn Interception>>,
        tls_name: Option<(String, Verdict)>,
    ) -> Option<h2::Redial> {
        let addr = upstream.peer_addr().ok()?;
        let again = self.again();
        let tls = match tls_name {
            Some(name) => Some((self.relay.opts.tls.clone()?, name)),
            None => None,
        };
        Some(Arc::new(move || {
            let (inside, tls) = (inside.clone(), tls.clone());
            Box::pin(async move {
                let sock = again
                    .dial(addr, inside.as_ref())
                    .await
                    .map_err(|e| std::io::Error::other(e.message))?;
                let io: Box<dyn h2::UpstreamIo> = match tls {
                    Some((tls, (name, first))) => {
                        let (s, now) = tls.connect(sock, &name, tls::alpn::Offer::H2).await?;
                        if !now.keeps(&first) {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                format!(
                                    "TLS to {name} dialled again: its certificate is not one the client's trust accepts ({now:?})"
                                ),
                            ));
                        }
                        Box::new(s)
                    }
                    None => Box::new(sock),
                };
                Ok(io)
            })
        }))
    }

    /// An HTTP/2 client whose upstream's TLS failed (a proxy to an HTTPS
    /// upstream): it has nothing to read a 502 with, so it is reset.
    fn upstream_failed(
        &self,
        client: &TcpStream,
        upstream: &TcpStream,
        name: &str,
        e: &std::io::Error,
    ) -> Outcome {
        self.upstream_tls_failed(name, e);
        sockopt::set_linger_zero(client);
        sockopt::set_linger_zero(upstream);
        Outcome::Reset
    }
}

/// Each in-memory pipe's buffer, each way.
const H2_PIPE: usize = 64 * 1024;

/// The name the client meant: its SNI, else the address it dialled (`dst`,
/// or the listener's own).
fn server_name(hello: &Hello, client: &TcpStream, dst: Option<SocketAddr>) -> String {
    hello.server_name.clone().unwrap_or_else(|| {
        dst.map(|a| a.ip())
            .or_else(|| client.local_addr().ok().map(|a| a.ip()))
            .map_or_else(|| "localhost".to_string(), |ip| ip.to_string())
    })
}

/// The start of HTTP/2's connection preface (RFC 9113 §3.4): "PRI" is not
/// a method any HTTP/1.1 client sends.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Waits for the first bytes: the client's (an HTTP request, a TLS hello
/// when netchaos terminates TLS) or the server's (a server-first protocol;
/// but an HTTP/2 server greets with its SETTINGS as soon as it accepts,
/// and its client sends its own preface without waiting for them).
async fn sniff(client: &TcpStream, upstream: &TcpStream, tls: bool) -> Carries {
    let mut first = [0u8; 24];
    let mut theirs = [0u8; 9];
    let read = tokio::select! {
        r = client.peek(&mut first) => r,
        r = upstream.peek(&mut theirs) => match r {
            Ok(9) if is_h2_settings(&theirs) => client.peek(&mut first).await,
            _ => return Carries::Other,
        },
    };
    match read {
        Ok(n) if n >= 4 && first[..n].starts_with(&H2_PREFACE[..n.min(H2_PREFACE.len())]) => {
            Carries::H2
        }
        // A method and a space; or the start of one, still arriving.
        Ok(n)
            if n > 0
                && (crate::http::wire::looks_like_request(&first[..n])
                    || crate::http::wire::may_start_request(&first[..n])) =>
        {
            Carries::Http
        }
        Ok(n) if n > 0 && first[0] == 0x16 && tls => match tls::hello::peek(client).await {
            Some(h) => Carries::Tls(h),
            None => Carries::Other,
        },
        _ => Carries::Other,
    }
}

/// Whether a frame header is an HTTP/2 SETTINGS frame's, as a server's
/// first (RFC 9113 §3.4): type 4, no flags, stream 0, a length of whole
/// settings.
fn is_h2_settings(h: &[u8; 9]) -> bool {
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
    len % 6 == 0 && h[3] == 4 && h[4] == 0 && h[5..9] == [0, 0, 0, 0]
}

/// How the upstream is dialled again (after its GOAWAY): from the same place, shaped and tuned as the first connection
/// was, for the connection's faults.
#[derive(Clone, Copy)]
struct DialAgain {
    timeout: std::time::Duration,
    peer_timeout: std::time::Duration,
    shape: dial::Shape,
    partitioned: bool,
    dialer: crate::relay::own::Dialer,
}

impl DialAgain {
    async fn dial(
        self,
        addr: SocketAddr,
        inside: Option<&Arc<dyn Interception>>,
    ) -> Result<TcpStream, dial::DialError> {
        let sock = dial::dial(addr, self.timeout, inside, self.shape, self.dialer).await?;
        sockopt::tune_upstream(&sock, self.peer_timeout, self.partitioned);
        Ok(sock)
    }
}

/// What to offer an upstream for a client speaking HTTP/2 (`h2`) or
/// HTTP/1.1.
fn offer_for(h2: bool) -> tls::alpn::Offer {
    if h2 {
        tls::alpn::Offer::H2
    } else {
        tls::alpn::Offer::Http11
    }
}
