//! Request records: the event log's `attempt` lines read back, one
//! compact [`Rec`] per HTTP attempt, and grouped into logical requests by
//! a rule the user names ([`GroupBy`]). Read as a stream, a line at a
//! time, into fixed-size records: a log of a million attempts is judged in
//! well under 100 MB.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::events::schema::{Event, Line};
use serde_json::Value;

/// A string kept once, named by its index (0: none).
pub(crate) type Sym = u32;

/// The strings the records name, each kept once.
#[derive(Default)]
pub(crate) struct Syms {
    names: Vec<String>,
    index: HashMap<String, Sym>,
}

impl Syms {
    fn new() -> Syms {
        Syms {
            names: vec![String::new()],
            index: HashMap::new(),
        }
    }

    pub(crate) fn intern(&mut self, s: &str) -> Sym {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.names.len() as Sym;
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    pub(crate) fn name(&self, s: Sym) -> &str {
        &self.names[s as usize]
    }
}

/// How an attempt failed, as the client met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Failure {
    None,
    /// The connection or stream was reset.
    Reset,
    /// The answer began and did not end.
    Truncated,
    /// No answer began before the attempt ended (the client gave up, or
    /// the connection ended).
    NoResponse,
    /// The connection closed where the answer would be.
    Closed,
    /// An error event ended the stream.
    StreamError,
    /// Relayed as bytes from there on: what the upstream sent.
    Unfollowed,
    Other,
}

impl Failure {
    fn of(s: Option<&str>) -> Failure {
        match s {
            None => Failure::None,
            Some("reset") => Failure::Reset,
            Some("truncated") => Failure::Truncated,
            Some("no_response") => Failure::NoResponse,
            Some("closed") => Failure::Closed,
            Some("stream_error") => Failure::StreamError,
            Some("unfollowed") => Failure::Unfollowed,
            Some(_) => Failure::Other,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Failure::None => "",
            Failure::Reset => "reset",
            Failure::Truncated => "truncated",
            Failure::NoResponse => "no_response",
            Failure::Closed => "closed",
            Failure::StreamError => "stream_error",
            Failure::Unfollowed => "unfollowed",
            Failure::Other => "error",
        }
    }
}

/// One HTTP attempt, as its `attempt` line says it.
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    /// When it began (seconds on the log's clock, `t`).
    pub start: f64,
    /// How long it took, in milliseconds.
    pub ms: f32,
    /// Until its head went out, its first body byte (NaN: never).
    pub head_ms: f32,
    pub first_ms: f32,
    /// `retry-after` given, in seconds (NaN: none).
    pub retry_after: f32,
    /// What ties it to its request's other attempts, hashed (0: none):
    /// the body without its model's value, or under `header:NAME`, that
    /// header's value.
    pub body: u64,
    /// The idempotency key, hashed (0: none).
    pub idem: u64,
    pub host: Sym,
    pub model: Sym,
    /// Its method and path: `POST /v1/messages`.
    pub request: Sym,
    /// The faults that acted on it, as bits of [`Records::fault_names`].
    pub faults: u32,
    /// The status the client got (0: none).
    pub status: u16,
    /// The upstream's own status, when it answered (0: it did not).
    pub upstream: u16,
    /// `x-stainless-retry-count` (-1: none).
    pub retry_count: i16,
    pub failure: Failure,
}

impl Rec {
    pub(crate) fn end(&self) -> f64 {
        self.start + f64::from(self.ms) / 1000.0
    }

    /// A whole answer, not an error status.
    pub(crate) fn ok(&self) -> bool {
        matches!(self.failure, Failure::None | Failure::Unfollowed)
            && (200..400).contains(&self.status)
    }

    /// A failure of availability: no whole answer, or a 5xx (529 too) or
    /// 408. A 429 is not one (the service is up, and says when to come
    /// back), nor any other 4xx.
    pub(crate) fn unavailable(&self) -> bool {
        !matches!(self.failure, Failure::None | Failure::Unfollowed)
            || self.status >= 500
            || self.status == 408
    }

    /// What the client got, in a word: the status, or how it failed.
    pub(crate) fn outcome(&self) -> String {
        match (self.failure, self.status) {
            (Failure::None, s) => s.to_string(),
            (f, 0) => f.as_str().to_string(),
            (f, s) => format!("{s} {}", f.as_str()),
        }
    }
}

