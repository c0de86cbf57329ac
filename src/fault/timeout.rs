//! `timeout` (Toxiproxy's): the direction's data is dropped, and after
//! `timeout` without data the connection closes with a FIN (each chunk that
//! arrives starts the wait again); with no `timeout` (or 0) it never
//! closes. Removing the fault closes the connection too, as Toxiproxy's
//! does. For a stall that holds the bytes and delivers them later, see
//! `stall`.

use std::time::Duration;

use tokio::time::Instant;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Timeout {
    /// `None`: never close.
    after: Option<Duration>,
}

impl Timeout {
    pub(crate) fn new(after: Option<Duration>) -> Timeout {
        Timeout {
            after: after.filter(|d| !d.is_zero()),
        }
    }
}

impl Kind for Timeout {
    const INFO: KindInfo = KindInfo {
        name: "timeout",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "data is dropped; after a while without data the connection closes (Toxiproxy's timeout)",
        params: &[(
            "timeout",
            "a duration, default 0 (never close)",
            "how long without data before the connection closes",
        )],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(Timeout::new(f.duration("timeout")?))
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("timeout", self.after.map_or("0".into(), format_duration))]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Timeout {
    async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        let close = |io: &StageIo| {
            let item = Item {
                at: Instant::now(),
                kind: ItemKind::Close,
            };
            let out = io.output.clone();
            async move {
                let _ = out.send(item).await;
            }
        };
        ctx.hit.fire();
        loop {
            let deadline = self.after.map(|d| Instant::now() + d);
            let next = tokio::select! {
                biased;
                n = io.next() => n,
                _ = crate::timer::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    return close(io).await;
                }
            };
            match next {
                // Dropped; the wait starts again.
                Next::Item(Item {
                    kind: ItemKind::Data(_),
                    ..
                }) => {}
                // The source ended or the fault was removed: Toxiproxy
                // closes the connection either way.
                Next::Item(_) | Next::Ended | Next::Stopped => return close(io).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    #[tokio::test(start_paused = true)]
    async fn drops_data_and_closes_after_an_idle_timeout() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let kind = match spec("timeout", &[("timeout", "100ms")]).unwrap().kind {
            k @ FaultKind::Timeout(_) => k,
            _ => unreachable!(),
        };
        let _stop = spawn(kind, ctx(Window::ALWAYS), io);
        let t0 = Instant::now();
        tokio::time::sleep(Duration::from_millis(60)).await;
        tx.send(data(5)).await.unwrap();
        // The chunk restarted the wait; it is never delivered.
        let item = rx.recv().await.unwrap();
        assert_eq!(item.kind, ItemKind::Close);
        assert_eq!(t0.elapsed(), Duration::from_millis(160));
    }
}
