//! The path a flow's packets cross when it has `packet_latency` or
//! `packet_rate` faults: when each packet comes out, or whether the link's
//! queue drops it. Pure (the caller brings the clock); the packet delay
//! line in `intercept` holds the packets and releases them at these times.
//!
//! Each direction is a link: a packet waits for the link (at most `queue`
//! packets wait; one more is dropped), takes `len / rate` to cross it, then
//! `delay ± jitter` to arrive. Arrivals never go backwards, so jitter
//! never reorders a flow (TCP on a real path rarely sees reordering, and
//! reordering is a fault of its own).

use std::collections::VecDeque;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use super::{Chosen, Direction, FaultKind, Stream};

/// One direction of the path.
#[derive(Debug)]
pub(crate) struct Link {
    delay: Duration,
    jitter: Duration,
    /// Bytes per second; `None`: as fast as the host.
    rate: Option<u64>,
    queue: usize,
    /// When the link is next free to start a packet.
    free_at: Instant,
    /// When each waiting packet starts crossing (the queue, in order).
    waiting: VecDeque<Instant>,
    last_out: Instant,
    rng: ChaCha8Rng,
}

impl Link {
    fn new(now: Instant, rng: ChaCha8Rng) -> Link {
        Link {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate: None,
            queue: usize::MAX,
            free_at: now,
            waiting: VecDeque::new(),
            last_out: now,
            rng,
        }
    }

    /// When a packet of `len` bytes arriving at `now` comes out, or `None`
    /// when the link's queue is full and it is dropped.
    pub(crate) fn admit(&mut self, now: Instant, len: usize) -> Option<Instant> {
        let mut out = now;
        if let Some(rate) = self.rate {
            while self.waiting.front().is_some_and(|t| *t <= now) {
                self.waiting.pop_front();
            }
            let start = self.free_at.max(now);
            if start > now {
                if self.waiting.len() >= self.queue {
                    return None;
                }
                self.waiting.push_back(start);
            }
            self.free_at = start + Duration::from_secs_f64(len as f64 / rate as f64);
            out = self.free_at;
        }
        out += self.delay;
        if !self.jitter.is_zero() {
            let j = self.jitter.as_secs_f64();
            let d = self.rng.random_range(-j..=j);
            out = if d >= 0.0 {
                out + Duration::from_secs_f64(d)
            } else {
                out.checked_sub(Duration::from_secs_f64(-d))
                    .unwrap_or(out)
                    .max(now)
            };
        }
        out = out.max(self.last_out);
        self.last_out = out;
        Some(out)
    }

    /// Whether the link changes anything.
    fn is_plain(&self) -> bool {
        self.delay.is_zero() && self.jitter.is_zero() && self.rate.is_none()
    }
}

/// Both directions of a flow's path: `[client→server, server→client]`.
#[derive(Debug)]
pub(crate) struct Path {
    links: [Link; 2],
}

impl Path {
    /// The path the chosen faults make (the others are ignored), or `None`
    /// when none of them is a path fault.
    pub(crate) fn of(chosen: &[&Chosen], now: Instant) -> Option<Path> {
        let dirs = [Direction::Upstream, Direction::Downstream];
        let mut links = dirs.map(|d| Link::new(now, ChaCha8Rng::seed_from_u64(d.index() as u64)));
        for c in chosen {
            for (link, dir) in links.iter_mut().zip(dirs) {
                if !c.spec.stream.includes(dir) {
                    continue;
                }
                match &c.spec.kind {
                    FaultKind::PacketLatency(l) => {
                        // The round trip, split over the directions it
                        // names.
                        let share = if c.spec.stream == Stream::Both { 2 } else { 1 };
                        link.delay += l.delay / share;
                        link.jitter += l.jitter / share;
                        link.rng = c.rng(dir);
                    }
                    FaultKind::PacketRate(r) => {
                        link.rate = Some(link.rate.map_or(r.rate, |x| x.min(r.rate)));
                        link.queue = link.queue.min(r.queue as usize);
                    }
                    _ => {}
                }
            }
        }
        if links.iter().all(Link::is_plain) {
            return None;
        }
        Some(Path { links })
    }

    /// The longest a packet waits on the path, queueing aside.
    pub(crate) fn longest_delay(&self) -> Duration {
        self.links
            .iter()
            .map(|l| l.delay + l.jitter)
            .max()
            .unwrap_or_default()
    }

