//! The fault interface and the registry of fault kinds.
//!
//! A fault is parsed once from a profile, a `--fault` flag or the API into a
//! [`FaultSpec`]: its kind-specific parameters plus the settings every fault
//! shares (`probability`, `stream`, `active`). A stream fault becomes, for each
//! direction it acts on, one *stage* of that direction's pipeline: an async
//! task that receives [`Item`]s (byte chunks stamped with their arrival time,
//! FIN, RST) and passes them on — later, sliced, held, or replaced. Each kind
//! lives in its own file and knows nothing about sockets.
//!
//! Connect-layer faults (`refuse`, `connect_timeout`, `connect_delay`) act on
//! the client's SYN and packet-layer ones (`loss`, `blackout`) on the
//! packets of the flow; both need the namespace of `netchaos run`, where the
//! SYN gate and the nftables table apply them.

pub mod bandwidth;
pub mod blackout;
pub mod close;
pub mod connect_delay;
pub mod connect_timeout;
pub mod latency;
pub mod loss;
pub mod refuse;
pub mod reset;
pub mod respond;
pub mod slicer;
pub mod slow_close;
pub mod stage;
pub mod stall;

pub use stage::{Gone, Item, ItemKind, Next, Output, StageIo};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::events::FaultHit;
use crate::profile::node::{Fields, ProfileError, closest, quoted_list};
use crate::units::Window;

/// Which bytes of a connection a fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Client → server.
    Upstream,
    /// Server → client.
    Downstream,
    Both,
}

impl Stream {
    pub fn includes(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Stream::Both, _)
                | (Stream::Upstream, Direction::Upstream)
                | (Stream::Downstream, Direction::Downstream)
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
            Stream::Both => "both",
        }
    }
}

/// One direction of a relayed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Upstream,
    Downstream,
}

impl Direction {
    pub const BOTH: [Direction; 2] = [Direction::Upstream, Direction::Downstream];

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Upstream => "upstream",
            Direction::Downstream => "downstream",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Direction::Upstream => 0,
            Direction::Downstream => 1,
        }
    }
}

/// What a stage knows about its connection and its moment in time.
pub struct StageCtx {
    pub dir: Direction,
    /// Random source for this (connection, fault, direction): a pure function
    /// of the seed, so a run can be replayed.
    pub rng: ChaCha8Rng,
    pub window: Window,
    /// When netchaos started; `active` windows count from here.
    pub epoch: Instant,
    /// When the connection was accepted; `after` counts from here.
    pub opened: Instant,
    /// Records the fault's effect in the event log and the counters.
    pub hit: FaultHit,
    /// Packet-level control of this connection's flow, where there is one
    /// (`netchaos run`).
    pub partition: Option<Arc<dyn Partition>>,
}

