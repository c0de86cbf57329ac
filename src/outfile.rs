//! The files netchaos writes, which a root-run netchaos must not let
//! another local user aim at a file of root's.
//!
//! * Files of its own in a shared directory (`$TMPDIR`): a fresh private
//!   directory (`mkdtemp`, 0700) or a fresh file (`O_CREAT|O_EXCL`, 0600),
//!   with a random name, through `tempfile` ([`private_dir`],
//!   [`private_file`]).
//! * Files the user names (`--events`, `--report`, `report -o`,
//!   `--tls-ca-out`): [`create`] walks the path one component at a time
//!   (`openat` with `O_NOFOLLOW`) and follows a symbolic link only when it
//!   belongs to the user netchaos runs as (its effective uid) or to root.
//!   A link anyone else owns is refused, wherever it is — in the path's
//!   last component or in a directory on the way — as `sudoedit` refuses
//!   links and as `fs.protected_symlinks` refuses other users' links in a
//!   sticky world-writable directory (its exception for a link owned by
//!   the directory's owner is not taken: root writing through a link that
//!   a user made in that user's own directory is the same attack).
//!   Procfs's own links (`/dev/stdout`, `/proc/self/fd/N`) are the
//!   kernel's and are followed. An existing file is written in place (its
//!   mode kept), unless it belongs to another user and sits in a sticky
//!   world-writable directory (`fs.protected_regular`): then it is refused
//!   too. A new file gets `mode`. Each step holds the directory open, and
//!   the last open never follows a link, so a link planted between the
//!   check and the open is found, not followed.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};

/// Links followed in one path, at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Whether a link owned by `uid` may be followed: it is this user's, or
/// root's.
fn trusted_owner(uid: u32) -> bool {
    uid == nix::unistd::geteuid().as_raw() || uid == 0
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn on_procfs(fd: impl AsFd) -> bool {
    nix::sys::statfs::fstatfs(fd)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

fn refused(path: &Path, what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{}: {what}", path.display()),
    )
}

fn err(path: &Path, e: Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Creates (or truncates) the file the user named at `path` for writing,
/// new files with `mode`, following only links this user or root owns
/// (see the module's text).
pub(crate) fn create(path: &Path, mode: u32) -> io::Result<File> {
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an empty file name",
        ));
    }
    // What is left to walk, front first.
    let mut todo: Vec<OsString> = Vec::new();
    let mut dir = start(path, &mut todo).map_err(|e| err(path, e))?;
    let mut links = 0;
    // The last component: a name in `dir`, still to open.
    loop {
        let Some(name) = todo.pop() else {
            return Err(refused(path, "names a directory, not a file".into()));
        };
        match name.as_bytes() {
            b"." => continue,
            b".." => {
                dir = openat(&dir, "..", dir_flags(), Mode::empty()).map_err(|e| err(path, e))?;
                continue;
            }
            _ => {}
        }
        let last = todo.is_empty();
        let found = openat(
            &dir,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        let fd = match found {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if last => match create_new(&dir, &name, mode) {
                Ok(f) => return Ok(f),
                // Made meanwhile: look again.
                Err(Errno::EEXIST) => {
                    todo.push(name);
                    continue;
                }
                Err(e) => return Err(err(path, e)),
            },
            Err(e) => return Err(err(path, e)),
        };
        let st = fstat(&fd).map_err(|e| err(path, e))?;
        if kind(&st) == SFlag::S_IFLNK {
            if on_procfs(&dir) {
                // The kernel's own links (/proc/self/fd/1 is a pipe's):
                // followed by the kernel, never by their text.
                if last {
                    return open_existing(&dir, &name, path, OFlag::empty());
                }
                dir = openat(&dir, name.as_os_str(), dir_flags(), Mode::empty())
                    .map_err(|e| err(path, e))?;
                continue;
            }
            if !trusted_owner(st.st_uid) {
                let at = if last {
                    String::new()
                } else {
                    format!(" (at {name:?})")
                };
                return Err(refused(
                    path,
                    format!(
                        "a symbolic link{at} owned by uid {}, neither this user nor root: netchaos does not follow another user's link (remove it, or name another file)",
                        st.st_uid
                    ),
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(err(path, Errno::ELOOP));
            }
            let target = readlinkat(&fd, "").map_err(|e| err(path, e))?;
            let target = PathBuf::from(target);
            if target.has_root() {
                dir =
                    openat(AT_FDCWD, "/", dir_flags(), Mode::empty()).map_err(|e| err(path, e))?;
            }
            push_components(&target, &mut todo);
            continue;
        }
        if last {
            if kind(&st) == SFlag::S_IFDIR {
                return Err(refused(path, "is a directory".into()));
            }
            return open_existing(&dir, &name, path, OFlag::O_NOFOLLOW);
        }
        if kind(&st) != SFlag::S_IFDIR {
            return Err(err(path, Errno::ENOTDIR));
        }
        dir = openat(
            &dir,
            name.as_os_str(),
            dir_flags() | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| err(path, e))?;
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// The directory a walk of `path` starts from (`/` or the working
/// directory), with `path`'s components queued in `todo`.
fn start(path: &Path, todo: &mut Vec<OsString>) -> nix::Result<OwnedFd> {
    push_components(path, todo);
    let from = if path.has_root() { "/" } else { "." };
    openat(AT_FDCWD, from, dir_flags(), Mode::empty())
}

/// Queues `path`'s components in front of what is left (`todo` is popped
/// from its end).
fn push_components(path: &Path, todo: &mut Vec<OsString>) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir => Some(OsString::from(".")),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

fn create_new(dir: &OwnedFd, name: &OsStr, mode: u32) -> nix::Result<File> {
    openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode),
    )
    .map(File::from)
}

/// Opens an existing file for writing (`O_NOFOLLOW` unless the kernel's
/// link is meant), truncating a regular one; a FIFO without a reader is
/// refused rather than waited for.
fn open_existing(dir: &OwnedFd, name: &OsStr, path: &Path, extra: OFlag) -> io::Result<File> {
    let fd = openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | extra,
        Mode::empty(),
    )
    .map_err(|e| match e {
        // A link was planted after the look: not followed.
        Errno::ELOOP => refused(path, "became a symbolic link while being opened".into()),
        Errno::ENXIO => refused(path, "a FIFO that nothing reads".into()),
        e => err(path, e),
    })?;
    let st = fstat(&fd).map_err(|e| err(path, e))?;
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::F_GETFL).map_err(|e| err(path, e))?;
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::F_SETFL(OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK),
    )
    .map_err(|e| err(path, e))?;
    let file = File::from(fd);
    if kind(&st) == SFlag::S_IFREG {
        if st.st_uid != nix::unistd::geteuid().as_raw() && shared(dir) {
            return Err(refused(
                path,
                format!(
                    "a file of uid {} in a shared (sticky, world-writable) directory: netchaos does not write into another user's file there",
                    st.st_uid
                ),
            ));
        }
        file.set_len(0)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    }
    Ok(file)
}

