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
use super::sockopt;
use crate::events::Stats;
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

/// Idle pipes in the pool (for the benchmark's fd accounting).
pub fn pooled() -> usize {
    POOL.lock().expect("pipe pool lock").len()
}

const FLAGS: SpliceFFlags = SpliceFFlags::SPLICE_F_MOVE.union(SpliceFFlags::SPLICE_F_NONBLOCK);

/// Relays `src` → `dst` until FIN or an error; returns how it ended and the
/// bytes moved.
pub async fn run(src: &TcpStream, dst: &TcpStream, dir: Direction, stats: &Stats) -> (DirEnd, u64) {
    let mut total = 0u64;
    loop {
        if src.readable().await.is_err() {
            return (DirEnd::Reset, total);
        }
        let pipe = match take_pipe() {
            Ok(p) => p,
            // Out of file descriptors: degrade to copying rather than fail.
            Err(_) => match copy_once(src, dst, dir, stats, &mut total).await {
                Ok(Some(end)) => return (end, total),
                Ok(None) => continue,
                Err(end) => return (end, total),
            },
        };
        // Splice in, then drain completely, so that the pipe is always empty
        // when we read: EAGAIN then means the socket is empty, never that
        // the pipe is full (which would wrongly clear read readiness). The
        // pipe is kept while data keeps coming and returned once it stops.
        loop {
            let read = src.try_io(Interest::READABLE, || {
                splice(src, None, &pipe.write, None, pipe.size, FLAGS).map_err(io::Error::from)
            });
            match read {
                Ok(0) => {
                    give_back(pipe);
                    sockopt::shutdown_write(dst);
                    return (DirEnd::Fin, total);
                }
                Ok(n) => {
                    if let Err(end) = drain_pipe(&pipe, n, dst).await {
                        return (end, total); // the pipe holds data: drop it
                    }
                    total += n as u64;
                    stats.add_bytes(dir, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    give_back(pipe);
                    break;
                }
                Err(_) => {
                    give_back(pipe);
                    // Whatever was written before the RST goes first.
                    sockopt::drain(dst, super::RESET_DRAIN).await;
                    return (DirEnd::Reset, total);
                }
            }
        }
    }
}

/// Writes the `n` bytes in the pipe to `dst`.
async fn drain_pipe(pipe: &Pipe, mut n: usize, dst: &TcpStream) -> Result<(), DirEnd> {
    while n > 0 {
        dst.writable().await.map_err(|_| DirEnd::Reset)?;
        match dst.try_io(Interest::WRITABLE, || {
            splice(&pipe.read, None, dst, None, n, FLAGS).map_err(io::Error::from)
        }) {
            Ok(m) => n -= m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(DirEnd::Reset),
        }
    }
    Ok(())
}

/// One read-and-write through a user-space buffer, for when no pipe can be
/// had. `Ok(Some(end))` ends the direction.
async fn copy_once(
    src: &TcpStream,
    dst: &TcpStream,
    dir: Direction,
    stats: &Stats,
    total: &mut u64,
) -> Result<Option<DirEnd>, DirEnd> {
    let mut buf = vec![0u8; 16 * 1024];
    match src.try_read(&mut buf) {
        Ok(0) => {
            sockopt::shutdown_write(dst);
            Ok(Some(DirEnd::Fin))
        }
        Ok(n) => {
            super::pipeline::write_all(dst, &buf[..n])
                .await
                .map_err(|_| DirEnd::Reset)?;
            *total += n as u64;
            stats.add_bytes(dir, n as u64);
            Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(_) => Err(DirEnd::Reset),
    }
}
