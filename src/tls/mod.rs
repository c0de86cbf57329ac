//! TLS for the HTTP layer: HTTPS is terminated with certificates from an
//! [`Authority`] (the run's own CA, or the user's) so that HTTP faults can
//! act on requests, and re-originated to the real destination. The
//! upstream's certificate is judged against the trust the client itself
//! would have used ([`verdict`]: for `run`, each trust store the command's
//! clients read, as they were before netchaos covered them; elsewhere the
//! host's), plus the user's `--upstream-ca` files, and the client is shown
//! a certificate that exactly the same stores trust ([`signers`]). An
//! upstream no store accepts is never vouched for: its client is shown a
//! certificate nobody trusts, and fails as it would have without netchaos
//! — or, verifying nothing (`curl -k`), goes on to that upstream as it
//! would have.
//!
//! The upstream is offered (ALPN) what the client offered, and the client
//! is agreed what the upstream chose ([`alpn`]): HTTP/2 end to end
//! ([`crate::http::h2`]) where both speak it, HTTP/1.1 where either does
//! not. A client that offers neither is not terminated — its connection
//! stays a byte relay.
//!
//! Only connections an HTTP fault could act on are terminated: those of
//! rules with HTTP faults (matched by address, name and port), and of
//! those faults, any whose `host` could be the client's server name. A
//! client that refuses the run's certificate all the same (it pins a CA of
//! its own) has that destination relayed untouched from then on
//! ([`pinned`]).

pub(crate) mod alpn;
pub(crate) mod authority;
pub(crate) mod hello;
pub(crate) mod jks;
pub(crate) mod pinned;
pub(crate) mod signers;
pub(crate) mod verdict;

use std::io;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ResolvesServerCert;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

pub(crate) use authority::Authority;
pub(crate) use hello::Hello;
pub(crate) use verdict::{Store, Verdict};

use tokio::io::{AsyncRead, AsyncWrite};

/// The application protocols netchaos speaks inside TLS.
pub(crate) const HTTP11: &[u8] = b"http/1.1";
pub(crate) const H2: &[u8] = b"h2";

/// Why TLS could not be set up (at start: a bad CA or CA file).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    #[error("cannot make a certificate: {0}")]
    Generate(String),
    #[error("{0}")]
    Load(String),
}

impl TlsError {
    fn generate(e: rcgen::Error) -> TlsError {
        TlsError::Generate(e.to_string())
    }
}