/// How attempts are grouped into logical requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupBy {
    /// Each attempt is its own request.
    Attempt,
    /// Attempts with the same value of this header (lowercase); one
    /// without it stands alone.
    Header(String),
    /// The SDKs' retry count (`x-stainless-retry-count`): 0 begins a
    /// request, `k` joins the open one with the same body whose last
    /// attempt counted `k - 1`.
    RetryCount,
    /// The request body without its `model`: an attempt joins the open
    /// request with the same body, one whose last attempt did not
    /// succeed (a retry, or a fallback to another model).
    Body,
    /// `header:idempotency-key` where attempts carry one; else the retry
    /// count, where they carry it, with a fallback to another target
    /// joining as under `body`; else `body`.
    Auto,
}

impl GroupBy {
    pub(crate) fn parse(s: &str) -> Result<GroupBy, String> {
        let s = s.trim();
        if let Some(h) = s.strip_prefix("header:") {
            let h = h.trim().to_ascii_lowercase();
            if h.is_empty()
                || !h
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!("group_by {s:?}: a header's name after \"header:\""));
            }
            return Ok(GroupBy::Header(h));
        }
        match s {
            "attempt" => Ok(GroupBy::Attempt),
            "retry-count" | "x-stainless-retry-count" => Ok(GroupBy::RetryCount),
            "body" => Ok(GroupBy::Body),
            "auto" => Ok(GroupBy::Auto),
            _ => Err(format!(
                "group_by {s:?}: expected auto, body, retry-count, attempt or header:NAME"
            )),
        }
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupBy::Attempt => f.write_str("attempt"),
            GroupBy::Header(h) => write!(f, "header:{h}"),
            GroupBy::RetryCount => f.write_str("retry-count"),
            GroupBy::Body => f.write_str("body"),
            GroupBy::Auto => f.write_str("auto"),
        }
    }
}

/// Logical requests: each one's attempts (indices into the records, in
/// the order they began), kept flat: a million requests of one attempt
/// take 8 MB, not a million vectors.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Groups {
    attempts: Vec<u32>,
    /// Where each request's attempts begin in `attempts`, and one more.
    starts: Vec<u32>,
}

impl Groups {
    /// From each attempt's request number (requests numbered in the order
    /// their first attempt began).
    fn of(ids: &[u32], n: usize) -> Groups {
        let mut starts = vec![0u32; n + 1];
        for &g in ids {
            starts[g as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut fill = starts.clone();
        let mut attempts = vec![0u32; ids.len()];
        for (i, &g) in ids.iter().enumerate() {
            attempts[fill[g as usize] as usize] = i as u32;
            fill[g as usize] += 1;
        }
        Groups { attempts, starts }
    }

    pub(crate) fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u32]> {
        self.starts
            .windows(2)
            .map(|w| &self.attempts[w[0] as usize..w[1] as usize])
    }

    #[cfg(test)]
    pub(crate) fn to_vecs(&self) -> Vec<Vec<u32>> {
        self.iter().map(<[u32]>::to_vec).collect()
    }
}

impl std::ops::Index<usize> for Groups {
    type Output = [u32];

