//! Whose trust an upstream's certificate has. netchaos never accepts an
//! upstream on a client's behalf: the chain the upstream sent is checked,
//! after the handshake, against each trust store the command's clients
//! read (with `--upstream-ca` added to each), and the [`Verdict`] says
//! which of them accept it — the client is then shown a certificate that
//! exactly those stores trust ([`super::signers`]). When none does, the
//! verdict says what the client is shown in its place: a certificate with
//! the same flaw (expired, not yet valid, for another name) signed for the
//! stores that would otherwise accept it, or one whose issuer nobody
//! knows, shaped as the upstream's chain was (a self-signed leaf, a chain
//! ending in a self-signed root, or a leaf alone), so that a verifying
//! client fails with the error it would have had directly, and one that
//! verifies nothing goes on.
//!
//! The handshake itself checks only that the upstream holds its
//! certificate's key ([`Deferred`]); [`super::Tls::connect`] judges the
//! chain before returning, so no stream is used unjudged.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::fault::tls_error::TlsFailure;

/// A set of trust stores, one bit each.
pub(crate) type Mask = u32;

/// Most stores told apart: every non-empty set of them has a CA of its own
/// (2^5 − 1 = 31 CAs), and every bundle holds the CAs of the sets it is
/// in. Further stores share one (see `intercept::trust`).
pub(crate) const MAX_STORES: usize = 5;

/// One trust store a client of the command may verify with.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    /// For messages: `the system store (/etc/ssl/…)`, `CURL_CA_BUNDLE=…`.
    pub(crate) label: String,
    /// What it trusts.
    pub(crate) roots: Vec<CertificateDer<'static>>,
}

/// How an upstream's certificate stands with the clients' stores.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Accepted by the stores in the mask (never empty); the upstream
    /// sent its root along (its chain ends in a self-signed certificate):
    /// so is the CA, for a client that does not trust it to fail as on the
    /// upstream's chain.
    Trusted { stores: Mask, with_root: bool },
    /// Accepted by none: why (as the first store saw it), and what the
    /// client is shown.
    Untrusted { why: rustls::Error, shown: StandIn },
}

impl Verdict {
    pub(crate) fn is_trusted(&self) -> bool {
        matches!(self, Verdict::Trusted { .. })
    }

    /// Whether a client that went on after `first` (on this upstream's
    /// first connection) would go on after this one too: accepted by every
    /// store that accepted the first (the client's is one of them); after
    /// a stand-in the client accepted, the same stand-in or a certificate
    /// with no flaw.
    pub(crate) fn keeps(&self, first: &Verdict) -> bool {
        match (first, self) {
            (Verdict::Trusted { stores: was, .. }, Verdict::Trusted { stores: is, .. }) => {
                was & is == *was
            }
            (Verdict::Trusted { .. }, Verdict::Untrusted { .. }) => false,
            (Verdict::Untrusted { .. }, Verdict::Trusted { .. }) => true,
            (Verdict::Untrusted { shown: a, .. }, Verdict::Untrusted { shown: b, .. }) => a == b,
        }
    }

    /// The verdict as an error, for a client that cannot be shown a
    /// certificate (a plaintext client of `proxy --upstream-tls`).
    pub(crate) fn into_result(self) -> std::io::Result<()> {
        match self {
            Verdict::Trusted { .. } => Ok(()),
            Verdict::Untrusted { why, .. } => {
                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why))
            }
        }
    }
}

/// What a client is shown for an upstream no store of its accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StandIn {
    /// A leaf from a CA nobody trusts; with that CA's certificate when
    /// the upstream sent a self-signed root too.
    Unknown { with_root: bool },
    /// A self-signed leaf (the upstream's was one).
    SelfSigned,
    /// The stores in the mask anchor the certificate but it fails them
    /// with this flaw: a leaf with the same flaw, from their CA (sent
    /// along as the upstream's root was).
    Flawed {
        stores: Mask,
        flaw: TlsFailure,
        with_root: bool,
    },
}

/// The stores' verifiers.
pub(crate) struct Judge {
    /// One per store; `None` for a store that trusts nothing.
    stores: Vec<Option<Arc<WebPkiServerVerifier>>>,
}

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Judge({} stores)", self.stores.len())
    }
}

