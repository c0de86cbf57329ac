//! The namespace agent: the child process that lives inside the new network
//! namespace. It creates the namespaces (network and mount; a user
//! namespace too, without root), brings up `lo` with a default route,
//! creates the relay's sockets there, installs the `inet netchaos` table,
//! then starts the wrapped command in a PID namespace of its own (see
//! [`super::init`]) and reports how it ended. While the command runs it also
//! hands netchaos marked sockets for connections that must reach *into*
//! the namespace (`--expose`, and services of the command itself).
//!
//! The agent is single-threaded and forked before netchaos starts any
//! thread: `unshare(CLONE_NEWUSER)` requires it. It dies with netchaos, and
//! is not dumpable: nothing can read its memory or trace it.

use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use super::addresses::NsAddrs;
use super::channel::Channel;
use super::error::{InterceptError, Result};
use super::init::{self, InitConfig};
use super::nft::{self, Redirects};
use super::privilege::Containment;
use super::{nfqueue, privilege};

/// What the agent needs to know, copied into it by `fork`.
pub(crate) struct AgentConfig {
    pub rootless: bool,
    pub uid: u32,
    pub gid: u32,
    /// The command and its arguments.
    pub argv: Vec<CString>,
    /// The command's environment (netchaos's, without its secrets).
    pub env: Vec<CString>,
    /// The `loss` faults of the plan, as nftables rules.
    pub losses: Vec<nft::LossRule>,
    /// The plan has path faults (`packet_latency`, `packet_rate`, bursty
    /// `loss`): like loss, they need a real path's packet size.
    pub delayed: bool,
    /// The namespace's own addresses.
    pub addrs: NsAddrs,
    pub containment: Containment,
    /// netchaos's pid: the agent exits if netchaos is gone before it could
    /// tie its life to it.
    pub parent: Pid,
    /// See [`nft::random_udp_mark`].
    pub udp_mark: u32,
    /// The plan answers names with `dns_answer random` ([`nft::Blackhole`]).
    pub blackhole: bool,
    /// Files of netchaos's the command must not read (the API's token
    /// file): an empty file is mounted over each in its mount namespace.
    pub hidden: Vec<std::path::PathBuf>,
}

/// Agent → netchaos, on the control channel.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum AgentMsg {
    /// Set up; carries the listeners: TCP v4, UDP v4, then TCP v6 and UDP v6
    /// when `v6`, then `icmp` raw ICMP sockets for the DNS forwarder
    /// (IPv4's, then IPv6's). `netns` is the namespace's inode, to
    /// recognise processes left in it; `sends_bounded`: its TCP send
    /// buffers are bounded ([`bound_send_buffers`]).
    Ready {
        redirects: (u16, u16),
        v6: bool,
        icmp: usize,
        netns: u64,
        sends_bounded: bool,
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
pub(crate) enum ParentMsg {
    /// Start the command; with `trust`, covering its trust stores first
    /// (`run --tls`: the CAs' certificates only).
    Go {
        trust: Option<super::trust::Covering>,
    },
}

/// A request on the request channel.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    /// One unconnected TCP socket in the namespace, for a dial of the
    /// relay's own.
    Socket { v6: bool },
    /// Drop every packet of `client`'s flow for `millis` (`None`: for good).
    Blackout {
        client: SocketAddr,
        millis: Option<u64>,
    },
}

/// The reply; a socket travels with it when one was asked for.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub error: Option<String>,
}

/// Bounds the TCP send buffers of the namespace's sockets: the command's
/// sockets sit on loopback, where the kernel would autotune them to
/// megabytes from the first window on, while a real path's stays near its
/// bandwidth-delay product; the relay holds the rest as a path would
/// ([`crate::relay::holding`]). Whether it could (a kernel without
/// per-namespace `tcp_wmem`, before 4.15, cannot).
fn bound_send_buffers() -> bool {
    use crate::relay::holding::TCP_WMEM as AT;
    let Some(value) = std::fs::read_to_string(AT)
        .ok()
        .and_then(|now| bounded_wmem(&now, crate::relay::holding::CLIENT_SEND_MAX))
    else {
        return false;
    };
    match std::fs::write(AT, value) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "a client's send() may take more than over a real path: cannot bound the namespace's TCP send buffers ({AT}: {e})"
            );
            false
        }
    }
}

/// `tcp_wmem` (min, default, max) as `now` says, none of them above `max`
/// (a host's may already be lower).
fn bounded_wmem(now: &str, max: usize) -> Option<String> {
    let [min, default, most] = crate::relay::holding::tcp_wmem(now)?;
    Some(format!(
        "{} {} {}",
        min.min(max),
        default.min(max),
        most.min(max)
    ))
}

