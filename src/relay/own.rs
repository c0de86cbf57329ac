//! The addresses netchaos itself listens on, so that the relay never dials
//! them on anyone's behalf.
//!
//! Under `run` the relay dials a loopback destination on the host's
//! loopback, where the control API listens; under `attach` it dials from
//! inside the namespace where its own transparent listener is. A dial to
//! one of those addresses would hand the wrapped command the API (and so
//! every fault), or make netchaos dial itself until it runs out of
//! descriptors. Every listener is registered here with its network
//! namespace, and [`dial`](super::dial::dial) refuses a destination that is
//! one of them, in the same namespace, as a closed port would (RST:
//! ECONNREFUSED), with its own event kind.
//!
//! `run --api-for-command` lets the command reach the API and the API's
//! proxies ([`share_api`]); the relay's transparent listeners are never
//! dialled.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// What a listener of netchaos's is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The control API.
    Api,
    /// An explicit proxy (`proxy`, the API's `/proxies`, `--expose`).
    Proxy,
    /// A transparent listener that intercepted connections are redirected
    /// to: dialling it is a loop.
    Relay,
}

struct Entry {
    id: u64,
    /// The listener's network namespace (its inode).
    ns: u64,
    addr: SocketAddr,
    kind: Kind,
}

static LISTENING: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static SHARED: AtomicBool = AtomicBool::new(false);

/// Holds a listener's registration; dropping it forgets the address.
#[derive(Debug)]
pub(crate) struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        let mut l = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|e| e.id != self.0);
    }
}

/// The network namespace netchaos itself runs in (that of the thread that
/// first asks, which is the main thread's or a worker's: both stay in it).
pub(crate) fn host_ns() -> u64 {
    static HOST: OnceLock<u64> = OnceLock::new();
    *HOST.get_or_init(|| ns_of("/proc/thread-self/ns/net").unwrap_or(0))
}

/// The inode of the network namespace at `path`.
pub(crate) fn ns_of(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Registers `addr` (a listener's bound address) in namespace `ns`.
pub(crate) fn register(ns: u64, addr: SocketAddr, kind: Kind) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut l = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
    l.push(Entry {
        id,
        ns,
        addr: canonical(addr),
        kind,
    });
    Registration(id)
}

/// `run --api-for-command`: the command may reach the API and its proxies.
pub(crate) fn share_api() {
    SHARED.store(true, Ordering::Relaxed);
}

/// Who a dial is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialer {
    /// An intercepted client (the wrapped command, an attached
    /// namespace's process): `--api-for-command` may let it reach the API.
    /// `from`: its source address, whose port a dial keeps where it can
    /// (the server sees the port the client bound).
    Client { from: Option<SocketAddr> },
    /// A proxy's upstream, a resolver: never one of netchaos's listeners.
    Netchaos,
}

/// Whether `dialer` may dial a listener of this kind: only an
/// intercepted client, and only the API and proxies, with
/// `--api-for-command`.
pub(crate) fn may_dial(kind: Kind, dialer: Dialer) -> bool {
    SHARED.load(Ordering::Relaxed) && matches!(dialer, Dialer::Client { .. }) && kind != Kind::Relay
}

/// Which of netchaos's listeners a dial from namespace `ns` to `dst` would
/// reach, if any; `local` says whether an address is one of that
/// namespace's own (asked only for a listener on every address).
pub(crate) fn reached(ns: u64, dst: SocketAddr, local: impl Fn(IpAddr) -> bool) -> Option<Kind> {
    // Linux connects a destination of 0.0.0.0 (or [::]) to loopback.
    let dst = match canonical(dst) {
        d if d.ip().is_unspecified() && d.is_ipv4() => SocketAddr::from(([127, 0, 0, 1], d.port())),
        d if d.ip().is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, d.port())),
        d => d,
    };
    let l = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
    // Most dials match no listener's port: no system call for them.
    let mut hits = l
        .iter()
        .filter(|e| e.addr.port() == dst.port() && e.ns == ns)
        .peekable();
    hits.peek()?;
    let mut is_local = None;
    for e in hits {
        let ip = e.addr.ip();
        // `[::]` without V6ONLY takes IPv4 too; `0.0.0.0` only IPv4.
        let family = ip.is_ipv6() || dst.is_ipv4();
        let reaches = if ip.is_unspecified() {
            family && *is_local.get_or_insert_with(|| local(dst.ip()))
        } else {
            ip == dst.ip()
        };
        if reaches {
            return Some(e.kind);
        }
    }
    None
}

/// Whether `ip` is an address of netchaos's own namespace (a loopback or
/// unspecified one, or an interface's).
pub(crate) fn is_host_address(ip: IpAddr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || nix::ifaddrs::getifaddrs().is_ok_and(|mut addrs| {
            addrs.any(|a| {
                a.address.is_some_and(|s| {
                    s.as_sockaddr_in().map(|v4| IpAddr::V4(v4.ip())) == Some(ip)
                        || s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())) == Some(ip)
                })
            })
        })
}

