//! A dedicated OS thread that lives in another network namespace and runs
//! work there (`setns` changes only the calling thread). Sockets it creates
//! stay in that namespace wherever they are used afterwards, and commands it
//! starts (`nft`, `iptables-restore`) run there too.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::mpsc;

use nix::sched::{CloneFlags, setns};

use super::error::InterceptError;

type Job = Box<dyn FnOnce() + Send>;

/// A thread inside a network namespace.
pub(crate) struct NsThread {
    jobs: mpsc::Sender<Job>,
}

impl NsThread {
    /// A thread that enters the namespace at `path` (`/proc/PID/ns/net`,
    /// `/run/netns/NAME`); `None` stays in netchaos's own namespace.
    pub(crate) fn enter(path: Option<&Path>) -> Result<NsThread, InterceptError> {
        let file = match path {
            Some(p) => {
                let f = std::fs::File::open(p).map_err(InterceptError::sys(format!(
                    "cannot open the network namespace {}",
                    p.display()
                )))?;
                check_netns(&f, p)?;
                Some(f)
            }
            None => None,
        };
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), InterceptError>>();
        let shown = path.map(|p| p.display().to_string());
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || {
                if let Some(f) = &file {
                    if let Err(e) = setns(f.as_fd(), CloneFlags::CLONE_NEWNET) {
                        let _ = ready_tx.send(Err(InterceptError::Unavailable(format!(
                            "cannot enter the network namespace {}: {} (entering another namespace needs CAP_SYS_ADMIN)",
                            shown.unwrap_or_default(),
                            e.desc()
                        ))));
                        return;
                    }
                }
                let _ = ready_tx.send(Ok(()));
                drop(file);
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .map_err(InterceptError::sys("cannot start the namespace thread"))?;
        ready_rx.recv().map_err(|_| ended())??;
        Ok(NsThread { jobs })
    }

    /// Runs `f` inside the namespace and returns its result (blocks).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, InterceptError> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| ended())?;
        rx.recv().map_err(|_| ended())
    }
}

/// Refuses a file that is not a network namespace (a typo'd path, or
/// another kind of namespace) before trying to enter it.
fn ended() -> InterceptError {
    InterceptError::Agent("the namespace thread ended".into())
}

pub(crate) fn check_netns(f: &std::fs::File, path: &Path) -> Result<(), InterceptError> {
    use std::os::fd::AsRawFd;
    // NS_GET_NSTYPE = _IO(0xb7, 0x3), Linux 4.11.
    const NS_GET_NSTYPE: libc::Ioctl = 0xb703;
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the type; the
    // descriptor is open for the duration of the call.
    let t = unsafe { libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE) };
    if t == libc::CLONE_NEWNET {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    Err(InterceptError::Unavailable(match (t, err.raw_os_error()) {
        (-1, Some(libc::ENOTTY | libc::EINVAL)) => format!(
            "{} is not a namespace file (expected a network namespace, like /run/netns/NAME or /proc/PID/ns/net)",
            path.display()
        ),
        (-1, _) => format!("cannot check the namespace {}: {err}", path.display()),
        _ => format!(
            "{} is a namespace, but not a network namespace (expected one like /proc/PID/ns/net)",
            path.display()
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_work_and_returns_results() {
        let t = NsThread::enter(None).unwrap();
        assert_eq!(t.run(|| 6 * 7).unwrap(), 42);
        let here = std::fs::read_link("/proc/thread-self/ns/net").ok();
        let there = t
            .run(|| std::fs::read_link("/proc/thread-self/ns/net").ok())
            .unwrap();
        assert_eq!(here, there, "no path: netchaos's own namespace");
        assert!(NsThread::enter(Some(Path::new("/nonexistent/ns"))).is_err());
        let e = NsThread::enter(Some(Path::new("/etc/hosts")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("is not a namespace file"), "{e}");
        let e = NsThread::enter(Some(Path::new("/proc/self/ns/uts")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a network namespace"), "{e}");
    }
}
