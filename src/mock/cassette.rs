//! Recorded and canned answers — the cassettes of `--record DIR` and
//! `--mock-from DIR`: one JSON file per exchange, a request to match and
//! the response to give, with the moments of its bytes. netchaos writes
//! them as a real upstream answers ([`crate::http::tape`]); a user may
//! write one by hand for a route (no body: any request to it matches).
//!
//! ```json
//! { "request":  { "method": "POST", "host": "api.anthropic.com",
//!                 "path": "/v1/messages", "body": { "model": "…" } },
//!   "response": { "status": 200, "headers": [["content-type", "text/event-stream"]],
//!                 "head_ms": 310.2,
//!                 "chunks": [{ "at_ms": 311.0, "text": "event: message_start\n…" }] } }
//! ```
//!
//! A request field left out matches anything; a JSON `body` matches a
//! request whose body is the same JSON (key order and spacing aside),
//! `body_text` the same bytes. Of the entries that match, the most
//! specific answers, and among equals each in turn (a request recorded
//! three times replays its three answers in order, then again). A
//! response gives its body as `chunks` (each at its moment, from the
//! request's end), or whole as `body` (JSON), `body_text`, `body_b64` or
//! `body_file` (beside the cassette), split into server-sent events
//! `every_ms` apart when asked.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Api;
use super::reply::{Payload, Reply};

/// What marks a credential netchaos did not keep.
pub(crate) const REDACTED: &str = "[redacted]";

/// One exchange, as a cassette file holds it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Interaction {
    pub(crate) request: Request,
    pub(crate) response: Response,
    /// When, by what and over which protocol it was recorded (not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recorded: Option<Value>,
}

/// The request an interaction answers: each field left out matches any.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Request {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) method: Option<String>,
    /// Without its port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// With its query, if it must match (a `[redacted]` value matches any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    /// As the client sent them, credentials redacted (not matched).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_b64: Option<String>,
}

/// The answer, and when its bytes leave.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Response {
    #[serde(default = "ok")]
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) headers: Vec<(String, String)>,
    /// When the head leaves, from the request's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) head_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) chunks: Option<Vec<Chunk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_b64: Option<String>,
    /// A file beside the cassette holding the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body_file: Option<PathBuf>,
    /// A whole body sent as server-sent events, one this often.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) every_ms: Option<f64>,
}

impl Default for Response {
    fn default() -> Response {
        Response {
            status: 200,
            headers: Vec::new(),
            head_ms: None,
            chunks: None,
            body: None,
            body_text: None,
            body_b64: None,
            body_file: None,
            every_ms: None,
        }
    }
}

fn ok() -> u16 {
    200
}

/// Some of a body, at its moment: as text when it is UTF-8.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Chunk {
    pub(crate) at_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) b64: Option<String>,
}

impl Chunk {
    pub(crate) fn of(at: Duration, data: &[u8]) -> Chunk {
        let at_ms = ms(at);
        match std::str::from_utf8(data) {
            Ok(t) => Chunk {
                at_ms,
                text: Some(t.to_string()),
                b64: None,
            },
            Err(_) => Chunk {
                at_ms,
                text: None,
                b64: Some(B64.encode(data)),
            },
        }
    }
}

/// A duration in milliseconds, to the microsecond.
pub(crate) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl Request {
    /// A body as the file keeps it: JSON when it is an object or array
    /// (matched as JSON), else text, else base64.
    pub(crate) fn set_body(&mut self, body: &[u8]) {
        if body.is_empty() {
            return;
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => self.body = Some(v),
            _ => match std::str::from_utf8(body) {
                Ok(t) => self.body_text = Some(t.to_string()),
                Err(_) => self.body_b64 = Some(B64.encode(body)),
            },
        }
    }
}

/// How an entry matches a request's body.
#[derive(Debug)]
enum BodyMatch {
    Any,
    Json(Value),
    Bytes(Vec<u8>),
}

/// One answer, ready to give.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    head_at: Duration,
    chunks: Vec<(Duration, Bytes)>,
    /// Sent with a length when the recorded answer had one.
    length: Option<u64>,
}

#[derive(Debug)]
struct Entry {
    file: String,
    method: Option<String>,
    host: Option<String>,
    path: Option<String>,
    body: BodyMatch,
    answer: Answer,
    uses: AtomicU64,
}

