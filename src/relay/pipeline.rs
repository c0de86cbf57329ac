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

use super::{DirEnd, SrcSocket, answer};
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
    /// holds its packets after they were stamped).
    Socket(SrcSocket<'a>, sockopt::RecvGrowth, bool),
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
    let waits = match &src {
        Source::Socket(s, ..) => s.waits,
        _ => answer::Waits::none(),
    };
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
    let writer = write_items(dst, writer_rx, dir, meter, waits);
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
        Source::Socket(s, growth, stamp) => {
            read_socket(s.socket, growth, stamp, s.reset, out, meter, dir).await
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

/// Writes the items that come out of the last stage to `dst`. `waits`:
/// how often the source's answers may still wait briefly for a FIN behind
/// them ([`answer`]), as on the fast path.
async fn write_items(
    mut dst: Sink<'_>,
    mut rx: mpsc::Receiver<Item>,
    dir: Direction,
    meter: &Meter<'_>,
    waits: &answer::Waits,
) -> (DirEnd, u64) {
    let mut total = 0u64;
    let mut next = rx.recv().await;
    while let Some(item) = next.take() {
        match item.kind {
            ItemKind::Data(bytes) => {
                // A FIN already queued behind these bytes leaves with them
                // (as on the fast path: `fast::fin_follows`), and a local
                // server's answer waits for one ([`answer`]). Looked for
                // behind small chunks only (an answer's end): the item
                // taken is held while this write waits, one more than the
                // channel's depth, and bulk need not hold that.
                let after = if bytes.len() > MIN_READ {
                    None
                } else if let Ok(item) = rx.try_recv() {
                    Some(item)
                } else if waits.left() {
                    // The reader reads a FIN, and the stages hand it on,
                    // while this waits.
                    let item = answer::wait_for(|| match rx.try_recv() {
                        Ok(item) => Some(Some(item)),
                        Err(mpsc::error::TryRecvError::Disconnected) => Some(None),
                        Err(mpsc::error::TryRecvError::Empty) => None,
                    })
                    .await
                    .flatten();
                    waits.spent(item.is_some());
                    item
                } else {
                    None
                };
                let fin = |i: &Item| matches!(i.kind, ItemKind::Fin | ItemKind::Close);
                let wrote = if after.as_ref().is_some_and(fin) {
                    dst.write_last(&bytes).await
                } else {
                    dst.write_all(&bytes).await
                };
                next = after;
                if wrote.is_err() {
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
                if next.is_none() {
                    next = rx.recv().await;
                }
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

/// One direction in-process, on a paused clock: its source a task that
/// sends numbered chunks, its destination an in-memory pipe, its faults
/// changed while bytes flow — what reaches the destination, and when.
#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::events::TestCounters;
    use crate::fault::testing::ctx;
    use crate::units::Window;

    /// The stages wanted: each fault's id and parameters, in order.
    type Stages = Vec<(u64, Arc<FaultSpec>)>;

    /// The faults as a test changes them: each change, the stages wanted.
    struct Changes {
        rx: mpsc::Receiver<Stages>,
        now: Stages,
    }

    impl Feed for Changes {
        async fn changed(&mut self) -> bool {
            match self.rx.recv().await {
                Some(w) => {
                    self.now = w;
                    true
                }
                None => false,
            }
        }

        fn wanted(&mut self) -> Vec<Wanted> {
            self.now
                .iter()
                .map(|(id, spec)| Wanted {
                    id: *id,
                    spec: spec.clone(),
                    ctx: ctx(Window::ALWAYS),
                })
                .collect()
        }
    }

    fn spec(flag: &str) -> Arc<FaultSpec> {
        Arc::new(crate::profile::parse_fault_flag(flag).expect("a fault"))
    }

    /// `n` chunks of 5 bytes ("0042\n"), one per virtual millisecond.
    fn chunk(i: usize) -> Vec<u8> {
        format!("{i:04}\n").into_bytes()
    }

    /// Runs one direction: `n` chunks sent, the faults `first` linked
    /// from the start, `changes` applied at their times. Returns how it
    /// ended, and each chunk's arrival, in ms from the start, in the order
    /// the bytes came.
    async fn run_with(
        n: usize,
        first: Stages,
        changes: Vec<(u64, Stages)>,
    ) -> ((DirEnd, u64), Vec<(usize, u64)>) {
        crate::timer::runtime_clock_only();
        let began = Instant::now();
        let (feed_tx, feed_rx) = mpsc::channel(8);
        tokio::spawn(async move {
            for (at, wanted) in changes {
                tokio::time::sleep_until(began + Duration::from_millis(at)).await;
                let _ = feed_tx.send(wanted).await;
            }
            // Kept open: the feed ends with the direction.
            std::future::pending::<()>().await;
        });
        let mut feed = Changes {
            rx: feed_rx,
            now: first,
        };
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let source = Source::Driven(Box::new(move |out: Output| {
            Box::pin(async move {
                for i in 0..n {
                    let at = Instant::now();
                    let item = Item {
                        at,
                        kind: ItemKind::Data(chunk(i).into()),
                    };
                    if out.send(item).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = out
                    .send(Item {
                        at: Instant::now(),
                        kind: ItemKind::Fin,
                    })
                    .await;
            })
        }));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut arrivals = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match theirs.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => {
                        got.extend_from_slice(&buf[..k]);
                        let ms = began.elapsed().as_millis() as u64;
                        while got.len() >= 5 * (arrivals.len() + 1) {
                            let at = 5 * arrivals.len();
                            let text = std::str::from_utf8(&got[at..at + 4]).unwrap();
                            arrivals.push((text.parse::<usize>().unwrap(), ms));
                        }
                    }
                }
            }
            arrivals
        });
        let counters = TestCounters::default();
        let meter = counters.meter();
        let sink = Sink::Local(Box::new(ours));
        let direction = run(source, sink, Direction::Downstream, &mut feed, &meter);
        let end = tokio::time::timeout(Duration::from_secs(60), direction)
            .await
            .expect("the direction ends within a virtual minute");
        let arrivals = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("the destination ends")
            .unwrap();
        (end, arrivals)
    }

    /// Through a stage, a local server's answer waits for the FIN behind
    /// it (as on the fast path) and leaves with it: the client that reads
    /// the answer finds the FIN there at once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_local_servers_answer_waits_for_its_fin_through_the_stages() {
        use answer::testing::{answer_then_fin, connection};
        let ((server, src), (client, dst)) = (connection(), connection());
        let peers = answer_then_fin(server, client, b"answer");
        let (_never, feed_rx) = mpsc::channel(1);
        let mut feed = Changes {
            rx: feed_rx,
            now: vec![(1, spec("latency:delay=0"))],
        };
        let counters = TestCounters::default();
        let meter = counters.meter();
        let not_reset = std::sync::atomic::AtomicBool::new(false);
        let waits = answer::Waits::default();
        waits.allow();
        let from = SrcSocket {
            socket: &src,
            reset: &not_reset,
            waits: &waits,
        };
        let source = Source::Socket(from, sockopt::RecvGrowth::fixed(), false);
        let direction = run(
            source,
            Sink::Tcp(&dst),
            Direction::Downstream,
            &mut feed,
            &meter,
        );
        let (end, total) = tokio::time::timeout(Duration::from_secs(10), direction)
            .await
            .expect("the direction ends");
        assert!(matches!(end, DirEnd::Fin) && total == 6, "{end:?} {total}");
        let (answer, fin_there, then) = peers.join().unwrap();
        assert_eq!(answer, b"answer");
        assert!(fin_there && then == 0, "the FIN came after the answer");
    }

    #[tokio::test(start_paused = true)]
    async fn faults_linked_and_unlinked_mid_stream_lose_and_reorder_nothing() {
        let latency = spec("latency:delay=30ms");
        let slow = spec("bandwidth:rate=5KB/s");
        let changes = vec![
            (20, vec![(1, latency.clone())]),
            (60, vec![(1, latency.clone()), (2, slow.clone())]),
            (90, vec![(2, slow.clone())]),
            (120, vec![]),
            (150, vec![(3, latency.clone())]),
        ];
        let ((end, total), arrivals) = run_with(200, vec![], changes).await;
        assert!(matches!(end, DirEnd::Fin), "{end:?}");
        assert_eq!(total, 200 * 5);
        // Every chunk, once, in order.
        let order: Vec<usize> = arrivals.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, (0..200).collect::<Vec<_>>());
        // Before any fault: at once. With the latency linked (sent 20 ms
        // to 60 ms): 30 ms late. Unlinked at 120 ms: what it held went on
        // then; what came after, at once, until the last link at 150 ms.
        let late = |i: usize| arrivals[i].1 as i64 - i as i64;
        assert!(late(5) <= 1, "chunk 5 {}ms late", late(5));
        assert!(
            (29..=31).contains(&late(40)),
            "chunk 40 {}ms late",
            late(40)
        );
        assert!(late(135) <= 1, "chunk 135 {}ms late", late(135));
        assert!(
            (29..=31).contains(&late(180)),
            "chunk 180 {}ms late",
            late(180)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_unlinked_hands_on_what_it_held_at_once() {
        let stall = spec("stall:after_bytes=50");
        let changes = vec![(500, vec![])];
        let ((end, total), arrivals) = run_with(40, vec![(1, stall)], changes).await;
        assert!(matches!(end, DirEnd::Fin), "{end:?}");
        assert_eq!(total, 40 * 5);
        let order: Vec<usize> = arrivals.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, (0..40).collect::<Vec<_>>());
        // The first 50 bytes (10 chunks) passed as they came; the rest
        // were held (the source pushed back once the stage's queue was
        // full) until the stall was removed: then what it held went on at
        // once, and the rest as it came.
        assert!(arrivals[9].1 < 20, "{:?}", arrivals[9]);
        assert_eq!(arrivals[10].1, 500, "{arrivals:?}");
        assert!(
            arrivals[10..].iter().all(|(_, at)| *at >= 500),
            "{arrivals:?}"
        );
        assert!(arrivals[39].1 < 560, "{arrivals:?}");
    }

    /// A stage linked before one that has stopped reading (a stall whose
    /// queue is full, its sender waiting for room) is linked at once, and
    /// acts on what comes after.
    #[tokio::test(start_paused = true)]
    async fn a_fault_is_linked_before_a_stall_that_pushes_back() {
        let stall = spec("stall:after_bytes=50");
        let latency = spec("latency:delay=40ms");
        let changes = vec![
            (300, vec![(2, latency.clone()), (1, stall.clone())]),
            (600, vec![(2, latency)]),
        ];
        let ((end, _), arrivals) = run_with(60, vec![(1, stall)], changes).await;
        assert!(matches!(end, DirEnd::Fin), "{end:?}");
        let order: Vec<usize> = arrivals.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, (0..60).collect::<Vec<_>>());
        // Held by the stall until 600 ms, whatever was linked before it.
        assert!(
            arrivals[10..].iter().all(|(_, at)| *at >= 600),
            "{arrivals:?}"
        );
        // Sent after the release, each passes the latency linked at 300 ms.
        let (i, at) = arrivals[59];
        assert!(at >= 600 + 40, "chunk {i} at {at}ms: {arrivals:?}");
    }
}
