//! Socket options and queries the relay needs beyond what tokio offers.
//! Each `unsafe` call sits in its own small function with the invariant it
//! relies on.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::socket::MsgFlags;
use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// Makes the next close send RST instead of FIN (SO_LINGER with a zero
/// timeout), which is how an abort is mirrored to a peer.
pub(crate) fn set_linger_zero(s: &TcpStream) {
    let _ = SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Ends the connection with an RST now, while the descriptor stays open
/// (it belongs to a caller that closes it later): a `connect()` to an
/// `AF_UNSPEC` address dissolves a TCP socket's association (connect(2)),
/// and the kernel resets a peer that has not closed, as `close()` with
/// unread data would. Errors mean the socket is already gone.
pub(crate) fn abort(s: &TcpStream) {
    let addr = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: `s` is an open socket borrowed for the call; `addr` is a
    // local sockaddr of the length passed, read by the kernel only.
    let _ = unsafe {
        libc::connect(
            s.as_raw_fd(),
            &addr,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
}

/// Sends FIN (half-close); errors mean the socket is already gone.
pub(crate) fn shutdown_write(s: &TcpStream) {
    let _ = SockRef::from(s).shutdown(std::net::Shutdown::Write);
}

/// Relay sockets: no Nagle delay (the relay mirrors the sender's timing,
/// whose own Nagle already applied), and keepalive, so that an idle
/// connection whose peer vanished is given up on in about `peer_timeout`
/// and the other side reset.
///
/// No `TCP_USER_TIMEOUT`: since Linux 5.11 it also aborts a connection
/// whose peer keeps its window closed for that long while answering every
/// probe (a reader that pauses), which RFC 1122 (4.2.2.17) says must stay
/// open and a direct connection keeps. Unacknowledged data towards a
/// vanished peer is retransmitted until the kernel gives up
/// (`tcp_retries2`, about 15 minutes), as the client's own socket would.
/// Returns whether the receive buffer was bounded (see [`RecvGrowth`]).
pub(crate) fn tune(s: &TcpStream, peer_timeout: Duration) -> bool {
    set_relay_options(SockRef::from(s), peer_timeout);
    tune_accepted(s)
}

/// [`tune`]'s options alone, for a socket whose buffers are sized
/// elsewhere (`relay::holding`).
pub(crate) fn set_options(s: &TcpStream, peer_timeout: Duration) {
    set_relay_options(SockRef::from(s), peer_timeout);
}

/// `TCP_CLOSE` of the kernel's TCP states (include/net/tcp_states.h).
const TCP_CLOSE: u8 = 7;

/// What [`tune_upstream`] found and did.
pub(crate) struct Upstream {
    /// The receive buffer is bounded and may grow ([`RecvGrowth`]).
    pub grows: bool,
    /// The upstream has already reset the connection (it answered and
    /// reset before the relay took the socket; the dial took the error):
    /// the end of stream its reads come to is that RST.
    pub reset: bool,
}

/// Sets [`tune`]'s options on a listening socket, which the sockets it
/// accepts inherit (Linux copies them at accept): seven system calls
/// fewer per connection. Returns whether every one was set, so that
/// accepted sockets need only [`tune_accepted`].
pub(crate) fn tune_listener(l: &tokio::net::TcpListener, peer_timeout: Duration) -> bool {
    set_relay_options(SockRef::from(l), peer_timeout)
}

/// [`tune`] for a socket to the upstream; `partitioned`: a partition may
/// cut it, and then the relay must hold little of a near server's stream,
/// as a real path holds nothing — a small buffer that does not grow. (Over
/// a longer path the buffer stays the kernel's: a small one would cap the
/// rate.) Returns whether the receive buffer is bounded and may grow
/// ([`RecvGrowth`]).
pub(crate) fn tune_upstream(s: &TcpStream, peer_timeout: Duration, partitioned: bool) -> Upstream {
    set_relay_options(SockRef::from(s), peer_timeout);
    let info = tcp_info(s);
    let capped = tune_path(s, info.as_ref());
    if capped && partitioned {
        hold_little(s);
    }
    Upstream {
        grows: capped && !partitioned,
        // Before the relay wrote or shut down anything, only an RST
        // closes a connection (a FIN leaves it in CLOSE_WAIT).
        reset: info.is_some_and(|i| i.tcpi_state == TCP_CLOSE),
    }
}

/// [`tune`] for a socket accepted from a listener [`tune_listener`] set up:
/// only what depends on the connection's own path.
pub(crate) fn tune_accepted(s: &TcpStream) -> bool {
    tune_path(s, tcp_info(s).as_ref())
}

/// [`tune_accepted`], from the socket's `TCP_INFO` (`None`: not known).
fn tune_path(s: &TcpStream, info: Option<&libc::tcp_info>) -> bool {
    // What the relay holds of a stream that cannot move on stays close to
    // what a direct path would hold (the peers' own buffers): no more than
    // LOWAT unsent bytes queued towards a peer that is not reading, and,
    // towards a peer on this host, a bounded receive buffer instead of one
    // autotuned to megabytes. Over a longer path the buffer stays
    // autotuned: a fixed one would cap the rate at RECV_BUF per round trip.
    near(info.and_then(path_rtt), || on_this_host(s))
        && SockRef::from(s).set_recv_buffer_size(RECV_BUF).is_ok()
}

/// Whether a handshake's round trip says the peer is near: below
/// [`LOCAL_RTT`], or (asked only then) `local` and below
/// [`SLOWED_LOCAL_RTT`]. On a busy machine a loopback handshake can take
/// milliseconds (softirqs deferred to ksoftirqd), and a local peer judged
/// far kept a buffer autotuned to megabytes in front of a server that
/// never reads (a CI run: 9.36 MB accepted where a direct connection
/// takes 4.29). A local path made long on purpose — netem on `lo`, the
/// packet delay line — takes longer and keeps its window.
fn near(rtt: Option<Duration>, local: impl FnOnce() -> bool) -> bool {
    rtt.is_some_and(|rtt| rtt < LOCAL_RTT || (rtt < SLOWED_LOCAL_RTT && local()))
}

/// Whether the peer is on this host: at a loopback address or the
/// socket's own, or reached at a loopback address (only this host's
/// processes can be: `run`'s redirect makes a namespace client's
/// connection to anywhere arrive at the relay's loopback listener).
fn on_this_host(s: &TcpStream) -> bool {
    match (s.peer_addr(), s.local_addr()) {
        (Ok(peer), Ok(local)) => {
            super::is_loopback(peer) || super::is_loopback(local) || peer.ip() == local.ip()
        }
        _ => false,
    }
}

/// No Nagle, keepalive after `peer_timeout`, and at most
/// [`NOTSENT_LOWAT`] unsent bytes; whether all were set. Also `TCP_INQ`
/// (each read says what it left: [`recv_counted`]), not required.
fn set_relay_options(sock: SockRef<'_>, peer_timeout: Duration) -> bool {
    let t = peer_timeout.as_secs().max(2);
    let ka = TcpKeepalive::new()
        .with_time(Duration::from_secs(t / 2))
        .with_interval(Duration::from_secs((t / 6).max(1)))
        .with_retries(3);
    let nodelay = sock.set_tcp_nodelay(true).is_ok();
    let keepalive = sock.set_tcp_keepalive(&ka).is_ok();
    let lowat = set_int(
        sock.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        NOTSENT_LOWAT,
    )
    .is_ok();
    // Not required: without the count, the fast path reads until EAGAIN.
    let _ = set_int(sock.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INQ, 1);
    nodelay && keepalive && lowat
}

/// Bounds a receive buffer to 32 KiB, for a stream from a local server
/// that a partition may cut: what the relay's kernel accepts during it is
/// what a real path would not have carried (at a local round trip 32 KiB
/// still carries gigabytes a second).
fn hold_little(s: &TcpStream) {
    // The kernel doubles what is set.
    let _ = SockRef::from(s).set_recv_buffer_size(16 << 10);
}

/// A bounded receive buffer that grows while the stream it feeds keeps
/// moving — the relay's own autotuning. The kernel's grows with what the
/// application reads, and a relay reads eagerly whether or not its
/// destination takes the bytes, so it would grow to megabytes in front of
/// a peer that never reads; this one doubles each time [`GROW_AFTER`]
/// buffers' worth has gone out without the relay's buffer filling up (the
/// destination taking bytes slower than the source sends them), when the
/// destination has just taken all there was, up to [`RECV_BUF_MAX`].
/// So a bulk transfer gets its window back (the fixed 256 KiB cost 18 %
/// of the fast path's throughput, measured when it spliced), and a peer
/// that stops reading finds the relay holding what it held when the stream
/// last moved.
pub(crate) struct RecvGrowth {
    /// The current bound; `None`: the buffer is the kernel's (autotuned).
    cap: Option<usize>,
    since_block: u64,
}

/// Buffers' worth of bytes that must go out unblocked before one doubling.
const GROW_AFTER: u64 = 4;
/// The largest bound (the kernel doubles it, and caps it at `rmem_max`).
const RECV_BUF_MAX: usize = 4 << 20;

impl RecvGrowth {
    /// For a source whose buffer [`tune`] bounded (`capped`), or not; from
    /// its size now (an earlier path may have grown it: never shrink),
    /// which is the bound [`tune`] set while the stream is `fresh` (so
    /// asking the kernel would only cost a system call per direction).
    pub(crate) fn new(src: &TcpStream, capped: bool, fresh: bool) -> RecvGrowth {
        let cap = capped.then(|| {
            if fresh {
                return RECV_BUF;
            }
            // The kernel reports twice what was set (its own overhead).
            let now = SockRef::from(src).recv_buffer_size().map_or(0, |b| b / 2);
            now.max(RECV_BUF)
        });
        RecvGrowth {
            cap,
            since_block: 0,
        }
    }

    /// A receive buffer the relay leaves as it is.
    pub(crate) fn fixed() -> RecvGrowth {
        RecvGrowth {
            cap: None,
            since_block: 0,
        }
    }

    /// `n` bytes from `src` went out; `drained`: nothing is left waiting
    /// for the destination.
    pub(crate) fn moved(&mut self, src: &TcpStream, n: usize, drained: bool) {
        let Some(cap) = self.cap else { return };
        self.since_block += n as u64;
        if drained && cap < RECV_BUF_MAX && self.since_block >= GROW_AFTER * cap as u64 {
            let next = (cap * 2).min(RECV_BUF_MAX);
            let _ = SockRef::from(src).set_recv_buffer_size(next);
            self.cap = Some(next);
            self.since_block = 0;
        }
    }

    /// The destination is slower than the source: the relay's buffer filled.
    pub(crate) fn blocked(&mut self) {
        self.since_block = 0;
    }
}

/// The relay's receive buffer towards a local peer (the kernel doubles it
/// for its own overhead; `rmem_max` may cap it).
const RECV_BUF: usize = 256 * 1024;
/// Below this handshake round trip a peer is on this host (or next to
/// it): RECV_BUF per round trip is then gigabytes per second.
const LOCAL_RTT: Duration = Duration::from_micros(500);
/// Below this handshake round trip a peer on this host is near: load
/// alone made its handshake slow.
const SLOWED_LOCAL_RTT: Duration = Duration::from_millis(10);

/// The connection's smoothed round-trip time, from the handshake on.
fn path_rtt(info: &libc::tcp_info) -> Option<Duration> {
    // 0: no sample yet, so nothing is known of the path.
    (info.tcpi_rtt > 0).then(|| Duration::from_micros(u64::from(info.tcpi_rtt)))
}

/// The socket's `TCP_INFO`, up to its round-trip time at least.
fn tcp_info(s: &TcpStream) -> Option<libc::tcp_info> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `s` is a live TCP socket; the kernel writes at most `len`
    // bytes of `struct tcp_info` into `info`, which is that large, and
    // stores the length it wrote in `len`.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 || (len as usize) < std::mem::offset_of!(libc::tcp_info, tcpi_rttvar) {
        return None;
    }
    // SAFETY: zero-initialised, and the kernel filled at least the fields
    // up to tcpi_rtt.
    Some(unsafe { info.assume_init() })
}

/// Whether a non-blocking `connect()` has finished, one way or the other
/// (writable, or an error or hang-up pending), without waiting.
pub(crate) fn connected_or_failed(s: &impl std::os::fd::AsFd) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLOUT)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n == 1)
        && fds[0].revents().is_some_and(|r| {
            r.intersects(PollFlags::POLLOUT | PollFlags::POLLERR | PollFlags::POLLHUP)
        })
}

