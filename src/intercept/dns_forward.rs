//! DNS for the namespace. UDP queries to port 53 are redirected to this
//! forwarder, which passes them to the host's resolvers from the host's
//! network namespace (so a loopback resolver such as 127.0.0.53 works),
//! after the DNS layer ([`crate::dns`]) has decided each query's fate —
//! forwarded, held, answered in the resolver's place, or never answered —
//! and learns from the answers which names resolved to which addresses.
//!
//! In an existing namespace (`attach`, `run --in-place`) the forwarder asks
//! that namespace's own resolvers, from inside it, with marked sockets that
//! interception lets through.
//!
//! TCP queries (port 53) reach the relay, which hands them to the DNS
//! layer's TCP side ([`crate::dns::tcp`]), towards the same resolvers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

use super::nsthread::NsThread;
use crate::dns::{Action, DnsLayer, Query, Transport};
use crate::events::DnsRefusal;

/// How long one resolver gets before the next is tried.
const RESOLVER_TIMEOUT: Duration = Duration::from_millis(1500);

/// Reads the `nameserver` lines of a resolv.conf. Besides addresses,
/// `ADDR:PORT` and `[V6]:PORT` are accepted (a netchaos extension, for
/// resolvers on other ports). None listed means 127.0.0.1, as in glibc —
/// and so does a missing file, unless it was `given` (`--resolv-conf`),
/// which must exist.
pub(crate) fn resolvers(path: &Path, given: bool) -> Result<Vec<SocketAddr>, BadResolvConf> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !given => String::new(),
        Err(e) => {
            return Err(BadResolvConf(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let Some(addr) = words.next() else { continue };
        // Drop a zone index (fe80::1%eth0): the forwarder is not link-local aware.
        let bare = addr.split('%').next().unwrap_or(addr);
        let parsed = bare
            .parse::<IpAddr>()
            .map(|ip| SocketAddr::new(ip, 53))
            .or_else(|_| bare.parse::<SocketAddr>())
            .map_err(|_| {
                BadResolvConf(format!(
                    "{}:{}: not a nameserver address: {addr:?}",
                    path.display(),
                    i + 1
                ))
            })?;
        out.push(parsed);
    }
    if out.is_empty() {
        out.push(SocketAddr::from((Ipv4Addr::LOCALHOST, 53)));
    }
    Ok(out)
}

/// Most queries being forwarded at once. Beyond it a new query is dropped
/// and counted (its client retries), so a flood costs at most this many
/// queries' worth of memory: each holds its own datagram and a socket, and
/// a reply of at most the size its client advertised (EDNS; 512 bytes
/// without) once one arrives.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// A resolv.conf that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadResolvConf(String);

/// Serves queries arriving on `socket` (inside the namespace) until the
/// task is dropped; queries go out from the host, or from inside the
/// namespace through `inside` (with the mark the redirect lets through).
/// Only well-formed queries are forwarded; the rest are dropped and
/// counted in `events`. A query every resolver failed at once (refused,
/// unreachable) is answered as that failure, through `unreachables`
/// when given ([`Unreachables`]).
pub(crate) async fn serve(
    socket: UdpSocket,
    layer: Arc<DnsLayer>,
    inside: Option<(Arc<NsThread>, u32)>,
    unreachables: Option<Arc<Unreachables>>,
) {
    let events = layer.events.clone();
    let socket = Arc::new(socket);
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let inside = inside.map(Arc::new);
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((n, client)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some(parsed) = Query::parse(&buf[..n]) else {
            events.dns_refused(DnsRefusal::Malformed);
            continue;
        };
        let reply_size = parsed.reply_size;
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            events.dns_refused(DnsRefusal::Busy);
            continue;
        };
        let query = buf[..n].to_vec();
        // Numbered here, in arrival order, not in a task the runtime may
        // start later than the next one: a replay numbers queries alike.
        let asked = layer.ask(client, parsed, Transport::Udp);
        let (socket, layer) = (socket.clone(), layer.clone());
        let inside = inside.clone();
        let unreachables = unreachables.clone();
        tokio::spawn(async move {
            let decision = &asked.decision;
            let answer = match &decision.action {
                Action::Silence => None,
                Action::Answer(made) => {
                    let a = crate::dns::reply::build(&query, made);
                    // A name sent elsewhere is known by that address too.
                    if let Some(a) = &a {
                        layer.names.learn_response(a);
                    }
                    a
                }
                Action::Forward => {
                    match forward(&query, reply_size, &layer.resolvers, inside.as_deref()).await {
                        Ok(a) => {
                            layer.names.learn_response(&a);
                            Some(a)
                        }
                        Err(NoAnswer::AtOnce(errno)) => {
                            // As directly: the client's resolver learns at
                            // once, and moves on.
                            if let (Some(u), Ok(to)) = (&unreachables, socket.local_addr()) {
                                u.send(client, to, &query, errno);
                            }
                            None
                        }
                        Err(NoAnswer::Silence) => None,
                    }
                }
            };
            // A held answer gives its query's slot back: slow DNS must not
            // turn into dropped queries; held answers have a bound of their own.
            drop(slot);
            let mut sent = answer.as_deref();
            if answer.is_some() && !decision.delay.is_zero() {
                match layer.held.clone().try_acquire_owned() {
                    Ok(held) => {
                        crate::timer::sleep(decision.delay).await;
                        drop(held);
                    }
                    Err(_) => {
                        layer.events.dns_refused(DnsRefusal::Busy);
                        sent = None;
                    }
                }
            }
            if let Some(a) = sent {
                let _ = socket.send_to(a, client).await;
            }
            layer.answered(&asked, sent);
        });
    }
}

