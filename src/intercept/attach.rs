//! Interception in a network namespace that already exists: `attach` (a
//! running container or process, entered by a thread of netchaos's own)
//! and `run --in-place` (netchaos's own namespace). Unlike `run`'s, these
//! namespaces outlive netchaos, so what it installs there is recorded,
//! checked and removed by hand:
//!
//! * before: the privileges it needs, and debris from a netchaos that was
//!   killed (a table nobody serves would black-hole the namespace's
//!   traffic), which stops `attach` unless `--replace`; `--in-place`
//!   replaces a table whose owner is certainly gone by itself (a pod's
//!   restarted sidecar);
//! * during: the table carries its owner (pid, start time, PID namespace),
//!   and the owner keeps its [`beacon`](super::beacon) lit in the
//!   namespace, so that others — in any PID namespace — can tell a live
//!   owner from debris;
//! * after: exactly what it added goes — the table if it is still its own,
//!   the iptables gate chain if it made one — on every way out (including
//!   errors and unwinding: [`Attached`] removes on drop).
//!
//! [`clean`] is the way out of a SIGKILL: it removes the table, the gate
//! chain and netchaos's qdiscs from a namespace, and does nothing the
//! second time.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use caps::{CapSet, Capability};
use socket2::Socket;

use super::agent::{listener, udp};
use super::beacon::Beacon;
use super::error::{InterceptError, Result};
use super::loss::LossTable;
use super::nft::{self, Found, Installed, Liveness, Owner, Redirects, Ruleset};
use super::nsthread::NsThread;
use super::sandbox::{Listeners, Sandbox};
use super::{nfqueue, sock_diag};

/// Which command is attaching (for messages and labels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Attach,
    InPlace,
}

impl Mode {
    pub(crate) fn command(self) -> &'static str {
        match self {
            Mode::Attach => "netchaos attach",
            Mode::InPlace => "netchaos run --in-place",
        }
    }

    /// What its connections are called in events, metrics and the API.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Mode::Attach => "attach",
            Mode::InPlace => "in-place",
        }
    }
}

/// What to install.
pub(crate) struct Config {
    pub mode: Mode,
    /// Local ports whose arriving connections pass through the relay.
    pub inbound: Vec<u16>,
    /// Loopback ports to leave alone (netchaos's own API, in-place).
    pub exempt: Vec<u16>,
    pub losses: LossTable,
    /// Remove a dead netchaos's table first instead of refusing.
    pub replace: bool,
    /// How `clean` would name this namespace, for messages.
    pub clean_hint: String,
    /// The plan answers names with `dns_answer random` ([`nft::Blackhole`]).
    pub blackhole: bool,
}

/// The claim of one netchaos on a namespace: an exclusive lock on a file
/// named after the namespace, holding the owner's pid, so that two
/// netchaos starting at the same moment cannot both pass the check for a
/// live owner (the loser gets the same refusal as when it comes later).
struct Claim {
    /// The lock and its file, removed when the claim is released.
    lock: Option<(nix::fcntl::Flock<std::fs::File>, String)>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Unlinked while still locked: a netchaos that opened the file
        // meanwhile finds, once it gets the lock, that the path is no
        // longer its file, and opens the path again.
        if let Some((_, path)) = &self.lock {
            let _ = std::fs::remove_file(path);
        }
    }
}

const CLAIM_DIR: &str = super::run_dir::RUN_DIR;

impl Claim {
    fn take(ns: &NsThread) -> Result<Claim> {
        let id = ns.run(|| {
            std::fs::metadata("/proc/thread-self/ns/net")
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        })?;
        let Ok(id) = id else {
            return Ok(Claim { lock: None });
        };
        // Where /run is not ours to write (a container), the table's owner
        // and the gate's queue still refuse a second netchaos.
        // Nor where it is not root's own (anyone could plant the file).
        if !super::run_dir::ours(std::path::Path::new(CLAIM_DIR)) {
            return Ok(Claim { lock: None });
        }
        let path = format!("{CLAIM_DIR}/netns-{id}.lock");
        // A few tries: each lost one is a release (unlink) in between.
        for _ in 0..5 {
            use std::os::unix::fs::OpenOptionsExt;
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(super::run_dir::NO_FOLLOW)
                .open(&path)
            else {
                return Ok(Claim { lock: None });
            };
            use nix::fcntl::{Flock, FlockArg};
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(mut lock) => {
                    use std::os::unix::fs::MetadataExt;
                    let ours = lock.metadata().map(|m| m.ino()).ok();
                    if std::fs::metadata(&path).map(|m| m.ino()).ok() != ours {
                        continue;
                    }
                    use std::io::{Seek, Write};
                    let _ = lock.set_len(0);
                    let _ = lock.seek(std::io::SeekFrom::Start(0));
                    let _ = write!(lock, "{}", std::process::id());
                    return Ok(Claim {
                        lock: Some((lock, path)),
                    });
                }
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    let pid = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|t| t.trim().parse::<i32>().ok())
                        .unwrap_or(0);
                    return Err(InterceptError::InTheWay(already_here(pid)));
                }
                Err(_) => return Ok(Claim { lock: None }),
            }
        }
        // Lost to a release every time: another netchaos is busy here.
        Err(InterceptError::InTheWay(already_here(0)))
    }
}

