//! `reset_peer` (Toxiproxy's): the first data of the direction (or its end)
//! is dropped, and `timeout` later both sides get a TCP RST; nothing more is
//! delivered meanwhile. A connection that sends nothing stays open — the
//! clock starts at the first data, as Toxiproxy's does. For a reset at a
//! byte count or a time since connect, see `reset`.

use std::time::Duration;

use tokio::time::Instant;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResetPeer {
    after: Duration,
}

impl ResetPeer {
    pub(crate) fn new(after: Duration) -> ResetPeer {
        ResetPeer { after }
    }
}

impl Kind for ResetPeer {
    const INFO: KindInfo = KindInfo {
        name: "reset_peer",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "the first data is dropped and a while later both sides get an RST (Toxiproxy's reset_peer)",
        params: &[(
            "timeout",
            "a duration, default 0",
            "how long after the first data the RST comes",
        )],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(ResetPeer::new(f.duration("timeout")?.unwrap_or_default()))
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("timeout", format_duration(self.after))]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl ResetPeer {
    async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        match io.next().await {
            Next::Item(_) | Next::Ended => {}
            Next::Stopped => return io.pass_rest().await,
        }
        ctx.hit.fire();
        let at = Instant::now() + self.after;
        // What arrives meanwhile is held back, never delivered.
        tokio::select! {
            _ = crate::timer::sleep_until(at) => {}
            _ = async { while let Next::Item(_) = io.next().await {} } => {
                crate::timer::sleep_until(at).await;
            }
        }
        let _ = io
            .send(Item {
                at: Instant::now(),
                kind: ItemKind::Reset,
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

    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_at_the_first_data() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let kind = match spec("reset_peer", &[("timeout", "500ms")]).unwrap().kind {
            k @ FaultKind::ResetPeer(_) => k,
            _ => unreachable!(),
        };
        let _stop = spawn(kind, ctx(Window::ALWAYS), io);
        // Idle for a second: nothing happens.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(rx.try_recv().is_err());
        let t0 = Instant::now();
        tx.send(data(5)).await.unwrap();
        tx.send(data(5)).await.unwrap();
        let item = rx.recv().await.unwrap();
        assert_eq!(
            item.kind,
            ItemKind::Reset,
            "nothing delivered before the RST"
        );
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
    }
}