/// Why a query got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoAnswer {
    /// Every resolver failed at once, the last with this errno: refused
    /// (an ICMP port unreachable), or not reachable from here.
    AtOnce(i32),
    /// One at least did not answer in time (or the forwarder itself
    /// failed): the client waits, as it would.
    Silence,
}

/// Whether a resolver's failure is one a client learns at once, directly.
fn at_once(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().filter(|c| {
        matches!(
            *c,
            libc::ECONNREFUSED
                | libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::EACCES
                | libc::EPERM
        )
    })
}

/// Asks each resolver in turn; the first response to the query (same id,
/// a response) wins.
async fn forward(
    query: &[u8],
    reply_size: usize,
    resolvers: &[SocketAddr],
    inside: Option<&(Arc<NsThread>, u32)>,
) -> Result<Vec<u8>, NoAnswer> {
    let id = query.get(..2).ok_or(NoAnswer::Silence)?;
    // The failure every resolver so far met at once, if they all did.
    let mut failed = None;
    let mut silent = resolvers.is_empty();
    for r in resolvers {
        let Ok(sock) = query_socket(r.is_ipv6(), inside).await else {
            silent = true;
            continue;
        };
        let sent = match sock.connect(r).await {
            Ok(()) => sock.send(query).await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            match at_once(&e) {
                Some(errno) => failed = Some(errno),
                None => silent = true,
            }
            continue;
        }
        let got = tokio::time::timeout(RESOLVER_TIMEOUT, async {
            loop {
                // A waiting query holds no buffer: one is made for the
                // reply once it is there, of its size (at most what the
                // client allowed; a longer one is cut, as the kernel would).
                // An ICMP error (a refused port) makes the socket report
                // an error, not readable: waited for too.
                let ready = sock
                    .ready(Interest::READABLE | Interest::ERROR)
                    .await
                    .map_err(|e| at_once(&e))?;
                if ready.is_error() {
                    match sock.take_error() {
                        Ok(Some(e)) => return Err(at_once(&e)),
                        Err(e) => return Err(at_once(&e)),
                        // Taken already: the readiness is stale.
                        Ok(None) => {
                            let _ = sock.try_io(Interest::ERROR, || {
                                Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                            });
                        }
                    }
                }
                if !ready.is_readable() {
                    continue;
                }
                let mut buf = vec![0u8; pending_datagram(&sock).clamp(12, reply_size)];
                match sock.try_recv(&mut buf) {
                    Ok(n) if n >= 12 && &buf[..2] == id && buf[2] & 0x80 != 0 => {
                        buf.truncate(n);
                        return Ok(buf);
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(at_once(&e)),
                }
            }
        })
        .await;
        match got {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(Some(errno))) => failed = Some(errno),
            Ok(Err(None)) | Err(_) => silent = true,
        }
    }
    tracing::debug!("no resolver answered a DNS query ({resolvers:?})");
    match failed {
        Some(errno) if !silent => Err(NoAnswer::AtOnce(errno)),
        _ => Err(NoAnswer::Silence),
    }
}

