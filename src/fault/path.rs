//! The path a flow's packets cross when it has `packet_latency`,
//! `packet_rate` or bursty `loss` faults: when each packet comes out, or
//! whether the link loses it or its queue drops it. Pure (the caller brings the clock); the packet delay
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
    /// Bursty `loss` on this link, each with its own state.
    losses: Vec<BurstLoss>,
}

/// Losses in runs: the link is good (nothing lost) or bad (every packet
/// lost), and changes state between packets with fixed chances — the
/// Gilbert model, tc-netem's `loss gemodel p r` with no loss when good
/// and all when bad. For a share `L` lost in runs of `B` on average, a bad
/// link turns good with chance `r = 1/B`, and a good one bad with
/// `p = L·r / (1 − L)`, so that the link is bad `p / (p + r) = L` of the
/// time.
///
/// A run is packets that follow each other closely: after a pause of
/// [`BURST_GAP`] the state is drawn afresh (bad with chance `L`). Counted
/// in packets alone, a bad state would outlast any pause, and a flow down
/// to one retransmission per timeout would see each of them lost with
/// chance `1 − r` — seconds of silence no congested queue or fading link
/// makes, and not what tc-netem's model does on a device whose other
/// traffic moves it on.
#[derive(Debug)]
pub(crate) struct BurstLoss {
    rate: f64,
    /// Chance that a good link turns bad before a packet.
    enter: f64,
    /// Chance that a bad link turns good before a packet.
    leave: f64,
    bad: bool,
    /// When the last packet came.
    last: Option<Instant>,
    rng: ChaCha8Rng,
}

/// A pause after which a link's loss state no longer depends on the last
/// packet's: a queue overflow or a fade lasts milliseconds, and the
/// shortest retransmission timeout is 200 ms.
pub(crate) const BURST_GAP: Duration = Duration::from_millis(10);

impl BurstLoss {
    pub(crate) fn new(rate: f64, burst: f64, rng: ChaCha8Rng) -> BurstLoss {
        let leave = 1.0 / burst.max(1.0);
        // At 100 % the link never turns good again.
        let (enter, leave) = if rate >= 1.0 {
            (1.0, 0.0)
        } else {
            ((rate * leave / (1.0 - rate)).min(1.0), leave)
        };
        BurstLoss {
            rate: rate.min(1.0),
            enter,
            leave,
            bad: false,
            last: None,
            rng,
        }
    }

