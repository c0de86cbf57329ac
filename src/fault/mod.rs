//! The fault interface and the registry of fault kinds.
//!
//! A fault is parsed once from a profile, a `--fault` flag or the API into a
//! [`FaultSpec`]: its kind-specific parameters plus the settings every fault
//! shares (`probability`, `stream`, `active`). Each kind lives in its own
//! file, implements [`Kind`] — its name, [`Layer`], default stream and
//! parameters, its parser, and (stream faults) its pipeline *stage* — and is
//! registered with one line of [`registry!`]. A stage is an async task that
//! receives [`Item`]s (byte chunks stamped with their arrival time, FIN,
//! RST) and passes them on — later, sliced, held, or replaced; it knows
//! nothing about sockets.
//!
//! Connect-layer faults (`refuse`, `connect_timeout`, `connect_delay`) act on
//! the client's SYN, decided by [`connect`] (pure: the caller brings the
//! clock), and packet-layer ones (`loss`, `blackout`, `packet_latency`,
//! `packet_rate`, the last two and bursty `loss` through [`path`]) on the
//! packets of the flow; both need interception (`netchaos run`, `attach`,
//! `--in-place`), whose SYN gate and nftables table carry them out.
//! HTTP-layer ones act on each request in [`crate::http`], DNS-layer ones
//! on the namespace's queries in its DNS forwarder ([`crate::dns`]): each
//! through its kind's hook ([`Kind::on_request`], [`Kind::on_query`]),
//! which says what it does as an [`acts`] value, so those layers never
//! match on the kinds. The TLS-layer one (`tls_error`) acts on the
//! handshakes netchaos terminates, once per connection.

pub(crate) mod acts;
pub(crate) mod connect;
pub(crate) mod dns_match;
pub(crate) mod http_match;
pub(crate) mod http_reply;
pub(crate) mod json_edit;
pub(crate) mod path;
pub(crate) mod stage;
pub(crate) mod trigger;

pub(crate) use stage::{Gone, Item, ItemKind, Next, Output, StageIo};
pub(crate) use trigger::{Trigger, Until, parse_trigger, pass_until};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::settings::{Fields, ProfileError, closest, quoted_list};
use crate::units::Window;

/// Which bytes of a connection a fault acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    /// Client → server.
    Upstream,
    /// Server → client.
    Downstream,
    Both,
}

impl Stream {
    pub(crate) fn includes(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Stream::Both, _)
                | (Stream::Upstream, Direction::Upstream)
                | (Stream::Downstream, Direction::Downstream)
        )
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
            Stream::Both => "both",
        }
    }
}

/// One direction of a relayed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    Upstream,
    Downstream,
}

impl Direction {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Direction::Upstream => "upstream",
            Direction::Downstream => "downstream",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Direction::Upstream => 0,
            Direction::Downstream => 1,
        }
    }
}

/// The layers of the fault model: where a fault acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layer {
    /// On the client's SYN: `connect()` itself is what fails or waits.
    Connect,
    /// On a direction's bytes, in the relay.
    Stream,
    /// On the flow's packets, in the kernel.
    Packet,
    /// On each HTTP request and its response (keep-alive connections
    /// included; HTTPS through the run's CA).
    Http,
    /// On the client's TLS handshake, once per connection (HTTPS that
    /// netchaos terminates).
    Tls,
    /// On each DNS query of the namespace (UDP and TCP port 53), in the
    /// forwarder: resolution fails, waits or answers wrongly.
    Dns,
}

impl Layer {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Layer::Connect => "connect",
            Layer::Stream => "stream",
            Layer::Packet => "packet",
            Layer::Http => "http",
            Layer::Tls => "tls",
            Layer::Dns => "dns",
        }
    }

    /// Whether the layer needs interception (the SYN gate, the namespace's
    /// packet rules): explicit proxies cannot apply it.
    pub(crate) fn needs_interception(self) -> bool {
        matches!(self, Layer::Connect | Layer::Packet | Layer::Dns)
    }

    /// What the layer acts on, for messages.
    pub(crate) fn acts_on(self) -> &'static str {
        match self {
            Layer::Connect => "the SYN",
            Layer::Stream => "the bytes",
            Layer::Packet => "packets",
            Layer::Http => "HTTP requests",
            Layer::Tls => "TLS handshakes netchaos terminates",
            Layer::Dns => "DNS queries",
        }
    }
}

