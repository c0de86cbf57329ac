//! `netchaos report`: an event log (`--events`) read into a [`Model`] of
//! the run — its connections with their phases, faults and HTTP requests,
//! retries linked, the summary, the fault windows — which [`html`] turns
//! into one self-contained page.
//!
//! Reading is lenient: a line that is not JSON, or an event this version
//! does not know, is counted and skipped (a log cut short by a crash still
//! makes a report). Several logs go on one time axis by their wall-clock
//! times (`netchaos demo` runs one `netchaos run` per scenario, each with
//! its own log).
//!
//! Its footprint is bounded whatever the log's size: the logs are read a
//! line at a time (a line over [`MAX_LINE`] is skipped), the first
//! [`MAX_CONNS`] connections are drawn with up to [`MAX_MARKS`] fault marks
//! and [`MAX_REQUESTS`] requests among them, and everything after is
//! counted in the summary only (the page says how much); a connection
//! that is counted only is remembered while it is open (at most
//! [`MAX_COUNTED_OPEN`] at once). The page is written as it is made.

pub(crate) mod html;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::time::SystemTime;

use crate::events::schema::{self, Event, FaultOn, Known, Line, Params, Way};

/// Connections drawn, at most; later ones are counted only.
pub(crate) const MAX_CONNS: usize = 25_000;
/// Fault marks drawn, at most, over all drawn connections.
pub(crate) const MAX_MARKS: usize = 50_000;
/// HTTP requests drawn, at most, over all drawn connections.
pub(crate) const MAX_REQUESTS: usize = 50_000;
/// Errors listed per connection, at most.
const MAX_ERRORS: usize = 20;
/// DNS faults listed, at most (all are counted).
const MAX_DNS: usize = 10_000;
/// Answered DNS queries kept to place resolve phases, at most.
const MAX_RESOLVES: usize = 50_000;
/// Connections counted only and still open, remembered at most.
pub(crate) const MAX_COUNTED_OPEN: usize = 100_000;
/// (rule, fault) pairs told apart in the summary, at most.
const MAX_FAULT_KINDS: usize = 1_000;
/// A longer line is skipped (netchaos's own are far shorter).
pub(crate) const MAX_LINE: usize = 1 << 20;

use serde::Serialize;

/// What a report shows.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Model {
    /// One per log: seed, mode, command line, profiles.
    pub runs: Vec<Run>,
    /// Every connection, grouped (by proxy and destination), each group in
    /// order of opening.
    pub conns: Vec<Conn>,
    /// The groups' names, indexed by [`Conn::group`].
    pub groups: Vec<String>,
    /// Fault windows (`active`, `--duration`) to shade.
    pub windows: Vec<Band>,
    /// DNS faults: the resolve phase, which belongs to no connection (the
    /// first [`MAX_DNS`]).
    pub dns: Vec<DnsMark>,
    /// DNS faults, all of them.
    pub dns_faults: u64,
    /// DNS queries of the namespace, and how many got each answer.
    pub dns_queries: u64,
    pub dns_answers: BTreeMap<String, u64>,
    /// The end of the time axis: the last event, in seconds.
    pub end: f64,
    pub summary: Summary,
    /// Lines that were not JSON or not understood.
    pub skipped: u64,
}

/// One log's run.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Run {
    pub seed: Option<u64>,
    pub mode: String,
    pub version: String,
    pub started: String,
    /// netchaos's command line, as it was started.
    pub argv: Vec<String>,
    /// `(source, description)` of each profile.
    pub profiles: Vec<(String, String)>,
    /// `rule: fault:params` lines of the plan.
    pub rules: Vec<String>,
    /// `--duration`: seconds after the start when the faults stopped.
    pub faults_end: Option<f64>,
    /// The log reached its size (`--events-max`, in bytes) and stops there.
    pub truncated: Option<u64>,
    /// When this run's time 0 falls on the report's axis, in seconds.
    pub offset: f64,
}

/// How soon after a failed connection's end the next one from the same
/// client host to the same destination counts as its retry (seconds).
const RETRY_WINDOW: f64 = 60.0;

impl Conn {
    /// Whether the client met a failure on it — an end that was not clean,
    /// or an answer clients retry (429, 5xx, a gRPC error) — so that the
    /// next connection to the same place may be its retry.
    fn failed(&self) -> bool {
        !matches!(self.class, "ok" | "open") || self.requests.iter().any(Request::failed)
    }

    /// Whether its requests went through the HTTP layer (which is on for
    /// HTTP faults, `--records`, `--tls` and `--mock`); otherwise its
    /// bytes passed unread and its requests are not known.
    fn http_layer(&self) -> bool {
        matches!(self.path.as_str(), "http" | "https") || !self.requests.is_empty()
    }

    /// Marks the requests that retried an earlier one on this connection
    /// (begun after that one's failure was answered: HTTP/2 calls running
    /// side by side on one path are not retries of each other); returns
    /// how many.
    fn link_request_retries(&mut self) -> u64 {
        let mut n = 0;
        for k in 1..self.requests.len() {
            let r = &self.requests[k];
            let before = self.requests[..k]
                .iter()
                .rev()
                .find(|p| p.method == r.method && p.path == r.path);
            let began = r.began();
            if before.is_some_and(|p| p.failed() && began >= p.t && began - p.t <= RETRY_WINDOW) {
                self.requests[k].retried = true;
                n += 1;
            }
        }
        n
    }
}

/// Whether a connection opened at `open` retried one that ended so:
/// `(failed, close)`.
fn retried((failed, close): (bool, Option<f64>), open: f64) -> bool {
    failed && close.is_none_or(|t| open - t <= RETRY_WINDOW)
}

