//! Finds a container's, or a Kubernetes pod's, processes from the node by
//! the cgroup each process is in: every runtime names a container's cgroup
//! after its ID (Docker `docker-ID.scope` or `/docker/ID`, Podman
//! `libpod-ID.scope`, containerd `cri-containerd-ID.scope` or
//! `/kubepods/…/ID`, CRI-O `crio-ID.scope`), and the kubelet a pod's after
//! its UID (`kubepods-…-podUID.slice`, `/kubepods/…/podUID`). So no
//! runtime socket or client is needed — only the node's `/proc` (a
//! DaemonSet: `hostPID: true`). A pod's name becomes its UID through the
//! kubelet's log directory, `/var/log/pods/NAMESPACE_NAME_UID`, the same
//! under containerd and CRI-O.

use std::path::{Path, PathBuf};

/// The container ID a cgroup path names (64 hex digits), if any; `None`
/// as well for a runtime's monitor (`conmon`), which runs beside the
/// container, not in its namespaces.
pub(crate) fn container_id_of(path: &str) -> Option<&str> {
    for comp in path.rsplit('/') {
        if comp.contains("conmon") {
            return None;
        }
        let comp = comp.strip_suffix(".scope").unwrap_or(comp);
        let token = comp.rsplit('-').next().unwrap_or(comp);
        if token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(token);
        }
    }
    None
}

/// The pod UID a cgroup path names, with dashes (the systemd driver's
/// slices spell them as underscores).
pub(crate) fn pod_uid_of(path: &str) -> Option<String> {
    path.split('/').find_map(|comp| {
        let rest = match comp.strip_suffix(".slice") {
            Some(slice) => slice.rsplit_once("-pod")?.1,
            None => comp.strip_prefix("pod")?,
        };
        let uid = rest.replace('_', "-");
        is_uid(&uid).then_some(uid)
    })
}

/// A pod UID: a UUID, or a static pod's 32 hex digits (its config hash).
fn is_uid(s: &str) -> bool {
    let uuid = s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| {
            matches!(i, 8 | 13 | 18 | 23) == (b == b'-') && (b == b'-' || b.is_ascii_hexdigit())
        });
    uuid || (s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The processes of the node, each with its cgroup paths.
fn processes() -> Vec<(i32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<(i32, Vec<String>)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
            let paths = text
                .lines()
                .filter_map(|l| Some(l.splitn(3, ':').nth(2)?.to_string()))
                .collect();
            Some((pid, paths))
        })
        .collect();
    out.sort_by_key(|(pid, _)| *pid);
    out
}

/// Why a container or pod was not found, for the user.
const NODE_PIDS: &str = "netchaos must see the node's processes: run it on the node, \
                         or in a pod with hostPID: true";

