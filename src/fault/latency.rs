//! `latency`: a delay line. Each chunk leaves `delay ± jitter` after it
//! arrived while later chunks keep being read, so throughput is kept (not
//! stop-and-wait). The line holds at most `buffer` bytes; beyond that the
//! stage stops reading and backpressure reaches the sender. A FIN or RST
//! is delayed as the bytes are (a path delays them too), or with
//! `ends = "at_once"` passed on as soon as the bytes ahead of it are, as
//! Toxiproxy's latency does (its API toxic maps to that).

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::timer::sleep_until;

use super::{Item, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

/// Default cap on bytes held in the line: 8 MiB keeps 100 ms of delay at
/// ~670 Mbit/s and bounds memory per direction.
pub(crate) const DEFAULT_BUFFER: u64 = 8 << 20;
/// The largest `buffer`: what one direction of one connection may hold.
pub(crate) const MAX_BUFFER: u64 = 64 << 20;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Latency {
    delay: Duration,
    jitter: Duration,
    buffer: u64,
    /// A FIN or RST goes on once the bytes ahead of it have, undelayed.
    ends_at_once: bool,
}

impl Kind for Latency {
    const INFO: KindInfo = KindInfo {
        name: "latency",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "each byte arrives delay ± jitter later; throughput is kept",
        params: &[
            (
                "delay",
                "a duration, required",
                "how much later each byte arrives",
            ),
            (
                "jitter",
                "a duration, default 0",
                "± this much, uniform; never reorders",
            ),
            (
                "buffer",
                "a size, default 8MiB, at most 64MiB",
                "bytes held in the delay line before the sender is slowed",
            ),
            (
                "ends",
                "delayed (default) or at_once",
                "a FIN or RST: delayed too, or on at once after the bytes ahead (Toxiproxy's)",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"100ms\")"))?;
        let jitter = f.duration("jitter")?.unwrap_or_default();
        let buffer = f.size("buffer")?.unwrap_or(DEFAULT_BUFFER);
        let ends_at_once = f.choice("ends", &["delayed", "at_once"])? == Some("at_once");
        if buffer == 0 {
            return Err(f.table_error("buffer must be more than 0 bytes"));
        }
        if buffer > MAX_BUFFER {
            return Err(f.table_error(format!(
                "buffer is at most {} (what one direction of one connection may hold), got {}",
                crate::units::format_size(MAX_BUFFER),
                crate::units::format_size(buffer)
            )));
        }
        Ok(Latency {
            delay,
            jitter,
            buffer,
            ends_at_once,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("delay", format_duration(self.delay))];
        if !self.jitter.is_zero() {
            p.push(("jitter", format_duration(self.jitter)));
        }
        if self.buffer != DEFAULT_BUFFER {
            p.push(("buffer", self.buffer.to_string()));
        }
        if self.ends_at_once {
            p.push(("ends", "at_once".into()));
        }
        p
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Latency {
    /// This chunk's delay: `delay` plus a uniform draw in `±jitter`.
    fn sample(&self, ctx: &mut StageCtx) -> Duration {
        if self.jitter.is_zero() {
            return self.delay;
        }
        let j = self.jitter.as_secs_f64();
        let d = self.delay.as_secs_f64() + ctx.rng.random_range(-j..=j);
        Duration::from_secs_f64(d.max(0.0))
    }

    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        let mut line: VecDeque<(Instant, Item)> = VecDeque::new();
        let mut held = 0u64;
        // Releases never go backwards: jitter may not reorder bytes.
        let mut last_release = ctx.opened;
        let mut input_open = true;
        let stop = io.stop.clone();
        loop {
            if !input_open && line.is_empty() {
                return;
            }
            let head = line.front().map(|(t, _)| *t);
            tokio::select! {
                biased;
                _ = sleep_until(head.unwrap_or_else(Instant::now)), if head.is_some() => {
                    let now = Instant::now();
                    while line.front().is_some_and(|(t, _)| *t <= now) {
                        let (_, item) = line.pop_front().expect("front exists");
                        held -= item.len() as u64;
                        if io.send(item).await.is_err() {
                            return;
                        }
                    }
                }
                next = io.next(), if input_open && held < self.buffer => {
                    let item = match next {
                        Next::Item(item) => item,
                        Next::Ended => {
                            input_open = false;
                            continue;
                        }
                        Next::Stopped => {
                            // Removed: the queued bytes go now, in order.
                            for (_, item) in line {
                                if io.send(item).await.is_err() {
                                    return;
                                }
                            }
                            return;
                        }
                    };
                    let end = !matches!(item.kind, crate::fault::ItemKind::Data(_));
                    let delay = if self.ends_at_once && end {
                        Duration::ZERO
                    } else if ctx.active_at(item.at) {
                        self.sample(&mut ctx)
                    } else {
                        Duration::ZERO
                    };
                    if !delay.is_zero() {
                        ctx.hit.fire();
                    }
                    let release = (item.at + delay).max(last_release);
                    last_release = release;
                    // What comes next in the chain counts from here: two
                    // latencies add up, as Toxiproxy's chained toxics do.
                    let mut item = item;
                    item.at = release;
                    if line.is_empty() && release <= Instant::now() {
                        if io.send(item).await.is_err() {
                            return;
                        }
                    } else {
                        held += item.len() as u64;
                        line.push_back((release, item));
                    }
                }
                // Stopped while the line is full: flush it too.
                _ = stop.cancelled(), if !(input_open && held < self.buffer) => {
                    for (_, item) in line {
                        if io.send(item).await.is_err() {
                            return;
                        }
                    }
                    return;
                }
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

    fn latency(pairs: &[(&str, &str)]) -> Latency {
        match spec("latency", pairs).unwrap().kind {
            FaultKind::Latency(l) => l,
            _ => unreachable!(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn delays_each_chunk_from_its_arrival_and_keeps_throughput() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let l = latency(&[("delay", "100ms")]);
        tokio::spawn(async move { l.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        tx.send(data(10)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        tx.send(data(10)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(100));
        rx.recv().await.unwrap();
        // The second chunk was read while the first waited: 130 ms, not 200.
        assert_eq!(t0.elapsed(), Duration::from_millis(130));
    }

    /// `ends = "at_once"` (Toxiproxy's latency): a FIN with nothing ahead
    /// of it goes at once; one behind a delayed chunk right after it. By
    /// default a FIN is delayed as the bytes are.
    #[tokio::test(start_paused = true)]
    async fn ends_pass_at_once_after_the_bytes_ahead_when_asked() {
        crate::timer::runtime_clock_only();
        let fin = || Item {
            at: Instant::now(),
            kind: crate::fault::ItemKind::Fin,
        };
        for (ends, first, second) in [("at_once", 0, 500), ("delayed", 500, 600)] {
            let (tx, mut rx, io) = channels();
            let l = latency(&[("delay", "500ms"), ("ends", ends)]);
            tokio::spawn(async move { l.run(ctx(Window::ALWAYS), &mut { io }).await });
            let t0 = Instant::now();
            tx.send(fin()).await.unwrap();
            rx.recv().await.unwrap();
            assert_eq!(
                t0.elapsed(),
                Duration::from_millis(first),
                "{ends}: a lone FIN"
            );
            let (tx, mut rx, io) = channels();
            let l = latency(&[("delay", "500ms"), ("ends", ends)]);
            tokio::spawn(async move { l.run(ctx(Window::ALWAYS), &mut { io }).await });
            let t0 = Instant::now();
            tx.send(data(10)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.send(fin()).await.unwrap();
            rx.recv().await.unwrap();
            assert_eq!(t0.elapsed(), Duration::from_millis(500));
            assert_eq!(rx.recv().await.unwrap().kind, crate::fault::ItemKind::Fin);
            assert_eq!(
                t0.elapsed(),
                Duration::from_millis(second),
                "{ends}: behind data"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn chained_latencies_add_up() {
        crate::timer::runtime_clock_only();
        let (tx, mut mid_rx, io1) = channels();
        let (mid_tx, mut rx, io2) = channels();
        for io in [io1, io2] {
            let l = latency(&[("delay", "100ms")]);
            tokio::spawn(async move { l.run(ctx(Window::ALWAYS), &mut { io }).await });
        }
        tokio::spawn(async move {
            while let Some(item) = mid_rx.recv().await {
                mid_tx.send(item).await.unwrap();
            }
        });
        let t0 = Instant::now();
        tx.send(data(10)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stays_in_bounds_and_never_reorders() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let l = latency(&[("delay", "50ms"), ("jitter", "20ms")]);
        tokio::spawn(async move { l.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        let sender = tokio::spawn(async move {
            for i in 0..50u8 {
                let item = Item::data(Instant::now(), bytes::Bytes::from(vec![i]));
                tx.send(item).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        for i in 0..50u8 {
            let item = rx.recv().await.unwrap();
            let sent = t0 + Duration::from_millis(5) * u32::from(i);
            let waited = sent.elapsed();
            // Stamped with its release: the next stage counts from there.
            assert!(item.at <= Instant::now() && item.at >= sent);
            assert!(
                waited >= Duration::from_millis(30) - Duration::from_millis(1),
                "{waited:?}"
            );
            assert!(waited <= Duration::from_millis(75), "{waited:?}");
            assert_eq!(
                item.kind,
                crate::fault::ItemKind::Data(bytes::Bytes::from(vec![i]))
            );
        }
        sender.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn inactive_window_passes_at_once() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let l = latency(&[("delay", "1s")]);
        tokio::spawn(async move {
            l.run(ctx(Window::parse("10s..").unwrap()), &mut { io })
                .await
        });
        let t0 = Instant::now();
        tx.send(data(1)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }

    #[test]
    fn delay_is_required() {
        assert!(
            spec("latency", &[])
                .unwrap_err()
                .message
                .contains("missing \"delay\"")
        );
        assert!(spec("latency", &[("delay", "10")]).is_err());
    }
}