/// One connection.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Conn {
    /// The connection number in its log (several logs may repeat one).
    pub id: u64,
    /// Which log ([`Model::runs`]).
    pub run: usize,
    pub group: usize,
    pub client: String,
    pub dst: String,
    /// Seconds on the report's axis.
    pub open: f64,
    /// `None`: still open when the log ends.
    pub close: Option<f64>,
    /// Upstream connected, first byte down, first byte up: seconds after
    /// `open`.
    pub dial: Option<f64>,
    pub first_down: Option<f64>,
    pub first_up: Option<f64>,
    /// As the log says it (`fin`, `reset`, …), and as the picture colours
    /// it (`ok`, `reset`, `truncated`, `timeout`, `refused`, `failed`,
    /// `aborted`, `open`).
    pub outcome: String,
    pub class: &'static str,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub path: String,
    pub faults: Vec<Mark>,
    pub requests: Vec<Request>,
    pub errors: Vec<String>,
    /// Times its HTTP/2 upstream sent its connection away and was dialled
    /// again (the client's connection stayed).
    pub redials: u32,
    /// The connection this one retried (an index into [`Model::conns`]):
    /// the one before it from the same client host to the same destination
    /// in the same run, when that one failed ([`Conn::failed`]) and this
    /// one opened within [`RETRY_WINDOW`] of its end.
    pub prev: Option<usize>,
    /// The name the destination was known by, when there is one.
    #[serde(skip)]
    pub host: String,
    /// Bytes delivered over time, coarse: from `start` (seconds after
    /// `open`) in buckets of `bucket` seconds, each way.
    pub activity: Option<Activity>,
    /// The resolve phase before it: the query for its name from its client
    /// host that was answered last before it opened (seconds relative to
    /// `open`, both ≤ 0), with the answer.
    pub resolve: Option<(f64, f64, String)>,
    /// Requests and fault marks past the drawing's bounds: counted only.
    #[serde(skip)]
    pub more_requests: u64,
    #[serde(skip)]
    pub more_faults: u64,
    /// The next request number not seen yet.
    #[serde(skip)]
    next_request: u64,
    /// Which (rule, fault) pairs hit it ([`Builder::fault_kind`]'s
    /// indices below 64).
    #[serde(skip)]
    kinds: u64,
}

/// Bytes over time on one connection (the close line's `activity`).
#[derive(Debug, Default, Serialize)]
pub(crate) struct Activity {
    pub start: f64,
    pub bucket: f64,
    pub up: Vec<u64>,
    pub down: Vec<u64>,
}

/// One injected fault.
#[derive(Debug, Default, Serialize, Clone)]
pub(crate) struct Mark {
    pub t: f64,
    pub rule: String,
    pub fault: String,
    pub direction: String,
    pub params: String,
    /// The HTTP request it acted on.
    pub request: Option<u64>,
}

/// A DNS fault on one query of the namespace.
#[derive(Debug, Default, Serialize)]
pub(crate) struct DnsMark {
    pub t: f64,
    pub client: String,
    pub name: String,
    pub qtype: String,
    pub transport: String,
    pub rule: String,
    pub fault: String,
    pub params: String,
}

/// One HTTP request on a connection.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Request {
    pub n: u64,
    pub t: f64,
    pub method: String,
    pub path: String,
    pub status: Option<u16>,
    /// netchaos answered it (the upstream never saw it, unless `upstream`).
    pub injected: bool,
    /// The upstream's own status, when netchaos replaced (or lost) its
    /// response (`phase = "response"`).
    pub upstream: Option<u16>,
    /// HTTP faults that acted on it.
    pub faults: Vec<String>,
    /// How a gRPC call ended, when it said (`UNAVAILABLE (14): message`).
    pub grpc: Option<String>,
    /// It retried the request before it on the same connection (the same
    /// method and path, failed, within [`RETRY_WINDOW`]): an SDK retrying
    /// on its kept-alive connection opens no new one.
    pub retried: bool,
    /// When the client began it (its `attempt` line's `start`), on the
    /// report's axis; `t` is when its first line (answer or fault) came.
    pub start: Option<f64>,
}

impl Request {
    /// When the client began it, as far as the log says.
    pub(crate) fn began(&self) -> f64 {
        self.start.unwrap_or(self.t)
    }

    /// Whether the client met a failure clients retry: a 429, a 5xx, a
    /// gRPC error.
    fn failed(&self) -> bool {
        self.status.is_some_and(|s| s == 429 || s >= 500)
            || self.grpc.as_deref().is_some_and(|g| !g.starts_with("OK"))
    }
}

/// A shaded stretch of time.
#[derive(Debug, Serialize)]
pub(crate) struct Band {
    pub from: f64,
    pub until: Option<f64>,
    pub label: String,
}

/// The exit summary's figures, counted from the log.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub conns: u64,
    pub by_outcome: BTreeMap<String, u64>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// (rule, fault) → (hits, connections)
    pub faults: Vec<(String, String, u64, u64)>,
    pub fault_events: u64,
    pub requests: u64,
    pub requests_injected: u64,
    pub errors: BTreeMap<String, u64>,
    /// Connections that followed an earlier one to the same destination
    /// from the same client host (among those drawn).
    pub retries: u64,
    /// Requests that retried a failed one on the same kept connection.
    pub request_retries: u64,
    /// Connections whose requests the HTTP layer read (the rest passed as
    /// bytes: their requests are not counted).
    pub http_conns: u64,
    /// Connections counted but not drawn (beyond [`MAX_CONNS`]).
    pub conns_not_drawn: u64,
    /// Fault marks and requests of drawn connections not drawn.
    pub faults_not_drawn: u64,
    pub requests_not_drawn: u64,
    /// Lines of connections that could be neither drawn nor remembered
    /// (more than [`MAX_COUNTED_OPEN`] open at once): counted roughly.
    pub untracked_lines: u64,
}

/// Reads the logs at `paths` into a model, a line at a time.
pub(crate) fn read(paths: &[&Path]) -> std::io::Result<Model> {
    let open = |p: &Path| {
        std::fs::File::open(p)
            .map(|f| std::io::BufReader::with_capacity(64 * 1024, f))
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read {}: {e}", p.display())))
    };
    let mut origins = Vec::new();
    for p in paths {
        let mut lines = Lines::new(open(p)?);
        let mut first = None;
        while let Some(line) = lines.next_line()? {
            if let Some(l) = line.as_deref().and_then(parse) {
                first = origin(&l);
                break;
            }
        }
        origins.push(first);
    }
    let mut b = Builder::new(&origins);
    for (i, p) in paths.iter().enumerate() {
        let mut lines = Lines::new(open(p)?);
        let mut run = b.begin(i);
        while let Some(line) = lines.next_line()? {
            match line.as_deref().and_then(parse) {
                Some(v) => b.line(&mut run, &v),
                None if line.as_deref().is_some_and(|l| l.trim().is_empty()) => {}
                None => b.m.skipped += 1,
            }
        }
        b.end(run);
    }
    Ok(b.finish())
}

/// A log's lines, each at most [`MAX_LINE`] long: a longer one is
/// skipped without being held (`Some(None)`).
struct Lines<R> {
    r: R,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn new(r: R) -> Lines<R> {
        Lines { r, buf: Vec::new() }
    }