/// Writes what `s` takes now, without waiting. Unlike `try_write`, a
/// socket tokio has not yet seen writable is tried too: one dialled or
/// accepted a moment ago, whose first readiness event is still queued,
/// takes the bytes in the same wake-up that brought them instead of one
/// turn of the event loop later (a relayed request's first bytes).
///
/// No wake-up is lost: when tokio holds the socket ready, the write runs
/// inside `try_io`, which clears a stale readiness on EAGAIN; when it does
/// not, there is nothing to clear and the next edge will wake the waiter.
pub(crate) fn send_now(s: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    send_now_flagged(s, buf, MsgFlags::empty())
}

/// `MSG_MORE`, which nix does not name: the bytes wait in the socket for
/// what the caller sends next (a FIN, which then leaves with them).
pub(crate) const MORE: MsgFlags = MsgFlags::from_bits_retain(libc::MSG_MORE);

/// [`send_now`] with `flags` ([`MORE`], `MSG_OOB`).
pub(crate) fn send_now_flagged(s: &TcpStream, buf: &[u8], flags: MsgFlags) -> io::Result<usize> {
    let send = || send_flagged(s, buf, flags);
    let mut tried = false;
    let r = s.try_io(tokio::io::Interest::WRITABLE, || {
        tried = true;
        send()
    });
    if tried { r } else { send() }
}

