//! netchaos's side of the namespace: start the agent, receive the sockets it
//! made inside, ask it for more (to reach into the namespace), start the
//! command, learn how it ended, and leave nothing behind.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork};

use tokio::net::TcpStream;

use super::addresses::NsAddrs;
use super::agent::{self, AgentConfig, AgentMsg, ParentMsg, Reply, Request};
use super::channel::Channel;
use super::dns_forward::Unreachables;
use super::error::{InterceptError, Result};
use super::gate::Gate;
use super::loss::LossTable;
use super::nft::Redirects;
use super::nsthread::NsThread;
use super::sock_diag;
use crate::dns::NameTable;
use crate::fault::Partition;
use crate::relay::interception::{DialFuture, Handoff, Interception, PeerQueues, Route};

/// How the wrapped command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommandEnd {
    Exited(i32),
    Signaled(i32),
    /// The agent vanished without saying.
    Unknown,
}

impl CommandEnd {
    /// The exit code netchaos returns: the command's, or 128+N for a signal.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            CommandEnd::Exited(c) => c.clamp(0, 255) as u8,
            CommandEnd::Signaled(s) => (128 + s).clamp(0, 255) as u8,
            CommandEnd::Unknown => 1,
        }
    }
}

/// How netchaos reaches into the namespace.
pub(crate) enum Door {
    /// `netchaos run`: the agent process inside (which also works rootless).
    Agent { requests: Mutex<Channel> },
    /// `attach` and `run --in-place`: a thread of netchaos's own, inside.
    Thread(Arc<NsThread>),
}

/// The namespace, as the relay uses it: its names, the SYN gate's
/// decisions, and a way in.
pub(crate) struct Sandbox {
    door: Arc<Door>,
    /// Socket diagnostics for the namespace (what listens there).
    diag: Mutex<OwnedFd>,
    pub redirects: Redirects,
    pub names: Arc<NameTable>,
    pub gate: Gate,
    /// The plan's `loss` faults, numbered as the table's rules are.
    pub losses: LossTable,
    /// The paths of delayed flows (`run` only: its ruleset queues them).
    pub delay_line: Option<Arc<super::delay_line::DelayLine>>,
    /// What connections through it are called in events and metrics.
    pub label: Arc<str>,
    /// `run`'s namespace's own addresses: connections to them stay inside.
    pub addrs: Option<NsAddrs>,
    /// The DNS forwarder's socket mark inside the namespace.
    pub udp_mark: u32,
    /// The namespace's identity (its inode; 0 when unknown).
    netns: u64,
    /// The agent bounded the namespace's TCP send buffers (`run` only).
    sends_bounded: bool,
}

/// The sockets the agent made inside the namespace for netchaos.
pub(crate) struct Listeners {
    /// The SYN gate's netlink queue.
    pub queue: OwnedFd,
    /// The packet delay line's netlink queue (`run` only).
    pub delay_queue: Option<OwnedFd>,
    pub tcp: Vec<std::net::TcpListener>,
    pub dns: Vec<std::net::UdpSocket>,
    /// The DNS forwarder's way to tell a client its resolver failed.
    pub unreachables: Option<Unreachables>,
}

/// The control line to the agent, held by `netchaos run` alone.
pub(crate) struct Control {
    channel: Channel,
    agent: Pid,
    /// The namespace's identity (`/proc/PID/ns/net` inode), to find
    /// processes left in it at the end.
    netns: Option<u64>,
}

