//! A cgroup of the command's own, below netchaos's, in every hierarchy
//! (v1 controllers and v2 alike), entered just before the command's cgroup
//! namespace is made.
//!
//! A contained command is uid 0 for files: with a `/sys` it could write, it
//! could freeze the cgroup it shares with netchaos (`freezer.state`,
//! `cgroup.freeze`) or change a memory limit. `/sys` is read-only for it
//! ([`super::init`]), but in a user namespace of its own it may mount a
//! cgroup file system afresh, whose root is the root of its cgroup
//! namespace: that root must be a cgroup netchaos is not in. So the PID
//! namespace's first process moves itself to `netchaos-command.AGENT_PID`
//! below netchaos's cgroup, then unshares the cgroup namespace; the agent
//! removes those cgroups when the command has ended, and sweeps the ones
//! a killed agent left behind.

use std::path::{Path, PathBuf};

const PREFIX: &str = "netchaos-command.";

/// Where the calling process's cgroup is, per hierarchy: the hierarchy's
/// controllers (empty: cgroup v2) and the directory under its mount point.
fn own_dirs() -> Vec<(String, PathBuf)> {
    let Ok(cgroups) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    cgroups
        .lines()
        .filter_map(|line| {
            let mut f = line.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            mount_of(&mountinfo, controllers).and_then(|(root, at)| {
                let rel = Path::new(path).strip_prefix(&root).ok()?;
                Some((controllers.to_string(), at.join(rel)))
            })
        })
        .collect()
}

/// The mount of the hierarchy with these controllers (`""`: cgroup v2):
/// its root within the hierarchy and its mount point.
fn mount_of(mountinfo: &str, controllers: &str) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut a = after.split(' ');
        let (fstype, _source, opts) = (a.next()?, a.next()?, a.next()?);
        let fits = match controllers {
            "" => fstype == "cgroup2",
            c => fstype == "cgroup" && c.split(',').all(|c| opts.split(',').any(|o| o == c)),
        };
        if !fits {
            return None;
        }
        let b: Vec<&str> = before.split(' ').collect();
        let root = unescape(b.get(3)?);
        let at = unescape(b.get(4)?);
        Some((PathBuf::from(root), PathBuf::from(at)))
    })
}

/// mountinfo's octal escapes (`\040` for a space).
pub(crate) fn unescape(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Moves the calling process into `netchaos-command.AGENT` below its
/// cgroup in every hierarchy where it may; whether it entered every one
/// that can freeze or limit (all but `cpuset`, whose child needs its CPUs
/// set first and can neither freeze nor cap memory).
pub(crate) fn enter_own(agent: i32) -> bool {
    let name = format!("{PREFIX}{agent}");
    let mut all = true;
    for (controllers, dir) in own_dirs() {
        let mine = dir.join(&name);
        let cpuset = controllers == "cpuset";
        let made = std::fs::create_dir(&mine).is_ok() || mine.is_dir();
        if made && std::fs::write(mine.join("cgroup.procs"), "0\n").is_ok() {
            continue;
        }
        if made {
            let _ = std::fs::remove_dir(&mine);
        }
        all &= cpuset;
    }
    all
}

/// Removes the agent's command cgroups (their processes are gone);
/// retries briefly while the kernel finishes with exiting ones.
pub(crate) fn remove_own(agent: i32) {
    let name = format!("{PREFIX}{agent}");
    for (_, dir) in own_dirs() {
        let mine = dir.join(&name);
        for _ in 0..50 {
            match std::fs::remove_dir(&mine) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => break,
            }
        }
    }
}

/// Removes the empty command cgroups of agents that are gone (killed with
/// netchaos before they could clean up). Called by an agent, which sees
/// the other agents' pids.
pub(crate) fn sweep_stale() {
    for (_, dir) in own_dirs() {
        sweep(&dir);
    }
}

fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
35 30 0:30 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
36 35 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
37 35 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
38 35 0:33 /inner /sys/fs/cgroup/unified\\040x rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn hierarchies_are_found_by_their_controllers() {
        assert_eq!(
            mount_of(MOUNTINFO, "freezer"),
            Some(("/".into(), "/sys/fs/cgroup/freezer".into()))
        );
        assert_eq!(
            mount_of(MOUNTINFO, "cpu,cpuacct"),
            Some(("/".into(), "/sys/fs/cgroup/cpu,cpuacct".into()))
        );
        assert_eq!(
            mount_of(MOUNTINFO, ""),
            Some(("/inner".into(), "/sys/fs/cgroup/unified x".into()))
        );
        assert_eq!(mount_of(MOUNTINFO, "memory"), None);
    }
}
