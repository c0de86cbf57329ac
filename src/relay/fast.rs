//! The fast path: a direction with no fault touching its bytes, carried
//! by plain reads and writes with as few system calls and wake-ups as the
//! kernel allows.
//!
//! Small messages take the shortest way: a direction whose reads come back
//! short (request/response traffic) reads into a per-thread buffer and
//! writes at once — two system calls per message, with the socket's
//! readiness cleared by the short read itself instead of by one more read
//! that would fail with EAGAIN. A read that fills that buffer (bulk) turns
//! the direction to a buffer of its own, [`BULK_SIZE`], read into while
//! the destination has no room and written out as it drains; the direction
//! goes back to small messages once it is empty after a short read.
//!
//! Bulk is copied, not spliced. `splice(2)` (socket → pipe → socket, this
//! path until 2026-12) keeps bytes out of user space, but on this host's
//! loopback it made both endpoints dearer (most likely because their pages
//! stay referenced in the relay's pipe and the segments it sends are built
//! of the source's fragments). iperf3 through `proxy`, 2 cores, one run of
//! interleaved rounds (284f8b6): 14.8–15.9 Gbit/s spliced, 18.6–19.3
//! copied (direct 26.5–27.4), at 763–795 ms of CPU per GB in all against
//! 690–720 copied (the relay's own share rose from 300 to 380). This
//! machine also has rounds in which every path, direct too, runs slower
//! and its client costs about four times the CPU; bench.sh's sums include
//! them. A 256 KiB buffer gave 17.8 Gbit/s, 1 MiB no more than 512 KiB.
//!
//! Buffers are borrowed from a small pool only while bytes are in flight
//! and returned empty, so an idle connection holds none. All of them
//! together are bounded ([`BULK_BUFFERS`]): past that, a direction carries
//! bulk in small messages, slower and holding at most a partial write's
//! rest of its own ([`COPY_BUF`]), so that many connections with slow
//! readers cannot take the host's memory.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use nix::sys::socket::MsgFlags;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::answer;
use super::holding::Buffers;
use super::pipeline::Feed;
use super::{DirEnd, SrcSocket};
use crate::events::Meter;
use crate::fault::Direction;
use crate::socket::sockopt;

/// What a bulk direction holds in user space at most: read into while its
/// destination has no room (the most a read asks for).
const BULK_SIZE: usize = 512 << 10;
/// Idle bulk buffers kept for reuse; beyond this they are freed. (4 in
/// unit tests, so that freeing is tested too.)
const POOL_MAX: usize = if cfg!(test) { 4 } else { 32 };
/// Bulk buffers that may exist at once, in flight or pooled: 256 MiB.
/// Each is held only while its destination is slower than its source, so
/// this is that many directions backed up at once; more than two cores
/// can keep at full speed anyway. (16 in unit tests, which take them all.)
const BULK_BUFFERS: usize = if cfg!(test) { 16 } else { 512 };
/// The per-thread buffer of the small-message path: a read that fills it
/// is bulk, and the direction takes a bulk buffer.
const COPY_BUF: usize = 16 * 1024;

thread_local! {
    static COPY: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; COPY_BUF].into_boxed_slice());
}

/// A count of things that may not exceed a limit, taken and given back
/// from any thread.
struct Budget {
    limit: usize,
    taken: AtomicUsize,
}

impl Budget {
    const fn new(limit: usize) -> Budget {
        Budget {
            limit,
            taken: AtomicUsize::new(0),
        }
    }

    /// Takes one, unless all are taken.
    fn take(&self) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn give_back(&self) {
        self.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

static BUFFERS: Budget = Budget::new(BULK_BUFFERS);
/// How often a bulk direction wanted a buffer and found the budget spent
/// (for the metrics): it asks again at its next bulk read.
static SPENT: AtomicU64 = AtomicU64::new(0);

/// The bulk buffers now out (in use or pooled), their limit, and how
/// often a bulk read found none left and went through the small copies.
pub(crate) fn bulk_buffers() -> (usize, usize, u64) {
    (
        BUFFERS.taken.load(Ordering::Relaxed),
        BUFFERS.limit,
        SPENT.load(Ordering::Relaxed),
    )
}

/// Counts a bulk read that found the budget spent, and says so once per
/// run: from then on, some directions move their bulk slower than they
/// would.
fn spent() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    SPENT.fetch_add(1, Ordering::Relaxed);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "all {BULK_BUFFERS} fast-path bulk buffers ({} MiB) are in use: directions backed up beyond them carry their bulk in {} KiB copies",
            (BULK_BUFFERS * BULK_SIZE) >> 20,
            COPY_BUF >> 10
        );
    }
}