/// The agent's whole life; never returns.
pub(crate) fn main(control: Channel, requests: Channel, cfg: &AgentConfig) -> ! {
    // Die with netchaos: a namespace without its relay would black-hole the
    // command's traffic (and netchaos may have died before this call).
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if nix::unistd::getppid() != cfg.parent {
        std::process::exit(1);
    }
    // The terminal's signals are for the command (and netchaos); the agent
    // ends only with netchaos.
    for sig in [
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGHUP,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
        Signal::SIGPIPE,
    ] {
        // SAFETY: ignoring a signal runs no code of ours.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigIgn) };
    }
    let (redirects, v6, mut sockets) = match setup(cfg) {
        Ok(x) => x,
        Err(e) => {
            let message = e.to_string();
            let _ = control.send(&AgentMsg::Failed { message }, &[]);
            std::process::exit(1);
        }
    };
    // From here on nothing can read the agent's memory or trace it (its
    // /proc files belong to root).
    let _ = nix::sys::prctl::set_dumpable(false);
    let netns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or(0);
    // Not required: without them a failed resolver makes its client wait.
    let icmp = super::dns_forward::Unreachables::open(v6).map_or_else(Vec::new, |u| u.fds());
    let ready = AgentMsg::Ready {
        redirects: (redirects.tcp_port, redirects.dns_port),
        v6,
        icmp: icmp.len(),
        netns,
        sends_bounded: bound_send_buffers(),
    };
    sockets.extend(icmp);
    let fds: Vec<_> = sockets.iter().map(|s| s.as_fd()).collect();
    if control.send(&ready, &fds).is_err() {
        std::process::exit(1);
    }
    drop(fds);
    drop(sockets); // netchaos holds them now
    let trust = match control.recv::<ParentMsg>() {
        Ok(Some((ParentMsg::Go { trust }, _))) => trust,
        _ => std::process::exit(0),
    };
    let env = match trust {
        Some(covering) => match super::trust::install(&covering, &cfg.env) {
            Ok(env) => env,
            Err(e) => {
                let message = e.to_string();
                let _ = control.send(&AgentMsg::Failed { message }, &[]);
                std::process::exit(1);
            }
        },
        None => cfg.env.clone(),
    };
    let (pid, status) = match spawn_init(cfg, &env) {
        Ok(x) => x,
        Err(e) => {
            let message = e.to_string();
            let _ = control.send(&AgentMsg::Failed { message }, &[]);
            std::process::exit(1);
        }
    };
    let _ = control.send(&AgentMsg::Started { pid: pid.as_raw() }, &[]);
    serve(&control, &requests, pid, &status)
}

type Setup = (Redirects, bool, Vec<OwnedFd>);

/// The MTU of the path `loss` stands for (Ethernet).
const PATH_MTU: u32 = 1500;