/// Packet-level control of one connection's flow.
pub trait Partition: Send + Sync {
    /// Drops every packet of the flow for `duration` (`None`: for good).
    fn blackout(
        &self,
        duration: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

impl StageCtx {
    /// Whether the fault may act at `now`.
    pub fn active_at(&self, now: Instant) -> bool {
        self.window
            .contains(now.saturating_duration_since(self.epoch))
    }

    /// When the window closes, if it does.
    pub fn window_end(&self) -> Option<Instant> {
        self.window.end.map(|e| self.epoch + e)
    }

    /// When the window opens (`epoch` for an open start).
    pub fn window_start(&self) -> Instant {
        self.epoch + self.window.start.unwrap_or_default()
    }

    /// Sleeps until the window closes; forever if it never does.
    pub async fn until_window_end(&self) {
        match self.window_end() {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    }
}

pub type StageFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A fault's kind-specific settings, after validation.
#[derive(Debug, Clone)]
pub enum FaultKind {
    Latency(latency::Latency),
    Bandwidth(bandwidth::Bandwidth),
    Slicer(slicer::Slicer),
    Stall(stall::Stall),
    Reset(reset::Reset),
    Close(close::Close),
    SlowClose(slow_close::SlowClose),
    Respond(respond::Respond),
    Refuse(refuse::Refuse),
    ConnectTimeout(connect_timeout::ConnectTimeout),
    ConnectDelay(connect_delay::ConnectDelay),
    Loss(loss::Loss),
    Blackout(blackout::Blackout),
}

/// One registered fault kind.
pub struct KindInfo {
    pub name: &'static str,
    /// The layer from the fault model: `connect`, `stream` or `packet`.
    pub layer: &'static str,
    pub default_stream: Stream,
    pub about: &'static str,
    parse: fn(&mut Fields) -> Result<FaultKind, ProfileError>,
}

/// Every fault kind netchaos knows, in the order the docs list them.
pub const KINDS: &[KindInfo] = &[
    KindInfo {
        name: "latency",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "each byte arrives delay ± jitter later; throughput is kept",
        parse: |f| latency::Latency::parse(f).map(FaultKind::Latency),
    },
    KindInfo {
        name: "bandwidth",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "bytes flow at rate (per connection, or shared by the rule)",
        parse: |f| bandwidth::Bandwidth::parse(f).map(FaultKind::Bandwidth),
    },
    KindInfo {
        name: "slicer",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "data arrives in small segments with pauses between them",
        parse: |f| slicer::Slicer::parse(f).map(FaultKind::Slicer),
    },
    KindInfo {
        name: "stall",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "after some bytes or time nothing flows for a while, or forever",
        parse: |f| stall::Stall::parse(f).map(FaultKind::Stall),
    },
    KindInfo {
        name: "reset",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "after some bytes or time both sides get a TCP RST",
        parse: |f| reset::Reset::parse(f).map(FaultKind::Reset),
    },
    KindInfo {
        name: "close",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "after some bytes or time a clean FIN: a truncated stream",
        parse: |f| close::Close::parse(f).map(FaultKind::Close),
    },
    KindInfo {
        name: "slow_close",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "the FIN is delayed by delay",
        parse: |f| slow_close::SlowClose::parse(f).map(FaultKind::SlowClose),
    },
    KindInfo {
        name: "respond",
        layer: "stream",
        default_stream: Stream::Downstream,
        about: "the upstream is never contacted; canned bytes, then close/reset/stall",
        parse: |f| respond::Respond::parse(f).map(FaultKind::Respond),
    },
    KindInfo {
        name: "refuse",
        layer: "connect",
        default_stream: Stream::Both,
        about: "the SYN is answered with RST: connect() fails with ECONNREFUSED",
        parse: |f| refuse::Refuse::parse(f).map(FaultKind::Refuse),
    },
    KindInfo {
        name: "connect_timeout",
        layer: "connect",
        default_stream: Stream::Both,
        about: "SYNs are never answered: connect() times out",
        parse: |f| connect_timeout::ConnectTimeout::parse(f).map(FaultKind::ConnectTimeout),
    },
    KindInfo {
        name: "connect_delay",
        layer: "connect",
        default_stream: Stream::Both,
        about: "the handshake completes only after delay ± jitter",
        parse: |f| connect_delay::ConnectDelay::parse(f).map(FaultKind::ConnectDelay),
    },
    KindInfo {
        name: "loss",
        layer: "packet",
        default_stream: Stream::Both,
        about: "percent of the flow's packets are dropped: real retransmissions",
        parse: |f| loss::Loss::parse(f).map(FaultKind::Loss),
    },
    KindInfo {
        name: "blackout",
        layer: "packet",
        default_stream: Stream::Downstream,
        about: "every packet of the flow is dropped for duration: a partition",
        parse: |f| blackout::Blackout::parse(f).map(FaultKind::Blackout),
    },
];

impl FaultKind {
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Latency(_) => "latency",
            FaultKind::Bandwidth(_) => "bandwidth",
            FaultKind::Slicer(_) => "slicer",
            FaultKind::Stall(_) => "stall",
            FaultKind::Reset(_) => "reset",
            FaultKind::Close(_) => "close",
            FaultKind::SlowClose(_) => "slow_close",
            FaultKind::Respond(_) => "respond",
            FaultKind::Refuse(_) => "refuse",
            FaultKind::ConnectTimeout(_) => "connect_timeout",
            FaultKind::ConnectDelay(_) => "connect_delay",
            FaultKind::Loss(_) => "loss",
            FaultKind::Blackout(_) => "blackout",
        }
    }

    /// The layer of the fault model: `connect`, `stream` or `packet`.
    pub fn layer(&self) -> &'static str {
        find_kind(self.name()).map_or("stream", |k| k.layer)
    }

