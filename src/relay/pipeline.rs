//! One direction with faults: a reader, the fault stages, and a writer,
//! joined by small bounded channels so that a stage that stops reading
//! (a stall, a full delay line) pushes back to the sender's socket.
//!
//! The stages can change while the connection is open (the control API):
//! a new fault is linked in at its place, a removed one is told to stop —
//! it hands on what it holds, at once — and its predecessor is re-linked to
//! its successor. The predecessor is paused (its output locked) throughout,
//! so no byte is lost or reordered. Everything runs inside the connection's
//! task: the reader, the writer, a runner polling the stages, and changes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::DirEnd;
use crate::events::Meter;
use crate::fault::{Direction, FaultSpec, Item, ItemKind, Output, StageCtx, StageFuture, StageIo};
use crate::socket::peer::Sink;
use crate::socket::sockopt;

/// Read sizes: a connection starts small (an idle or chatty connection
/// holds little memory) and grows while reads keep filling the buffer (a
/// bulk transfer, where large chunks make the channel hops cheap per byte).
const MIN_READ: usize = 16 * 1024;
const MAX_READ: usize = 512 * 1024;
/// Items in flight between two stages.
const DEPTH: usize = 4;

/// Where a direction's bytes come from.
pub(crate) enum Source<'a> {
    /// A socket, how its receive buffer may grow
    /// ([`sockopt::RecvGrowth`]), and whether its chunks may be dated by
    /// the kernel's receive stamp (not when netchaos's packet delay line
    /// holds its packets after they were stamped); and whether the other
    /// direction found it reset (see [`super::fast::run`]).
    Socket(
        &'a TcpStream,
        sockopt::RecvGrowth,
        bool,
        &'a std::sync::atomic::AtomicBool,
    ),
    /// A canned reply (`respond`): these items, then silence.
    Script(Vec<ItemKind>),
    /// A task that reads elsewhere and sends into the pipeline (the HTTP
    /// layer): it is given the pipeline's input and polled as its reader.
    Driven(Box<dyn FnOnce(Output) -> Driver<'a> + Send + 'a>),
}

/// The future of a [`Source::Driven`] reader.
pub(crate) type Driver<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// A stage the direction should run.
pub(crate) struct Wanted {
    /// The fault's identity: the same across updates of its parameters.
    pub id: u64,
    /// Its parameters; a new `Arc` means the fault was updated.
    pub spec: Arc<FaultSpec>,
    pub ctx: StageCtx,
}

/// Changes to a direction's faults while it runs.
pub(crate) trait Feed: Send {
    /// Waits for a change; `false` when no change can come any more.
    fn changed(&mut self) -> impl std::future::Future<Output = bool> + Send;
    /// The stages now wanted, in order.
    fn wanted(&mut self) -> Vec<Wanted>;
}

/// One linked stage.
struct Link {
    id: u64,
    spec: Arc<FaultSpec>,
    /// The stage's own output, to re-link its predecessor when it goes.
    out: Output,
    stop: CancellationToken,
    /// Fires when the stage has returned and forwarded what it had.
    done: oneshot::Receiver<()>,
    /// The stage's count that an update of its parameters keeps.
    carried: Arc<std::sync::atomic::AtomicU64>,
}

