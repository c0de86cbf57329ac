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

pub(crate) mod html;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

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
    /// DNS faults: the resolve phase, which belongs to no connection.
    pub dns: Vec<DnsMark>,
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
    /// When this run's time 0 falls on the report's axis, in seconds.
    pub offset: f64,
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
    /// The connection before this one from the same client host to the same
    /// destination (an index into [`Model::conns`]): a retry, or the next
    /// of a pool.
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
    /// from the same client host.
    pub retries: u64,
}

/// Reads the logs at `paths` into a model.
pub(crate) fn read(paths: &[&Path]) -> std::io::Result<Model> {
    let mut logs = Vec::new();
    for p in paths {
        let f = std::fs::File::open(p).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot read {}: {e}", p.display()))
        })?;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(f).lines() {
            lines.push(line?);
        }
        logs.push(lines);
    }
    Ok(from_lines(
        logs.iter().map(|l| l.iter().map(String::as_str)),
    ))
}

/// A wall-clock origin of a log: its first line's `time` minus its `t`.
fn origin(v: &Value) -> Option<f64> {
    let time = humantime::parse_rfc3339(v.get("time")?.as_str()?).ok()?;
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some(secs - v.get("t")?.as_f64()?)
}

/// Builds the model from each log's lines.
pub(crate) fn from_lines<'a, L, I>(logs: L) -> Model
where
    L: IntoIterator<Item = I>,
    I: IntoIterator<Item = &'a str>,
{
    let mut m = Model::default();
    let mut parsed: Vec<Vec<Value>> = Vec::new();
    for lines in logs {
        let mut vals = Vec::new();
        for line in lines {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(v @ Value::Object(_)) => vals.push(v),
                _ => m.skipped += 1,
            }
        }
        parsed.push(vals);
    }
    let origins: Vec<Option<f64>> = parsed.iter().map(|v| v.first().and_then(origin)).collect();
    let base = origins
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let mut builder = Builder::default();
    for (i, vals) in parsed.iter().enumerate() {
        let offset = match origins[i] {
            Some(o) if base.is_finite() => o - base,
            _ => 0.0,
        };
        builder.log(&mut m, i, offset, vals);
    }
    builder.finish(&mut m);
    m
}

#[derive(Default)]
struct Builder {
    /// (run, conn id) → index into `conns`, for connections seen.
    index: HashMap<(usize, u64), usize>,
    conns: Vec<Conn>,
    /// Group names seen, with their key.
    groups: Vec<String>,
    group_index: HashMap<String, usize>,
    /// (rule, fault) → its hits and the connections it hit.
    faults: BTreeMap<(String, String), Hits>,
    /// DNS queries that were answered: (name, asked, answered, answer), to
    /// place each connection's resolve phase.
    resolves: Vec<(String, f64, f64, String)>,
}

/// A DNS answer: asked, answered (seconds on the axis), the answer.
type Answered = (f64, f64, String);

/// How long before a connection its name's answer may have come to count
/// as that connection's resolve phase.
const RESOLVE_WINDOW: f64 = 30.0;

