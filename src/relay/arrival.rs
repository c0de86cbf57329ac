//! When the bytes a read returns reached the relay, by the kernel's clock
//! (`SO_TIMESTAMPNS`). The fault pipeline counts a chunk's delay from its
//! arrival: stamped when the relay got round to reading it, a reply to an
//! idle relay was late by the time its CPU took to wake (tens to hundreds
//! of microseconds on a virtual machine) before its `delay` even began.

use std::io;
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

/// One `recvmsg` into the spare capacity of `buf`, and the timestamp's
/// control message.
fn recv_stamped(fd: RawFd, buf: &mut BytesMut) -> io::Result<(usize, Option<SystemTime>)> {
    let got = crate::socket::sockopt::recv_with_control(fd, buf.spare_capacity_mut())?;
    // SAFETY: the kernel initialised the first `n` bytes of the spare
    // capacity.
    unsafe { buf.advance_mut(got.n) };
    let stamp = got.message::<libc::timespec>(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS);
    Ok((got.n, stamp.and_then(wall_time)))
}

/// The wall-clock time a kernel `timespec` stands for.
fn wall_time(ts: libc::timespec) -> Option<SystemTime> {
    let d = Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    );
    SystemTime::UNIX_EPOCH.checked_add(d)
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
