//! The open-files limit: netchaos lifts its own soft limit to the hard one
//! (every relayed connection costs two descriptors), and gives the
//! commands it runs the limit they would have had without it — a soft
//! limit of 1,024 is what `select()`-based code and programs that close
//! every descriptor up to the limit before they exec rely on.

use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The soft limit before [`raise`], if it raised it.
static STARTED_WITH: AtomicU64 = AtomicU64::new(NOT_RAISED);
const NOT_RAISED: u64 = u64::MAX;

/// Lifts the soft open-files limit to the hard limit.
pub(crate) fn raise() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                Ok(()) => STARTED_WITH.store(soft, Ordering::Relaxed),
                Err(_) => tracing::debug!("could not raise RLIMIT_NOFILE from {soft} to {hard}"),
            }
        }
    }
}

/// Gives the soft limit netchaos started with back, in a command about to
/// be run (between fork and exec: two system calls, no allocation).
/// Lowering a soft limit is always allowed.
pub(crate) fn give_back() -> std::io::Result<()> {
    let soft = STARTED_WITH.load(Ordering::Relaxed);
    if soft == NOT_RAISED {
        return Ok(());
    }
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, soft.min(hard), hard)?;
    Ok(())
}
