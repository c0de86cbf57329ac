//! The namespace agent: the child process that lives inside the new network
//! namespace. It creates the namespaces (a user namespace too, without
//! root), brings up `lo` with a default route, creates the relay's sockets
//! there, installs the `inet netchaos` table, then runs the wrapped command
//! and reports how it ended. While the command runs it also hands netchaos
//! marked sockets for connections that must reach *into* the namespace
//! (`--expose`, and loopback services of the command itself).
//!
//! The agent is single-threaded and forked before netchaos starts any
//! thread: `unshare(CLONE_NEWUSER)` requires it.

use std::ffi::CString;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::Command;

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use super::channel::Channel;
use super::nft::{self, RELAY_MARK, Redirects};
use super::{nfqueue, privilege};

/// What the agent needs to know, copied into it by `fork`.
pub struct AgentConfig {
    pub rootless: bool,
    pub uid: u32,
    pub gid: u32,
    /// The command and its arguments.
    pub argv: Vec<CString>,
    /// The `loss` faults of the plan, as nftables rules.
    pub losses: Vec<nft::LossRule>,
}

/// Agent → netchaos, on the control channel.
#[derive(Debug, Serialize, Deserialize)]
pub enum AgentMsg {
    /// Set up; carries the listeners: TCP v4, UDP v4, then TCP v6 and UDP v6
    /// when `v6`.
    Ready {
        redirects: (u16, u16),
        v6: bool,
    },
    Failed {
        message: String,
    },
    Started {
        pid: i32,
    },
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// netchaos → agent, on the control channel.
#[derive(Debug, Serialize, Deserialize)]
pub enum ParentMsg {
    /// Start the command.
    Go,
}

/// A request on the request channel.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// One unconnected TCP socket in the namespace, marked so that
    /// interception lets it through.
    Socket { v6: bool },
    /// One nftables command in the namespace (blackouts).
    Nft { command: String },
}

/// The reply; a socket travels with it when one was asked for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub error: Option<String>,
}

/// Where the namespace's loopback gets a routable address, so that a
/// default route exists (RFC 5737 / RFC 3849 documentation addresses).
const NS_ADDR4: &str = "192.0.2.1";
const NS_ADDR6: &str = "2001:db8::1";

/// The agent's whole life; never returns.
pub fn main(control: Channel, requests: Channel, cfg: &AgentConfig) -> ! {
    // Die with netchaos: a namespace without its relay would black-hole the
    // command's traffic.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let (redirects, v6, sockets) = match setup(cfg) {
        Ok(x) => x,
        Err(message) => {
            let _ = control.send(&AgentMsg::Failed { message }, &[]);
            std::process::exit(1);
        }
    };
    let fds: Vec<_> = sockets.iter().map(|s| s.as_fd()).collect();
    let ready = AgentMsg::Ready {
        redirects: (redirects.tcp_port, redirects.dns_port),
        v6,
    };
    if control.send(&ready, &fds).is_err() {
        std::process::exit(1);
    }
    drop(fds);
    drop(sockets); // netchaos holds them now
    match control.recv::<ParentMsg>() {
        Ok(Some((ParentMsg::Go, _))) => {}
        _ => std::process::exit(0),
    }
    let pid = match spawn_command(cfg) {
        Ok(pid) => pid,
        Err(message) => {
            let _ = control.send(&AgentMsg::Failed { message }, &[]);
            std::process::exit(1);
        }
    };
    let _ = control.send(&AgentMsg::Started { pid: pid.as_raw() }, &[]);
    serve(&control, &requests, pid)
}

type Setup = (Redirects, bool, Vec<OwnedFd>);

