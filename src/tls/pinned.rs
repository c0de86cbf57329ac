//! Destinations whose clients refused the run's certificate: a client that
//! pins a CA of its own (an explicit CA file, a certificate pin) fails its
//! handshake with netchaos where directly it would have succeeded. The
//! first refusal is logged and summarised by destination (what to do about
//! it); every later connection to that destination is relayed untouched,
//! as interception proxies do (mitmproxy's ignored hosts, Charles's and
//! Burp's TLS pass-through): no HTTP fault can act on it, and none of its
//! requests fails because of netchaos.
//!
//! A destination is the name the client asked for (its SNI, else the
//! address) and the port. At most [`Pinned::MAX`] are remembered: past
//! that, a refusal is still logged, and its destination stays intercepted.

use std::collections::HashSet;
use std::io;
use std::sync::Mutex;

use rustls::AlertDescription;

#[derive(Debug, Default)]
pub(crate) struct Pinned {
    seen: Mutex<HashSet<String>>,
}

impl Pinned {
    /// The most destinations remembered.
    pub(crate) const MAX: usize = 4096;

    /// The destination of a connection to `name` (a server name or an
    /// address) on `port`.
    pub(crate) fn destination(name: &str, port: u16) -> String {
        if name.contains(':') {
            format!("[{name}]:{port}")
        } else {
            format!("{name}:{port}")
        }
    }

    /// Whether `dest`'s connections are relayed untouched.
    pub(crate) fn contains(&self, dest: &str) -> bool {
        self.seen.lock().expect("pinned lock").contains(dest)
    }

    /// Remembers a refusal at `dest`; `true` when it is the first there
    /// and `dest` is remembered from now on.
    pub(crate) fn refused(&self, dest: &str) -> bool {
        let mut seen = self.seen.lock().expect("pinned lock");
        seen.len() < Self::MAX && seen.insert(dest.to_string())
    }
}

/// The alert with which a client refused the certificate it was shown
/// (OpenSSL's clients send `unknown_ca`, Go's `bad_certificate`, Java's
/// `certificate_unknown`), if that is how its handshake failed.
pub(crate) fn refusal(e: &io::Error) -> Option<AlertDescription> {
    let alert = match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(a) => *a,
        _ => return None,
    };
    matches!(
        alert,
        AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied
    )
    .then_some(alert)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_remembered_once_and_bounded() {
        let p = Pinned::default();
        let d = Pinned::destination("localhost", 4433);
        assert_eq!(d, "localhost:4433");
        assert_eq!(Pinned::destination("::1", 443), "[::1]:443");
        assert!(!p.contains(&d));
        assert!(p.refused(&d));
        assert!(p.contains(&d));
        assert!(!p.refused(&d), "the first refusal only");
        for i in 1..Pinned::MAX {
            assert!(p.refused(&format!("h{i}:1")));
        }
        assert!(!p.refused("one-more:1"), "bounded");
        assert!(!p.contains("one-more:1"));
    }

    #[test]
    fn only_certificate_alerts_are_refusals() {
        let e = |r: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, r);
        for a in [
            AlertDescription::UnknownCA,
            AlertDescription::BadCertificate,
            AlertDescription::CertificateUnknown,
        ] {
            assert_eq!(refusal(&e(rustls::Error::AlertReceived(a))), Some(a));
        }
        let other = rustls::Error::AlertReceived(AlertDescription::HandshakeFailure);
        assert_eq!(refusal(&e(other)), None);
        assert_eq!(
            refusal(&io::Error::from(io::ErrorKind::UnexpectedEof)),
            None
        );
    }
}