/// A sticky directory anyone may write to, as `/tmp`.
fn shared(dir: &OwnedFd) -> bool {
    fstat(dir).is_ok_and(|d| d.st_mode & 0o1002 == 0o1002)
}

/// A fresh private directory (0700, a random name starting with
/// `prefix`) in the temporary directory, removed when dropped.
pub(crate) fn private_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix(prefix).tempdir()
}

/// A fresh private file (0600, `O_EXCL`, a random name: `prefix`, random
/// characters, `suffix`) in the temporary directory, removed when its
/// [`tempfile::TempPath`] is dropped (or kept with `keep`).
pub(crate) fn private_file(prefix: &str, suffix: &str) -> io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix(prefix)
        .suffix(suffix)
        .tempfile()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

    #[test]
    fn new_files_get_the_mode_and_existing_ones_are_truncated() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.jsonl");
        create(&p, 0o600).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        create(&p, 0o600).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(
            (m.len(), m.mode() & 0o777),
            (0, 0o640),
            "emptied, mode kept"
        );
        assert!(create(d.path(), 0o600).is_err(), "a directory");
        assert!(create(&d.path().join("no/such"), 0o600).is_err());
    }

    #[test]
    fn this_users_links_are_followed_relative_absolute_and_chained() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let target = sub.join("t");
        symlink("sub/t", d.path().join("rel")).unwrap();
        symlink(&target, d.path().join("abs")).unwrap();
        symlink("rel", d.path().join("chain")).unwrap();
        symlink(d.path(), sub.join("up")).unwrap();
        for name in ["rel", "abs", "chain"] {
            std::fs::remove_file(&target).ok();
            use std::io::Write;
            create(&d.path().join(name), 0o600)
                .unwrap()
                .write_all(name.as_bytes())
                .unwrap();
            assert_eq!(std::fs::read_to_string(&target).unwrap(), name);
        }
        // A link among the directories, and `..`.
        create(&sub.join("up/sub/../sub/x"), 0o600).unwrap();
        assert!(sub.join("x").exists());
        // A loop.
        symlink("loop", d.path().join("loop")).unwrap();
        assert!(create(&d.path().join("loop"), 0o600).is_err());
        // The kernel's own links.
        create(Path::new("/dev/null"), 0o600).unwrap();
        create(Path::new("/proc/self/fd/2"), 0o600).unwrap();
    }

    /// Another user's link is refused, in the last component or on the
    /// way; the file it points to is untouched. (As root: it chowns.)
    #[test]
    fn another_users_link_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "secret").unwrap();
        let link = d.path().join("link");
        symlink(&victim, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = create(&link, 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        let dlink = d.path().join("dlink");
        symlink(d.path(), &dlink).unwrap();
        std::os::unix::fs::lchown(&dlink, Some(65534), Some(65534)).unwrap();
        assert!(create(&dlink.join("victim"), 0o600).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        // Another user's plain file in a sticky world-writable directory.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::os::unix::fs::lchown(&victim, Some(65534), Some(65534)).unwrap();
        assert!(create(&victim, 0o600).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    }
}