/// Where a stage records that its fault took effect (the caller's event
/// log and counters): once per connection and direction.
pub(crate) trait Hit: Send + Sync {
    fn fire(&mut self);
}

/// What a stage knows about its connection and its moment in time.
pub(crate) struct StageCtx {
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
    pub hit: Box<dyn Hit>,
    /// Packet-level control of this connection's flow, where there is one
    /// (interception).
    pub partition: Option<Arc<dyn Partition>>,
}

/// Packet-level control of one connection's flow.
pub(crate) trait Partition: Send + Sync {
    /// Drops every packet of the flow for `duration` (`None`: for good).
    fn blackout(
        &self,
        duration: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<(), PartitionError>> + Send + '_>>;
}

/// Why a partition could not start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PartitionError(pub String);

impl StageCtx {
    /// Whether the fault may act at `now`.
    pub(crate) fn active_at(&self, now: Instant) -> bool {
        self.window
            .contains(now.saturating_duration_since(self.epoch))
    }

    /// When the window closes, if it does.
    pub(crate) fn window_end(&self) -> Option<Instant> {
        self.window.end.map(|e| self.epoch + e)
    }

    /// When a hold of `duration` starting now ends (`None`: forever), and
    /// at the latest when the fault's window closes.
    pub(crate) fn hold_end(&self, duration: Option<std::time::Duration>) -> Option<Instant> {
        let end = duration.map(|d| Instant::now() + d);
        match (end, self.window_end()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the window opens (`epoch` for an open start).
    pub(crate) fn window_start(&self) -> Instant {
        self.epoch + self.window.start.unwrap_or_default()
    }
}

pub(crate) type StageFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a fault kind declares about itself, once, in its own file.
#[derive(Debug)]
pub(crate) struct KindInfo {
    pub name: &'static str,
    pub layer: Layer,
    pub default_stream: Stream,
    /// Whether `stream` means anything for it (not for connect faults, nor
    /// `respond`, which replaces the whole connection).
    pub streamed: bool,
    /// Whether it runs as a stage on a direction's bytes ([`Kind::stage`]).
    pub stages: bool,
    pub about: &'static str,
    /// Its own parameters: `(name, form and default, meaning)`.
    pub params: &'static [(&'static str, &'static str, &'static str)],
}

impl KindInfo {
    /// Whether it acts on each HTTP request (drawn per request, with the
    /// request-matching parameters), not once per connection.
    pub(crate) fn per_request(&self) -> bool {
        self.layer == Layer::Http
    }

    /// Whether it needs the connection through the HTTP layer (HTTP
    /// parsed, or TLS terminated).
    pub(crate) fn needs_http_layer(&self) -> bool {
        matches!(self.layer, Layer::Http | Layer::Tls)
    }
}

/// One fault kind: its declaration, parser, parameters and behaviour.
pub(crate) trait Kind: Sized {
    const INFO: KindInfo;

    /// Reads the kind's own parameters (the shared ones are read already).
    fn parse(f: &mut Fields) -> Result<Self, ProfileError>;

    /// Its parameters, resolved, as `key = value` text (for `check`, the
    /// event log and the summary).
    fn params(&self) -> Vec<(&'static str, String)>;

    /// Its parameters that name something (a header, a query parameter),
    /// as (key, name, value): shown as `key.name=value`, the form flags
    /// take, so that repeats of a key stay apart.
    fn named_params(&self) -> Vec<(&'static str, String, String)> {
        Vec::new()
    }

    /// The stage acting on one direction's bytes; `None` for kinds that do
    /// not act on bytes in the relay.
    fn stage<'a>(&self, _ctx: StageCtx, _io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        None
    }