/// A bulk direction's bytes read and not yet written: `buf[start..end]`.
/// Dropped (a direction that ends holding bytes), its buffer is freed and
/// leaves the budget.
struct Held {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Held {
    /// An empty buffer, from the pool if one is there; `None` when all
    /// [`BULK_BUFFERS`] are out or memory runs out (the small-message path
    /// then carries the direction).
    fn take() -> Option<Held> {
        let pooled = POOL.lock().expect("buffer pool lock").pop();
        let buf = match pooled {
            Some(b) => b,
            None => {
                if !BUFFERS.take() {
                    spent();
                    return None;
                }
                let mut v = Vec::new();
                if v.try_reserve_exact(BULK_SIZE).is_err() {
                    BUFFERS.give_back();
                    return None;
                }
                v.resize(BULK_SIZE, 0);
                v.into_boxed_slice()
            }
        };
        Some(Held {
            buf,
            start: 0,
            end: 0,
        })
    }

    /// What a small-message write left unwritten, held in its own
    /// allocation (at most [`COPY_BUF`]) when no bulk buffer can be had,
    /// or an answer that waited for its FIN ([`after_answer`]): it drains
    /// before anything more is read (it has no room), while faults still
    /// arrive.
    fn rest(bytes: Vec<u8>) -> Held {
        debug_assert!(
            bytes.len() < BULK_SIZE,
            "a rest must not pass for a bulk buffer"
        );
        let end = bytes.len();
        Held {
            buf: bytes.into_boxed_slice(),
            start: 0,
            end,
        }
    }

    /// A bulk buffer, counted in [`BUFFERS`] (a small-message rest is
    /// shorter, and an emptied one given to the pool has no length).
    fn budgeted(&self) -> bool {
        self.buf.len() == BULK_SIZE
    }

    /// Puts `bytes` (at most [`COPY_BUF`]) into this empty buffer.
    fn fill(&mut self, bytes: &[u8]) {
        self.buf[..bytes.len()].copy_from_slice(bytes);
        (self.start, self.end) = (0, bytes.len());
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    /// Room to read into. Once the end is reached, what is left unwritten
    /// moves to the front when it is at most half the buffer, so that no
    /// byte is moved more than once (moving it after every write of a full
    /// buffer cost more than the reads and writes).
    fn room(&mut self) -> usize {
        if !self.budgeted() {
            return 0;
        }
        if self.end == self.buf.len() && self.start >= self.buf.len() / 2 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        self.buf.len() - self.end
    }

    /// `n` bytes were written.
    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
    }