    /// The kind's parameters, resolved, as `key = value` text (for `check`,
    /// the event log and the summary).
    pub fn params(&self) -> Vec<(&'static str, String)> {
        match self {
            FaultKind::Latency(x) => x.params(),
            FaultKind::Bandwidth(x) => x.params(),
            FaultKind::Slicer(x) => x.params(),
            FaultKind::Stall(x) => x.params(),
            FaultKind::Reset(x) => x.params(),
            FaultKind::Close(x) => x.params(),
            FaultKind::SlowClose(x) => x.params(),
            FaultKind::Respond(x) => x.params(),
            FaultKind::Refuse(x) => x.params(),
            FaultKind::ConnectTimeout(x) => x.params(),
            FaultKind::ConnectDelay(x) => x.params(),
            FaultKind::Loss(x) => x.params(),
            FaultKind::Blackout(x) => x.params(),
        }
    }

    /// Whether the kind runs as a pipeline stage on a direction's bytes.
    pub fn has_stage(&self) -> bool {
        !matches!(
            self,
            FaultKind::Respond(_)
                | FaultKind::Refuse(_)
                | FaultKind::ConnectTimeout(_)
                | FaultKind::ConnectDelay(_)
                | FaultKind::Loss(_)
        )
    }

    /// The pipeline stage for one direction, or `None` when the kind does
    /// not act on a direction's bytes (`respond` replaces the upstream;
    /// connect faults act on the SYN; `loss` is the kernel's).
    pub fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(match self {
            FaultKind::Latency(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Bandwidth(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Slicer(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Stall(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Reset(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Close(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::SlowClose(x) => Box::pin(x.clone().run(ctx, io)),
            FaultKind::Blackout(x) => Box::pin(x.clone().run(ctx, io)),
            _ => return None,
        })
    }
}

/// A validated fault: kind, parameters and the shared settings.
#[derive(Debug, Clone)]
pub struct FaultSpec {
    pub kind: FaultKind,
    /// Share of matching connections that get the fault, decided once per
    /// connection.
    pub probability: f64,
    pub stream: Stream,
    pub active: Window,
}

impl FaultSpec {
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// All parameters, the shared ones included, as `key = value` text.
    pub fn all_params(&self) -> Vec<(&'static str, String)> {
        let mut p = self.kind.params();
        if self.probability < 1.0 {
            p.push(("probability", format!("{}", self.probability)));
        }
        let streamless = matches!(
            self.kind,
            FaultKind::Respond(_)
                | FaultKind::Refuse(_)
                | FaultKind::ConnectTimeout(_)
                | FaultKind::ConnectDelay(_)
        );
        if !streamless {
            p.push(("stream", self.stream.as_str().to_string()));
        }
        if self.active != Window::ALWAYS {
            p.push(("active", self.active.to_string()));
        }
        p
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let params = self.all_params();
        for (i, (k, v)) in params.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { ":" } else { "," })?;
        }
        Ok(())
    }
}

/// Reads one fault table: `type`, the shared settings, then the kind's own
/// parameters; any key left over is an error.
pub fn parse_fault(mut f: Fields) -> Result<FaultSpec, ProfileError> {
    let loc = f.loc().to_string();
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    let kind_name = f.string("type")?.ok_or_else(|| {
        f.table_error(format!(
            "missing \"type\"; expected one of {}",
            quoted_list(&names)
        ))
    })?;
    let info = find_kind(&kind_name).ok_or_else(|| {
        let hint = closest(&kind_name, &names)
            .map_or(String::new(), |k| format!(" (did you mean {k:?}?)"));
        ProfileError::new(
            &loc,
            format!(
                "{}: unknown fault type {kind_name:?}{hint}; expected one of {}",
                f.path(),
                quoted_list(&names)
            ),
        )
    })?;
    let mut f = f.renamed(info.name);
    let probability = f.number_in("probability", 0.0, 1.0)?.unwrap_or(1.0);
    let stream = match f.choice("stream", &["upstream", "downstream", "both"])? {
        Some("upstream") => Stream::Upstream,
        Some("both") => Stream::Both,
        Some(_) => Stream::Downstream,
        None => info.default_stream,
    };
    let active = f.window("active")?.unwrap_or(Window::ALWAYS);
    let kind = (info.parse)(&mut f)?;
    f.finish()?;
    Ok(FaultSpec {
        kind,
        probability,
        stream,
        active,
    })
}

pub fn find_kind(name: &str) -> Option<&'static KindInfo> {
    let name = name.trim().replace('-', "_");
    KINDS.iter().find(|k| k.name == name)
}

/// Reads the `after_bytes` / `after` trigger shared by stall, reset and close.
/// Neither means "at once" (after zero bytes).
pub fn parse_trigger(f: &mut Fields) -> Result<Trigger, ProfileError> {
    let bytes = f.size("after_bytes")?;
    let time = f.duration("after")?;
    match (bytes, time) {
        (Some(_), Some(_)) => Err(f.table_error("give either after_bytes or after, not both")),
        (Some(n), None) => Ok(Trigger::Bytes(n)),
        (None, Some(t)) => Ok(Trigger::Time(t)),
        (None, None) => Ok(Trigger::Bytes(0)),
    }
}

/// When a one-shot stream fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Once this many bytes have passed in the direction.
    Bytes(u64),
    /// This long after the connection opened.
    Time(Duration),
}

impl Trigger {
    pub fn param(&self) -> (&'static str, String) {
        match self {
            Trigger::Bytes(n) => ("after_bytes", n.to_string()),
            Trigger::Time(t) => ("after", crate::units::format_duration(*t)),
        }
    }
}

/// How [`pass_until`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Until {
    /// The trigger fired; the part of the crossing chunk beyond the mark, if
    /// any, is handed back (a stall holds it, a reset drops it).
    Fired(Option<Item>),
    /// The input ended, or the trigger can no longer fire.
    Ended,
    /// The stage is being removed.
    Stopped,
}

