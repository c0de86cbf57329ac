//! `slow_close`: the FIN (or a truncating close) is delivered `delay` after
//! it arrived; bytes before it flow normally.

use std::time::Duration;

use super::{ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlowClose {
    delay: Duration,
}

impl Kind for SlowClose {
    const INFO: KindInfo = KindInfo {
        name: "slow_close",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "the FIN arrives delay after the server sent it",
        params: &[("delay", "a duration, required", "how late the FIN arrives")],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"2s\")"))?;
        Ok(SlowClose { delay })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("delay", format_duration(self.delay))]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl SlowClose {
    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        loop {
            let item = match io.next().await {
                Next::Item(item) => item,
                Next::Ended | Next::Stopped => return,
            };
            if matches!(item.kind, ItemKind::Fin | ItemKind::Close) && ctx.active_at(item.at) {
                ctx.hit.fire();
                // Removed meanwhile: the FIN goes at once.
                io.sleep_until(item.at + self.delay).await;
            }
            if io.send(item).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::{FaultKind, Item};
    use crate::units::Window;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn delays_only_the_fin() {
        crate::timer::runtime_clock_only();
        let FaultKind::SlowClose(s) = spec("slow_close", &[("delay", "3s")]).unwrap().kind else {
            unreachable!()
        };
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move { s.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        tx.send(data(10)).await.unwrap();
        tx.send(Item {
            at: Instant::now(),
            kind: ItemKind::Fin,
        })
        .await
        .unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::ZERO);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Fin);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }
}
