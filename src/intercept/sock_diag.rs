//! The namespace's TCP listeners, from the kernel's socket diagnostics
//! (NETLINK_SOCK_DIAG, as `ss -ltn` reads them): the relay asks, for each
//! loopback connection, whether something inside the namespace listens on
//! its port. Reading `/proc/PID/net/tcp` instead costs a walk over every
//! socket of the namespace, connections and TIME_WAIT included; the diag
//! dump filtered to the LISTEN state visits only the listeners.
//!
//! A netlink socket answers for the namespace it was created in, so the
//! socket is made inside (by the agent, or by netchaos's thread there) and
//! used from anywhere.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::relay::{PeerQueues, PeerSockets};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send,
    socket,
};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;
const INET_DIAG_SKV6ONLY: u16 = 11;
/// `struct inet_diag_msg`, before its attributes.
const DIAG_MSG_LEN: usize = 72;

/// A listening socket: its address, and for IPv6 whether it is v6-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listener {
    pub addr: SocketAddr,
    pub v6only: bool,
}

/// A NETLINK_SOCK_DIAG socket in the calling thread's network namespace.
pub(crate) fn open() -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    Ok(fd)
}

/// Every TCP listener (IPv4 and IPv6) of the socket's namespace.
pub(crate) fn listeners(sock: &OwnedFd) -> io::Result<Vec<Listener>> {
    let mut out = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        send(sock.as_raw_fd(), &request(family), MsgFlags::empty())?;
        read_dump(sock, &mut out)?;
    }
    Ok(out)
}

/// A dump request for TCP sockets of `family` in the LISTEN state.
fn request(family: u8) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + 56);
    m.extend_from_slice(&(16u32 + 56).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid
    // struct inet_diag_req_v2: family, protocol, ext, pad, states, sockid.
    m.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    m.extend_from_slice(&[0u8; 48]);
    m
}

/// Reads the answers to one dump request, up to its NLMSG_DONE.
fn read_dump(sock: &OwnedFd, out: &mut Vec<Listener>) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    // Bounded: a namespace with more listeners than this many reads of
    // 64 KiB (some 700,000 of them) is not one netchaos will meet.
    for _ in 0..1000 {
        let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if parse(&buf[..n], out)? {
            return Ok(());
        }
    }
    Err(io::Error::other("socket diagnostics: no end of dump"))
}

/// Parses netlink messages; `true` at the end of the dump.
fn parse(mut b: &[u8], out: &mut Vec<Listener>) -> io::Result<bool> {
    while b.len() >= 16 {
        let len = u32::from_ne_bytes(b[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(b[4..6].try_into().expect("2 bytes"));
        if len < 16 || len > b.len() {
            return Err(io::Error::other("socket diagnostics: malformed message"));
        }
        let body = &b[16..len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = body
                    .get(0..4)
                    .map_or(0, |c| i32::from_ne_bytes(c.try_into().expect("4 bytes")));
                return Err(io::Error::from_raw_os_error(-code));
            }
            SOCK_DIAG_BY_FAMILY => {
                if let Some(l) = listener(body) {
                    out.push(l);
                }
            }
            _ => {}
        }
        b = &b[(len + 3) & !3..];
    }
    Ok(false)
}

/// One `struct inet_diag_msg` and its attributes.
fn listener(m: &[u8]) -> Option<Listener> {
    if m.len() < DIAG_MSG_LEN {
        return None;
    }
    let family = i32::from(m[0]);
    // sockid at 4: sport (be16), dport (be16), src[16], dst[16], if, cookie.
    let port = u16::from_be_bytes([m[4], m[5]]);
    let src: [u8; 16] = m[8..24].try_into().ok()?;
    let ip = if family == libc::AF_INET {
        IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(src))
    };
    let mut v6only = false;
    let mut attrs = &m[DIAG_MSG_LEN..];
    while attrs.len() >= 4 {
        let alen = usize::from(u16::from_ne_bytes([attrs[0], attrs[1]]));
        let akind = u16::from_ne_bytes([attrs[2], attrs[3]]);
        if alen < 4 || alen > attrs.len() {
            break;
        }
        if akind == INET_DIAG_SKV6ONLY && alen >= 5 {
            v6only = attrs[4] != 0;
        }
        attrs = &attrs[((alen + 3) & !3).min(attrs.len())..];
    }
    Some(Listener {
        addr: SocketAddr::new(ip, port),
        v6only,
    })
}

