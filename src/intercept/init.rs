//! The first process of the wrapped command's PID namespace: what keeps
//! the command inside netchaos's boundary and ties its life to netchaos's.
//!
//! The agent forks it into a new PID namespace, so that
//!
//! * nothing the command starts outlives netchaos: this process dies with
//!   the agent (which dies with netchaos), and when the first process of a
//!   PID namespace ends the kernel kills every other one in it — a
//!   grandchild, a daemon, a process that ignores SIGTERM;
//! * the command cannot name, signal or trace netchaos, its agent, or any
//!   process outside (it sees a fresh `/proc` of its own namespace).
//!
//! It then moves into a cgroup (and cgroup namespace) of its own below
//! netchaos's ([`super::cgroup`]), mounts that `/proc` in a mount namespace
//! of its own, makes `/sys`, `/proc/sys` and the other kernel files a uid 0
//! could write read-only there (and covers `/dev/kmsg`, Docker's masked
//! paths and the API's token file), starts the command — as root, in a user
//! namespace of its own that maps every uid to itself, so it stays uid 0
//! for files but holds no capability over the network, mount or PID
//! namespaces netchaos made — and, like any init, forwards signals, reaps
//! orphans, and reports the command's exit status to the agent.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

use super::error::InterceptError;
use super::privilege::{self, Containment};

/// Signals passed on to the command when something other than the
/// terminal sends them (the terminal's reach the command directly).
const FORWARDED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// What the PID namespace's first process needs.
pub(crate) struct InitConfig<'a> {
    pub argv: &'a [CString],
    pub env: &'a [CString],
    pub rootless: bool,
    pub containment: Containment,
    /// Files to hide from the command ([`super::agent::AgentConfig`]).
    pub hidden: &'a [std::path::PathBuf],
    /// The agent's pid: names the command's cgroups ([`super::cgroup`]).
    pub agent: i32,
    /// Where the command's raw wait status goes, for the agent.
    pub status: OwnedFd,
    /// Closes (hangs up) when the agent is gone.
    pub agent_alive: OwnedFd,
}

/// The whole life of the namespace's first process; never returns.
pub(crate) fn main(cfg: InitConfig<'_>) -> ! {
    // Die with the agent. It may already have died between the fork and
    // this call: then its end of `agent_alive` is closed.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if agent_gone(&cfg.agent_alive) {
        std::process::exit(1);
    }
    // (Before `/sys` turns read-only.)
    if cfg.containment == Containment::Full {
        isolate_cgroups(cfg.agent);
    }
    if let Err(e) = isolate_mounts(cfg.containment, cfg.hidden) {
        fail(&e.to_string());
    }
    let signals = match catch_signals() {
        Ok(s) => s,
        Err(e) => fail(&format!("cannot handle signals: {e}")),
    };
    let own_userns = cfg.containment == Containment::Full && !cfg.rootless;
    let (to_child, from_init) = sync_pipe();
    let (to_init, from_child) = sync_pipe();
    // SAFETY: this process is single-threaded (forked from the
    // single-threaded agent), so the child may run ordinary code.
    let child = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop((to_child, from_child, signals));
            exec_command(&cfg, own_userns, from_init, to_init)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => fail(&format!("cannot start the command: fork: {e}")),
    };
    drop((from_init, to_init));
    if own_userns {
        if let Err(e) = map_all_ids(child, from_child, to_child) {
            let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
            fail(&e.to_string());
        }
    }
    supervise(child, &signals, cfg.status)
}

fn agent_gone(alive: &OwnedFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

fn fail(message: &str) -> ! {
    eprintln!("netchaos: {message}. The command was not run.");
    std::process::exit(126);
}

/// A mount namespace of its own, with a `/proc` of the new PID namespace
/// and (contained) a read-only `/proc/sys`, so the command can neither
/// see processes outside nor change the network namespace's sysctls.
fn isolate_mounts(
    containment: Containment,
    hidden: &[std::path::PathBuf],
) -> Result<(), InterceptError> {
    let sys = InterceptError::sys;
    unshare(CloneFlags::CLONE_NEWNS)
        .map_err(sys("cannot make a mount namespace for the command"))?;
    let none: Option<&str> = None;
    // (The agent made its mounts private; this keeps it so for ours.)
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(sys("cannot make the command's mounts private"))?;
    let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), proc_flags, none)
        .map_err(sys("cannot mount a /proc for the command's PID namespace"))?;
    if containment != Containment::Full {
        return Ok(());
    }
    for path in READ_ONLY {
        match read_only(path) {
            Err(Errno::ENOENT) => {}
            r => r.map_err(InterceptError::sys(format!(
                "cannot make {path} read-only for the command"
            )))?,
        }
    }
    // Any other mount of a kernel file system (a container's `/host/proc`,
    // a second sysfs or cgroup mount) would reach the same files.
    for path in kernel_mounts() {
        match read_only(&path) {
            Err(Errno::ENOENT | Errno::EINVAL) => {}
            r => r.map_err(InterceptError::sys(format!(
                "cannot make {path} read-only for the command"
            )))?,
        }
    }
    for path in MASKED {
        match mask(std::path::Path::new(path)) {
            Err(Errno::ENOENT) => {}
            r => r.map_err(InterceptError::sys(format!(
                "cannot hide {path} from the command"
            )))?,
        }
    }
    for path in hidden {
        mask(path).map_err(InterceptError::sys(format!(
            "cannot hide {} from the command",
            path.display()
        )))?;
    }
    Ok(())
}