impl Entry {
    fn specificity(&self) -> usize {
        usize::from(self.method.is_some())
            + usize::from(self.host.is_some())
            + usize::from(self.path.is_some())
            + usize::from(!matches!(self.body, BodyMatch::Any))
    }

    /// Whether it answers a request to `host` (`None`: any).
    fn matches(&self, method: &str, host: Option<&str>, path: &str, body: &Body<'_>) -> bool {
        self.method
            .as_ref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && match (&self.host, host) {
                (Some(h), Some(x)) => normal_host(x) == *h,
                // No host to match: the mock's own (standalone), or a
                // request that named none.
                _ => true,
            }
            && self.path.as_ref().is_none_or(|p| path_matches(p, path))
            && match &self.body {
                BodyMatch::Any => true,
                BodyMatch::Bytes(b) => b == body.bytes,
                BodyMatch::Json(v) => body.json().is_some_and(|j| j == v),
            }
    }
}

/// A request body, parsed as JSON once if an entry asks.
struct Body<'a> {
    bytes: &'a [u8],
    json: std::cell::OnceCell<Option<Value>>,
}

impl Body<'_> {
    fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.bytes).ok())
            .as_ref()
    }
}

/// A host without its port or trailing dot, in lower case.
pub(crate) fn normal_host(host: &str) -> String {
    let h = match host.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    h.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// Whether a request's `path` is the recorded one: a recorded path with
/// no query matches any query; one with a query matches the same
/// parameters in order, a `[redacted]` value matching any value.
fn path_matches(recorded: &str, path: &str) -> bool {
    let (rp, rq) = recorded.split_once('?').unwrap_or((recorded, ""));
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    if rp != p {
        return false;
    }
    if !recorded.contains('?') {
        return true;
    }
    let pairs = |q: &str| -> Vec<(String, String)> {
        q.split('&')
            .filter(|s| !s.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .collect()
    };
    let (rq, q) = (pairs(rq), pairs(q));
    let redacted = urlencode(REDACTED);
    rq.len() == q.len()
        && rq
            .iter()
            .zip(&q)
            .all(|((rk, rv), (k, v))| rk == k && (rv == v || *rv == redacted || rv == REDACTED))
}

/// `[redacted]` as it stands in a query.
pub(crate) fn urlencode(s: &str) -> String {
    s.replace('[', "%5B").replace(']', "%5D")
}

/// Every answer of one or more cassette directories.
#[derive(Debug)]
pub(crate) struct Cassette {
    entries: Vec<Entry>,
    /// Held while an entry is chosen and its turn counted: two requests
    /// at once take two turns.
    choosing: std::sync::Mutex<()>,
    /// The directories, for messages.
    pub(crate) dirs: String,
    /// Hosts are not matched: the mock serves one (`netchaos mock`, which
    /// clients reach by a base URL of its own).
    any_host: bool,
}

/// A cassette's files, at most (a directory of a runaway recording).
const MAX_FILES: usize = 100_000;
/// A cassette file's size, at most.
const MAX_FILE: u64 = 64 << 20;

impl Cassette {
    /// Reads every `*.json` file of `dirs` (in name order), or says which
    /// one is wrong and why.
    pub(crate) fn load(dirs: &[PathBuf]) -> Result<Cassette, String> {
        let mut entries = Vec::new();
        for dir in dirs {
            let list = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut files: Vec<PathBuf> = list
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
                .collect();
            if files.len() > MAX_FILES {
                return Err(format!(
                    "{}: {} files, more than the {MAX_FILES} a cassette may hold",
                    dir.display(),
                    files.len()
                ));
            }
            files.sort();
            if files.is_empty() {
                return Err(format!(
                    "{}: no answers there (a cassette is a directory of *.json files, as \
                     --record writes them)",
                    dir.display()
                ));
            }
            for f in files {
                entries.extend(read_file(&f).map_err(|e| format!("{}: {e}", f.display()))?);
            }
        }
        Ok(Cassette {
            entries,
            dirs: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            any_host: false,
            choosing: std::sync::Mutex::new(()),
        })
    }

    /// Several cassettes as one, in the order given.
    pub(crate) fn join(parts: Vec<Cassette>) -> Cassette {
        let dirs: Vec<String> = parts.iter().map(|c| c.dirs.clone()).collect();
        Cassette {
            entries: parts.into_iter().flat_map(|c| c.entries).collect(),
            dirs: dirs.join(", "),
            any_host: false,
            choosing: std::sync::Mutex::new(()),
        }
    }

    /// The same, answering a request whatever host it names (standalone,
    /// where a recorded provider host is now the mock's address).
    pub(crate) fn any_host(mut self) -> Cassette {
        self.any_host = true;
        self
    }

    /// The hosts its entries name, each with the API its paths speak.
    pub(crate) fn hosts(&self) -> Vec<(String, Api)> {
        let mut out: Vec<(String, Api)> = Vec::new();
        for e in &self.entries {
            let Some(h) = &e.host else { continue };
            if out.iter().any(|(x, _)| x == h) {
                continue;
            }
            let path = e.path.as_deref().unwrap_or("");
            let path = path.split('?').next().unwrap_or(path);
            let api = Api::of_host(h)
                .or_else(|| Api::of_path(path))
                .unwrap_or(Api::OpenAi);
            out.push((h.clone(), api));
        }
        out
    }

    /// The answer to a request, if an entry matches it.
    pub(crate) fn answer(
        &self,
        method: &str,
        host: Option<&str>,
        path: &str,
        body: &[u8],
    ) -> Option<Reply> {
        let body = Body {
            bytes: body,
            json: Default::default(),
        };
        let turn = self.choosing.lock().unwrap_or_else(|e| e.into_inner());
        let mut best: Option<&Entry> = None;
        for e in &self.entries {
            let host = if self.any_host { None } else { host };
            if !e.matches(method, host, path, &body) {
                continue;
            }
            best = match best {
                Some(b)
                    if b.specificity() > e.specificity()
                        || (b.specificity() == e.specificity()
                            && b.uses.load(Ordering::Relaxed)
                                <= e.uses.load(Ordering::Relaxed)) =>
                {
                    Some(b)
                }
                _ => Some(e),
            };
        }
        let e = best?;
        e.uses.fetch_add(1, Ordering::Relaxed);
        drop(turn);
        tracing::debug!("mock: {method} {path} answered from {}", e.file);
        let a = &e.answer;
        let mut r = Reply {
            status: a.status,
            headers: Vec::with_capacity(a.headers.len()),
            payload: Payload::Recorded {
                head_at: a.head_at,
                chunks: a.chunks.clone(),
                length: a.length,
            },
        };
        for (k, v) in &a.headers {
            r.headers.push((k.clone().into(), v.clone()));
        }
        Some(r)
    }
}

/// A response's headers that belong to its connection, not to it: the
/// server frames the replay itself.
const FRAMING: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "content-length",
];

/// Whether a header can be sent as given (a name and a visible-ASCII
/// value).
pub(crate) fn sendable_header(name: &str, value: &str) -> bool {
    hyper::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
        && hyper::header::HeaderValue::from_str(value).is_ok()
}

/// Whether a response header is one the replay sends (not framing).
pub(crate) fn replayed(name: &str) -> bool {
    !FRAMING.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// One file: an interaction, or an array of them.
fn read_file(path: &Path) -> Result<Vec<Entry>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_FILE {
        return Err(format!("larger than {MAX_FILE} bytes"));
    }
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| format!("not JSON: {e}"))?;
    let list = match v {
        Value::Array(a) => a,
        v => vec![v],
    };
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let beside = path.parent().unwrap_or(Path::new("."));
    list.into_iter()
        .enumerate()
        .map(|(i, v)| {
            let i: Interaction = serde_json::from_value(v).map_err(|e| {
                format!("exchange {i}: {e} (see docs/http.md: Recorded and canned answers)")
            })?;
            entry(&name, beside, i)
        })
        .collect()
}