    fn next_line(&mut self) -> std::io::Result<Option<Option<String>>> {
        use std::io::Read;
        self.buf.clear();
        let n = (&mut self.r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        if self.buf.last() != Some(&b'\n') && self.buf.len() > MAX_LINE {
            self.r.skip_until(b'\n')?;
            return Ok(Some(None));
        }
        Ok(Some(String::from_utf8(std::mem::take(&mut self.buf)).ok()))
    }
}

/// One line as an event of the schema ([`crate::events::schema`]), if it
/// is one.
fn parse(line: &str) -> Option<Line<'_>> {
    if line.trim().is_empty() {
        return None;
    }
    serde_json::from_str(line).ok()
}

/// A wall-clock origin of a log: its first line's `time` minus its `t`.
fn origin(l: &Line<'_>) -> Option<f64> {
    let time = humantime::parse_rfc3339(&l.time).ok()?;
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some(secs - l.t)
}

/// Builds the model from each log's lines (held in memory: tests).
#[cfg(test)]
pub(crate) fn from_lines<'a, L, I>(logs: L) -> Model
where
    L: IntoIterator<Item = I>,
    I: IntoIterator<Item = &'a str>,
{
    let logs: Vec<Vec<&str>> = logs.into_iter().map(|l| l.into_iter().collect()).collect();
    let origins: Vec<Option<f64>> = logs
        .iter()
        .map(|l| l.iter().find_map(|x| parse(x)).as_ref().and_then(origin))
        .collect();
    let mut b = Builder::new(&origins);
    for (i, lines) in logs.iter().enumerate() {
        let mut run = b.begin(i);
        for line in lines {
            match parse(line) {
                Some(v) => b.line(&mut run, &v),
                None if line.trim().is_empty() => {}
                None => b.m.skipped += 1,
            }
        }
        b.end(run);
    }
    b.finish()
}

struct Builder {
    m: Model,
    /// Each log's time 0 on the report's axis.
    offsets: Vec<f64>,
    /// (run, conn id) → index into `conns`, for connections drawn.
    index: HashMap<(usize, u64), usize>,
    conns: Vec<Conn>,
    /// Group names seen, with their key.
    groups: Vec<String>,
    group_index: HashMap<String, usize>,
    /// Connections counted only, while they are open.
    counted: HashMap<(usize, u64), Counted>,
    /// (rule, fault) → its index in `fault_counts`.
    fault_kinds: HashMap<(String, String), usize>,
    /// (rule, fault, hits, connections).
    fault_counts: Vec<(String, String, u64, u64)>,
    /// DNS queries that were answered: (name, asked, answered, answer), to
    /// place each connection's resolve phase.
    resolves: Vec<(String, f64, f64, String)>,
    /// Fault marks and requests drawn so far.
    marks: usize,
    requests: usize,
}

/// What is remembered of a connection that is counted only.
#[derive(Default)]
struct Counted {
    next_request: u64,
    kinds: u64,
}

/// Where a line's connection is kept.
enum Slot {
    Drawn(usize),
    Counted((usize, u64)),
    /// Neither: its lines are counted without it.
    Untracked,
}

/// One log being read.
struct RunState {
    r: Run,
    index: usize,
}

/// A DNS answer: asked, answered (seconds on the axis), the answer.
type Answered = (f64, f64, String);

/// How long before a connection its name's answer may have come to count
/// as that connection's resolve phase.
const RESOLVE_WINDOW: f64 = 30.0;

fn params_text(p: &Params<'_>) -> String {
    p.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the picture colours an outcome.
fn class(outcome: &str, errors: &[String]) -> &'static str {
    match outcome {
        "fin" => "ok",
        "reset" => "reset",
        "closed" => "truncated",
        "connect_timeout" => "timeout",
        "refused" => "refused",
        "dial_failed" if errors.iter().any(|e| e.contains("refused")) => "refused",
        "dial_failed" if errors.iter().any(|e| e.contains("timeout")) => "timeout",
        "dial_failed" => "failed",
        "aborted" | "disabled" => "aborted",
        _ => "failed",
    }
}

impl Builder {
    fn new(origins: &[Option<f64>]) -> Builder {
        let base = origins
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let offsets = origins
            .iter()
            .map(|o| match o {
                Some(o) if base.is_finite() => o - base,
                _ => 0.0,
            })
            .collect();
        Builder {
            m: Model::default(),
            offsets,
            index: HashMap::new(),
            conns: Vec::new(),
            groups: Vec::new(),
            group_index: HashMap::new(),
            counted: HashMap::new(),
            fault_kinds: HashMap::new(),
            fault_counts: Vec::new(),
            resolves: Vec::new(),
            marks: 0,
            requests: 0,
        }
    }

    /// Where connection `v` is kept; a connection first seen is drawn
    /// while there is room, else counted (`open` lines only: any other
    /// line of an unknown connection is counted by itself).
    fn conn(&mut self, run: usize, t: f64, v: &schema::Conn<'_>, opening: bool) -> Slot {
        let id = v.conn;
        if let Some(&i) = self.index.get(&(run, id)) {
            return Slot::Drawn(i);
        }
        if self.counted.contains_key(&(run, id)) {
            return Slot::Counted((run, id));
        }
        if self.conns.len() >= MAX_CONNS {
            if opening && self.counted.len() < MAX_COUNTED_OPEN {
                self.counted.insert((run, id), Counted::default());
                return Slot::Counted((run, id));
            }
            if !opening {
                self.m.summary.untracked_lines += 1;
            }
            return Slot::Untracked;
        }
        let mut dst = match &v.host {
            Some(h) => format!("{h} ({})", v.dst),
            None => v.dst.to_string(),
        };
        // Answered by the built-in mock, not the real upstream.
        if let Some(api) = &v.mock {
            dst.push_str(&format!(" [mock: {api}]"));
        }
        let key = match &v.proxy {
            Some(p) => format!("{p} → {dst}"),
            None => dst.clone(),
        };
        let next = self.groups.len();
        let group = *self.group_index.entry(key.clone()).or_insert(next);
        if group == next {
            self.groups.push(key);
        }
        self.conns.push(Conn {
            id,
            run,
            group,
            client: v.client.to_string(),
            dst,
            host: v.host.as_deref().unwrap_or("").to_string(),
            open: t,
            outcome: "open".into(),
            class: "open",
            ..Default::default()
        });
        let i = self.conns.len() - 1;
        self.index.insert((run, id), i);
        Slot::Drawn(i)
    }