/// Raw ICMP sockets inside the namespace, to tell a client that its
/// resolver failed the way the path would have told it: an ICMP error
/// for its query, which the kernel reports on its (connected) socket —
/// a refused resolver as ECONNREFUSED, an unreachable one as ENETUNREACH
/// or EHOSTUNREACH (over IPv6, whose unreachable codes a UDP socket does
/// not report, as ECONNREFUSED), a filtered one as EACCES. The error
/// quotes the query as it reached the forwarder (redirected), as the
/// kernel's own would for a closed port there: conntrack translates it
/// back to the resolver the client asked. Without these (no CAP_NET_RAW
/// there), the client waits out its timeouts.
pub(crate) struct Unreachables {
    v4: Option<socket2::Socket>,
    v6: Option<socket2::Socket>,
}

impl Unreachables {
    /// Raw ICMP sockets in the calling thread's namespace (IPv6 when
    /// `v6`); `None` when IPv4's cannot be made.
    pub(crate) fn open(v6: bool) -> Option<Unreachables> {
        use socket2::{Domain, Protocol, Socket, Type};
        // Only for sending: each takes no incoming ICMP (a raw socket gets
        // a copy of every message of its protocol).
        let raw = |d, p, (level, name), block: &[u32]| {
            let s = Socket::new(d, Type::RAW.cloexec(), Some(p)).ok()?;
            s.set_nonblocking(true).ok()?;
            // SAFETY: `s` is a live socket; the option value is `block`,
            // whose address and size are passed together.
            let r = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&s),
                    level,
                    name,
                    block.as_ptr().cast(),
                    std::mem::size_of_val(block) as libc::socklen_t,
                )
            };
            (r == 0).then_some(s)
        };
        // <linux/icmp.h> ICMP_FILTER and <linux/icmpv6.h> ICMPV6_FILTER:
        // a set bit keeps that type out.
        const ICMP_FILTER: (libc::c_int, libc::c_int) = (libc::SOL_RAW, 1);
        const ICMPV6_FILTER: (libc::c_int, libc::c_int) = (libc::IPPROTO_ICMPV6, 1);
        Some(Unreachables {
            v4: Some(raw(
                Domain::IPV4,
                Protocol::ICMPV4,
                ICMP_FILTER,
                &[u32::MAX],
            )?),
            v6: if v6 {
                raw(
                    Domain::IPV6,
                    Protocol::ICMPV6,
                    ICMPV6_FILTER,
                    &[u32::MAX; 8],
                )
            } else {
                None
            },
        })
    }

    /// The sockets as [`Unreachables::fds`] gave them.
    pub(crate) fn from_fds(fds: Vec<std::os::fd::OwnedFd>) -> Unreachables {
        let mut it = fds.into_iter().map(socket2::Socket::from);
        Unreachables {
            v4: it.next(),
            v6: it.next(),
        }
    }

    /// Its sockets, IPv4's first, to pass to netchaos.
    pub(crate) fn fds(self) -> Vec<std::os::fd::OwnedFd> {
        [self.v4, self.v6]
            .into_iter()
            .flatten()
            .map(Into::into)
            .collect()
    }

    /// Tells `client` that its `query`, redirected `to` the forwarder,
    /// failed with `errno`.
    fn send(&self, client: SocketAddr, to: SocketAddr, query: &[u8], errno: i32) {
        let (sock, packet) = match (client, to) {
            (SocketAddr::V4(c), SocketAddr::V4(t)) => (&self.v4, icmp4(c, t, query, errno)),
            (SocketAddr::V6(c), SocketAddr::V6(t)) => (&self.v6, icmp6(c, t, query, errno)),
            _ => return,
        };
        if let Some(sock) = sock {
            let dst = SocketAddr::new(client.ip(), 0);
            if let Err(e) = sock.send_to(&packet, &dst.into()) {
                tracing::debug!("cannot tell {client} its resolver failed: {e}");
            }
        }
    }
}