fn entry(file: &str, beside: &Path, i: Interaction) -> Result<Entry, String> {
    let Interaction {
        request: q,
        response: r,
        ..
    } = i;
    let bodies = [
        q.body.is_some(),
        q.body_text.is_some(),
        q.body_b64.is_some(),
    ];
    if bodies.iter().filter(|b| **b).count() > 1 {
        return Err("the request has more than one of body, body_text and body_b64".into());
    }
    let body = match (q.body, q.body_text, q.body_b64) {
        (Some(v), _, _) => BodyMatch::Json(v),
        (_, Some(t), _) => BodyMatch::Bytes(t.into_bytes()),
        (_, _, Some(b)) => BodyMatch::Bytes(
            B64.decode(b.trim())
                .map_err(|e| format!("request body_b64: {e}"))?,
        ),
        _ => BodyMatch::Any,
    };
    if let Some(m) = &q.method
        && (m.is_empty() || !m.bytes().all(|c| c.is_ascii_alphabetic()))
    {
        return Err(format!("request method {m:?} is not an HTTP method"));
    }
    if let Some(p) = &q.path
        && !p.starts_with('/')
    {
        return Err(format!("request path {p:?} does not start with /"));
    }
    if !(100..=999).contains(&r.status) || (100..200).contains(&r.status) {
        return Err(format!(
            "response status {} is not a final HTTP status",
            r.status
        ));
    }
    for (k, v) in &r.headers {
        if !sendable_header(k, v) {
            return Err(format!("response header {k:?}: {v:?} cannot be sent"));
        }
    }
    let head_at = at(r.head_ms, "head_ms")?;
    let mut length = None;
    let chunks = match r.chunks {
        Some(cs) => {
            let mut out = Vec::with_capacity(cs.len());
            for (n, c) in cs.into_iter().enumerate() {
                let data = match (c.text, c.b64) {
                    (Some(t), None) => Bytes::from(t),
                    (None, Some(b)) => Bytes::from(
                        B64.decode(b.trim())
                            .map_err(|e| format!("response chunk {n}: b64: {e}"))?,
                    ),
                    _ => return Err(format!("response chunk {n}: give one of text and b64")),
                };
                out.push((at(Some(c.at_ms), "at_ms")?.max(head_at), data));
            }
            // A recorded length stands when the chunks add up to it.
            let total: u64 = out.iter().map(|(_, b)| b.len() as u64).sum();
            length = r
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
                .filter(|n| *n == total);
            out
        }
        None => {
            let given = [
                r.body.is_some(),
                r.body_text.is_some(),
                r.body_b64.is_some(),
                r.body_file.is_some(),
            ];
            if given.iter().filter(|b| **b).count() > 1 {
                return Err(
                    "the response has more than one of chunks, body, body_text, body_b64 and body_file"
                        .into(),
                );
            }
            let bytes = match (r.body, r.body_text, r.body_b64, r.body_file) {
                (Some(v), ..) => Bytes::from(v.to_string()),
                (_, Some(t), ..) => Bytes::from(t),
                (_, _, Some(b), _) => Bytes::from(
                    B64.decode(b.trim())
                        .map_err(|e| format!("response body_b64: {e}"))?,
                ),
                (_, _, _, Some(f)) => {
                    let p = beside.join(&f);
                    Bytes::from(
                        std::fs::read(&p)
                            .map_err(|e| format!("response body_file {}: {e}", p.display()))?,
                    )
                }
                _ => Bytes::new(),
            };
            match r.every_ms {
                Some(every) => {
                    let every = at(Some(every), "every_ms")?;
                    events(&bytes)
                        .into_iter()
                        .enumerate()
                        .map(|(n, b)| (head_at + every * n as u32, b))
                        .collect()
                }
                None => {
                    length = Some(bytes.len() as u64);
                    vec![(head_at, bytes)]
                }
            }
        }
    };
    // An answer with no body by its request or status keeps the length
    // it stated (a HEAD's, a 304's): no body frames it.
    let bodiless = q
        .method
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("HEAD"))
        || matches!(r.status, 204 | 304);
    let mut headers: Vec<(String, String)> = r
        .headers
        .into_iter()
        .filter(|(k, _)| replayed(k) || (bodiless && k.eq_ignore_ascii_case("content-length")))
        .collect();
    // A JSON body given as JSON says so, unless the file says otherwise.
    let typed = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    if !typed && chunks.len() == 1 && chunks[0].1.first() == Some(&b'{') {
        headers.push(("content-type".into(), "application/json".into()));
    }
    Ok(Entry {
        file: file.to_string(),
        method: q.method.map(|m| m.to_ascii_uppercase()),
        host: q.host.map(|h| normal_host(&h)),
        path: q.path,
        body,
        answer: Answer {
            status: r.status,
            headers,
            head_at,
            chunks,
            length,
        },
        uses: AtomicU64::new(0),
    })
}