/// What a contained command may not write although, uid 0 for files, its
/// permissions would let it (Docker's read-only paths, and all of `/sys`):
/// sysctls, the SysRq trigger, cgroups (netchaos's own among them: a
/// frozen relay), device and power attributes.
const READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
    "/sys",
];

/// What a contained command may not open at all (Docker's masked paths,
/// and the kernel log, which uid 0 may write into).
const MASKED: &[&str] = &[
    "/dev/kmsg",
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/sys/firmware",
];

/// Mount points of kernel file systems other than the command's own
/// `/proc` (and what is already below the fixed paths).
fn kernel_mounts() -> Vec<String> {
    const KINDS: &[&str] = &[
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "securityfs",
        "debugfs",
        "tracefs",
        "configfs",
        "efivarfs",
        "pstore",
        "bpf",
    ];
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let covered = |p: &str| {
        p == "/proc"
            || READ_ONLY
                .iter()
                .any(|r| p == *r || p.starts_with(&format!("{r}/")))
    };
    mounts
        .lines()
        .filter_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            let fstype = after.split(' ').next()?;
            let at = super::cgroup::unescape(before.split(' ').nth(4)?);
            (KINDS.contains(&fstype) && !covered(&at)).then_some(at)
        })
        .collect()
}

/// Makes `path` and every mount below it read-only in this mount
/// namespace (a mount made in a more privileged user namespace stays so:
/// the command cannot undo it).
fn read_only(path: &str) -> nix::Result<()> {
    let none: Option<&str> = None;
    // A file (or a directory that is not a mount point) becomes one.
    mount(
        Some(path),
        path,
        none,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        none,
    )?;
    // mount_setattr(2) (Linux 5.12) sets the flag on the whole tree and
    // keeps every other; before it, each mount is remounted with its own.
    match set_read_only_tree(path) {
        Err(Errno::ENOSYS) => {}
        r => return r,
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let under = |p: &str| p == path || p.starts_with(&format!("{}/", path.trim_end_matches('/')));
    for at in mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(super::cgroup::unescape)
        .filter(|p| under(p))
    {
        let at = at.as_str();
        let vfs = nix::sys::statvfs::statvfs(at)?;
        let keep = [
            (nix::sys::statvfs::FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (nix::sys::statvfs::FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (nix::sys::statvfs::FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
            (nix::sys::statvfs::FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
            (
                nix::sys::statvfs::FsFlags::ST_NODIRATIME,
                MsFlags::MS_NODIRATIME,
            ),
            // Linux's ST_RELATIME (4096): nix names it for glibc only, and
            // the static (musl) build needs it too.
            (
                nix::sys::statvfs::FsFlags::from_bits_retain(4096),
                MsFlags::MS_RELATIME,
            ),
        ]
        .into_iter()
        .filter(|(f, _)| vfs.flags().contains(*f))
        .fold(MsFlags::empty(), |acc, (_, m)| acc | m);
        let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | keep;
        mount(none, at, none, ro, none)?;
    }
    Ok(())
}

/// `mount_setattr(path, AT_RECURSIVE, {attr_set: MOUNT_ATTR_RDONLY})`.
fn set_read_only_tree(path: &str) -> nix::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let path = std::ffi::CString::new(path).map_err(|_| Errno::EINVAL)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a plain system call with a valid C string and a pointer to
    // an initialised struct of the size passed; the kernel only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(r).map(drop)
}

/// Covers `path`: a file with an empty, read-only one (`/dev/null`), a
/// directory with an empty read-only tmpfs.
fn mask(path: &std::path::Path) -> nix::Result<()> {
    let none: Option<&str> = None;
    let meta = std::fs::metadata(path)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::ENOENT)))?;
    if meta.is_dir() {
        let flags =
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            flags,
            Some("size=0,mode=555"),
        )
    } else {
        mount(Some("/dev/null"), path, none, MsFlags::MS_BIND, none)
    }
}

/// A cgroup of the command's own, then a cgroup namespace rooted there: a
/// cgroup file system the command mounts afresh shows it nothing of
/// netchaos's ([`super::cgroup`]). Where the cgroups cannot be made (no
/// permission, rootless), the namespace is made all the same; `/sys` is
/// read-only either way.
fn isolate_cgroups(agent: i32) {
    if !super::cgroup::enter_own(agent) && nix::unistd::geteuid().is_root() {
        // (Its /sys is read-only all the same; a hierarchy it mounted
        // afresh would be rooted at netchaos's own cgroup.)
        eprintln!(
            "netchaos: warning: the command could not be given a cgroup of its own below netchaos's"
        );
    }
    if let Err(e) = unshare(CloneFlags::CLONE_NEWCGROUP) {
        fail(&format!(
            "cannot make a cgroup namespace for the command: {e}"
        ));
    }
}