    /// The HTTP layer's hook: which requests it matches (HTTP kinds).
    fn request_match(&self) -> Option<&http_match::RequestMatch> {
        None
    }

    /// The HTTP layer's hook: what it does to a request (`host`, `path`)
    /// it matched and was drawn for, `rng` that request's own draws.
    fn on_request(
        &self,
        _rng: &mut ChaCha8Rng,
        _host: Option<&str>,
        _path: &str,
    ) -> Option<acts::HttpAct> {
        None
    }

    /// The DNS layer's hook: what it does to a query (`q`; `udp`: it came
    /// over UDP), if it matches it; `rng` the fault's own draws.
    fn on_query(
        &self,
        _q: &dns_match::QueryView<'_>,
        _udp: bool,
        _rng: &mut ChaCha8Rng,
    ) -> Option<acts::DnsAct> {
        None
    }
}

/// Declares the fault kinds: each `module: Kind ...;` line adds the module
/// and, for each kind type it holds, a variant of [`FaultKind`] of the same
/// name and an entry of [`KINDS`]. A new kind is a new file and a line here.
macro_rules! registry {
    ($($module:ident: $($kind:ident)+;)*) => {
        $(pub(crate) mod $module;)*

        /// A fault's kind-specific settings, after validation.
        #[derive(Debug, Clone)]
        pub(crate) enum FaultKind {
            $($($kind($module::$kind),)+)*
        }

        /// Every fault kind netchaos knows, in the order the docs list them.
        pub(crate) const KINDS: &[&KindInfo] = &[$($(&<$module::$kind as Kind>::INFO,)+)*];

        impl FaultKind {
            pub(crate) fn info(&self) -> &'static KindInfo {
                match self {
                    $($(FaultKind::$kind(_) => &<$module::$kind as Kind>::INFO,)+)*
                }
            }

            pub(crate) fn params(&self) -> Vec<(&'static str, String)> {
                match self {
                    $($(FaultKind::$kind(x) => x.params(),)+)*
                }
            }

            fn named_params(&self) -> Vec<(&'static str, String, String)> {
                match self {
                    $($(FaultKind::$kind(x) => x.named_params(),)+)*
                }
            }

            /// The pipeline stage for one direction, or `None` when the
            /// kind does not act on a direction's bytes.
            pub(crate) fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
                match self {
                    $($(FaultKind::$kind(x) => x.stage(ctx, io),)+)*
                }
            }

            /// The HTTP layer's hook ([`Kind::request_match`]).
            pub(crate) fn request_match(&self) -> Option<&http_match::RequestMatch> {
                match self {
                    $($(FaultKind::$kind(x) => x.request_match(),)+)*
                }
            }

            /// The HTTP layer's hook ([`Kind::on_request`]).
            pub(crate) fn on_request(
                &self,
                rng: &mut ChaCha8Rng,
                host: Option<&str>,
                path: &str,
            ) -> Option<acts::HttpAct> {
                match self {
                    $($(FaultKind::$kind(x) => x.on_request(rng, host, path),)+)*
                }
            }

            /// The DNS layer's hook ([`Kind::on_query`]).
            pub(crate) fn on_query(
                &self,
                q: &dns_match::QueryView<'_>,
                udp: bool,
                rng: &mut ChaCha8Rng,
            ) -> Option<acts::DnsAct> {
                match self {
                    $($(FaultKind::$kind(x) => x.on_query(q, udp, rng),)+)*
                }
            }

            fn parse_named(name: &str, f: &mut Fields) -> Option<Result<FaultKind, ProfileError>> {
                $($(if name == <$module::$kind as Kind>::INFO.name {
                    return Some(<$module::$kind as Kind>::parse(f).map(FaultKind::$kind));
                })+)*
                None
            }
        }
    };
}