/// Starts the agent and waits until the namespace is ready. Must be called
/// while the process has a single thread.
pub(crate) fn create(
    cfg: AgentConfig,
    losses: LossTable,
) -> Result<(Arc<Sandbox>, Listeners, Control)> {
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .map(|l| l.to_string())
        });
    if threads
        .as_deref()
        .is_some_and(|t| t.split_whitespace().nth(1) != Some("1"))
    {
        return Err(InterceptError::Agent(
            "internal error: the namespace agent must be started before any thread".into(),
        ));
    }
    let (ctl, ctl_agent) = Channel::pair().map_err(InterceptError::sys("socketpair"))?;
    let (dial, dial_agent) = Channel::pair().map_err(InterceptError::sys("socketpair"))?;
    // SAFETY: the process is single-threaded (checked above), so the child
    // may run ordinary code; it never returns from `agent::main`.
    let agent = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop((ctl, dial));
            agent::main(ctl_agent, dial_agent, &cfg)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            return Err(InterceptError::sys(
                "cannot start the namespace agent: fork",
            )(e));
        }
    };
    drop((ctl_agent, dial_agent));
    let control = Control {
        channel: ctl,
        agent,
        netns: None,
    };
    control
        .channel
        .set_recv_timeout(Some(Duration::from_secs(30)))
        .map_err(InterceptError::sys("the agent's channel"))?;
    let (msg, fds) = match control.channel.recv::<AgentMsg>() {
        Ok(Some(m)) => m,
        Ok(None) => return Err(control.agent_died()),
        Err(e) => return Err(InterceptError::sys("the namespace agent did not answer")(e)),
    };
    let (redirects, v6, icmp, netns, sends_bounded) = match msg {
        AgentMsg::Ready {
            redirects,
            v6,
            icmp,
            netns,
            sends_bounded,
        } => (redirects, v6, icmp, netns, sends_bounded),
        // The agent's own explanation of what it could not set up.
        AgentMsg::Failed { message } => {
            let _ = waitpid(agent, None);
            return Err(InterceptError::Unavailable(message));
        }
        other => {
            return Err(InterceptError::Agent(format!(
                "unexpected message from the namespace agent: {other:?}"
            )));
        }
    };
    let (listeners, diag) = split_listeners(fds, v6, icmp)?;
    let netns = Some(netns).filter(|n| *n != 0);
    let addrs = cfg.addrs;
    let sandbox = Sandbox {
        udp_mark: cfg.udp_mark,
        addrs: Some(addrs),
        diag: Mutex::new(diag),
        door: Arc::new(Door::Agent {
            requests: Mutex::new(dial),
        }),
        label: "run".into(),
        gate: Gate::default(),
        losses,
        delay_line: Some(Arc::default()),
        redirects: Redirects {
            tcp_port: redirects.0,
            dns_port: redirects.1,
        },
        names: Arc::new(NameTable::default()),
        netns: netns.unwrap_or(0),
        sends_bounded,
    };
    Ok((Arc::new(sandbox), listeners, Control { netns, ..control }))
}

/// The agent sends: the gate's queue, the delay line's, the diagnostics
/// socket, TCP v4, UDP v4, and TCP v6, UDP v6 when IPv6 is up in the
/// namespace, then `icmp` raw ICMP sockets.
fn split_listeners(fds: Vec<OwnedFd>, v6: bool, icmp: usize) -> Result<(Listeners, OwnedFd)> {
    let want = if v6 { 7 } else { 5 } + icmp;
    if fds.len() != want {
        return Err(InterceptError::Agent(format!(
            "the namespace agent sent {} sockets, expected {want}",
            fds.len()
        )));
    }
    let mut fds = fds;
    let raw = fds.split_off(want - icmp);
    let mut it = fds.into_iter();
    let queue = it.next().expect("counted");
    let delay_queue = it.next().expect("counted");
    let diag = it.next().expect("counted");
    let mut l = Listeners {
        queue,
        delay_queue: Some(delay_queue),
        tcp: Vec::new(),
        dns: Vec::new(),
        unreachables: (icmp > 0).then(|| Unreachables::from_fds(raw)),
    };
    while let (Some(t), Some(u)) = (it.next(), it.next()) {
        l.tcp.push(std::net::TcpListener::from(t));
        l.dns.push(std::net::UdpSocket::from(u));
    }
    Ok((l, diag))
}