/// A write of what `s` takes now, as tokio's `try_write` (nothing tried
/// until tokio has seen the socket writable, its readiness cleared on
/// EAGAIN), with `flags` (`MSG_OOB`: urgent data, the peer's mark at the
/// last byte) and never SIGPIPE.
pub(crate) fn try_send(s: &TcpStream, buf: &[u8], flags: MsgFlags) -> io::Result<usize> {
    s.try_io(tokio::io::Interest::WRITABLE, || {
        send_flagged(s, buf, flags)
    })
}

/// One `send(2)` with `flags` and MSG_NOSIGNAL.
fn send_flagged(s: &TcpStream, buf: &[u8], flags: MsgFlags) -> io::Result<usize> {
    nix::sys::socket::send(s.as_raw_fd(), buf, flags | MsgFlags::MSG_NOSIGNAL)
        .map_err(io::Error::from)
}

/// Unsent bytes the kernel queues on a relay socket before it stops
/// reporting it writable.
pub(crate) const NOTSENT_LOWAT: libc::c_int = 128 * 1024;

/// Sets how many unsent bytes `s` queues before it refuses more
/// ([`NOTSENT_LOWAT`] on every relay socket until changed).
pub(crate) fn set_notsent_lowat(s: &TcpStream, bytes: usize) -> io::Result<()> {
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int(
        s.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes,
    )
}