/// Runs the direction until the writer delivers FIN, RST or a close.
pub(crate) async fn run(
    src: Source<'_>,
    dst: Sink<'_>,
    dir: Direction,
    feed: &mut impl Feed,
    meter: &Meter<'_>,
) -> (DirEnd, u64) {
    let (writer_tx, writer_rx) = mpsc::channel::<Item>(DEPTH);
    let head = Output::new(writer_tx);
    let (spawn_tx, mut spawn_rx) = mpsc::unbounded_channel::<StageFuture<'static>>();
    let mut chain: Vec<Link> = Vec::new();

    // Polls every stage; new ones arrive through `spawn_rx`.
    let runner = async {
        let mut stages = FuturesUnordered::new();
        loop {
            tokio::select! {
                Some(f) = spawn_rx.recv() => stages.push(f),
                Some(()) = stages.next(), if !stages.is_empty() => {}
                else => std::future::pending::<()>().await,
            }
        }
    };
    let reader = read_source(src, head.clone(), meter, dir);
    let writer = write_items(dst, writer_rx, dir, meter);
    tokio::pin!(runner, reader, writer);
    let mut reader_done = false;
    let mut live = true;

    relink(&mut chain, &head, feed.wanted(), &spawn_tx).await;
    loop {
        // Biased, the feed first: a fault that arrived before the next
        // bytes is linked before the reader is polled for them.
        tokio::select! {
            biased;
            changed = feed.changed(), if live => {
                if !changed {
                    live = false;
                    continue;
                }
                let wanted = feed.wanted();
                let change = relink(&mut chain, &head, wanted, &spawn_tx);
                tokio::pin!(change);
                // Keep everything flowing while the chain changes: a
                // stopping stage may need room downstream to hand on.
                loop {
                    tokio::select! {
                        biased;
                        () = &mut change => break,
                        end = &mut writer => return end,
                        _ = &mut reader, if !reader_done => reader_done = true,
                        _ = &mut runner => unreachable!("the runner never ends"),
                    }
                }
            }
            end = &mut writer => return end,
            _ = &mut reader, if !reader_done => reader_done = true,
            _ = &mut runner => unreachable!("the runner never ends"),
        }
    }
}

/// Makes the chain match `wanted`: removes what is no longer wanted (or
/// changed), then links in what is new, each at its place.
async fn relink(
    chain: &mut Vec<Link>,
    head: &Output,
    wanted: Vec<Wanted>,
    spawn: &mpsc::UnboundedSender<StageFuture<'static>>,
) {
    // Counts of stages replaced by an update, for their successors.
    let mut carried = Vec::new();
    let mut i = 0;
    while i < chain.len() {
        let keep = wanted
            .iter()
            .any(|w| w.id == chain[i].id && Arc::ptr_eq(&w.spec, &chain[i].spec));
        if keep {
            i += 1;
            continue;
        }
        let pred = if i == 0 {
            head.clone()
        } else {
            chain[i - 1].out.clone()
        };
        let link = chain.remove(i);
        if wanted.iter().any(|w| w.id == link.id) {
            carried.push((link.id, link.carried.clone()));
        }
        let mut paused = pred.lock().await;
        link.stop.cancel();
        let _ = link.done.await;
        *paused = link.out.lock().await.clone();
    }
    let order: Vec<u64> = wanted.iter().map(|w| w.id).collect();
    for w in wanted {
        if chain.iter().any(|l| l.id == w.id) {
            continue;
        }
        let pos = order
            .iter()
            .position(|id| *id == w.id)
            .unwrap_or(order.len());
        // After every linked stage that comes earlier in the wanted order.
        let at = chain
            .iter()
            .take_while(|l| {
                order
                    .iter()
                    .position(|id| *id == l.id)
                    .is_some_and(|p| p < pos)
            })
            .count();
        let pred = if at == 0 {
            head.clone()
        } else {
            chain[at - 1].out.clone()
        };
        let mut paused = pred.lock().await;
        let (tx, rx) = mpsc::channel::<Item>(DEPTH);
        let out = Output::new(paused.clone());
        *paused = tx;
        drop(paused);
        let mut io = StageIo::new(rx, out.clone());
        if let Some((_, c)) = carried.iter().find(|(id, _)| *id == w.id) {
            io.carried = c.clone();
        }
        let stop = io.stop.clone();
        let io_carried = io.carried.clone();
        let (done_tx, done) = oneshot::channel();
        let kind = w.spec.kind.clone();
        let ctx = w.ctx;
        let _ = spawn.send(Box::pin(async move {
            if let Some(stage) = kind.stage(ctx, &mut io) {
                stage.await;
            }
            if io.stop.is_cancelled() {
                io.drain_input().await;
            }
            drop(io);
            let _ = done_tx.send(());
        }));
        chain.insert(
            at,
            Link {
                id: w.id,
                spec: w.spec,
                carried: io_carried,
                out,
                stop,
                done,
            },
        );
    }
}