fn setup(cfg: &AgentConfig) -> Result<Setup, String> {
    if cfg.rootless {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
            .map_err(|e| privilege::userns_unavailable("creating it", e))?;
        write_id_maps(cfg.uid, cfg.gid)?;
        privilege::keep_net_admin_for_helpers()?;
    } else {
        unshare(CloneFlags::CLONE_NEWNET).map_err(privilege::netns_unavailable)?;
    }
    let rootless_hint = |e: String| {
        if cfg.rootless && e.contains("Operation not permitted") {
            privilege::userns_unavailable("configuring the namespace", Errno::EPERM)
        } else {
            e
        }
    };
    ip(&["link", "set", "lo", "up"]).map_err(rootless_hint)?;
    ip(&["addr", "add", &format!("{NS_ADDR4}/32"), "dev", "lo"]).map_err(rootless_hint)?;
    ip(&["route", "add", "default", "dev", "lo", "src", NS_ADDR4]).map_err(rootless_hint)?;
    // IPv6 may be disabled; then only IPv4 is intercepted.
    let v6 = ip(&[
        "-6",
        "addr",
        "add",
        &format!("{NS_ADDR6}/128"),
        "dev",
        "lo",
        "nodad",
    ])
    .is_ok()
        && ip(&[
            "-6", "route", "add", "default", "dev", "lo", "src", NS_ADDR6,
        ])
        .is_ok();

    let queue = nfqueue::open(nft::QUEUE).map_err(|e| {
        rootless_hint(format!(
            "cannot open the SYN gate's netlink queue (nfnetlink_queue): {e}"
        ))
    })?;
    let tcp4 = listener(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let tcp_port = local_port(&tcp4)?;
    let udp4 = udp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let dns_port = local_port(&udp4)?;
    let diag = super::sock_diag::open()
        .map_err(|e| format!("cannot open a socket-diagnostics socket in the namespace: {e}"))?;
    let mut sockets = vec![queue, diag, OwnedFd::from(tcp4), OwnedFd::from(udp4)];
    let v6 = v6
        && match (
            listener(SocketAddr::from((Ipv6Addr::LOCALHOST, tcp_port))),
            udp(SocketAddr::from((Ipv6Addr::LOCALHOST, dns_port))),
        ) {
            (Ok(t), Ok(u)) => {
                sockets.push(OwnedFd::from(t));
                sockets.push(OwnedFd::from(u));
                true
            }
            _ => false,
        };
    let redirects = Redirects { tcp_port, dns_port };
    let ruleset = nft::Ruleset {
        redirects,
        losses: cfg.losses.clone(),
        ..nft::Ruleset::default()
    };
    // The namespace is new and dies with the command: nothing to record
    // about who owns the table, nothing to remove by hand.
    nft::install(&ruleset).map_err(rootless_hint)?;
    Ok((redirects, v6, sockets))
}

/// Identity maps: the command sees the invoking user's own uid and gid.
fn write_id_maps(uid: u32, gid: u32) -> Result<(), String> {
    let write = |path: &str, text: String| {
        std::fs::write(path, text).map_err(|e| {
            privilege::userns_unavailable(
                &format!("writing {path}"),
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })
    };
    // Unprivileged gid maps require setgroups to be denied first.
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
}

/// Runs `ip ARGS` (iproute2).
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "the `ip` command was not found: install iproute2 (apt-get install iproute2)"
                    .to_string()
            }
            _ => format!("cannot run ip: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(super) fn listener(addr: SocketAddr) -> Result<Socket, String> {
    // By number, so that pausing it (the connection limit) keeps the port
    // the redirect points at.
    let addr = crate::relay::numbered(addr)
        .map_err(|e| format!("cannot listen on {addr} in the namespace: {e}"))?;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(true);
    }
    s.set_reuse_address(true)
        .map_err(|e| format!("listener: {e}"))?;
    s.bind(&addr.into())
        .map_err(|e| format!("cannot listen on {addr} in the namespace: {e}"))?;
    s.listen(1024)
        .map_err(|e| format!("listen on {addr}: {e}"))?;
    s.set_nonblocking(true)
        .map_err(|e| format!("listener: {e}"))?;
    Ok(s)
}

pub(super) fn udp(addr: SocketAddr) -> Result<Socket, String> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| format!("socket: {e}"))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(true);
    }
    s.bind(&addr.into())
        .map_err(|e| format!("cannot bind {addr} in the namespace: {e}"))?;
    s.set_nonblocking(true).map_err(|e| format!("udp: {e}"))?;
    Ok(s)
}

