//! Waiting to the tens of microseconds. The runtime's timer counts whole
//! milliseconds and fires up to one late, so a 1 ms slicer delay took 2 ms
//! and sub-millisecond jitter vanished; the last stretch of a wait goes
//! through a timerfd on the reactor instead, which the kernel's
//! high-resolution timers fire on time (within its timer slack, 50 µs by
//! default, which the runtime's threads lower to 1 µs). A thread woken
//! from a long idle comes back late still — by 0.1 ms after 1 ms, 0.3 ms
//! after 50 ms on a virtual machine, where an idle CPU is a halted one the
//! host must schedule again — so the wait ends [`SPIN`] early and spins
//! the rest, which a timely wake spends and a late one never starts.
//!
//! A runtime whose clock is paused (the in-process tests') has only the
//! runtime's virtual timer: whoever pauses it says so with
//! [`runtime_clock_only`], and every wait on that thread stays on it.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// Waits longer than this go to the runtime's timer first, up to this
/// much before the deadline.
const COARSE: Duration = Duration::from_millis(2);

/// Waits for a timer end this much early, then spin the rest: the wake-up
/// latency of an idle CPU (see the module doc), at the cost of at most
/// this much CPU per wait (a connection's timing faults, never the
/// fault-free path).
pub(crate) const SPIN: Duration = Duration::from_micros(200);

/// Lowers the calling thread's timer slack to 1 µs (the default 50 µs is a
/// power-saving allowance, and a fault injector's timers are its product).
pub(crate) fn tighten_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only
    // the calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Spins until `deadline` (a short wait: called once a timer set a little
/// early has fired, or for a wait shorter than [`SPIN`]), yielding to the runtime's other
/// tasks at each look: on a single-threaded runtime a busy wait would hold
/// up every other connection.
pub(crate) async fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
}

thread_local! {
    /// This thread's runtime keeps virtual time: no timerfd, no spin.
    static VIRTUAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Waits on this thread use the runtime's timer alone: for a
/// current-thread runtime with a paused clock, where a timerfd would wait
/// in real time while the runtime's clock jumps (the in-process tests).
#[cfg(test)]
pub(crate) fn runtime_clock_only() {
    VIRTUAL.with(|v| v.set(true));
}

/// Whether waits on this thread stay on the runtime's timer.
pub(crate) fn on_runtime_clock() -> bool {
    VIRTUAL.with(std::cell::Cell::get)
}

/// Sleeps for `d` (a fault's delay), as [`sleep_until`].
pub(crate) async fn sleep(d: Duration) {
    sleep_until(Instant::now() + d).await
}

/// Sleeps until `deadline`, to within a few microseconds where the CPU
/// allows.
pub(crate) async fn sleep_until(deadline: Instant) {
    if on_runtime_clock() {
        return tokio::time::sleep_until(deadline).await;
    }
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    if deadline - now > COARSE {
        tokio::time::sleep_until(deadline - COARSE).await;
    }
    if deadline.saturating_duration_since(Instant::now()) > SPIN
        && precise(deadline - SPIN).await.is_err()
    {
        // No timerfd (a seccomp filter, fd exhaustion): the coarse timer.
        return tokio::time::sleep_until(deadline).await;
    }
    spin_until(deadline).await;
}

/// A timerfd on the reactor: made once and re-armed for each wait, so a
/// loop that waits again and again (the packet delay line) keeps one.
pub(crate) struct Alarm {
    fd: AsyncFd<Fd>,
}

impl Alarm {
    pub(crate) fn new() -> std::io::Result<Alarm> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // SAFETY: `Fd` owns the timerfd (an `OwnedFd` inside `TimerFd`) and
        // always returns that same descriptor; it is dropped with the
        // AsyncFd.
        let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(std::io::Error::from)?;
        Ok(Alarm { fd })
    }

    /// Waits until `deadline`, to within the kernel's timer slack and the
    /// CPU's wake-up; no spin (the delay line waits between packets that
    /// may come every few microseconds, and would spin all the time).
    pub(crate) async fn wait_until(&self, deadline: Instant) -> std::io::Result<()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            self.fd.get_ref().0.set(
                Expiration::OneShot(TimeSpec::from_duration(left)),
                TimerSetTimeFlags::empty(),
            )?;
            let mut guard = self.fd.readable().await?;
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
    Alarm::new()?.wait_until(deadline).await
}
