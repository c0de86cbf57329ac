//! Privileges around `netchaos run`: why a namespace could not be made (and
//! what to do about it), and dropping what the wrapped command must not
//! keep — it may never see or change the fault rules.

use caps::{CapSet, Capability};

use super::error::InterceptError;
use nix::errno::Errno;

/// How much of netchaos's boundary the wrapped command is kept inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Containment {
    /// The default. The command has its own PID and mount namespaces (a
    /// fresh `/proc`, a read-only `/proc/sys`) and, run by root, its own
    /// user namespace mapping every uid to itself: uid 0 for files, but no
    /// capability over the namespaces netchaos made.
    Full,
    /// `--privileged-command` (root only): the command keeps every
    /// capability but CAP_NET_ADMIN over the real system, as root
    /// processes do; it still gets the PID namespace (it dies with
    /// netchaos). It can leave the faults behind: use it only for commands
    /// you trust.
    Privileged,
}

/// Whether netchaos runs as root (and so needs no user namespace).
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Explains a failure to create the user namespace (rootless mode), naming
/// the setting that forbids it and how to change it.
pub(crate) fn userns_unavailable(step: &str, err: Errno) -> InterceptError {
    let mut why = Vec::new();
    if sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        why.push(
            "unprivileged user namespaces are disabled: user.max_user_namespaces is 0 \
             (enable them with `sudo sysctl -w user.max_user_namespaces=15000`)"
                .to_string(),
        );
    }
    if sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        why.push(
            "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone is 0 \
             (enable them with `sudo sysctl -w kernel.unprivileged_userns_clone=1`)"
                .to_string(),
        );
    }
    if sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        why.push(
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, \
             as on Ubuntu 23.10 and later): allow netchaos with an AppArmor profile that grants `userns,`, \
             or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
                .to_string(),
        );
    }
    if why.is_empty() {
        why.push(match err {
            Errno::ENOSPC => "the limit on user namespaces (user.max_user_namespaces) is reached".to_string(),
            Errno::EPERM => "the kernel refused; inside a container this usually means a seccomp \
                             profile or a missing CAP_SYS_ADMIN blocks namespaces \
                             (docker: --security-opt seccomp=unconfined, or run netchaos as root in the container)"
                .to_string(),
            e => format!("the kernel said: {}", e.desc()),
        });
    }
    InterceptError::Unavailable(format!(
        "netchaos run needs a user namespace to work without root, and {step} failed: {}. \
         Alternatively run netchaos as root (sudo), which needs only a network namespace. \
         The command was not run.",
        why.join("; ")
    ))
}

/// Explains a failure to create the network namespace as root.
pub(crate) fn netns_unavailable(err: Errno) -> InterceptError {
    let hint = match err {
        Errno::EPERM => {
            "permission denied: inside a container, creating namespaces needs CAP_SYS_ADMIN \
                         (docker run --cap-add SYS_ADMIN) or an unconfined seccomp profile"
        }
        Errno::EINVAL | Errno::ENOSYS => "this kernel lacks network namespaces (CONFIG_NET_NS)",
        _ => "",
    };
    InterceptError::Unavailable(format!(
        "netchaos run cannot create a network namespace: {}{}{hint}. The command was not run.",
        err.desc(),
        if hint.is_empty() { "" } else { "; " }
    ))
}

/// Lets `nft` and `iptables-restore`, run by the agent, keep CAP_NET_ADMIN across exec
/// (rootless mode: a non-root exec would otherwise drop it).
pub(crate) fn keep_net_admin_for_helpers() -> Result<(), InterceptError> {
    caps::raise(None, CapSet::Inheritable, Capability::CAP_NET_ADMIN)
        .and_then(|_| caps::raise(None, CapSet::Ambient, Capability::CAP_NET_ADMIN))
        .map_err(|e| InterceptError::Unavailable(format!("cannot keep CAP_NET_ADMIN for nft: {e}")))
}

