//! One HTTP attempt's record: the request as the client sent it (method,
//! path, host, the JSON body's top-level `model`, the headers that tie a
//! client's retries together) and what the client got — a status or an
//! error, time to the head, to the first body byte, to the end, the faults
//! that acted on it, the `retry-after` it was given. Begun when a request's
//! head is read, marked as its answer goes out, written as one `attempt`
//! line when both sides are done with it, however it ended: what
//! `netchaos records`, `--expect` and drills judge ([`crate::drill`]).
//!
//! Nothing is kept when there is no event log: [`Attempt::begin`] gives
//! `None`, and every mark is a no-op. Under `--record` an attempt also
//! carries the exchange's tape ([`super::tape`]), written as it drops.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::borrow::Cow;

use super::tape::Tape;
use crate::events::{ConnInfo, Events, ms, schema};

/// The request headers an attempt line keeps: those the SDKs and users
/// tie a logical request's attempts together with. Others are named with
/// `NETCHAOS_RECORD_HEADERS` (comma-separated).
const KEPT: &[&str] = &[
    "idempotency-key",
    "x-stainless-retry-count",
    "x-request-id",
    "x-client-request-id",
    "traceparent",
    "user-agent",
];

/// A value kept of a header, at most.
const MAX_VALUE: usize = 256;

/// The attempt of one request, shared by the two sides that follow it.
pub(crate) struct Attempt {
    events: Arc<Events>,
    conn: Arc<ConnInfo>,
    begun: Instant,
    /// When it began, on the event log's clock (`t`).
    start: f64,
    proto: &'static str,
    n: u64,
    method: String,
    path: String,
    host: Option<String>,
    headers: Vec<(String, String)>,
    marks: Mutex<Marks>,
    /// Its first body byte went out: later chunks take no lock.
    body_seen: std::sync::atomic::AtomicBool,
    /// The exchange as it passes, under `--record` ([`super::tape`]).
    tape: Option<Mutex<Tape>>,
}

impl std::fmt::Debug for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("n", &self.n)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// What happened to it so far.
#[derive(Default)]
struct Marks {
    /// The status the client is to get, and its `retry-after`, until its
    /// head goes out ([`Attempt::head_out`]).
    pending: Option<(u16, Option<String>)>,
    /// The status the client got: its head went out.
    status: Option<u16>,
    grpc: Option<u32>,
    /// Its head went out to the client.
    head: Option<Duration>,
    /// Its first body byte went out.
    first: Option<Duration>,
    /// Its answer went out whole.
    done: bool,
    /// How it failed, when it did: the first cause named.
    error: Option<&'static str>,
    faults: Vec<&'static str>,
    retry_after: Option<String>,
    model: Option<String>,
    body: Option<u64>,
    /// The upstream answered it (whatever the client then got).
    upstream: Option<u16>,
}

/// More headers to keep, named by the run (`--group-by header:NAME`).
static ALSO: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());

/// Keeps header `name` too (a run that groups attempts by it).
pub(crate) fn also_keep(name: &str) {
    let name = name.to_ascii_lowercase();
    let mut also = ALSO.write().unwrap_or_else(|e| e.into_inner());
    if !also.contains(&name) {
        also.push(name);
    }
}

/// Whether `name` (lowercase) is one the line keeps.
fn kept(name: &str) -> bool {
    static EXTRA: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let extra = EXTRA.get_or_init(|| {
        std::env::var("NETCHAOS_RECORD_HEADERS")
            .unwrap_or_default()
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect()
    });
    KEPT.contains(&name)
        || extra.iter().any(|e| e == name)
        || ALSO
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|e| e == name)
}

fn clip(s: &str) -> String {
    s.chars().take(MAX_VALUE).collect()
}

