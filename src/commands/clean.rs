//! `netchaos clean`: remove what a netchaos killed with SIGKILL left in a
//! network namespace — its nftables table, its iptables gate chain, its
//! qdiscs and ifb devices. Idempotent.

use std::path::PathBuf;

use super::attach::{Named, namespace};
use crate::cli::CleanArgs;
use crate::error::{Error, Result};
use crate::intercept::attach::{self, Mode};
use crate::intercept::nsthread::NsThread;

pub(super) fn clean(args: &CleanArgs) -> Result<u8> {
    let (path, shown): (Option<PathBuf>, String) = if args.here {
        (None, "this network namespace".into())
    } else {
        let (p, _, _) = namespace(Named {
            pid: args.pid,
            netns: args.netns.as_deref(),
            container: args.container.as_deref(),
            pod: args.pod.as_deref(),
        })?;
        let shown = format!("the network namespace {}", p.display());
        (Some(p), shown)
    };
    let mode = if args.here {
        Mode::InPlace
    } else {
        Mode::Attach
    };
    attach::check_privileges("netchaos clean", mode).map_err(Error::runtime)?;
    let ns = NsThread::enter(path.as_deref()).map_err(Error::runtime)?;
    let done = attach::clean(&ns, args.force).map_err(Error::runtime)?;
    if done.removed.is_empty() && done.errors.is_empty() {
        println!("nothing of netchaos's in {shown}");
    }
    for r in &done.removed {
        println!("removed: {r}");
    }
    if !done.errors.is_empty() {
        return Err(Error::runtime(format!(
            "could not remove everything from {shown}: {}",
            done.errors.join("; ")
        )));
    }
    Ok(0)
}