/// Drops what the wrapped command must not have, just before exec, and
/// checks that it is gone.
///
/// * Rootless: the command runs as the invoking (non-root) user, so exec
///   clears every capability; `no_new_privs` also stops setuid binaries and
///   file capabilities from granting any back.
/// * Root: CAP_NET_ADMIN leaves every capability set, the bounding set
///   included, so neither the command nor anything it runs can list or
///   change the nftables rules of its namespace.
pub(crate) fn drop_for_command(rootless: bool) -> Result<(), InterceptError> {
    let cap = Capability::CAP_NET_ADMIN;
    let fail = |what: &str, e: caps::errors::CapsError| {
        InterceptError::Unavailable(format!("cannot drop CAP_NET_ADMIN ({what}): {e}"))
    };
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient", e))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("inheritable", e))?;
    if rootless {
        set_no_new_privs()?;
        if nix::unistd::getuid().is_root() {
            return Err(InterceptError::Unavailable(
                "refusing to run the command as uid 0 in rootless mode".into(),
            ));
        }
        return Ok(());
    }
    caps::drop(None, CapSet::Bounding, cap).map_err(|e| fail("bounding", e))?;
    caps::drop(None, CapSet::Effective, cap).map_err(|e| fail("effective", e))?;
    caps::drop(None, CapSet::Permitted, cap).map_err(|e| fail("permitted", e))?;
    for set in [
        CapSet::Bounding,
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Ambient,
    ] {
        if caps::has_cap(None, set, cap).unwrap_or(true) {
            return Err(InterceptError::Unavailable(format!(
                "CAP_NET_ADMIN is still in the {set:?} set; refusing to run the command"
            )));
        }
    }
    Ok(())
}

fn set_no_new_privs() -> Result<(), InterceptError> {
    nix::sys::prctl::set_no_new_privs().map_err(InterceptError::sys("cannot set no_new_privs"))
}

/// Prepares the `run --in-place` command, between fork and exec: it dies
/// with netchaos (SIGKILL when netchaos dies), and loses CAP_NET_ADMIN for
/// good — ambient, bounding, effective, permitted and inheritable sets. Raw
/// syscalls only (async-signal-safe, no allocation).
///
/// A process that cannot shrink its bounding set (no CAP_SETPCAP, as in a
/// container that adds NET_ADMIN alone) gets `no_new_privs` instead: exec
/// then grants no capability beyond the (cleared) permitted set, even to
/// root, and no file capability or setuid binary hands one back.
pub(crate) fn drop_net_admin_in_child() -> std::io::Result<()> {
    const CAP_NET_ADMIN: libc::c_ulong = 12;
    prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
    // Ambient capabilities need Linux 4.3; EINVAL before that means none.
    let _ = prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    );
    if prctl(libc::PR_CAPBSET_DROP, CAP_NET_ADMIN).is_err() {
        prctl(libc::PR_SET_NO_NEW_PRIVS, 1)?;
    }
    let mut sets = capget()?;
    let bit = 1u32 << CAP_NET_ADMIN;
    sets[0].effective &= !bit;
    sets[0].permitted &= !bit;
    sets[0].inheritable &= !bit;
    capset(&sets)
}

/// `prctl(option, arg, 0, 0, 0)`.
fn prctl(option: libc::c_int, arg: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: every option used here takes integer arguments only; no
    // memory is passed or kept.
    let r = unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's capability sets (version 3: two 32-bit words).
fn capget() -> std::io::Result<[CapData; 2]> {
    let mut header = cap_header();
    let mut data = [CapData::default(); 2];
    // SAFETY: for _LINUX_CAPABILITY_VERSION_3 the kernel writes exactly two
    // CapData words; both pointers point at live repr(C) values.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(data)
}

/// Sets the calling thread's capability sets.
fn capset(data: &[CapData; 2]) -> std::io::Result<()> {
    let mut header = cap_header();
    // SAFETY: as for capget; the kernel only reads the two words.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn cap_header() -> CapHeader {
    CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    }
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
