//! Trust in the run's CA for the wrapped command, with no change to it:
//! inside the command's private mount namespace, every system trust store
//! found (the PEM bundles of Debian/Ubuntu, Fedora/RHEL, openSUSE and
//! Alpine, and Java's `cacerts`) is covered by a copy that adds the CA, and
//! the variables that clients with stores of their own read
//! (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`,
//! `NODE_EXTRA_CA_CERTS`, …) point at such a bundle — or, when the user set
//! one to a file, that file is covered the same way.
//!
//! The copies live on a tmpfs that is mounted only while they are written
//! and then detached: nothing is written to the host's disk, nothing
//! outlives the namespace, and the host's own trust stores are untouched.
//! Only the CA's certificate is here; its key never leaves netchaos.

use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use super::error::InterceptError;
use crate::tls::jks;

/// PEM bundles, as the distributions place them.
const PEM_STORES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/etc/pki/tls/cacert.pem",
];

/// Java key stores, beyond each JDK's own under these directories.
const JAVA_STORES: &[&str] = &[
    "/etc/ssl/certs/java/cacerts",
    "/etc/pki/ca-trust/extracted/java/cacerts",
    "/etc/pki/java/cacerts",
];
const JDK_DIRS: &[&str] = &["/usr/lib/jvm", "/opt/java", "/usr/java"];

/// Variables naming a CA bundle file, for clients that do not read the
/// system's.
pub(crate) const BUNDLE_ENV: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "AWS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
];

/// Where the copies are written while they are made: any existing
/// directory will do, as the tmpfs covering it is detached again.
const SCRATCH: &[&str] = &["/tmp", "/mnt", "/var/tmp", "/run"];

/// One store to cover, and what covers it.
struct Cover {
    target: PathBuf,
    contents: Vec<u8>,
}

/// The PEM bundle `original` with the CA added.
pub(crate) fn pem_with(original: &[u8], ca_pem: &str) -> Vec<u8> {
    let mut out = original.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(b"# netchaos run CA (HTTPS interception; this run only)\n");
    out.extend_from_slice(ca_pem.as_bytes());
    out
}

/// A Java key store with the CA added: appended to a JKS store as it is;
/// any other store (PKCS#12) is replaced by a JKS of the system's PEM
/// certificates and the CA (every JDK reads JKS).
pub(crate) fn java_with(original: &[u8], system_pem: &[u8], ca_der: &[u8]) -> Vec<u8> {
    if let Some(store) = jks::append(original, "netchaos-run-ca", ca_der) {
        return store;
    }
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut certs: Vec<(String, Vec<u8>)> = CertificateDer::pem_slice_iter(system_pem)
        .filter_map(Result::ok)
        .enumerate()
        .map(|(i, c)| (format!("system-{i}"), c.to_vec()))
        .collect();
    certs.push(("netchaos-run-ca".into(), ca_der.to_vec()));
    jks::trust_store(&certs)
}

fn env_value<'a>(env: &'a [CString], name: &str) -> Option<&'a str> {
    env.iter().find_map(|kv| {
        let kv = kv.to_str().ok()?;
        let (k, v) = kv.split_once('=')?;
        (k == name && !v.is_empty()).then_some(v)
    })
}

/// Each JDK's `lib/security/cacerts` (and a JRE's) under the JDK
/// directories and `JAVA_HOME`.
fn jdk_stores(env: &[CString]) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = JDK_DIRS
        .iter()
        .filter_map(|d| fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    if let Some(h) = env_value(env, "JAVA_HOME") {
        homes.push(PathBuf::from(h));
    }
    homes
        .iter()
        .flat_map(|h| {
            [
                h.join("lib/security/cacerts"),
                h.join("jre/lib/security/cacerts"),
            ]
        })
        .collect()
}

/// Regular files among `paths`, each once (symlinks resolved).
fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if let Ok(real) = fs::canonicalize(&p)
            && real.is_file()
            && !out.contains(&real)
        {
            out.push(real);
        }
    }
    out
}