/// The send buffer's size now (autotuning grows it; the kernel's own
/// figure, overhead included).
pub(crate) fn send_buffer(s: &TcpStream) -> usize {
    SockRef::from(s).send_buffer_size().unwrap_or(0)
}

/// Fixes `s`'s send buffer at `bytes` (as the kernel counts it, overhead
/// included), past `wmem_max` and its namespace's `tcp_wmem` where
/// netchaos may (`SO_SNDBUFFORCE`, which needs `CAP_NET_ADMIN` over the
/// socket's namespace), else as far as `wmem_max` lets it.
pub(crate) fn force_send_buffer(s: &TcpStream, bytes: usize) {
    // The kernel doubles what is set, for its own overhead.
    let half = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX);
    if set_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, half).is_err() {
        let _ = SockRef::from(s).set_send_buffer_size(bytes / 2);
    }
}

/// Sets an integer socket option.
fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is a live socket borrowed from the caller, and the
    // option value is a c_int whose address and size are passed together.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What one `recvmsg` brought: how many bytes, and its control messages.
pub(crate) struct Received {
    pub n: usize,
    /// Aligned for cmsghdr; room for a timestamp and a count, and more.
    control: [u64; 16],
    control_len: usize,
}

/// A type any bytes of its size are a valid value of: what a control
/// message may be read as.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid `Self`.
pub(crate) unsafe trait Plain: Copy {}
// SAFETY: integers and a struct of two integers: any bits are valid.
unsafe impl Plain for libc::c_int {}
// SAFETY: as above.
unsafe impl Plain for libc::timespec {}