    /// Whether the packet arriving at `now` is lost.
    pub(crate) fn lose(&mut self, now: Instant) -> bool {
        let fresh = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) > BURST_GAP);
        self.last = Some(now);
        if fresh {
            self.bad = self.rng.random_bool(self.rate);
        } else {
            let turn = if self.bad { self.leave } else { self.enter };
            if self.rng.random_bool(turn) {
                self.bad = !self.bad;
            }
        }
        self.bad
    }
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
            losses: Vec::new(),
        }
    }

    /// When a packet of `len` bytes arriving at `now` comes out, or `None`
    /// when the link's queue is full and it is dropped.
    pub(crate) fn admit(&mut self, now: Instant, len: usize) -> Option<Instant> {
        // Every model moves on with every packet (one lost by the first
        // still counts for the others' runs).
        let mut lost = false;
        for l in &mut self.losses {
            lost |= l.lose(now);
        }
        if lost {
            return None;
        }
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
        self.delay.is_zero()
            && self.jitter.is_zero()
            && self.rate.is_none()
            && self.losses.is_empty()
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
                    FaultKind::Loss(l) if l.bursty() => {
                        let mut rng = c.rng(dir);
                        // A stream of its own: a delay on the same link
                        // draws from the fault's first one.
                        rng.set_stream(2 + dir.index() as u64);
                        link.losses.push(BurstLoss::new(l.rate(), l.burst(), rng));
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
    match kind {
        FaultKind::PacketLatency(_) | FaultKind::PacketRate(_) => true,
        FaultKind::Loss(l) => l.bursty(),
        _ => false,
    }
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

    /// The share lost and the mean run of losses over `n` packets, `gap`
    /// apart.
    fn losses_apart(link: &mut Link, n: usize, gap: Duration) -> (f64, f64, Vec<bool>) {
        let t0 = Instant::now();
        let fates: Vec<bool> = (0..n)
            .map(|i| link.admit(t0 + gap * i as u32, 100).is_none())
            .collect();
        let lost = fates.iter().filter(|x| **x).count();
        let runs = fates.windows(2).filter(|w| w[1] && !w[0]).count() + usize::from(fates[0]);
        (
            lost as f64 / n as f64,
            lost as f64 / runs.max(1) as f64,
            fates,
        )
    }

    /// [`losses_apart`] for packets back to back.
    fn losses(link: &mut Link, n: usize) -> (f64, f64, Vec<bool>) {
        losses_apart(link, n, Duration::ZERO)
    }

    #[test]
    fn bursty_loss_keeps_its_share_and_loses_in_runs() {
        let t0 = Instant::now();
        let c = [chosen("loss", &[("percent", "10"), ("burst", "4")])];
        let mut p = path(&c, t0);
        let (share, run, fates) = losses(p.link(Direction::Upstream), 400_000);
        assert!((0.09..0.11).contains(&share), "lost {share}");
        assert!((3.6..4.4).contains(&run), "mean run {run}");
        // Seeded: the same connection loses the same packets.
        let (_, _, again) = losses(path(&c, t0).link(Direction::Upstream), 400_000);
        assert_eq!(fates, again);
        // Each direction has a model of its own.
        let (_, _, down) = losses(p.link(Direction::Downstream), 400_000);
        assert_ne!(fates, down);
        // More than runs of 4 can lose (a good stretch is a packet at
        // least), and a share that must read back exactly.
        let e =
            crate::fault::testing::spec("loss", &[("percent", "90"), ("burst", "4")]).unwrap_err();
        assert!(e.to_string().contains("lose at most 80%"), "{e}");
        let tiny = chosen("loss", &[("percent", "0.001"), ("burst", "4")]);
        assert_eq!(tiny.spec.kind.params()[0].1, "0.001");
        // All of them, for good.
        let all = [chosen("loss", &[("percent", "100"), ("burst", "3")])];
        let (share, _, _) = losses(path(&all, t0).link(Direction::Upstream), 1000);
        assert_eq!(share, 1.0);
        // One direction only.
        let up = [chosen(
            "loss",
            &[("percent", "50"), ("burst", "2"), ("stream", "upstream")],
        )];
        assert!(path(&up, t0).link(Direction::Downstream).is_plain());
    }

    #[test]
    fn packets_a_pause_apart_are_lost_each_on_its_own() {
        // A flow down to one retransmission per timeout: each is lost with
        // the share's chance, not held in a run for seconds.
        let t0 = Instant::now();
        let c = [chosen("loss", &[("percent", "20"), ("burst", "10")])];
        let mut p = path(&c, t0);
        let (share, run, _) = losses_apart(
            p.link(Direction::Upstream),
            20_000,
            Duration::from_millis(200),
        );
        assert!((0.18..0.22).contains(&share), "lost {share}");
        assert!(run < 1.5, "mean run {run}: runs across pauses");
        // Close together again: runs.
        let (_, run, _) = losses_apart(
            p.link(Direction::Upstream),
            200_000,
            Duration::from_micros(50),
        );
        assert!((8.5..11.5).contains(&run), "mean run {run}");
    }

    #[test]
    fn a_lost_packet_takes_no_place_in_the_links_queue() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = path(
            &[
                chosen("loss", &[("percent", "100"), ("burst", "2")]),
                chosen("packet_rate", &[("rate", "1MB/s"), ("queue", "1")]),
            ],
            t0,
        );
        let link = p.link(Direction::Upstream);
        assert!((0..10).all(|_| link.admit(t0, 1000).is_none()));
        link.losses.clear();
        assert_eq!(link.admit(t0, 1000), Some(t0 + ms(1)), "the link is free");
    }
}
