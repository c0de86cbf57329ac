//! The certificate authority HTTPS interception signs with: made fresh for
//! each run (its private key exists only in netchaos's memory and dies with
//! it), or one the user brings (`--tls-ca`/`--tls-key`, a CA an attached
//! container already trusts). Leaf certificates for each server name (or
//! IP address) are made on first use and kept for the run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use time::{Duration, OffsetDateTime};

use super::TlsError;
use crate::fault::tls_error::TlsFailure;

/// Leaf certificates kept, at most (one per server name).
const LEAVES: usize = 4096;

/// A CA and the leaves it signed.
pub(crate) struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// Made by netchaos (a self-signed root): clients that trust it need
    /// no more than the leaf. The user's may be an intermediate, sent
    /// along with every leaf.
    own: bool,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authority")
    }
}

impl Authority {
    /// A new CA for this run: valid from a day ago (clocks differ) for a
    /// week, able to sign server certificates only.
    pub(crate) fn generate() -> Result<Authority, TlsError> {
        Authority::generate_named(&format!("netchaos run CA (pid {})", std::process::id()))
    }

    /// [`Authority::generate`], its common name `name` (each of a run's
    /// CAs has its own: clients look issuers up by name).
    pub(crate) fn generate_named(name: &str) -> Result<Authority, TlsError> {
        let key = KeyPair::generate().map_err(TlsError::generate)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "netchaos");
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(7);
        let cert = params.self_signed(&key).map_err(TlsError::generate)?;
        Ok(Authority {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            own: true,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// A CA from its certificate and PKCS#8 private key, both PEM.
    pub(crate) fn load(cert_pem: &str, key_pem: &str) -> Result<Authority, TlsError> {
        use rustls::pki_types::pem::PemObject;
        let key = KeyPair::from_pem(key_pem).map_err(|e| {
            TlsError::Load(format!(
                "the key is not a PKCS#8 private key in PEM ({e}); convert it with `openssl pkcs8 -topk8 -nocrypt`"
            ))
        })?;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| TlsError::Load(format!("the certificate is not PEM: {e}")))?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .map_err(|e| TlsError::Load(format!("the certificate cannot sign: {e}")))?;
        Ok(Authority {
            cert_pem: cert_pem.to_string(),
            cert_der,
            issuer,
            own: false,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM: what clients must trust.
    pub(crate) fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub(crate) fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The leaf for `name` (a DNS name or an IP address), made on first use.
    pub(crate) fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, TlsError> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(k) = self.leaves.lock().expect("leaf cache").get(&name) {
            return Ok(k.clone());
        }
        let key = Arc::new(self.sign(&name)?);
        let mut leaves = self.leaves.lock().expect("leaf cache");
        if leaves.len() >= LEAVES {
            leaves.clear();
        }
        leaves.insert(name, key.clone());
        Ok(key)
    }

    /// [`Authority::leaf`], sent with the CA's certificate or, when
    /// `with_ca` is false and the CA is netchaos's own root, alone (as
    /// upstreams send theirs: a client that does not trust the CA then
    /// fails as on the upstream's chain).
    pub(crate) fn leaf_sending(
        &self,
        name: &str,
        with_ca: bool,
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let key = self.leaf(name)?;
        if with_ca || !self.own {
            return Ok(key);
        }
        Ok(Arc::new(CertifiedKey::new(
            key.cert[..1].to_vec(),
            key.key.clone(),
        )))
    }

    fn sign(&self, name: &str) -> Result<CertifiedKey, TlsError> {
        self.sign_sending(name, true)
    }

    /// A leaf for `name`, sent with the CA's certificate or alone (made
    /// each time, not kept: a CA nobody trusts stands in for the issuer
    /// of an upstream nobody trusts, shaped as that upstream's chain was).
    pub(crate) fn sign_sending(&self, name: &str, with_ca: bool) -> Result<CertifiedKey, TlsError> {
        let key = KeyPair::generate().map_err(TlsError::generate)?;
        let params = leaf_params(name)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(TlsError::generate)?;
        let mut chain = vec![cert.der().clone()];
        if with_ca {
            chain.push(self.cert_der.clone());
        }
        certified(chain, &key)
    }
}

impl Authority {
    /// The certificate a `tls_error` fault shows for `name`: signed by the
    /// authority but expired, not yet valid or for another name, or
    /// trusted by nobody; `None` for failures that show no certificate.
    /// Made for each connection (a key pair costs well under a
    /// millisecond), never cached with the good leaves.
    pub(crate) fn faulty_leaf(
        &self,
        name: &str,
        failure: TlsFailure,
    ) -> Result<Option<CertifiedKey>, TlsError> {
        self.faulty_leaf_sending(name, failure, true)
    }

    /// [`Authority::faulty_leaf`], sent alone when `with_ca` is false and
    /// the CA is netchaos's own (see [`Authority::leaf_sending`]).
    pub(crate) fn faulty_leaf_sending(
        &self,
        name: &str,
        failure: TlsFailure,
        with_ca: bool,
    ) -> Result<Option<CertifiedKey>, TlsError> {
        let now = OffsetDateTime::now_utc();
        let mut params = match failure {
            TlsFailure::WrongHost => leaf_params(WRONG_HOST)?,
            TlsFailure::Untrusted => {
                return self_signed(name, "netchaos: tls_error untrusted").map(Some);
            }
            TlsFailure::Stall | TlsFailure::Reset => return Ok(None),
            _ => leaf_params(name)?,
        };
        match failure {
            TlsFailure::Expired => {
                params.not_before = now - Duration::days(30);
                params.not_after = now - Duration::days(1);
            }
            TlsFailure::NotYetValid => {
                params.not_before = now + Duration::days(1);
                params.not_after = now + Duration::days(30);
            }
            _ => {}
        }
        let key = KeyPair::generate().map_err(TlsError::generate)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(TlsError::generate)?;
        let mut chain = vec![cert.der().clone()];
        if with_ca || !self.own {
            chain.push(self.cert_der.clone());
        }
        certified(chain, &key).map(Some)
    }
}

/// The one name a `wrong_host` certificate holds (`.invalid` is reserved:
/// no real host has it).
pub(crate) const WRONG_HOST: &str = "wrong-host.netchaos.invalid";

/// A certificate for `name` that no client trusts (self-signed by a key
/// made for it): what a client is shown when the upstream's own
/// certificate failed verification, so that it fails as it would have.
pub(crate) fn untrusted(name: &str) -> Result<CertifiedKey, TlsError> {
    self_signed(name, "netchaos: upstream certificate rejected")
}

/// A self-signed certificate for `name`, its organisation saying why.
fn self_signed(name: &str, why: &str) -> Result<CertifiedKey, TlsError> {
    let key = KeyPair::generate().map_err(TlsError::generate)?;
    let mut params = leaf_params(name)?;
    params
        .distinguished_name
        .push(DnType::OrganizationName, why);
    let cert = params.self_signed(&key).map_err(TlsError::generate)?;
    certified(vec![cert.der().clone()], &key)
}

fn leaf_params(name: &str) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(vec![name.to_string()])
        .map_err(|e| TlsError::Load(format!("{name:?} cannot be a certificate's name: {e}")))?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(7);
    Ok(params)
}

fn certified(chain: Vec<CertificateDer<'static>>, key: &KeyPair) -> Result<CertifiedKey, TlsError> {
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = any_supported_type(&der).map_err(|e| TlsError::Load(e.to_string()))?;
    Ok(CertifiedKey::new(chain, signing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_signed_per_name_and_kept() {
        let ca = Authority::generate().unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let a = ca.leaf("api.example.com").unwrap();
        let b = ca.leaf("API.example.com.").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one leaf per name");
        assert_eq!(a.cert.len(), 2, "leaf and CA");
        assert!(ca.leaf("127.0.0.1").is_ok(), "an IP address is a name too");
        let ca2 = Authority::load(ca.cert_pem(), &ca.issuer.key().serialize_pem()).unwrap();
        assert!(ca2.leaf("x.test").is_ok());
        let e = Authority::load(ca.cert_pem(), "junk").unwrap_err();
        assert!(e.to_string().contains("PKCS#8"), "{e}");
    }
}