impl Control {
    /// Starts the command (trusting `trust`, when given); returns its pid.
    pub(crate) fn start_command(&self, trust: Option<super::trust::Covering>) -> Result<Pid> {
        self.channel
            .send(&ParentMsg::Go { trust }, &[])
            .map_err(InterceptError::sys("the namespace agent is gone"))?;
        match self.channel.recv::<AgentMsg>() {
            Ok(Some((AgentMsg::Started { pid }, _))) => Ok(Pid::from_raw(pid)),
            Ok(Some((AgentMsg::Failed { message }, _))) => {
                Err(InterceptError::Unavailable(message))
            }
            Ok(_) => Err(self.agent_died()),
            Err(e) => Err(InterceptError::sys("the namespace agent did not answer")(e)),
        }
    }

    /// Blocks until the command ends.
    pub(crate) fn wait(&self) -> CommandEnd {
        let _ = self.channel.set_recv_timeout(None);
        let end = match self.channel.recv::<AgentMsg>() {
            Ok(Some((AgentMsg::Exited { code: Some(c), .. }, _))) => CommandEnd::Exited(c),
            Ok(Some((
                AgentMsg::Exited {
                    signal: Some(s), ..
                },
                _,
            ))) => CommandEnd::Signaled(s),
            _ => CommandEnd::Unknown,
        };
        let _ = waitpid(self.agent, None);
        end
    }

    fn agent_died(&self) -> InterceptError {
        InterceptError::Agent(match waitpid(self.agent, None) {
            Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => {
                format!("the namespace agent was killed by {sig}")
            }
            Ok(status) => format!("the namespace agent ended early ({status:?})"),
            Err(e) => format!("the namespace agent ended early ({e})"),
        })
    }

    /// Ends any process the command left running in the namespace, so that
    /// the namespace (and its rules) disappears. Returns how many there were.
    pub(crate) fn kill_leftovers(&self) -> usize {
        let Some(ns) = self.netns else { return 0 };
        let mut n = 0;
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let inode = std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .ok()
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m));
            if inode == Some(ns) && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                n += 1;
            }
        }
        n
    }
}

impl Sandbox {
    /// A sandbox over an existing namespace, reached through `ns`.
    pub(crate) fn over_thread(
        ns: Arc<NsThread>,
        diag: OwnedFd,
        redirects: Redirects,
        losses: LossTable,
        label: &str,
        udp_mark: u32,
    ) -> Sandbox {
        let netns = ns
            .run(|| crate::relay::own::ns_of("/proc/thread-self/ns/net"))
            .ok()
            .flatten()
            .unwrap_or(0);
        Sandbox {
            netns,
            udp_mark,
            addrs: None,
            door: Arc::new(Door::Thread(ns)),
            diag: Mutex::new(diag),
            redirects,
            names: Arc::new(NameTable::default()),
            gate: Gate::default(),
            losses,
            delay_line: None,
            label: label.into(),
            // Not netchaos's namespace: its sysctls stay as they are.
            sends_bounded: false,
        }
    }

    /// Whether every connection is dialled from inside the namespace: an
    /// existing namespace (attach, in-place) has its own network, while
    /// `run`'s reaches the world through the host.
    pub(crate) fn dials_inside(&self) -> bool {
        matches!(*self.door, Door::Thread(_))
    }

    /// Whether `dst` is the namespace's own (its addresses, link-local
    /// ones): reached inside, never dialled from the host, where the same
    /// address would be someone else.
    pub(crate) fn is_own(&self, dst: SocketAddr) -> bool {
        self.addrs.is_some_and(|a| a.is_own(dst.ip()))
    }

    /// The thread inside an existing namespace (attach, in-place), and the
    /// mark its DNS queries carry.
    pub(crate) fn thread(&self) -> Option<(Arc<NsThread>, u32)> {
        match &*self.door {
            Door::Thread(t) => Some((t.clone(), self.udp_mark)),
            Door::Agent { .. } => None,
        }
    }