/// A moment in milliseconds from a file: finite, not negative, within a
/// day.
fn at(ms: Option<f64>, what: &str) -> Result<Duration, String> {
    match ms {
        None => Ok(Duration::ZERO),
        Some(m) if m.is_finite() && (0.0..=86_400_000.0).contains(&m) => {
            Ok(Duration::from_secs_f64(m / 1e3))
        }
        Some(m) => Err(format!(
            "{what} = {m} is not a time in milliseconds (0 to a day)"
        )),
    }
}

/// A body split into server-sent events, each with its blank line.
fn events(body: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < body.len() {
        let end = if body[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else if body[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else {
            None
        };
        match end {
            Some(e) => {
                out.push(Bytes::copy_from_slice(&body[start..e]));
                start = e;
                i = e;
            }
            None => i += 1,
        }
    }
    if start < body.len() {
        out.push(Bytes::copy_from_slice(&body[start..]));
    }
    out
}

/// Where `--record` writes: one file per exchange, numbered on from the
/// files already there (a second recording adds to the first).
#[derive(Debug)]
pub(crate) struct Recorder {
    dir: PathBuf,
    next: AtomicU64,
    pub(crate) written: AtomicU64,
}

impl Recorder {
    /// Makes `dir` if need be.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Recorder> {
        std::fs::create_dir_all(dir)?;
        // After the highest number there (a gap a deleted file left is not
        // reused; a file is never overwritten: see `write`).
        let last = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.split('-').next()?.parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0);
        Ok(Recorder {
            dir: dir.to_path_buf(),
            next: AtomicU64::new(last + 1),
            written: AtomicU64::new(0),
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes one exchange (a failure is logged: the run goes on).
    pub(crate) fn write(&self, i: &Interaction) {
        let slug: String = format!(
            "{}-{}{}",
            i.request.method.as_deref().unwrap_or("ANY"),
            i.request.host.as_deref().unwrap_or("any"),
            i.request
                .path
                .as_deref()
                .unwrap_or("")
                .split('?')
                .next()
                .unwrap_or(""),
        )
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
            _ => '_',
        })
        .take(80)
        .collect();
        let text = match serde_json::to_value(i) {
            Ok(v) => readable(&v),
            Err(e) => return tracing::warn!("--record: {e}"),
        };
        // A new file always: another recording into the same directory
        // (a parallel test shard) may have taken a number meanwhile.
        let mut tries = 0;
        let (path, mut file) = loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let path = self.dir.join(format!("{n:05}-{slug}.json"));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 1000 => {
                    tries += 1;
                }
                Err(e) => {
                    return tracing::warn!("--record: cannot write {}: {e}", path.display());
                }
            }
        };
        let wrote = std::io::Write::write_all(&mut file, text.as_bytes());
        match wrote {
            Ok(()) => {
                self.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!("--record: cannot write {}: {e}", path.display()),
        }
    }
}

