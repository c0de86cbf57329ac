//! The record of what happened: the JSON-lines event log (`--events`), the
//! counters behind the exit summary and `/metrics`, and [`FaultHit`], the
//! handle a fault stage uses to say "I acted on this connection".
//!
//! Every injected fault is recorded once per connection and direction, at
//! the moment it first takes effect (a stall that never triggers is not
//! counted), with time, connection id, client, destination, rule and
//! parameters — fidelity rule 5 in docs/architecture.md.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use std::borrow::Cow;

use crate::fault::{Direction, FaultSpec};

pub(crate) mod schema;

use schema::{Event, Line};
pub(crate) use schema::{Outcome, RelayPath};

/// Who a connection is: what the event lines and logs name.
#[derive(Debug)]
pub(crate) struct ConnInfo {
    pub id: u64,
    pub client: SocketAddr,
    /// The destination as dialled (`ip:port`), or as configured before it
    /// resolved.
    pub dst: Dst,
    /// The name the destination was known by, when there is one.
    pub host: Option<String>,
    /// The proxy (or rule set) the connection came through.
    pub proxy: Option<Arc<str>>,
    /// That proxy's counters.
    pub counters: Arc<ProxyStats>,
    /// The (rule, fault) pairs already counted for this connection: the
    /// summary counts connections faulted, not hits per direction.
    pub faulted: Mutex<Vec<(Arc<str>, &'static str)>>,
    /// When its phases began, for the close line (and the report).
    pub marks: Marks,
    /// The API of the built-in mock that answers it in the upstream's
    /// place (`--mock`): every line of it says so.
    pub mock: Option<&'static str>,
}

/// A connection's destination: an address, formatted only when a line
/// names it (per connection, the formatting cost more than the relay's own
/// work), or a label where there is no address.
#[derive(Debug, Clone)]
pub(crate) enum Dst {
    Addr(SocketAddr),
    Label(String),
}

impl std::fmt::Display for Dst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dst::Addr(a) => a.fmt(f),
            Dst::Label(l) => f.write_str(l),
        }
    }
}

/// When a connection's phases began: its upstream connected, its first
/// byte delivered each way. Each is set once; after that a check costs one
/// load, so the per-chunk meter can afford it. And the bytes it delivered
/// each way, counted where the summary's are (its close line says them,
/// however the connection ended).
#[derive(Debug, Default)]
pub(crate) struct Marks {
    /// Bytes delivered, indexed by [`Direction::index`].
    bytes: [AtomicU64; 2],
    /// When the SYN gate got the SYN (under interception; before the open).
    syn: std::sync::OnceLock<Instant>,
    dialled: std::sync::OnceLock<Instant>,
    first: [std::sync::OnceLock<Instant>; 2],
    /// Bytes delivered over time, made at the first byte (an idle
    /// connection carries none of it).
    activity: std::sync::OnceLock<Box<Mutex<Activity>>>,
}

/// Bytes delivered each way in time buckets from the first byte: at most
/// [`Activity::BUCKETS`] per direction, each twice as long whenever the
/// connection outlives them — coarse, bounded (about 0.3 KiB), and one
/// uncontended lock per chunk.
#[derive(Debug)]
struct Activity {
    start: Instant,
    bucket: Duration,
    bytes: [[u64; Activity::BUCKETS]; 2],
}

impl Activity {
    const BUCKETS: usize = 16;
    const FIRST_BUCKET: Duration = Duration::from_millis(10);

    fn add(&mut self, dir: Direction, n: u64) {
        let mut i = (self.start.elapsed().as_nanos() / self.bucket.as_nanos().max(1)) as usize;
        while i >= Self::BUCKETS {
            // Twice as coarse: pairs merge into the first half.
            for b in &mut self.bytes {
                for k in 0..Self::BUCKETS / 2 {
                    b[k] = b[2 * k] + b[2 * k + 1];
                }
                b[Self::BUCKETS / 2..].iter_mut().for_each(|x| *x = 0);
            }
            self.bucket *= 2;
            i /= 2;
        }
        self.bytes[dir.index()][i] += n;
    }
}

impl Marks {
    /// The SYN gate held the client's SYN from `at`.
    pub(crate) fn syn(&self, at: Instant) {
        let _ = self.syn.set(at);
    }

    /// The upstream is connected (or was, when the SYN gate dialled it).
    pub(crate) fn dialled(&self) {
        let _ = self.dialled.set(Instant::now());
    }

    /// `n` bytes were delivered in `dir`.
    fn delivered(&self, dir: Direction, n: u64) {
        self.bytes[dir.index()].fetch_add(n, Ordering::Relaxed);
        let cell = &self.first[dir.index()];
        if cell.get().is_none() {
            let _ = cell.set(Instant::now());
        }
        let a = self.activity.get_or_init(|| {
            Box::new(Mutex::new(Activity {
                start: Instant::now(),
                bucket: Activity::FIRST_BUCKET,
                bytes: [[0; Activity::BUCKETS]; 2],
            }))
        });
        a.lock().expect("activity lock").add(dir, n);
    }

    /// The marks as milliseconds after the connection opened, `lived`
    /// ago, into its close line: `dial_ms`, `first_byte_upstream_ms`,
    /// `first_byte_downstream_ms`; `syn_ms`, how long before the open the
    /// SYN came; the bytes over time.
    fn fill(&self, lived: Duration, close: &mut schema::Close<'_>) {
        let at = |i: &Instant| ms(lived.saturating_sub(i.elapsed()));
        close.syn_ms = self
            .syn
            .get()
            .map(|i| ms(i.elapsed().saturating_sub(lived)));
        close.dial_ms = self.dialled.get().map(at);
        close.first_byte_upstream_ms = self.first[Direction::Upstream.index()].get().map(at);
        close.first_byte_downstream_ms = self.first[Direction::Downstream.index()].get().map(at);
        close.activity = self.activity.get().map(|a| {
            let a = a.lock().expect("activity lock");
            let trimmed = |b: &[u64]| {
                let end = b.iter().rposition(|x| *x > 0).map_or(0, |p| p + 1);
                b[..end].to_vec()
            };
            schema::Activity {
                start_ms: at(&a.start),
                bucket_ms: a.bucket.as_secs_f64() * 1e3,
                upstream: trimmed(&a.bytes[0]),
                downstream: trimmed(&a.bytes[1]),
            }
        });
    }
}