    /// Whether something inside the namespace listens on `addr` (netchaos's
    /// own listeners aside).
    pub(crate) fn listens_inside(&self, addr: SocketAddr) -> bool {
        if addr.port() == self.redirects.tcp_port {
            return false;
        }
        let diag = self.diag.lock().expect("diag lock");
        match sock_diag::listeners(&diag) {
            Ok(ls) => ls.iter().any(|l| sock_diag::accepts(l, addr)),
            Err(e) => {
                tracing::warn!("cannot list the namespace's listeners: {e}");
                false
            }
        }
    }

    /// Whether the client `src` is still trying to reach `dst`: its socket
    /// is in the namespace (a client that gave up closed it). Unknown is
    /// taken as yes.
    pub(crate) fn client_waiting(&self, src: SocketAddr, dst: SocketAddr) -> bool {
        let diag = self.diag.lock().expect("diag lock");
        sock_diag::socket_exists(&diag, src, dst).unwrap_or(true)
    }

    /// Where a connection to `dst` is dialled from: an existing namespace
    /// dials everything inside; `run`'s namespace reaches the world through
    /// the host, except what lives inside it — its own addresses, and a
    /// loopback port where the command itself listens.
    pub(crate) fn route(&self, dst: SocketAddr) -> Route {
        let inside = self.dials_inside()
            || self.is_own(dst)
            || (crate::relay::is_loopback(dst) && self.listens_inside(dst));
        if inside { Route::Inside } else { Route::Host }
    }

    /// Connects to `dst` from inside the namespace. A loopback client
    /// (127.0.0.1, ::1) talking to a server of its own namespace keeps its
    /// source port in the server's eyes: the client's socket holds that
    /// 4-tuple, so the relay binds the namespace's own address with the
    /// client's port and the table's `loop_source` chain writes the
    /// client's address back as the source (conntrack keeps the two flows
    /// apart: the client's was redirected to the relay). Where the port is
    /// taken for that destination, any port.
    async fn connect_inside(
        &self,
        dst: SocketAddr,
        mss: Option<u32>,
        from: Option<SocketAddr>,
    ) -> io::Result<TcpStream> {
        if let Some(src) = from.and_then(|f| self.loop_stand_in(f, dst)) {
            match self.connect_inside_from(dst, mss, src).await {
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL)
                    ) => {}
                done => return done,
            }
        }
        let any: SocketAddr = if dst.is_ipv6() {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        };
        self.connect_inside_from(dst, mss, any).await
    }

    /// The address a dial for loopback client `from` binds (see
    /// [`Self::connect_inside`]): the namespace's own, with `from`'s port.
    fn loop_stand_in(&self, from: SocketAddr, dst: SocketAddr) -> Option<SocketAddr> {
        let own = self.addrs?;
        let ip: IpAddr = match (from, dst) {
            (SocketAddr::V4(f), SocketAddr::V4(d))
                if *f.ip() == Ipv4Addr::LOCALHOST && d.ip().is_loopback() =>
            {
                own.v4.into()
            }
            (SocketAddr::V6(f), SocketAddr::V6(d))
                if *f.ip() == Ipv6Addr::LOCALHOST && *d.ip() == Ipv6Addr::LOCALHOST =>
            {
                own.v6.into()
            }
            _ => return None,
        };
        (from.port() != 0).then(|| SocketAddr::new(ip, from.port()))
    }

    /// A connection to `dst` from `src`, with a socket made inside the
    /// namespace (by the agent, or by netchaos's thread in it). The socket
    /// is bound first and the SYN gate told, so that its SYN passes the
    /// redirect.
    async fn connect_inside_from(
        &self,
        dst: SocketAddr,
        mss: Option<u32>,
        src: SocketAddr,
    ) -> io::Result<TcpStream> {
        let door = self.door.clone();
        let std_sock = tokio::task::spawn_blocking(move || door.socket_inside(dst.is_ipv6()))
            .await
            .map_err(io::Error::other)??;
        let sock = tokio::net::TcpSocket::from_std_stream(std_sock);
        if let Some(mss) = mss {
            socket2::SockRef::from(&sock).set_tcp_mss(mss)?;
        }
        sock.bind(src)?;
        let _own = self.gate.expect_own(sock.local_addr()?, dst);
        sock.connect(dst).await
    }
}

