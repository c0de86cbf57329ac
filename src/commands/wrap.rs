//! What wrapping a command takes, whether in a namespace of its own
//! (`run`) or in netchaos's (`run --in-place`): its environment without
//! netchaos's secrets, signals passed on to it, and `--duration`'s window.

use std::ffi::CString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Arc;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

use crate::error::{Error, Result};
use crate::fault::FaultSpec;
use crate::plan::{Plan, Rule};

/// Variables that carry netchaos's own secrets: the command never sees them.
pub(super) const SECRET_ENV: &[&str] = &["NETCHAOS_API_TOKEN"];

/// netchaos's environment without its secrets, for the command.
pub(super) fn command_env() -> Vec<CString> {
    std::env::vars_os()
        .filter(|(k, _)| !SECRET_ENV.iter().any(|s| k == s))
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// `--duration`: says when the faults stop (a log line then, a line in the
/// summary at the end); the windows themselves end by
/// [`stop_faults_after`].
pub(super) fn announce_faults_end(
    events: &std::sync::Arc<crate::events::Events>,
    d: std::time::Duration,
) {
    events.faults_end_at(d);
    tokio::spawn(async move {
        tokio::time::sleep(d).await;
        tracing::info!(
            "--duration {}: the faults stop now; traffic goes on unharmed",
            crate::units::format_duration(d)
        );
    });
}

/// `--duration`: every fault's window ends at `d`.
pub(super) fn stop_faults_after(plan: &mut Plan, d: std::time::Duration) {
    plan.rules = plan
        .rules
        .iter()
        .map(|r| {
            let faults = r
                .faults
                .iter()
                .map(|f| {
                    Arc::new(FaultSpec {
                        active: f.active.clamp_end(d),
                        ..(**f).clone()
                    })
                })
                .collect();
            Arc::new(Rule {
                faults,
                ..(**r).clone()
            })
        })
        .collect();
}

/// Forwards SIGINT, SIGTERM and SIGHUP sent to netchaos to the command.
/// Signals the terminal generated (Ctrl-C) already reached the command,
/// which shares netchaos's process group, and are not sent twice.
///
/// The handlers are installed before the command starts (so a signal can
/// never find netchaos without them); one that arrives before the command's
/// pid is known is delivered as soon as it is.
pub(super) fn forward_signals() -> Result<std::sync::mpsc::Sender<Pid>> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Error::runtime(format!("cannot handle signals: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel::<Pid>();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut pid = None;
            for info in signals.forever() {
                if info.cause == Cause::Kernel {
                    continue;
                }
                if pid.is_none() {
                    pid = rx.recv().ok();
                }
                if let (Some(pid), Ok(sig)) = (pid, Signal::try_from(info.signal)) {
                    tracing::info!("forwarding {sig} to the command (pid {pid})");
                    let _ = kill(pid, sig);
                }
            }
        })
        .map_err(|e| Error::runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(tx)
}
