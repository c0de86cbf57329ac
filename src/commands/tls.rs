//! A command's TLS set-up for the HTTP layer: the CA that signs (made for
//! the run, or the user's `--tls-ca`/`--tls-key`), the upstreams' extra
//! trust (`--upstream-ca`), and `--tls-ca-out`. Every file is read and
//! checked by [`prepare`], before anything starts; [`Prepared::build`] makes
//! the CA (for `run`: after the namespace's agent was forked, so that the
//! key never exists in its memory).

use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::TlsArgs;
use crate::error::{Error, Result};
use crate::tls::{Authority, Tls};

/// TLS settings, read and checked.
pub(super) struct Prepared {
    /// The user's CA: certificate and key, PEM.
    authority: Option<(String, String)>,
    extra_roots: Vec<(String, Vec<u8>)>,
    ca_out: Option<PathBuf>,
}

/// The TLS settings, when `wanted` (else an error for TLS flags given
/// without TLS).
pub(super) fn prepare(args: &TlsArgs, wanted: bool) -> Result<Option<Prepared>> {
    if !wanted {
        if let Some(flag) = [
            (!args.upstream_ca.is_empty()).then_some("--upstream-ca"),
            args.tls_ca_out.is_some().then_some("--tls-ca-out"),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(Error::Usage(format!(
                "{flag} has no effect without TLS: add --tls (or --upstream-tls for a proxy)"
            )));
        }
        return Ok(None);
    }
    let read = |flag: &str, p: &std::path::Path| {
        std::fs::read(p).map_err(|e| Error::Usage(format!("{flag} {}: {e}", p.display())))
    };
    let text = |flag: &str, p: &std::path::Path| {
        String::from_utf8(read(flag, p)?)
            .map_err(|_| Error::Usage(format!("{flag} {}: not a PEM file", p.display())))
    };
    let authority = match (&args.tls_ca, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let pair = (text("--tls-ca", cert)?, text("--tls-key", key)?);
            Authority::load(&pair.0, &pair.1).map_err(|e| {
                Error::Usage(format!(
                    "--tls-ca {} / --tls-key {}: {e}",
                    cert.display(),
                    key.display()
                ))
            })?;
            Some(pair)
        }
        _ => None,
    };
    let mut extra_roots = Vec::new();
    for p in &args.upstream_ca {
        extra_roots.push((
            format!("--upstream-ca {}", p.display()),
            read("--upstream-ca", p)?,
        ));
    }
    crate::tls::check_roots(&extra_roots).map_err(|e| Error::Usage(e.to_string()))?;
    if let Some(out) = &args.tls_ca_out {
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(Error::Usage(format!(
                "--tls-ca-out {}: no such directory",
                out.display()
            )));
        }
        // Refused now, before anything starts, if it is another user's
        // link (see `outfile`); written once the CA exists.
        crate::outfile::create(out, 0o644)
            .map_err(|e| Error::Usage(format!("--tls-ca-out {e}")))?;
    }
    Ok(Some(Prepared {
        authority,
        extra_roots,
        ca_out: args.tls_ca_out.clone(),
    }))
}

impl Prepared {
    /// The CA (loaded, or made now), upstream trust (`stores`: the trust
    /// stores of `run`'s command, as read before they were covered; `None`:
    /// the host's), and `--tls-ca-out`.
    pub(super) fn build(self, stores: Option<Vec<crate::tls::Store>>) -> Result<Arc<Tls>> {
        let authority = match &self.authority {
            Some((cert, key)) => Authority::load(cert, key).map_err(Error::runtime)?,
            None => Authority::generate().map_err(Error::runtime)?,
        };
        let tls = Tls::new(authority, &self.extra_roots, stores)
            .map_err(|e| Error::Usage(e.to_string()))?;
        if let Some(out) = &self.ca_out {
            // A certificate, public: 0644 (before the umask), so that
            // clients running as other users can read it.
            use std::io::Write;
            crate::outfile::create(out, 0o644)
                .and_then(|mut f| f.write_all(tls.authority().cert_pem().as_bytes()))
                .map_err(|e| Error::Usage(format!("--tls-ca-out {e}")))?;
            eprintln!("netchaos: TLS: the CA certificate is in {}", out.display());
        }
        Ok(Arc::new(tls))
    }
}

/// A TLS-layer fault (`tls_error`) acts only where netchaos terminates
/// TLS: without it (`wanted` false) the fault would do nothing, so it is
/// refused, with `how` to turn TLS on.
pub(super) fn check_tls_faults(plan: &crate::plan::Plan, wanted: bool, how: &str) -> Result<()> {
    let found = plan
        .rules
        .iter()
        .flat_map(|r| &r.faults)
        .find(|f| f.kind.layer() == crate::fault::Layer::Tls);
    if let Some(f) = found.filter(|_| !wanted) {
        return Err(Error::Usage(format!(
            "{} acts on {}: {how}",
            f.name(),
            crate::fault::Layer::Tls.acts_on()
        )));
    }
    Ok(())
}

/// [`prepare`] and [`Prepared::build`] at once (commands without a fork).
pub(super) fn setup(args: &TlsArgs, wanted: bool) -> Result<Option<Arc<Tls>>> {
    prepare(args, wanted)?.map(|p| p.build(None)).transpose()
}