impl Received {
    /// The first control message of `level` and `kind` that holds a `T`.
    pub(crate) fn message<T: Plain>(&self, level: libc::c_int, kind: libc::c_int) -> Option<T> {
        // SAFETY: an all-zero msghdr is a valid empty one; only its control
        // buffer is set, to `self.control`, which outlives `msg`.
        let mut msg: libc::msghdr = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
        msg.msg_control = self.control.as_ptr() as *mut libc::c_void;
        msg.msg_controllen = self.control_len as _;
        // SAFETY: the control buffer is what the kernel filled in, up to
        // `control_len`; CMSG_FIRSTHDR/CMSG_NXTHDR stay within it, and a
        // message at least `len` long holds `size_of::<T>()` bytes, any of
        // which make a valid `T` ([`Plain`]), read unaligned.
        unsafe {
            let len = libc::CMSG_LEN(std::mem::size_of::<T>() as _) as usize;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == level
                    && (*c).cmsg_type == kind
                    && (*c).cmsg_len as usize >= len
                {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        None
    }
}

/// One `recvmsg` into `data` (which may be uninitialised) without
/// waiting, with room for control messages; the first `n` bytes of `data`
/// are initialised after it.
pub(crate) fn recv_with_control(
    fd: RawFd,
    data: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<Received> {
    let mut got = Received {
        n: 0,
        control: [0; 16],
        control_len: 0,
    };
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one; its pointers are set
    // below to `iov` and `got.control`, which outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = got.control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&got.control) as _;
    // SAFETY: `fd` is a live socket borrowed from the caller; the kernel
    // writes at most `iov_len` bytes into `data` and at most
    // `msg_controllen` bytes into the control buffer.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    got.n = n as usize;
    // size_t with glibc (x86_64, aarch64); socklen_t elsewhere.
    #[allow(clippy::unnecessary_cast)]
    {
        got.control_len = msg.msg_controllen as usize;
    }
    Ok(got)
}

/// One `recvmsg` into `buf` (without waiting), and how many bytes the
/// socket still holds after it: the kernel's `TCP_CM_INQ` count, `None`
/// when the socket does not give it (`TCP_INQ` not set).
pub(crate) fn recv_counted(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<usize>)> {
    // SAFETY: initialised bytes are valid MaybeUninit<u8>s, and the kernel
    // writes only initialised bytes through this view.
    let data = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    let got = recv_with_control(fd, data)?;
    let queued = got.message::<libc::c_int>(libc::IPPROTO_TCP, libc::TCP_CM_INQ);
    Ok((got.n, queued.and_then(|q| usize::try_from(q).ok())))
}

/// What a socket's next read would bring.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Next {
    /// Nothing yet.
    Nothing,
    /// Bytes.
    Bytes,
    /// The end of the stream: a FIN is all the socket holds.
    Eof,
}

/// What the socket's next read would bring, seen with a one-byte peek that
/// does not wait. An error is the socket's own (an RST), which the peek
/// took: the caller must act on it, as the next read no longer reports it.
pub(crate) fn peek_next(fd: RawFd) -> io::Result<Next> {
    match recv_one(fd, libc::MSG_PEEK).0 {
        0 => Ok(Next::Eof),
        n if n > 0 => Ok(Next::Bytes),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::WouldBlock => Ok(Next::Nothing),
            e => Err(e),
        },
    }
}

/// Whether `s`'s peer is a socket of its own network namespace: the peer
/// is a loopback address, or one of the namespace's own (a connection to
/// a local address takes that address as its source too). IPv4-mapped
/// addresses count as the IPv4 ones. (A server in another namespace of
/// the same host, over a veth, does not count.)
pub(crate) fn peer_is_local(s: &TcpStream) -> bool {
    match (s.local_addr(), s.peer_addr()) {
        (Ok(l), Ok(p)) => {
            let (l, p) = (l.ip().to_canonical(), p.ip().to_canonical());
            p.is_loopback() || l == p
        }
        _ => false,
    }
}

/// One `recv` of at most one byte with `flags`, without waiting: what it
/// returned, and the byte.
fn recv_one(fd: RawFd, flags: libc::c_int) -> (isize, u8) {
    let mut b = 0u8;
    // SAFETY: `fd` is a live socket borrowed from the caller; the kernel
    // writes at most the one byte passed, into `b`.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut b as *mut u8).cast(),
            1,
            flags | libc::MSG_DONTWAIT,
        )
    };
    (n, b)
}

