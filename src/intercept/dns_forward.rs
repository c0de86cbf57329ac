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
/// counted in `events`.
pub(crate) async fn serve(
    socket: UdpSocket,
    layer: Arc<DnsLayer>,
    inside: Option<(Arc<NsThread>, u32)>,
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
                    let answer =
                        forward(&query, reply_size, &layer.resolvers, inside.as_deref()).await;
                    if let Some(a) = &answer {
                        layer.names.learn_response(a);
                    }
                    answer
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