impl Judge {
    /// Verifiers for `stores`, each with `extra` (`--upstream-ca`) added.
    pub(crate) fn new(
        stores: &[Store],
        extra: &[CertificateDer<'static>],
        provider: &Arc<CryptoProvider>,
    ) -> Judge {
        assert!(
            (1..=MAX_STORES).contains(&stores.len()),
            "between 1 and {MAX_STORES} stores"
        );
        let stores = stores
            .iter()
            .map(|s| {
                let mut roots = RootCertStore::empty();
                let (_, skipped) = roots.add_parsable_certificates(s.roots.iter().cloned());
                if skipped > 0 {
                    tracing::debug!("{}: {skipped} certificate(s) rustls cannot use", s.label);
                }
                roots.add_parsable_certificates(extra.iter().cloned());
                if roots.is_empty() {
                    return None;
                }
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .ok()
            })
            .collect();
        Judge { stores }
    }

    /// Every store at once.
    pub(crate) fn all(&self) -> Mask {
        (1 << self.stores.len()) - 1
    }

    pub(crate) fn len(&self) -> usize {
        self.stores.len()
    }

    /// The verdict on the chain an upstream sent for `name`, at `now`.
    pub(crate) fn verdict(
        &self,
        chain: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Verdict {
        let Some((leaf, rest)) = chain.split_first() else {
            return Verdict::Untrusted {
                why: rustls::Error::NoCertificatesPresented,
                shown: StandIn::Unknown { with_root: false },
            };
        };
        let check = |i: usize, at: UnixTime| match &self.stores[i] {
            Some(v) => v.verify_server_cert(leaf, rest, name, &[], at).map(|_| ()),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
        };
        let mut trusted: Mask = 0;
        let mut errors = Vec::with_capacity(self.stores.len());
        for i in 0..self.stores.len() {
            match check(i, now) {
                Ok(()) => trusted |= 1 << i,
                Err(e) => errors.push((i, e)),
            }
        }
        let with_root = ends_self_signed(chain);
        if trusted != 0 {
            return Verdict::Trusted {
                stores: trusted,
                with_root,
            };
        }
        // Which stores would accept it but for one flaw: its validity
        // (checked before the chain is built, so the chain is checked
        // again at a moment the leaf is valid) or its names (checked
        // after the chain: the store anchors it).
        let mut timed: Mask = 0;
        let mut time_flaw = TlsFailure::Expired;
        let mut named: Mask = 0;
        for (i, e) in &errors {
            let (flaw, at) = match e {
                rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
                    not_after,
                    ..
                }) => (TlsFailure::Expired, *not_after),
                rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext {
                    not_before,
                    ..
                }) => (TlsFailure::NotYetValid, *not_before),
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => {
                    named |= 1 << i;
                    continue;
                }
                _ => continue,
            };
            match check(*i, at) {
                Ok(()) => {}
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => {}
                Err(_) => continue,
            }
            timed |= 1 << i;
            time_flaw = flaw;
        }
        let shown = if timed != 0 {
            StandIn::Flawed {
                stores: timed,
                flaw: time_flaw,
                with_root,
            }
        } else if named != 0 {
            StandIn::Flawed {
                stores: named,
                flaw: TlsFailure::WrongHost,
                with_root,
            }
        } else if chain.len() == 1 && with_root {
            StandIn::SelfSigned
        } else {
            StandIn::Unknown { with_root }
        };
        // Why: the flaw shown, as a store that anchors the chain saw it;
        // else the first store's reason.
        let flawed = match shown {
            StandIn::Flawed { stores, .. } => stores,
            _ => 0,
        };
        let first = errors
            .iter()
            .position(|(i, _)| flawed & (1 << i) != 0)
            .unwrap_or(0);
        let why = errors.swap_remove(first).1;
        Verdict::Untrusted { why, shown }
    }
}