/// The API connections the relay made for the command (`--api-for-command`),
/// by the relay's end: the API treats them as the command's, not as the
/// root-owned sockets they are. Bounded: the oldest are forgotten.
static FOR_COMMAND: Mutex<VecDeque<SocketAddr>> = Mutex::new(VecDeque::new());
const FOR_COMMAND_MAX: usize = 4096;

/// Notes a connection the relay dialled to the API for the command.
pub(crate) fn dialled_for_command(local: SocketAddr) {
    let mut q = FOR_COMMAND.lock().unwrap_or_else(|e| e.into_inner());
    if q.len() >= FOR_COMMAND_MAX {
        q.pop_front();
    }
    q.push_back(canonical(local));
}

/// Whether the API connection from `peer` is one the relay made for the
/// command. Asked when a request needs it (the relay notes its dial once
/// connected, which may be after the API accepted it), and not forgotten
/// then: an address reused by another connection errs on the side of a
/// refusal.
pub(crate) fn is_for_command(peer: SocketAddr) -> bool {
    let peer = canonical(peer);
    let q = FOR_COMMAND.lock().unwrap_or_else(|e| e.into_inner());
    q.iter().any(|a| *a == peer)
}

/// The network namespace a socket is in (`SIOCGSKNS`), where netchaos may
/// ask (it needs CAP_NET_ADMIN over that namespace).
pub(crate) fn ns_of_socket(fd: &impl std::os::fd::AsFd) -> Option<u64> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const SIOCGSKNS: libc::c_ulong = 0x894c;
    // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor
    // (owned below) or -1.
    let r = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), SIOCGSKNS as _) };
    if r < 0 {
        return None;
    }
    // SAFETY: `r` is a descriptor the kernel just opened for us.
    let ns = unsafe { OwnedFd::from_raw_fd(r) };
    std::fs::File::from(ns).metadata().ok().map(|m| m.ino())
}

/// IPv4-mapped IPv6 addresses as the IPv4 ones they are.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn r(ns: u64, a: &str) -> Option<Kind> {
        reached(ns, at(a), |ip: IpAddr| {
            ip.is_loopback() || ip == IpAddr::from([10, 1, 2, 3])
        })
    }

    // One test: the registry is process-wide, and tests run in parallel.
    #[test]
    fn a_registered_listener_is_refused_only_in_its_namespace() {
        let ns = 0xdead_beef;
        let other = 0xfeed;
        let api = register(ns, at("127.0.0.1:47001"), Kind::Api);
        let relay = register(ns, at("[::1]:47002"), Kind::Relay);
        let any = register(ns, at("0.0.0.0:47003"), Kind::Proxy);
        assert_eq!(r(ns, "127.0.0.1:47001"), Some(Kind::Api));
        assert_eq!(r(ns, "[::ffff:127.0.0.1]:47001"), Some(Kind::Api));
        // A connect to the unspecified address reaches loopback.
        assert_eq!(r(ns, "0.0.0.0:47001"), Some(Kind::Api));
        assert_eq!(r(ns, "[::ffff:0.0.0.0]:47001"), Some(Kind::Api));
        assert_eq!(r(ns, "[::]:47002"), Some(Kind::Relay));
        assert_eq!(r(other, "127.0.0.1:47001"), None);
        assert_eq!(r(ns, "127.0.0.2:47001"), None);
        assert_eq!(r(ns, "127.0.0.1:47009"), None);
        assert_eq!(r(ns, "[::1]:47002"), Some(Kind::Relay));
        // An unspecified IPv4 listener: every local IPv4 address (the
        // namespace's own, as it says), not IPv6.
        assert_eq!(r(ns, "127.9.9.9:47003"), Some(Kind::Proxy));
        assert_eq!(r(ns, "10.1.2.3:47003"), Some(Kind::Proxy));
        assert_eq!(r(ns, "0.0.0.0:47003"), Some(Kind::Proxy));
        assert_eq!(r(ns, "[::1]:47003"), None);
        assert_eq!(r(ns, "192.0.2.77:47003"), None);
        // Nobody may dial a listener unless the API is shared, and then
        // only a client, never the relay's own.
        let client = Dialer::Client { from: None };
        assert!(!may_dial(Kind::Api, client));
        assert!(!may_dial(Kind::Api, Dialer::Netchaos));
        drop(api);
        assert_eq!(r(ns, "127.0.0.1:47001"), None);
        drop((relay, any));
        assert_eq!(r(ns, "[::1]:47002"), None);
    }

    #[test]
    fn api_connections_made_for_the_command_are_known_once() {
        dialled_for_command(at("127.0.0.1:40999"));
        assert!(is_for_command(at("[::ffff:127.0.0.1]:40999")));
        assert!(is_for_command(at("127.0.0.1:40999")), "asked again");
        assert!(!is_for_command(at("127.0.0.1:40998")));
    }
}
