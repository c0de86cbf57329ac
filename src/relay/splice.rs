//! The fast path: a direction with no fault touching its bytes moves them
//! socket → pipe → socket with `splice(2)`, never copying them into user
//! space.
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
) -> Spliced {
    let mut total = 0u64;
    let mut pipe: Option<Pipe> = None;
    let mut in_pipe = 0usize;
    let mut pipe_full = false;
    let mut state = SrcState::Open;
    let (mut live, mut faulted) = (true, false);
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
        tokio::select! {
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
                if pipe.is_none() {
                    match take_pipe() {
                        Ok(p) => pipe = Some(p),
                        // Out of file descriptors: degrade to copying.
                        Err(_) => match copy_once(src, dst, dir, meter, &mut total).await {
                            Ok(Some(end)) => return Spliced::End(end, total),
                            Ok(None) => continue,
                            Err(end) => return Spliced::End(end, total),
                        },
                    }
                }
                let p = pipe.as_ref().expect("pipe taken above");
                match splice_in(src, p, in_pipe) {
                    Ok(In::Bytes(0)) => state = SrcState::Eof,
                    Ok(In::Bytes(n)) => {
                        in_pipe += n;
                        meter.read(dir, n as u64);
                    }
                    Ok(In::PipeFull) => pipe_full = true,
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

/// One read-and-write through a user-space buffer, for when no pipe can be
/// had. `Ok(Some(end))` ends the direction.
async fn copy_once(
    src: &TcpStream,
    dst: &TcpStream,
    dir: Direction,
    meter: &Meter<'_>,
    total: &mut u64,
) -> Result<Option<DirEnd>, DirEnd> {
    let mut buf = vec![0u8; 16 * 1024];
    match src.try_read(&mut buf) {
        Ok(0) => {
            sockopt::shutdown_write(dst);
            Ok(Some(DirEnd::Fin))
        }
        Ok(n) => {
            meter.read(dir, n as u64);
            super::pipeline::write_all(dst, &buf[..n])
                .await
                .map_err(|_| DirEnd::Reset)?;
            *total += n as u64;
            meter.add(dir, n as u64);
            Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(_) => Err(DirEnd::Reset),
    }
}
