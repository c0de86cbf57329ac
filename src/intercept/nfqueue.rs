//! Just enough of the NFQUEUE netlink protocol to hold SYNs in user space:
//! bind a queue, receive queued packets, and send verdicts (accept, with an
//! optional mark, or drop).
//!
//! The socket is opened inside the namespace (netlink sockets belong to the
//! network namespace that created them) by the agent, configured there, and
//! handed to netchaos, which reads packets and answers verdicts from outside.
//! (The `nfq` crate opens its own socket and hides it, so it cannot travel
//! between processes; this module works on any descriptor.)
//!
//! Message layout (all in `linux/netfilter/nfnetlink_queue.h`): a netlink
//! header, an `nfgenmsg`, then attributes (`nlattr`, 4-byte aligned).
//! Multi-byte fields inside attributes are big-endian; netlink headers are
//! native-endian.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, SystemTime};

use tokio::io::unix::AsyncFd;

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, send, socket,
};

use super::netlink::{NLM_F_ACK, attrs, finish, messages, put_attr, request};

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_PAYLOAD: u16 = 10;
/// When the packet was queued (wall clock; present while the kernel
/// stamps packets: see [`stamp_packets`]).
const NFQA_TIMESTAMP: u16 = 4;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
/// Accept packets instead of dropping them when the queue is full (which
/// netchaos turns off).
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;

const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;

/// Bytes of each packet copied to user space: IP and TCP headers.
const COPY_RANGE: u32 = 128;
/// The SYN gate's queue: SYNs waiting for a verdict.
pub(crate) const GATE_MAXLEN: u32 = 4096;

/// A queued packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packet {
    pub id: u32,
    pub payload: Vec<u8>,
    /// When the kernel queued it, if it said.
    pub queued: Option<SystemTime>,
}

/// What to do with a queued packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Let it continue, setting the packet mark if given.
    Accept(Option<u32>),
    Drop,
}

/// Opens a netfilter netlink socket and binds queue `num`, holding at most
/// `maxlen` packets, in the current network namespace (needs CAP_NET_ADMIN
/// there).
pub(crate) fn open(num: u16, maxlen: u32) -> io::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    // Receive buffer room for bursts: a packet the kernel cannot hand over
    // is dropped. Past rmem_max where the namespace lets us (the agent
    // holds CAP_NET_ADMIN over it).
    let want: libc::c_int = (maxlen as libc::c_int).saturating_mul(512).max(1 << 20);
    if nix::sys::socket::setsockopt(
        &fd,
        nix::sys::socket::sockopt::RcvBufForce,
        &(want as usize),
    )
    .is_err()
    {
        let _ = socket2::SockRef::from(&fd).set_recv_buffer_size(want as usize);
    }
    request(
        &fd,
        &config_msg(num, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]),
    )?;
    let mut params = COPY_RANGE.to_be_bytes().to_vec();
    params.push(NFQNL_COPY_PACKET);
    request(&fd, &config_msg(num, NFQA_CFG_PARAMS, &params))?;
    request(
        &fd,
        &config_msg(num, NFQA_CFG_QUEUE_MAXLEN, &maxlen.to_be_bytes()),
    )?;
    // No fail-open: a SYN that finds the queue full is dropped (its client
    // retransmits) rather than let through with whatever mark its socket
    // set, which could then pass for the relay's own.
    let mut flags = config_msg(num, NFQA_CFG_FLAGS, &0u32.to_be_bytes());
    put_attr(
        &mut flags,
        NFQA_CFG_MASK,
        &NFQA_CFG_F_FAIL_OPEN.to_be_bytes(),
    );
    finish(&mut flags);
    request(&fd, &flags)?;
    Ok(fd)
}

