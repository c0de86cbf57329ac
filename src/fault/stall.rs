//! `stall`: after `after_bytes` (or `after` a time) nothing more flows for
//! `duration`, or forever. The connection stays open and the stage stops
//! reading, so the sender's window fills as behind a hung peer. When the
//! stall ends, `then` decides: `release` (default) delivers the held bytes
//! and carries on; `close` and `reset` end the connection instead (what
//! Toxiproxy's `timeout` toxic does).

use std::time::Duration;

use tokio::time::Instant;

use super::{
    Item, ItemKind, Kind, KindInfo, Layer, StageCtx, StageFuture, StageIo, Stream, Trigger, Until,
    parse_trigger, pass_until,
};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stall {
    trigger: Trigger,
    /// `None`: forever.
    duration: Option<Duration>,
    then: Then,
}

/// What happens when a stall's time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    Release,
    Close,
    Reset,
}

impl Kind for Stall {
    const INFO: KindInfo = KindInfo {
        name: "stall",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "after some bytes or time nothing flows for a while, or forever",
        params: &[
            (
                "after_bytes",
                "a size, default 0",
                "stall after this many bytes of the direction",
            ),
            (
                "after",
                "a duration",
                "…or this long after the connection opened",
            ),
            (
                "duration",
                "a duration or \"forever\", default forever",
                "how long nothing flows",
            ),
            (
                "then",
                "release (default), close or reset",
                "what happens when the time is up",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let trigger = parse_trigger(f)?;
        let duration = f.duration_or_forever("duration")?.unwrap_or(None);
        if duration == Some(Duration::ZERO) {
            return Err(f.table_error("duration must be more than 0 (or \"forever\")"));
        }
        let then = match f.choice("then", &["release", "close", "reset"])? {
            Some("close") => Then::Close,
            Some("reset") => Then::Reset,
            _ => Then::Release,
        };
        if then != Then::Release && duration.is_none() {
            return Err(f.table_error(
                "then = \"close\" or \"reset\" needs a duration after which to do it",
            ));
        }
        Ok(Stall {
            trigger,
            duration,
            then,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let d = self.duration.map_or("forever".into(), format_duration);
        let mut p = vec![self.trigger.param(), ("duration", d)];
        match self.then {
            Then::Release => {}
            Then::Close => p.push(("then", "close".into())),
            Then::Reset => p.push(("then", "reset".into())),
        }
        p
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Stall {
    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        let held = match pass_until(self.trigger, &ctx, io).await {
            Ok(Until::Fired(held)) => held,
            Ok(Until::Ended | Until::Stopped) | Err(_) => return,
        };
        ctx.hit.fire();
        let ran_out = io.wait_for(ctx.hold_end(self.duration)).await;
        if ran_out && self.then != Then::Release {
            // The held bytes are never delivered: the connection ends.
            let kind = if self.then == Then::Close {
                ItemKind::Close
            } else {
                ItemKind::Reset
            };
            let _ = io
                .send(Item {
                    at: Instant::now(),
                    kind,
                })
                .await;
            return;
        }
        // Whether the stall ends by time or by removal, held bytes go on.
        if ran_out {
            io.pass_rest_after(held).await;
        } else if let Some(item) = held {
            let _ = io.send(item).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    fn stall(pairs: &[(&str, &str)]) -> Stall {
        match spec("stall", pairs).unwrap().kind {
            FaultKind::Stall(s) => s,
            _ => unreachable!(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn holds_after_the_mark_then_releases_everything() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move {
            stall(&[("after_bytes", "5"), ("duration", "2s")])
                .run(ctx(Window::ALWAYS), &mut { io })
                .await
        });
        let t0 = Instant::now();
        tx.send(data(8)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 5);
        assert_eq!(rx.recv().await.unwrap().len(), 3);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn forever_means_nothing_more_flows() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move { stall(&[]).run(ctx(Window::ALWAYS), &mut { io }).await });
        tx.send(data(8)).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(3600), rx.recv()).await;
        assert!(r.is_err(), "a byte escaped the stall");
    }

    #[tokio::test(start_paused = true)]
    async fn removing_a_stall_releases_what_it_held() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let stop = crate::fault::testing::spawn(
            FaultKind::Stall(stall(&[("after_bytes", "3")])),
            ctx(Window::ALWAYS),
            io,
        );
        tx.send(data(5)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 3);
        tokio::time::sleep(Duration::from_secs(60)).await;
        stop.cancel();
        assert_eq!(rx.recv().await.unwrap().len(), 2, "the held bytes come out");
    }

    #[tokio::test(start_paused = true)]
    async fn then_close_ends_the_connection_instead_of_releasing() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let s = stall(&[("duration", "2s"), ("then", "close")]);
        tokio::spawn(async move { s.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        tx.send(data(8)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Close);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        assert!(
            spec("stall", &[("then", "reset")]).is_err(),
            "forever then reset makes no sense"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn time_trigger_fires_without_traffic() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move {
            stall(&[("after", "1s"), ("duration", "1s")])
                .run(ctx(Window::ALWAYS), &mut { io })
                .await
        });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let t0 = Instant::now();
        tx.send(data(1)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(500));
    }
}