fn setup(cfg: &AgentConfig) -> Result<Setup> {
    if cfg.rootless {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
            .map_err(|e| privilege::userns_unavailable("creating it", e))?;
        write_id_maps(cfg.uid, cfg.gid)?;
        privilege::keep_net_admin_for_helpers()?;
    } else {
        unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
            .map_err(privilege::netns_unavailable)?;
    }
    // Mounts made for the command (its /proc) must never reach the host.
    let none: Option<&str> = None;
    nix::mount::mount(
        none,
        "/",
        none,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        none,
    )
    .map_err(InterceptError::sys(
        "cannot make the namespace's mounts private",
    ))?;
    // Rootless, a refusal to configure the namespace means user namespaces
    // are restricted: say so, with what to do.
    let rootless_hint = |e: InterceptError| match &e {
        InterceptError::Tool(t) if cfg.rootless && t.not_permitted() => {
            privilege::userns_unavailable("configuring the namespace", Errno::EPERM)
        }
        InterceptError::Sys { source, .. }
            if cfg.rootless && source.raw_os_error() == Some(libc::EPERM) =>
        {
            privilege::userns_unavailable("configuring the namespace", Errno::EPERM)
        }
        _ => e,
    };
    // `loss` and the delay line act on packets of the size an Ethernet
    // path carries: on `lo` (MTU 65,536, with segmentation offload) a bulk
    // transfer is ~45 times fewer, larger packets, and dropping a share of
    // those is far milder than the same share of a real path's segments;
    // a delay line on them would let slow start grow by 45 times a real
    // path's segments per round trip. The MTU sets the segment size, and
    // with TSO off ([`offload`]) the packets are single segments.
    let lossy = !cfg.losses.is_empty() || cfg.delayed;
    // `lo` up, with an address the host does not use and a default route
    // through it, set over rtnetlink: an `ip` started for it cost ~2 ms of
    // `netchaos run`'s start-up per family.
    let nl = super::rtnl::Rtnl::open().map_err(InterceptError::sys(
        "cannot open a routing netlink socket in the namespace",
    ))?;
    let lo = super::rtnl::LOOPBACK;
    let a4 = IpAddr::V4(cfg.addrs.v4);
    nl.link_up(lo, lossy.then_some(PATH_MTU))
        .and_then(|()| nl.add_host_address(lo, a4))
        .and_then(|()| nl.add_default_route(lo, a4))
        .map_err(InterceptError::sys(format!(
            "cannot set up the namespace's lo ({a4}, default route)"
        )))
        .map_err(rootless_hint)?;
    // Apart from the rest: a kernel that cannot set it makes loss milder,
    // not the run impossible.
    if lossy {
        if let Err(e) = super::offload::tso_off("lo") {
            tracing::warn!(
                "loss acts on larger packets than a real path's (cannot turn lo's segmentation offload off: {e})"
            );
        }
    }
    // IPv6 may be disabled; then only IPv4 is intercepted.
    let a6 = IpAddr::V6(cfg.addrs.v6);
    let v6 = nl
        .add_host_address(lo, a6)
        .and_then(|()| nl.add_default_route(lo, a6))
        .is_ok();
    drop(nl);
    // A service under test may listen on port 80 without CAP_NET_BIND_SERVICE
    // (which it no longer holds over this namespace).
    std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0").map_err(
        InterceptError::sys("cannot let the command bind low ports in its namespace"),
    )?;

    let queue = nfqueue::open(nft::QUEUE, nfqueue::GATE_MAXLEN)
        .map_err(InterceptError::sys(
            "cannot open the SYN gate's netlink queue (nfnetlink_queue)",
        ))
        .map_err(rootless_hint)?;
    let delay_queue = nfqueue::open(nft::DELAY_QUEUE, super::delay_line::MAXLEN).map_err(
        InterceptError::sys("cannot open the packet delay line's netlink queue (nfnetlink_queue)"),
    )?;
    let tcp4 = listener(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let tcp_port = local_port(&tcp4)?;
    let udp4 = udp(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let dns_port = local_port(&udp4)?;
    let diag = super::sock_diag::open().map_err(InterceptError::sys(
        "cannot open a socket-diagnostics socket in the namespace",
    ))?;
    let mut sockets = vec![
        queue,
        delay_queue,
        diag,
        OwnedFd::from(tcp4),
        OwnedFd::from(udp4),
    ];
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
        udp_mark: cfg.udp_mark,
        fresh_namespace: true,
        delay_line: true,
        blackhole: cfg.blackhole.then(|| nft::Blackhole {
            keep: vec![IpAddr::V4(cfg.addrs.v4), IpAddr::V6(cfg.addrs.v6)],
        }),
        loop_source: Some(nft::LoopSource {
            v4: cfg.addrs.v4,
            v6: cfg.addrs.v6,
        }),
        ..nft::Ruleset::default()
    };
    // The namespace is new and dies with the command: nothing to record
    // about who owns the table, nothing to remove by hand.
    nft::install(&ruleset).map_err(rootless_hint)?;
    Ok((redirects, v6, sockets))
}

/// Identity maps: the command sees the invoking user's own uid and gid.
fn write_id_maps(uid: u32, gid: u32) -> Result<()> {
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

pub(super) fn listener(addr: SocketAddr) -> Result<Socket> {
    let sys = |what: &str| InterceptError::sys(format!("{what} {addr} in the namespace"));
    // By number, so that pausing it (the connection limit) keeps the port
    // the redirect points at.
    let addr = crate::relay::numbered(addr).map_err(sys("cannot listen on"))?;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(sys("cannot make a socket to listen on"))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(true);
    }
    s.set_reuse_address(true)
        .map_err(sys("cannot set SO_REUSEADDR to listen on"))?;
    s.bind(&addr.into()).map_err(sys("cannot listen on"))?;
    s.listen(1024).map_err(sys("cannot listen on"))?;
    s.set_nonblocking(true)
        .map_err(sys("cannot make non-blocking the listener on"))?;
    Ok(s)
}

pub(super) fn udp(addr: SocketAddr) -> Result<Socket> {
    let sys = |what: &str| InterceptError::sys(format!("{what} {addr} in the namespace"));
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(sys("cannot make a socket to bind"))?;
    if addr.is_ipv6() {
        let _ = s.set_only_v6(true);
    }
    s.bind(&addr.into()).map_err(sys("cannot bind"))?;
    s.set_nonblocking(true)
        .map_err(sys("cannot make non-blocking the socket on"))?;
    Ok(s)
}

fn local_port(s: &Socket) -> Result<u16> {
    s.local_addr()
        .map_err(InterceptError::sys("cannot read a socket's port"))?
        .as_socket()
        .map(|a| a.port())
        .ok_or_else(|| InterceptError::Agent("a socket without an IP address".into()))
}