/// Encodes the verdict for packet `id` of queue `num`.
pub(crate) fn verdict_msg(num: u16, id: u32, verdict: Verdict) -> Vec<u8> {
    let mut m = header(NFQNL_MSG_VERDICT, 0, num);
    let (code, mark) = match verdict {
        Verdict::Accept(mark) => (NF_ACCEPT, mark),
        Verdict::Drop => (NF_DROP, None),
    };
    let mut vh = code.to_be_bytes().to_vec();
    vh.extend_from_slice(&id.to_be_bytes());
    put_attr(&mut m, NFQA_VERDICT_HDR, &vh);
    if let Some(mark) = mark {
        put_attr(&mut m, NFQA_MARK, &mark.to_be_bytes());
    }
    finish(&mut m);
    m
}

/// The addresses of a queued TCP packet (IPv4, or IPv6 without extension
/// headers), its IP length, and its TCP header onwards (at least the ports);
/// `None` for anything else.
pub(crate) fn tcp_packet(p: &[u8]) -> Option<(SocketAddr, SocketAddr, usize, &[u8])> {
    let (src, dst, len, tcp): (IpAddr, IpAddr, usize, &[u8]) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl + 4 || p[9] != 6 {
                return None;
            }
            let a = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let b = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
            (a.into(), b.into(), len, &p[ihl..])
        }
        6 => {
            if p.len() < 44 || p[6] != 6 {
                return None;
            }
            let a: [u8; 16] = p[8..24].try_into().ok()?;
            let b: [u8; 16] = p[24..40].try_into().ok()?;
            let len = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
            (
                Ipv6Addr::from(a).into(),
                Ipv6Addr::from(b).into(),
                len,
                &p[40..],
            )
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    Some((
        SocketAddr::new(src, sport),
        SocketAddr::new(dst, dport),
        len,
        tcp,
    ))
}

/// Asks the kernel to stamp the packets it queues (`NFQA_TIMESTAMP`): it
/// does while any socket on the host asks for receive stamps, which
/// `SO_TIMESTAMP` on the queue's own socket does. Whether it will.
pub(crate) fn stamp_packets(queue: &OwnedFd) -> bool {
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(queue, sockopt::ReceiveTimestamp, &true).is_ok()
}

/// An `NFQA_TIMESTAMP` (big-endian seconds and microseconds).
fn timestamp(data: &[u8]) -> Option<SystemTime> {
    let sec = u64::from_be_bytes(data.get(..8)?.try_into().ok()?);
    let usec = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
    let since = Duration::from_secs(sec).checked_add(Duration::from_micros(usec.min(999_999)))?;
    SystemTime::UNIX_EPOCH.checked_add(since)
}

/// A bound queue socket, non-blocking, on the runtime's reactor.
pub(crate) fn into_async(queue: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    nix::fcntl::fcntl(
        &queue,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )?;
    // SAFETY: `queue` is an OwnedFd moved into the AsyncFd, so the
    // descriptor stays open and the same for the AsyncFd's whole life.
    unsafe { AsyncFd::register(queue) }.map_err(io::Error::from)
}

/// Sends verdict messages (one or a batch) in one `send`, waiting for room
/// on the socket (verdicts are small; this almost never waits).
pub(crate) async fn send_async(queue: &AsyncFd<OwnedFd>, bytes: &[u8]) -> io::Result<()> {
    loop {
        let mut guard = queue.writable().await?;
        match guard.try_io(|q| {
            send(q.get_ref().as_raw_fd(), bytes, MsgFlags::empty()).map_err(io::Error::from)
        }) {
            Ok(r) => return r.map(drop),
            Err(_would_block) => continue,
        }
    }
}

/// Appends the verdict for packet `id` of queue `num` to a batch: netlink
/// takes many messages in one `send`.
pub(crate) fn push_verdict(batch: &mut Vec<u8>, num: u16, id: u32, verdict: Verdict) {
    batch.extend_from_slice(&verdict_msg(num, id, verdict));
}

