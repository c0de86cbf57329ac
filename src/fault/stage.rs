//! What a stream fault's stage works with: the items that flow through a
//! direction, its input and (re-linkable) output, and the stop signal.
//!
//! Faults can be removed from open connections (the control API). A
//! removed stage is told to stop: it hands on everything it holds (a
//! stall's held bytes, a delay line's queue, a throttled chunk) at once, in
//! order, and returns; the pipeline then forwards whatever is still in its
//! input. Sends are never cancelled, so no byte is lost on the way. Waits
//! other than sends go through [`StageIo::next`] and [`StageIo::sleep_until`],
//! which notice the stop.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use tokio::sync::{Mutex, MutexGuard, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What flows through a direction's pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ItemKind {
    /// Bytes read from the source socket.
    Data(Bytes),
    /// The source half-closed (FIN): shut down writing on the destination.
    Fin,
    /// Abort the connection with RST on both sides (a peer's RST, or a fault).
    Reset,
    /// Send FIN to the destination and close the whole connection cleanly
    /// (a fault truncating the stream).
    Close,
}

/// One unit of a pipeline, stamped with the moment it was read so that
/// delays are measured from arrival, not from when a stage saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub at: Instant,
    pub kind: ItemKind,
}

impl Item {
    pub(crate) fn data(at: Instant, bytes: Bytes) -> Item {
        Item {
            at,
            kind: ItemKind::Data(bytes),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match &self.kind {
            ItemKind::Data(b) => b.len(),
            _ => 0,
        }
    }
}

/// The next stage is gone (the connection is being torn down): stop.
#[derive(Debug)]
pub(crate) struct Gone;

/// Where a stage (or the reader) sends: a channel to the next stage that
/// the pipeline can re-point while the stage runs. Holding the lock pauses
/// the sender, which is how the pipeline relinks without reordering.
#[derive(Clone)]
pub(crate) struct Output(Arc<Mutex<mpsc::Sender<Item>>>);

impl Output {
    pub(crate) fn new(tx: mpsc::Sender<Item>) -> Output {
        Output(Arc::new(Mutex::new(tx)))
    }

    /// Sends one item; waits for room. Never cancelled midway by a stop.
    /// The wait for room does not hold the sender: a change may re-point
    /// it meanwhile, and the item then goes where it points now. (Held
    /// through the wait, a sender blocked on a stage that stopped reading
    /// — a stall — kept the pipeline from pausing it, so that stage could
    /// never be removed, nor another linked before it.)
    pub(crate) async fn send(&self, mut item: Item) -> Result<(), Gone> {
        use tokio::sync::mpsc::error::TrySendError;
        loop {
            let tx = {
                let tx = self.0.lock().await;
                match tx.try_send(item) {
                    Ok(()) => return Ok(()),
                    Err(TrySendError::Closed(_)) => return Err(Gone),
                    Err(TrySendError::Full(back)) => {
                        item = back;
                        tx.clone()
                    }
                }
            };
            let room = tx.reserve().await;
            let now = self.0.lock().await;
            if now.same_channel(&tx) {
                return match room {
                    Ok(permit) => {
                        permit.send(item);
                        Ok(())
                    }
                    Err(_) => Err(Gone),
                };
            }
            // Re-pointed while it waited: again, to where it points now.
        }
    }

    /// `(free, total)` slots of the channel now, if nobody holds it (a
    /// change re-pointing it): how far behind the next stage is.
    pub(crate) fn room(&self) -> Option<(usize, usize)> {
        let tx = self.0.try_lock().ok()?;
        Some((tx.capacity(), tx.max_capacity()))
    }

    /// Pauses the sender until the guard is dropped; the guard can re-point
    /// it.
    pub(crate) async fn lock(&self) -> MutexGuard<'_, mpsc::Sender<Item>> {
        self.0.lock().await
    }
}

/// What [`StageIo::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Item(Item),
    /// Nothing more will come (the source ended).
    Ended,
    /// The stage is being removed: hand on what it holds and return.
    Stopped,
}

/// A stage's input, output and stop signal.
pub(crate) struct StageIo {
    pub input: mpsc::Receiver<Item>,
    pub output: Output,
    pub stop: CancellationToken,
    /// A count that outlives an update of the fault's parameters: the
    /// stage that replaces this one, for the same fault on the same
    /// connection, gets the same counter (`limit_data` counts its bytes
    /// across updates, as Toxiproxy keeps a toxic's state).
    pub carried: Arc<AtomicU64>,
}

impl StageIo {
    pub(crate) fn new(input: mpsc::Receiver<Item>, output: Output) -> StageIo {
        StageIo {
            input,
            output,
            stop: CancellationToken::new(),
            carried: Arc::default(),
        }
    }

    /// The next item, unless the input ends or the stage is told to stop.
    pub(crate) async fn next(&mut self) -> Next {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => Next::Stopped,
            item = self.input.recv() => item.map_or(Next::Ended, Next::Item),
        }
    }

    pub(crate) async fn send(&self, item: Item) -> Result<(), Gone> {
        self.output.send(item).await
    }

    /// Sleeps until `t`; `false` if the stage was told to stop first.
    pub(crate) async fn sleep_until(&self, t: Instant) -> bool {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => false,
            _ = crate::timer::sleep_until(t) => true,
        }
    }

    /// Waits for `t`, or forever when `None`; `false` if stopped first.
    pub(crate) async fn wait_for(&self, t: Option<Instant>) -> bool {
        match t {
            Some(t) => self.sleep_until(t).await,
            None => {
                self.stop.cancelled().await;
                false
            }
        }
    }

    /// Forwards everything unchanged until the input ends or a stop.
    pub(crate) async fn pass_rest(&mut self) {
        while let Next::Item(item) = self.next().await {
            if self.send(item).await.is_err() {
                return;
            }
        }
    }

    /// Forwards `first` (an item a trigger held back), then everything
    /// else, as [`pass_rest`](Self::pass_rest).
    pub(crate) async fn pass_rest_after(&mut self, first: Option<Item>) {
        if let Some(item) = first {
            if self.send(item).await.is_err() {
                return;
            }
        }
        self.pass_rest().await;
    }

    /// After a stop: forwards what is still queued in the input (the
    /// previous stage is paused, so this is finite).
    pub(crate) async fn drain_input(&mut self) {
        while let Ok(item) = self.input.try_recv() {
            if self.send(item).await.is_err() {
                return;
            }
        }
    }
}