    fn index(&self, g: usize) -> &[u32] {
        &self.attempts[self.starts[g] as usize..self.starts[g + 1] as usize]
    }
}

/// A log's attempts, in the order they began, and their logical requests.
pub(crate) struct Records {
    pub recs: Vec<Rec>,
    pub syms: Syms,
    pub fault_names: Vec<String>,
    /// Each logical request: its attempts' indices, in order.
    pub groups: Groups,
    /// The rule that made them, as applied (`auto` says what it chose).
    pub rule: String,
    /// When the log began and ended (its first and last `t`).
    pub span: (f64, f64),
    /// A `stop_if` line says the stop condition was crossed.
    pub stopped: bool,
}

/// FNV-1a of a string (never 0, so that 0 can mean none).
fn hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// `retry-after` in seconds: a number of them (an HTTP date is taken as
/// none: the log has no wall clock per attempt to measure it against).
fn retry_after_secs(s: &str) -> f32 {
    s.trim().parse::<f32>().unwrap_or(f32::NAN)
}

/// Reads every `attempt` line of `logs`, in the order they began, and
/// groups them by `rule`.
pub(crate) fn read(logs: &[&Path], rule: &GroupBy) -> Result<Records, String> {
    let mut recs = Vec::new();
    let mut syms = Syms::new();
    let mut fault_names: Vec<String> = Vec::new();
    let mut span = (f64::INFINITY, f64::NEG_INFINITY);
    // An offset per log, so that several runs' logs do not overlap.
    let mut offset = 0.0;
    let mut stopped = false;
    for path in logs {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (last, stop) = read_one(file, rule, offset, &mut recs, &mut syms, &mut fault_names)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        stopped |= stop;
        span.0 = span.0.min(offset);
        span.1 = span.1.max(offset + last);
        offset += last + 1.0;
    }
    if !span.0.is_finite() {
        span = (0.0, 0.0);
    }
    // In place: a stable sort would take half the records again.
    recs.sort_unstable_by(|a, b| a.start.total_cmp(&b.start));
    recs.shrink_to_fit();
    let (groups, rule) = group(&recs, rule);
    Ok(Records {
        recs,
        syms,
        fault_names,
        groups,
        rule,
        span,
        stopped,
    })
}

fn read_one(
    file: impl Read,
    rule: &GroupBy,
    offset: f64,
    recs: &mut Vec<Rec>,
    syms: &mut Syms,
    fault_names: &mut Vec<String>,
) -> Result<(f64, bool), String> {
    // The log's last `t`, and whether it says its stop condition crossed.
    let (mut last, mut stopped) = (0.0f64, false);
    let mut skipped = 0u64;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = String::new();
    let group_header = match rule {
        GroupBy::Header(h) => Some(h.as_str()),
        _ => None,
    };
    for n in 1usize.. {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("line {n}: {e}")),
        }
        let text = line.trim_end();
        if text.is_empty() {
            continue;
        }
        // Most lines are not attempts: told apart without parsing them.
        if !text.contains("\"event\":\"attempt\"") {
            if let Some(t) = quick_t(text) {
                last = last.max(t);
            }
            stopped |= text.contains("\"event\":\"stop_if\"");
            continue;
        }
        let l: Line<'_> = match serde_json::from_str(text) {
            Ok(l) => l,
            // JSON, but not an attempt of the schema (a hand-made or
            // foreign line): skipped and said, the rest still judged.
            Err(e) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                if skipped == 0 {
                    tracing::warn!(
                        "line {n}: an attempt line not of the event log's schema, skipped ({e})"
                    );
                }
                skipped += 1;
                continue;
            }
            Err(e) => return Err(format!("line {n}: not an event line ({e})")),
        };
        last = last.max(l.t);
        let Event::Attempt(a) = l.event else { continue };
        let h = &a.http;
        let mut faults = 0u32;
        for f in &a.faults {
            let i = match fault_names.iter().position(|x| x == f) {
                Some(i) => i,
                None => {
                    fault_names.push(f.to_string());
                    fault_names.len() - 1
                }
            };
            if i < 32 {
                faults |= 1 << i;
            }
        }
        let header = |name: &str| h.headers.get(name).map(|v| v.as_ref());
        recs.push(Rec {
            start: offset + a.start,
            ms: a.ms as f32,
            head_ms: a.head_ms.map_or(f32::NAN, |v| v as f32),
            first_ms: a.first_ms.map_or(f32::NAN, |v| v as f32),
            retry_after: h.retry_after.as_deref().map_or(f32::NAN, retry_after_secs),
            body: match group_header {
                Some(g) => header(g).map_or(0, hash),
                None => h
                    .body
                    .as_deref()
                    .and_then(|b| u64::from_str_radix(b, 16).ok())
                    .map_or(0, |b| b.max(1)),
            },
            idem: header("idempotency-key").map_or(0, hash),
            host: syms.intern(h.host.as_deref().unwrap_or("")),
            model: syms.intern(h.model.as_deref().unwrap_or("")),
            request: syms.intern(&format!(
                "{} {}",
                h.method,
                h.path.split('?').next().unwrap_or("")
            )),
            faults,
            status: h.status.unwrap_or(0),
            upstream: h.upstream_status.unwrap_or(0),
            retry_count: header("x-stainless-retry-count")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(-1),
            failure: Failure::of(a.error.as_deref()),
        });
    }
    if skipped > 1 {
        tracing::warn!("{skipped} attempt lines not of the event log's schema were skipped");
    }
    Ok((last, stopped))
}