/// Whether the chain ends in a self-signed certificate (its root, or a
/// self-signed leaf): a client that does not trust it fails on that
/// ("self-signed certificate (in certificate chain)") rather than on a
/// missing issuer.
fn ends_self_signed(chain: &[CertificateDer<'_>]) -> bool {
    chain.last().is_some_and(|c| {
        x509_parser::parse_x509_certificate(c)
            .is_ok_and(|(_, x)| x.subject().as_raw() == x.issuer().as_raw())
    })
}

/// The upstream handshake's certificate check: the upstream must hold its
/// certificate's key; whether the certificate is trusted is the
/// [`Judge`]'s to say, once the handshake is over.
#[derive(Debug)]
pub(crate) struct Deferred(pub(crate) Arc<CryptoProvider>);

impl ServerCertVerifier for Deferred {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, IsCa, Issuer, KeyPair};
    use time::{Duration, OffsetDateTime};

    struct Ca {
        cert: CertificateDer<'static>,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = p.self_signed(&key).unwrap().der().clone();
        Ca {
            cert,
            issuer: Issuer::new(p, key),
        }
    }

    /// A leaf for `names` from `ca`, valid `days` from now on (negative:
    /// expired), sent with the CA when `with_root`.
    fn leaf(
        ca: &Ca,
        names: &[&str],
        days: (i64, i64),
        with_root: bool,
    ) -> Vec<CertificateDer<'static>> {
        let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        let now = OffsetDateTime::now_utc();
        p.not_before = now + Duration::days(days.0);
        p.not_after = now + Duration::days(days.1);
        let key = KeyPair::generate().unwrap();
        let mut chain = vec![p.signed_by(&key, &ca.issuer).unwrap().der().clone()];
        if with_root {
            chain.push(ca.cert.clone());
        }
        chain
    }

    fn store(label: &str, cas: &[&Ca]) -> Store {
        Store {
            label: label.into(),
            roots: cas.iter().map(|c| c.cert.clone()).collect(),
        }
    }

    #[test]
    fn an_upstream_is_trusted_by_exactly_the_stores_that_accept_it() {
        let (a, b, c) = (ca("A"), ca("B"), ca("C"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // Store 0: the system's (A and B); store 1: a bundle pinned to A.
        let judge = Judge::new(
            &[store("system", &[&a, &b]), store("pinned", &[&a])],
            &[],
            &provider,
        );
        let name = ServerName::try_from("api.test").unwrap();
        let now = UnixTime::now();
        let v = |chain: &[CertificateDer<'static>]| judge.verdict(chain, &name, now);
        let ok = (-1, 30);
        assert_eq!(
            v(&leaf(&a, &["api.test"], ok, false)),
            Verdict::Trusted {
                stores: 0b11,
                with_root: false
            }
        );
        assert_eq!(
            v(&leaf(&b, &["api.test"], ok, false)),
            Verdict::Trusted {
                stores: 0b01,
                with_root: false
            }
        );
        assert_eq!(
            v(&leaf(&a, &["api.test"], ok, true)),
            Verdict::Trusted {
                stores: 0b11,
                with_root: true
            },
            "sent with its root"
        );
        let shown = |verdict: Verdict| match verdict {
            Verdict::Untrusted { shown, .. } => shown,
            t => panic!("trusted: {t:?}"),
        };
        assert_eq!(
            shown(v(&leaf(&c, &["api.test"], ok, false))),
            StandIn::Unknown { with_root: false }
        );
        assert_eq!(
            shown(v(&leaf(&c, &["api.test"], ok, true))),
            StandIn::Unknown { with_root: true }
        );
        // Flaws are shown to the stores that anchor the chain.
        assert_eq!(
            shown(v(&leaf(&b, &["api.test"], (-30, -1), false))),
            StandIn::Flawed {
                stores: 0b01,
                flaw: TlsFailure::Expired,
                with_root: false
            }
        );
        assert_eq!(
            shown(v(&leaf(&a, &["api.test"], (1, 30), false))),
            StandIn::Flawed {
                stores: 0b11,
                flaw: TlsFailure::NotYetValid,
                with_root: false
            }
        );
        assert_eq!(
            shown(v(&leaf(&a, &["other.test"], ok, false))),
            StandIn::Flawed {
                stores: 0b11,
                flaw: TlsFailure::WrongHost,
                with_root: false
            }
        );
        assert_eq!(
            shown(v(&leaf(&c, &["api.test"], (-30, -1), false))),
            StandIn::Unknown { with_root: false },
            "expired, and nobody's: unknown"
        );
        // A self-signed leaf.
        let key = KeyPair::generate().unwrap();
        let own = CertificateParams::new(vec!["api.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(shown(v(&[own.der().clone()])), StandIn::SelfSigned);
        assert_eq!(shown(v(&[])), StandIn::Unknown { with_root: false });
        // --upstream-ca is every store's.
        let judge = Judge::new(
            &[store("system", &[&a]), store("pinned", &[])],
            std::slice::from_ref(&c.cert),
            &provider,
        );
        assert_eq!(
            judge.verdict(&leaf(&c, &["api.test"], ok, false), &name, now),
            Verdict::Trusted {
                stores: 0b11,
                with_root: false
            }
        );
    }

    #[test]
    fn a_redial_keeps_what_the_client_accepted() {
        let stand_in = |shown| Verdict::Untrusted {
            why: rustls::Error::General("x".into()),
            shown,
        };
        let trusted = |stores| Verdict::Trusted {
            stores,
            with_root: false,
        };
        let unknown = stand_in(StandIn::Unknown { with_root: false });
        assert!(trusted(0b11).keeps(&trusted(0b01)));
        assert!(!trusted(0b10).keeps(&trusted(0b01)));
        assert!(!unknown.keeps(&trusted(0b01)));
        assert!(unknown.keeps(&unknown.clone()));
        assert!(!stand_in(StandIn::SelfSigned).keeps(&unknown));
    }
}