/// The refusal when another netchaos serves the namespace.
fn already_here(pid: i32) -> String {
    format!(
        "another netchaos (pid {pid}) is already intercepting in this network namespace; \
         stop it first (kill -TERM {pid}), or use its control API to change its faults"
    )
}

/// netchaos installed in a namespace.
pub(crate) struct Attached {
    pub sandbox: Arc<Sandbox>,
    pub listeners: Listeners,
    /// The inbound listeners (0.0.0.0 and [::], one port), if asked for.
    pub inbound: Vec<std::net::TcpListener>,
    ns: Arc<NsThread>,
    installed: Installed,
    owner: Owner,
    /// The transaction that ends interception but keeps established flows
    /// translated ([`Ruleset::draining`]).
    draining: String,
    detached: AtomicBool,
    removed: AtomicBool,
    /// Put out (dropped) after the table is removed.
    _beacon: Beacon,
    /// Released (dropped) after the table is removed.
    _claim: Claim,
}

/// Checks, before anything is touched, that this process holds the
/// capabilities `command` needs to work in another namespace (`Attach`) or
/// its own (`InPlace`), naming any that is missing.
pub(crate) fn check_privileges(command: &str, mode: Mode) -> Result<()> {
    let needed: &[(Capability, &str)] = match mode {
        Mode::Attach => &[
            (
                Capability::CAP_SYS_ADMIN,
                "to enter another process's network namespace",
            ),
            (
                Capability::CAP_NET_ADMIN,
                "to manage nftables rules and qdiscs there",
            ),
        ],
        Mode::InPlace => &[(
            Capability::CAP_NET_ADMIN,
            "to manage nftables rules and qdiscs in this network namespace",
        )],
    };
    let missing: Vec<String> = needed
        .iter()
        .filter(|(c, _)| !caps::has_cap(None, CapSet::Effective, *c).unwrap_or(false))
        .map(|(c, why)| format!("{c} ({why})"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let how = match mode {
        Mode::Attach => {
            "Run it as root (sudo), or give it the capabilities \
             (sudo setcap cap_sys_admin,cap_net_admin+ep $(command -v netchaos))"
        }
        Mode::InPlace => {
            "Run it as root in the container or pod, with the NET_ADMIN capability \
             (docker run --cap-add NET_ADMIN; Kubernetes: securityContext.capabilities.add: [NET_ADMIN])"
        }
    };
    Err(InterceptError::Unavailable(format!(
        "{command} needs capabilities this process does not hold: {}. {how}. Nothing was changed.",
        missing.join(", ")
    )))
}

/// Installs interception in the namespace `ns` is in, or explains why not.
pub(crate) fn install(ns: Arc<NsThread>, cfg: Config) -> Result<Attached> {
    let owner = Owner::me();
    let claim = Claim::take(&ns)?;
    let (mode, replace, hint) = (cfg.mode, cfg.replace, cfg.clean_hint.clone());
    ns.run(move || check_stale(mode, replace, &hint))??;
    // Lit before the table exists: a table naming this owner never
    // outlives it unnoticed.
    let lit_for = owner.clone();
    let beacon = ns
        .run(move || super::beacon::light(&lit_for))?
        .map_err(InterceptError::sys(
            "cannot bind the owner's beacon (an abstract Unix socket) in the namespace",
        ))?;
    let inbound_wanted = !cfg.inbound.is_empty();
    let made = ns.run(move || sockets(inbound_wanted))??;
    let udp_mark = nft::random_udp_mark();
    let ruleset = Ruleset {
        udp_mark,
        redirects: made.redirects,
        losses: cfg.losses.rules(),
        native_gate: true,
        inbound: cfg.inbound.clone(),
        inbound_port: made.inbound_port,
        exempt: cfg.exempt.clone(),
        owner: Some(owner.clone()),
        delay_line: false,
        fresh_namespace: false,
        blackhole: cfg.blackhole.then(nft::Blackhole::default),
        // An existing namespace has no address of netchaos's to stand in.
        loop_source: None,
    };
    let mut as_installed = ruleset.clone();
    let installed = ns.run(move || nft::install(&ruleset))??;
    as_installed.native_gate = !installed.xt_gate;
    let sandbox = Sandbox::over_thread(
        ns.clone(),
        made.diag,
        made.redirects,
        cfg.losses,
        cfg.mode.label(),
        udp_mark,
    );
    Ok(Attached {
        sandbox: Arc::new(sandbox),
        listeners: made.listeners,
        inbound: made.inbound,
        ns,
        installed,
        owner,
        draining: as_installed.draining(),
        detached: AtomicBool::new(false),
        removed: AtomicBool::new(false),
        _beacon: beacon,
        _claim: claim,
    })
}

impl Attached {
    /// Ends interception (once; later calls do nothing): the gate and every
    /// rule go, so new connections and lookups go straight to their
    /// destinations, while the connections open through the relay keep
    /// their translation and may finish ([`Ruleset::draining`]). The
    /// table itself goes with [`Attached::remove`], after they drained.
    pub(crate) fn detach(&self) -> Result<()> {
        if self.detached.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let (owner, installed, draining) =
            (self.owner.clone(), self.installed, self.draining.clone());
        self.ns
            .run(move || {
                let mut errors: Vec<String> = Vec::new();
                if installed.xt_gate {
                    errors.extend(nft::remove_xt_gate(&installed));
                }
                match nft::find_table() {
                    Ok(Found::Present(o)) if ours(o.as_ref(), &owner, installed) => {
                        // Should the kernel refuse, interception must still
                        // end: the table goes at once (open connections
                        // are then cut, as before this existed).
                        if let Err(e) = nft::apply(&draining) {
                            tracing::warn!("cannot keep open connections while detaching: {e}");
                            if let Err(e) = nft::delete_table() {
                                errors.push(e.to_string());
                            }
                        }
                    }
                    Ok(Found::Present(_)) => tracing::warn!(
                        "the namespace's netchaos table is no longer this process's; left in place"
                    ),
                    Ok(Found::Absent) => {
                        tracing::warn!("the netchaos table was already gone (removed by hand?)")
                    }
                    Err(e) => errors.push(e.to_string()),
                }
                if errors.is_empty() {
                    Ok(())
                } else {
                    Err(InterceptError::Leftovers(errors))
                }
            })
            .and_then(|r| r)
    }

    /// Removes what [`install`] added (once; later calls do nothing),
    /// detaching first if that has not happened. Errors are reported
    /// together, after everything was tried.
    pub(crate) fn remove(&self) -> Result<()> {
        let detached = self.detach();
        if self.removed.swap(true, Ordering::SeqCst) {
            return detached;
        }
        let (owner, installed) = (self.owner.clone(), self.installed);
        let removed = self
            .ns
            .run(move || match nft::find_table() {
                Ok(Found::Present(o)) if ours(o.as_ref(), &owner, installed) => {
                    nft::delete_table().map(drop)
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            })
            .and_then(|r| r);
        match (detached, removed) {
            (Ok(()), r) | (r, Ok(())) => r,
            (Err(InterceptError::Leftovers(mut a)), Err(b)) => {
                a.push(b.to_string());
                Err(InterceptError::Leftovers(a))
            }
            (Err(a), Err(b)) => Err(InterceptError::Leftovers(vec![
                a.to_string(),
                b.to_string(),
            ])),
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::error!("{e}");
        }
    }
}

/// Whether the table found, owned by `found`, is the one this process
/// installed: its owner recorded, or none where the kernel takes no table
/// comments (then no other netchaos can have installed it meanwhile: the
/// claim and the gate's queue keep them out).
fn ours(found: Option<&Owner>, me: &Owner, installed: Installed) -> bool {
    match found {
        Some(o) => o == me,
        None => !installed.owner_recorded,
    }
}

/// Refuses to install over another netchaos: a live one always, a dead
/// one's debris unless `replace` (which removes it first).
fn check_stale(mode: Mode, replace: bool, clean_hint: &str) -> Result<()> {
    let table = nft::find_table()?;
    let chain = nft::has_xt_gate();
    let owner = match &table {
        Found::Present(o) => o.clone(),
        Found::Absent if chain => None,
        Found::Absent => return Ok(()),
    };
    let liveness = owner.as_ref().map_or(Liveness::Unknown, Owner::liveness);
    if liveness == Liveness::Alive {
        return Err(InterceptError::InTheWay(already_here(
            owner.map_or(0, |o| o.pid),
        )));
    }
    // A restarted sidecar (or in-place run) finds its predecessor's table:
    // gone for certain, it is replaced without asking — in a pod, nobody
    // else may hold NET_ADMIN to clean it, and refusing would cut the app
    // off in a crash loop.
    let recovers = mode == Mode::InPlace && owner.is_some() && liveness == Liveness::Dead;
    if !(replace || recovers) {
        let who = match (&owner, liveness) {
            (Some(o), Liveness::Dead) => {
                format!("a netchaos that is no longer running (pid {})", o.pid)
            }
            (Some(o), _) => format!(
                "a netchaos in another PID namespace (pid {} there), which cannot be checked from here",
                o.pid
            ),
            (None, _) => "an earlier netchaos (its owner is not recorded)".to_string(),
        };
        return Err(InterceptError::InTheWay(format!(
            "a netchaos table left by {who} is still installed in this network namespace and may \
             black-hole its TCP traffic. Remove it with `netchaos clean {clean_hint}`, or pass \
             --replace to {} to remove it and start anyway",
            mode.command()
        )));
    }
    match (&owner, replace) {
        (Some(o), false) => tracing::warn!(
            "removing the netchaos table left by a netchaos that is no longer running (pid {})",
            o.pid
        ),
        _ => tracing::warn!(
            "removing the netchaos table and gate left by an earlier netchaos (--replace)"
        ),
    }
    if matches!(table, Found::Present(_)) {
        nft::delete_table()?;
    }
    let errors = nft::remove_xt_gate(&LEFT_BEHIND);
    if !errors.is_empty() {
        return Err(InterceptError::Leftovers(errors));
    }
    Ok(())
}

/// Debris: its chain goes, and the `mangle` tables too if nothing else
/// is left in them (iptables makes them on demand; an empty one does
/// nothing).
const LEFT_BEHIND: Installed = Installed {
    xt_gate: true,
    made_mangle: [true; 2],
    owner_recorded: true,
};

struct Made {
    diag: OwnedFd,
    redirects: Redirects,
    listeners: Listeners,
    inbound: Vec<std::net::TcpListener>,
    inbound_port: u16,
}

/// The relay's sockets in the namespace: the gate's queue, the outbound
/// listeners (127.0.0.1 and ::1, one port), the DNS sockets (likewise), and
/// the inbound listeners (all addresses, one port).
fn sockets(inbound: bool) -> Result<Made> {
    let queue: OwnedFd = nfqueue::open(nft::QUEUE, nfqueue::GATE_MAXLEN).map_err(|e| match e.raw_os_error() {
        // Another process bound the queue between our checks and now.
        Some(libc::EBUSY | libc::EPERM) => InterceptError::InTheWay(format!(
            "the SYN gate's netlink queue {} is taken in this namespace (by another netchaos or an \
             NFQUEUE user); stop it first",
            nft::QUEUE
        )),
        _ => InterceptError::Sys {
            what: "cannot open the SYN gate's netlink queue (nfnetlink_queue)".into(),
            source: e,
        },
    })?;
    let diag = sock_diag::open().map_err(InterceptError::sys(
        "cannot open a socket-diagnostics socket in the namespace",
    ))?;
    let (tcp, tcp_port) = pair(Ipv4Addr::LOCALHOST, Ipv6Addr::LOCALHOST, listener)?;
    let (dns, dns_port) = pair(Ipv4Addr::LOCALHOST, Ipv6Addr::LOCALHOST, udp)?;
    let (inbound, inbound_port) = if inbound {
        pair(Ipv4Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED, listener)?
    } else {
        (Vec::new(), 0)
    };
    Ok(Made {
        diag,
        redirects: Redirects { tcp_port, dns_port },
        listeners: Listeners {
            queue,
            delay_queue: None,
            tcp: tcp.into_iter().map(|s| OwnedFd::from(s).into()).collect(),
            dns: dns.into_iter().map(|s| OwnedFd::from(s).into()).collect(),
            unreachables: super::dns_forward::Unreachables::open(has_ipv6()),
        },
        inbound: inbound
            .into_iter()
            .map(|s| OwnedFd::from(s).into())
            .collect(),
        inbound_port,
    })
}

/// An IPv4 socket on an ephemeral port and, where the namespace has IPv6,
/// an IPv6 one on the same port (the redirect names one port for both).
fn pair(
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    make: fn(SocketAddr) -> Result<Socket>,
) -> Result<(Vec<Socket>, u16)> {
    let mut last = None;
    for _ in 0..8 {
        let a = make(SocketAddr::from((v4, 0)))?;
        let port = a
            .local_addr()
            .ok()
            .and_then(|x| x.as_socket())
            .map(|x| x.port())
            .ok_or_else(|| InterceptError::Agent("cannot read a socket's port".into()))?;
        if !has_ipv6() {
            return Ok((vec![a], port));
        }
        match make(SocketAddr::from((v6, port))) {
            Ok(b) => return Ok((vec![a, b], port)),
            Err(e) => last = Some(e), // that port is taken on IPv6: another try
        }
    }
    Err(last.expect("tried at least once"))
}

/// Whether the namespace (the calling thread's) has IPv6 loopback.
fn has_ipv6() -> bool {
    std::fs::read_to_string("/proc/thread-self/net/if_inet6").is_ok_and(|t| {
        t.lines()
            .any(|l| l.starts_with("00000000000000000000000000000001"))
    })
}

/// What `clean` found and did.
#[derive(Debug, Default)]
pub(crate) struct Cleaned {
    /// One line per thing removed.
    pub removed: Vec<String>,
    pub errors: Vec<String>,
}

/// Removes netchaos's table, gate chain and qdiscs from the namespace `ns`
/// is in. Refuses while a live netchaos owns the table, unless `force`.
pub(crate) fn clean(ns: &NsThread, force: bool) -> Result<Cleaned> {
    ns.run(move || clean_here(force))?
}

fn clean_here(force: bool) -> Result<Cleaned> {
    let mut done = Cleaned::default();
    if let Found::Present(Some(o)) = nft::find_table()? {
        if o.liveness() == Liveness::Alive && !force {
            return Err(InterceptError::InTheWay(format!(
                "netchaos pid {} is running and owns this namespace's table; stop it \
                 (kill -TERM {}) and it removes the table itself, or pass --force",
                o.pid, o.pid
            )));
        }
    }
    match nft::delete_table() {
        Ok(true) => done
            .removed
            .push(format!("nftables table inet {}", nft::TABLE)),
        Ok(false) => {}
        Err(e) => done.errors.push(e.to_string()),
    }
    if nft::has_xt_gate() {
        let errors = nft::remove_xt_gate(&LEFT_BEHIND);
        if errors.is_empty() {
            done.removed
                .push(format!("iptables chain mangle {}", nft::XT_CHAIN));
        }
        done.errors.extend(errors);
    }
    for dev in links() {
        if dev.starts_with(crate::netem::IFB_PREFIX) {
            continue; // removed with its device below
        }
        match crate::netem::apply::clear(&dev) {
            Ok(cmds) => done.removed.extend(cmds),
            Err(e) => done.errors.push(format!("{dev}: {e}")),
        }
    }
    // An ifb whose device vanished.
    for dev in links() {
        if dev.starts_with(crate::netem::IFB_PREFIX) {
            match crate::netem::apply::delete_link(&dev) {
                Ok(cmd) => done.removed.push(cmd),
                Err(e) => done.errors.push(e.to_string()),
            }
        }
    }
    done.removed.extend(remove_stale_claim());
    Ok(done)
}

/// The claim file of the namespace this thread is in, when no live
/// netchaos holds it (a SIGKILL leaves it behind).
fn remove_stale_claim() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let id = std::fs::metadata("/proc/thread-self/ns/net").ok()?.ino();
    let path = format!("{CLAIM_DIR}/netns-{id}.lock");
    if !super::run_dir::trusted_file(std::path::Path::new(&path)) {
        return None;
    }
    let file = std::fs::OpenOptions::new().read(true).open(&path).ok()?;
    let _held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).ok()?;
    std::fs::remove_file(&path).ok()?;
    Some(format!("claim file {path}"))
}

/// The network devices of the calling thread's namespace.
fn links() -> Vec<String> {
    std::fs::read_to_string("/proc/thread-self/net/dev")
        .map(|t| {
            t.lines()
                .skip(2)
                .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string()))
                .collect()
        })
        .unwrap_or_default()
}