registry! {
    latency: Latency;
    bandwidth: Bandwidth;
    slicer: Slicer;
    stall: Stall;
    cut: Reset Close;
    slow_close: SlowClose;
    timeout: Timeout;
    reset_peer: ResetPeer;
    limit_data: LimitData;
    corrupt: Corrupt;
    respond: Respond;
    refuse: Refuse;
    connect_timeout: ConnectTimeout;
    connect_delay: ConnectDelay;
    loss: Loss;
    blackout: Blackout;
    packet_latency: PacketLatency;
    packet_rate: PacketRate;
    http_status: HttpStatus;
    http_delay: HttpDelay;
    sse: Sse;
    http_truncate: HttpTruncate;
    http_abort: HttpAbort;
    http_rewrite: HttpRewrite;
    tls_error: TlsError;
    dns_timeout: DnsTimeout;
    dns_error: DnsError;
    dns_delay: DnsDelay;
    dns_answer: DnsAnswer;
    dns_truncate: DnsTruncate;
}

impl FaultKind {
    pub(crate) fn name(&self) -> &'static str {
        self.info().name
    }

    /// A `dns_answer random = true`: it sends clients to ranges that
    /// interception must black-hole ([`dns_answer::UNROUTED`]).
    pub(crate) fn answers_unrouted(&self) -> bool {
        matches!(self, FaultKind::DnsAnswer(a) if a.is_random())
    }

    pub(crate) fn layer(&self) -> Layer {
        self.info().layer
    }

    /// Whether the kind runs as a pipeline stage on a direction's bytes.
    pub(crate) fn has_stage(&self) -> bool {
        self.info().stages
    }

    /// Whether an HTTP or TLS fault names the hosts it acts on (its
    /// `host`), which also keeps TLS to other servers from being
    /// terminated for it.
    pub(crate) fn names_hosts(&self) -> bool {
        match self {
            FaultKind::TlsError(t) => t.names_host(),
            k => k.request_match().is_some_and(|m| m.names_host()),
        }
    }
}

/// A fault chosen for one connection.
#[derive(Clone, Debug)]
pub(crate) struct Chosen {
    /// The fault's identity on this connection (rule and fault), stable
    /// across updates of its parameters.
    pub id: u64,
    pub rule: Arc<str>,
    pub spec: Arc<FaultSpec>,
    /// Seed for the fault's own random choices on this connection (jitter,
    /// slice sizes), split per direction by [`Chosen::rng`].
    pub seed: u64,
}

impl Chosen {
    /// The random source for the `n`th request (0, 1, …) of this fault's
    /// connection, and whether its `probability` draw picks that request:
    /// a pure function of (seed, rule, fault, connection, request number).
    pub(crate) fn request_draw(&self, n: u64) -> (bool, ChaCha8Rng) {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        // Streams 0 and 1 are the directions'.
        rng.set_stream(2 + n);
        let u: f64 = rng.random();
        (u < self.spec.probability, rng)
    }

    /// The random source for one direction of this fault.
    pub(crate) fn rng(&self, dir: Direction) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(dir.index() as u64);
        rng
    }
}

/// A validated fault: kind, parameters and the shared settings.
#[derive(Debug, Clone)]
pub(crate) struct FaultSpec {
    pub kind: FaultKind,
    /// Share of matching connections that get the fault, decided once per
    /// connection (per request, for HTTP faults).
    pub probability: f64,
    pub stream: Stream,
    pub active: Window,
}

impl FaultSpec {
    pub(crate) fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// All parameters, the shared ones included, as `key = value` text;
    /// one that names something under `key.name` (each key once).
    pub(crate) fn all_params(&self) -> Vec<(String, String)> {
        let mut p = self.kind_params();
        if self.probability < 1.0 {
            p.push(("probability".into(), format!("{}", self.probability)));
        }
        if self.kind.info().streamed {
            p.push(("stream".into(), self.stream.as_str().to_string()));
        }
        if self.active != Window::ALWAYS {
            p.push(("active".into(), self.active.to_string()));
        }
        p
    }

    /// The kind's own parameters, as [`FaultSpec::all_params`] shows them.
    pub(crate) fn kind_params(&self) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = self
            .kind
            .params()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let named = self.kind.named_params().into_iter().chain(
            self.kind
                .request_match()
                .map(|m| m.named_params())
                .unwrap_or_default(),
        );
        p.extend(named.map(|(k, n, v)| (format!("{k}.{n}"), v)));
        p
    }
}