    /// The index of (rule, fault) in the summary's counts (past
    /// [`MAX_FAULT_KINDS`], one row for the rest).
    fn fault_kind(&mut self, rule: &str, fault: &str) -> usize {
        if let Some(&i) = self.fault_kinds.get(&(rule.to_string(), fault.to_string())) {
            return i;
        }
        let key = if self.fault_counts.len() < MAX_FAULT_KINDS {
            (rule.to_string(), fault.to_string())
        } else {
            ("…".to_string(), "other faults".to_string())
        };
        let next = self.fault_counts.len();
        let i = *self.fault_kinds.entry(key.clone()).or_insert(next);
        if i == next {
            self.fault_counts.push((key.0, key.1, 0, 0));
        }
        i
    }

    /// Counts one hit of fault kind `k` on a connection that has had the
    /// kinds in `seen` (`None`: not known): the connection too, the first
    /// time.
    fn count_fault(&mut self, k: usize, seen: Option<&mut u64>) {
        let row = &mut self.fault_counts[k];
        row.2 += 1;
        match seen {
            Some(mask) if k < 64 => {
                if *mask & (1 << k) == 0 {
                    *mask |= 1 << k;
                    row.3 += 1;
                }
            }
            _ => row.3 += 1,
        }
        self.m.summary.fault_events += 1;
    }

    /// A log's reading begins.
    fn begin(&mut self, index: usize) -> RunState {
        RunState {
            r: Run {
                offset: self.offsets.get(index).copied().unwrap_or(0.0),
                ..Default::default()
            },
            index,
        }
    }

    /// A log's reading ends.
    fn end(&mut self, run: RunState) {
        let offset = run.r.offset;
        let r = run.r;
        if let Some(at) = r.faults_end {
            self.m.windows.push(Band {
                from: offset,
                until: Some(offset + at),
                label: format!("faults on (--duration {at}s)"),
            });
        }
        self.m.runs.push(r);
    }

    /// One line of the log being read.
    fn line(&mut self, run: &mut RunState, l: &Line<'_>) {
        let offset = run.r.offset;
        let log = run.index;
        let r = &mut run.r;
        let t = l.t + offset;
        self.m.end = self.m.end.max(t);
        match &l.event {
            Event::Start(v) => {
                r.seed = Some(v.seed);
                r.mode = v.mode.to_string();
                r.version = v.version.to_string();
                r.started = l.time.to_string();
            }
            Event::Plan(v) => self.plan(r, v, offset),
            Event::FaultsEnd(v) => r.faults_end = Some(v.at_ms as f64 / 1e3),
            Event::Truncated(v) => r.truncated = Some(v.max_bytes),
            Event::Open(v) => {
                self.conn(log, t, v, true);
            }
            Event::Close(v) => self.close(log, t, v),
            Event::Dns(v) => {
                let d = &v.dns;
                if let Some(ms) = d.ms
                    && self.resolves.len() < MAX_RESOLVES
                {
                    self.resolves.push((
                        d.query.name.to_string(),
                        t - ms / 1e3,
                        t,
                        d.answer.to_string(),
                    ));
                }
                self.m.dns_queries += 1;
                *self.m.dns_answers.entry(d.answer.to_string()).or_default() += 1;
            }
            Event::Fault(v) => match &v.on {
                FaultOn::Query { client, dns: d } => {
                    self.m.dns_faults += 1;
                    if self.m.dns.len() < MAX_DNS {
                        self.m.dns.push(DnsMark {
                            t,
                            client: client.to_string(),
                            name: d.name.to_string(),
                            qtype: d.qtype.to_string(),
                            transport: d.transport.to_string(),
                            rule: v.rule.to_string(),
                            fault: v.fault.to_string(),
                            params: params_text(&v.params),
                        });
                    }
                }
                FaultOn::Connection {
                    conn,
                    direction,
                    http,
                } => self.fault(log, t, conn, v, direction.as_ref(), http.as_ref()),
            },
            // The upstream's answer, a gRPC call's end in its trailers,
            // and an HTTP/2 stream the upstream reset.
            Event::Response(v) | Event::Trailers(v) => {
                let slot = self.conn(log, t, &v.conn, false);
                self.request(slot, &v.http, t);
            }
            Event::StreamReset(v) => {
                let slot = self.conn(log, t, &v.conn, false);
                self.request(slot, &v.http, t);
            }
            Event::Error(v) => {
                let kind = v.kind.to_string();
                *self.m.summary.errors.entry(kind.clone()).or_default() += 1;
                if let Slot::Drawn(i) = self.conn(log, t, &v.conn, false) {
                    let c = &mut self.conns[i];
                    if c.errors.len() < MAX_ERRORS {
                        c.errors.push(format!("{kind}: {}", v.detail));
                    }
                    if c.close.is_some() {
                        c.class = class(&c.outcome, &c.errors);
                    }
                }
            }
            // When the client began each request (the records' lines).
            Event::Attempt(v) => {
                if let Slot::Drawn(i) = self.conn(log, t, &v.conn, false)
                    && let Some(r) = self.conns[i]
                        .requests
                        .iter_mut()
                        .find(|r| r.n == v.http.request)
                {
                    r.start = Some(v.start + offset);
                }
            }
            Event::Redial(v) => {
                if let Slot::Drawn(i) = self.conn(log, t, &v.conn, false) {
                    self.conns[i].redials += 1;
                }
            }
            Event::Paused(_)
            | Event::Refused(_)
            | Event::Goaway(_)
            | Event::TlsRefused(_)
            | Event::StopIf(_) => {}
        }
    }