/// A duration as the log writes every `*_ms`: milliseconds to the
/// microsecond.
pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// An HTTP fault as counted: its kind, the status answered (0: none), the
/// gRPC status a call was ended with (if one was).
pub(crate) type HttpFaultKey = (&'static str, u16, Option<u32>);

/// Counters of one proxy (an explicit listener, or the transparent
/// interception of `run`).
#[derive(Default, Debug)]
pub(crate) struct ProxyStats {
    pub open: AtomicU64,
    pub total: AtomicU64,
    /// Bytes delivered, indexed by [`Direction::index`].
    pub bytes: [AtomicU64; 2],
    /// Bytes read from the direction's source.
    pub received: [AtomicU64; 2],
    /// What Toxiproxy's metrics label the proxy with: its listen address
    /// and upstream (set by the control API).
    pub labels: Mutex<Option<(String, String)>>,
}

/// Where a direction counts the bytes it delivers: the totals and its
/// proxy's.
pub(crate) struct Meter<'a> {
    pub global: &'a Stats,
    pub proxy: &'a ProxyStats,
    /// The connection's phase marks (its first byte each way).
    pub marks: &'a Marks,
}

/// Counters of their own for a direction run in a test: `meter()` counts
/// into them.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestCounters {
    stats: Stats,
    proxy: ProxyStats,
    marks: Marks,
}

#[cfg(test)]
impl TestCounters {
    pub(crate) fn meter(&self) -> Meter<'_> {
        Meter {
            global: &self.stats,
            proxy: &self.proxy,
            marks: &self.marks,
        }
    }
}

impl Meter<'_> {
    /// Bytes delivered.
    pub(crate) fn add(&self, dir: Direction, n: u64) {
        self.global.bytes[dir.index()].fetch_add(n, Ordering::Relaxed);
        self.proxy.bytes[dir.index()].fetch_add(n, Ordering::Relaxed);
        if n > 0 {
            self.marks.delivered(dir, n);
        }
    }

    /// Bytes read from the direction's source.
    pub(crate) fn read(&self, dir: Direction, n: u64) {
        self.proxy.received[dir.index()].fetch_add(n, Ordering::Relaxed);
    }
}

/// Counters shared by the summary and `/metrics`.
#[derive(Default)]
pub(crate) struct Stats {
    pub conns_total: AtomicU64,
    pub conns_open: AtomicU64,
    /// Bytes delivered, indexed by [`Direction::index`].
    pub bytes: [AtomicU64; 2],
    /// Faults injected, by (rule, kind).
    pub faults: Mutex<BTreeMap<(String, &'static str), FaultCount>>,
    /// Relay errors by kind (`dial_refused`, `dial_timeout`, …).
    pub errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Counters per proxy.
    pub proxies: Mutex<BTreeMap<String, Arc<ProxyStats>>>,
    /// Times a listener stopped listening, by reason (`limit`,
    /// `resources`).
    pub pauses: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections refused at the SYN because of the limit.
    pub refused_at_limit: AtomicU64,
    /// Connection attempts the client gave up before its handshake
    /// completed ([`Outcome::Abandoned`]).
    pub abandoned: AtomicU64,
    /// DNS queries the forwarder did not forward, by [`DnsRefusal`].
    pub dns_refused: [AtomicU64; 2],
    /// HTTP requests the HTTP layer followed.
    pub http_requests: AtomicU64,
    /// HTTP/2 upstream connections dialled again after their GOAWAY.
    pub upstream_redials: AtomicU64,
    /// Answers the built-in mock gave in an upstream's place (`--mock`),
    /// and how many of them were the API's own refusals (4xx).
    pub mock_answers: AtomicU64,
    pub mock_refusals: AtomicU64,
    /// Requests at least one HTTP fault acted on.
    pub http_faulted_requests: AtomicU64,
    /// HTTP faults applied, by (kind, status answered: 0 when none was,
    /// the gRPC status a call was ended with, if one was).
    pub http_faulted: Mutex<BTreeMap<HttpFaultKey, u64>>,
    /// DNS queries the DNS layer saw (retransmissions not counted).
    pub dns_queries: AtomicU64,
    /// DNS faults applied, by kind.
    pub dns_faulted: Mutex<BTreeMap<&'static str, u64>>,
    /// Connections by the path their bytes took (`splice`: the fast path,
    /// `pipeline`, `http`, `https`).
    pub paths: Mutex<BTreeMap<&'static str, u64>>,
    /// Destinations whose clients refused the run's certificate (they pin
    /// a CA of their own), as many as are relayed untouched (bounded so).
    pub pinned: Mutex<BTreeMap<String, PinnedCount>>,
    /// Event lines that could not be written (a full disk, `/dev/full`) or
    /// found the writer's queue full.
    pub log_errors: Arc<AtomicU64>,
    /// Event lines not written because the log reached its size
    /// (`--events-max`): counted only.
    pub log_dropped: Arc<AtomicU64>,
}

/// A destination whose clients refused the run's certificate.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PinnedCount {
    /// Connections whose handshake failed so (before the first refusal
    /// was known, more than one may have).
    pub refused: u64,
    /// Connections relayed untouched after it.
    pub passed: u64,
    /// The alert the first refusal came with.
    pub alert: Option<rustls::AlertDescription>,
}

/// What a user can do about a client that refused the run's certificate
/// at `dest`.
pub(crate) fn pinned_advice(dest: &str) -> String {
    format!(
        "the client trusts a CA of its own, not in a store netchaos covers (one pinned in code): \
         to fault its requests, have netchaos sign with that CA (--tls-ca FILE --tls-key FILE; \
         and --upstream-ca FILE if the upstream's certificate is from it too), or add the run's CA \
         to the client's (--tls-ca-out FILE); or scope the rule (match.dst, match.ports, a fault's \
         host) so that {dest} is not intercepted. Its later connections to {dest} are relayed \
         untouched"
    )
}

/// How often one fault of one rule took effect.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FaultCount {
    /// Every time (once per connection and direction; per HTTP request or
    /// DNS query).
    pub hits: u64,
    /// What it acted on, counted in `unit`s.
    pub units: u64,
    pub unit: Unit,
    /// Connections it acted on in each direction ([`Direction::index`]).
    pub dirs: [u64; 2],
}

/// What a fault's count counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    #[default]
    Connection,
    /// HTTP faults act per request.
    Request,
    /// DNS faults act per query.
    Query,
}

impl Unit {
    fn name(self, n: u64) -> &'static str {
        match (self, n) {
            (Unit::Connection, 1) => "connection",
            (Unit::Connection, _) => "connections",
            (Unit::Request, 1) => "request",
            (Unit::Request, _) => "requests",
            (Unit::Query, 1) => "query",
            (Unit::Query, _) => "queries",
        }
    }
}

/// A fault's parameters as the event log writes them.
fn params_of(spec: &FaultSpec) -> schema::Params<'static> {
    spec.all_params()
        .into_iter()
        .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v)))
        .collect()
}

/// Why the DNS forwarder dropped a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DnsRefusal {
    /// Not a well-formed standard query (junk, a response, …).
    Malformed = 0,
    /// Too many queries in flight already.
    Busy = 1,
}