/// Passes items until `trigger` fires (and the window is open), splitting
/// the chunk that crosses the byte mark. Shared by stall, reset, close and
/// blackout.
pub async fn pass_until(trigger: Trigger, ctx: &StageCtx, io: &mut StageIo) -> Result<Until, Gone> {
    let mut passed: u64 = 0;
    let deadline = match trigger {
        Trigger::Time(t) => Some((ctx.opened + t).max(ctx.window_start())),
        Trigger::Bytes(_) => None,
    };
    loop {
        let next = tokio::select! {
            biased;
            _ = sleep_opt(deadline) => {
                if ctx.active_at(Instant::now()) {
                    return Ok(Until::Fired(None));
                }
                // The time came outside the window: pass the rest unharmed.
                io.pass_rest().await;
                return Ok(Until::Ended);
            }
            n = io.next() => n,
        };
        let item = match next {
            Next::Item(item) => item,
            Next::Ended => return Ok(Until::Ended),
            Next::Stopped => return Ok(Until::Stopped),
        };
        let Trigger::Bytes(limit) = trigger else {
            io.send(item).await?;
            continue;
        };
        let active = ctx.active_at(Instant::now());
        match &item.kind {
            // A zero-byte trigger fires at the first byte.
            ItemKind::Data(bytes) if active && passed + bytes.len() as u64 > limit => {
                let keep = (limit.saturating_sub(passed)) as usize;
                if keep > 0 {
                    io.send(Item::data(item.at, bytes.slice(..keep))).await?;
                }
                return Ok(Until::Fired(Some(Item::data(item.at, bytes.slice(keep..)))));
            }
            ItemKind::Data(bytes) => {
                passed += bytes.len() as u64;
                io.send(item).await?;
            }
            _ => io.send(item).await?,
        }
    }
}