    pub(crate) fn link(&mut self, dir: Direction) -> &mut Link {
        &mut self.links[dir.index()]
    }
}

/// Whether a fault is one the path is made of.
pub(crate) fn is_path_fault(kind: &FaultKind) -> bool {
    matches!(kind, FaultKind::PacketLatency(_) | FaultKind::PacketRate(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::testing::spec;
    use std::sync::Arc;

    fn chosen(kind: &str, params: &[(&str, &str)]) -> Chosen {
        Chosen {
            id: 1,
            rule: "r".into(),
            spec: Arc::new(spec(kind, params).unwrap()),
            seed: 7,
        }
    }

    fn path(faults: &[Chosen], t0: Instant) -> Path {
        let refs: Vec<&Chosen> = faults.iter().collect();
        Path::of(&refs, t0).expect("a path fault")
    }

    #[test]
    fn latency_is_a_round_trip_split_over_both_directions() {
        let t0 = Instant::now();
        let mut p = path(&[chosen("packet_latency", &[("delay", "50ms")])], t0);
        let up = p.link(Direction::Upstream).admit(t0, 60).unwrap();
        let down = p.link(Direction::Downstream).admit(t0, 60).unwrap();
        assert_eq!(
            (up - t0, down - t0),
            (Duration::from_millis(25), Duration::from_millis(25))
        );
        let mut p = path(
            &[chosen(
                "packet_latency",
                &[("delay", "50ms"), ("stream", "downstream")],
            )],
            t0,
        );
        assert_eq!(p.link(Direction::Upstream).admit(t0, 60), Some(t0));
        assert_eq!(
            p.link(Direction::Downstream).admit(t0, 60),
            Some(t0 + Duration::from_millis(50))
        );
    }

    #[test]
    fn jitter_never_reorders() {
        let t0 = Instant::now();
        let mut p = path(
            &[chosen(
                "packet_latency",
                &[("delay", "20ms"), ("jitter", "10ms")],
            )],
            t0,
        );
        let link = p.link(Direction::Downstream);
        let mut last = t0;
        let mut spread = (Duration::MAX, Duration::ZERO);
        for i in 0..1000u32 {
            let now = t0 + Duration::from_micros(u64::from(i) * 100);
            let out = link.admit(now, 1500).unwrap();
            assert!(out >= last, "packet {i} overtook the one before");
            last = out;
            spread = (spread.0.min(out - now), spread.1.max(out - now));
        }
        // 10 ms ± 5 ms each way.
        assert!(spread.0 >= Duration::from_millis(5), "{spread:?}");
        assert!(spread.1 <= Duration::from_millis(16), "{spread:?}");
    }

    #[test]
    fn a_slow_link_paces_queues_and_drops_when_the_queue_is_full() {
        let t0 = Instant::now();
        // 1 MB/s: a 1000-byte packet takes 1 ms; two may wait.
        let mut p = path(
            &[chosen(
                "packet_rate",
                &[("rate", "1MB/s"), ("queue", "2"), ("stream", "upstream")],
            )],
            t0,
        );
        let link = p.link(Direction::Upstream);
        let outs: Vec<_> = (0..4).map(|_| link.admit(t0, 1000)).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            outs[..3],
            [Some(t0 + ms(1)), Some(t0 + ms(2)), Some(t0 + ms(3))]
        );
        assert_eq!(outs[3], None, "the third packet waiting is one too many");
        // Once the link has drained, packets pass again.
        assert_eq!(link.admit(t0 + ms(10), 1000), Some(t0 + ms(11)));
        assert!(p.link(Direction::Downstream).is_plain());
    }

    #[test]
    fn rate_and_latency_add_up_and_other_faults_make_no_path() {
        let t0 = Instant::now();
        let mut p = path(
            &[
                chosen("packet_rate", &[("rate", "1MB/s")]),
                chosen(
                    "packet_latency",
                    &[("delay", "10ms"), ("stream", "upstream")],
                ),
                chosen("latency", &[("delay", "1s")]),
            ],
            t0,
        );
        assert_eq!(
            p.link(Direction::Upstream).admit(t0, 1000),
            Some(t0 + Duration::from_millis(11))
        );
        let loss = [chosen("loss", &[("percent", "5")])];
        assert!(Path::of(&loss.iter().collect::<Vec<_>>(), t0).is_none());
    }
}
