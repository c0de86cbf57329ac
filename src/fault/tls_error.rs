//! `tls_error` (TLS layer, HTTPS only): the client's TLS handshake fails
//! the way a broken or misconfigured server makes it fail — a certificate
//! that has expired, is not valid yet, names another host or chains to
//! no trusted authority, or a server that reads the hello and never
//! answers, or resets. The client's own verification refuses the
//! certificate, so it reports the error it would report against that
//! server (curl's exit 60, Python's `SSLCertVerificationError`, Node's
//! `CERT_HAS_EXPIRED`, Go's `x509: certificate has expired`), and the
//! upstream is never spoken to over TLS. Needs TLS termination (`--tls`, or
//! a listener serving TLS).

use super::http_match::HostPattern;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

/// How the handshake fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// Signed by the run's authority, its validity ended yesterday.
    Expired,
    /// Signed by the run's authority, valid from tomorrow.
    NotYetValid,
    /// Signed by the run's authority, for another name.
    WrongHost,
    /// Self-signed: no authority the client trusts.
    Untrusted,
    /// The hello is read and never answered: the client's handshake
    /// timeout, unless the fault ends first (then the connection closes).
    Stall,
    /// An RST once the hello has arrived.
    Reset,
}

const CHOICES: &[&str] = &[
    "expired",
    "not_yet_valid",
    "wrong_host",
    "untrusted",
    "stall",
    "reset",
];

impl TlsFailure {
    fn parse(s: &str) -> TlsFailure {
        match s {
            "not_yet_valid" => TlsFailure::NotYetValid,
            "wrong_host" => TlsFailure::WrongHost,
            "untrusted" => TlsFailure::Untrusted,
            "stall" => TlsFailure::Stall,
            "reset" => TlsFailure::Reset,
            _ => TlsFailure::Expired,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TlsFailure::Expired => "expired",
            TlsFailure::NotYetValid => "not_yet_valid",
            TlsFailure::WrongHost => "wrong_host",
            TlsFailure::Untrusted => "untrusted",
            TlsFailure::Stall => "stall",
            TlsFailure::Reset => "reset",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TlsError {
    error: TlsFailure,
    /// Only connections whose TLS server name matches.
    host: Option<HostPattern>,
}

impl Kind for TlsError {
    const INFO: KindInfo = KindInfo {
        name: "tls_error",
        layer: Layer::Tls,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "the client's TLS handshake fails: a certificate expired, not yet valid, for another host or untrusted, or no answer, or an RST (HTTPS through --tls)",
        params: &[
            (
                "error",
                "expired (default), not_yet_valid, wrong_host, untrusted, stall or reset",
                "how the handshake fails",
            ),
            (
                "host",
                "a glob, default any",
                "only connections for this host (the TLS server name)",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let error = TlsFailure::parse(f.choice("error", CHOICES)?.unwrap_or("expired"));
        Ok(TlsError {
            error,
            host: f.string("host")?.map(|h| HostPattern::new(&h)),
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("error", self.error.as_str().to_string())];
        if let Some(h) = &self.host {
            p.push(("host", h.text().to_string()));
        }
        p
    }
}

impl TlsError {
    pub(crate) fn failure(&self) -> TlsFailure {
        self.error
    }

    /// Whether it has a `host`.
    pub(crate) fn names_host(&self) -> bool {
        self.host.is_some()
    }

    /// Whether it applies to a connection for `server_name` (its SNI, or
    /// the address it dialled).
    pub(crate) fn applies_to(&self, server_name: &str) -> bool {
        self.host.as_ref().is_none_or(|g| g.matches(server_name))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;

    fn tls_error(pairs: &[(&str, &str)]) -> Result<TlsError, ProfileError> {
        spec("tls_error", pairs).map(|s| match s.kind {
            FaultKind::TlsError(t) => t,
            _ => unreachable!(),
        })
    }

    #[test]
    fn parses_each_failure_and_matches_hosts_by_glob() {
        assert_eq!(tls_error(&[]).unwrap().failure(), TlsFailure::Expired);
        for name in CHOICES {
            let t = tls_error(&[("error", name)]).unwrap();
            assert_eq!(t.failure().as_str(), *name);
        }
        assert!(tls_error(&[("error", "bogus")]).is_err());
        let t = tls_error(&[("error", "wrong_host"), ("host", "*.Example.com")]).unwrap();
        assert!(t.applies_to("api.example.com"));
        assert!(t.applies_to("API.example.com."));
        assert!(!t.applies_to("example.org"));
        assert!(tls_error(&[]).unwrap().applies_to("anything"));
        assert_eq!(
            t.params(),
            vec![
                ("error", "wrong_host".to_string()),
                ("host", "*.example.com".to_string())
            ]
        );
    }
}
