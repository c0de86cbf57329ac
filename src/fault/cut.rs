//! `reset` and `close`: after `after_bytes` (or `after` a time) the stream
//! is cut. `reset` sends both sides a TCP RST, so reads and writes fail with
//! ECONNRESET; `close` sends the destination a clean FIN and closes the
//! connection on both sides — a truncated stream that looks like a normal
//! end. Bytes beyond the mark are discarded, as a real cut would.

use tokio::time::Instant;

use super::{
    Item, ItemKind, Kind, KindInfo, Layer, StageCtx, StageFuture, StageIo, Stream, Trigger, Until,
    parse_trigger, pass_until,
};
use crate::settings::{Fields, ProfileError};

const PARAMS: &[(&str, &str, &str)] = &[
    (
        "after_bytes",
        "a size, default 0",
        "cut after this many bytes of the direction",
    ),
    (
        "after",
        "a duration",
        "…or this long after the connection opened",
    ),
];

/// `reset`: the cut is an RST.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reset(Trigger);

/// `close`: the cut is a clean close.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Close(Trigger);

impl Kind for Reset {
    const INFO: KindInfo = KindInfo {
        name: "reset",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "after some bytes or time both sides get a TCP RST",
        params: PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        parse_trigger(f).map(Reset)
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![self.0.param()]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(cut(self.0, ItemKind::Reset, ctx, io)))
    }
}

impl Kind for Close {
    const INFO: KindInfo = KindInfo {
        name: "close",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "after some bytes or time a clean FIN: a truncated stream",
        params: PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        parse_trigger(f).map(Close)
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![self.0.param()]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(cut(self.0, ItemKind::Close, ctx, io)))
    }
}

/// Passes bytes up to the mark, then sends `end` (and drops the rest).
async fn cut(trigger: Trigger, end: ItemKind, mut ctx: StageCtx, io: &mut StageIo) {
    if let Ok(Until::Fired(_)) = pass_until(trigger, &ctx, io).await {
        ctx.hit.fire();
        let _ = io
            .send(Item {
                at: Instant::now(),
                kind: end,
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reset_comes_exactly_after_the_mark() {
        crate::timer::runtime_clock_only();
        let r = spec("reset", &[("after_bytes", "4KiB")]).unwrap().kind;
        let (tx, mut rx, io) = channels();
        spawn(r, ctx(crate::units::Window::ALWAYS), io);
        tx.send(data(3000)).await.unwrap();
        tx.send(data(3000)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 3000);
        assert_eq!(rx.recv().await.unwrap().len(), 1096);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Reset);
    }

    #[tokio::test(start_paused = true)]
    async fn close_truncates_at_the_mark() {
        crate::timer::runtime_clock_only();
        let c = spec("close", &[("after_bytes", "100")]).unwrap().kind;
        let (tx, mut rx, io) = channels();
        spawn(c, ctx(crate::units::Window::ALWAYS), io);
        tx.send(data(150)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 100);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Close);
    }
}
