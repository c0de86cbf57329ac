//! netchaos's directories for its few small files: `/run/netchaos` (the
//! claims `attach` holds on namespaces, what the kernel was found to lack)
//! and, rootless, `$XDG_RUNTIME_DIR/netchaos`. A directory is used only
//! when it is this process's own: owned by its user (as this user
//! namespace sees it) and writable by no one else, so that nobody can
//! plant a file or a link in it for a root netchaos to follow.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

/// Root's directory.
pub(crate) const RUN_DIR: &str = "/run/netchaos";

/// `dir`, made (mode 0700) when missing, if it is ours.
pub(crate) fn ours(dir: &Path) -> bool {
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    trusted(dir)
}

/// Whether `dir` is a directory (not a link) owned by this process's user
/// and writable by no one else.
pub(crate) fn trusted(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o022 == 0
    })
}

/// Whether `file` is a regular file (not a link) owned by this process's
/// user, in a directory that is ours.
pub(crate) fn trusted_file(file: &Path) -> bool {
    file.parent().is_some_and(trusted)
        && std::fs::symlink_metadata(file)
            .is_ok_and(|m| m.is_file() && m.uid() == nix::unistd::geteuid().as_raw())
}

/// Opening flags that never follow a link planted at the path itself.
pub(crate) const NO_FOLLOW: i32 = libc::O_NOFOLLOW;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_directory_and_plain_files_are_trusted() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("netchaos");
        assert!(ours(&dir), "made, 0700, ours");
        let file = dir.join("fact");
        std::fs::write(&file, "").unwrap();
        assert!(trusted_file(&file));
        // A link planted where a file is expected.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(!trusted_file(&link));
        // A directory others may write to.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!trusted(&dir));
        assert!(!trusted_file(&file));
        // A link to a directory.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let dir_link = top.path().join("elsewhere");
        std::os::unix::fs::symlink(&dir, &dir_link).unwrap();
        assert!(!trusted(&dir_link));
    }
}