impl DnsRefusal {
    pub(crate) const ALL: [DnsRefusal; 2] = [DnsRefusal::Malformed, DnsRefusal::Busy];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DnsRefusal::Malformed => "malformed",
            DnsRefusal::Busy => "busy",
        }
    }
}

impl Stats {
    /// Labels proxy `name`'s counters with its listen address and upstream.
    pub(crate) fn label_proxy(&self, name: &str, listen: &str, upstream: &str) {
        *self.proxy(name).labels.lock().expect("stats lock") =
            Some((listen.to_string(), upstream.to_string()));
    }

    /// Drops deleted proxy `name`'s counters, so that an API creating and
    /// deleting proxies by new names (a test suite's, per test) does not
    /// grow the series for ever; a connection still open keeps counting
    /// into its own copy, unseen. A proxy made again by that name starts
    /// from 0, which Prometheus reads as a counter reset.
    pub(crate) fn forget_proxy(&self, name: &str) {
        self.proxies.lock().expect("stats lock").remove(name);
    }

    /// The counters of proxy `name` (made on first use).
    pub(crate) fn proxy(&self, name: &str) -> Arc<ProxyStats> {
        self.proxies
            .lock()
            .expect("stats lock")
            .entry(name.to_string())
            .or_default()
            .clone()
    }
}

/// The event log and the counters.
pub(crate) struct Events {
    started: Instant,
    log: Option<Log>,
    pub stats: Stats,
    /// Per-fault log lines at debug level (`-v` shows them): under `run`,
    /// where they would flood a wrapped test suite's output.
    quiet_faults: std::sync::atomic::AtomicBool,
    /// `--duration`: when the faults stop, for the summary.
    faults_end: Mutex<Option<Duration>>,
    /// `--stop-if`: the HTTP attempts that ended within its window (when
    /// each ended, and whether it failed).
    window: std::sync::OnceLock<(Duration, Mutex<Ended>)>,
    /// See [`Events::follow_http`].
    follow: std::sync::atomic::AtomicBool,
}

/// HTTP attempts as they ended: when, and whether each failed.
type Ended = std::collections::VecDeque<(Instant, bool)>;

/// Lets go of the attempts that ended more than `over` before `now`.
fn forget_before(w: &mut Ended, now: Instant, over: Duration) {
    while w
        .front()
        .is_some_and(|(t, _)| now.duration_since(*t) > over)
    {
        w.pop_front();
    }
}

/// Event lines waiting for the writer, at most.
const LOG_QUEUE: usize = 16 * 1024;

/// The event log's size by default (`--events-max`): about a million
/// connections' lines, and a report of it builds in bounded memory.
pub(crate) const DEFAULT_MAX: u64 = 256 << 20;

/// The event log's writer: a thread of its own, fed through a bounded
/// queue, so that no connection's task ever waits on the file (a slow disk,
/// `/dev/full`). A line that finds the queue full is counted, not waited for.
/// The thread starts with the first line: `run` must fork its namespace
/// agent before netchaos has any thread.
struct Log {
    state: Mutex<LogState>,
    errors: Arc<AtomicU64>,
    limit: Limit,
}

/// The log's size limit, shared by the writer (which enforces it) and
/// the senders (which stop formatting lines once it is reached).
#[derive(Clone)]
struct Limit {
    max: u64,
    /// The log reached `max`: its last line says so.
    full: Arc<std::sync::atomic::AtomicBool>,
    /// Lines not written since.
    dropped: Arc<AtomicU64>,
    /// The log's time 0, for the `truncated` line.
    started: Instant,
}

enum LogState {
    /// Opened; the writer starts with the first line.
    Opened(File),
    Writing {
        tx: SyncSender<String>,
        writer: std::thread::JoinHandle<()>,
    },
    Closed,
}

impl Log {
    fn new(file: File, errors: Arc<AtomicU64>, limit: Limit) -> Log {
        Log {
            state: Mutex::new(LogState::Opened(file)),
            errors,
            limit,
        }
    }

    /// Queues a line, starting the writer if it is the first.
    fn send(&self, line: String) -> bool {
        let mut state = self.state.lock().expect("event log lock");
        if let LogState::Opened(_) = &*state {
            let LogState::Opened(file) = std::mem::replace(&mut *state, LogState::Closed) else {
                unreachable!()
            };
            let (tx, rx) = sync_channel::<String>(LOG_QUEUE);
            let errors = self.errors.clone();
            let limit = self.limit.clone();
            match std::thread::Builder::new()
                .name("events".into())
                .spawn(move || write_lines(file, rx, errors, limit))
            {
                Ok(writer) => *state = LogState::Writing { tx, writer },
                Err(e) => tracing::warn!("cannot start the event log's writer: {e}"),
            }
        }
        match &*state {
            LogState::Writing { tx, .. } => tx.try_send(line).is_ok(),
            _ => false,
        }
    }

    /// Writes out what is queued and stops the writer.
    fn close(&self) {
        let state = std::mem::replace(
            &mut *self.state.lock().expect("event log lock"),
            LogState::Closed,
        );
        if let LogState::Writing { tx, writer } = state {
            drop(tx);
            let _ = writer.join();
        }
    }
}

