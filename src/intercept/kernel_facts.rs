//! What this boot's kernel was found to lack, remembered between runs so
//! that each `netchaos run` does not pay to find it again: a failed
//! `nft_queue` rule costs 10-20 ms (the kernel tries to load the module),
//! a third of `run`'s start-up. Kept per boot (`boot_id`) in
//! `/run/netchaos` (root) or `$XDG_RUNTIME_DIR/netchaos` (rootless), and
//! trusted only there when the directory and the file are this user's
//! ([`run_dir`]); a stale fact only picks the iptables path first, and
//! the native one is still tried when that fails.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::run_dir;

/// The kernel has no native nftables `queue` expression (`nft_queue`).
pub(crate) const NO_NFT_QUEUE: &str = "no-nft-queue";

/// Where a fact may be kept: one file per fact and boot.
fn places(fact: &str) -> Vec<PathBuf> {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return Vec::new();
    };
    let name = format!("{fact}.{}", boot.trim());
    let mut dirs = vec![PathBuf::from(run_dir::RUN_DIR)];
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        dirs.push(PathBuf::from(d).join("netchaos"));
    }
    dirs.into_iter().map(|d| d.join(&name)).collect()
}

/// Whether an earlier run of this boot found `fact`.
pub(crate) fn known(fact: &str) -> bool {
    places(fact).iter().any(|p| run_dir::trusted_file(p))
}

/// Remembers `fact` for this boot where it can (nowhere is fine).
pub(crate) fn remember(fact: &str) {
    for p in places(fact) {
        if !p.parent().is_some_and(run_dir::ours) {
            continue;
        }
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(run_dir::NO_FOLLOW)
            .open(&p);
        if made.is_ok() || run_dir::trusted_file(&p) {
            return;
        }
    }
}
