//! The CAs that sign for the command's clients, one for every set of their
//! trust stores. A client's bundle holds the CA of each set its store is
//! in, so a leaf from the CA of set S is trusted by exactly the clients
//! whose stores are in S: an upstream that only the system store accepts
//! is shown, signed by the system-only CA, to a client pinned to a bundle
//! of its own, which refuses it as it would have refused the upstream.
//! A chain has one path to an anchor (OpenSSL does not try a second), so
//! this takes a CA per set, not cross-signatures.
//!
//! With one store (the usual case, and always for `proxy` and `attach`)
//! there is one CA: the run's [`Authority`] (or the user's `--tls-ca`),
//! which signs for the set of every store whatever their number.

use std::sync::Arc;

use rustls::sign::CertifiedKey;

use super::TlsError;
use super::authority::{self, Authority};
use super::verdict::{Mask, StandIn, Verdict};

pub(crate) struct Signers {
    /// Signs for every store; what `tls_error` faults and `respond`
    /// show, and what `--tls-ca-out` writes.
    all: Authority,
    /// Indexed by set: the CA of each set but the empty and the full one.
    some: Vec<Option<Authority>>,
    /// In no store: the issuer shown for an upstream nobody trusts.
    nobody: Authority,
}

impl std::fmt::Debug for Signers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signers({} sets)", self.some.len())
    }
}

impl Signers {
    /// `all`, and a CA made now for every other non-empty set of
    /// `stores` stores.
    pub(crate) fn new(all: Authority, stores: usize) -> Result<Signers, TlsError> {
        let full: Mask = (1 << stores) - 1;
        let pid = std::process::id();
        let some = (0..=full)
            .map(|set| match set {
                0 => Ok(None),
                s if s == full => Ok(None),
                s => Authority::generate_named(&format!(
                    "netchaos run CA (pid {pid}, stores {s:#x})"
                ))
                .map(Some),
            })
            .collect::<Result<_, _>>()?;
        let nobody =
            Authority::generate_named(&format!("netchaos: an issuer nobody trusts (pid {pid})"))?;
        Ok(Signers { all, some, nobody })
    }

    pub(crate) fn all(&self) -> &Authority {
        &self.all
    }

    fn of(&self, set: Mask) -> &Authority {
        match self.some.get(set as usize) {
            Some(Some(a)) => a,
            _ => &self.all,
        }
    }

    /// The CAs store `i`'s bundle must hold (PEM): those of the sets it
    /// is in.
    pub(crate) fn for_store(&self, i: usize) -> Vec<&str> {
        let mut out = vec![self.all.cert_pem()];
        out.extend(
            self.some
                .iter()
                .enumerate()
                .filter(|(set, _)| set & (1 << i) != 0)
                .filter_map(|(_, a)| a.as_ref().map(Authority::cert_pem)),
        );
        out
    }

    /// The certificate a client is shown for `name`, upstream judged
    /// `verdict`.
    pub(crate) fn shown(
        &self,
        name: &str,
        verdict: &Verdict,
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let key = match verdict {
            Verdict::Trusted { stores, with_root } => {
                return self.of(*stores).leaf_sending(name, *with_root);
            }
            Verdict::Untrusted { shown, .. } => match shown {
                StandIn::SelfSigned => authority::untrusted(name)?,
                StandIn::Unknown { with_root } => self.nobody.sign_sending(name, *with_root)?,
                StandIn::Flawed {
                    stores,
                    flaw,
                    with_root,
                } => match self
                    .of(*stores)
                    .faulty_leaf_sending(name, *flaw, *with_root)?
                {
                    Some(key) => key,
                    None => authority::untrusted(name)?,
                },
            },
        };
        Ok(Arc::new(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_set_of_stores_has_its_own_ca_in_exactly_its_stores_bundles() {
        let s = Signers::new(Authority::generate().unwrap(), 2).unwrap();
        let all = s.all().cert_pem().to_string();
        let (a, b) = (s.for_store(0), s.for_store(1));
        // {0}, {0,1} and {1}, {0,1}.
        assert_eq!((a.len(), b.len()), (2, 2));
        assert!(a.contains(&all.as_str()) && b.contains(&all.as_str()));
        assert!(a.iter().all(|p| *p == all || !b.contains(p)));
        let only_0 = |with_root| {
            let v = Verdict::Trusted {
                stores: 1,
                with_root,
            };
            s.shown("x.test", &v).unwrap().cert.len()
        };
        assert_eq!(only_0(true), 2, "leaf and its CA");
        assert_eq!(only_0(false), 1, "the leaf alone");
        let one = Signers::new(Authority::generate().unwrap(), 1).unwrap();
        assert_eq!(one.for_store(0), [one.all().cert_pem()]);
    }
}