fn local_port(s: &Socket) -> Result<u16, String> {
    s.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.port())
        .ok_or_else(|| "cannot read a socket's port".to_string())
}

/// Forks and execs the command with what it may keep (see
/// [`privilege::drop_for_command`]).
fn spawn_command(cfg: &AgentConfig) -> Result<Pid, String> {
    // SAFETY: the agent is single-threaded (netchaos forked it before
    // starting any thread), so the child may run ordinary code before exec.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => Ok(child),
        Ok(ForkResult::Child) => exec_command(cfg),
        Err(e) => Err(format!("cannot start the command: fork: {e}")),
    }
}

fn exec_command(cfg: &AgentConfig) -> ! {
    // The command ends with the agent (and so with netchaos).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    if let Err(e) = privilege::drop_for_command(cfg.rootless) {
        eprintln!("netchaos: {e}");
        std::process::exit(126);
    }
    let err = nix::unistd::execvp(&cfg.argv[0], &cfg.argv).unwrap_err();
    let name = cfg.argv[0].to_string_lossy();
    eprintln!("netchaos: cannot run {name}: {}", err.desc());
    // As shells do: 127 for "not found", 126 for "found but not runnable".
    std::process::exit(if err == Errno::ENOENT { 127 } else { 126 });
}

/// Answers requests until the command exits, then reports its end.
fn serve(control: &Channel, requests: &Channel, pid: Pid) -> ! {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let pidfd = pidfd_open(pid);
    let mut parent_here = true;
    loop {
        let mut fds = vec![
            PollFd::new(requests.as_fd(), PollFlags::POLLIN),
            PollFd::new(
                control.as_fd(),
                if parent_here {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                },
            ),
        ];
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        // Without a pidfd (kernels before 5.3), poll for the exit.
        let timeout = if pidfd.is_some() {
            PollTimeout::NONE
        } else {
            PollTimeout::from(20u16)
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => std::process::exit(1),
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (request_ready, control_ready) = (ready(0), parent_here && ready(1));
        drop(fds);
        if control_ready && !matches!(control.recv::<ParentMsg>(), Ok(Some(_))) {
            // netchaos is gone: end the command rather than leave it stranded.
            let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
            parent_here = false;
        }
        if request_ready {
            answer(requests);
        }
        match waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => report_exit(control, Some(code), None),
            Ok(WaitStatus::Signaled(_, sig, _)) => report_exit(control, None, Some(sig as i32)),
            Ok(_) => {}
            Err(_) => report_exit(control, None, None),
        }
    }
}

fn report_exit(control: &Channel, code: Option<i32>, signal: Option<i32>) -> ! {
    let _ = control.send(&AgentMsg::Exited { code, signal }, &[]);
    std::process::exit(0);
}

fn answer(requests: &Channel) {
    let Ok(Some((req, _))) = requests.recv::<Request>() else {
        return;
    };
    let _ = match req {
        Request::Socket { v6 } => match marked_socket(v6) {
            Ok(s) => requests.send(&Reply { error: None }, &[s.as_fd()]),
            Err(e) => requests.send(
                &Reply {
                    error: Some(e.to_string()),
                },
                &[],
            ),
        },
        Request::Nft { command } => requests.send(
            &Reply {
                error: nft::apply(&command).err(),
            },
            &[],
        ),
    };
}

/// A TCP socket marked so that the namespace's gate and redirect let it
/// through (needs CAP_NET_ADMIN in the namespace).
pub fn marked_socket(v6: bool) -> std::io::Result<Socket> {
    let s = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    // Marked, so that the namespace's gate and redirect let it through.
    s.set_mark(RELAY_MARK)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A UDP socket marked the same way (the DNS forwarder's queries from
/// inside an existing namespace), bound to an ephemeral port.
pub fn marked_udp(v6: bool) -> std::io::Result<std::net::UdpSocket> {
    let s = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    s.set_mark(RELAY_MARK)?;
    s.set_nonblocking(true)?;
    let any: SocketAddr = if v6 {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    s.bind(&any.into())?;
    Ok(s.into())
}

fn pidfd_open(pid: Pid) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // (or -1); no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    // SAFETY: a non-negative result is a fresh descriptor that we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