/// JSON for people to read and edit: nested values one per line, an
/// array or object of plain values (a header, a chunk) on one.
pub(crate) fn readable(v: &Value) -> String {
    fn flat(v: &Value) -> bool {
        match v {
            Value::Array(a) => a.iter().all(|x| !x.is_array() && !x.is_object()),
            Value::Object(o) => o.values().all(|x| !x.is_array() && !x.is_object()),
            _ => true,
        }
    }
    fn write(v: &Value, depth: usize, out: &mut String) {
        let pad = |n: usize| "  ".repeat(n);
        match v {
            Value::Array(a) if !a.is_empty() && !flat(v) => {
                out.push_str("[\n");
                for (i, x) in a.iter().enumerate() {
                    out.push_str(&pad(depth + 1));
                    write(x, depth + 1, out);
                    out.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(depth));
                out.push(']');
            }
            Value::Object(o) if !o.is_empty() && !flat(v) => {
                out.push_str("{\n");
                for (i, (k, x)) in o.iter().enumerate() {
                    out.push_str(&pad(depth + 1));
                    out.push_str(&Value::from(k.as_str()).to_string());
                    out.push_str(": ");
                    write(x, depth + 1, out);
                    out.push_str(if i + 1 < o.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(depth));
                out.push('}');
            }
            Value::Array(a) => {
                let parts: Vec<String> = a.iter().map(Value::to_string).collect();
                out.push_str(&format!("[{}]", parts.join(", ")));
            }
            Value::Object(o) => {
                let parts: Vec<String> = o
                    .iter()
                    .map(|(k, x)| format!("{}: {x}", Value::from(k.as_str())))
                    .collect();
                out.push_str(&format!("{{{}}}", parts.join(", ")));
            }
            x => out.push_str(&x.to_string()),
        }
    }
    let mut out = String::new();
    write(v, 0, &mut out);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cassette(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Cassette, String>) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let c = Cassette::load(&[dir.path().to_path_buf()]);
        (dir, c)
    }

    fn body(r: &Reply) -> Vec<u8> {
        r.body()
    }

    #[test]
    fn the_most_specific_entry_answers_and_repeats_take_turns() {
        let (_d, c) = cassette(&[
            (
                "1.json",
                r#"{"request": {"path": "/v1/messages"}, "response": {"body": {"any": true}}}"#,
            ),
            (
                "2.json",
                r#"[{"request": {"method": "POST", "host": "api.x.com", "path": "/v1/messages",
                     "body": {"b": 1, "a": [1, 2]}}, "response": {"body_text": "first"}},
                    {"request": {"method": "POST", "host": "api.x.com", "path": "/v1/messages",
                     "body": {"a": [1, 2], "b": 1}}, "response": {"body_text": "second"}}]"#,
            ),
        ]);
        let c = c.unwrap();
        let ask = |host, body: &str| {
            c.answer(
                "post",
                Some(host),
                "/v1/messages?beta=true",
                body.as_bytes(),
            )
            .map(|r| String::from_utf8(body_of(&r)).unwrap())
        };
        fn body_of(r: &Reply) -> Vec<u8> {
            body(r)
        }
        // Key order and spacing aside, the same JSON.
        assert_eq!(
            ask("API.X.com:443", r#"{"a":[1,2], "b":1}"#).unwrap(),
            "first"
        );
        assert_eq!(ask("api.x.com", r#"{"b":1,"a":[1,2]}"#).unwrap(), "second");
        assert_eq!(ask("api.x.com", r#"{"b":1,"a":[1,2]}"#).unwrap(), "first");
        assert_eq!(ask("api.x.com", r#"{"b":2}"#).unwrap(), r#"{"any":true}"#);
        assert_eq!(ask("other", "").unwrap(), r#"{"any":true}"#);
        assert!(c.answer("POST", None, "/v1/chat", b"").is_none());
        assert_eq!(c.hosts(), [("api.x.com".to_string(), Api::Anthropic)]);
        let r = c.answer("POST", None, "/v1/messages", b"").unwrap();
        assert_eq!(r.get("content-type"), Some("application/json"));
    }

    #[test]
    fn chunks_keep_their_moments_and_sse_bodies_split_into_events() {
        let (_d, c) = cassette(&[
            (
                "a.json",
                r#"{"request": {"path": "/s"}, "response": {"status": 200, "head_ms": 100,
                "headers": [["Content-Type", "text/event-stream"], ["Transfer-Encoding", "chunked"]],
                "chunks": [{"at_ms": 150, "text": "data: 1\n\n"}, {"at_ms": 250.5, "b64": "AP8="}]}}"#,
            ),
            (
                "h.json",
                r#"{"request": {"method": "HEAD", "path": "/h"},
                    "response": {"headers": [["content-length", "42"]], "chunks": []}}"#,
            ),
            (
                "b.json",
                r#"{"request": {"path": "/e"}, "response": {"head_ms": 10, "every_ms": 20,
                "body_text": "data: a\n\ndata: b\r\n\r\ndata: c"}}"#,
            ),
        ]);
        let c = c.unwrap();
        let r = c.answer("GET", None, "/s", b"").unwrap();
        assert_eq!(r.headers.len(), 1, "framing headers are the server's");
        let Payload::Recorded {
            head_at,
            chunks,
            length,
        } = &r.payload
        else {
            panic!()
        };
        assert_eq!(*head_at, Duration::from_millis(100));
        assert_eq!(chunks[1].0, Duration::from_micros(250_500));
        assert_eq!(&chunks[1].1[..], [0, 255]);
        assert_eq!(*length, None);
        let r = c.answer("HEAD", None, "/h", b"").unwrap();
        assert_eq!(
            r.get("content-length"),
            Some("42"),
            "a HEAD keeps its length"
        );
        let r = c.answer("GET", None, "/e", b"").unwrap();
        let Payload::Recorded { chunks, .. } = &r.payload else {
            panic!()
        };
        let at: Vec<u64> = chunks.iter().map(|(t, _)| t.as_millis() as u64).collect();
        assert_eq!(at, [10, 30, 50]);
        assert_eq!(&chunks[1].1[..], b"data: b\r\n\r\n");
    }

    #[test]
    fn a_wrong_cassette_says_which_file_and_why() {
        for (text, says) in [
            ("{", "not JSON"),
            (
                r#"{"request": {}, "response": {"status": 99}}"#,
                "status 99",
            ),
            (
                r#"{"request": {"path": "v1"}, "response": {}}"#,
                "does not start with /",
            ),
            (
                r#"{"request": {}, "response": {"head_ms": -1}}"#,
                "head_ms = -1",
            ),
            (r#"{"request": {}, "respons": {}}"#, "unknown field"),
            (
                r#"{"request": {}, "response": {"chunks": [{"at_ms": 1}]}}"#,
                "give one of text and b64",
            ),
            (
                r#"{"request": {}, "response": {"body": 1, "body_text": "x"}}"#,
                "more than one",
            ),
            (
                r#"{"request": {}, "response": {"body_file": "nope.sse"}}"#,
                "nope.sse",
            ),
        ] {
            let (_d, c) = cassette(&[("x.json", text)]);
            let e = c.unwrap_err();
            assert!(e.contains("x.json") && e.contains(says), "{text}: {e}");
        }
        let (_d, c) = cassette(&[("x.txt", "{}")]);
        assert!(c.unwrap_err().contains("no answers there"));
    }

    #[test]
    fn queries_match_with_redacted_values_standing_for_any() {
        assert!(path_matches("/a", "/a?x=1"));
        assert!(path_matches(
            "/a?key=%5Bredacted%5D&alt=sse",
            "/a?key=abc&alt=sse"
        ));
        assert!(!path_matches("/a?key=%5Bredacted%5D&alt=sse", "/a?key=abc"));
        assert!(!path_matches("/a?x=1", "/a?x=2"));
        assert!(!path_matches("/a", "/b"));
        assert_eq!(normal_host("[::1]:80"), "::1");
        assert_eq!(normal_host("Api.X.com."), "api.x.com");
    }

    #[test]
    fn a_recorder_numbers_on_from_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("00001-old.json"), "{}").unwrap();
        let r = Recorder::open(&dir.path().join(".")).unwrap();
        // Another recorder took the next number meanwhile: not overwritten.
        std::fs::write(
            dir.path().join("00002-POST-api.x.com_v1_messages.json"),
            "x",
        )
        .unwrap();
        let mut i = Interaction::default();
        i.request.method = Some("POST".into());
        i.request.host = Some("api.x.com".into());
        i.request.path = Some("/v1/messages?beta=true".into());
        r.write(&i);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("00002-POST-api.x.com_v1_messages.json"))
                .unwrap(),
            "x"
        );
        let written = dir.path().join("00003-POST-api.x.com_v1_messages.json");
        let back: Interaction =
            serde_json::from_str(&std::fs::read_to_string(written).unwrap()).unwrap();
        assert_eq!(back.request.path.as_deref(), Some("/v1/messages?beta=true"));
    }

    #[test]
    fn files_read_as_people_write_them() {
        let v = serde_json::json!({"a": [["h", "v"], ["i", "w"]], "b": {"c": 1, "d": [1, {"e": "x\ny"}]}, "f": []});
        let text = readable(&v);
        assert_eq!(
            text,
            "{\n  \"a\": [\n    [\"h\", \"v\"],\n    [\"i\", \"w\"]\n  ],\n  \"b\": {\n    \"c\": 1,\n    \"d\": [\n      1,\n      {\"e\": \"x\\ny\"}\n    ]\n  },\n  \"f\": []\n}\n"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }
}