/// A line's `t`, read without parsing the line (it comes second).
fn quick_t(text: &str) -> Option<f64> {
    let i = text.find("\"t\":")? + 4;
    let rest = &text[i..];
    let end = rest.find([',', '}'])?;
    rest[..end].parse().ok()
}

/// The logical requests of `recs` (in the order they began) by `rule`;
/// and the rule as applied.
fn group(recs: &[Rec], rule: &GroupBy) -> (Groups, String) {
    let chosen = match rule {
        GroupBy::Auto if !recs.is_empty() && recs.iter().all(|r| r.idem != 0) => (
            GroupBy::Header("idempotency-key".into()),
            "auto: header:idempotency-key (every attempt carries one)",
        ),
        GroupBy::Auto if !recs.is_empty() && recs.iter().all(|r| r.retry_count >= 0) => (
            GroupBy::RetryCount,
            "auto: retry-count (every attempt carries x-stainless-retry-count)",
        ),
        GroupBy::Auto => (
            GroupBy::Body,
            "auto: body (the request body without its model)",
        ),
        r => (r.clone(), ""),
    };
    let said = match chosen.1 {
        "" => chosen.0.to_string(),
        s => s.to_string(),
    };
    // Each attempt's request, numbered as requests begin.
    let mut ids: Vec<u32> = Vec::with_capacity(recs.len());
    let mut n = 0u32;
    let mut fresh = || {
        n += 1;
        n - 1
    };
    match &chosen.0 {
        GroupBy::Attempt => {
            for _ in recs {
                ids.push(fresh());
            }
        }
        GroupBy::Header(h) => {
            let idem = h == "idempotency-key";
            let mut by: HashMap<u64, u32> = HashMap::new();
            for r in recs {
                let k = if idem { r.idem } else { r.body };
                let g = match k {
                    0 => fresh(),
                    k => *by.entry(k).or_insert_with(&mut fresh),
                };
                ids.push(g);
            }
        }
        GroupBy::RetryCount | GroupBy::Body | GroupBy::Auto => {
            let counted = chosen.0 == GroupBy::RetryCount;
            // The open request per body: its number, its last attempt.
            let mut open: HashMap<u64, (u32, u32)> = HashMap::new();
            for (i, r) in recs.iter().enumerate() {
                let at = open.get(&r.body).copied().filter(|_| r.body != 0);
                let joins = match at {
                    None => false,
                    Some((_, last)) => {
                        let prev = &recs[last as usize];
                        let retry = r.retry_count > 0 && prev.retry_count == r.retry_count - 1;
                        let fallback = (r.host, r.model) != (prev.host, prev.model) && !prev.ok();
                        match counted {
                            // A fresh call (count 0) joins only as a fallback
                            // to another target after a failure.
                            true => retry || (r.retry_count <= 0 && fallback),
                            false => !prev.ok() && prev.end() <= r.start + 1e-3,
                        }
                    }
                };
                let g = match (joins, at) {
                    (true, Some((g, _))) => g,
                    _ => fresh(),
                };
                ids.push(g);
                if r.body != 0 {
                    // A request that succeeded is over: its body is free
                    // for the next (the same prompt sent again).
                    if r.ok() {
                        open.remove(&r.body);
                    } else {
                        open.insert(r.body, (g, i as u32));
                    }
                }
            }
        }
    }
    (Groups::of(&ids, n as usize), said)
}

/// No records (a run that could not be read).
pub(crate) fn empty() -> Records {
    Records {
        recs: Vec::new(),
        syms: Syms::new(),
        fault_names: Vec::new(),
        groups: Groups::default(),
        rule: String::new(),
        span: (0.0, 0.0),
        stopped: false,
    }
}