/// What an ICMP error quotes of the datagram it answers: its UDP header
/// and the first bytes of its payload (RFC 792 asks for 8).
const QUOTED: usize = 8;

/// An ICMP destination-unreachable for the UDP datagram `query` from
/// `client` to `to` (RFC 792; type 3), its code saying `errno` as Linux
/// reads it (icmp_err_convert: only "fatal" codes reach a UDP socket).
fn icmp4(
    client: std::net::SocketAddrV4,
    to: std::net::SocketAddrV4,
    query: &[u8],
    errno: i32,
) -> Vec<u8> {
    let code = match errno {
        libc::ENETUNREACH => 6,           // network unknown
        libc::EHOSTUNREACH => 10,         // host administratively prohibited
        libc::EACCES | libc::EPERM => 13, // communication administratively prohibited
        _ => 3,                           // port unreachable: ECONNREFUSED
    };
    let quoted = &query[..query.len().min(QUOTED)];
    let udp_len = (8 + query.len()) as u16;
    let mut ip = Vec::with_capacity(20);
    ip.extend_from_slice(&[0x45, 0]);
    ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, libc::IPPROTO_UDP as u8, 0, 0]);
    ip.extend_from_slice(&client.ip().octets());
    ip.extend_from_slice(&to.ip().octets());
    let sum = checksum(&ip, 0);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut m = vec![3, code, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&ip);
    m.extend_from_slice(&udp_header(client.port(), to.port(), udp_len));
    m.extend_from_slice(quoted);
    let sum = checksum(&m, 0);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    m
}