/// Signals arrive on a descriptor. Each has a (do-nothing) handler: the
/// first process of a PID namespace never receives a signal left at its
/// default action, blocked or not.
fn catch_signals() -> nix::Result<SignalFd> {
    extern "C" fn nothing(_: libc::c_int) {}
    let mut set = SigSet::empty();
    for sig in FORWARDED.iter().chain(&[Signal::SIGCHLD]) {
        set.add(*sig);
        let action = nix::sys::signal::SigAction::new(
            SigHandler::Handler(nothing),
            nix::sys::signal::SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        // SAFETY: the handler does nothing (it is never even run: the
        // signals are blocked and read from the descriptor).
        unsafe { nix::sys::signal::sigaction(*sig, &action) }?;
    }
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC)
}

fn sync_pipe() -> (OwnedFd, OwnedFd) {
    match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok((r, w)) => (w, r),
        Err(e) => fail(&format!("pipe: {e}")),
    }
}

/// Gives the command's new user namespace the identity map (every uid and
/// gid to itself), so that it is root for files and nothing else.
fn map_all_ids(child: Pid, from_child: OwnedFd, to_child: OwnedFd) -> Result<(), InterceptError> {
    let mut byte = [0u8; 1];
    std::fs::File::from(from_child)
        .read_exact(&mut byte)
        .map_err(InterceptError::sys(
            "the command could not make its user namespace",
        ))?;
    for map in ["uid_map", "gid_map"] {
        let path = format!("/proc/{child}/{map}");
        std::fs::write(&path, "0 0 4294967295\n")
            .map_err(InterceptError::sys(format!("cannot write {path}")))?;
    }
    std::fs::File::from(to_child)
        .write_all(b"m")
        .map_err(InterceptError::sys("cannot start the command"))
}

fn exec_command(cfg: &InitConfig<'_>, own_userns: bool, from_init: OwnedFd, to_init: OwnedFd) -> ! {
    if own_userns {
        if let Err(e) = unshare(CloneFlags::CLONE_NEWUSER) {
            fail(&format!(
                "cannot make a user namespace for the command: {} (--privileged-command runs it without one)",
                e.desc()
            ));
        }
        let mut byte = [0u8; 1];
        let synced = std::fs::File::from(to_init).write_all(b"u").is_ok()
            && std::fs::File::from(from_init).read_exact(&mut byte).is_ok();
        if !synced {
            std::process::exit(126);
        }
    } else {
        drop((from_init, to_init));
    }
    if let Err(e) = privilege::drop_for_command(cfg.rootless) {
        fail(&e.to_string());
    }
    if let Err(e) = default_signals() {
        fail(&format!("cannot reset signal handling: {e}"));
    }
    if let Err(e) = crate::nofile::give_back() {
        fail(&format!(
            "cannot give the command its open-files limit back: {e}"
        ));
    }
    let err = nix::unistd::execvpe(&cfg.argv[0], cfg.argv, cfg.env).unwrap_err();
    let name = cfg.argv[0].to_string_lossy();
    eprintln!("netchaos: cannot run {name}: {}", err.desc());
    // As shells do: 127 for "not found", 126 for "found but not runnable".
    std::process::exit(if err == Errno::ENOENT { 127 } else { 126 });
}

/// Every signal back to its default action and unblocked: dispositions
/// the agent and this process set (ignored ones survive exec) must not
/// reach the command.
fn default_signals() -> nix::Result<()> {
    for sig in Signal::iterator() {
        if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing the default action runs no code of ours.
        unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) }?;
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
}

/// Forwards signals to the command and reaps every child until the command
/// ends; then reports its status and exits, which ends the namespace.
fn supervise(command: Pid, signals: &SignalFd, status: OwnedFd) -> ! {
    loop {
        let info = match signals.read_signal() {
            Ok(Some(info)) => info,
            Ok(None) | Err(Errno::EINTR) => continue,
            Err(_) => std::process::exit(1),
        };
        let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
            continue;
        };
        if sig != Signal::SIGCHLD {
            // The terminal's signals reached the command already.
            if info.ssi_code != libc::SI_KERNEL {
                let _ = nix::sys::signal::kill(command, sig);
            }
            continue;
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(w @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                    if pid == command =>
                {
                    report(status, w)
                }
                Ok(_) => {} // an orphan, reaped
            }
        }
    }
}

/// Hands the command's end to the agent as a raw wait status and exits.
fn report(status: OwnedFd, w: WaitStatus) -> ! {
    let raw: i32 = match w {
        WaitStatus::Exited(_, code) => (code & 0xff) << 8,
        WaitStatus::Signaled(_, sig, _) => sig as i32,
        _ => 0,
    };
    let _ = std::fs::File::from(status).write_all(&raw.to_ne_bytes());
    std::process::exit(0);
}

/// Decodes what [`report`] sent.
pub(crate) fn decode_status(raw: i32) -> (Option<i32>, Option<i32>) {
    if libc::WIFSIGNALED(raw) {
        (None, Some(libc::WTERMSIG(raw)))
    } else {
        (Some(libc::WEXITSTATUS(raw)), None)
    }
}
