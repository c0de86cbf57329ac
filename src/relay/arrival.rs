//! When the bytes a read returns reached the relay, by the kernel's clock
//! (`SO_TIMESTAMPNS`). The fault pipeline counts a chunk's delay from its
//! arrival: stamped when the relay got round to reading it, a reply to an
//! idle relay was late by the time its CPU took to wake (tens to hundreds
//! of microseconds on a virtual machine) before its `delay` even began.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, SystemTime};

use bytes::{BufMut, BytesMut};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A chunk is dated at most this much before its read: enough for a
/// CPU's wake-up, and a bound on what a stamp from long ago (bytes that
/// waited in the kernel behind backpressure, a clock step) can take off
/// a delay. A stamp from the future (a clock step back) counts as now.
const MAX_AGE: Duration = Duration::from_millis(10);

/// A stamp older than this is on another clock, not a wall-clock time:
/// before Linux 5.18 an NFQUEUE packet that TCP sent carried its monotonic
/// departure time in the timestamp attribute (1970 plus the uptime), which
/// would otherwise count as "MAX_AGE ago" and cut every delay short.
const PLAUSIBLE_AGE: Duration = Duration::from_secs(1);

/// Asks the kernel to stamp `s`'s arriving packets; whether it will.
pub(crate) fn stamp(s: &TcpStream) -> bool {
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(s, sockopt::ReceiveTimestampns, &true).is_ok()
}

/// Reads into `buf`'s spare room, as `try_read_buf`, and says when the
/// last byte read arrived (now, when the kernel gave no usable stamp).
pub(crate) fn try_read(s: &TcpStream, buf: &mut BytesMut) -> io::Result<(usize, Instant)> {
    let (n, stamp) = s.try_io(Interest::READABLE, || recv_stamped(s.as_raw_fd(), buf))?;
    Ok((n, dated(stamp, Instant::now(), SystemTime::now())))
}

/// The instant a kernel `stamp` (wall clock) stands for, read at `now` /
/// `wall`: at most [`MAX_AGE`] back, never ahead; `now` without a stamp
/// or with one older than [`PLAUSIBLE_AGE`].
pub(crate) fn dated(stamp: Option<SystemTime>, now: Instant, wall: SystemTime) -> Instant {
    stamp
        .and_then(|t| wall.duration_since(t).ok())
        .filter(|age| *age <= PLAUSIBLE_AGE)
        .map_or(now, |age| now.checked_sub(age.min(MAX_AGE)).unwrap_or(now))
}

/// One `recvmsg` into the spare capacity of `buf`, with room for the
/// timestamp's control message.
fn recv_stamped(fd: RawFd, buf: &mut BytesMut) -> io::Result<(usize, Option<SystemTime>)> {
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // Aligned for cmsghdr; room for one timespec message and more.
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is a valid empty one; its pointers are set
    // below to `iov` and `control`, which outlive the call.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `fd` is a live socket borrowed from the caller; the kernel
    // writes at most `iov_len` bytes into the spare capacity (memory that
    // `buf` owns and may hold uninitialised) and at most `msg_controllen`
    // bytes into `control`.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised the first `n` bytes of the spare
    // capacity.
    unsafe { buf.advance_mut(n) };
    Ok((n, timestamp(&msg)))
}

/// The `SCM_TIMESTAMPNS` message of a `recvmsg`, if there is one.
fn timestamp(msg: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: `msg` is a msghdr the kernel filled in, whose control buffer
    // is still alive; CMSG_FIRSTHDR/CMSG_NXTHDR stay within its
    // `msg_controllen`, and a message of this level and type carries a
    // `timespec` (read unaligned: CMSG_DATA need not be aligned for it).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let len = libc::CMSG_LEN(std::mem::size_of::<libc::timespec>() as _) as usize;
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                && (*c).cmsg_len as usize >= len
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                let d = Duration::new(
                    u64::try_from(ts.tv_sec).ok()?,
                    u32::try_from(ts.tv_nsec).ok()?,
                );
                return SystemTime::UNIX_EPOCH.checked_add(d);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn a_stamp_dates_back_at_most_max_age_and_never_ahead() {
        let (now, wall) = (Instant::now(), SystemTime::now());
        let ms = Duration::from_millis;
        assert_eq!(dated(Some(wall - ms(3)), now, wall), now - ms(3));
        assert_eq!(dated(Some(wall - ms(500)), now, wall), now - MAX_AGE);
        // A monotonic time read as a wall-clock one (NFQUEUE before 5.18):
        // 1970 plus an uptime of a day is no stamp.
        let uptime = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400);
        assert_eq!(dated(Some(uptime), now, wall), now);
        assert_eq!(dated(Some(wall + ms(5)), now, wall), now);
        assert_eq!(dated(None, now, wall), now);
    }

    #[tokio::test]
    async fn a_read_is_dated_when_its_bytes_arrived() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert!(stamp(&s));
        // The kernel turns stamping on for the host a moment after the
        // first socket asks (a deferred static key): until then packets
        // come unstamped. Wait for a stamped one (bounded).
        let mut buf = BytesMut::with_capacity(64);
        for i in 0.. {
            assert!(i < 200, "no receive stamp after 2 s");
            c.write_all(b".").await.unwrap();
            s.readable().await.unwrap();
            let got = s.try_io(Interest::READABLE, || recv_stamped(s.as_raw_fd(), &mut buf));
            buf.clear();
            if matches!(got, Ok((1, Some(_)))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        c.write_all(b"hello").await.unwrap();
        // The bytes wait in the kernel while the reader is busy elsewhere
        // (as while a CPU wakes up).
        std::thread::sleep(Duration::from_millis(5));
        s.readable().await.unwrap();
        let (n, at) = try_read(&s, &mut buf).unwrap();
        assert_eq!((n, &buf[..]), (5, &b"hello"[..]));
        let age = Instant::now() - at;
        assert!(
            age >= Duration::from_millis(5),
            "dated {age:?} ago, not at arrival"
        );
        // Bytes that waited longer are dated at most MAX_AGE back.
        c.write_all(b"again").await.unwrap();
        std::thread::sleep(MAX_AGE * 3);
        s.readable().await.unwrap();
        let before = Instant::now();
        let (n, at) = try_read(&s, &mut buf).unwrap();
        assert_eq!(n, 5);
        assert!(
            at + MAX_AGE >= before,
            "dated {:?} back",
            Instant::now() - at
        );
    }
}