/// As a `--fault` flag would give it: `netchaos check` prints what can be
/// pasted back. A value that would not survive the flag's splitting
/// (a comma or quote, spaces at its ends, a control character) is
/// double-quoted, with escapes.
impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let params = self.all_params();
        for (i, (k, v)) in params.iter().enumerate() {
            write!(f, "{}{k}={}", if i == 0 { ":" } else { "," }, flag_value(v))?;
        }
        Ok(())
    }
}

/// `v` as a `--fault` value: as it is, or double-quoted with escapes.
/// A JSON object or array is left bare (its commas do not split a flag).
fn flag_value(v: &str) -> std::borrow::Cow<'_, str> {
    let json = (v.starts_with('{') || v.starts_with('['))
        && serde_json::from_str::<serde_json::Value>(v).is_ok();
    // Brackets that do not pair up would stop a flag's JSON values from
    // holding their commas.
    let mut depth = 0i32;
    let paired = v.chars().all(|c| {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            _ => {}
        }
        depth >= 0
    }) && depth == 0;
    let plain = !v.is_empty()
        && v.trim() == v
        && !v.chars().any(char::is_control)
        && (json || (paired && !v.contains([',', '"', '\\'])));
    if plain {
        return v.into();
    }
    let mut out = String::from('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out.into()
}

/// Reads one fault table: `type`, the shared settings, then the kind's own
/// parameters; any key left over is an error.
pub(crate) fn parse_fault(mut f: Fields) -> Result<FaultSpec, ProfileError> {
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
        // For a kind that `stream` means nothing to, its own default: the
        // same fault whether or not the profile or flag named one.
        _ if !info.streamed => info.default_stream,
        Some("upstream") => Stream::Upstream,
        Some("both") => Stream::Both,
        Some(_) => Stream::Downstream,
        None => info.default_stream,
    };
    let active = f.window("active")?.unwrap_or(Window::ALWAYS);
    let kind = FaultKind::parse_named(info.name, &mut f).expect("a registered kind")?;
    f.finish()?;
    Ok(FaultSpec {
        kind,
        probability,
        stream,
        active,
    })
}

/// The registered kind of that name (`-` read as `_`).
pub(crate) fn find_kind(name: &str) -> Option<&'static KindInfo> {
    let name = name.trim().replace('-', "_");
    KINDS.iter().find(|k| k.name == name).copied()
}

#[cfg(test)]
pub(crate) mod testing {
    //! A harness that runs one stage on a paused clock.
    use super::*;
    use rand::SeedableRng;

    /// A hit recorded nowhere.
    pub(crate) struct NoHit;

    impl Hit for NoHit {
        fn fire(&mut self) {}
    }

    pub(crate) fn ctx(window: Window) -> StageCtx {
        let now = Instant::now();
        StageCtx {
            dir: Direction::Downstream,
            rng: ChaCha8Rng::seed_from_u64(1),
            window,
            epoch: now,
            opened: now,
            hit: Box::new(NoHit),
            partition: None,
        }
    }

    use tokio::sync::mpsc;

    /// Input sender, output receiver, and the stage's channels.
    pub(crate) fn channels() -> (mpsc::Sender<Item>, mpsc::Receiver<Item>, StageIo) {
        let (in_tx, in_rx) = mpsc::channel(4);
        let (out_tx, out_rx) = mpsc::channel(4);
        (in_tx, out_rx, StageIo::new(in_rx, Output::new(out_tx)))
    }

    pub(crate) fn data(n: usize) -> Item {
        Item::data(Instant::now(), bytes::Bytes::from(vec![b'x'; n]))
    }

    /// Runs `kind`'s stage on `io` in a task; returns the stop token.
    pub(crate) fn spawn(
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
    pub(crate) fn spec(kind: &str, pairs: &[(&str, &str)]) -> Result<FaultSpec, ProfileError> {
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
        crate::timer::runtime_clock_only();
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
        crate::timer::runtime_clock_only();
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