/// The owner (uid) of the TCP socket at `peer` connected to `local`, both
/// of this host: who is on the other end of a connection netchaos
/// accepted from loopback. `None` when no such socket is found (it closed,
/// or it is in another namespace).
pub(crate) fn peer_uid(peer: SocketAddr, local: SocketAddr) -> io::Result<Option<u32>> {
    lookup(&open()?, peer, local).map(|found| found.map(|f| f.uid))
}

/// Whether the namespace of `sock` holds a TCP socket bound to `src` and
/// connected (or connecting) to `dst`: a client still trying to connect.
pub(crate) fn socket_exists(sock: &OwnedFd, src: SocketAddr, dst: SocketAddr) -> io::Result<bool> {
    lookup(sock, src, dst).map(|found| found.is_some())
}

/// The queues of the TCP socket bound to `src` and connected to `dst` in
/// the namespace of `sock`, if there is one: how far its owner has read
/// what the relay sent it, and whether it waits on the relay to take what
/// it wrote.
pub(crate) fn queues(sock: &OwnedFd, src: SocketAddr, dst: SocketAddr) -> Option<PeerQueues> {
    lookup(sock, src, dst).ok().flatten().map(|f| f.queues)
}

/// Peers' sockets in the namespace netchaos runs in (the host's): those
/// of `proxy`'s clients, and of upstreams on this host.
pub(crate) struct HostSockets(std::sync::Mutex<OwnedFd>);

impl HostSockets {
    pub(crate) fn open() -> io::Result<HostSockets> {
        Ok(HostSockets(std::sync::Mutex::new(open()?)))
    }
}

impl PeerSockets for HostSockets {
    fn queues(&self, src: SocketAddr, dst: SocketAddr) -> Option<PeerQueues> {
        queues(&self.0.lock().expect("diag lock"), src, dst)
    }
}

/// What an exact lookup found of one socket.
struct Found {
    uid: u32,
    queues: PeerQueues,
}

/// The TCP socket from `peer` to `local` in `sock`'s namespace, if there
/// is one (an exact lookup, not a dump).
fn lookup(sock: &OwnedFd, peer: SocketAddr, local: SocketAddr) -> io::Result<Option<Found>> {
    let v4 = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    };
    let (family, src, dst) = match (v4(peer), v4(local)) {
        (Some(p), Some(l)) => {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s[..4].copy_from_slice(&p.octets());
            d[..4].copy_from_slice(&l.octets());
            (libc::AF_INET as u8, s, d)
        }
        _ => {
            let six = |a: SocketAddr| match a.ip() {
                IpAddr::V6(v6) => v6.octets(),
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            };
            (libc::AF_INET6 as u8, six(peer), six(local))
        }
    };
    let mut m = Vec::with_capacity(16 + 56);
    m.extend_from_slice(&(16u32 + 56).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&2u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid
    m.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&src);
    m.extend_from_slice(&dst);
    m.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    m.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    send(sock.as_raw_fd(), &m, MsgFlags::empty())?;
    let mut buf = vec![0u8; 8 * 1024];
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    let b = &buf[..n];
    if b.len() < 16 {
        return Err(io::Error::other("socket diagnostics: short answer"));
    }
    let kind = u16::from_ne_bytes([b[4], b[5]]);
    match kind {
        NLMSG_ERROR => {
            let code = b
                .get(16..20)
                .map_or(0, |c| i32::from_ne_bytes(c.try_into().expect("4 bytes")));
            match -code {
                libc::ENOENT => Ok(None),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        }
        // inet_diag_msg: family, state, timer, retrans (4), sockid (48),
        // then expires, rqueue, wqueue, uid (4 each).
        SOCK_DIAG_BY_FAMILY => {
            let word = |at: usize| {
                b.get(16 + at..16 + at + 4)
                    .map(|u| u32::from_ne_bytes(u.try_into().expect("4 bytes")))
            };
            Ok(match (word(56), word(60), word(64)) {
                (Some(rqueue), Some(wqueue), Some(uid)) => Some(Found {
                    uid,
                    queues: PeerQueues {
                        unread: rqueue as usize,
                        unacked: wqueue as usize,
                    },
                }),
                _ => None,
            })
        }
        _ => Err(io::Error::other("socket diagnostics: unexpected answer")),
    }
}