/// The certificates of CA files (PEM contents, with the names to show in
/// errors): each file must hold at least one, each usable as a trust
/// anchor.
pub(crate) fn check_roots(
    files: &[(String, Vec<u8>)],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut out = Vec::new();
    for (name, pem) in files {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Load(format!("{name}: not a PEM certificate file: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError::Load(format!("{name}: no PEM certificate in it")));
        }
        let mut probe = RootCertStore::empty();
        for c in &certs {
            probe.add(c.clone()).map_err(|e| {
                TlsError::Load(format!("{name}: a certificate netchaos cannot use: {e}"))
            })?;
        }
        out.extend(certs);
    }
    Ok(out)
}

/// Terminating and re-originating TLS, for one run.
pub(crate) struct Tls {
    signers: signers::Signers,
    judge: verdict::Judge,
    /// TLS to upstreams, one configuration per offer ([`alpn::Offer::ALL`]).
    upstream: Vec<Arc<ClientConfig>>,
    /// Destinations whose clients refused the run's certificate.
    pinned: pinned::Pinned,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Signs with `authority`; judges upstreams against `stores` (for
    /// `run`: the command's, as read before they were covered; `None`:
    /// the host's trust store), each with the certificates in
    /// `extra_roots` (PEM files' contents, with the names to show in
    /// errors) added.
    pub(crate) fn new(
        authority: Authority,
        extra_roots: &[(String, Vec<u8>)],
        stores: Option<Vec<Store>>,
    ) -> Result<Tls, TlsError> {
        let extra = check_roots(extra_roots)?;
        let stores = match stores {
            Some(s) => s,
            None => {
                let native = rustls_native_certs::load_native_certs();
                if native.certs.is_empty() && extra_roots.is_empty() {
                    tracing::warn!(
                        "TLS: no trusted certificate found on this host; upstreams can only be verified with --upstream-ca"
                    );
                }
                vec![Store {
                    label: "this host's trust store".into(),
                    roots: native.certs,
                }]
            }
        };
        let provider = provider();
        let judge = verdict::Judge::new(&stores, &extra, &provider);
        let signers = signers::Signers::new(authority, judge.len())?;
        let upstream = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Load(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verdict::Deferred(provider)))
            .with_no_client_auth();
        // One session cache for all (the clones share it).
        let upstream = alpn::Offer::ALL
            .iter()
            .map(|o| {
                let mut c = upstream.clone();
                c.alpn_protocols = o.protocols();
                Arc::new(c)
            })
            .collect();
        Ok(Tls {
            signers,
            judge,
            upstream,
            pinned: pinned::Pinned::default(),
        })
    }

    /// Destinations whose clients refused the run's certificate, relayed
    /// untouched from then on.
    pub(crate) fn pinned(&self) -> &pinned::Pinned {
        &self.pinned
    }

    /// The CAs (PEM) that the bundle of store `i` (of those given to
    /// [`Tls::new`]) must hold.
    pub(crate) fn cas_for_store(&self, i: usize) -> Vec<&str> {
        self.signers.for_store(i)
    }

    /// The CA every store trusts.
    pub(crate) fn authority(&self) -> &Authority {
        self.signers.all()
    }

    /// TLS to the upstream, its certificate judged for `name` (an
    /// untrusted one is no error: the stream is for a client that, shown a
    /// certificate nobody trusts, goes on), offering `offer` (with
    /// [`alpn::Offer::H2`], an upstream that agrees to anything else
    /// fails).
    pub(crate) async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        sock: S,
        name: &str,
        offer: alpn::Offer,
    ) -> io::Result<(client::TlsStream<S>, Verdict)> {
        let server = ServerName::try_from(name.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{name:?}: {e}")))?;
        let config = &self.upstream[offer.index()];
        let s = TlsConnector::from(config.clone())
            .connect(server.clone(), sock)
            .await?;
        // Every handshake, a resumed one too (its chain is the first's).
        let chain = s.get_ref().1.peer_certificates().unwrap_or(&[]);
        let verdict = self.judge.verdict(chain, &server, UnixTime::now());
        if offer == alpn::Offer::H2 && s.get_ref().1.alpn_protocol() != Some(H2) {
            return Err(io::Error::other(format!(
                "{name} does not speak HTTP/2 (ALPN)"
            )));
        }
        Ok((s, verdict))
    }

    /// Completes the client's handshake (its hello is still unread) with a
    /// certificate for `name` that the stores `verdict` names trust (all,
    /// with no upstream: `None`), or, when it names none, one with the
    /// upstream's flaw; agreeing to `alpn` (one of the protocols the client
    /// offered, if it offered any).
    pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        sock: S,
        name: &str,
        alpn: Option<Vec<u8>>,
        verdict: Option<&Verdict>,
    ) -> io::Result<server::TlsStream<S>> {
        let all = Verdict::Trusted {
            stores: self.judge.all(),
            with_root: true,
        };
        let key = self
            .signers
            .shown(name, verdict.unwrap_or(&all))
            .map_err(io::Error::other)?;
        self.serve(sock, key, alpn).await
    }

    /// Completes the client's handshake showing `key`'s certificate (a
    /// faulty one: the client's first protocol is agreed to, so that even
    /// a client offering only h2 gets as far as refusing it).
    pub(crate) async fn accept_showing<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        sock: S,
        key: Arc<CertifiedKey>,
        hello: &Hello,
    ) -> io::Result<server::TlsStream<S>> {
        let alpn = if hello.speaks_http1() || hello.offers_h2() {
            hello.agreed()
        } else {
            hello.alpn.first().cloned()
        };
        self.serve(sock, key, alpn).await
    }

    /// The handshake with `key`, agreeing to `alpn` when the client offers
    /// protocols.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        sock: S,
        key: Arc<CertifiedKey>,
        alpn: Option<Vec<u8>>,
    ) -> io::Result<server::TlsStream<S>> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Fixed(key)));
        config.alpn_protocols = alpn.into_iter().collect();
        TlsAcceptor::from(Arc::new(config)).accept(sock).await
    }
}

/// A server configuration serving the authority's leaf for `name` (the
/// demo's HTTPS server).
pub(crate) fn serving(authority: &Authority, name: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let key = authority.leaf(name)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Load(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Fixed(key)));
    config.alpn_protocols = vec![HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration trusting `roots` (DER) only, or the host's
/// trust store (which honours `SSL_CERT_FILE`) when `roots` is empty.
pub(crate) fn client_trusting(roots: &[CertificateDer<'static>]) -> Arc<ClientConfig> {
    let mut store = RootCertStore::empty();
    if roots.is_empty() {
        store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    } else {
        store.add_parsable_certificates(roots.iter().cloned());
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the default protocol versions")
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP11.to_vec()];
    Arc::new(config)
}

/// The one certificate a connection is served.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Whether a TLS error is the upstream's certificate failing verification.
pub(crate) fn is_certificate_error(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        })
}

/// Whether a TLS error is a fatal alert the peer sent.
pub(crate) fn is_alert(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::AlertReceived(_)))
}

/// Whether a TLS error is the upstream agreeing to none of the protocols
/// offered (its `no_application_protocol` alert).
pub(crate) fn refused_protocols(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)
            )
        })
}
