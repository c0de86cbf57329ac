//! A command's TLS set-up for the HTTP layer: the CA that signs (made for
//! the run, or the user's `--tls-ca`/`--tls-key`), the upstreams' extra
//! trust (`--upstream-ca`), and `--tls-ca-out`. Every file is read and
//! every certificate checked here, before anything starts.

use std::sync::Arc;

use crate::cli::TlsArgs;
use crate::error::{Error, Result};
use crate::tls::{Authority, Tls};

/// TLS for this run, when `wanted` (or when the user gave TLS flags that
/// only make sense with it).
pub(super) fn setup(args: &TlsArgs, wanted: bool) -> Result<Option<Arc<Tls>>> {
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
    let authority = match (&args.tls_ca, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let cert_pem = String::from_utf8(read("--tls-ca", cert)?).map_err(|_| {
                Error::Usage(format!("--tls-ca {}: not a PEM file", cert.display()))
            })?;
            let key_pem = String::from_utf8(read("--tls-key", key)?).map_err(|_| {
                Error::Usage(format!("--tls-key {}: not a PEM file", key.display()))
            })?;
            Authority::load(&cert_pem, &key_pem).map_err(|e| {
                Error::Usage(format!(
                    "--tls-ca {} / --tls-key {}: {e}",
                    cert.display(),
                    key.display()
                ))
            })?
        }
        _ => Authority::generate().map_err(Error::runtime)?,
    };
    let mut extra = Vec::new();
    for p in &args.upstream_ca {
        extra.push((
            format!("--upstream-ca {}", p.display()),
            read("--upstream-ca", p)?,
        ));
    }
    let tls = Tls::new(authority, &extra).map_err(|e| Error::Usage(e.to_string()))?;
    if let Some(out) = &args.tls_ca_out {
        std::fs::write(out, tls.authority().cert_pem())
            .map_err(|e| Error::Usage(format!("--tls-ca-out {}: {e}", out.display())))?;
        eprintln!("netchaos: TLS: the CA certificate is in {}", out.display());
    }
    Ok(Some(Arc::new(tls)))
}
