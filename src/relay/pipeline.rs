//! One direction with faults: a reader, the fault stages, and a writer,
//! joined by small bounded channels so that a stage that stops reading
//! (a stall, a full delay line) pushes back to the sender's socket.
//!
//! Everything runs inside the connection's task; the channels carry byte
//! chunks stamped with their arrival time, FIN, RST and close markers.

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::future::join_all;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{DirEnd, sockopt};
use crate::events::Stats;
use crate::fault::{Direction, FaultKind, Item, ItemKind, StageCtx, StageIo};

/// Read sizes: a connection starts small (an idle or chatty connection
/// holds little memory) and grows while reads keep filling the buffer (a
/// bulk transfer, where large chunks make the channel hops cheap per byte).
const MIN_READ: usize = 16 * 1024;
const MAX_READ: usize = 512 * 1024;
/// Items in flight between two stages.
const DEPTH: usize = 4;

/// Where a direction's bytes come from.
pub enum Source<'a> {
    Socket(&'a TcpStream),
    /// A canned reply (`respond`): these items, then silence.
    Script(Vec<ItemKind>),
}

/// Runs the direction until the writer delivers FIN, RST or a close.
pub async fn run(
    src: Source<'_>,
    dst: &TcpStream,
    dir: Direction,
    stages: Vec<(FaultKind, StageCtx)>,
    stats: &Stats,
) -> (DirEnd, u64) {
    let (first_tx, mut rx) = mpsc::channel::<Item>(DEPTH);
    let mut futures = Vec::with_capacity(stages.len());
    for (kind, ctx) in stages {
        let (tx, next_rx) = mpsc::channel::<Item>(DEPTH);
        let io = StageIo {
            input: rx,
            output: tx,
        };
        if let Some(f) = kind.stage(ctx, io) {
            futures.push(f);
        }
        rx = next_rx;
    }
    let reader = async {
        match src {
            Source::Socket(s) => read_socket(s, first_tx).await,
            Source::Script(items) => {
                for kind in items {
                    let item = Item {
                        at: Instant::now(),
                        kind,
                    };
                    if first_tx.send(item).await.is_err() {
                        return;
                    }
                }
                // Keep the channel open: a script that ends without FIN
                // (respond then stall) leaves the connection silent.
                std::future::pending::<()>().await;
            }
        }
    };
    let background = async {
        futures_util::join!(reader, join_all(futures));
        std::future::pending::<()>().await
    };
    tokio::select! {
        end = write_items(dst, rx, dir, stats) => end,
        _ = background => unreachable!("background never completes"),
    }
}

/// Reads chunks until FIN or an error; a read error (RST) becomes a Reset
/// item so that it reaches the other side in order, after the bytes before
/// it.
async fn read_socket(src: &TcpStream, tx: mpsc::Sender<Item>) {
    let mut buf = BytesMut::new();
    let mut want = MIN_READ;
    loop {
        if src.readable().await.is_err() {
            let _ = tx
                .send(Item {
                    at: Instant::now(),
                    kind: ItemKind::Reset,
                })
                .await;
            return;
        }
        // Allocated only once there is something to read; reuses the
        // allocation once the chunks handed out were dropped.
        buf.reserve(want);
        let room = buf.capacity() - buf.len();
        let kind = match src.try_read_buf(&mut buf) {
            Ok(0) => ItemKind::Fin,
            Ok(n) => {
                if n == room {
                    want = (want * 2).min(MAX_READ);
                } else if n < want / 4 {
                    want = (want / 2).max(MIN_READ);
                }
                ItemKind::Data(buf.split().freeze())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => ItemKind::Reset,
        };
        let end = !matches!(kind, ItemKind::Data(_));
        if tx
            .send(Item {
                at: Instant::now(),
                kind,
            })
            .await
            .is_err()
            || end
        {
            return;
        }
    }
}

/// How long a reset waits for written bytes to be acknowledged first.
pub const RESET_DRAIN: Duration = Duration::from_secs(1);

async fn write_items(
    dst: &TcpStream,
    mut rx: mpsc::Receiver<Item>,
    dir: Direction,
    stats: &Stats,
) -> (DirEnd, u64) {
    let mut total = 0u64;
    while let Some(item) = rx.recv().await {
        match item.kind {
            ItemKind::Data(bytes) => {
                if write_all(dst, &bytes).await.is_err() {
                    return (DirEnd::Reset, total);
                }
                total += bytes.len() as u64;
                stats.add_bytes(dir, bytes.len() as u64);
            }
            ItemKind::Fin => {
                sockopt::shutdown_write(dst);
                return (DirEnd::Fin, total);
            }
            ItemKind::Close => {
                sockopt::shutdown_write(dst);
                return (DirEnd::Close, total);
            }
            ItemKind::Reset => {
                sockopt::drain(dst, RESET_DRAIN).await;
                return (DirEnd::Reset, total);
            }
        }
    }
    // Every stage ended without a verdict: nothing can flow any more.
    (DirEnd::Reset, total)
}

/// Writes all of `buf`, waiting for room as needed.
pub async fn write_all(dst: &TcpStream, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        dst.writable().await?;
        match dst.try_write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