impl Interception for Sandbox {
    fn names(&self, ip: IpAddr) -> Vec<String> {
        self.names.names(ip)
    }

    fn claim(&self, client: SocketAddr, dst: SocketAddr) -> Option<Handoff> {
        self.gate.take(client, dst)
    }

    fn route(&self, dst: SocketAddr) -> Route {
        Sandbox::route(self, dst)
    }

    fn dial_inside(
        &self,
        dst: SocketAddr,
        mss: Option<u32>,
        from: Option<SocketAddr>,
    ) -> DialFuture<'_> {
        Box::pin(self.connect_inside(dst, mss, from))
    }

    fn netns(&self) -> u64 {
        self.netns
    }

    fn sends_bounded(&self) -> bool {
        self.sends_bounded
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        if ip.is_loopback() || ip.is_unspecified() || self.is_own(SocketAddr::new(ip, 0)) {
            return true;
        }
        match &*self.door {
            Door::Thread(t) => t
                .run(move || crate::relay::own::is_host_address(ip))
                .unwrap_or(false),
            Door::Agent { .. } => false,
        }
    }

    fn partition(&self, client: SocketAddr) -> Arc<dyn Partition> {
        Arc::new(super::FlowPartition {
            door: self.door.clone(),
            client,
            opened: std::time::Instant::now(),
            delay_line: self.delay_line.clone(),
        })
    }

    fn peer_queues(&self, src: SocketAddr, dst: SocketAddr) -> Option<PeerQueues> {
        let diag = self.diag.lock().expect("diag lock");
        sock_diag::queues(&diag, src, dst)
    }
}

impl Door {
    /// Sends one request to the agent and waits (briefly) for its reply.
    fn request(requests: &Mutex<Channel>, req: &Request) -> io::Result<Vec<OwnedFd>> {
        let ch = requests.lock().expect("request channel lock");
        ch.set_recv_timeout(Some(Duration::from_secs(5)))?;
        ch.send(req, &[])?;
        match ch.recv::<Reply>()? {
            Some((Reply { error: None }, fds)) => Ok(fds),
            Some((Reply { error: Some(e) }, _)) => Err(io::Error::other(e)),
            None => Err(io::Error::other("the namespace agent is gone")),
        }
    }

    /// A new TCP socket inside the namespace; blocks briefly (call from a
    /// blocking context).
    fn socket_inside(&self, v6: bool) -> io::Result<std::net::TcpStream> {
        match self {
            Door::Agent { requests, .. } => {
                let mut fds = Self::request(requests, &Request::Socket { v6 })?;
                match fds.pop() {
                    Some(fd) if fds.is_empty() => Ok(std::net::TcpStream::from(fd)),
                    _ => Err(io::Error::other("the namespace agent sent no socket")),
                }
            }
            Door::Thread(t) => t
                .run(move || {
                    agent::inside_socket(v6).map(|s| std::net::TcpStream::from(OwnedFd::from(s)))
                })
                .map_err(io::Error::other)?,
        }
    }

    /// Drops every packet of `client`'s flow for `duration` (`None`: for
    /// good); blocks briefly.
    pub(crate) fn blackout(&self, client: SocketAddr, duration: Option<Duration>) -> Result<()> {
        match self {
            Door::Agent { requests, .. } => {
                let millis = duration.map(|d| d.as_millis().max(1) as u64);
                Self::request(requests, &Request::Blackout { client, millis })
                    .map_err(InterceptError::sys(
                        "the namespace agent could not start a blackout",
                    ))
                    .map(|_| ())
            }
            Door::Thread(t) => {
                t.run(move || super::nft::apply(&super::nft::blackout_command(client, duration)))?
            }
        }
    }
}
