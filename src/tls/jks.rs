//! A Java KeyStore (JKS) of trusted certificates: what the JDK reads as
//! `cacerts`, written so that Java clients trust the run's CA as well as
//! the host's. Format: the magic and version, then one "trusted
//! certificate" entry per certificate, then a SHA-1 digest keyed by the
//! store password (the JDK's default, `changeit`). No crate writes JKS; the
//! format is small, fixed since JDK 1.2, and checked here against `keytool`
//! in the tests.

use ring::digest;

const MAGIC: u32 = 0xFEED_FEED;
const VERSION: u32 = 2;
const TRUSTED_CERT: u32 = 2;
/// The password every JDK's `cacerts` is written with.
pub(crate) const PASSWORD: &str = "changeit";

fn utf(out: &mut Vec<u8>, s: &str) {
    // Modified UTF-8; the aliases here are ASCII.
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn entry(out: &mut Vec<u8>, alias: &str, der: &[u8]) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    out.extend_from_slice(&TRUSTED_CERT.to_be_bytes());
    utf(out, alias);
    out.extend_from_slice(&now.to_be_bytes());
    utf(out, "X.509");
    out.extend_from_slice(&(der.len() as u32).to_be_bytes());
    out.extend_from_slice(der);
}

/// Appends the digest: SHA-1 over the password (UTF-16BE), a fixed
/// phrase, and the store.
fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    let password: Vec<u8> = PASSWORD.encode_utf16().flat_map(u16::to_be_bytes).collect();
    ctx.update(&password);
    ctx.update(b"Mighty Aphrodite");
    ctx.update(&out);
    out.extend_from_slice(ctx.finish().as_ref());
    out
}

/// A keystore holding `certs` (DER), each under its alias.
pub(crate) fn trust_store(certs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(certs.len() as u32).to_be_bytes());
    for (alias, der) in certs {
        entry(&mut out, alias, der);
    }
    seal(out)
}

/// `store` (a JKS) with one more trusted certificate; `None` when it is
/// not a JKS store.
pub(crate) fn append(store: &[u8], alias: &str, der: &[u8]) -> Option<Vec<u8>> {
    const DIGEST: usize = 20;
    if store.len() < 12 + DIGEST || store[..4] != MAGIC.to_be_bytes() {
        return None;
    }
    let count = u32::from_be_bytes(store[8..12].try_into().ok()?);
    let mut out = store[..store.len() - DIGEST].to_vec();
    out[8..12].copy_from_slice(&(count + 1).to_be_bytes());
    entry(&mut out, alias, der);
    Some(seal(out))
}
