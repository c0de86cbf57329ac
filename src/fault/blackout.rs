//! `blackout` (packet layer): after `after_bytes` (or `after` a time) every
//! packet of the connection between the client and the relay is dropped for
//! `duration` (or for good): a partition that TCP survives by retransmitting,
//! or gives up on, as it would on a real network. The kernel does the
//! dropping on the client's side; on the upstream's, the stage holds its
//! direction for the same time, so the relay stops reading from the server
//! (whose window fills and whose `send()` blocks, as in a real partition)
//! instead of draining it into buffers nobody can reach.

use std::time::Duration;

use super::{
    Kind, KindInfo, Layer, StageCtx, StageFuture, StageIo, Stream, Trigger, Until, parse_trigger,
    pass_until,
};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Blackout {
    trigger: Trigger,
    /// `None`: until netchaos ends.
    duration: Option<Duration>,
}

impl Kind for Blackout {
    const INFO: KindInfo = KindInfo {
        name: "blackout",
        layer: Layer::Packet,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "every packet of the flow is dropped for duration: a partition",
        params: &[
            (
                "after_bytes",
                "a size, default 0",
                "from this many bytes of the direction",
            ),
            (
                "after",
                "a duration",
                "…or this long after the connection opened",
            ),
            (
                "duration",
                "a duration or \"forever\", required",
                "how long every packet is dropped",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let trigger = parse_trigger(f)?;
        let duration = f
            .duration_or_forever("duration")?
            .ok_or_else(|| f.table_error("missing \"duration\" (like \"2s\", or \"forever\")"))?;
        if duration == Some(Duration::ZERO) {
            return Err(f.table_error("duration must be more than 0"));
        }
        Ok(Blackout { trigger, duration })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let d = self.duration.map_or("forever".into(), format_duration);
        vec![self.trigger.param(), ("duration", d)]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Blackout {
    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        let rest = match pass_until(self.trigger, &ctx, io).await {
            Ok(Until::Fired(rest)) => rest,
            Ok(Until::Ended | Until::Stopped) | Err(_) => return,
        };
        match &ctx.partition {
            Some(p) => match p.blackout(self.duration).await {
                Ok(()) => ctx.hit.fire(),
                Err(e) => {
                    tracing::warn!("blackout could not start: {e}");
                    return io.pass_rest_after(rest).await;
                }
            },
            None => {
                tracing::warn!("blackout needs netchaos run; ignored on this connection");
                return io.pass_rest_after(rest).await;
            }
        }
        // Nothing of this direction moves while the partition lasts: the
        // relay's reads of it stop once the (bounded) pipeline is full.
        if io.wait_for(ctx.hold_end(self.duration)).await {
            io.pass_rest_after(rest).await;
        } else if let Some(item) = rest {
            let _ = io.send(item).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::Instant;

    use super::super::testing::*;
    use super::super::{Partition, PartitionError};
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    /// Counts the partitions asked for.
    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Partition for Counted {
        fn blackout(
            &self,
            _: Option<Duration>,
        ) -> Pin<Box<dyn Future<Output = Result<(), PartitionError>> + Send + '_>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    fn blackout(pairs: &[(&str, &str)]) -> FaultKind {
        spec("blackout", pairs).unwrap().kind
    }

    #[tokio::test(start_paused = true)]
    async fn holds_its_direction_for_the_partition_then_passes_everything() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let part = Arc::new(Counted::default());
        let mut c = ctx(Window::ALWAYS);
        c.partition = Some(part.clone());
        spawn(blackout(&[("after_bytes", "5"), ("duration", "3s")]), c, io);
        let t0 = Instant::now();
        tx.send(data(8)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 5);
        // Nothing moves while the partition lasts.
        tx.send(data(4)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 3);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert_eq!(rx.recv().await.unwrap().len(), 4);
        assert_eq!(part.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_mid_partition_gives_back_what_was_held() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let mut c = ctx(Window::ALWAYS);
        c.partition = Some(Arc::new(Counted::default()));
        let stop = spawn(
            blackout(&[("after_bytes", "5"), ("duration", "forever")]),
            c,
            io,
        );
        tx.send(data(8)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 5);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(rx.try_recv().is_err(), "held during the partition");
        stop.cancel();
        assert_eq!(rx.recv().await.unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_partition_nothing_is_held() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        spawn(
            blackout(&[("after_bytes", "5"), ("duration", "3s")]),
            ctx(Window::ALWAYS),
            io,
        );
        let t0 = Instant::now();
        tx.send(data(8)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 5);
        assert_eq!(rx.recv().await.unwrap().len(), 3);
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
}