async fn read_source(src: Source<'_>, out: Output, meter: &Meter<'_>, dir: Direction) {
    match src {
        Source::Socket(s, growth, stamp, reset) => {
            read_socket(s, growth, stamp, reset, out, meter, dir).await
        }
        Source::Driven(task) => task(out).await,
        Source::Script(items) => {
            for kind in items {
                if out
                    .send(Item {
                        at: Instant::now(),
                        kind,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            // Keep the channel open: a script that ends without FIN
            // (respond then stall) leaves the connection silent.
            std::future::pending::<()>().await;
        }
    }
}

/// Reads chunks until FIN or an error; a read error (RST) becomes a Reset
/// item so that it reaches the other side in order, after the bytes before
/// it.
async fn read_socket(
    src: &TcpStream,
    mut growth: sockopt::RecvGrowth,
    stamp: bool,
    reset: &std::sync::atomic::AtomicBool,
    out: Output,
    meter: &Meter<'_>,
    dir: Direction,
) {
    let mut buf = BytesMut::new();
    let mut want = MIN_READ;
    // Each chunk dated by its arrival, not by when the relay woke to read;
    // never before the chunk ahead of it.
    let stamped = stamp && super::arrival::stamp(src);
    let mut last_at = None::<Instant>;
    loop {
        if src.readable().await.is_err() {
            let _ = out
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
        let read = if stamped {
            super::arrival::try_read(src, &mut buf)
        } else {
            src.try_read_buf(&mut buf).map(|n| (n, Instant::now()))
        };
        let mut at = Instant::now();
        let kind = match read {
            // After a write to it failed: its RST (fast::run's `end_of`).
            Ok((0, _)) if reset.load(std::sync::atomic::Ordering::Relaxed) => ItemKind::Reset,
            Ok((0, _)) => ItemKind::Fin,
            Ok((n, arrived)) => {
                at = last_at.map_or(arrived, |l| arrived.max(l));
                last_at = Some(at);
                meter.read(dir, n as u64);
                // The stages' first channel says whether the destination
                // keeps up (empty) or the bytes back up (full).
                match out.room() {
                    Some((0, _)) => growth.blocked(),
                    Some((free, all)) => growth.moved(src, n, free == all),
                    None => {}
                }
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
        if out.send(Item { at, kind }).await.is_err() || end {
            return;
        }
    }
}

/// How long a reset waits for written bytes to be acknowledged first.
pub(crate) const RESET_DRAIN: Duration = Duration::from_secs(1);

async fn write_items(
    mut dst: Sink<'_>,
    mut rx: mpsc::Receiver<Item>,
    dir: Direction,
    meter: &Meter<'_>,
) -> (DirEnd, u64) {
    let mut total = 0u64;
    while let Some(item) = rx.recv().await {
        match item.kind {
            ItemKind::Data(bytes) => {
                if dst.write_all(&bytes).await.is_err() {
                    // A socket's RST: what it sent before still comes
                    // back the other way.
                    let end = if dst.socket().is_some() {
                        DirEnd::DstReset
                    } else {
                        DirEnd::Reset
                    };
                    return (end, total);
                }
                total += bytes.len() as u64;
                meter.add(dir, bytes.len() as u64);
            }
            ItemKind::Fin => {
                dst.finish().await;
                return (DirEnd::Fin, total);
            }
            ItemKind::Close => {
                dst.finish().await;
                return (DirEnd::Close, total);
            }
            ItemKind::Reset => {
                if let Some(s) = dst.socket() {
                    sockopt::drain(s, RESET_DRAIN).await;
                }
                return (DirEnd::Reset, total);
            }
        }
    }
    // Every stage ended without a verdict: nothing can flow any more.
    (DirEnd::Reset, total)
}