/// A logical request's number and attempts, as messages name it:
/// `#3 (POST /v1/messages, 3 attempts from 1.20s)`.
pub(crate) fn label(r: &Records, g: usize) -> String {
    let a = &r.groups[g];
    let first = &r.recs[a[0] as usize];
    format!(
        "#{} ({}, {} attempt{} from {:.2}s)",
        g + 1,
        r.syms.name(first.request),
        a.len(),
        if a.len() == 1 { "" } else { "s" },
        first.start - r.span.0
    )
}

/// An attempt's target: its host, and its model where there is one.
pub(crate) fn target(r: &Records, rec: &Rec) -> String {
    match rec.model {
        0 => r.syms.name(rec.host).to_string(),
        m => format!("{}/{}", r.syms.name(rec.host), r.syms.name(m)),
    }
}

/// Whether `rec` goes to `name`: its host, its model, or `host/model`.
pub(crate) fn targets(r: &Records, rec: &Rec, name: &str) -> bool {
    r.syms.name(rec.host) == name
        || (rec.model != 0 && r.syms.name(rec.model) == name)
        || target(r, rec) == name
}

/// An attempt's method and path.
pub(crate) fn method_path<'a>(r: &'a Records, rec: &Rec) -> (&'a str, &'a str) {
    r.syms.name(rec.request).split_once(' ').unwrap_or(("", ""))
}

/// One attempt as JSON, with its logical request (`g`) and its number in
/// it (`k`, from 0).
pub(crate) fn attempt_json(r: &Records, g: usize, k: usize, rec: &Rec) -> Value {
    let num = |v: f32| match v.is_nan() {
        true => Value::Null,
        false => Value::from(f64::from(v)),
    };
    let (method, path) = method_path(r, rec);
    serde_json::json!({
        "request": g + 1,
        "attempt": k + 1,
        "start": ((rec.start - r.span.0) * 1e6).round() / 1e6,
        "host": r.syms.name(rec.host),
        "model": (rec.model != 0).then(|| r.syms.name(rec.model)),
        "method": method,
        "path": path,
        "status": (rec.status != 0).then_some(rec.status),
        "error": (rec.failure != Failure::None).then(|| rec.failure.as_str()),
        "head_ms": num(rec.head_ms),
        "first_ms": num(rec.first_ms),
        "ms": f64::from(rec.ms),
        "retry_after": num(rec.retry_after),
        "faults": fault_list(r, rec.faults),
        "retry_count": (rec.retry_count >= 0).then_some(rec.retry_count),
    })
}

