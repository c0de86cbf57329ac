//! The fast path: a direction with no fault touching its bytes moves them
//! socket → pipe → socket with `splice(2)`, never copying them into user
//! space.
//!
//! Small messages take a shorter way: a direction whose reads come back
//! short (request/response traffic) reads into a per-thread buffer and
//! writes at once — two system calls per message, with the socket's
//! readiness cleared by the short read itself instead of by one more read
//! that would fail with EAGAIN. A read that fills the buffer (bulk) turns
//! the direction to splice until its pipe drains after a short read.
//!
//! Pipes are borrowed from a small pool only while bytes are in flight and
//! returned empty, so an idle connection holds no pipe: two file
//! descriptors per connection instead of six. (tokio-splice 0.2 is
//! bidirectional only; tokio-splice2 0.3 copies one direction but creates
//! its pipe up front and keeps it for the connection's life — its own
//! source marks a pool as a to-do — which would put 5,000 idle
//! connections over a 20,000-fd limit. Hence this module.)

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::DirEnd;
use super::pipeline::Feed;
use super::sockopt;
use crate::events::Meter;
use crate::fault::Direction;

/// Bytes one pipe carries per round trip; larger pipes mean fewer system
/// calls per byte on bulk transfers.
const PIPE_SIZE: usize = 1 << 20;
/// Idle pipes kept for reuse; beyond this they are closed.
const POOL_MAX: usize = 32;
/// The per-thread buffer of the small-message path: a read that fills it
/// is bulk, and the direction goes to splice.
const COPY_BUF: usize = 16 * 1024;

thread_local! {
    static COPY: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; COPY_BUF].into_boxed_slice());
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

static POOL: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

fn take_pipe() -> io::Result<Pipe> {
    if let Some(p) = POOL.lock().expect("pipe pool lock").pop() {
        return Ok(p);
    }
    let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
    // A larger pipe may be refused (pipe-max-size, per-user page limits);
    // the default size still works, only with more system calls.
    let size = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32))
        .map(|s| s as usize)
        .unwrap_or(1 << 16);
    Ok(Pipe { read, write, size })
}

/// Returns an empty pipe to the pool.
fn give_back(p: Pipe) {
    let mut pool = POOL.lock().expect("pipe pool lock");
    if pool.len() < POOL_MAX {
        pool.push(p);
    }
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE.union(SpliceFFlags::SPLICE_F_NONBLOCK);

/// How the source side of a direction stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SrcState {
    Open,
    /// FIN read: finish writing, then shut down writing on `dst`.
    Eof,
    /// RST (or another error) read: finish writing, then reset.
    Failed,
}

/// How a spliced direction ended.
pub(crate) enum Spliced {
    /// FIN or RST: the direction is over.
    End(DirEnd, u64),
    /// A byte fault now applies: the pipeline takes over (the pipe is
    /// empty; nothing was read that was not written).
    Faulted(u64),
}

/// Relays `src` → `dst` until FIN or an error, or until `feed` brings a
/// fault that touches the bytes; returns how it ended and the bytes moved.
///
/// Reading and writing overlap: while `dst` has no room, bytes keep moving
/// from `src` into the pipe until it is full, as a kernel-side buffer.
pub(crate) async fn run(
    src: &TcpStream,
    dst: &TcpStream,
    dir: Direction,
    meter: &Meter<'_>,
    feed: &mut impl Feed,
    mut growth: sockopt::RecvGrowth,
) -> Spliced {
    let mut total = 0u64;
    let mut pipe: Option<Pipe> = None;
    let mut in_pipe = 0usize;
    let mut pipe_full = false;
    let mut state = SrcState::Open;
    let (mut live, mut faulted) = (true, false);
    // Small messages first: most connections begin with a request.
    let mut copying = true;
    loop {
        if in_pipe == 0 {
            // An idle direction holds no pipe.
            if let Some(p) = pipe.take() {
                give_back(p);
            }
            match state {
                SrcState::Open if faulted => return Spliced::Faulted(total),
                SrcState::Open => {}
                SrcState::Eof => {
                    sockopt::shutdown_write(dst);
                    return Spliced::End(DirEnd::Fin, total);
                }
                SrcState::Failed => {
                    // Whatever was written before the RST goes first.
                    sockopt::drain(dst, super::RESET_DRAIN).await;
                    return Spliced::End(DirEnd::Reset, total);
                }
            }
        }
        // (A zero-length splice would read as EOF: never ask for 0 bytes.)
        let room = pipe.as_ref().map_or(usize::MAX, |p| p.size - in_pipe);
        // Once a fault arrived, stop reading and empty the pipe first.
        let want_read = state == SrcState::Open && !pipe_full && room > 0 && !faulted;
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
                if !copying && pipe.is_none() {
                    match take_pipe() {
                        Ok(p) => pipe = Some(p),
                        // Out of file descriptors: the small-message path
                        // carries everything (a partial write then waits
                        // in user space).
                        Err(_) => copying = true,
                    }
                }
                if copying && in_pipe == 0 {
                    match copy_small(src, dst, dir, meter) {
                        Copied::Nothing => {}
                        Copied::Eof => state = SrcState::Eof,
                        Copied::Failed => state = SrcState::Failed,
                        Copied::DstGone => return Spliced::End(DirEnd::Reset, total),
                        Copied::Written { n, bulk } => {
                            total += n as u64;
                            copying = !bulk;
                        }
                        Copied::Partly { written, rest } => {
                            total += written as u64;
                            // The rest waits in a pipe, written as spliced
                            // bytes are (the destination is full: bulk).
                            copying = false;
                            match take_pipe().and_then(|p| fill_pipe(p, &rest)) {
                                Ok(p) => {
                                    pipe = Some(p);
                                    in_pipe = rest.len();
                                }
                                Err(_) => {
                                    if super::pipeline::write_all(dst, &rest).await.is_err() {
                                        return Spliced::End(DirEnd::Reset, total);
                                    }
                                    total += rest.len() as u64;
                                    meter.add(dir, rest.len() as u64);
                                }
                            }
                        }
                    }
                    continue;
                }
                let p = pipe.as_ref().expect("a pipe, unless copying");
                match splice_in(src, p, in_pipe) {
                    Ok(In::Bytes(0)) => state = SrcState::Eof,
                    Ok(In::Bytes(n)) => {
                        in_pipe += n;
                        meter.read(dir, n as u64);
                        // Short: back to small messages once the pipe is empty.
                        copying = n < COPY_BUF;
                    }
                    Ok(In::PipeFull) => {
                        pipe_full = true;
                        growth.blocked();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => state = SrcState::Failed,
                }
            }
            w = dst.writable(), if in_pipe > 0 => {
                let p = pipe.as_ref().expect("bytes are in a pipe");
                let out = w.and_then(|_| dst.try_io(Interest::WRITABLE, || {
                    splice(&p.read, None, dst, None, in_pipe, FLAGS).map_err(io::Error::from)
                }));
                match out {
                    Ok(m) => {
                        in_pipe -= m;
                        pipe_full = false;
                        total += m as u64;
                        meter.add(dir, m as u64);
                        growth.moved(src, m, in_pipe == 0);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // The destination is gone; the pipe's bytes go with it.
                    Err(_) => return Spliced::End(DirEnd::Reset, total),
                }
            }
        }
    }
}