/// The urgent byte (`MSG_OOB`) the socket's next read would start at, taken
/// out of band; `None` when it is not at the mark, or the byte was already
/// taken or has not arrived.
pub(crate) fn urgent_at_mark(fd: RawFd) -> Option<u8> {
    // <asm-generic/sockios.h>, the same on x86_64 and aarch64; the libc
    // crate defines it only for Apple's systems.
    const SIOCATMARK: libc::Ioctl = 0x8905;
    if ioctl_int(fd, SIOCATMARK).ok()? == 0 {
        return None;
    }
    let (n, b) = recv_one(fd, libc::MSG_OOB);
    (n == 1).then_some(b)
}

/// The destination a redirected connection was originally addressed to
/// (`SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`, from conntrack).
pub(crate) fn original_dst(s: &TcpStream) -> io::Result<std::net::SocketAddr> {
    use nix::sys::socket::{SockaddrIn, SockaddrIn6, getsockopt, sockopt};
    let local = s.local_addr()?;
    if local.is_ipv4() {
        let raw = getsockopt(s, sockopt::OriginalDst)?;
        Ok(std::net::SocketAddr::V4(SockaddrIn::from(raw).into()))
    } else {
        let raw = getsockopt(s, sockopt::Ip6tOriginalDst)?;
        Ok(std::net::SocketAddr::V6(SockaddrIn6::from(raw).into()))
    }
}

/// Bytes written to the socket that the peer has not yet acknowledged
/// (`TIOCOUTQ`, a.k.a. `SIOCOUTQ`).
pub(crate) fn unacked_bytes(s: &TcpStream) -> io::Result<usize> {
    ioctl_int(s.as_raw_fd(), libc::TIOCOUTQ)
}

/// An ioctl that reports one `int` (TIOCOUTQ, SIOCATMARK).
fn ioctl_int(fd: RawFd, request: libc::Ioctl) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: `fd` is an open socket borrowed from the caller for the
    // duration of the call, and the requests passed here (TIOCOUTQ,
    // SIOCATMARK) write exactly one c_int through the pointer, which
    // points at a local c_int.
    let r = unsafe { libc::ioctl(fd, request, &mut n as *mut libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.max(0) as usize)
    }
}

