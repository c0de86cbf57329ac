//! DNS for the namespace. UDP queries to port 53 are redirected to this
//! forwarder, which passes them to the host's resolvers from the host's
//! network namespace (so a loopback resolver such as 127.0.0.53 works), and
//! learns from the answers which names resolved to which addresses, so that
//! rules can match host names (`match.dst = ["api.example.com"]`).
//!
//! In an existing namespace (`attach`, `run --in-place`) the forwarder asks
//! that namespace's own resolvers, from inside it, with marked sockets that
//! interception lets through.
//!
//! TCP queries (port 53) are relayed like any other TCP connection, to the
//! resolver the client asked; names are learned from UDP answers only.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use simple_dns::rdata::RData;
use simple_dns::{OPCODE, Packet, PacketFlag};
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

use super::nsthread::NsThread;
use crate::events::{DnsRefusal, Events};

/// How long a learned name is kept at least, whatever the record's TTL: a
/// client may connect well after its lookup (connection pools, caches).
const KEEP_AT_LEAST: Duration = Duration::from_secs(600);
/// Most addresses remembered; beyond it, expired entries are dropped.
const MAX_ADDRESSES: usize = 65_536;
/// How long one resolver gets before the next is tried.
const RESOLVER_TIMEOUT: Duration = Duration::from_millis(1500);

/// Which names resolved to which addresses.
#[derive(Default)]
pub(crate) struct NameTable {
    map: Mutex<HashMap<IpAddr, Vec<(String, Instant)>>>,
}

impl NameTable {
    pub(crate) fn learn(&self, name: &str, ip: IpAddr, ttl: u32) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() {
            return;
        }
        let until = Instant::now() + KEEP_AT_LEAST.max(Duration::from_secs(u64::from(ttl)));
        let mut map = self.map.lock().expect("name table lock");
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&ip) {
            let now = Instant::now();
            map.retain(|_, names| {
                names.retain(|(_, t)| *t > now);
                !names.is_empty()
            });
            if map.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let names = map.entry(ip).or_default();
        match names.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = entry.1.max(until),
            None => names.push((name, until)),
        }
    }

    /// Names known for `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub(crate) fn names(&self, ip: IpAddr) -> Vec<String> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.map
            .lock()
            .expect("name table lock")
            .get(&ip)
            .map(|names| names.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// Records every address in a DNS response under the names it answers
    /// for: the question's name and each record's owner (CNAME chains).
    pub(crate) fn learn_response(&self, response: &[u8]) {
        let Ok(packet) = Packet::parse(response) else {
            return;
        };
        let question: Option<String> = packet.questions.first().map(|q| q.qname.to_string());
        for rr in &packet.answers {
            let ip = match &rr.rdata {
                RData::A(a) => IpAddr::V4(Ipv4Addr::from(a.address)),
                RData::AAAA(a) => IpAddr::V6(Ipv6Addr::from(a.address)),
                _ => continue,
            };
            self.learn(&rr.name.to_string(), ip, rr.ttl);
            if let Some(q) = &question {
                self.learn(q, ip, rr.ttl);
            }
        }
    }
}

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
/// counted in `events`.
pub(crate) async fn serve(
    socket: UdpSocket,
    resolvers: Arc<Vec<SocketAddr>>,
    names: Arc<NameTable>,
    inside: Option<(Arc<NsThread>, u32)>,
    events: Arc<Events>,
) {
    let socket = Arc::new(socket);
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let inside = inside.map(Arc::new);
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((n, client)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some(reply_size) = query_reply_size(&buf[..n]) else {
            events.dns_refused(DnsRefusal::Malformed);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            events.dns_refused(DnsRefusal::Busy);
            continue;
        };
        let query = buf[..n].to_vec();
        let (socket, resolvers, names) = (socket.clone(), resolvers.clone(), names.clone());
        let inside = inside.clone();
        tokio::spawn(async move {
            let answer = forward(&query, reply_size, &resolvers, inside.as_deref()).await;
            if let Some(answer) = answer {
                names.learn_response(&answer);
                let _ = socket.send_to(&answer, client).await;
            }
            drop(slot);
        });
    }
}

/// The reply size a well-formed standard query allows (its EDNS UDP size,
/// 512 bytes without EDNS); `None` for anything else (a response, another
/// opcode, not one question, not DNS at all).
pub(crate) fn query_reply_size(datagram: &[u8]) -> Option<usize> {
    let p = Packet::parse(datagram).ok()?;
    let ok = !p.has_flags(PacketFlag::RESPONSE)
        && p.opcode() == OPCODE::StandardQuery
        && p.questions.len() == 1;
    ok.then(|| {
        let edns = p.opt().map_or(512, |o| usize::from(o.udp_packet_size));
        edns.clamp(512, 65_535)
    })
}

/// Asks each resolver in turn; the first response to the query (same id,
/// a response) wins.
async fn forward(
    query: &[u8],
    reply_size: usize,
    resolvers: &[SocketAddr],
    inside: Option<&(Arc<NsThread>, u32)>,
) -> Option<Vec<u8>> {
    let id = query.get(..2)?;
    for r in resolvers {
        let Ok(sock) = query_socket(r.is_ipv6(), inside).await else {
            continue;
        };
        if sock.connect(r).await.is_err() || sock.send(query).await.is_err() {
            continue;
        }
        let got = tokio::time::timeout(RESOLVER_TIMEOUT, async {
            loop {
                // A waiting query holds no buffer: one is made for the
                // reply once it is there, of its size (at most what the
                // client allowed; a longer one is cut, as the kernel would).
                sock.readable().await.ok()?;
                let mut buf = vec![0u8; pending_datagram(&sock).clamp(12, reply_size)];
                match sock.try_recv(&mut buf) {
                    Ok(n) if n >= 12 && &buf[..2] == id && buf[2] & 0x80 != 0 => {
                        buf.truncate(n);
                        return Some(buf);
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => return None,
                }
            }
        })
        .await;
        if let Ok(Some(answer)) = got {
            return Some(answer);
        }
    }
    tracing::debug!("no resolver answered a DNS query ({resolvers:?})");
    None
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
    use simple_dns::rdata::{A, CNAME};
    use simple_dns::{CLASS, Name, Question, ResourceRecord};

    #[test]
    fn learns_names_and_cname_chains() {
        let mut p = Packet::new_reply(7);
        p.questions.push(Question::new(
            Name::new_unchecked("api.example.com"),
            simple_dns::TYPE::A.into(),
            simple_dns::CLASS::IN.into(),
            false,
        ));
        p.answers.push(ResourceRecord::new(
            Name::new_unchecked("api.example.com"),
            CLASS::IN,
            60,
            RData::CNAME(CNAME(Name::new_unchecked("lb.example.net"))),
        ));
        p.answers.push(ResourceRecord::new(
            Name::new_unchecked("lb.example.net"),
            CLASS::IN,
            60,
            RData::A(A {
                address: u32::from(Ipv4Addr::new(10, 1, 2, 3)),
            }),
        ));
        let t = NameTable::default();
        t.learn_response(&p.build_bytes_vec().unwrap());
        let mut names = t.names("10.1.2.3".parse().unwrap());
        names.sort();
        assert_eq!(names, vec!["api.example.com", "lb.example.net"]);
        assert_eq!(t.names("::ffff:10.1.2.3".parse().unwrap()).len(), 2);
        assert!(t.names("10.9.9.9".parse().unwrap()).is_empty());
        t.learn_response(b"garbage");
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
