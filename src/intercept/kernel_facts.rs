//! What this boot's kernel was found to lack, remembered between runs so
//! that each `netchaos run` does not pay to find it again: a failed
//! `nft_queue` rule costs 10-20 ms (the kernel tries to load the module),
//! a third of `run`'s start-up. Kept per boot (`boot_id`) in
//! `/run/netchaos` (root) or `$XDG_RUNTIME_DIR/netchaos`; a fact that is
//! wrong or planted only picks the iptables path, which is tried first and
//! falls back to the native one.

use std::path::PathBuf;

/// The kernel has no native nftables `queue` expression (`nft_queue`).
pub(crate) const NO_NFT_QUEUE: &str = "no-nft-queue";

/// Where a fact is kept: one file per fact and boot.
fn places(fact: &str) -> Vec<PathBuf> {
    let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return Vec::new();
    };
    let name = format!("{fact}.{}", boot.trim());
    let mut dirs = vec![PathBuf::from("/run/netchaos")];
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        dirs.push(PathBuf::from(d).join("netchaos"));
    }
    dirs.into_iter().map(|d| d.join(&name)).collect()
}

/// Whether an earlier run of this boot found `fact`.
pub(crate) fn known(fact: &str) -> bool {
    places(fact).iter().any(|p| p.exists())
}

/// Remembers `fact` for this boot where it can (nowhere is fine).
pub(crate) fn remember(fact: &str) {
    for p in places(fact) {
        let made = p
            .parent()
            .is_some_and(|d| std::fs::create_dir_all(d).is_ok())
            && std::fs::write(&p, "").is_ok();
        if made {
            return;
        }
    }
}