/// The same over IPv6 (RFC 4443; type 1): a refused port (code 4) for
/// every failure but a filtered one (code 1), Linux reporting no other
/// unreachable code to a UDP socket. The kernel sums ICMPv6 messages.
fn icmp6(
    client: std::net::SocketAddrV6,
    to: std::net::SocketAddrV6,
    query: &[u8],
    errno: i32,
) -> Vec<u8> {
    let code = match errno {
        libc::EACCES | libc::EPERM => 1,
        _ => 4,
    };
    let quoted = &query[..query.len().min(QUOTED)];
    let udp_len = (8 + query.len()) as u16;
    let mut m = vec![1, code, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(&[0x60, 0, 0, 0]);
    m.extend_from_slice(&udp_len.to_be_bytes());
    m.extend_from_slice(&[libc::IPPROTO_UDP as u8, 64]);
    m.extend_from_slice(&client.ip().octets());
    m.extend_from_slice(&to.ip().octets());
    m.extend_from_slice(&udp_header(client.port(), to.port(), udp_len));
    m.extend_from_slice(quoted);
    m
}

/// A UDP header with no checksum (nothing checks a quoted one).
fn udp_header(src: u16, dst: u16, len: u16) -> [u8; 8] {
    let [a, b] = src.to_be_bytes();
    let [c, d] = dst.to_be_bytes();
    let [e, f] = len.to_be_bytes();
    [a, b, c, d, e, f, 0, 0]
}

/// The Internet checksum (RFC 1071) of `b`, from the partial sum `sum`.
fn checksum(b: &[u8], mut sum: u32) -> u16 {
    for pair in b.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The size of the next datagram waiting on `sock` (FIONREAD), 0 if none.
fn pending_datagram(sock: &UdpSocket) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at
    // a local; the descriptor is borrowed from a live socket for the call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) };
    if r < 0 { 0 } else { n.max(0) as usize }
}

/// A socket for one query: from the host, or marked inside the namespace.
async fn query_socket(
    v6: bool,
    inside: Option<&(Arc<NsThread>, u32)>,
) -> std::io::Result<UdpSocket> {
    let Some(t) = inside else {
        let bind: SocketAddr = if v6 {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        };
        return UdpSocket::bind(bind).await;
    };
    let (t, mark) = (t.0.clone(), t.1);
    let std_sock =
        tokio::task::spawn_blocking(move || t.run(move || super::agent::marked_udp(v6, mark)))
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)??;
    UdpSocket::from_std(std_sock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::{Name, Packet, Question};

    /// A query's reply size, `None` for what is not a standard query.
    fn query_reply_size(datagram: &[u8]) -> Option<usize> {
        Query::parse(datagram).map(|q| q.reply_size)
    }

    #[test]
    fn only_well_formed_queries_are_forwarded() {
        let mut q = Packet::new_query(9);
        q.questions.push(Question::new(
            Name::new_unchecked("example.com"),
            simple_dns::TYPE::A.into(),
            simple_dns::CLASS::IN.into(),
            false,
        ));
        let bytes = q.build_bytes_vec().unwrap();
        assert_eq!(query_reply_size(&bytes), Some(512));
        *q.opt_mut() = Some(simple_dns::rdata::OPT {
            opt_codes: Vec::new(),
            udp_packet_size: 4096,
            version: 0,
        });
        assert_eq!(query_reply_size(&q.build_bytes_vec().unwrap()), Some(4096));
        let reply = Packet::new_reply(9).build_bytes_vec().unwrap();
        assert_eq!(query_reply_size(&reply), None, "a response");
        assert_eq!(
            query_reply_size(&Packet::new_query(1).build_bytes_vec().unwrap()),
            None,
            "no question"
        );
        assert_eq!(query_reply_size(b"junk that is not DNS"), None);
        assert_eq!(query_reply_size(&[]), None);
    }

    /// The ICMP error for a refused query: the kernel takes it only if
    /// its sums hold, and conntrack finds the query by what it quotes.
    #[test]
    fn an_unreachable_quotes_the_query_as_it_reached_the_forwarder() {
        let client: std::net::SocketAddrV4 = "192.0.2.1:40000".parse().unwrap();
        let to: std::net::SocketAddrV4 = "127.0.0.1:5353".parse().unwrap();
        let query = [
            0x12u8, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'f', b'o', b'o', 0,
        ];
        let m = icmp4(client, to, &query, libc::ECONNREFUSED);
        assert_eq!(&m[..2], &[3, 3], "port unreachable");
        assert_eq!(checksum(&m, 0), 0, "the message's sum");
        let ip = &m[8..28];
        assert_eq!(checksum(ip, 0), 0, "the quoted header's sum");
        assert_eq!(ip[9], libc::IPPROTO_UDP as u8);
        assert_eq!(&ip[12..16], &[192, 0, 2, 1]);
        assert_eq!(&ip[16..20], &[127, 0, 0, 1]);
        assert_eq!(&m[28..32], &[0x9c, 0x40, 0x14, 0xe9], "40000 → 5353");
        assert_eq!(&m[36..], &query[..QUOTED]);
        assert_eq!(icmp4(client, to, &query, libc::ENETUNREACH)[1], 6);
        let c6: std::net::SocketAddrV6 = "[2001:db8::1]:40000".parse().unwrap();
        let t6: std::net::SocketAddrV6 = "[::1]:5353".parse().unwrap();
        let m6 = icmp6(c6, t6, &query, libc::ENETUNREACH);
        assert_eq!(
            &m6[..2],
            &[1, 4],
            "IPv6: a refused port, the code a UDP socket reports"
        );
        assert_eq!(m6.len(), 8 + 40 + 8 + QUOTED);
    }

    #[test]
    fn reads_resolv_conf() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("resolv.conf");
        std::fs::write(&p, "# c\nsearch x\nnameserver 127.0.0.53\nnameserver ::1\nnameserver 127.0.0.1:5353\noptions edns0\n").unwrap();
        let r = resolvers(&p, true).unwrap();
        assert_eq!(
            r,
            vec![
                "127.0.0.53:53".parse().unwrap(),
                "[::1]:53".parse().unwrap(),
                "127.0.0.1:5353".parse().unwrap()
            ]
        );
        std::fs::write(&p, "nameserver bogus\n").unwrap();
        assert!(
            resolvers(&p, true)
                .unwrap_err()
                .to_string()
                .contains("not a nameserver address")
        );
        assert_eq!(
            resolvers(&dir.path().join("none"), false).unwrap(),
            vec!["127.0.0.1:53".parse().unwrap()]
        );
        assert!(
            resolvers(&dir.path().join("none"), true).is_err(),
            "given, it must exist"
        );
    }
}