/// Whether `l` accepts connections to `dst`.
pub(crate) fn accepts(l: &Listener, dst: SocketAddr) -> bool {
    if l.addr.port() != dst.port() {
        return false;
    }
    let d = match dst.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(dst.ip(), IpAddr::V4),
        v4 => v4,
    };
    match (l.addr.ip(), d) {
        (IpAddr::V4(a), IpAddr::V4(b)) => a.is_unspecified() || a == b,
        (IpAddr::V6(a), IpAddr::V6(b)) => a.is_unspecified() || a == b,
        // A dual-stack IPv6 listener also takes IPv4.
        (IpAddr::V6(a), IpAddr::V4(b)) => {
            !l.v6only && (a.is_unspecified() || a.to_ipv4_mapped() == Some(b))
        }
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_namespaces_listeners() {
        let sock = open().unwrap();
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = v4.local_addr().unwrap();
        let found = listeners(&sock).unwrap();
        assert!(found.iter().any(|l| l.addr == a), "{a} in {found:?}");
        assert!(found.iter().any(|l| accepts(l, a)));
        // A connection is not a listener.
        let conn = std::net::TcpStream::connect(a).unwrap();
        let local = conn.local_addr().unwrap();
        assert!(!listeners(&sock).unwrap().iter().any(|l| l.addr == local));
    }

    #[test]
    fn the_owner_of_a_loopback_peer_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, peer) = l.accept().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(peer_uid(peer, l.local_addr().unwrap()).unwrap(), Some(me));
        drop(c);
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(peer_uid(gone, l.local_addr().unwrap()).unwrap(), None);
    }

    /// What the relay waits on before it resets a peer: the bytes that
    /// peer's socket holds unread, and what its owner wrote that is not
    /// taken.
    #[test]
    fn a_peers_unread_bytes_are_seen_until_it_reads_them() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let host = HostSockets::open().unwrap();
        // The client's socket, as the server's side looks it up.
        let (peer, local) = (s.peer_addr().unwrap(), s.local_addr().unwrap());
        let at = || host.queues(peer, local);
        assert_eq!(
            at(),
            Some(PeerQueues {
                unread: 0,
                unacked: 0
            })
        );
        (&s).write_all(&[7u8; 1000]).unwrap();
        // Bounded wait for loopback's delivery (a busy machine defers it).
        for _ in 0..2000 {
            if at().is_some_and(|q| q.unread == 1000) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(at().map(|q| q.unread), Some(1000));
        let mut buf = [0u8; 1000];
        c.read_exact(&mut buf).unwrap();
        assert_eq!(at().map(|q| q.unread), Some(0));
        drop(c);
        drop(s);
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(host.queues(gone, l.local_addr().unwrap()), None);
    }

    #[test]
    fn matching() {
        let l = |s: &str, v6only| Listener {
            addr: s.parse().unwrap(),
            v6only,
        };
        assert!(accepts(
            &l("0.0.0.0:80", false),
            "127.0.0.1:80".parse().unwrap()
        ));
        assert!(!accepts(
            &l("0.0.0.0:80", false),
            "127.0.0.1:81".parse().unwrap()
        ));
        assert!(accepts(
            &l("127.0.0.1:8080", false),
            "[::ffff:127.0.0.1]:8080".parse().unwrap()
        ));
        assert!(!accepts(
            &l("127.0.0.1:8080", false),
            "127.0.0.2:8080".parse().unwrap()
        ));
        assert!(accepts(
            &l("[::]:9000", false),
            "127.0.0.1:9000".parse().unwrap()
        ));
        assert!(!accepts(
            &l("[::]:9000", true),
            "127.0.0.1:9000".parse().unwrap()
        ));
        assert!(accepts(
            &l("[::1]:9000", true),
            "[::1]:9000".parse().unwrap()
        ));
        assert!(!accepts(
            &l("127.0.0.1:9000", false),
            "[::1]:9000".parse().unwrap()
        ));
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let mut out = Vec::new();
        assert!(parse(&[0u8; 3], &mut out).is_ok());
        let mut bad = vec![0u8; 16];
        bad[0] = 200; // longer than the buffer
        assert!(parse(&bad, &mut out).is_err());
        assert!(listener(&[0u8; 10]).is_none());
    }
}
