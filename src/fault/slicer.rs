//! `slicer`: each chunk is cut into segments of `size ± size_variation`
//! bytes with `delay` between them, so data trickles in small pieces (as
//! from a slow or fragmenting peer). Every byte is delivered.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slicer {
    size: u64,
    size_variation: u64,
    delay: Duration,
}

impl Kind for Slicer {
    const INFO: KindInfo = KindInfo {
        name: "slicer",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "data arrives in small segments with pauses between them",
        params: &[
            ("size", "a size, required", "bytes per segment"),
            (
                "size_variation",
                "a size below size, default 0",
                "± this much per segment",
            ),
            (
                "delay",
                "a duration, default 0",
                "the pause between segments",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let size = f
            .size("size")?
            .ok_or_else(|| f.table_error("missing \"size\" (bytes per segment, like 64)"))?;
        if size == 0 {
            return Err(f.table_error("size must be at least 1 byte"));
        }
        let size_variation = f.size("size_variation")?.unwrap_or(0);
        if size_variation >= size {
            return Err(f.table_error(format!(
                "size_variation ({size_variation}) must be smaller than size ({size}), or segments could be empty"
            )));
        }
        let delay = f.duration("delay")?.unwrap_or_default();
        Ok(Slicer {
            size,
            size_variation,
            delay,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("size", self.size.to_string())];
        if self.size_variation > 0 {
            p.push(("size_variation", self.size_variation.to_string()));
        }
        p.push(("delay", format_duration(self.delay)));
        p
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Slicer {
    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        loop {
            let item = match io.next().await {
                Next::Item(item) => item,
                Next::Ended | Next::Stopped => return,
            };
            let ItemKind::Data(mut bytes) = item.kind else {
                if io.send(item).await.is_err() {
                    return;
                }
                continue;
            };
            while !bytes.is_empty() {
                if !ctx.active_at(Instant::now()) {
                    let _ = io.send(Item::data(item.at, bytes)).await;
                    break;
                }
                ctx.hit.fire();
                let v = self.size_variation as i64;
                let n = (self.size as i64 + ctx.rng.random_range(-v..=v)) as usize;
                let piece = bytes.split_to(n.min(bytes.len()));
                if io.send(Item::data(item.at, piece)).await.is_err() {
                    return;
                }
                if !bytes.is_empty()
                    && !self.delay.is_zero()
                    && !io.sleep_until(Instant::now() + self.delay).await
                {
                    // Removed: the rest of the chunk goes at once.
                    let _ = io.send(Item::data(item.at, bytes)).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    #[tokio::test(start_paused = true)]
    async fn slices_with_pauses_and_delivers_every_byte() {
        crate::timer::runtime_clock_only();
        let FaultKind::Slicer(s) = spec(
            "slicer",
            &[("size", "10"), ("size_variation", "3"), ("delay", "1ms")],
        )
        .unwrap()
        .kind
        else {
            unreachable!()
        };
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move { s.run(ctx(Window::ALWAYS), &mut { io }).await });
        tx.send(data(1000)).await.unwrap();
        drop(tx);
        let (mut total, mut pieces) = (0, 0);
        while let Some(item) = rx.recv().await {
            assert!(
                (7..=13).contains(&item.len()) || total + item.len() == 1000,
                "{}",
                item.len()
            );
            total += item.len();
            pieces += 1;
        }
        assert_eq!(total, 1000);
        assert!(pieces >= 1000 / 13);
    }

    #[test]
    fn variation_must_be_below_size() {
        let e = spec("slicer", &[("size", "10"), ("size_variation", "10")]).unwrap_err();
        assert!(
            e.message
                .contains("size_variation (10) must be smaller than size (10)"),
            "{e}"
        );
        assert!(spec("slicer", &[("size", "0")]).is_err());
    }
}