/// Starts the command's PID namespace: its first process ([`init`]) runs
/// the command. Returns that process and the pipe its report comes on.
fn spawn_init(cfg: &AgentConfig, env: &[CString]) -> Result<(Pid, OwnedFd)> {
    unshare(CloneFlags::CLONE_NEWPID).map_err(InterceptError::sys(
        "cannot make a PID namespace for the command",
    ))?;
    let agent_pid = nix::unistd::getpid().as_raw();
    super::cgroup::sweep_stale();
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let (status_r, status_w) = nix::unistd::pipe2(cloexec).map_err(InterceptError::sys("pipe"))?;
    let (alive_r, alive_w) = nix::unistd::pipe2(cloexec).map_err(InterceptError::sys("pipe"))?;
    // SAFETY: the agent is single-threaded (netchaos forked it before
    // starting any thread), so the child may run ordinary code.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => {
            drop((status_w, alive_r));
            // Kept open for the agent's life: init sees it close if the
            // agent dies before init could tie its life to the agent's.
            std::mem::forget(alive_w);
            Ok((child, status_r))
        }
        Ok(ForkResult::Child) => {
            drop((status_r, alive_w));
            init::main(InitConfig {
                argv: &cfg.argv,
                env,
                rootless: cfg.rootless,
                containment: cfg.containment,
                hidden: &cfg.hidden,
                agent: agent_pid,
                status: status_w,
                agent_alive: alive_r,
            })
        }
        Err(e) => Err(InterceptError::sys("cannot start the command: fork")(e)),
    }
}

/// Answers requests until the command's namespace ends, then reports how
/// the command ended.
fn serve(control: &Channel, requests: &Channel, pid: Pid, status: &OwnedFd) -> ! {
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
            // netchaos is gone: end the command's namespace rather than leave
            // it stranded (ending its init ends every process in it).
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            parent_here = false;
        }
        if request_ready {
            answer(requests);
        }
        let ended = match waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => (Some(code), None),
            Ok(WaitStatus::Signaled(_, sig, _)) => (None, Some(sig as i32)),
            Ok(_) => continue,
            Err(_) => (None, None),
        };
        // The command's own end, as its init reported it; else init's.
        let mut raw = [0u8; 4];
        let (code, signal) = match nix::unistd::read(status, &mut raw) {
            Ok(4) => init::decode_status(i32::from_ne_bytes(raw)),
            _ => ended,
        };
        report_exit(control, code, signal)
    }
}

fn report_exit(control: &Channel, code: Option<i32>, signal: Option<i32>) -> ! {
    super::cgroup::remove_own(nix::unistd::getpid().as_raw());
    let _ = control.send(&AgentMsg::Exited { code, signal }, &[]);
    std::process::exit(0);
}

fn answer(requests: &Channel) {
    let Ok(Some((req, _))) = requests.recv::<Request>() else {
        return;
    };
    let _ = match req {
        Request::Socket { v6 } => match inside_socket(v6) {
            Ok(s) => requests.send(&Reply { error: None }, &[s.as_fd()]),
            Err(e) => requests.send(
                &Reply {
                    error: Some(e.to_string()),
                },
                &[],
            ),
        },
        Request::Blackout { client, millis } => {
            let duration = millis.map(std::time::Duration::from_millis);
            let done = nft::apply(&nft::blackout_command(client, duration));
            requests.send(
                &Reply {
                    error: done.err().map(|e| e.to_string()),
                },
                &[],
            )
        }
    };
}

/// A TCP socket of the namespace, for a dial of the relay's own (which the
/// SYN gate recognises by its 4-tuple).
pub(crate) fn inside_socket(v6: bool) -> std::io::Result<Socket> {
    let s = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// A UDP socket for the DNS forwarder's queries from inside an existing
/// namespace, marked with `mark` so that the redirect lets it through
/// (needs CAP_NET_ADMIN there), bound to an ephemeral port.
pub(crate) fn marked_udp(v6: bool, mark: u32) -> std::io::Result<std::net::UdpSocket> {
    let s = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    s.set_mark(mark)?;
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

#[cfg(test)]
mod tests {
    use super::bounded_wmem;

    #[test]
    fn the_send_buffer_bound_only_ever_lowers_tcp_wmem() {
        let max = 128 << 10;
        assert_eq!(
            bounded_wmem("4096\t16384\t4194304\n", max).as_deref(),
            Some("4096 16384 131072")
        );
        assert_eq!(
            bounded_wmem("4096 262144 65536", max).as_deref(),
            Some("4096 131072 65536"),
            "a host's lower maximum stays"
        );
        assert_eq!(bounded_wmem("4096 16384", max), None);
        assert_eq!(bounded_wmem("a b c", max), None);
    }
}