    fn close(&mut self, log: usize, t: f64, v: &schema::Close<'_>) {
        let i = match self.conn(log, t, &v.conn, false) {
            Slot::Drawn(i) => i,
            slot => {
                // Counted only: its figures go to the summary now.
                if let Slot::Counted(key) = slot {
                    self.counted.remove(&key);
                }
                let s = &mut self.m.summary;
                s.conns += 1;
                *s.by_outcome.entry(v.outcome.as_str().into()).or_default() += 1;
                s.bytes_up += v.bytes_upstream;
                s.bytes_down += v.bytes_downstream;
                return;
            }
        };
        let c = &mut self.conns[i];
        c.close = Some(t);
        let duration = v.duration_ms / 1e3;
        // The close line's own duration places the open when the open line
        // is missing (or the connection never reached the relay).
        c.open = c.open.min(t - duration);
        // Under interception the SYN came before the open: the handshake
        // (held by the SYN gate) is the connect phase.
        let syn = v.syn_ms.unwrap_or(0.0) / 1e3;
        let open_line = t - duration;
        if syn > 0.0 {
            c.open = c.open.min(open_line - syn);
        }
        let shift = open_line - c.open;
        let after = |ms: Option<f64>| ms.map(|x| x / 1e3 + shift);
        c.dial = after(v.dial_ms);
        c.first_down = after(v.first_byte_downstream_ms);
        c.first_up = after(v.first_byte_upstream_ms);
        if let Some(a) = &v.activity {
            let list = |b: &[u64]| b.iter().take(64).copied().collect();
            c.activity = Some(Activity {
                start: a.start_ms / 1e3 + shift,
                bucket: a.bucket_ms / 1e3,
                up: list(&a.upstream),
                down: list(&a.downstream),
            });
        }
        c.outcome = v.outcome.as_str().into();
        c.bytes_up = v.bytes_upstream;
        c.bytes_down = v.bytes_downstream;
        c.path = v.path.as_ref().map_or("", |p| p.as_str()).into();
        c.class = class(&c.outcome, &c.errors);
    }

    fn fault(
        &mut self,
        log: usize,
        t: f64,
        conn: &schema::Conn<'_>,
        v: &schema::Fault<'_>,
        direction: Option<&Known<Way>>,
        http: Option<&schema::Request<'_>>,
    ) {
        let slot = self.conn(log, t, conn, false);
        let (rule, fault) = (v.rule.to_string(), v.fault.to_string());
        let k = self.fault_kind(&rule, &fault);
        // Answered (or aborted) by netchaos: the upstream never saw the
        // request — or, after it (`phase = "response"`), its answer was
        // replaced.
        let injected = http.is_some() && matches!(fault.as_str(), "http_status" | "http_abort");
        let i = match slot {
            Slot::Drawn(i) => i,
            Slot::Counted(key) => {
                let mut mask = self.counted.get(&key).map_or(0, |c| c.kinds);
                self.count_fault(k, Some(&mut mask));
                if let Some(c) = self.counted.get_mut(&key) {
                    c.kinds = mask;
                }
                if let Some(h) = http {
                    self.request(Slot::Counted(key), h, t);
                }
                self.m.summary.requests_injected += u64::from(injected);
                return;
            }
            Slot::Untracked => {
                self.count_fault(k, None);
                self.m.summary.requests_injected += u64::from(injected);
                return;
            }
        };
        let mut mask = self.conns[i].kinds;
        self.count_fault(k, Some(&mut mask));
        self.conns[i].kinds = mask;
        let mark = Mark {
            t,
            rule,
            fault,
            direction: direction.map_or("", |d| d.as_str()).into(),
            params: params_text(&v.params),
            request: http.map(|h| h.request),
        };
        if let Some(h) = http {
            let after = v.params.get("phase").map(|p| &**p) == Some("response");
            let n = h.request;
            let theirs = self.conns[i]
                .requests
                .iter()
                .rev()
                .find(|r| r.n == n)
                .and_then(|r| r.status);
            let mut newly = injected;
            if let Some(req) = self.request(Slot::Drawn(i), h, t) {
                newly = injected && !req.injected;
                req.injected |= injected;
                if injected && after {
                    req.upstream = theirs;
                    // The upstream's gRPC status went with its answer.
                    if h.grpc_status.is_none() {
                        req.grpc = None;
                    }
                    if mark.fault == "http_abort" {
                        req.status = None;
                    }
                }
                req.faults.push(mark.fault.clone());
            }
            self.m.summary.requests_injected += u64::from(newly);
        }
        if self.marks < MAX_MARKS {
            self.marks += 1;
            self.conns[i].faults.push(mark);
        } else {
            self.conns[i].more_faults += 1;
        }
    }

    /// The request `h` names on the connection in `slot`, counted the first
    /// time it is seen; on a drawn connection, drawn while there is room
    /// (`None` past that).
    fn request(&mut self, slot: Slot, h: &schema::Request<'_>, t: f64) -> Option<&mut Request> {
        let n = h.request;
        let s = &mut self.m.summary;
        let c = match slot {
            Slot::Drawn(i) => &mut self.conns[i],
            Slot::Counted(key) => {
                if let Some(c) = self.counted.get_mut(&key)
                    && n >= c.next_request
                {
                    c.next_request = n + 1;
                    s.requests += 1;
                }
                return None;
            }
            Slot::Untracked => {
                // Each request's first line is its response or its fault.
                s.requests += 1;
                return None;
            }
        };
        let i = match c.requests.iter().rposition(|r| r.n == n) {
            Some(i) => i,
            None if self.requests < MAX_REQUESTS => {
                self.requests += 1;
                s.requests += 1;
                c.next_request = c.next_request.max(n + 1);
                c.requests.push(Request {
                    n,
                    t,
                    method: h.method.to_string(),
                    path: h.path.to_string(),
                    ..Default::default()
                });
                c.requests.len() - 1
            }
            None => {
                if n >= c.next_request {
                    c.next_request = n + 1;
                    c.more_requests += 1;
                    s.requests += 1;
                }
                return None;
            }
        };
        let r = &mut c.requests[i];
        if let Some(st) = h.status {
            r.status = Some(st);
        }
        if let Some(code) = h.grpc_status {
            let name = crate::protocol::grpc::code_name(code.into()).unwrap_or("unknown code");
            r.grpc = Some(match &h.grpc_message {
                Some(m) => format!("{name} ({code}): {m}"),
                None => format!("{name} ({code})"),
            });
        }
        r.t = r.t.min(t);
        Some(r)
    }

    fn plan(&mut self, r: &mut Run, v: &schema::Plan<'_>, offset: f64) {
        r.argv = v.argv.iter().map(|a| a.to_string()).collect();
        for p in &v.profiles {
            r.profiles
                .push((p.source.to_string(), p.description.to_string()));
        }
        for rule in &v.rules {
            for f in &rule.faults {
                let (name, kind) = (&rule.name, &f.fault);
                r.rules
                    .push(format!("{name}: {kind} {}", params_text(&f.params)));
                let from = f.active_from_ms.map(|ms| ms as f64 / 1e3);
                let until = f.active_until_ms.map(|ms| ms as f64 / 1e3);
                if from.is_some() || until.is_some() {
                    self.m.windows.push(Band {
                        from: offset + from.unwrap_or(0.0),
                        until: until.map(|u| offset + u),
                        label: format!("{name}: {kind} active"),
                    });
                }
            }
        }
    }