/// The writer thread: lines until the queue closes, or until the log
/// reaches its size: then one `truncated` line, and every later line is
/// counted, not written.
fn write_lines(
    file: File,
    rx: std::sync::mpsc::Receiver<String>,
    errors: Arc<AtomicU64>,
    limit: Limit,
) {
    let mut w = BufWriter::new(file);
    let mut written = 0u64;
    let mut put = |w: &mut BufWriter<File>, line: &str| -> io::Result<()> {
        if limit.full.load(Ordering::Relaxed) {
            limit.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if written + line.len() as u64 > limit.max {
            limit.full.store(true, Ordering::Relaxed);
            limit.dropped.fetch_add(1, Ordering::Relaxed);
            let mut end = line_text(
                limit.started,
                Event::Truncated(schema::Truncated {
                    max_bytes: limit.max,
                    written_bytes: written,
                }),
            );
            end.push('\n');
            tracing::warn!(
                "the event log reached its size ({}, --events-max): later events are counted, not written",
                crate::units::format_size(limit.max)
            );
            return w.write_all(end.as_bytes());
        }
        written += line.len() as u64;
        w.write_all(line.as_bytes())
    };
    while let Ok(line) = rx.recv() {
        let mut batch = 1u64;
        let mut r = put(&mut w, &line);
        // Flush once the queue is empty: readers (and tests) see lines as
        // they happen, and a burst costs one write.
        while r.is_ok() {
            match rx.try_recv() {
                Ok(more) => {
                    batch += 1;
                    r = put(&mut w, &more);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = r.and_then(|()| w.flush()) {
            if errors.fetch_add(batch, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "cannot write the event log ({e}); lines that cannot be written are counted in the summary"
                );
            }
            // The batch is lost; start the next one afresh.
            w = BufWriter::new(w.into_parts().0);
        }
    }
}

impl Events {
    /// Events written to `file` (opened by the caller: see `outfile`), at
    /// most `max` bytes of them.
    pub(crate) fn to_file(file: File, max: u64) -> Events {
        let stats = Stats::default();
        let started = Instant::now();
        let limit = Limit {
            max,
            full: Default::default(),
            dropped: stats.log_dropped.clone(),
            started,
        };
        Events {
            started,
            log: Some(Log::new(file, stats.log_errors.clone(), limit)),
            stats,
            quiet_faults: Default::default(),
            faults_end: Mutex::new(None),
            window: Default::default(),
            follow: Default::default(),
        }
    }

    /// Events with no log file (the demo, tests).
    pub(crate) fn in_memory() -> Events {
        Events {
            started: Instant::now(),
            log: None,
            stats: Stats::default(),
            quiet_faults: Default::default(),
            faults_end: Mutex::new(None),
            window: Default::default(),
            follow: Default::default(),
        }
    }

    /// Whether lines are written at all (records are kept only then).
    pub(crate) fn logging(&self) -> bool {
        self.log.is_some()
    }

    /// Now, on the log's clock (`t`: seconds since netchaos started).
    pub(crate) fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// One HTTP attempt, as [`crate::http::attempt`] records it, and
    /// whether it failed (for `--stop-if`).
    pub(crate) fn attempt(&self, line: schema::Attempt<'_>, failed: bool) {
        if let Some((over, w)) = self.window.get() {
            let now = Instant::now();
            let mut w = w.lock().expect("window lock");
            forget_before(&mut w, now, *over);
            w.push_back((now, failed));
        }
        self.write(|| Event::Attempt(line));
    }

    /// Every HTTP connection is to be followed by the HTTP layer (and its
    /// attempts recorded), not only those with HTTP faults: `--records`,
    /// `--expect`, `--stop-if`.
    pub(crate) fn follow_http(&self) {
        self.follow.store(true, Ordering::Relaxed);
    }

    pub(crate) fn follows_http(&self) -> bool {
        self.follow.load(Ordering::Relaxed)
    }

    /// Keeps the attempts of the last `over` for [`Events::error_rate`].
    pub(crate) fn watch_errors(&self, over: Duration) {
        let _ = self.window.set((over, Mutex::default()));
    }

    /// The attempts that ended within the watched window, and how many of
    /// them failed.
    pub(crate) fn error_rate(&self) -> (usize, usize) {
        let Some((over, w)) = self.window.get() else {
            return (0, 0);
        };
        let mut w = w.lock().expect("window lock");
        forget_before(&mut w, Instant::now(), *over);
        (w.len(), w.iter().filter(|(_, f)| *f).count())
    }

    /// `--stop-if` crossed: the faults were removed.
    pub(crate) fn stopped_if(&self, condition: &str, attempts: usize, failed: usize) {
        self.write(|| {
            Event::StopIf(schema::StopIf {
                condition: condition.into(),
                attempts: attempts as u64,
                failed: failed as u64,
            })
        });
    }

    /// Queues one event line for the writer; its fields are built only
    /// when there is a log to write them to.
    fn write<'a>(&self, event: impl FnOnce() -> Event<'a>) {
        let Some(log) = &self.log else { return };
        if log.limit.full.load(Ordering::Relaxed) {
            log.limit.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut text = line_text(self.started, event());
        text.push('\n');
        if !log.send(text) {
            self.stats.log_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The faults stop `d` after the start (`--duration`).
    pub(crate) fn faults_end_at(&self, d: Duration) {
        *self.faults_end.lock().expect("stats lock") = Some(d);
        self.write(|| {
            Event::FaultsEnd(schema::FaultsEnd {
                at_ms: d.as_millis() as u64,
            })
        });
    }

    /// Per-fault log lines at debug level from now on (`-v` shows them).
    pub(crate) fn quiet_faults(&self) {
        self.quiet_faults.store(true, Ordering::Relaxed);
    }

    /// Writes out every queued line and closes the log (before the
    /// summary, which counts what was lost).
    pub(crate) fn close(&self) {
        if let Some(log) = &self.log {
            log.close();
        }
    }

    pub(crate) fn start(&self, seed: u64, what: &str) {
        self.write(|| {
            // `seed_str` too: a 64-bit number does not survive readers that
            // parse JSON numbers as doubles (jq, JavaScript, pandas), and a
            // replay from their copy would use another seed.
            Event::Start(schema::Start {
                seed,
                seed_str: seed.to_string().into(),
                version: env!("CARGO_PKG_VERSION").into(),
                mode: what.into(),
            })
        });
    }

    /// What the run was asked to do, once after `start`: netchaos's own
    /// command line, the profiles, and every rule's faults with their
    /// windows (what the report shades).
    pub(crate) fn plan(&self, plan: &crate::plan::Plan) {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        let rules = plan
            .rules
            .iter()
            .map(|r| schema::RulePlan {
                name: Cow::Borrowed(&*r.name),
                faults: r
                    .faults
                    .iter()
                    .map(|f| schema::FaultPlan {
                        fault: f.name().into(),
                        params: params_of(f),
                        active_from_ms: ms(f.active.start),
                        active_until_ms: ms(f.active.end),
                    })
                    .collect(),
            })
            .collect();
        let profiles = plan
            .descriptions
            .iter()
            .map(|(source, description)| schema::ProfileUsed {
                source: Cow::Borrowed(source.as_ref()),
                description: Cow::Borrowed(description.as_ref()),
            })
            .collect();
        let argv = redact_argv(std::env::args())
            .into_iter()
            .map(Cow::Owned)
            .collect();
        self.write(|| {
            Event::Plan(schema::Plan {
                argv,
                profiles,
                rules,
            })
        });
    }

    pub(crate) fn conn_open(&self, c: &ConnInfo) {
        self.stats.conns_total.fetch_add(1, Ordering::Relaxed);
        self.stats.conns_open.fetch_add(1, Ordering::Relaxed);
        c.counters.total.fetch_add(1, Ordering::Relaxed);
        c.counters.open.fetch_add(1, Ordering::Relaxed);
        self.write(|| Event::Open(c.line()));
    }

    /// A connection ended; the bytes it delivered are its meter's.
    pub(crate) fn conn_close(
        &self,
        c: &ConnInfo,
        outcome: Outcome,
        lived: Duration,
        path: Option<RelayPath>,
    ) {
        self.stats.conns_open.fetch_sub(1, Ordering::Relaxed);
        c.counters.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(p) = path {
            *self
                .stats
                .paths
                .lock()
                .expect("stats lock")
                .entry(p.as_str())
                .or_default() += 1;
        }
        self.write(|| {
            let bytes = &c.marks.bytes;
            let mut close = schema::Close {
                conn: c.line(),
                path: path.map(schema::Known::Is),
                outcome: schema::Known::Is(outcome),
                bytes_upstream: bytes[0].load(Ordering::Relaxed),
                bytes_downstream: bytes[1].load(Ordering::Relaxed),
                // Microsecond precision, as the other `*_ms` (truncated to
                // whole milliseconds it read as shorter than the first
                // byte's).
                duration_ms: ms(lived),
                syn_ms: None,
                dial_ms: None,
                first_byte_upstream_ms: None,
                first_byte_downstream_ms: None,
                activity: None,
            };
            c.marks.fill(lived, &mut close);
            Event::Close(close)
        });
    }

    /// A fault took effect.
    pub(crate) fn fault(&self, c: &ConnInfo, rule: &str, spec: &FaultSpec, dir: Option<Direction>) {
        let first = {
            let mut seen = c.faulted.lock().expect("stats lock");
            let first = !seen.iter().any(|(r, k)| &**r == rule && *k == spec.name());
            if first {
                seen.push((rule.into(), spec.name()));
            }
            first
        };
        {
            let mut faults = self.stats.faults.lock().expect("stats lock");
            let n = faults.entry((rule.to_string(), spec.name())).or_default();
            n.hits += 1;
            n.units += u64::from(first);
            if let Some(d) = dir {
                n.dirs[d.index()] += 1;
            }
        }
        // (The connection's span names it: id, client, destination.)
        let direction = dir.map_or("connection", |d| d.as_str());
        if self.quiet_faults.load(Ordering::Relaxed) {
            tracing::debug!(rule, direction, "fault {spec}");
        } else {
            tracing::info!(rule, direction, "fault {spec}");
        }
        self.write(|| {
            Event::Fault(schema::Fault {
                on: schema::FaultOn::Connection {
                    conn: c.line(),
                    direction: dir.map(|d| schema::Known::Is(way(d))),
                    http: None,
                },
                rule: rule.into(),
                fault: spec.name().into(),
                params: params_of(spec),
            })
        });
    }

    /// One more request or query that a fault acted on, in the counters.
    fn count_one(&self, rule: &str, spec: &FaultSpec, unit: Unit) {
        let mut faults = self.stats.faults.lock().expect("stats lock");
        let n = faults.entry((rule.to_string(), spec.name())).or_default();
        n.hits += 1;
        n.units += 1;
        n.unit = unit;
    }

    /// An HTTP fault acted on one request.
    pub(crate) fn http_fault(
        &self,
        c: &ConnInfo,
        rule: &str,
        spec: &FaultSpec,
        req: &RequestInfo<'_>,
        status: Option<u16>,
        grpc: Option<GrpcStatus<'_>>,
    ) {
        self.count_one(rule, spec, Unit::Request);
        if req.first_fault {
            self.stats
                .http_faulted_requests
                .fetch_add(1, Ordering::Relaxed);
        }
        *self
            .stats
            .http_faulted
            .lock()
            .expect("stats lock")
            .entry((
                spec.name(),
                status.unwrap_or(0),
                grpc.as_ref().map(|g| g.code),
            ))
            .or_default() += 1;
        if self.quiet_faults.load(Ordering::Relaxed) {
            tracing::debug!(
                rule,
                request = req.n,
                "fault {spec} on {} {}",
                req.method,
                req.path
            );
        } else {
            tracing::info!(
                rule,
                request = req.n,
                "fault {spec} on {} {}",
                req.method,
                req.path
            );
        }
        self.write(|| {
            Event::Fault(schema::Fault {
                on: schema::FaultOn::Connection {
                    conn: c.line(),
                    direction: None,
                    http: Some(req.line(status, grpc)),
                },
                rule: rule.into(),
                fault: spec.name().into(),
                params: params_of(spec),
            })
        });
    }

    /// The DNS layer saw a new query.
    pub(crate) fn dns_query(&self) {
        self.stats.dns_queries.fetch_add(1, Ordering::Relaxed);
    }

    /// A DNS fault acted on query `seq` (once per query, not per retry).
    pub(crate) fn dns_fault(
        &self,
        client: SocketAddr,
        rule: &str,
        spec: &FaultSpec,
        (name, qtype): (&str, u16),
        seq: u64,
        transport: &'static str,
    ) {
        self.count_one(rule, spec, Unit::Query);
        *self
            .stats
            .dns_faulted
            .lock()
            .expect("stats lock")
            .entry(spec.name())
            .or_default() += 1;
        let qtype = crate::fault::dns_match::type_name(qtype);
        if self.quiet_faults.load(Ordering::Relaxed) {
            tracing::debug!(rule, query = seq, "fault {spec} on {qtype} {name}");
        } else {
            tracing::info!(rule, query = seq, "fault {spec} on {qtype} {name}");
        }
        self.write(|| {
            Event::Fault(schema::Fault {
                on: schema::FaultOn::Query {
                    client: client.to_string().into(),
                    dns: schema::DnsQuery {
                        query: seq,
                        name: name.into(),
                        qtype: qtype.into(),
                        transport: transport.into(),
                    },
                },
                rule: rule.into(),
                fault: spec.name().into(),
                params: params_of(spec),
            })
        });
    }

    /// How a DNS query of the namespace ended: `answer` (`NOERROR`,
    /// `NXDOMAIN`, …, `never`, `no answer`) with its record count, and
    /// `ms` after it arrived (none when nothing was sent back).
    pub(crate) fn dns_answered(
        &self,
        client: SocketAddr,
        (name, qtype): (&str, u16),
        seq: u64,
        transport: &'static str,
        ms: Option<f64>,
        (answer, records): (&str, u16),
    ) {
        self.write(|| {
            Event::Dns(schema::DnsAnswered {
                client: client.to_string().into(),
                dns: schema::DnsAnswer {
                    query: schema::DnsQuery {
                        query: seq,
                        name: name.into(),
                        qtype: crate::fault::dns_match::type_name(qtype).into(),
                        transport: transport.into(),
                    },
                    answer: answer.into(),
                    records,
                    ms: ms.map(|m| (m * 1000.0).round() / 1000.0),
                },
            })
        });
    }

    /// The HTTP layer read one more request.
    pub(crate) fn http_request(&self) {
        self.stats.http_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The upstream answered one request (its own answer, not netchaos's):
    /// one line per response head, for the report's request marks; a gRPC
    /// call that failed in its head (trailers-only) with its status.
    pub(crate) fn http_response(
        &self,
        c: &ConnInfo,
        req: &RequestInfo<'_>,
        status: u16,
        grpc: Option<GrpcStatus<'_>>,
    ) {
        self.write(|| {
            Event::Response(schema::OnRequest {
                conn: c.line(),
                http: req.line(Some(status), grpc),
            })
        });
    }

    /// A gRPC call's trailers from the upstream ended it with `grpc`: the
    /// call's outcome, which its HTTP status (200) does not say.
    pub(crate) fn http_trailers(&self, c: &ConnInfo, req: &RequestInfo<'_>, grpc: GrpcStatus<'_>) {
        self.write(|| {
            Event::Trailers(schema::OnRequest {
                conn: c.line(),
                http: req.line(None, Some(grpc)),
            })
        });
    }

    /// An HTTP/2 upstream reset a stream before its answer's end (its
    /// RST_STREAM's `code`, `NO_ERROR` too; `status`: the answer's, when
    /// it had begun): the client's stream is reset with the same code.
    pub(crate) fn http_stream_reset(
        &self,
        c: &ConnInfo,
        req: &RequestInfo<'_>,
        status: Option<u16>,
        code: u32,
        name: &str,
    ) {
        self.write(|| {
            Event::StreamReset(schema::StreamReset {
                conn: c.line(),
                http: req.line(status, None),
                code,
                reason: name.into(),
            })
        });
    }

    /// Something went wrong in the relay itself (not an injected fault).
    pub(crate) fn relay_error(&self, c: &ConnInfo, kind: &'static str, detail: &str) {
        *self
            .stats
            .errors
            .lock()
            .expect("stats lock")
            .entry(kind)
            .or_default() += 1;
        tracing::warn!("{kind}: {detail}");
        self.write(|| {
            Event::Error(schema::RelayError {
                conn: c.line(),
                kind: kind.into(),
                detail: detail.into(),
            })
        });
    }

    /// A client refused the run's certificate for `dest` with `alert`: it
    /// pins a CA of its own. `remembered`: `dest`'s later connections are
    /// relayed untouched.
    pub(crate) fn tls_refused(
        &self,
        c: &ConnInfo,
        dest: &str,
        alert: rustls::AlertDescription,
        remembered: bool,
    ) {
        let advice = pinned_advice(dest);
        {
            let mut pinned = self.stats.pinned.lock().expect("stats lock");
            let known = pinned.contains_key(dest);
            if known || remembered {
                let n = pinned.entry(dest.to_string()).or_default();
                n.refused += 1;
                n.alert.get_or_insert(alert);
            }
        }
        tracing::warn!(
            "TLS: the client refused the run's certificate for {dest} ({alert:?}): {advice}"
        );
        self.write(|| {
            Event::TlsRefused(schema::TlsRefused {
                conn: c.line(),
                destination: dest.into(),
                alert: format!("{alert:?}").into(),
                passthrough: remembered,
                advice: advice.into(),
            })
        });
    }

    /// A connection to `dest`, whose client refused the run's certificate
    /// before, is relayed untouched.
    pub(crate) fn tls_passed(&self, dest: &str) {
        tracing::debug!("TLS: {dest} is relayed untouched (its client pins a CA of its own)");
        if let Some(n) = self.stats.pinned.lock().expect("stats lock").get_mut(dest) {
            n.passed += 1;
        }
    }

    /// An HTTP/2 upstream sent its connection away (GOAWAY) and was dialled
    /// again, taking `took`; the client's connection stays as it was.
    pub(crate) fn upstream_redialled(&self, c: &ConnInfo, took: Duration) {
        tracing::debug!("HTTP/2: the upstream sent its connection away; dialled again");
        self.stats.upstream_redials.fetch_add(1, Ordering::Relaxed);
        self.write(|| {
            Event::Redial(schema::Redial {
                conn: c.line(),
                took_ms: ms(took),
            })
        });
    }

    /// An HTTP/2 upstream sent its connection away and netchaos does not
    /// dial it again (`reason`: `soon`, the connection dialled again less
    /// than `REDIAL_SPACING` before: the upstream is going, not ageing its
    /// connections; `stopping`; `cannot_redial`, its address or TLS setup
    /// unknown): the client's connection is sent away in turn.
    pub(crate) fn upstream_went_away(&self, c: &ConnInfo, reason: &'static str) {
        tracing::debug!(
            "HTTP/2: the upstream sent its connection away ({reason}); so is the client's"
        );
        self.write(|| {
            Event::Goaway(schema::Goaway {
                conn: c.line(),
                reason: reason.into(),
            })
        });
    }

    /// A listener stopped listening for a while (`reason`: `limit` or
    /// `resources`).
    pub(crate) fn listener_paused(&self, reason: &'static str) {
        *self
            .stats
            .pauses
            .lock()
            .expect("stats lock")
            .entry(reason)
            .or_default() += 1;
        self.write(|| {
            Event::Paused(schema::Paused {
                reason: reason.into(),
            })
        });
    }

    /// The SYN gate refused a connection: the limit was reached.
    pub(crate) fn refused_at_limit(&self, c: &ConnInfo) {
        self.stats.refused_at_limit.fetch_add(1, Ordering::Relaxed);
        tracing::warn!("refused: connection limit reached");
        self.write(|| {
            Event::Refused(schema::Refused {
                conn: c.line(),
                reason: "limit".into(),
            })
        });
    }

    /// The DNS forwarder dropped a query (counted; logged once per kind at
    /// debug level, as a flood would otherwise flood the log).
    pub(crate) fn dns_refused(&self, why: DnsRefusal) {
        if self.stats.dns_refused[why as usize].fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::debug!("DNS forwarder: dropped a query ({})", why.as_str());
        }
    }

    /// The exit summary: connections, bytes each way, faults by rule and
    /// kind, relay errors. Closes the event log first.
    pub(crate) fn summary(&self, seed: u64) -> String {
        self.close();
        let s = &self.stats;
        let mut out = format!(
            "netchaos summary (seed {seed}, ran {:.1}s)\n  connections: {} ({} still open)\n  bytes: {} upstream (client→server), {} downstream (server→client)\n",
            self.started.elapsed().as_secs_f64(),
            s.conns_total.load(Ordering::Relaxed),
            s.conns_open.load(Ordering::Relaxed),
            s.bytes[0].load(Ordering::Relaxed),
            s.bytes[1].load(Ordering::Relaxed),
        );
        let faults = s.faults.lock().expect("stats lock");
        if faults.is_empty() {
            out.push_str("  faults injected: none\n");
        } else {
            let w = faults
                .keys()
                .map(|(r, _)| r.len())
                .max()
                .unwrap_or(4)
                .max(4);
            // As wide as the longest kind (`connect_timeout`, `packet_latency`).
            let k = faults
                .keys()
                .map(|(_, k)| k.len())
                .max()
                .unwrap_or(12)
                .max(12);
            out.push_str(&format!(
                "  faults injected:\n    {:<w$}  {:<k$}  {:>8}\n",
                "rule", "fault", "count"
            ));
            for ((rule, kind), n) in faults.iter() {
                let unit = n.unit.name(n.units);
                // Which ways, where it says more than the count.
                let detail = match n.dirs {
                    [0, 0] => String::new(),
                    [u, 0] if u == n.units => " (upstream)".into(),
                    [0, d] if d == n.units => " (downstream)".into(),
                    [u, d] if u == n.units && d == n.units => " (both ways)".into(),
                    [u, d] => format!(" (upstream on {u}, downstream on {d})"),
                };
                out.push_str(&format!(
                    "    {rule:<w$}  {kind:<k$}  {:>8} {unit}{detail}\n",
                    n.units
                ));
            }
        }
        if let Some(d) = *self.faults_end.lock().expect("stats lock") {
            let state = if self.started.elapsed() >= d {
                "stopped"
            } else {
                "were to stop"
            };
            out.push_str(&format!(
                "  --duration: the faults {state} {} after the start; every one counted here came before\n",
                crate::units::format_duration(d)
            ));
        }
        let requests = s.http_requests.load(Ordering::Relaxed);
        if requests > 0 {
            let by_kind = s.http_faulted.lock().expect("stats lock");
            // Requests, not hits: one request can have several faults
            // (each counted in the list by kind).
            let faulted = s.http_faulted_requests.load(Ordering::Relaxed);
            let list: Vec<String> = by_kind
                .iter()
                .map(|((kind, status, grpc), n)| match (status, grpc) {
                    (_, Some(g)) => format!("{kind} grpc-status {g}: {n}"),
                    (0, None) => format!("{kind} {n}"),
                    (s, None) => format!("{kind} {s}: {n}"),
                })
                .collect();
            out.push_str(&format!(
                "  HTTP requests: {requests} seen, {faulted} faulted{}\n",
                if list.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", list.join(", "))
                }
            ));
        }
        let mocked = s.mock_answers.load(Ordering::Relaxed);
        if mocked > 0 {
            let refused = s.mock_refusals.load(Ordering::Relaxed);
            out.push_str(&format!(
                "  answered by the mock: {mocked} request(s){}\n",
                match refused {
                    0 => String::new(),
                    n => format!(", {n} of them refused as the API refuses (4xx)"),
                }
            ));
        }
        let redials = s.upstream_redials.load(Ordering::Relaxed);
        if redials > 0 {
            out.push_str(&format!(
                "  HTTP/2 upstream connections dialled again after their GOAWAY: {redials}\n"
            ));
        }
        let queries = s.dns_queries.load(Ordering::Relaxed);
        if queries > 0 {
            let by_kind = s.dns_faulted.lock().expect("stats lock");
            let faulted: u64 = by_kind.values().sum();
            let list: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push_str(&format!(
                "  DNS queries: {queries} seen, {faulted} faulted{}\n",
                if list.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", list.join(", "))
                }
            ));
        }
        let pauses = s.pauses.lock().expect("stats lock");
        if !pauses.is_empty() {
            let list: Vec<String> = pauses.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push_str(&format!(
                "  listeners paused (new connections refused): {}\n",
                list.join(", ")
            ));
        }
        let abandoned = s.abandoned.load(Ordering::Relaxed);
        if abandoned > 0 {
            out.push_str(&format!(
                "  connection attempts abandoned by their client (no upstream kept): {abandoned}\n"
            ));
        }
        let refused = s.refused_at_limit.load(Ordering::Relaxed);
        if refused > 0 {
            out.push_str(&format!(
                "  connections refused at the SYN (limit): {refused}\n"
            ));
        }
        let pinned = s.pinned.lock().expect("stats lock");
        if !pinned.is_empty() {
            out.push_str("  TLS: clients that trust a CA of their own refused the run's certificate (their destinations then relayed untouched):\n");
            for (dest, n) in pinned.iter() {
                let alert = n.alert.map_or_else(String::new, |a| format!(" ({a:?})"));
                out.push_str(&format!(
                    "    {dest}: {} connection(s) refused{alert}, {} later one(s) relayed untouched\n",
                    n.refused, n.passed
                ));
            }
            out.push_str(
                "    to fault them, have netchaos sign with their CA (--tls-ca FILE --tls-key FILE) or add the run's CA to theirs (--tls-ca-out FILE); or scope the rule (match.dst, match.ports, a fault's host) away from them\n",
            );
        }
        let errors = s.errors.lock().expect("stats lock");
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push_str(&format!("  relay errors: {}\n", list.join(", ")));
        }
        let dns: Vec<String> = DnsRefusal::ALL
            .iter()
            .map(|w| (w, s.dns_refused[*w as usize].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .map(|(w, n)| format!("{} {n}", w.as_str()))
            .collect();
        if !dns.is_empty() {
            out.push_str(&format!(
                "  DNS queries dropped by the forwarder: {}\n",
                dns.join(", ")
            ));
        }
        let lost = s.log_errors.load(Ordering::Relaxed);
        if lost > 0 {
            out.push_str(&format!(
                "  event log: {lost} line(s) could not be written\n"
            ));
        }
        let dropped = s.log_dropped.load(Ordering::Relaxed);
        if let Some(log) = self.log.as_ref().filter(|_| dropped > 0) {
            out.push_str(&format!(
                "  event log: cut at its size ({}, --events-max); {dropped} later line(s) counted here, not written\n",
                crate::units::format_size(log.limit.max)
            ));
        }
        out
    }
}

/// A command line with the control API's token blanked out: the value of
/// `--api-token` (`--api-token T`, `--api-token=T`) and any argument that
/// holds the token of `NETCHAOS_API_TOKEN` or `--api-token`, wherever it
/// stands (after `--` too: the wrapped command may have been handed it).
pub(crate) fn redact_argv(args: impl IntoIterator<Item = String>) -> Vec<String> {
    const HIDDEN: &str = "<hidden>";
    let args: Vec<String> = args.into_iter().collect();
    let mut secrets: Vec<String> = std::env::var("NETCHAOS_API_TOKEN")
        .ok()
        .into_iter()
        .collect();
    let mut out = Vec::with_capacity(args.len());
    // Arguments already blanked (or the flag's own name): left as they are.
    let mut done = Vec::with_capacity(args.len());
    let mut value_next = false;
    let mut options = true;
    for a in &args {
        if value_next {
            value_next = false;
            secrets.push(a.clone());
            out.push(HIDDEN.to_string());
            done.push(true);
            continue;
        }
        if options && a == "--" {
            options = false;
        } else if options && a == "--api-token" {
            value_next = true;
            out.push(a.clone());
            done.push(true);
            continue;
        } else if let Some(t) = a.strip_prefix("--api-token=").filter(|_| options) {
            secrets.push(t.to_string());
            out.push(format!("--api-token={HIDDEN}"));
            done.push(true);
            continue;
        }
        out.push(a.clone());
        done.push(false);
    }
    secrets.retain(|t| !t.trim().is_empty());
    for (a, _) in out.iter_mut().zip(&done).filter(|(_, d)| !**d) {
        for t in &secrets {
            // Inside a longer argument (`-H "Authorization: Bearer T"`)
            // when the token is long enough not to be found by chance.
            if *a == *t || (t.len() >= 6 && a.contains(t.as_str())) {
                *a = a.replace(t.as_str(), HIDDEN);
            }
        }
    }
    out
}

/// One line's text (without its newline), stamped now.
pub(super) fn line_text(started: Instant, event: Event<'_>) -> String {
    let t = started.elapsed().as_secs_f64();
    let line = Line {
        v: schema::VERSION,
        time: humantime::format_rfc3339_millis(SystemTime::now())
            .to_string()
            .into(),
        t: (t * 1e6).round() / 1e6,
        event,
    };
    serde_json::to_string(&line).expect("an event line serialises")
}

/// A direction, as lines name it.
fn way(d: Direction) -> schema::Way {
    match d {
        Direction::Upstream => schema::Way::Upstream,
        Direction::Downstream => schema::Way::Downstream,
    }
}

impl ConnInfo {
    /// Who the connection is, as every line about it says.
    pub(crate) fn line(&self) -> schema::Conn<'_> {
        schema::Conn {
            conn: self.id,
            client: self.client.to_string().into(),
            dst: match &self.dst {
                Dst::Label(l) => Cow::Borrowed(l),
                a => Cow::Owned(a.to_string()),
            },
            host: self.host.as_deref().map(Cow::Borrowed),
            proxy: self.proxy.as_deref().map(Cow::Borrowed),
            mock: self.mock.map(Cow::Borrowed),
        }
    }
}

/// One HTTP request, as the event log names it.
pub(crate) struct RequestInfo<'a> {
    /// Its number on the connection: 0, 1, …
    pub n: u64,
    pub method: &'a str,
    pub path: &'a str,
    pub host: Option<&'a str>,
    /// The first fault recorded on it (the summary counts requests).
    pub first_fault: bool,
}

impl<'a> RequestInfo<'a> {
    /// What an event line says of the request (`http`): its number,
    /// method, path (its first 256 characters) and host; the status it
    /// was answered with and the gRPC status that ended it.
    fn line(&self, status: Option<u16>, grpc: Option<GrpcStatus<'a>>) -> schema::Request<'a> {
        schema::Request {
            request: self.n,
            method: self.method.into(),
            path: clip(self.path),
            host: self.host.map(Cow::Borrowed),
            status,
            grpc_status: grpc.map(|g| g.code),
            grpc_message: grpc
                .filter(|g| !g.message.is_empty())
                .map(|g| clip(g.message)),
        }
    }
}

/// A string as a line keeps it: its first 256 characters.
fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(256) {
        Some((i, _)) => Cow::Borrowed(&s[..i]),
        None => Cow::Borrowed(s),
    }
}

/// How a gRPC call ended: its `grpc-status` and `grpc-message`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrpcStatus<'a> {
    pub code: u32,
    pub message: &'a str,
}

/// Where a hit is recorded: the log, the connection, the rule, the fault.
type HitSink = (Arc<Events>, Arc<ConnInfo>, Arc<str>, Arc<FaultSpec>);

/// What a fault stage holds to record its effect: once per connection and
/// direction, however many bytes it touches.
pub(crate) struct FaultHit {
    sink: HitSink,
    dir: Option<Direction>,
    fired: bool,
}

impl FaultHit {
    pub(crate) fn new(
        events: Arc<Events>,
        conn: Arc<ConnInfo>,
        rule: Arc<str>,
        spec: Arc<FaultSpec>,
        dir: Option<Direction>,
    ) -> FaultHit {
        FaultHit {
            sink: (events, conn, rule, spec),
            dir,
            fired: false,
        }
    }

    /// Records the fault's effect, the first time only.
    pub(crate) fn fire(&mut self) {
        if std::mem::replace(&mut self.fired, true) {
            return;
        }
        let (events, conn, rule, spec) = &self.sink;
        events.fault(conn, rule, spec, self.dir);
    }
}

impl crate::fault::Hit for FaultHit {
    fn fire(&mut self) {
        FaultHit::fire(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_token_is_never_in_the_command_line_logged() {
        let argv = |v: &[&str]| redact_argv(v.iter().map(|s| s.to_string()));
        assert_eq!(
            argv(&[
                "netchaos",
                "run",
                "--api-token",
                "s3cret",
                "--api=127.0.0.1:1",
                "--",
                "sh",
                "-c",
                "echo s3cret"
            ]),
            [
                "netchaos",
                "run",
                "--api-token",
                "<hidden>",
                "--api=127.0.0.1:1",
                "--",
                "sh",
                "-c",
                "echo <hidden>"
            ]
        );
        assert_eq!(
            argv(&[
                "netchaos",
                "server",
                "--api-token=tok",
                "--api=127.0.0.1:8474",
                "tok"
            ]),
            [
                "netchaos",
                "server",
                "--api-token=<hidden>",
                "--api=127.0.0.1:8474",
                "<hidden>"
            ]
        );
    }

    #[test]
    fn the_log_stops_at_its_size_with_one_truncated_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.jsonl");
        let events = Events::to_file(File::create(&p).unwrap(), 4096);
        for _ in 0..200 {
            events.listener_paused("limit");
            // The writer's queue is bounded: let it drain.
            std::thread::sleep(Duration::from_micros(50));
        }
        let summary = events.summary(1);
        let text = std::fs::read_to_string(&p).unwrap();
        let last = text.lines().last().unwrap();
        assert!(last.contains("\"event\":\"truncated\""), "{last}");
        let before = text.len() - last.len() - 1;
        assert!(before <= 4096, "{before}");
        assert!(summary.contains("cut at its size (4KiB"), "{summary}");
        assert_eq!(
            events.stats.pauses.lock().unwrap()["limit"],
            200,
            "counted all the same"
        );
    }

    #[test]
    fn activity_gets_coarser_instead_of_longer() {
        let mut a = Activity {
            start: Instant::now() - Duration::from_millis(1000),
            bucket: Activity::FIRST_BUCKET,
            bytes: [[0; Activity::BUCKETS]; 2],
        };
        a.bytes[1][0] = 5;
        a.bytes[1][1] = 7;
        a.bytes[1][15] = 1;
        // 1 s after the start: 100 buckets of 10 ms would be needed.
        a.add(Direction::Downstream, 100);
        assert_eq!(a.bucket, Duration::from_millis(80), "doubled three times");
        assert_eq!(a.bytes[1][0], 12, "the first buckets merged");
        assert_eq!(a.bytes[1][1], 1, "bucket 15 of 10 ms is bucket 1 of 80 ms");
        assert_eq!(a.bytes[1][12], 100, "1 s is bucket 12 of 80 ms");
        assert_eq!(a.bytes[1].iter().sum::<u64>(), 113, "no byte lost");
        assert_eq!(a.bytes[0].iter().sum::<u64>(), 0);
    }
}
