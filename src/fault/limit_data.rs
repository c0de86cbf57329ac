//! `limit_data` (Toxiproxy's): the first `bytes` bytes of the direction
//! pass, and the moment the last of them is delivered the connection
//! closes (FIN); with `bytes = 0`, at the first data. An update of
//! `bytes` keeps the count of what already passed, as Toxiproxy does. For
//! a cut that waits for the byte beyond the mark, see `close`.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LimitData {
    bytes: u64,
}

impl LimitData {
    pub(crate) fn new(bytes: u64) -> LimitData {
        LimitData { bytes }
    }
}

impl Kind for LimitData {
    const INFO: KindInfo = KindInfo {
        name: "limit_data",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "the first N bytes pass, then the connection closes at once (Toxiproxy's limit_data)",
        params: &[(
            "bytes",
            "a size, default 0",
            "bytes that pass before the close",
        )],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(LimitData::new(f.size("bytes")?.unwrap_or(0)))
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("bytes", self.bytes.to_string())]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl LimitData {
    async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        // Bytes already passed count, across updates of `bytes` too: a
        // limit lowered below them closes at the next data.
        let mut left = self
            .bytes
            .saturating_sub(io.carried.load(Ordering::Relaxed));
        loop {
            let item = match io.next().await {
                Next::Item(item) => item,
                Next::Ended => break,
                // Removed or updated: what is queued goes on now, and an
                // update's successor counts it too.
                Next::Stopped => {
                    while let Ok(item) = io.input.try_recv() {
                        if let ItemKind::Data(b) = &item.kind {
                            io.carried.fetch_add(b.len() as u64, Ordering::Relaxed);
                        }
                        if io.send(item).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
            };
            let ItemKind::Data(bytes) = &item.kind else {
                break;
            };
            let take = (bytes.len() as u64).min(left) as usize;
            if take > 0
                && io
                    .send(Item::data(item.at, bytes.slice(..take)))
                    .await
                    .is_err()
            {
                return;
            }
            left -= take as u64;
            io.carried.fetch_add(take as u64, Ordering::Relaxed);
            if left == 0 {
                break;
            }
        }
        ctx.hit.fire();
        let _ = io
            .send(Item {
                at: Instant::now(),
                kind: ItemKind::Close,
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    #[tokio::test]
    async fn exactly_n_bytes_then_a_close_without_waiting_for_more() {
        let (tx, mut rx, io) = channels();
        let kind = match spec("limit_data", &[("bytes", "5")]).unwrap().kind {
            k @ FaultKind::LimitData(_) => k,
            _ => unreachable!(),
        };
        let _stop = spawn(kind, ctx(Window::ALWAYS), io);
        tx.send(data(3)).await.unwrap();
        tx.send(data(2)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 3);
        assert_eq!(rx.recv().await.unwrap().len(), 2);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Close);
    }

    /// Stopped for an update with bytes still queued: they go on, and the
    /// successor's count includes them.
    #[tokio::test]
    async fn bytes_queued_at_an_update_are_counted() {
        let (tx, mut rx, io) = channels();
        let carried = io.carried.clone();
        tx.send(data(30)).await.unwrap();
        tx.send(data(30)).await.unwrap();
        io.stop.cancel();
        let kind = spec("limit_data", &[("bytes", "100")]).unwrap().kind;
        let _stop = spawn(kind, ctx(Window::ALWAYS), io);
        assert_eq!(rx.recv().await.unwrap().len(), 30);
        assert_eq!(rx.recv().await.unwrap().len(), 30);
        assert_eq!(carried.load(std::sync::atomic::Ordering::Relaxed), 60);
    }

    /// An update (a new stage with the old one's counter) counts what
    /// already passed: raised from 100 to 120 after 80, 40 more pass;
    /// lowered below what passed, the next data closes.
    #[tokio::test]
    async fn an_update_keeps_the_count() {
        for (limit, passed, want) in [("120", 80, Some(40)), ("50", 80, None)] {
            let (tx, mut rx, io) = channels();
            io.carried
                .store(passed, std::sync::atomic::Ordering::Relaxed);
            let kind = spec("limit_data", &[("bytes", limit)]).unwrap().kind;
            let _stop = spawn(kind, ctx(Window::ALWAYS), io);
            tx.send(data(80)).await.unwrap();
            if let Some(n) = want {
                assert_eq!(rx.recv().await.unwrap().len(), n);
            }
            assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Close, "{limit}");
        }
    }
}