/// Waits (up to `limit`) until everything written to `s` has been
/// acknowledged, so that an RST sent next cannot overtake it: the kernel
/// discards unsent data when it aborts a connection.
pub(crate) async fn drain(s: &TcpStream, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while matches!(unacked_bytes(s), Ok(n) if n > 0) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Writes all of `buf`, waiting for room as needed (and only then: a
/// socket just dialled takes its first bytes at once, see
/// [`send_now`]).
pub(crate) async fn write_all(dst: &TcpStream, buf: &[u8]) -> io::Result<()> {
    write_all_flagged(dst, buf, MsgFlags::empty()).await
}

/// [`write_all`] with `flags` on every write ([`MORE`]: the bytes wait
/// for a FIN the caller sends next).
pub(crate) async fn write_all_flagged(
    dst: &TcpStream,
    mut buf: &[u8],
    flags: MsgFlags,
) -> io::Result<()> {
    while !buf.is_empty() {
        match send_now_flagged(dst, buf, flags) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => dst.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's count of what a read left behind, and the urgent byte a
    /// read stopped in front of: what the fast path's reads rely on.
    #[test]
    fn a_read_at_an_urgent_mark_leaves_a_count_and_the_byte_out_of_band() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_int(l.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INQ, 1).unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Set on the listener, inherited by the accepted socket.
        let (s, _) = l.accept().unwrap();
        let oob = nix::sys::socket::MsgFlags::MSG_OOB;
        nix::sys::socket::send(c.as_raw_fd(), b"abcX", oob).unwrap();
        std::io::Write::write_all(&mut c, b"def").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Bounded wait until the receiver has all 7 bytes (loopback: at
        // once, unless a busy machine defers the softirq): the sender has
        // nothing unacknowledged. (FIONREAD counts only up to the mark.)
        for _ in 0..2000 {
            if ioctl_int(c.as_raw_fd(), libc::TIOCOUTQ).unwrap() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut buf = [0u8; 64];
        assert_eq!(urgent_at_mark(s.as_raw_fd()), None, "not at the mark yet");
        let (n, left) = recv_counted(s.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"abc", "a read stops in front of the mark");
        assert_eq!(
            left,
            Some(4),
            "the urgent byte and what follows it are left"
        );
        assert_eq!(urgent_at_mark(s.as_raw_fd()), Some(b'X'));
        assert_eq!(urgent_at_mark(s.as_raw_fd()), None, "taken once");
        let (n, left) = recv_counted(s.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"def", "the urgent byte is not in the stream");
        assert_eq!(left, Some(0), "emptied");
    }

    /// A peer on this host whose handshake a busy machine slowed is near;
    /// one behind a real delay, or a remote one that is not quick, is far.
    #[tokio::test(flavor = "current_thread")]
    async fn a_local_peer_slowed_by_load_is_near() {
        let ms = |n| Some(Duration::from_millis(n));
        assert!(near(ms(3), || true) && !near(ms(3), || false));
        assert!(!near(ms(50), || true) && !near(None, || true));
        assert!(near(Some(Duration::from_micros(40)), || false));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert!(on_this_host(&s) && on_this_host(&c));
        // (qemu-user cannot read TCP_INFO: nothing is known of the path.)
        let known = tcp_info(&s).as_ref().and_then(path_rtt).is_some();
        assert_eq!(
            tune_accepted(&s),
            known,
            "a loopback peer's buffer is bounded"
        );
    }

    /// A socket just handed to tokio, whose first readiness event the
    /// reactor has not yet read: `try_write` refuses without trying, and
    /// `send_now` writes.
    #[tokio::test(flavor = "current_thread")]
    async fn send_now_writes_to_a_socket_tokio_has_not_seen_ready() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut server, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        let c = TcpStream::from_std(c).unwrap();
        let refused = c.try_write(b"x");
        assert_eq!(
            refused.map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock),
            "tokio wrote before it saw the socket ready: this test no longer shows the case"
        );
        assert_eq!(send_now(&c, b"hello").unwrap(), 5);
        let mut got = [0u8; 5];
        std::io::Read::read_exact(&mut server, &mut got).unwrap();
        assert_eq!(&got, b"hello");
    }

    /// A full socket: `send_now` says WouldBlock and the writer then waits
    /// for room instead of spinning (readiness was cleared, not left stale).
    #[tokio::test(flavor = "current_thread")]
    async fn send_now_on_a_full_socket_leaves_the_writer_waiting() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_server, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        let c = TcpStream::from_std(c).unwrap();
        // tokio holds the socket ready from here on, until a write fails.
        c.writable().await.unwrap();
        let chunk = vec![0u8; 1 << 16];
        let mut full = false;
        for _ in 0..10_000 {
            match send_now(&c, &chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(full, "the socket never filled");
        // Nobody reads: no room comes, so the wait must not end.
        let waited = tokio::time::timeout(Duration::from_millis(100), c.writable()).await;
        assert!(waited.is_err(), "writable() returned on a full socket");
    }
}
