//! Files that fault settings name (`respond.file`, later `body_file`): where
//! they may be read from, and how, so that a setting can never make netchaos
//! read what its user could not choose, hang on a FIFO, or swallow a device.
//!
//! * A profile or `--fault` flag on the command line was chosen by the
//!   invoking user: any path, relative ones against the profile's folder.
//! * The control API is reachable by every local user, so it reads no file
//!   at all unless the operator named a folder at start (`--api-files DIR`);
//!   then only beneath it, resolved by the kernel (`openat2` with
//!   `RESOLVE_BENEATH`: no `..`, absolute path or symlink leads out).
//!
//! Either way only regular files are read (opened non-blocking, so a FIFO
//! cannot stall the open), and at most [`MAX_FILE`] bytes.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;

/// Largest file a fault may send.
pub const MAX_FILE: u64 = 1 << 20;

/// Where files named by settings may be read from.
#[derive(Clone, Debug, Default)]
pub enum FilePolicy {
    /// Anywhere the invoking user can read; relative paths against `base`.
    Anywhere { base: Option<PathBuf> },
    /// Nowhere: the control API without `--api-files`.
    #[default]
    Nowhere,
    /// Beneath an operator-chosen folder (the control API with `--api-files`).
    Beneath(Arc<ApiFiles>),
}

/// Why a file named by a setting is not read, in words fit for the
/// setting's error message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FileError(String);

/// The folder the control API may read files from, held open.
#[derive(Debug)]
pub struct ApiFiles {
    dir: OwnedFd,
    shown: PathBuf,
}

impl ApiFiles {
    /// Opens `dir` (which must be a directory) for the API's reads.
    pub fn open(dir: &Path) -> Result<ApiFiles, FileError> {
        let fail = |what: String| FileError(format!("--api-files {}: {what}", dir.display()));
        let f = File::open(dir).map_err(|e| fail(e.to_string()))?;
        let meta = f.metadata().map_err(|e| fail(e.to_string()))?;
        if !meta.is_dir() {
            return Err(fail("not a directory".into()));
        }
        Ok(ApiFiles {
            dir: OwnedFd::from(f),
            shown: dir.to_path_buf(),
        })
    }
}

impl FilePolicy {
    /// Reads the file a setting names, under this policy. Errors say what
    /// is wrong in words fit for the setting's error message.
    pub fn read(&self, path: &str) -> Result<(Vec<u8>, String), FileError> {
        match self {
            FilePolicy::Nowhere => Err(FileError(
                "the control API reads no files unless netchaos was started with --api-files DIR \
                 (then paths are relative to DIR); send the bytes with \"data\" instead"
                    .into(),
            )),
            FilePolicy::Anywhere { base } => {
                let full = match base {
                    Some(dir) if Path::new(path).is_relative() => dir.join(path),
                    _ => PathBuf::from(path),
                };
                let shown = full.display().to_string();
                let fd = nix::fcntl::open(&full, read_flags(), Mode::empty())
                    .map_err(|e| FileError(format!("cannot read file {shown}: {}", e.desc())))?;
                read_regular(fd, &shown).map(|b| (b, shown))
            }
            FilePolicy::Beneath(root) => {
                let shown = root.shown.join(path).display().to_string();
                let how = OpenHow::new().flags(read_flags()).resolve(
                    ResolveFlag::RESOLVE_BENEATH
                        | ResolveFlag::RESOLVE_NO_MAGICLINKS
                        | ResolveFlag::RESOLVE_NO_XDEV,
                );
                let fd = openat2(root.dir.as_fd(), path, how).map_err(|e| FileError(match e {
                    nix::errno::Errno::EXDEV => format!(
                        "file {path:?} is outside the --api-files folder {} (paths are resolved beneath it; \
                         no \"..\", absolute path or symlink may lead out)",
                        root.shown.display()
                    ),
                    nix::errno::Errno::ENOSYS => "this kernel lacks openat2 (Linux 5.6), which the control API \
                         needs to read files safely; send the bytes with \"data\" instead"
                        .to_string(),
                    e => format!("cannot read file {shown}: {}", e.desc()),
                }))?;
                read_regular(fd, &shown).map(|b| (b, shown))
            }
        }
    }
}

/// Read-only, never blocking on open (FIFOs), never a controlling tty.
fn read_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY
}

/// Reads an opened file if it is a regular one of at most [`MAX_FILE`]
/// bytes (counting what is read, as the file may grow meanwhile).
fn read_regular(fd: OwnedFd, shown: &str) -> Result<Vec<u8>, FileError> {
    let file = File::from(fd);
    let unreadable = |e: std::io::Error| FileError(format!("cannot read file {shown}: {e}"));
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        let what = file_kind(&meta);
        return Err(FileError(format!(
            "{shown} is {what}, not a regular file; only regular files are read"
        )));
    }
    let too_big = || {
        FileError(format!(
            "file {shown} is larger than {} (the most a fault may send)",
            crate::units::format_size(MAX_FILE)
        ))
    };
    if meta.len() > MAX_FILE {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_FILE + 1)
        .read_to_end(&mut out)
        .map_err(unreadable)?;
    if out.len() as u64 > MAX_FILE {
        return Err(too_big());
    }
    Ok(out)
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anywhere_reads_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("reply.txt");
        std::fs::write(&p, b"hello").unwrap();
        let any = FilePolicy::Anywhere {
            base: Some(dir.path().to_path_buf()),
        };
        assert_eq!(any.read("reply.txt").unwrap().0, b"hello");
        let e = any.read("/dev/zero").unwrap_err().to_string();
        assert!(e.contains("is a device, not a regular file"), "{e}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = any.read(fifo.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let e = any
            .read(dir.path().to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
    }

    #[test]
    fn sizes_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big"), vec![0u8; MAX_FILE as usize + 1]).unwrap();
        std::fs::write(dir.path().join("ok"), vec![0u8; MAX_FILE as usize]).unwrap();
        let any = FilePolicy::Anywhere {
            base: Some(dir.path().to_path_buf()),
        };
        let e = any.read("big").unwrap_err().to_string();
        assert!(e.contains("larger than 1MiB"), "{e}");
        assert_eq!(any.read("ok").unwrap().0.len(), MAX_FILE as usize);
    }

    #[test]
    fn beneath_never_leads_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok.txt"), b"fine").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("ok.txt", dir.path().join("inner")).unwrap();
        let api = FilePolicy::Beneath(Arc::new(ApiFiles::open(dir.path()).unwrap()));
        assert_eq!(api.read("ok.txt").unwrap().0, b"fine");
        assert_eq!(api.read("inner").unwrap().0, b"fine", "a symlink inside");
        for bad in ["/etc/passwd", "../../../../etc/passwd", "link"] {
            let e = api.read(bad).unwrap_err().to_string();
            assert!(e.contains("outside the --api-files folder"), "{bad}: {e}");
        }
        let e = FilePolicy::Nowhere.read("ok.txt").unwrap_err().to_string();
        assert!(e.contains("reads no files unless"), "{e}");
    }
}