/// How often a fault acted, and on which connections ((run, conn)).
type Hits = (u64, std::collections::HashSet<(usize, u64)>);

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn params_text(v: &Value) -> String {
    match v.get("params").and_then(Value::as_object) {
        Some(p) => p
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k}={s}"),
                None => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => String::new(),
    }
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
    fn conn(&mut self, run: usize, offset: f64, v: &Value) -> Option<usize> {
        let id = v.get("conn")?.as_u64()?;
        if let Some(&i) = self.index.get(&(run, id)) {
            return Some(i);
        }
        let dst = match v.get("host").and_then(Value::as_str) {
            Some(h) => format!("{h} ({})", s(v, "dst")),
            None => s(v, "dst"),
        };
        let key = match v.get("proxy").and_then(Value::as_str) {
            Some(p) => format!("{p} → {dst}"),
            None => dst.clone(),
        };
        let next = self.groups.len();
        let group = *self.group_index.entry(key.clone()).or_insert(next);
        if group == next {
            self.groups.push(key);
        }
        let t = v.get("t").and_then(Value::as_f64).unwrap_or(0.0) + offset;
        self.conns.push(Conn {
            id,
            run,
            group,
            client: s(v, "client"),
            dst,
            host: s(v, "host"),
            open: t,
            outcome: "open".into(),
            class: "open",
            ..Default::default()
        });
        let i = self.conns.len() - 1;
        self.index.insert((run, id), i);
        Some(i)
    }

    fn log(&mut self, m: &mut Model, run: usize, offset: f64, vals: &[Value]) {
        let mut r = Run {
            offset,
            ..Default::default()
        };
        for v in vals {
            let t = v.get("t").and_then(Value::as_f64).unwrap_or(0.0) + offset;
            m.end = m.end.max(t);
            match v.get("event").and_then(Value::as_str).unwrap_or("") {
                "start" => {
                    r.seed = v.get("seed").and_then(Value::as_u64);
                    r.mode = s(v, "mode");
                    r.version = s(v, "version");
                    r.started = s(v, "time");
                }
                "plan" => self.plan(m, &mut r, v, offset),
                "faults_end" => {
                    let at = v.get("at_ms").and_then(Value::as_f64).unwrap_or(0.0) / 1e3;
                    r.faults_end = Some(at);
                }
                "open" => {
                    self.conn(run, offset, v);
                }
                "close" => {
                    let Some(i) = self.conn(run, offset, v) else {
                        m.skipped += 1;
                        continue;
                    };
                    let c = &mut self.conns[i];
                    c.close = Some(t);
                    let ms = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x / 1e3);
                    // The close line's own duration places the open when the
                    // open line is missing (or the connection never reached
                    // the relay).
                    if let Some(d) = ms("duration_ms") {
                        c.open = c.open.min(t - d);
                    }
                    // Under interception the SYN came before the open: the
                    // handshake (held by the SYN gate) is the connect phase.
                    let syn = ms("syn_ms").unwrap_or(0.0);
                    let open_line = t - ms("duration_ms").unwrap_or(0.0);
                    if syn > 0.0 {
                        c.open = c.open.min(open_line - syn);
                    }
                    let shift = open_line - c.open;
                    let after = |k: &str| ms(k).map(|x| x + shift);
                    c.dial = after("dial_ms");
                    c.first_down = after("first_byte_downstream_ms");
                    c.first_up = after("first_byte_upstream_ms");
                    if let Some(a) = v.get("activity") {
                        let list = |k: &str| -> Vec<u64> {
                            a.get(k)
                                .and_then(Value::as_array)
                                .map(|x| x.iter().filter_map(Value::as_u64).collect())
                                .unwrap_or_default()
                        };
                        let num = |k: &str| a.get(k).and_then(Value::as_f64).unwrap_or(0.0) / 1e3;
                        c.activity = Some(Activity {
                            start: num("start_ms") + shift,
                            bucket: num("bucket_ms"),
                            up: list("upstream"),
                            down: list("downstream"),
                        });
                    }
                    c.outcome = s(v, "outcome");
                    c.bytes_up = v.get("bytes_upstream").and_then(Value::as_u64).unwrap_or(0);
                    c.bytes_down = v
                        .get("bytes_downstream")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    c.path = s(v, "path");
                    c.class = class(&c.outcome, &c.errors);
                }
                "dns" => {
                    let d = &v["dns"];
                    if let Some(ms) = d.get("ms").and_then(Value::as_f64) {
                        self.resolves
                            .push((s(d, "name"), t - ms / 1e3, t, s(d, "answer")));
                    }
                    m.dns_queries += 1;
                    *m.dns_answers.entry(s(d, "answer")).or_default() += 1;
                }
                "fault" if v.get("dns").is_some() => {
                    let d = &v["dns"];
                    m.dns.push(DnsMark {
                        t,
                        client: s(v, "client"),
                        name: s(d, "name"),
                        qtype: s(d, "qtype"),
                        transport: s(d, "transport"),
                        rule: s(v, "rule"),
                        fault: s(v, "fault"),
                        params: params_text(v),
                    });
                }
                "fault" => {
                    let Some(i) = self.conn(run, offset, v) else {
                        m.skipped += 1;
                        continue;
                    };
                    let http = v.get("http");
                    let mark = Mark {
                        t,
                        rule: s(v, "rule"),
                        fault: s(v, "fault"),
                        direction: s(v, "direction"),
                        params: params_text(v),
                        request: http.and_then(|h| h.get("request")).and_then(Value::as_u64),
                    };
                    let e = self
                        .faults
                        .entry((mark.rule.clone(), mark.fault.clone()))
                        .or_default();
                    e.0 += 1;
                    e.1.insert((run, self.conns[i].id));
                    if let Some(h) = http {
                        // Answered (or aborted) by netchaos: the upstream
                        // never saw the request — or, after it
                        // (`phase = "response"`), its answer was replaced.
                        let injected = matches!(mark.fault.as_str(), "http_status" | "http_abort");
                        let after =
                            v.pointer("/params/phase").and_then(Value::as_str) == Some("response");
                        let n = h.get("request").and_then(Value::as_u64).unwrap_or(0);
                        let theirs = self.conns[i]
                            .requests
                            .iter()
                            .find(|r| r.n == n)
                            .and_then(|r| r.status);
                        let req = request(&mut self.conns[i], h, t);
                        req.injected |= injected;
                        if injected && after {
                            req.upstream = theirs;
                            // The upstream's gRPC status went with its answer.
                            if h.get("grpc_status").is_none() {
                                req.grpc = None;
                            }
                            if mark.fault == "http_abort" {
                                req.status = None;
                            }
                        }
                        req.faults.push(mark.fault.clone());
                    }
                    self.conns[i].faults.push(mark);
                }
                // The upstream's answer, and a gRPC call's end in its
                // trailers.
                "response" | "trailers" => {
                    let Some(i) = self.conn(run, offset, v) else {
                        m.skipped += 1;
                        continue;
                    };
                    if let Some(h) = v.get("http") {
                        request(&mut self.conns[i], h, t);
                    }
                }
                "error" => {
                    if let Some(i) = self.conn(run, offset, v) {
                        let c = &mut self.conns[i];
                        c.errors
                            .push(format!("{}: {}", s(v, "kind"), s(v, "detail")));
                        if c.close.is_some() {
                            c.class = class(&c.outcome, &c.errors);
                        }
                    }
                }
                "redial" => {
                    if let Some(i) = self.conn(run, offset, v) {
                        self.conns[i].redials += 1;
                    }
                }
                "paused" | "refused" | "goaway" => {}
                _ => m.skipped += 1,
            }
        }
        if let Some(at) = r.faults_end {
            m.windows.push(Band {
                from: offset,
                until: Some(offset + at),
                label: format!("faults on (--duration {at}s)"),
            });
        }
        m.runs.push(r);
    }

    fn plan(&mut self, m: &mut Model, r: &mut Run, v: &Value, offset: f64) {
        r.argv = v
            .get("argv")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        for p in v
            .get("profiles")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            r.profiles.push((s(p, "source"), s(p, "description")));
        }
        for rule in v
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = s(rule, "name");
            for f in rule
                .get("faults")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let kind = s(f, "fault");
                r.rules.push(format!("{name}: {kind} {}", params_text(f)));
                let from = f.get("active_from_ms").and_then(Value::as_f64);
                let until = f.get("active_until_ms").and_then(Value::as_f64);
                if from.is_some() || until.is_some() {
                    m.windows.push(Band {
                        from: offset + from.unwrap_or(0.0) / 1e3,
                        until: until.map(|u| offset + u / 1e3),
                        label: format!("{name}: {kind} active"),
                    });
                }
            }
        }
    }

    fn finish(mut self, m: &mut Model) {
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
        // the same group (the client's port changes with every connection).
        let mut last: HashMap<(usize, String), usize> = HashMap::new();
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
            c.prev = last.insert((c.group, host), i);
            s.retries += u64::from(c.prev.is_some());
            s.conns += 1;
            *s.by_outcome.entry(c.outcome.clone()).or_default() += 1;
            s.bytes_up += c.bytes_up;
            s.bytes_down += c.bytes_down;
            s.fault_events += c.faults.len() as u64;
            s.requests += c.requests.len() as u64;
            s.requests_injected += c.requests.iter().filter(|r| r.injected).count() as u64;
            for e in &c.errors {
                let kind = e.split(':').next().unwrap_or("").to_string();
                *s.errors.entry(kind).or_default() += 1;
            }
            c.faults
                .sort_by(|a, b| a.t.partial_cmp(&b.t).unwrap_or(std::cmp::Ordering::Equal));
            c.requests.sort_by_key(|r| r.n);
            m.end = m.end.max(c.close.unwrap_or(c.open));
        }
        s.faults = self
            .faults
            .into_iter()
            .map(|((rule, kind), (hits, conns))| (rule, kind, hits, conns.len() as u64))
            .collect();
        m.conns = conns;
        m.groups = self.groups;
    }
}