/// The queued packets in a buffer received from the socket.
pub(crate) fn packets(buf: &[u8]) -> Vec<Packet> {
    messages(buf)
        .filter(|m| m.kind == (NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET))
        .filter_map(|m| {
            // Skip the 4-byte nfgenmsg, then walk the attributes.
            let mut id = None;
            let mut payload = None;
            let mut queued = None;
            for (kind, data) in attrs(m.body.get(4..)?) {
                match kind {
                    NFQA_PACKET_HDR if data.len() >= 4 => {
                        id = Some(u32::from_be_bytes(data[..4].try_into().expect("4 bytes")));
                    }
                    NFQA_PAYLOAD => payload = Some(data.to_vec()),
                    NFQA_TIMESTAMP => queued = timestamp(data),
                    _ => {}
                }
            }
            Some(Packet {
                id: id?,
                payload: payload.unwrap_or_default(),
                queued,
            })
        })
        .collect()
}

/// A netlink header (length patched by [`finish`]) and an nfgenmsg.
fn header(msg: u16, flags: u16, queue: u16) -> Vec<u8> {
    let mut m = super::netlink::header(NFNL_SUBSYS_QUEUE << 8 | msg, flags);
    m.push(libc::AF_UNSPEC as u8); // nfgen_family
    m.push(0); // NFNETLINK_V0
    m.extend_from_slice(&queue.to_be_bytes()); // res_id
    m
}

fn config_msg(queue: u16, attr: u16, data: &[u8]) -> Vec<u8> {
    let mut m = header(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
    put_attr(&mut m, attr, data);
    finish(&mut m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_well_formed() {
        let m = verdict_msg(7, 0x01020304, Verdict::Accept(Some(0x6e640100)));
        assert_eq!(
            u32::from_ne_bytes(m[..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 3 << 8 | 1);
        assert_eq!(&m[18..20], &7u16.to_be_bytes(), "queue number in res_id");
        let body: Vec<(u16, Vec<u8>)> = attrs(&m[20..]).map(|(k, d)| (k, d.to_vec())).collect();
        assert_eq!(body[0].0, NFQA_VERDICT_HDR);
        assert_eq!(body[0].1, [0, 0, 0, 1, 1, 2, 3, 4]);
        assert_eq!(body[1], (NFQA_MARK, 0x6e640100u32.to_be_bytes().to_vec()));
        let d = verdict_msg(0, 9, Verdict::Drop);
        assert_eq!(attrs(&d[20..]).count(), 1);
    }

    #[test]
    fn packets_are_parsed_and_garbage_is_ignored() {
        // Build a packet message as the kernel would.
        let mut m = header(NFQNL_MSG_PACKET, 0, 0);
        let mut hdr = 42u32.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0x08, 0x00, 3]);
        put_attr(&mut m, NFQA_PACKET_HDR, &hdr);
        put_attr(&mut m, NFQA_PAYLOAD, &[0x45, 1, 2, 3, 4]);
        finish(&mut m);
        let two = [m.clone(), m].concat();
        let p = packets(&two);
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0],
            Packet {
                id: 42,
                payload: vec![0x45, 1, 2, 3, 4],
                queued: None,
            }
        );
        assert!(packets(&[1, 2, 3]).is_empty());
        assert!(packets(&[0xff; 64]).is_empty());
    }

    #[test]
    fn a_queued_packet_carries_the_kernels_stamp() {
        let mut m = header(NFQNL_MSG_PACKET, 0, 0);
        put_attr(&mut m, NFQA_PACKET_HDR, &[0, 0, 0, 7, 0x08, 0x00, 3]);
        let mut ts = 1_700_000_000u64.to_be_bytes().to_vec();
        ts.extend_from_slice(&250_000u64.to_be_bytes());
        put_attr(&mut m, NFQA_TIMESTAMP, &ts);
        finish(&mut m);
        let p = packets(&m);
        let at = Duration::from_secs(1_700_000_000) + Duration::from_millis(250);
        assert_eq!(p[0].queued, Some(SystemTime::UNIX_EPOCH + at));
        // A short attribute is no stamp, nor one past any clock.
        assert_eq!(timestamp(&ts[..12]), None);
        assert_eq!(timestamp(&[0xff; 16]), None);
    }

    /// The kernel stamps what it queues once the queue's socket asks for
    /// receive stamps (a socket that may not ask gets `false`).
    #[test]
    fn the_queue_socket_asks_for_stamps() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        assert!(stamp_packets(&OwnedFd::from(s)));
    }
}