/// The names of the faults in `bits`.
pub(crate) fn fault_list(r: &Records, bits: u32) -> Vec<&str> {
    (0..32)
        .filter(|i| bits & (1 << i) != 0)
        .filter_map(|i| r.fault_names.get(i).map(String::as_str))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Records made by hand: `(start s, ms, status, failure, host, model,
    /// retry count, retry_after s)`; one body for all, unless `bodies`.
    pub(crate) fn make(attempts: &[(f64, f32, u16, Failure, &str, &str)]) -> Records {
        make_with(attempts, |_, _| {})
    }

    pub(crate) fn make_with(
        attempts: &[(f64, f32, u16, Failure, &str, &str)],
        edit: impl Fn(usize, &mut Rec),
    ) -> Records {
        let mut syms = Syms::new();
        let mut recs = Vec::new();
        for (i, &(start, ms, status, failure, host, model)) in attempts.iter().enumerate() {
            let mut r = Rec {
                start,
                ms,
                head_ms: f32::NAN,
                first_ms: f32::NAN,
                retry_after: f32::NAN,
                body: 7,
                idem: 0,
                host: syms.intern(host),
                model: syms.intern(model),
                request: syms.intern("POST /v1/messages"),
                faults: 0,
                status,
                upstream: 0,
                retry_count: -1,
                failure,
            };
            edit(i, &mut r);
            recs.push(r);
        }
        recs.sort_by(|a, b| a.start.total_cmp(&b.start));
        let (groups, rule) = group(&recs, &GroupBy::Auto);
        Records {
            recs,
            syms,
            fault_names: vec!["http_status".into()],
            groups,
            rule,
            span: (0.0, 100.0),
            stopped: false,
        }
    }

    const OK: Failure = Failure::None;

    #[test]
    fn an_attempt_line_not_of_the_schema_is_skipped_not_fatal() {
        let good = r#"{"v":1,"time":"2026-12-01T10:00:00.000Z","t":1.0,"event":"attempt","conn":1,"client":"c","dst":"d","start":0.5,"http":{"request":0,"proto":"http/1.1","method":"POST","path":"/v1/messages","status":200},"error":null,"ms":5.0,"faults":[]}"#;
        let bad = r#"{"t":2.0,"event":"attempt","http":{"status":500}}"#;
        let log = format!("{bad}\n{good}\n");
        let mut recs = Vec::new();
        let (mut syms, mut names) = (Syms::new(), Vec::new());
        let (last, _) = read_one(
            log.as_bytes(),
            &GroupBy::Auto,
            0.0,
            &mut recs,
            &mut syms,
            &mut names,
        )
        .unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].status, 200);
        assert_eq!(last, 1.0);
        // Not JSON at all is still an error, naming the line.
        let e = read_one(
            "not json \"event\":\"attempt\"\n".as_bytes(),
            &GroupBy::Auto,
            0.0,
            &mut recs,
            &mut syms,
            &mut names,
        )
        .unwrap_err();
        assert!(e.starts_with("line 1: not an event line"), "{e}");
    }

    #[test]
    fn failed_attempts_and_a_fallback_make_one_request_a_success_ends_it() {
        let r = make(&[
            (0.0, 10.0, 529, OK, "a", "m1"),
            (0.5, 10.0, 529, OK, "a", "m1"),
            (1.5, 10.0, 200, OK, "a", "m2"),
            // The same prompt again: a new request.
            (3.0, 10.0, 200, OK, "a", "m1"),
        ]);
        assert_eq!(r.groups.to_vecs(), vec![vec![0, 1, 2], vec![3]]);
        assert!(r.rule.starts_with("auto: body"));
    }

    #[test]
    fn the_retry_count_tells_a_fresh_call_from_a_retry() {
        let counts = [0, 1, 0, 0];
        let r = make_with(
            &[
                (0.0, 10.0, 529, OK, "a", "m1"),
                (0.5, 10.0, 200, OK, "a", "m1"),
                (1.0, 10.0, 529, OK, "a", "m1"),
                // A fresh call to the same target after a failure: a new
                // request (a naive client's next one).
                (2.0, 10.0, 529, OK, "a", "m1"),
            ],
            |i, r| r.retry_count = counts[i],
        );
        assert_eq!(r.groups.to_vecs(), vec![vec![0, 1], vec![2], vec![3]]);
        assert!(r.rule.contains("retry-count"));
    }

    #[test]
    fn a_header_groups_and_an_attempt_without_it_stands_alone() {
        let mut r = make_with(
            &[
                (0.0, 1.0, 500, OK, "a", ""),
                (1.0, 1.0, 200, OK, "a", ""),
                (2.0, 1.0, 200, OK, "a", ""),
            ],
            |i, r| r.idem = [5, 5, 0][i],
        );
        let (g, rule) = group(&r.recs, &GroupBy::Header("idempotency-key".into()));
        r.groups = g;
        assert_eq!(r.groups.to_vecs(), vec![vec![0, 1], vec![2]]);
        assert_eq!(rule, "header:idempotency-key");
        assert!(group(&[], &GroupBy::Auto).0.is_empty());
    }

    #[test]
    fn group_by_is_parsed_or_refused_clearly() {
        assert_eq!(
            GroupBy::parse("header:X-Request-Id").unwrap(),
            GroupBy::Header("x-request-id".into())
        );
        assert!(GroupBy::parse("header:").unwrap_err().contains("header"));
        assert!(
            GroupBy::parse("bodies")
                .unwrap_err()
                .contains("expected auto")
        );
    }

    #[test]
    fn a_record_stays_small() {
        // A million of them judged in well under 100 MB.
        assert!(
            std::mem::size_of::<Rec>() <= 64,
            "{}",
            std::mem::size_of::<Rec>()
        );
    }

    #[test]
    fn quick_t_reads_the_second_field() {
        assert_eq!(quick_t(r#"{"time":"x","t":1.5,"event":"open"}"#), Some(1.5));
    }
}
