//! Trust in the run's CAs for the wrapped command, with no change to it:
//! inside the command's private mount namespace, every system trust store
//! found (the PEM bundles of Debian/Ubuntu, Fedora/RHEL, openSUSE and
//! Alpine, and Java's `cacerts`) is covered by a copy that adds CAs, and
//! the variables that clients with stores of their own read
//! (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`,
//! `NODE_EXTRA_CA_CERTS`, …) point at such a bundle — or, when the user set
//! one to a file, that file is covered the same way, wherever it is.
//!
//! Two halves. [`plan`], in netchaos before anything starts, reads each
//! store as it is (what the clients would trust directly: upstreams are
//! judged against it, [`crate::tls::verdict`]), tells the stores apart,
//! and fails on a variable naming a file that is not there, naming both.
//! [`install`], in the agent once the CAs exist, writes the copies — each
//! bundle gains the CAs of the sets of stores it belongs to
//! ([`crate::tls::signers`]) — and mounts them.
//!
//! Where a client reads no bundle netchaos can see, the system's store
//! stands in for its own (Node's built-in store, certifi, a JDK's
//! `cacerts`): it is trusted to accept what the system's store accepts.
//! OpenSSL's hashed directory (`SSL_CERT_DIR`) is not read: a client that
//! trusts a CA only from there refuses that CA's upstreams.
//!
//! The copies live on a tmpfs that is mounted only while they are written
//! and then detached: nothing is written to the host's disk, nothing
//! outlives the namespace, and the host's own trust stores are untouched.
//! Only the CAs' certificates are here; their keys never leave netchaos.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use super::error::InterceptError;
use crate::tls::verdict::MAX_STORES;
use crate::tls::{Store, jks};

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

/// Variables a client reads when the first is unset: `requests` (and
/// pip's copy of it) falls back to `CURL_CA_BUNDLE`. Such a variable is
/// left unset when its fallback is set, or the client would trust the
/// system's store instead of the one it was pinned to.
const FALLBACKS: &[(&str, &[&str])] = &[
    ("REQUESTS_CA_BUNDLE", &["CURL_CA_BUNDLE"]),
    ("PIP_CERT", &["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"]),
];

/// Node reads this file in addition to its own store.
const NODE_EXTRA: &str = "NODE_EXTRA_CA_CERTS";

/// Where the copies are written while they are made: any existing
/// directory will do, as the tmpfs covering it is detached again.
const SCRATCH: &[&str] = &["/tmp", "/mnt", "/var/tmp", "/run"];

/// The command's trust stores, read: what each trusts, and the files that
/// hold them.
#[derive(Debug)]
pub(crate) struct TrustPlan {
    /// Each store the command's clients may verify with, told apart by
    /// what they hold (at most [`MAX_STORES`]).
    pub(crate) stores: Vec<Store>,
    covers: Vec<Planned>,
    /// Unset variables pointed at the system bundle (`system`).
    set: Vec<&'static str>,
    system: Option<PathBuf>,
}

/// A file to cover, and whose store it holds.
#[derive(Debug)]
struct Planned {
    target: PathBuf,
    /// For messages: `CURL_CA_BUNDLE`, `the system store`.
    label: String,
    store: usize,
    java: bool,
}