enum In {
    Bytes(usize),
    /// The pipe has no room although the socket has data.
    PipeFull,
}

/// Moves what the socket holds into the pipe. EAGAIN from splice means
/// either "socket empty" or "pipe full"; only the first may clear the
/// socket's read readiness (else the next bytes would never wake us), so a
/// non-empty pipe is told apart by asking the socket how much it holds.
fn splice_in(src: &TcpStream, p: &Pipe, in_pipe: usize) -> io::Result<In> {
    src.try_io(Interest::READABLE, || {
        match splice(src, None, &p.write, None, p.size - in_pipe, FLAGS) {
            Ok(n) => Ok(In::Bytes(n)),
            Err(nix::errno::Errno::EAGAIN) if in_pipe > 0 && sockopt::readable_bytes(src) > 0 => {
                Ok(In::PipeFull)
            }
            Err(e) => Err(e.into()),
        }
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
    /// All `n` bytes read were written; `bulk`: the read filled the buffer.
    Written {
        n: usize,
        bulk: bool,
    },
    /// The destination took only `written` bytes; `rest` still has to go.
    Partly {
        written: usize,
        rest: Vec<u8>,
    },
}

/// Reads what `src` holds (up to [`COPY_BUF`]) and writes it to `dst`
/// without waiting. A short read has emptied the socket's receive queue,
/// so it clears the read readiness itself: the read that would only fail
/// with EAGAIN is never made (tokio keeps any readiness that arrived since,
/// so no wake-up is lost).
fn copy_small(src: &TcpStream, dst: &TcpStream, dir: Direction, meter: &Meter<'_>) -> Copied {
    use std::os::fd::AsFd;
    COPY.with(|buf| {
        let mut buf = buf.borrow_mut();
        let mut got = None;
        let read = src.try_io(Interest::READABLE, || {
            let n = nix::unistd::read(src.as_fd(), &mut buf[..]).map_err(io::Error::from)?;
            if n > 0 && n < COPY_BUF {
                got = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match (got, read) {
            (Some(n), _) => n,
            (None, Ok(0)) => return Copied::Eof,
            (None, Ok(n)) => n,
            (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return Copied::Nothing,
            (None, Err(_)) => return Copied::Failed,
        };
        meter.read(dir, n as u64);
        let mut written = 0;
        while written < n {
            match sockopt::send_now(dst, &buf[written..n]) {
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
                written,
                rest: buf[written..n].to_vec(),
            };
        }
        Copied::Written {
            n,
            bulk: n == COPY_BUF,
        }
    })
}

/// Puts `bytes` (at most [`COPY_BUF`], less than any pipe holds) into an
/// empty pipe.
fn fill_pipe(p: Pipe, bytes: &[u8]) -> io::Result<Pipe> {
    let n = nix::unistd::write(&p.write, bytes)?;
    if n < bytes.len() {
        return Err(io::Error::other("short pipe write"));
    }
    Ok(p)
}