    fn finish(mut self) -> Model {
        let mut m = std::mem::take(&mut self.m);
        // Group by group, then by opening time: lanes in that order.
        let mut order: Vec<usize> = (0..self.conns.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&self.conns[a], &self.conns[b]);
            (x.group, x.open, x.run, x.id)
                .partial_cmp(&(y.group, y.open, y.run, y.id))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut conns: Vec<Conn> = Vec::with_capacity(order.len());
        let mut slots: Vec<Option<Conn>> = self.conns.drain(..).map(Some).collect();
        for i in order {
            conns.push(slots[i].take().expect("each connection once"));
        }
        // Retries: the previous connection from the same client host to
        // the same group in the same run (the client's port changes with
        // every connection), if it failed and this one came soon after.
        // Independent connections to one server — a test suite's, a
        // pool's — are not retries, nor are the sub-runs of a demo.
        let mut last: HashMap<(usize, usize, String), usize> = HashMap::new();
        // Answers by name, in order of answering. (Not by client: under
        // `run` a query leaves from the namespace's own address, its
        // connections often from loopback; one namespace is one client.)
        let mut answers: HashMap<String, Vec<Answered>> = HashMap::new();
        for (n, t0, t1, a) in self.resolves.drain(..) {
            answers.entry(n).or_default().push((t0, t1, a));
        }
        for list in answers.values_mut() {
            list.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
        }
        let s = &mut m.summary;
        // Counted only, and still open when the log ends.
        s.conns += self.counted.len() as u64;
        if !self.counted.is_empty() {
            *s.by_outcome.entry("open".into()).or_default() += self.counted.len() as u64;
        }
        let ends: Vec<(bool, Option<f64>)> = conns.iter().map(|c| (c.failed(), c.close)).collect();
        for (i, c) in conns.iter_mut().enumerate() {
            let host = client_host(&c.client).to_string();
            if !c.host.is_empty()
                && let Some(list) = answers.get(&c.host)
            {
                // The last answer before the open (a few ms of slack: the
                // log's clock and the SYN's are not the same).
                c.resolve = list
                    .iter()
                    .rev()
                    .find(|(_, t1, _)| *t1 <= c.open + 0.005 && c.open - t1 <= RESOLVE_WINDOW)
                    .map(|(t0, t1, a)| (t0 - c.open, (t1 - c.open).min(0.0), a.clone()));
            }
            c.prev = last
                .insert((c.run, c.group, host), i)
                .filter(|&p| retried(ends[p], c.open));
            s.retries += u64::from(c.prev.is_some());
            s.conns += 1;
            *s.by_outcome.entry(c.outcome.clone()).or_default() += 1;
            s.bytes_up += c.bytes_up;
            s.bytes_down += c.bytes_down;
            c.faults
                .sort_by(|a, b| a.t.partial_cmp(&b.t).unwrap_or(std::cmp::Ordering::Equal));
            c.requests.sort_by_key(|r| r.n);
            s.request_retries += c.link_request_retries();
            s.http_conns += u64::from(c.http_layer());
            m.end = m.end.max(c.close.unwrap_or(c.open));
        }
        let mut faults = self.fault_counts;
        faults.sort();
        s.faults = faults;
        m.conns = conns;
        m.groups = self.groups;
        m
    }
}

/// `ip` of `ip:port` (`[v6]:port` too).
fn client_host(client: &str) -> &str {
    match client.rsplit_once(':') {
        Some((h, _)) => h,
        None => client,
    }
}

/// Writes the report of the logs at `logs` into `file` (the page the
/// user named `out`).
pub(crate) fn write(logs: &[&Path], file: std::fs::File, out: &Path) -> std::io::Result<Model> {
    let model = read(logs)?;
    write_model(&model, file, out)?;
    Ok(model)
}