/// The first process (lowest pid) of the container whose ID is, or starts
/// with, `id` (at least 6 hex digits).
pub(crate) fn container(id: &str) -> Result<i32, String> {
    let id = id.to_ascii_lowercase();
    if id.len() < 6 || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "--container {id}: expected a container ID (6 to 64 hex digits, as `docker ps`, \
             `podman ps` or `crictl ps` show it)"
        ));
    }
    let mut found: Vec<(i32, String)> = Vec::new();
    for (pid, paths) in processes() {
        let full = paths
            .iter()
            .find_map(|p| container_id_of(p))
            .filter(|full| full.starts_with(&id));
        if let Some(full) = full {
            found.push((pid, full.to_string()));
        }
    }
    let mut ids: Vec<&str> = found.iter().map(|(_, f)| f.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    match ids.as_slice() {
        [] => Err(format!(
            "--container {id}: no running process belongs to a container with that ID. {NODE_PIDS}"
        )),
        [_] => Ok(found[0].0),
        many => Err(format!(
            "--container {id}: more than one container's ID starts so ({}); give more of it",
            many.iter().map(|f| &f[..12]).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The kubelet's pod log directory (`NETCHAOS_POD_LOG_DIR` where the node's
/// is mounted elsewhere).
fn pod_log_dir() -> PathBuf {
    std::env::var_os("NETCHAOS_POD_LOG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/log/pods"))
}

/// The node's processes as [`processes`] lists them.
type Procs = [(i32, Vec<String>)];

/// The UID of the pod `NAMESPACE/NAME` (or `pod` itself, given as a UID),
/// among the node's processes `procs`.
fn pod_uid(pod: &str, procs: &Procs) -> Result<String, String> {
    if is_uid(pod) {
        return Ok(pod.to_ascii_lowercase());
    }
    let Some((ns, name)) = pod
        .split_once('/')
        .filter(|(n, p)| !n.is_empty() && !p.is_empty())
    else {
        return Err(format!(
            "--pod {pod}: expected NAMESPACE/NAME, or the pod's UID \
             (kubectl get pod NAME -o jsonpath='{{.metadata.uid}}')"
        ));
    };
    let dir = pod_log_dir();
    let prefix = format!("{ns}_{name}_");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "--pod {pod}: cannot read the kubelet's pod directory {} ({e}); mount the node's \
             /var/log/pods there (or set NETCHAOS_POD_LOG_DIR), or give the pod's UID",
            dir.display()
        )
    })?;
    let uids: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.to_string();
            let uid = n.strip_prefix(&prefix)?;
            is_uid(uid).then(|| uid.to_string())
        })
        .collect();
    let live: Vec<&String> = uids
        .iter()
        .filter(|u| !pod_pids(u, procs).is_empty())
        .collect();
    match (live.as_slice(), uids.len()) {
        ([uid], _) => Ok((*uid).clone()),
        ([], 0) => Err(format!(
            "--pod {pod}: no such pod on this node (nothing named {prefix}… in {})",
            dir.display()
        )),
        ([], _) => Err(format!(
            "--pod {pod}: the pod has no running process on this node. {NODE_PIDS}"
        )),
        (_, _) => Err(format!(
            "--pod {pod}: more than one running pod of that name ({}); give its UID",
            live.iter()
                .map(|u| u.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The pod's processes; not a runtime's monitor that CRI-O may put in the
/// pod's cgroup (`conmon_cgroup = "pod"`), which runs in the node's
/// namespaces.
fn pod_pids(uid: &str, procs: &Procs) -> Vec<i32> {
    procs
        .iter()
        .filter(|(_, paths)| {
            paths.iter().any(|p| pod_uid_of(p).as_deref() == Some(uid))
                && !paths.iter().any(|p| p.contains("conmon"))
        })
        .map(|(pid, _)| *pid)
        .collect()
}

/// A process of the pod `pod` (NAMESPACE/NAME or UID) in the pod's own
/// network namespace — the one most of its processes share, not the
/// node's (a process may make one of its own: a browser's sandbox) — one
/// whose root has an /etc/resolv.conf (an application container's, which
/// the DNS layer reads) if any.
pub(crate) fn pod(pod: &str) -> Result<i32, String> {
    // One look at the node's processes (thousands of files) serves both.
    let procs = processes();
    let uid = pod_uid(pod, &procs)?;
    let pids = pod_pids(&uid, &procs);
    if pids.is_empty() {
        return Err(format!(
            "--pod {pod}: no running process belongs to pod {uid}. {NODE_PIDS}"
        ));
    }
    let netns = |pid: i32| {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .ok()
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
    };
    let node = netns(1);
    let spaces: Vec<(i32, Option<(u64, u64)>)> = pids.iter().map(|&p| (p, netns(p))).collect();
    let mut counts: std::collections::HashMap<(u64, u64), usize> = Default::default();
    for ns in spaces
        .iter()
        .filter_map(|(_, ns)| *ns)
        .filter(|ns| Some(*ns) != node)
    {
        *counts.entry(ns).or_default() += 1;
    }
    let Some(own) = counts.into_iter().max_by_key(|(_, n)| *n).map(|(ns, _)| ns) else {
        return Err(format!(
            "--pod {pod}: the pod uses the node's network (hostNetwork: true); it has no \
             namespace of its own to attach to (use `netchaos netem` on the node)"
        ));
    };
    let mine: Vec<i32> = spaces
        .into_iter()
        .filter(|(_, ns)| *ns == Some(own))
        .map(|(p, _)| p)
        .collect();
    Ok(mine
        .iter()
        .copied()
        .find(|pid| Path::new(&format!("/proc/{pid}/root/etc/resolv.conf")).exists())
        .unwrap_or(mine[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c3a0d9b2e8f7a6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b";

    #[test]
    fn container_ids_in_each_runtimes_cgroup_names() {
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
            format!("/machine.slice/libpod-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope/container"),
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000001.slice/cri-containerd-{ID}.scope"
            ),
            format!("/kubepods/besteffort/pod0a1b2c3d-0000-4000-8000-000000000001/{ID}"),
            format!(
                "/kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice/crio-{ID}.scope"
            ),
        ] {
            assert_eq!(container_id_of(&path), Some(ID), "{path}");
        }
        assert_eq!(
            container_id_of(&format!("/machine.slice/libpod-conmon-{ID}.scope")),
            None
        );
        assert_eq!(
            container_id_of(&format!("/system.slice/crio-conmon-{ID}.scope")),
            None
        );
        assert_eq!(
            container_id_of("/user.slice/user-1000.slice/session-2.scope"),
            None
        );
        assert_eq!(container_id_of("/"), None);
    }

    #[test]
    fn pod_uids_in_both_cgroup_drivers() {
        let uid = "0a1b2c3d-0000-4000-8000-000000000001";
        for path in [
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000001.slice/cri-containerd-{ID}.scope"
            ),
            "/kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice".to_string(),
            format!("/kubepods/besteffort/pod{uid}/{ID}"),
            format!("/kubepods/pod{uid}"),
        ] {
            assert_eq!(pod_uid_of(&path).as_deref(), Some(uid), "{path}");
        }
        // A static pod's UID is its config hash.
        assert_eq!(
            pod_uid_of("/kubepods/burstable/pod0123456789abcdef0123456789abcdef/x").as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert_eq!(pod_uid_of("/kubepods.slice/kubepods-burstable.slice"), None);
        assert_eq!(pod_uid_of("/podman.slice"), None);
    }

    #[test]
    fn bad_ids_and_pods_are_named() {
        assert!(
            container("xyz")
                .unwrap_err()
                .contains("expected a container ID")
        );
        assert!(container("abc").unwrap_err().contains("6 to 64"));
        assert!(
            pod_uid("checkout", &[])
                .unwrap_err()
                .contains("NAMESPACE/NAME")
        );
        assert_eq!(
            pod_uid("0A1B2C3D-0000-4000-8000-000000000001", &[]).unwrap(),
            "0a1b2c3d-0000-4000-8000-000000000001"
        );
    }
}