impl Attempt {
    /// The record of request `n` on `conn`, when there is a log to write
    /// it to.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin(
        events: &Arc<Events>,
        conn: &Arc<ConnInfo>,
        proto: &'static str,
        n: u64,
        method: &str,
        path: &str,
        host: Option<&str>,
        headers: &[(String, String)],
    ) -> Option<Arc<Attempt>> {
        if !events.logging() {
            return None;
        }
        // The mock's own answers are no upstream's to record.
        let tape = match conn.mock {
            Some(_) => None,
            None => Tape::begin(proto, method, path, host, headers).map(Mutex::new),
        };
        let headers = headers
            .iter()
            .filter_map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                kept(&k).then(|| (k, clip(v)))
            })
            .collect();
        Some(Arc::new(Attempt {
            events: events.clone(),
            conn: conn.clone(),
            begun: Instant::now(),
            start: events.now(),
            proto,
            n,
            method: method.to_string(),
            path: path.chars().take(MAX_VALUE).collect(),
            host: host.map(str::to_string),
            headers,
            marks: Mutex::default(),
            body_seen: Default::default(),
            tape,
        }))
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The status the client is to get (the upstream's, or netchaos's in
    /// its place), with its `retry-after`: the client's once its head goes
    /// out. The same status again without one keeps the one it had.
    pub(crate) fn status(&self, status: u16, retry_after: Option<&str>) {
        let mut m = self.marks();
        let kept = match &m.pending {
            Some((s, r)) if *s == status && retry_after.is_none() => r.clone(),
            _ => retry_after.map(clip),
        };
        m.pending = Some((status, kept));
    }

    /// The pending status becomes the client's.
    fn promote(m: &mut Marks) {
        if let Some((s, r)) = m.pending.take() {
            m.status = Some(s);
            m.retry_after = r;
        }
    }

    /// The upstream's own answer began with `status` (the client may
    /// still get another, or none: a lost answer).
    pub(crate) fn upstream(&self, status: u16) {
        self.marks().upstream = Some(status);
    }

    /// A gRPC call's status, as its head or trailers end it.
    pub(crate) fn grpc(&self, code: u32) {
        self.marks().grpc = Some(code);
    }

    /// A fault acted on it.
    pub(crate) fn fault(&self, name: &'static str) {
        let mut m = self.marks();
        if !m.faults.contains(&name) {
            m.faults.push(name);
        }
    }

    /// Its head goes out to the client now.
    pub(crate) fn head_out(&self) {
        let at = self.begun.elapsed();
        let mut m = self.marks();
        Self::promote(&mut m);
        m.head.get_or_insert(at);
    }

    /// A body byte goes out to the client now.
    pub(crate) fn body_out(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.body_seen.swap(true, Relaxed) {
            return;
        }
        let at = self.begun.elapsed();
        let mut m = self.marks();
        if m.first.is_none() {
            Self::promote(&mut m);
            m.head.get_or_insert(at);
            m.first = Some(at);
        }
    }

    /// Its answer went out whole.
    pub(crate) fn done(&self) {
        let at = self.begun.elapsed();
        let mut m = self.marks();
        Self::promote(&mut m);
        m.head.get_or_insert(at);
        m.done = true;
    }

    /// No answer at all: the connection ends where it would be
    /// (`http_abort`); a status the upstream gave is not the client's.
    pub(crate) fn no_answer(&self, why: &'static str) {
        let mut m = self.marks();
        m.pending = None;
        m.error.get_or_insert(why);
    }

    /// The rest of the connection passes as bytes, unread (a tunnel, or a
    /// response netchaos cannot follow): the client got what the upstream
    /// sent, whatever that was.
    pub(crate) fn unfollowed(&self) {
        let at = self.begun.elapsed();
        let mut m = self.marks();
        Self::promote(&mut m);
        m.head.get_or_insert(at);
        m.error.get_or_insert("unfollowed");
    }

    /// It failed so (`reset`, `truncated`, `stream_error` …): the first
    /// cause named is kept.
    pub(crate) fn failed(&self, why: &'static str) {
        self.marks().error.get_or_insert(why);
    }

    /// What a scan of its body found: the top-level `model`, the hash.
    pub(crate) fn scanned(&self, scan: &ModelScan) {
        let mut m = self.marks();
        if m.model.is_none()
            && let Some(model) = &scan.found
        {
            m.model = Some(clip(model));
        }
        m.body = scan.hash();
    }

    /// Whether the exchange is being recorded (`--record`).
    pub(crate) fn taping(&self) -> bool {
        self.tape.is_some()
    }

    fn tape(&self, f: impl FnOnce(&mut Tape)) {
        if let Some(t) = &self.tape {
            f(&mut t.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Request body bytes (de-chunked) go on to the upstream.
    pub(crate) fn request_bytes(&self, b: &[u8]) {
        self.tape(|t| t.request_body(b));
    }

    /// The request's body went on unread.
    pub(crate) fn request_unseen(&self) {
        self.tape(|t| t.spoil("its request body passed unread"));
    }

    /// What passes is not the upstream's answer as it came (a fault may
    /// act on it, or its bytes go by a path that does not tape them).
    pub(crate) fn not_taped(&self, why: &'static str) {
        self.tape(|t| t.spoil(why));
    }

    /// The upstream's head, as it came.
    pub(crate) fn upstream_head(&self, status: u16, headers: &[(String, String)]) {
        self.tape(|t| t.head(status, headers));
    }

    /// Response body bytes (de-chunked) go out to the client.
    pub(crate) fn response_bytes(&self, b: &[u8]) {
        self.tape(|t| t.response_body(b));
    }

    /// The JSON body's top-level `model`.
    pub(crate) fn model(&self, model: &str) {
        self.marks().model.get_or_insert_with(|| clip(model));
    }

    /// Its line (the connection's fields left to the writer), and whether
    /// it failed (no whole answer, or a status of 400 or more).
    fn line(&self) -> (schema::Attempt<'_>, bool) {
        let m = self.marks();
        let total = self.begun.elapsed();
        // How it ended, as the client met it: a whole answer, or the
        // first failure named; else what was missing when both sides let
        // go (the client gave up, or the connection ended under it): the
        // answer had begun (its head went out) or not.
        let error = match (m.done, m.error, m.head) {
            (true, None, _) => None,
            (_, Some(e), _) => Some(e),
            (false, None, Some(_)) => Some("truncated"),
            (false, None, None) => Some("no_response"),
        };
        // Relayed unread is no failure of the client's answer.
        let failed = match error {
            Some("unfollowed") => m.status.is_none_or(|s| s >= 400),
            Some(_) => true,
            None => m.status.is_none_or(|s| s >= 400),
        };
        let owned = |s: &str| Cow::Owned(s.to_string());
        let http = schema::AttemptRequest {
            request: self.n,
            proto: Cow::Borrowed(self.proto),
            method: Cow::Borrowed(&self.method),
            path: Cow::Borrowed(&self.path),
            host: self.host.as_deref().map(Cow::Borrowed),
            model: m.model.as_deref().map(owned),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (Cow::Borrowed(k.as_str()), Cow::Borrowed(v.as_str())))
                .collect(),
            status: m.status,
            grpc_status: m.grpc,
            retry_after: m.retry_after.as_deref().map(owned),
            upstream_status: m.upstream,
            body: m.body.map(|b| Cow::Owned(format!("{b:016x}"))),
        };
        let line = schema::Attempt {
            conn: self.conn.line(),
            start: (self.start * 1e6).round() / 1e6,
            http,
            error: error.map(Cow::Borrowed),
            ms: ms(total),
            head_ms: m.head.map(ms),
            first_ms: m.first.map(ms),
            faults: m.faults.iter().map(|s| Cow::Borrowed(*s)).collect(),
        };
        (line, failed)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let Some(t) = self.tape.take() {
            let m = self.marks();
            // The upstream's own answer, whole, as it came: no fault acted.
            let whole = m.done
                && m.error.is_none()
                && m.faults.is_empty()
                && m.upstream.is_some()
                && m.status == m.upstream;
            drop(m);
            t.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .finish(whole);
        }
        let (line, failed) = self.line();
        self.events.attempt(line, failed);
    }
}

/// The `retry-after` of a reply netchaos makes in the upstream's place
/// (an HTTP/1.1 message, as `http_status` renders it).
pub(crate) fn retry_after_in(reply: &[u8]) -> Option<String> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    r.parse(reply).ok()?;
    r.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("retry-after"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
}

/// Marks on an attempt that may not be recorded: each a no-op on `None`.
pub(crate) trait Marking {
    fn mark(&self, f: impl FnOnce(&Attempt));
}

impl Marking for Option<Arc<Attempt>> {
    fn mark(&self, f: impl FnOnce(&Attempt)) {
        if let Some(a) = self {
            f(a);
        }
    }
}

/// Finds a JSON body's top-level `"model"` string as the body streams by,
/// without holding it: a small state machine over its bytes, the first
/// [`SCAN_LIMIT`] of them at most.
#[derive(Default)]
pub(crate) struct ModelScan {
    depth: u32,
    in_str: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    key: Option<Vec<u8>>,
    /// After the key `model`: 1 waits for `:`, 2 for its value.
    after_model: u8,
    value: Option<Vec<u8>>,
    seen: usize,
    found: Option<String>,
    over: bool,
    /// FNV-1a of the body without its `model`'s value: a logical
    /// request's attempts on other models share it (`group_by = "body"`).
    hash: u64,
}

/// Body bytes scanned for `model`, at most.
const SCAN_LIMIT: usize = 1024 * 1024;

impl ModelScan {
    /// Reads on; the value once found.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Option<&str> {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        if self.seen == 0 && !bytes.is_empty() {
            self.hash = 0xcbf2_9ce4_8422_2325;
        }
        for &b in bytes {
            if self.seen >= SCAN_LIMIT {
                break;
            }
            self.seen += 1;
            let before = self.value.is_some();
            if !self.over {
                self.step(b);
            }
            if !before && self.value.is_none() {
                self.hash = (self.hash ^ u64::from(b)).wrapping_mul(PRIME);
            }
        }
        self.found.as_deref()
    }

    /// The hash of what was read, without `model`'s value; none of an
    /// empty body.
    pub(crate) fn hash(&self) -> Option<u64> {
        (self.seen > 0).then_some(self.hash)
    }

    fn step(&mut self, b: u8) {
        if self.in_str {
            let collecting = self.key.as_mut().or(self.value.as_mut());
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
                return;
            } else if b == b'"' {
                self.in_str = false;
                if let Some(k) = self.key.take() {
                    self.after_model = u8::from(k == b"model");
                } else if let Some(v) = self.value.take() {
                    self.found = Some(String::from_utf8_lossy(&v).into_owned());
                    self.over = true;
                }
                return;
            }
            if let Some(c) = collecting
                && c.len() < MAX_VALUE
            {
                c.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_str = true;
                if self.depth == 1 && self.expect_key {
                    self.key = Some(Vec::new());
                    self.expect_key = false;
                } else if self.depth == 1 && self.after_model == 2 {
                    self.value = Some(Vec::new());
                }
                self.after_model = 0;
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
                self.after_model = 0;
                if self.depth == 1 && b == b'[' {
                    // Not an object: no top-level keys.
                    self.over = true;
                }
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                self.after_model = 0;
                if self.depth == 0 {
                    self.over = true;
                }
            }
            b':' if self.after_model == 1 => self.after_model = 2,
            b',' => {
                self.expect_key = self.depth == 1;
                self.after_model = 0;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => {
                if self.depth == 0 {
                    self.over = true;
                }
                self.after_model = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(parts: &[&str]) -> Option<String> {
        let mut s = ModelScan::default();
        let mut found = None;
        for p in parts {
            found = s.feed(p.as_bytes()).map(str::to_string);
        }
        found
    }

    #[test]
    fn the_top_level_model_is_found_wherever_it_is() {
        assert_eq!(scan(&[r#"{"model":"m1","x":1}"#]).as_deref(), Some("m1"));
        // After the messages, as the Anthropic SDK orders them, split
        // anywhere.
        let body = r#"{"max_tokens": 10, "messages": [{"role":"user","content":"the \"model\": \"no\""}], "model" : "claude-x"}"#;
        for cut in 0..body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(scan(&[a, b]).as_deref(), Some("claude-x"), "cut at {cut}");
        }
    }

    #[test]
    fn the_hash_leaves_out_the_model_alone() {
        let h = |body: &str| {
            let mut s = ModelScan::default();
            s.feed(body.as_bytes());
            s.hash()
        };
        let a = h(r#"{"messages":[1],"model":"a","max_tokens":5}"#);
        assert_eq!(a, h(r#"{"messages":[1],"model":"bbbb","max_tokens":5}"#));
        assert_ne!(a, h(r#"{"messages":[2],"model":"a","max_tokens":5}"#));
        assert_eq!(h(""), None);
    }

    #[test]
    fn a_nested_or_non_string_model_is_not_taken() {
        assert_eq!(scan(&[r#"{"meta":{"model":"inner"},"n":1}"#]), None);
        assert_eq!(scan(&[r#"{"model":5,"y":"model"}"#]), None);
        assert_eq!(scan(&[r#"["model","x"]"#]), None);
        assert_eq!(scan(&["not json"]), None);
        assert_eq!(
            scan(&[r#"{"a":"b","#, r#""model":"late"}"#]).as_deref(),
            Some("late")
        );
    }
}