async fn sleep_opt(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A harness that runs one stage on a paused clock.
    use super::*;
    use rand::SeedableRng;

    pub fn ctx(window: Window) -> StageCtx {
        let now = Instant::now();
        StageCtx {
            dir: Direction::Downstream,
            rng: ChaCha8Rng::seed_from_u64(1),
            window,
            epoch: now,
            opened: now,
            hit: FaultHit::detached(),
            partition: None,
        }
    }

    use tokio::sync::mpsc;

    /// Input sender, output receiver, and the stage's channels.
    pub fn channels() -> (mpsc::Sender<Item>, mpsc::Receiver<Item>, StageIo) {
        let (in_tx, in_rx) = mpsc::channel(4);
        let (out_tx, out_rx) = mpsc::channel(4);
        (in_tx, out_rx, StageIo::new(in_rx, Output::new(out_tx)))
    }

    pub fn data(n: usize) -> Item {
        Item::data(Instant::now(), bytes::Bytes::from(vec![b'x'; n]))
    }

    /// Runs `kind`'s stage on `io` in a task; returns the stop token.
    pub fn spawn(
        kind: FaultKind,
        ctx: StageCtx,
        mut io: StageIo,
    ) -> tokio_util::sync::CancellationToken {
        let stop = io.stop.clone();
        tokio::spawn(async move {
            if let Some(f) = kind.stage(ctx, &mut io) {
                f.await;
            }
        });
        stop
    }

    /// Parses `key=value` pairs into a spec, as `--fault` would.
    pub fn spec(kind: &str, pairs: &[(&str, &str)]) -> Result<FaultSpec, ProfileError> {
        let mut all = vec![("type".to_string(), kind.to_string())];
        all.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        parse_fault(Fields::from_pairs("fault", "test", all))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn every_kind_is_registered_once() {
        let mut names: Vec<_> = KINDS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len());
    }

    #[test]
    fn unknown_type_suggests() {
        let e = spec("latncy", &[]).unwrap_err();
        assert!(e.message.contains("did you mean \"latency\""), "{e}");
    }

    #[test]
    fn shared_settings() {
        let s = spec(
            "latency",
            &[
                ("delay", "10ms"),
                ("probability", "0.5"),
                ("stream", "both"),
                ("active", "1s..2s"),
            ],
        )
        .unwrap();
        assert_eq!(s.probability, 0.5);
        assert_eq!(s.stream, Stream::Both);
        assert_eq!(s.active.start, Some(Duration::from_secs(1)));
        let e = spec("latency", &[("delay", "10ms"), ("probability", "2")]).unwrap_err();
        assert_eq!(
            e.message,
            "latency.probability: expected a number from 0 to 1, got \"2\""
        );
        let e = spec("latency", &[("delay", "10ms"), ("stream", "sideways")]).unwrap_err();
        assert!(
            e.message
                .contains("expected one of \"upstream\", \"downstream\" or \"both\""),
            "{e}"
        );
    }

    #[test]
    fn trigger_needs_one_of_two() {
        let e = spec("reset", &[("after_bytes", "1"), ("after", "1s")]).unwrap_err();
        assert!(e.message.contains("either after_bytes or after"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn pass_until_splits_at_the_byte_mark() {
        let (tx, mut rx, mut io) = channels();
        let c = ctx(Window::ALWAYS);
        let task =
            tokio::spawn(async move { pass_until(Trigger::Bytes(10), &c, &mut io).await.unwrap() });
        tx.send(data(6)).await.unwrap();
        tx.send(data(6)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 6);
        assert_eq!(rx.recv().await.unwrap().len(), 4);
        let Until::Fired(Some(rest)) = task.await.unwrap() else {
            panic!("did not fire")
        };
        assert_eq!(rest.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn pass_until_outside_window_never_fires() {
        let (tx, mut rx, mut io) = channels();
        let c = ctx(Window::parse("1h..").unwrap());
        let task =
            tokio::spawn(async move { pass_until(Trigger::Bytes(1), &c, &mut io).await.unwrap() });
        tx.send(data(100)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 100);
        drop(tx);
        assert_eq!(task.await.unwrap(), Until::Ended);
    }
}
