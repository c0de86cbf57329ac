//! Waiting to the tens of microseconds. The runtime's timer counts whole
//! milliseconds and fires up to one late, so a 1 ms slicer delay took 2 ms
//! and sub-millisecond jitter vanished; the last stretch of a wait goes
//! through a timerfd on the reactor instead, which the kernel's
//! high-resolution timers fire on time (within its timer slack, 50 µs).
//!
//! Under the unit tests' paused clock everything stays on the runtime's
//! (virtual) timer.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Waits longer than this go to the runtime's timer first, up to this
/// much before the deadline.
const COARSE: Duration = Duration::from_millis(2);

/// Sleeps until `deadline`, to within the kernel's timer slack.
pub(crate) async fn sleep_until(deadline: Instant) {
    if cfg!(test) {
        return tokio::time::sleep_until(deadline).await;
    }
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    if deadline - now > COARSE {
        tokio::time::sleep_until(deadline - COARSE).await;
    }
    if precise(deadline).await.is_err() {
        // No timerfd (a seccomp filter, fd exhaustion): the coarse timer.
        tokio::time::sleep_until(deadline).await;
    }
}

/// A timer for a loop that waits again and again (the packet delay line):
/// one timerfd, re-armed for each wait, instead of one made per wait.
pub(crate) struct Alarm {
    fd: Option<AsyncFd<Fd>>,
}

impl Alarm {
    pub(crate) fn new() -> Alarm {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .ok()
        // SAFETY: as in `precise`: `Fd` owns the timerfd and always
        // returns that descriptor; it is dropped with the AsyncFd.
        .and_then(|t| unsafe { AsyncFd::register(Fd(t)) }.ok());
        Alarm { fd }
    }

    /// Sleeps until `deadline`, to within the kernel's timer slack.
    pub(crate) async fn sleep_until(&self, deadline: Instant) {
        let Some(fd) = self.fd.as_ref().filter(|_| !cfg!(test)) else {
            return sleep_until(deadline).await;
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let armed = fd.get_ref().0.set(
                Expiration::OneShot(TimeSpec::from_duration(left)),
                TimerSetTimeFlags::empty(),
            );
            if armed.is_err() {
                return sleep_until(deadline).await;
            }
            let Ok(mut guard) = fd.readable().await else {
                return sleep_until(deadline).await;
            };
            // Consume the expiry (or find it not yet fired: spurious).
            let _ = guard.try_io(|f| f.get_ref().0.wait().map_err(std::io::Error::from));
        }
    }
}

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

async fn precise(deadline: Instant) -> std::io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Ok(());
    }
    let fd = TimerFd::new(
        ClockId::CLOCK_MONOTONIC,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    fd.set(
        Expiration::OneShot(TimeSpec::from_duration(left)),
        TimerSetTimeFlags::empty(),
    )?;
    // SAFETY: `Fd` owns the timerfd (an `OwnedFd` inside `TimerFd`) and
    // always returns that same descriptor; it is dropped with the AsyncFd.
    let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(std::io::Error::from)?;
    // Readable once it has fired; the expiry count itself is not needed.
    let _ = fd.readable().await?;
    Ok(())
}