/// Covers the trust stores and returns the command's environment with the
/// bundle variables set. Runs in the agent, in the command's mount
/// namespace, before the command starts.
pub(crate) fn install(
    ca_pem: &str,
    ca_der: &[u8],
    env: &[CString],
) -> Result<Vec<CString>, InterceptError> {
    let system = existing(PEM_STORES.iter().map(PathBuf::from));
    let user_set: Vec<PathBuf> = BUNDLE_ENV
        .iter()
        .filter_map(|k| env_value(env, k))
        .map(PathBuf::from)
        .collect();
    let pem_targets = existing(system.iter().cloned().chain(user_set));
    let system_pem = system
        .first()
        .and_then(|p| fs::read(p).ok())
        .unwrap_or_default();
    let mut covers = Vec::new();
    for t in &pem_targets {
        let original = fs::read(t).unwrap_or_default();
        covers.push(Cover {
            target: t.clone(),
            contents: pem_with(&original, ca_pem),
        });
    }
    let java = existing(JAVA_STORES.iter().map(PathBuf::from).chain(jdk_stores(env)));
    for t in java.iter().filter(|t| !pem_targets.contains(t)) {
        let original = fs::read(t).unwrap_or_default();
        covers.push(Cover {
            target: t.clone(),
            contents: java_with(&original, &system_pem, ca_der),
        });
    }
    if system.is_empty() {
        tracing::warn!(
            "--tls: no system CA bundle found ({}); clients that read one will not trust the run's CA",
            PEM_STORES.join(", ")
        );
    }
    mount_covers(&covers)?;
    // Unset variables point at the (covered) system bundle; set ones name
    // a file that is covered now.
    let mut env = env.to_vec();
    if let Some(bundle) = system.first() {
        for k in BUNDLE_ENV {
            if env_value(&env, k).is_none() {
                env.retain(|kv| !kv.as_bytes().starts_with(format!("{k}=").as_bytes()));
                if let Ok(kv) = CString::new(format!("{k}={}", bundle.display())) {
                    env.push(kv);
                }
            }
        }
    }
    Ok(env)
}

fn mount_covers(covers: &[Cover]) -> Result<(), InterceptError> {
    if covers.is_empty() {
        return Ok(());
    }
    let scratch = SCRATCH
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .ok_or_else(|| {
            InterceptError::Unavailable("--tls: no directory to stage the CA bundles in".into())
        })?;
    let none: Option<&str> = None;
    mount(
        Some("netchaos-trust"),
        scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=64m"),
    )
    .map_err(InterceptError::sys(
        "--tls: cannot mount a tmpfs for the CA bundles",
    ))?;
    let result = (|| {
        for (i, c) in covers.iter().enumerate() {
            let staged = scratch.join(format!("store-{i}"));
            fs::write(&staged, &c.contents).map_err(|e| {
                InterceptError::Unavailable(format!("--tls: cannot stage a CA bundle: {e}"))
            })?;
            mount(Some(&staged), &c.target, none, MsFlags::MS_BIND, none)
                .map_err(InterceptError::sys("--tls: cannot cover a trust store"))?;
            // Read-only: the command cannot change what it trusts.
            mount(
                none,
                &c.target,
                none,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                none,
            )
            .map_err(InterceptError::sys(
                "--tls: cannot make a covered trust store read-only",
            ))?;
        }
        Ok(())
    })();
    // The stores stay covered; the staging directory goes.
    umount2(scratch, MntFlags::MNT_DETACH).map_err(InterceptError::sys(
        "--tls: cannot detach the staging tmpfs",
    ))?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_gain_the_ca() {
        let out = pem_with(
            b"-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----",
            "CA\n",
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("-----BEGIN"));
        assert!(text.ends_with("this run only)\nCA\n"), "{text}");
        let env = vec![
            CString::new("SSL_CERT_FILE=/x/y.pem").unwrap(),
            CString::new("EMPTY=").unwrap(),
        ];
        assert_eq!(env_value(&env, "SSL_CERT_FILE"), Some("/x/y.pem"));
        assert_eq!(env_value(&env, "EMPTY"), None);
    }
}