    /// Returns the (empty) buffer to the pool, or frees it when the pool
    /// is full.
    fn give_back(mut self) {
        if !self.budgeted() {
            return;
        }
        let mut pool = POOL.lock().expect("buffer pool lock");
        if pool.len() < POOL_MAX {
            // An empty boxed slice allocates nothing; drop then sees none.
            pool.push(std::mem::take(&mut self.buf));
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.budgeted() {
            BUFFERS.give_back();
        }
    }
}

static POOL: Mutex<Vec<Box<[u8]>>> = Mutex::new(Vec::new());

/// How the source side of a direction stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SrcState {
    Open,
    /// FIN read: finish writing, then shut down writing on `dst`.
    Eof,
    /// RST (or another error) read: finish writing, then reset.
    Failed,
}

/// How a fast-path direction ended.
pub(crate) enum Ended {
    /// FIN or RST: the direction is over.
    End(DirEnd),
    /// A byte fault now applies: the pipeline takes over (nothing is held;
    /// nothing was read that was not written).
    Faulted,
}

/// Relays the source `from` → `dst` until FIN or an error, or until `feed`
/// brings a fault that touches the bytes; returns how it ended (the meter
/// counts the bytes moved).
///
/// Reading and writing overlap: while `dst` has no room, bytes keep moving
/// from the source into the direction's buffer until it is full, or as far
/// as `bufs` lets them ([`Buffers::readable`]).
pub(crate) async fn run(
    from: SrcSocket<'_>,
    dst: &TcpStream,
    dir: Direction,
    meter: &Meter<'_>,
    feed: &mut impl Feed,
    mut bufs: Buffers,
) -> Ended {
    let SrcSocket {
        socket: src,
        reset: src_reset,
        waits,
    } = from;
    let mut held: Option<Held> = None;
    // An urgent byte read out of band, to send once the bytes read before
    // it are written; nothing more is read until then.
    let mut urgent: Option<u8> = None;
    let mut state = SrcState::Open;
    let (mut live, mut faulted) = (true, false);
    // Small messages first: most connections begin with a request.
    let mut copying = true;
    // The next look at a destination that refused bytes
    // ([`Buffers::recheck`]), when one is due.
    let mut recheck = std::pin::pin!(tokio::time::sleep(std::time::Duration::ZERO));
    let mut rechecking = false;
    loop {
        let in_flight = held.as_ref().map_or(0, Held::len);
        if in_flight == 0 && urgent.is_none() {
            // An idle direction holds no buffer.
            if let Some(h) = held.take() {
                h.give_back();
            }
            match state {
                SrcState::Open if faulted => return Ended::Faulted,
                SrcState::Open => {}
                SrcState::Eof => {
                    sockopt::shutdown_write(dst);
                    return Ended::End(DirEnd::Fin);
                }
                SrcState::Failed => {
                    // Whatever was written before the RST goes first.
                    sockopt::drain(dst, super::RESET_DRAIN).await;
                    return Ended::End(DirEnd::Reset);
                }
            }
        }
        // What a read may take: the buffer's room, or less while bytes
        // wait ([`Buffers::readable`]).
        let room = held
            .as_mut()
            .map_or(usize::MAX, |h| bufs.readable(in_flight, h.room()));
        // Once a fault arrived, stop reading and empty the buffer first.
        let want_read = state == SrcState::Open && room > 0 && !faulted && urgent.is_none();
        // Biased, the feed first: a fault that arrived before the next
        // bytes (an API call that returned before the client wrote) applies
        // to them, however late this task runs.
        tokio::select! {
            biased;
            changed = feed.changed(), if live && !faulted => {
                if !changed {
                    live = false;
                } else if !feed.wanted().is_empty() {
                    faulted = true;
                }
            }
            r = src.readable(), if want_read => {
                if r.is_err() {
                    state = SrcState::Failed;
                    continue;
                }
                if !copying && held.is_none() {
                    match Held::take() {
                        Some(h) => held = Some(h),
                        // No bulk buffer to be had (the budget is spent,
                        // or memory): the small-message path carries
                        // everything (a partial write's rest is held on
                        // its own until it drains, [`Held::rest`]).
                        None => copying = true,
                    }
                }
                if copying && in_flight == 0 {
                    match copy_small(src, dst, dir, meter, src_reset, waits.left()) {
                        Copied::Nothing => {}
                        Copied::Answer(bytes) => {
                            state = after_answer(src, waits, src_reset).await;
                            // Written as a partial write's rest is, with the
                            // FIN when it came ([`fin_follows`]); nothing is
                            // read before they are.
                            held = Some(Held::rest(bytes));
                        }
                        Copied::Eof => state = end_of(src_reset),
                        Copied::Failed => state = SrcState::Failed,
                        Copied::DstGone => return Ended::End(DirEnd::DstReset),
                        Copied::Written { bulk, urgent: u, then } => {
                            copying = !bulk;
                            urgent = u;
                            state = then;
                        }
                        Copied::Partly { rest, urgent: u, then } => {
                            urgent = u;
                            state = then;
                            if let Some(at) = bufs.refused(dst) {
                                recheck.as_mut().reset(at);
                                rechecking = true;
                            }
                            // The rest waits in a bulk buffer (the
                            // destination is full: bulk), or on its own
                            // when none can be had.
                            copying = false;
                            held = Some(match Held::take() {
                                Some(mut h) => {
                                    h.fill(&rest);
                                    h
                                }
                                None => Held::rest(rest),
                            });
                        }
                    }
                    continue;
                }
                let h = held.as_mut().expect("a bulk buffer, unless copying");
                let free = h.room();
                let room = bufs.readable(in_flight, free);
                let whole = room == free;
                match read_in(src, h, room) {
                    Ok(Got { n: 0, .. }) => state = end_of(src_reset),
                    Ok(Got { n, urgent: u, behind }) => {
                        urgent = u;
                        state = behind.state(src_reset);
                        meter.read(dir, n as u64);
                        // Short: back to small messages once it is written
                        // (a read cut to the read-ahead says nothing).
                        if whole {
                            copying = n < room.min(COPY_BUF);
                        }
                        if in_flight > 0 && h.room() == 0 {
                            // Bytes waited for the destination while the
                            // source filled the buffer: the destination is
                            // the slower.
                            bufs.growth.blocked();
                        }
                        // A long answer's end waits for its FIN as a short
                        // one does ([`copy_small`]); not while bytes wait
                        // for the destination: a FIN that comes meanwhile
                        // is read before they are written.
                        let idle = in_flight == 0;
                        if idle && waits.left() && behind == Behind::Nothing && urgent.is_none() {
                            state = after_answer(src, waits, src_reset).await;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => state = SrcState::Failed,
                }
            }
            w = dst.writable(), if in_flight > 0 || urgent.is_some() => {
                let Some(h) = held.as_mut().filter(|h| h.len() > 0) else {
                    // Everything before the urgent byte is written.
                    let byte = urgent.expect("an urgent byte when nothing is held");
                    let oob = MsgFlags::MSG_OOB;
                    match w.and_then(|_| sockopt::try_send(dst, &[byte], oob)) {
                        Ok(_) => {
                            urgent = None;
                            meter.read(dir, 1);
                            meter.add(dir, 1);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => return Ended::End(DirEnd::DstReset),
                    }
                    continue;
                };
                let held = &h.buf[h.start..h.end];
                // The last bytes before a FIN wait for it ([`fin_follows`]).
                let more = fin_follows(state, urgent);
                let out = w.and_then(|_| sockopt::try_send(dst, held, more));
                match out {
                    Ok(m) => {
                        h.consume(m);
                        meter.add(dir, m as u64);
                        bufs.growth.moved(src, m, h.len() == 0);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if let Some(at) = bufs.refused(dst) {
                            recheck.as_mut().reset(at);
                            rechecking = true;
                        }
                    }
                    // The destination is gone; what is held goes with it.
                    Err(_) => return Ended::End(DirEnd::DstReset),
                }
            }
            () = &mut recheck, if rechecking => {
                rechecking = false;
                if let Some(at) = bufs.recheck(dst) {
                    recheck.as_mut().reset(at);
                    rechecking = true;
                }
            }
        }
    }
}

/// What a read of 0 bytes means: the end of the stream (FIN) — or the
/// source's RST, when a write to it failed first: that write took the
/// socket's error, and a read after it sees only the shut-down socket.
fn end_of(src_reset: &AtomicBool) -> SrcState {
    if src_reset.load(Ordering::Relaxed) {
        SrcState::Failed
    } else {
        SrcState::Eof
    }
}

/// Reads what the socket holds into the buffer's free room, `most` bytes
/// at most.
fn read_in(src: &TcpStream, h: &mut Held, most: usize) -> io::Result<Got> {
    // A read of 0 bytes would look like the end of the stream.
    debug_assert!(h.room() > 0 && most > 0);
    let end = h.end + most.min(h.buf.len() - h.end);
    let got = read_once(src, &mut h.buf[h.end..end])?;
    h.end += got.n;
    Ok(got)
}

/// What one read brought.
struct Got {
    n: usize,
    /// The urgent byte (`MSG_OOB`) the read stopped in front of: it goes to
    /// the destination as urgent, after the bytes read before it.
    urgent: Option<u8>,
    /// What is left behind these bytes, when it is known.
    behind: Behind,
}

/// What a read found behind the bytes it took.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Behind {
    /// More bytes, or it is not known.
    Open,
    /// Nothing yet: the read emptied the socket.
    Nothing,
    /// The source's FIN, and nothing else.
    Fin,
    /// The source's RST: a look behind the bytes took its error, which
    /// no later read reports.
    Reset,
}

impl Behind {
    /// The source's state once the bytes read are written.
    fn state(self, src_reset: &AtomicBool) -> SrcState {
        match self {
            Behind::Open | Behind::Nothing => SrcState::Open,
            Behind::Fin => end_of(src_reset),
            Behind::Reset => SrcState::Failed,
        }
    }
}

/// How the last bytes of a direction whose source has ended are written:
/// with `MSG_MORE`, so that the last segment carries them and the FIN
/// written right after them. Sent apart, the bytes woke the client before
/// the FIN arrived: a server that answers and closes at once gives its
/// client both in one go over a real path (the FIN is in the client's
/// socket when `close()` returns), and a client that reads the answer,
/// learns of the close and then looks at the socket (urllib3's check of a
/// pooled connection) must find the FIN there. Not when the source was
/// reset: those bytes must be sent and acknowledged before the RST.
fn fin_follows(state: SrcState, urgent: Option<u8>) -> MsgFlags {
    if state == SrcState::Eof && urgent.is_none() {
        sockopt::MORE
    } else {
        MsgFlags::empty()
    }
}

/// Waits ([`answer::wait_for`]) for what follows an answer that emptied
/// `src`, counts the wait in `waits`, and says how the source stands once
/// the answer is written.
async fn after_answer(src: &TcpStream, waits: &answer::Waits, src_reset: &AtomicBool) -> SrcState {
    let behind = answer::wait_for(|| match sockopt::peek_next(src.as_raw_fd()) {
        Ok(sockopt::Next::Eof) => Some(Behind::Fin),
        Ok(sockopt::Next::Bytes) => Some(Behind::Open),
        Ok(sockopt::Next::Nothing) => None,
        Err(_) => Some(Behind::Reset),
    })
    .await
    .unwrap_or(Behind::Nothing);
    waits.spent(behind != Behind::Nothing);
    behind.state(src_reset)
}

/// One read into `buf`. A read that empties the socket's receive queue —
/// the kernel says so with `TCP_INQ`, set on every relay socket — clears
/// the read readiness itself: the read that would only fail with EAGAIN
/// is never made (tokio keeps any readiness that arrived since, so no
/// wake-up is lost). A read's length alone does not tell: one that stops
/// at an urgent mark comes back short with bytes still queued, and taking
/// it for the end of the queue stalled the direction until the sender
/// wrote again (tokio's own `TcpStream` reads have that flaw). Without the
/// kernel's count (`TCP_INQ` refused), readiness stays until a read fails.
fn read_once(src: &TcpStream, buf: &mut [u8]) -> io::Result<Got> {
    let mut drained = None;
    let r = src.try_io(Interest::READABLE, || {
        let (n, queued) = sockopt::recv_counted(src.as_raw_fd(), &mut *buf)?;
        // Nothing left, or only the FIN: the kernel counts one for a FIN
        // not yet read (a byte would count the same, hence the look).
        let behind = match queued {
            Some(0) => Behind::Nothing,
            Some(1) if n > 0 => match sockopt::peek_next(src.as_raw_fd()) {
                Ok(sockopt::Next::Eof) => Behind::Fin,
                Ok(_) => Behind::Open,
                Err(_) => Behind::Reset,
            },
            _ => Behind::Open,
        };
        if n > 0 && behind != Behind::Open {
            drained = Some((n, behind));
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok((n, queued))
    });
    if let Some((n, behind)) = drained {
        return Ok(Got {
            n,
            urgent: None,
            behind,
        });
    }
    let (n, queued) = r?;
    // Short, with bytes left behind: stopped at an urgent mark, or bytes
    // arrived while it copied. (A read that fills `buf` exactly up to the
    // mark is not asked about; the next read then skips the urgent byte, as
    // a receiver without SO_OOBINLINE does, and nothing stalls.)
    let urgent = if n > 0 && n < buf.len() && queued.is_some_and(|q| q > 0) {
        sockopt::urgent_at_mark(src.as_raw_fd())
    } else {
        None
    };
    Ok(Got {
        n,
        urgent,
        behind: Behind::Open,
    })
}

/// What one small-message read and write did.
enum Copied {
    /// The socket had nothing after all.
    Nothing,
    Eof,
    /// An RST or another read error.
    Failed,
    /// The destination failed.
    DstGone,
    /// A server's answer that emptied its socket, read and not written:
    /// it waits for what follows it ([`after_answer`]).
    Answer(Vec<u8>),
    /// All the bytes read were written (and metered); `bulk`: the read
    /// filled the buffer.
    Written {
        bulk: bool,
        /// The urgent byte the read stopped in front of ([`Got`]).
        urgent: Option<u8>,
        /// The source's state after them ([`Behind::state`]).
        then: SrcState,
    },
    /// The destination took only some of them; `rest` still has to go.
    Partly {
        rest: Vec<u8>,
        urgent: Option<u8>,
        then: SrcState,
    },
}

/// Reads what `src` holds (up to [`COPY_BUF`], [`read_once`]) and writes
/// it to `dst` without waiting; bytes the source's FIN follows are
/// written to leave with it ([`fin_follows`]). `wait`: a short read that
/// empties the socket is an answer, returned unwritten.
fn copy_small(
    src: &TcpStream,
    dst: &TcpStream,
    dir: Direction,
    meter: &Meter<'_>,
    src_reset: &AtomicBool,
    wait: bool,
) -> Copied {
    COPY.with(|buf| {
        let mut buf = buf.borrow_mut();
        let (n, urgent, behind) = match read_once(src, &mut buf[..]) {
            Ok(Got { n: 0, .. }) => return Copied::Eof,
            Ok(Got { n, urgent, behind }) => (n, urgent, behind),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Copied::Nothing,
            Err(_) => return Copied::Failed,
        };
        meter.read(dir, n as u64);
        if wait && behind == Behind::Nothing && urgent.is_none() && n < COPY_BUF {
            return Copied::Answer(buf[..n].to_vec());
        }
        let then = behind.state(src_reset);
        let more = fin_follows(then, urgent);
        let mut written = 0;
        while written < n {
            match sockopt::send_now_flagged(dst, &buf[written..n], more) {
                Ok(m) => written += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    meter.add(dir, written as u64);
                    return Copied::DstGone;
                }
            }
        }
        meter.add(dir, written as u64);
        if written < n {
            return Copied::Partly {
                rest: buf[written..n].to_vec(),
                urgent,
                then,
            };
        }
        Copied::Written {
            bulk: n == COPY_BUF,
            urgent,
            then,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that take bulk buffers run one at a time: one of them
    /// takes every buffer there may be.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `bytes` into the buffer's room (as `read_in` does).
    fn put(h: &mut Held, bytes: &[u8]) -> usize {
        let n = bytes.len().min(h.room());
        h.buf[h.end..h.end + n].copy_from_slice(&bytes[..n]);
        h.end += n;
        n
    }

    /// Writes up to `n` held bytes out (as the write branch does).
    fn take_out(h: &mut Held, n: usize) -> Vec<u8> {
        let n = n.min(h.len());
        let out = h.buf[h.start..h.start + n].to_vec();
        h.consume(n);
        out
    }

    /// Waits (5 s at most) until `s` reports `event`: what the peer sent
    /// is there (loopback delivers within the write, unless a busy machine
    /// defers it).
    fn arrived(s: &TcpStream, event: libc::c_short) {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: event,
            revents: 0,
        };
        // SAFETY: one pollfd, a local, for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, 5000) };
        assert!(n == 1 && p.revents & event != 0, "nothing arrived in 5 s");
    }

    /// A read that leaves only the FIN behind says so (those bytes then
    /// leave with the FIN, [`fin_follows`]); one that leaves a byte, which
    /// the kernel counts as it counts a FIN, does not.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_that_leaves_only_the_fin_says_so() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let s = TcpStream::from_std(s).unwrap();
        sockopt::set_options(&s, std::time::Duration::from_secs(60));
        let mut buf = [0u8; 4];
        c.write_all(b"hello").unwrap();
        arrived(&s, libc::POLLIN);
        s.readable().await.unwrap();
        let got = read_once(&s, &mut buf).unwrap();
        assert!(got.n == 4 && got.behind == Behind::Open, "a byte is left");
        c.shutdown(std::net::Shutdown::Write).unwrap();
        arrived(&s, libc::POLLRDHUP);
        s.readable().await.unwrap();
        let got = read_once(&s, &mut buf).unwrap();
        assert!(
            got.n == 1 && got.behind == Behind::Fin,
            "the last byte, then the FIN"
        );
    }

    /// No fault, ever.
    struct NoFaults;

    impl Feed for NoFaults {
        async fn changed(&mut self) -> bool {
            false
        }

        fn wanted(&mut self) -> Vec<super::super::pipeline::Wanted> {
            Vec::new()
        }
    }

    /// Relays a local server's connection downstream to its client with no
    /// fault, its answers allowed `waits`.
    async fn relay_answers(src: &TcpStream, dst: &TcpStream, waits: &answer::Waits) -> Ended {
        let counters = crate::events::TestCounters::default();
        let meter = counters.meter();
        let growth = sockopt::RecvGrowth::fixed();
        let bufs = super::super::holding::Holding::new(false).buffers(
            Direction::Downstream,
            false,
            growth,
        );
        let not_reset = AtomicBool::new(false);
        let from = SrcSocket {
            socket: src,
            reset: &not_reset,
            waits,
        };
        let dir = Direction::Downstream;
        run(from, dst, dir, &meter, &mut NoFaults, bufs).await
    }

    /// A local server's answer, short or long, waits for a FIN behind it
    /// and leaves with it; a server whose answer nothing followed within
    /// the hold keeps its connection open, and its next answers go at
    /// once. (One at a time with the tests that take bulk buffers: the
    /// long answer takes one.)
    #[test]
    fn a_local_servers_answer_waits_for_a_fin_behind_it() {
        let _serial = serial();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(answers_wait_for_a_fin());
    }

    async fn answers_wait_for_a_fin() {
        use answer::testing::{answer_then_fin, connection};
        use std::io::{Read, Write};
        use std::time::Instant;
        static LONG: [u8; 3 * COPY_BUF + 5] = [7; 3 * COPY_BUF + 5];
        for answer in [&b"answer"[..], &LONG[..]] {
            let ((server, src), (client, dst)) = (connection(), connection());
            let peers = answer_then_fin(server, client, answer);
            let waits = answer::Waits::default();
            waits.allow();
            let ended = relay_answers(&src, &dst, &waits).await;
            assert!(matches!(ended, Ended::End(DirEnd::Fin)));
            let (got, fin_there, then) = peers.join().unwrap();
            assert!(got == answer, "{} bytes of {}", got.len(), answer.len());
            assert!(
                fin_there && then == 0,
                "the FIN came after the answer of {} bytes",
                answer.len()
            );
        }

        // Answers twice on an open connection.
        let ((mut server, src), (mut client, dst)) = (connection(), connection());
        let peers = std::thread::spawn(move || {
            let mut took = Vec::new();
            for word in [&b"first"[..], b"second"] {
                let began = Instant::now();
                server.write_all(word).unwrap();
                let mut buf = [0u8; 16];
                let n = client.read(&mut buf).unwrap();
                took.push((buf[..n].to_vec(), began.elapsed()));
            }
            server.shutdown(std::net::Shutdown::Write).unwrap();
            took
        });
        let waits = answer::Waits::default();
        waits.allow();
        let ended = relay_answers(&src, &dst, &waits).await;
        assert!(matches!(ended, Ended::End(DirEnd::Fin)));
        let took = peers.join().unwrap();
        assert_eq!(
            (&took[0].0[..], &took[1].0[..]),
            (&b"first"[..], &b"second"[..])
        );
        assert!(
            took[0].1 >= answer::HOLD,
            "the first answer was not held: {:?}",
            took[0].1
        );
        assert!(
            took[1].1 < answer::HOLD,
            "the second answer was held too: {:?}",
            took[1].1
        );
        assert!(!waits.left(), "the connection still waits");
    }

    #[test]
    fn a_budget_gives_no_more_than_its_limit_and_takes_back_what_is_returned() {
        let b = Budget::new(3);
        assert!(b.take() && b.take() && b.take());
        assert!(!b.take(), "all three are out");
        b.give_back();
        assert!(b.take(), "one came back");
        assert!(!b.take());
        // From many threads at once, still never more than the limit.
        let b = Budget::new(100);
        let got = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        if b.take() {
                            got.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(got.into_inner(), 100);
    }

    #[test]
    fn no_more_bulk_buffers_than_the_budget_exist_at_once() {
        let _serial = serial();
        // Takes them all (16 in tests). The tests that take buffers, or
        // run the relay, run one at a time: every buffer there is, pooled
        // or not, is to be had, and no more.
        let misses = bulk_buffers().2;
        let mut all = Vec::new();
        while let Some(h) = Held::take() {
            all.push(h);
            assert!(all.len() <= BULK_BUFFERS, "past the budget");
        }
        assert_eq!(all.len(), BULK_BUFFERS);
        // What the metrics say: all out, and the take that found none.
        assert_eq!(bulk_buffers(), (BULK_BUFFERS, BULK_BUFFERS, misses + 1));
        // Given back: POOL_MAX pooled (still counted), the rest freed.
        let last = all.pop().unwrap();
        for h in all {
            h.give_back();
        }
        assert_eq!(BUFFERS.taken.load(Ordering::Acquire), POOL_MAX + 1);
        drop(last);
        assert_eq!(
            BUFFERS.taken.load(Ordering::Acquire),
            POOL_MAX,
            "dropped: freed"
        );
        let mut all: Vec<Held> = std::iter::from_fn(Held::take).collect();
        assert_eq!(all.len(), BULK_BUFFERS, "nothing leaked");
        // One given back (freed: dropped with bytes in it) can be had again.
        let mut one = all.pop().unwrap();
        one.fill(b"in flight");
        drop(one);
        assert!(Held::take().is_some());
    }

    #[test]
    fn a_small_rest_drains_without_taking_more_and_is_not_pooled() {
        let _serial = serial();
        let mut h = Held::rest(b"unwritten".to_vec());
        assert_eq!(h.len(), 9);
        assert_eq!(h.room(), 0, "nothing more is read until it drains");
        assert_eq!(take_out(&mut h, 5), b"unwri");
        assert_eq!(h.room(), 0);
        assert_eq!(take_out(&mut h, 100), b"tten");
        let pooled = POOL.lock().unwrap().len();
        h.give_back();
        assert_eq!(POOL.lock().unwrap().len(), pooled, "not a bulk buffer");
    }

    #[test]
    fn held_bytes_come_out_in_order_through_every_compaction() {
        let _serial = serial();
        let mut h = Held::take().expect("memory for one buffer");
        let input: Vec<u8> = (0..5 * BULK_SIZE)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let (mut fed, mut out) = (0, Vec::new());
        // Writes of uneven sizes, smaller and larger than what is read.
        let sizes = [100_000, 7, 300_000, 65_536, 1, 200_000];
        let mut i = 0;
        while out.len() < input.len() {
            fed += put(&mut h, &input[fed..]);
            assert!(h.len() <= BULK_SIZE);
            out.extend(take_out(&mut h, sizes[i % sizes.len()]));
            i += 1;
            assert!(i < 10_000, "no progress");
        }
        assert_eq!(out, input);
        assert_eq!((h.start, h.end), (0, 0), "emptied, it starts again at 0");
    }

    #[test]
    fn a_full_buffer_moves_its_rest_only_when_at_most_half_is_left() {
        let _serial = serial();
        let mut h = Held::take().expect("memory for one buffer");
        put(&mut h, &vec![1u8; BULK_SIZE]);
        assert_eq!(h.room(), 0);
        // A quarter written: three quarters still wait, nothing is moved.
        take_out(&mut h, BULK_SIZE / 4);
        assert_eq!(h.room(), 0, "no room until half is written");
        assert_eq!(h.start, BULK_SIZE / 4);
        // Half written: the rest moves to the front, once.
        take_out(&mut h, BULK_SIZE / 4);
        assert_eq!(h.room(), BULK_SIZE / 2);
        assert_eq!((h.start, h.end), (0, BULK_SIZE / 2));
        assert_eq!(h.room(), BULK_SIZE / 2, "asking again moves nothing");
    }

    #[test]
    fn a_filled_buffer_holds_exactly_the_bytes_given() {
        let _serial = serial();
        let mut h = Held::take().expect("memory for one buffer");
        put(&mut h, b"stale bytes of an earlier stream");
        take_out(&mut h, usize::MAX);
        h.fill(b"rest");
        assert_eq!(&h.buf[h.start..h.end], b"rest");
        assert_eq!(h.room(), BULK_SIZE - 4);
    }
}