/// Renders `model` into `file` (the page the user named `out`), as it
/// is made.
pub(crate) fn write_model(model: &Model, file: std::fs::File, out: &Path) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, file);
    html::render_to(model, &mut w)
        .and_then(|()| std::io::Write::flush(&mut w))
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", out.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `time` for lines made in the tests.
    const TIME: &str = "2026-12-01T10:00:00.000Z";

    const LOG: &str = r#"{"time":"2026-12-01T10:00:00.000Z","t":0.0,"event":"start","seed":7,"version":"0.1.0","mode":"proxy"}
{"time":"2026-12-01T10:00:00.001Z","t":0.001,"event":"plan","argv":["netchaos","proxy"],"profiles":[],"rules":[{"name":"cli","faults":[{"fault":"reset","params":{"after_bytes":"10","active":"1s..2s"},"active_from_ms":1000,"active_until_ms":2000}]}]}
{"time":"2026-12-01T10:00:00.100Z","t":0.1,"event":"open","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p"}
{"time":"2026-12-01T10:00:00.200Z","t":0.2,"event":"fault","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p","rule":"cli","fault":"reset","direction":"downstream","params":{"after_bytes":"10"}}
{"time":"2026-12-01T10:00:00.300Z","t":0.3,"event":"close","conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p","outcome":"reset","bytes_upstream":5,"bytes_downstream":10,"duration_ms":200,"dial_ms":1.5,"first_byte_downstream_ms":50.0}
{"time":"2026-12-01T10:00:00.500Z","t":0.5,"event":"open","conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p"}
{"time":"2026-12-01T10:00:00.600Z","t":0.6,"event":"response","conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p","http":{"request":0,"method":"GET","path":"/","status":200}}
not json
{"time":"2026-12-01T10:00:00.700Z","t":0.7,"event":"close","conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p","outcome":"fin","bytes_upstream":5,"bytes_downstream":10,"duration_ms":200}
"#;

    #[test]
    fn reads_connections_faults_requests_and_retries() {
        let m = from_lines([LOG.lines()]);
        assert_eq!(m.conns.len(), 2);
        assert_eq!(m.skipped, 1);
        let c = &m.conns[0];
        assert_eq!(
            (c.class, c.faults.len(), c.dial),
            ("reset", 1, Some(0.0015))
        );
        assert_eq!(m.conns[1].class, "ok");
        assert_eq!(m.conns[1].requests[0].status, Some(200));
        assert_eq!(m.conns[1].prev, Some(0), "the second follows the first");
        assert_eq!(m.summary.fault_events, 1);
        assert_eq!(m.summary.faults, vec![("cli".into(), "reset".into(), 1, 1)]);
        assert_eq!(m.windows.len(), 1);
        assert_eq!(m.runs[0].seed, Some(7));
    }

    /// One connection from client port `port` to port 80, open at `t` for
    /// 50 ms, ending with `outcome`.
    fn conn_lines(id: u64, port: u16, t: f64, outcome: &str) -> String {
        let base =
            format!(r#""conn":{id},"client":"127.0.0.1:{port}","dst":"127.0.0.1:80","proxy":"p""#);
        format!(
            "{{\"time\":\"{TIME}\",\"t\":{t},\"event\":\"open\",{base}}}\n{{\"time\":\"{TIME}\",\"t\":{},\"event\":\"close\",{base},\"outcome\":\"{outcome}\",\"bytes_upstream\":1,\"bytes_downstream\":1,\"duration_ms\":50.0}}\n",
            t + 0.05
        )
    }

    /// One kept connection's lines: each request `(t, path, status)` as
    /// its `response` line, then the close (`path` = the relay's path).
    fn kept_conn(requests: &[(f64, &str, u16)], relay_path: &str) -> String {
        let base = r#""conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p""#;
        let mut log = format!("{{\"time\":\"{TIME}\",\"t\":0.0,\"event\":\"open\",{base}}}\n");
        for (n, (t, path, status)) in requests.iter().enumerate() {
            log += &format!(
                "{{\"time\":\"{TIME}\",\"t\":{t},\"event\":\"response\",{base},\"http\":{{\"request\":{n},\"method\":\"POST\",\"path\":\"{path}\",\"status\":{status}}}}}\n"
            );
        }
        log + &format!(
            "{{\"time\":\"{TIME}\",\"t\":300.0,\"event\":\"close\",{base},\"path\":\"{relay_path}\",\"outcome\":\"fin\",\"bytes_upstream\":1,\"bytes_downstream\":1,\"duration_ms\":1.0}}\n"
        )
    }

    #[test]
    fn a_request_sent_again_on_its_kept_connection_is_a_retry() {
        // 429, then the same request 1 s and 3 s later on the same
        // connection (an SDK's retries), then another path, then the
        // first path again 2 minutes on (not a retry).
        let log = kept_conn(
            &[
                (1.0, "/v1/messages", 429),
                (2.0, "/v1/messages", 529),
                (5.0, "/v1/messages", 200),
                (6.0, "/v1/models", 200),
                (130.0, "/v1/messages", 200),
            ],
            "http",
        );
        let m = from_lines([log.lines()]);
        let retried: Vec<bool> = m.conns[0].requests.iter().map(|r| r.retried).collect();
        assert_eq!(retried, [false, true, true, false, false]);
        assert_eq!((m.summary.request_retries, m.summary.retries), (2, 0));
        let page = html::render(&m);
        assert!(page.contains("Retries on a kept connection"), "no table");
        assert!(page.contains("429 → 529 → 200"), "answers in order");
        assert!(page.contains("1.00 s, 3.00 s"), "pauses between starts");
        // HTTP/2 calls side by side on one path: the second began (its
        // attempt's start) before the first's failure came: not its retry.
        let base = r#""conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p""#;
        let concurrent = kept_conn(&[(1.0, "/svc/M", 503), (1.2, "/svc/M", 200)], "http")
            .replace(
                &format!("{{\"time\":\"{TIME}\",\"t\":300.0"),
                &format!(
                    "{{\"time\":\"{TIME}\",\"t\":1.3,\"event\":\"attempt\",{base},\"start\":0.9,\"http\":{{\"request\":1,\"proto\":\"HTTP/2\",\"method\":\"POST\",\"path\":\"/svc/M\"}},\"error\":null,\"ms\":1.0,\"faults\":[]}}\n{{\"time\":\"{TIME}\",\"t\":300.0"
                ),
            );
        let m = from_lines([concurrent.lines()]);
        assert_eq!(m.conns[0].requests[1].start, Some(0.9));
        assert_eq!(m.summary.request_retries, 0);
        // Independent requests that all succeed: no retry.
        let ok = kept_conn(
            &[(1.0, "/a", 200), (1.001, "/a", 200), (1.002, "/a", 200)],
            "http",
        );
        let m = from_lines([ok.lines()]);
        assert_eq!(m.summary.request_retries, 0);
        assert!(!html::render(&m).contains("Retries on a kept connection"));
    }

    #[test]
    fn requests_the_http_layer_never_read_are_not_counted_as_zero() {
        // Connections passed as bytes (no HTTP fault): the count is not known.
        let m = from_lines([conn_lines(1, 5000, 0.0, "fin").lines()]);
        assert_eq!((m.summary.requests, m.summary.http_conns), (0, 0));
        let page = html::render(&m);
        assert!(
            page.contains("not read: connections passed as bytes"),
            "{page:.0}"
        );
        // Read by the HTTP layer, with no request on it: a true 0.
        let m = from_lines([kept_conn(&[], "http").lines()]);
        assert_eq!(m.summary.http_conns, 1);
        let page = html::render(&m);
        assert!(!page.contains("not read:"));
        assert!(page.contains("<th>HTTP requests</th><td class=\"n\">0</td>"));
    }

    #[test]
    fn only_connections_after_a_failure_are_retries() {
        // A test suite's 20 independent connections to one server.
        let suite: String = (0..20)
            .map(|i| conn_lines(i + 1, 5000 + i as u16, i as f64, "fin"))
            .collect();
        let m = from_lines([suite.lines()]);
        assert_eq!(m.summary.retries, 0);
        assert!(m.conns.iter().all(|c| c.prev.is_none()));
        // A reset, then a connection 1 s later (a retry), then one two
        // minutes after the next reset (not one).
        let log = conn_lines(1, 5000, 0.0, "reset")
            + &conn_lines(2, 5001, 1.0, "fin")
            + &conn_lines(3, 5002, 2.0, "reset")
            + &conn_lines(4, 5003, 125.0, "fin");
        let m = from_lines([log.lines()]);
        let prevs: Vec<Option<usize>> = m.conns.iter().map(|c| c.prev).collect();
        assert_eq!(prevs, [None, Some(0), None, None]);
        assert_eq!(m.summary.retries, 1);
        // Two logs (a demo's sub-runs): a reset in one is not retried by a
        // connection of the other.
        let a = conn_lines(1, 5000, 0.0, "reset");
        let b = conn_lines(1, 5001, 0.0, "fin");
        let m = from_lines([a.lines(), b.lines()]);
        assert_eq!(m.summary.retries, 0);
    }

    /// `phase = "response"`: the upstream answered, netchaos replaced the
    /// answer (or lost it); the report keeps both.
    /// A connection the built-in mock answered says so where its
    /// destination is named.
    #[test]
    fn mocked_connections_are_marked() {
        let log = LOG.replace(
            r#""dst":"127.0.0.1:80","proxy":"p"}"#,
            r#""dst":"198.18.0.1:443","host":"api.anthropic.com","proxy":"p","mock":"anthropic"}"#,
        );
        let m = from_lines([log.lines()]);
        assert_eq!(
            m.conns[0].dst,
            "api.anthropic.com (198.18.0.1:443) [mock: anthropic]"
        );
    }

    #[test]
    fn a_replaced_response_keeps_the_upstreams_status() {
        let line = |t: f64, ev: &str, rest: &str| {
            format!(
                r#"{{"time":"2026-12-01T10:00:00.000Z","t":{t},"event":"{ev}","conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p",{rest}}}"#
            )
        };
        let mut log = LOG.to_string();
        for (n, fault, status) in [(1, "http_status", ",\"status\":502"), (2, "http_abort", "")] {
            let http = format!(r#""http":{{"request":{n},"method":"POST","path":"/pay""#);
            log += &line(0.61, "response", &format!("{http},\"status\":200}}"));
            log += "\n";
            log += &line(
                0.62,
                "fault",
                &format!(
                    r#""rule":"cli","fault":"{fault}","params":{{"phase":"response"}},{http}{status}}}"#
                ),
            );
            log += "\n";
        }
        let m = from_lines([log.lines()]);
        let r = &m.conns[1].requests;
        assert_eq!(
            (r[1].status, r[1].upstream, r[1].injected),
            (Some(502), Some(200), true)
        );
        assert_eq!(
            (r[2].status, r[2].upstream, r[2].injected),
            (None, Some(200), true)
        );
        assert_eq!(
            (r[0].status, r[0].upstream, r[0].injected),
            (Some(200), None, false)
        );
    }

    /// A gRPC call's end: its trailers line merges into its request; a
    /// trailers-only answer that netchaos replaced with a plain HTTP one
    /// no longer shows the upstream's gRPC status.
    #[test]
    fn a_grpc_calls_end_is_its_requests() {
        let line = |t: f64, ev: &str, http: &str, rest: &str| {
            format!(
                r#"{{"time":"2026-12-01T10:00:00.000Z","t":{t},"event":"{ev}","conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p",{rest}"http":{{"method":"POST","path":"/a.B/C",{http}}}}}"#
            )
        };
        let log = [
            LOG.to_string(),
            line(0.61, "response", r#""request":1,"status":200"#, ""),
            line(
                0.62,
                "trailers",
                r#""request":1,"grpc_status":15,"grpc_message":"lost""#,
                "",
            ),
            line(
                0.63,
                "response",
                r#""request":2,"status":200,"grpc_status":5"#,
                "",
            ),
            line(
                0.64,
                "fault",
                r#""request":2,"status":503"#,
                r#""rule":"cli","fault":"http_status","params":{"phase":"response"},"#,
            ),
        ]
        .join("\n");
        let m = from_lines([log.lines()]);
        let r = &m.conns[1].requests;
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(
            (r[1].status, r[1].grpc.as_deref()),
            (Some(200), Some("DATA_LOSS (15): lost"))
        );
        assert_eq!((r[2].status, r[2].grpc.as_deref()), (Some(503), None));
    }

    /// Past its bounds the model counts instead of drawing: every
    /// connection and fault is in the summary, the first `MAX_CONNS` on
    /// the timeline; a `truncated` line is noted.
    #[test]
    fn a_big_log_is_drawn_in_part_and_counted_in_full() {
        let n = MAX_CONNS as u64 + 500;
        let mut log = LOG.lines().take(2).collect::<Vec<_>>().join("\n");
        log.push('\n');
        for i in 0..n {
            let base = format!(
                r#""conn":{i},"client":"127.0.0.1:{}","dst":"127.0.0.1:80","proxy":"p""#,
                1000 + i % 5000
            );
            log +=
                &format!(r#"{{"time":"2026-12-01T10:00:01.000Z","t":1.0,"event":"open",{base}}}"#);
            log += "\n";
            log += &format!(
                r#"{{"time":"2026-12-01T10:00:01.000Z","t":1.1,"event":"fault",{base},"rule":"cli","fault":"reset","direction":"downstream","params":{{}}}}"#
            );
            log += "\n";
            // The last 10 stay open.
            if i < n - 10 {
                log += &format!(
                    r#"{{"time":"2026-12-01T10:00:01.000Z","t":1.2,"event":"close",{base},"outcome":"reset","bytes_upstream":1,"bytes_downstream":2,"duration_ms":200}}"#
                );
                log += "\n";
            }
        }
        log += r#"{"time":"2026-12-01T10:00:02.000Z","t":2.0,"event":"truncated","max_bytes":4096,"written_bytes":4000}"#;
        let m = from_lines([log.lines()]);
        assert_eq!(m.conns.len(), MAX_CONNS);
        let s = &m.summary;
        assert_eq!(s.conns, n);
        assert_eq!(s.by_outcome["reset"], n - 10);
        assert_eq!(s.by_outcome["open"], 10);
        assert_eq!(s.bytes_down, 2 * (n - 10));
        assert_eq!(s.fault_events, n);
        assert_eq!(s.faults, vec![("cli".into(), "reset".into(), n, n)]);
        assert_eq!(m.runs[0].truncated, Some(4096));
        let page = html::render(&m);
        assert!(page.contains("The timeline draws 25000 of 25500 connections"));
        assert!(page.contains("reached its size (4096 bytes"));
    }

    #[test]
    fn several_logs_share_one_axis_by_wall_clock() {
        let later = LOG.replace("10:00:00", "10:00:05");
        let m = from_lines([LOG.lines(), later.lines()]);
        assert_eq!(m.conns.len(), 4);
        assert!((m.runs[1].offset - 5.0).abs() < 1e-6);
        assert!(m.conns.iter().any(|c| (c.open - 5.1).abs() < 1e-6));
    }
}