/// `ip` of `ip:port` (`[v6]:port` too).
fn client_host(client: &str) -> &str {
    match client.rsplit_once(':') {
        Some((h, _)) => h,
        None => client,
    }
}

/// The request `h` names on `c`, made on first mention.
fn request<'c>(c: &'c mut Conn, h: &Value, t: f64) -> &'c mut Request {
    let n = h.get("request").and_then(Value::as_u64).unwrap_or(0);
    let i = match c.requests.iter().position(|r| r.n == n) {
        Some(i) => i,
        None => {
            c.requests.push(Request {
                n,
                t,
                method: s(h, "method"),
                path: s(h, "path"),
                ..Default::default()
            });
            c.requests.len() - 1
        }
    };
    let r = &mut c.requests[i];
    if let Some(st) = h.get("status").and_then(Value::as_u64) {
        r.status = Some(st as u16);
    }
    if let Some(code) = h.get("grpc_status").and_then(Value::as_u64) {
        let name = crate::http::grpc::code_name(code).unwrap_or("unknown code");
        let message = h.get("grpc_message").and_then(Value::as_str);
        r.grpc = Some(match message {
            Some(m) => format!("{name} ({code}): {m}"),
            None => format!("{name} ({code})"),
        });
    }
    r.t = r.t.min(t);
    r
}

/// Writes the report of the logs at `logs` to `out`.
pub(crate) fn write(logs: &[&Path], out: &Path) -> std::io::Result<Model> {
    let model = read(logs)?;
    write_model(&model, out)?;
    Ok(model)
}

/// Renders `model` into the page at `out`.
pub(crate) fn write_model(model: &Model, out: &Path) -> std::io::Result<()> {
    let page = html::render(model);
    std::fs::write(out, page)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", out.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// `phase = "response"`: the upstream answered, netchaos replaced the
    /// answer (or lost it); the report keeps both.
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

    #[test]
    fn several_logs_share_one_axis_by_wall_clock() {
        let later = LOG.replace("10:00:00", "10:00:05");
        let m = from_lines([LOG.lines(), later.lines()]);
        assert_eq!(m.conns.len(), 4);
        assert!((m.runs[1].offset - 5.0).abs() < 1e-6);
        assert!(m.conns.iter().any(|c| (c.open - 5.1).abs() < 1e-6));
    }
}