/// What the agent covers (sent to it once the CAs exist).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Covering {
    /// CA certificates, PEM.
    cas: Vec<String>,
    covers: Vec<CoverMsg>,
    /// Variables to set, to the system bundle.
    set: Vec<String>,
    system: Option<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CoverMsg {
    target: PathBuf,
    label: String,
    java: bool,
    /// Indices into [`Covering::cas`].
    cas: Vec<usize>,
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

fn pem_certs(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// The stores found so far, told apart by what they hold.
#[derive(Default)]
struct Stores {
    stores: Vec<Store>,
    held: Vec<BTreeSet<Vec<u8>>>,
}

impl Stores {
    /// The store holding `roots`: one already found, or a new one.
    fn add(&mut self, label: &str, roots: Vec<CertificateDer<'static>>) -> usize {
        let held: BTreeSet<Vec<u8>> = roots.iter().map(|c| c.to_vec()).collect();
        if let Some(i) = self.held.iter().position(|h| *h == held) {
            self.stores[i].label.push_str(&format!(", {label}"));
            return i;
        }
        self.stores.push(Store {
            label: label.to_string(),
            roots,
        });
        self.held.push(held);
        self.stores.len() - 1
    }

    /// At most [`MAX_STORES`]: the last one and those beyond it become
    /// one, trusting only what all of them trust (their clients may fail
    /// where they would not directly; none trusts more). Returns where
    /// each store went.
    fn bounded(mut self) -> (Vec<Store>, impl Fn(usize) -> usize) {
        let last = MAX_STORES - 1;
        if self.stores.len() > MAX_STORES {
            let rest = self.stores.split_off(last);
            let common = self.held[last..]
                .iter()
                .skip(1)
                .fold(self.held[last].clone(), |a, b| &a & b);
            let labels: Vec<&str> = rest.iter().map(|s| s.label.as_str()).collect();
            tracing::warn!(
                "--tls: more than {MAX_STORES} different trust stores; {} are taken as one, trusting only the certificates all of them hold",
                labels.join("; ")
            );
            self.stores.push(Store {
                label: labels.join("; "),
                roots: common.into_iter().map(CertificateDer::from).collect(),
            });
        }
        (self.stores, move |i: usize| i.min(last))
    }
}

/// Reads the command's trust stores (netchaos, before anything starts):
/// the system bundles, the files the bundle variables in `env` name, and
/// Java's stores. A variable naming no readable file is an error, naming
/// both.
pub(crate) fn plan(env: &[CString]) -> Result<TrustPlan, String> {
    let mut stores = Stores::default();
    let mut covers: Vec<Planned> = Vec::new();
    // The system's bundles; the first is what unset variables point at.
    let mut system: Option<(PathBuf, usize, Vec<CertificateDer<'static>>)> = None;
    for f in existing(PEM_STORES.iter().map(PathBuf::from)) {
        let roots = match fs::read(&f) {
            Ok(b) => pem_certs(&b),
            Err(e) => {
                tracing::warn!("--tls: cannot read {}: {e}; it is not covered", f.display());
                continue;
            }
        };
        let label = format!("the system store ({})", f.display());
        let i = stores.add(&label, roots.clone());
        if system.is_none() {
            system = Some((f.clone(), i, roots));
        }
        covers.push(Planned {
            target: f,
            label,
            store: i,
            java: false,
        });
    }
    if system.is_none() {
        tracing::warn!(
            "--tls: no system CA bundle found ({}); clients that read one will not trust the run's CA",
            PEM_STORES.join(", ")
        );
    }
    // What Node trusts besides NODE_EXTRA_CA_CERTS: its own store, taken
    // to be the system's.
    let node_own = || match &system {
        Some((_, _, roots)) => roots.clone(),
        None => rustls_native_certs::load_native_certs().certs,
    };
    // The files the variables name, each with the variables naming it.
    let mut named: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    for k in BUNDLE_ENV {
        let Some(v) = env_value(env, k) else { continue };
        let cannot = |why: &dyn std::fmt::Display| {
            format!("--tls: cannot cover the CA bundle {k} names ({v}): {why}; fix or unset {k}")
        };
        let path = fs::canonicalize(v).map_err(|e| cannot(&e))?;
        if !path.is_file() {
            return Err(cannot(&"not a file"));
        }
        match named.iter_mut().find(|(p, _)| *p == path) {
            Some((_, vars)) => vars.push(k),
            None => named.push((path, vec![k])),
        }
    }
    for (path, vars) in named {
        if covers.iter().any(|c| c.target == path) {
            continue; // a system bundle
        }
        let label = format!("{} ({})", vars.join(", "), path.display());
        let bytes = fs::read(&path).map_err(|e| {
            format!("--tls: cannot cover the CA bundle {label}: {e}; fix or unset the variable")
        })?;
        let mut roots = pem_certs(&bytes);
        // A file other clients read as their whole trust is taken as
        // that (the narrower).
        if vars == [NODE_EXTRA] {
            roots.extend(node_own());
        }
        let i = stores.add(&label, roots);
        covers.push(Planned {
            target: path,
            label,
            store: i,
            java: false,
        });
    }
    // Java's stores: taken to trust what the system's does.
    let java: Vec<PathBuf> = existing(JAVA_STORES.iter().map(PathBuf::from).chain(jdk_stores(env)))
        .into_iter()
        .filter(|t| !covers.iter().any(|c| c.target == *t))
        .collect();
    if !java.is_empty() {
        let i = match &system {
            Some((_, i, _)) => *i,
            None => stores.add("this host's trust store", node_own()),
        };
        for t in java {
            covers.push(Planned {
                label: format!("Java's store ({})", t.display()),
                target: t,
                store: i,
                java: true,
            });
        }
    }
    let set = match &system {
        Some(_) => BUNDLE_ENV
            .iter()
            .copied()
            .filter(|k| env_value(env, k).is_none())
            .filter(|k| {
                let fallbacks = FALLBACKS
                    .iter()
                    .find(|(v, _)| v == k)
                    .map_or(&[][..], |f| f.1);
                fallbacks.iter().all(|f| env_value(env, f).is_none())
            })
            .collect(),
        None => Vec::new(),
    };
    let (stores, moved) = stores.bounded();
    for c in &mut covers {
        c.store = moved(c.store);
    }
    Ok(TrustPlan {
        stores,
        covers,
        set,
        system: system.map(|s| s.0),
    })
}

impl TrustPlan {
    /// What the agent covers: store `i`'s files gain `cas_for_store(i)`.
    pub(crate) fn covering<'a>(&self, cas_for_store: impl Fn(usize) -> Vec<&'a str>) -> Covering {
        let mut cas: Vec<String> = Vec::new();
        let per_store: Vec<Vec<usize>> = (0..self.stores.len())
            .map(|i| {
                cas_for_store(i)
                    .into_iter()
                    .map(|pem| match cas.iter().position(|c| c == pem) {
                        Some(k) => k,
                        None => {
                            cas.push(pem.to_string());
                            cas.len() - 1
                        }
                    })
                    .collect()
            })
            .collect();
        Covering {
            covers: self
                .covers
                .iter()
                .map(|c| CoverMsg {
                    target: c.target.clone(),
                    label: c.label.clone(),
                    java: c.java,
                    cas: per_store[c.store].clone(),
                })
                .collect(),
            cas,
            set: self.set.iter().map(|k| k.to_string()).collect(),
            system: self.system.clone(),
        }
    }
}

/// The PEM bundle `original` with the CAs (PEM) added.
pub(crate) fn pem_with(original: &[u8], cas: &[&str]) -> Vec<u8> {
    let mut out = original.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(b"# netchaos run CA (HTTPS interception; this run only)\n");
    for ca in cas {
        out.extend_from_slice(ca.as_bytes());
        if !ca.ends_with('\n') {
            out.push(b'\n');
        }
    }
    out
}

/// A Java key store with the CAs (DER) added: appended to a JKS store as
/// it is; any other store (PKCS#12) is replaced by a JKS of the system's
/// PEM certificates and the CAs (every JDK reads JKS).
pub(crate) fn java_with(original: &[u8], system_pem: &[u8], cas: &[Vec<u8>]) -> Vec<u8> {
    let alias = |i: usize| match i {
        0 => "netchaos-run-ca".to_string(),
        i => format!("netchaos-run-ca-{i}"),
    };
    let appended = cas
        .iter()
        .enumerate()
        .try_fold(original.to_vec(), |store, (i, der)| {
            jks::append(&store, &alias(i), der)
        });
    if let Some(store) = appended {
        return store;
    }
    let mut certs: Vec<(String, Vec<u8>)> = pem_certs(system_pem)
        .into_iter()
        .enumerate()
        .map(|(i, c)| (format!("system-{i}"), c.to_vec()))
        .collect();
    certs.extend(
        cas.iter()
            .enumerate()
            .map(|(i, der)| (alias(i), der.clone())),
    );
    jks::trust_store(&certs)
}

/// Covers the trust stores as `c` says and returns the command's
/// environment with the bundle variables set. Runs in the agent, in the
/// command's mount namespace, before the command starts.
pub(crate) fn install(c: &Covering, env: &[CString]) -> Result<Vec<CString>, InterceptError> {
    let system_pem = c
        .system
        .as_ref()
        .and_then(|p| fs::read(p).ok())
        .unwrap_or_default();
    let ders: Vec<Vec<u8>> = c
        .cas
        .iter()
        .map(|pem| {
            CertificateDer::from_pem_slice(pem.as_bytes())
                .map(|d| d.to_vec())
                .unwrap_or_default()
        })
        .collect();
    let mut covers = Vec::new();
    for cover in &c.covers {
        let original = fs::read(&cover.target).map_err(|e| {
            InterceptError::Unavailable(format!(
                "--tls: cannot read {} to cover it: {e}",
                cover.label
            ))
        })?;
        let contents = if cover.java {
            let cas: Vec<Vec<u8>> = cover.cas.iter().map(|&i| ders[i].clone()).collect();
            java_with(&original, &system_pem, &cas)
        } else {
            let cas: Vec<&str> = cover.cas.iter().map(|&i| c.cas[i].as_str()).collect();
            pem_with(&original, &cas)
        };
        covers.push(Cover {
            target: &cover.target,
            label: &cover.label,
            contents,
        });
    }
    mount_covers(&covers)?;
    // Unset variables point at the (covered) system bundle; set ones name
    // a file that is covered now.
    let mut env = env.to_vec();
    if let Some(bundle) = &c.system {
        for k in &c.set {
            env.retain(|kv| !kv.as_bytes().starts_with(format!("{k}=").as_bytes()));
            if let Ok(kv) = CString::new(format!("{k}={}", bundle.display())) {
                env.push(kv);
            }
        }
    }
    Ok(env)
}

/// One store to cover, and what covers it.
struct Cover<'a> {
    target: &'a Path,
    label: &'a str,
    contents: Vec<u8>,
}

fn mount_covers(covers: &[Cover<'_>]) -> Result<(), InterceptError> {
    if covers.is_empty() {
        return Ok(());
    }
    // Each target is held first: the staging tmpfs may hide it (a bundle
    // under /tmp), and a mount onto /proc/self/fd/N reaches the file
    // itself, hidden or not.
    let targets = covers
        .iter()
        .map(|c| {
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
                .open(c.target)
                .map_err(|e| {
                    InterceptError::Unavailable(format!("--tls: cannot open {}: {e}", c.label))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let scratch = SCRATCH
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .ok_or_else(|| {
            InterceptError::Unavailable("--tls: no directory to stage the CA bundles in".into())
        })?;
    let none: Option<&str> = None;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("netchaos-trust"),
        scratch,
        Some("tmpfs"),
        flags,
        Some("mode=0755,size=64m"),
    )
    .map_err(InterceptError::sys(
        "--tls: cannot mount a tmpfs for the CA bundles",
    ))?;
    let result = (|| {
        for (i, c) in covers.iter().enumerate() {
            fs::write(scratch.join(format!("store-{i}")), &c.contents).map_err(|e| {
                InterceptError::Unavailable(format!(
                    "--tls: cannot stage the copy of {}: {e}",
                    c.label
                ))
            })?;
        }
        // Read-only, and so is every bind mount of it: the command cannot
        // change what it trusts.
        mount(
            none,
            scratch,
            none,
            flags | MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            none,
        )
        .map_err(InterceptError::sys(
            "--tls: cannot make the CA bundles read-only",
        ))?;
        for (i, (c, target)) in covers.iter().zip(&targets).enumerate() {
            let at = format!("/proc/self/fd/{}", target.as_raw_fd());
            mount(
                Some(&scratch.join(format!("store-{i}"))),
                at.as_str(),
                none,
                MsFlags::MS_BIND,
                none,
            )
            .map_err(InterceptError::sys(format!(
                "--tls: cannot cover {}",
                c.label
            )))?;
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
    fn bundles_gain_the_cas() {
        let out = pem_with(
            b"-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----",
            &["CA\n", "CB"],
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("-----BEGIN"));
        assert!(text.ends_with("this run only)\nCA\nCB\n"), "{text}");
        let env = vec![
            CString::new("SSL_CERT_FILE=/x/y.pem").unwrap(),
            CString::new("EMPTY=").unwrap(),
        ];
        assert_eq!(env_value(&env, "SSL_CERT_FILE"), Some("/x/y.pem"));
        assert_eq!(env_value(&env, "EMPTY"), None);
    }

    fn env(vars: &[(&str, &Path)]) -> Vec<CString> {
        vars.iter()
            .map(|(k, v)| CString::new(format!("{k}={}", v.display())).unwrap())
            .collect()
    }

    fn ca_pem(name: &str) -> String {
        crate::tls::Authority::generate_named(name)
            .unwrap()
            .cert_pem()
            .to_string()
    }

    #[test]
    fn each_bundle_is_a_store_of_its_own_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.pem"), dir.path().join("b.pem"));
        fs::write(&a, ca_pem("A")).unwrap();
        fs::write(&b, ca_pem("B")).unwrap();
        let same = dir.path().join("a-again.pem");
        fs::copy(&a, &same).unwrap();
        let p = plan(&env(&[
            ("CURL_CA_BUNDLE", &a),
            ("SSL_CERT_FILE", &b),
            ("AWS_CA_BUNDLE", &same),
        ]))
        .unwrap();
        let of = |f: &Path| {
            let f = fs::canonicalize(f).unwrap();
            p.covers.iter().find(|c| c.target == f).unwrap().store
        };
        assert_ne!(of(&a), of(&b), "different contents, different stores");
        assert_eq!(of(&a), of(&same), "the same certificates, one store");
        assert_eq!(p.stores[of(&a)].roots.len(), 1);
        // requests falls back to CURL_CA_BUNDLE: left unset, not pointed
        // at the system's store.
        assert!(!p.set.contains(&"REQUESTS_CA_BUNDLE"), "{:?}", p.set);
        assert!(!p.set.contains(&"PIP_CERT"), "{:?}", p.set);

        let missing = dir.path().join("missing.pem");
        let e = plan(&env(&[("SSL_CERT_FILE", &missing)])).unwrap_err();
        assert!(e.contains("SSL_CERT_FILE"), "{e}");
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let e = plan(&env(&[("CURL_CA_BUNDLE", dir.path())])).unwrap_err();
        assert!(
            e.contains("CURL_CA_BUNDLE") && e.contains("not a file"),
            "{e}"
        );
    }

    #[test]
    fn node_adds_its_file_to_its_own_store() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.pem");
        fs::write(&a, ca_pem("A")).unwrap();
        let p = plan(&env(&[("NODE_EXTRA_CA_CERTS", &a)])).unwrap();
        let a = fs::canonicalize(&a).unwrap();
        let c = p.covers.iter().find(|c| c.target == a).unwrap();
        assert!(
            p.stores[c.store].roots.len() > 1 || p.system.is_none(),
            "Node's own store (the system's) and the file"
        );
    }

    #[test]
    fn too_many_stores_share_one_trusting_what_all_hold() {
        let mut s = Stores::default();
        let certs: Vec<CertificateDer<'static>> = (0..MAX_STORES + 3)
            .map(|i| CertificateDer::from(vec![i as u8]))
            .collect();
        for i in 0..MAX_STORES + 2 {
            // Each holds the common certificate 0 and one of its own.
            s.add(
                &format!("s{i}"),
                vec![certs[0].clone(), certs[i + 1].clone()],
            );
        }
        let (stores, moved) = s.bounded();
        assert_eq!(stores.len(), MAX_STORES);
        assert_eq!(stores[MAX_STORES - 1].roots, vec![certs[0].clone()]);
        assert_eq!(moved(MAX_STORES + 1), MAX_STORES - 1);
        assert_eq!(moved(1), 1);
    }
}
