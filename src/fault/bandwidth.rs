//! `bandwidth`: a token bucket. Bytes leave at `rate` with bursts of at most
//! `burst`; `shared = true` makes one bucket (per direction) for every
//! connection of the rule. A rate of 0 holds the stream without spinning.
//! `burst = 0` gives no credit at all, as Toxiproxy's `bandwidth` (which
//! the API's toxic maps to): each piece of at most 100 ms of the rate
//! leaves once its own bytes have had their time, after the pieces before
//! it — 1000 bytes at 1 KB/s arrive over a second, none at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_rate;

#[derive(Debug, Clone)]
pub(crate) struct Bandwidth {
    /// Bytes per second.
    rate: u64,
    burst: u64,
    /// One bucket per direction, shared by every connection of the rule.
    shared: Option<Arc<[Mutex<TokenBucket>; 2]>>,
}

impl Kind for Bandwidth {
    const INFO: KindInfo = KindInfo {
        name: "bandwidth",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "bytes flow at rate (per connection, or shared by the rule)",
        params: &[
            (
                "rate",
                "a rate, required, like 1mbit or 500KB/s; 0 holds the stream",
                "the byte rate",
            ),
            (
                "burst",
                "a size, default 10 ms of rate; 0: no credit (Toxiproxy's pacing)",
                "the bucket size",
            ),
            (
                "shared",
                "true or false, default false",
                "one bucket for every connection of the rule",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rate = f.rate("rate")?.ok_or_else(|| {
            f.table_error("missing \"rate\" (a rate like \"1mbit\" or \"500KB/s\")")
        })?;
        let burst = f.size("burst")?.unwrap_or_else(|| default_burst(rate));
        let shared = f.boolean("shared")?.unwrap_or(false);
        if shared && burst == 0 {
            return Err(
                f.table_error("burst = 0 paces each connection on its own: it cannot be shared")
            );
        }
        Ok(Bandwidth {
            rate,
            burst,
            shared: shared.then(|| {
                Arc::new([
                    Mutex::new(TokenBucket::new(rate, burst)),
                    Mutex::new(TokenBucket::new(rate, burst)),
                ])
            }),
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![
            ("rate", format_rate(self.rate)),
            ("burst", self.burst.to_string()),
        ];
        if self.shared.is_some() {
            p.push(("shared", "true".into()));
        }
        p
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Bandwidth {
    pub(crate) async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        let mut own = TokenBucket::new(self.rate, self.burst);
        // burst = 0: when the link is free again, and when the piece now
        // waiting may leave.
        let mut free_at: Option<Instant> = None;
        let mut due: Option<Instant> = None;
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
                let now = Instant::now();
                let throttled = ctx.active_at(now);
                if !throttled {
                    // Outside its window the pacing starts afresh.
                    (free_at, due) = (None, None);
                }
                let grant = if !throttled {
                    Ok(bytes.len())
                } else if self.rate == 0 {
                    // A stall until the window closes (or forever).
                    Err(None)
                } else if self.burst == 0 {
                    let piece = bytes.len().min((self.rate / 10).max(1) as usize);
                    let at = *due.get_or_insert_with(|| {
                        // A piece that follows right on keeps the schedule
                        // (a late wake-up is made up); after a pause the
                        // link starts afresh (idle time earns nothing).
                        let start = match free_at {
                            Some(f) if f + FOLLOWS_ON >= now => f,
                            _ => now,
                        };
                        start + Duration::from_secs_f64(piece as f64 / self.rate as f64)
                    });
                    if at <= now {
                        free_at = due.take();
                        Ok(piece)
                    } else {
                        Err(Some(at))
                    }
                } else {
                    match &self.shared {
                        Some(b) => b[ctx.dir.index()]
                            .lock()
                            .expect("bucket lock")
                            .take(bytes.len(), now),
                        None => own.take(bytes.len(), now),
                    }
                    .map_err(|wait| Some(now + wait))
                };
                if throttled {
                    ctx.hit.fire();
                }
                match grant {
                    Ok(n) => {
                        let piece = bytes.split_to(n);
                        if io.send(Item::data(item.at, piece)).await.is_err() {
                            return;
                        }
                    }
                    Err(wake) => {
                        let wake = match (wake, ctx.window_end()) {
                            (Some(w), Some(e)) => Some(w.min(e)),
                            (w, e) => w.or(e),
                        };
                        if !io.wait_for(wake).await {
                            // Removed: the rest of the chunk goes at once.
                            let _ = io.send(Item::data(item.at, bytes)).await;
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// With `burst = 0`: a piece due within this of the last one's end follows
/// right on (its wait counts from that end, not from the late wake-up).
const FOLLOWS_ON: Duration = Duration::from_millis(5);

/// Bursts of 10 ms at the rate, at least one full-size Ethernet frame.
fn default_burst(rate: u64) -> u64 {
    (rate / 100).max(1500)
}

/// A token bucket measured in bytes.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    pub(crate) fn new(rate: u64, burst: u64) -> Self {
        TokenBucket {
            rate: rate as f64,
            burst: burst as f64,
            tokens: burst as f64,
            last: None,
        }
    }

    /// Grants up to `want` bytes now, or says how long to wait. A grant is
    /// made once enough tokens exist for the whole request or half a burst,
    /// so writes are not shredded into tiny pieces, and a waker that comes
    /// a little late (timer granularity) finds room below the cap for the
    /// tokens that accrued meanwhile instead of losing them.
    pub(crate) fn take(&mut self, want: usize, now: Instant) -> Result<usize, Duration> {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        self.last = Some(now);
        let need = (want as f64).min((self.burst / 2.0).max(1.0));
        if self.tokens + 1e-9 >= need {
            let n = (want as f64).min(self.tokens.floor()).max(1.0) as usize;
            self.tokens -= n as f64;
            Ok(n.min(want))
        } else {
            Err(Duration::from_secs_f64((need - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    fn bw(pairs: &[(&str, &str)]) -> Bandwidth {
        match spec("bandwidth", pairs).unwrap().kind {
            FaultKind::Bandwidth(b) => b,
            _ => unreachable!(),
        }
    }

    /// `burst = 0` (Toxiproxy's pacing): no credit, 100 ms pieces, and no
    /// credit from idle time either.
    #[tokio::test(start_paused = true)]
    async fn no_burst_means_no_credit() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let b = bw(&[("rate", "1KB/s"), ("burst", "0")]);
        tokio::spawn(async move { b.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        tx.send(data(1000)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 100);
        assert_eq!(t0.elapsed(), Duration::from_millis(100));
        let mut got = 100;
        while got < 1000 {
            got += rx.recv().await.unwrap().len();
        }
        assert_eq!(t0.elapsed(), Duration::from_millis(1000));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t1 = Instant::now();
        tx.send(data(50)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(
            t1.elapsed(),
            Duration::from_millis(50),
            "idle gave no credit"
        );
        assert!(
            spec(
                "bandwidth",
                &[("rate", "1KB/s"), ("burst", "0"), ("shared", "true")]
            )
            .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn paces_to_the_rate() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let b = bw(&[("rate", "100KB/s"), ("burst", "1000")]);
        tokio::spawn(async move { b.run(ctx(Window::ALWAYS), &mut { io }).await });
        let t0 = Instant::now();
        tokio::spawn(async move {
            for _ in 0..10 {
                tx.send(data(10_000)).await.unwrap();
            }
        });
        let mut got = 0;
        while got < 100_000 {
            let item = rx.recv().await.unwrap();
            assert!(item.len() <= 1000);
            got += item.len();
        }
        // 100 kB at 100 kB/s, less the initial burst of 1000 bytes.
        let secs = t0.elapsed().as_secs_f64();
        assert!((0.98..=1.01).contains(&secs), "{secs}");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_rate_holds_until_the_window_closes() {
        crate::timer::runtime_clock_only();
        let (tx, mut rx, io) = channels();
        let b = bw(&[("rate", "0")]);
        tokio::spawn(async move {
            b.run(ctx(Window::parse("..5s").unwrap()), &mut { io })
                .await
        });
        let t0 = Instant::now();
        tx.send(data(10)).await.unwrap();
        rx.recv().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }

    #[test]
    fn bucket_grants_and_waits() {
        let t = Instant::now();
        let mut b = TokenBucket::new(1000, 100);
        assert_eq!(b.take(60, t), Ok(60));
        // 40 tokens left; half a burst (50) is needed: 10 ms more.
        assert_eq!(b.take(60, t), Err(Duration::from_millis(10)));
        assert_eq!(b.take(60, t + Duration::from_millis(10)), Ok(50));
        assert_eq!(b.take(500, t + Duration::from_secs(10)), Ok(100));
    }

    #[test]
    fn rate_is_required_and_checked() {
        assert!(
            spec("bandwidth", &[])
                .unwrap_err()
                .message
                .contains("missing \"rate\"")
        );
        let e = spec("bandwidth", &[("rate", "fast")]).unwrap_err();
        assert_eq!(
            e.message,
            "bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\""
        );
        assert!(spec("bandwidth", &[("rate", "1mbit"), ("burst", "0")]).is_ok());
    }
}
