//! What every HTTP fault shares: which requests it applies to (method,
//! path, host, headers, fields of a JSON body), and sequence controls for
//! retry tests (`first = N`: only the first N matching requests of the run;
//! `every = N`: every Nth), and for faults that act on the upstream's
//! response, which of its statuses (`response_status`, Chaos Mesh's
//! `code`). The per-request `probability` draw is the HTTP layer's, from
//! (seed, connection, request number).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wildmatch::WildMatch;

use crate::settings::{Fields, Node, ProfileError, Value, node_text};

/// A request, as far as matching looks at it.
pub(crate) struct RequestView<'a> {
    pub(crate) method: &'a str,
    /// The request target as sent (`/v1/messages?beta=true`).
    pub(crate) path: &'a str,
    /// The Host header, else the TLS server name.
    pub(crate) host: Option<&'a str>,
    pub(crate) headers: &'a [(String, String)],
    /// The body, when a rule asked to see it (JSON fields).
    pub(crate) body: Option<&'a serde_json::Value>,
}

/// Which requests an HTTP fault applies to.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestMatch {
    methods: Vec<String>,
    path: Option<Pattern>,
    host: Option<HostPattern>,
    headers: Vec<(String, Pattern)>,
    /// (dotted path into the JSON body, pattern of its value).
    body: Vec<(String, Pattern)>,
    first: Option<u64>,
    every: Option<u64>,
    /// The response statuses it acts on, as inclusive ranges ("5xx" is
    /// 500-599); empty: any.
    statuses: Vec<(u16, u16)>,
    /// The response headers it acts on (Chaos Mesh's `response_headers`).
    response_headers: Vec<(String, Pattern)>,
    /// Matching requests seen so far (for `first` and `every`), shared by
    /// every connection of the run.
    seen: Arc<AtomicU64>,
}

/// A glob (`*`, `?`) as written, for display.
#[derive(Debug, Clone)]
struct Pattern {
    text: String,
    glob: WildMatch,
}

impl Pattern {
    fn new(text: &str) -> Pattern {
        Pattern {
            text: text.to_string(),
            glob: WildMatch::new(text),
        }
    }

    fn matches(&self, s: &str) -> bool {
        self.glob.matches(s)
    }
}

/// A host glob: case-insensitive, with or without the port, and without
/// the trailing dot of a fully qualified name. Shared with `tls_error`,
/// whose `host` names the TLS server name the same way.
#[derive(Debug, Clone)]
pub(crate) struct HostPattern(Pattern);

impl HostPattern {
    pub(crate) fn new(text: &str) -> HostPattern {
        HostPattern(Pattern::new(&text.to_ascii_lowercase()))
    }

    /// The pattern as written (lowercased).
    pub(crate) fn text(&self) -> &str {
        &self.0.text
    }

    /// Whether `host` (`name`, `name:port`, `name.`) matches.
    pub(crate) fn matches(&self, host: &str) -> bool {
        let h = host.to_ascii_lowercase();
        let name = h.rsplit_once(':').map_or(h.as_str(), |(n, _)| n);
        [h.as_str(), name]
            .iter()
            .any(|x| self.0.matches(x) || self.0.matches(x.trim_end_matches('.')))
    }
}

impl RequestMatch {
    /// Whether a request to `host` (or, over TLS, its server name) may
    /// match: its `host`, if it has one, matches it.
    pub(crate) fn may_match_host(&self, host: &str) -> bool {
        self.host.as_ref().is_none_or(|h| h.matches(host))
    }

    /// Whether it has a `host`.
    pub(crate) fn names_host(&self) -> bool {
        self.host.is_some()
    }

    /// Reads `method`, `path`, `host`, `header`, `body`, `first` and `every`.
    pub(crate) fn parse(f: &mut Fields) -> Result<RequestMatch, ProfileError> {
        let mut m = RequestMatch {
            methods: f
                .strings("method")?
                .unwrap_or_default()
                .iter()
                .map(|n| node_text(n).to_ascii_uppercase())
                .collect(),
            path: f.string("path")?.map(|p| Pattern::new(&p)),
            host: f.string("host")?.map(|h| HostPattern::new(&h)),
            ..RequestMatch::default()
        };
        m.headers = headers(f, "header")?;
        if let Some(node) = f.take("body") {
            let loc = node.loc.clone();
            flatten("", node, &mut m.body).map_err(|()| {
                f.error(
                    "body",
                    &loc,
                    "expected a table of JSON fields to match, like { model = \"claude-*\" }",
                )
            })?;
        }
        for (path, node) in f.take_prefixed("body") {
            let text = scalar(&node)
                .ok_or_else(|| f.error("body", &node.loc, "expected a string pattern"))?;
            m.body.push((path, Pattern::new(&text)));
        }
        m.response_headers = headers(f, "response_header")?;
        m.first = f.integer_in("first", 1, u64::MAX)?;
        m.every = f.integer_in("every", 1, u64::MAX)?;
        if let Some(words) = f.words("response_status")? {
            if words.is_empty() {
                return Err(f.error(
                    "response_status",
                    f.loc(),
                    "expected a status like 503 or a class like \"5xx\", got nothing",
                ));
            }
            for (word, loc) in words {
                let range = status_range(&word).ok_or_else(|| {
                    f.error(
                        "response_status",
                        &loc,
                        format!(
                            "expected a status 200-599 like 503 or a class like \"5xx\", got {word:?}"
                        ),
                    )
                })?;
                m.statuses.push(range);
            }
        }
        Ok(m)
    }

    /// Whether it names response statuses or headers: only a fault that
    /// acts on a response may (a request answered in the upstream's place,
    /// or held before it goes, has none yet).
    pub(crate) fn looks_at_response(&self) -> bool {
        !self.statuses.is_empty() || !self.response_headers.is_empty()
    }

    /// The error for a fault that acts before any response exists.
    pub(crate) fn no_response_yet(&self, f: &Fields, why: &str) -> Result<(), ProfileError> {
        let key = match (self.statuses.is_empty(), self.response_headers.is_empty()) {
            (true, true) => return Ok(()),
            (false, _) => "response_status",
            (true, false) => "response_header",
        };
        Err(f.table_error(format!("{key} needs a response to look at, and {why}")))
    }

    /// Whether it acts on a response with `status` and `headers` (of a
    /// request it admitted), counting it for `first` and `every` if it
    /// looks at responses.
    pub(crate) fn admits_response(&self, status: u16, headers: &[(String, String)]) -> bool {
        !self.looks_at_response()
            || ((self.statuses.is_empty()
                || self
                    .statuses
                    .iter()
                    .any(|(lo, hi)| (*lo..=*hi).contains(&status)))
                && has_headers(headers, &self.response_headers)
                && self.counted())
    }

    /// Whether a rule needs to see request bodies (and so buffers them).
    pub(crate) fn needs_body(&self) -> bool {
        !self.body.is_empty()
    }

    /// Whether the request, its body not yet seen, may be one of this
    /// fault's: everything but its body matches (nothing is counted).
    pub(crate) fn may_match(&self, r: &RequestView<'_>) -> bool {
        self.matches_head(r)
    }

    /// Whether the request is one of this fault's, counting it for `first`
    /// and `every` if it matches.
    pub(crate) fn admits(&self, r: &RequestView<'_>) -> bool {
        // With `response_status` or `response_header`, `first` and `every`
        // count the responses that match ([`RequestMatch::admits_response`]):
        // "the first 500" is the first response that is a 500.
        self.matches(r) && (self.looks_at_response() || self.counted())
    }

    /// Counts one more for `first` and `every`, and says whether it is one
    /// of theirs.
    fn counted(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        self.first.is_none_or(|first| n <= first) && self.every.is_none_or(|every| n % every == 0)
    }

    fn matches(&self, r: &RequestView<'_>) -> bool {
        self.matches_head(r)
            && self.body.iter().all(|(path, p)| {
                r.body
                    .and_then(|b| lookup(b, path))
                    .is_some_and(|v| match v {
                        serde_json::Value::String(s) => p.matches(s),
                        other => p.matches(&other.to_string()),
                    })
            })
    }

    /// [`RequestMatch::matches`], the body left out.
    fn matches_head(&self, r: &RequestView<'_>) -> bool {
        (self.methods.is_empty()
            || self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(r.method)))
            && self.path.as_ref().is_none_or(|p| {
                p.matches(r.path) || p.matches(r.path.split('?').next().unwrap_or(""))
            })
            && self
                .host
                .as_ref()
                .is_none_or(|p| r.host.is_some_and(|h| p.matches(h)))
            && has_headers(r.headers, &self.headers)
    }

    /// The criteria, as `key = value` text (for `check`, the event log).
    pub(crate) fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if !self.methods.is_empty() {
            p.push(("method", self.methods.join("|")));
        }
        if let Some(x) = &self.path {
            p.push(("path", x.text.clone()));
        }
        if let Some(x) = &self.host {
            p.push(("host", x.text().to_string()));
        }
        if let Some(n) = self.first {
            p.push(("first", n.to_string()));
        }
        if let Some(n) = self.every {
            p.push(("every", n.to_string()));
        }
        if !self.statuses.is_empty() {
            let s: Vec<String> = self
                .statuses
                .iter()
                .map(|(lo, hi)| match lo == hi {
                    true => lo.to_string(),
                    false => format!("{}xx", lo / 100),
                })
                .collect();
            p.push(("response_status", s.join("|")));
        }
        p
    }

    /// The criteria that name a header or a JSON field, as (key, name,
    /// value).
    pub(crate) fn named_params(&self) -> Vec<(&'static str, String, String)> {
        let named = |key: &'static str, list: &[(String, Pattern)]| {
            list.iter()
                .map(move |(k, v)| (key, k.clone(), v.text.clone()))
                .collect::<Vec<_>>()
        };
        let mut p = named("header", &self.headers);
        p.extend(named("body", &self.body));
        p.extend(named("response_header", &self.response_headers));
        p
    }
}

/// "503" → 503..=503, "5xx" → 500..=599. A 1xx is interim, passed on as
/// it comes before any fault looks at the response: none is taken.
fn status_range(s: &str) -> Option<(u16, u16)> {
    let s = s.trim();
    if let Some(class) = s.strip_suffix("xx").or_else(|| s.strip_suffix("XX")) {
        let c: u16 = class.parse().ok().filter(|c| (2..=5).contains(c))?;
        return Some((c * 100, c * 100 + 99));
    }
    let n: u16 = s.parse().ok().filter(|n| (200..=599).contains(n))?;
    Some((n, n))
}

/// The parameters every HTTP fault takes, for `netchaos faults`.
pub(crate) const PARAMS: &[(&str, &str, &str)] = &[
    (
        "method",
        "a method or a list, default any",
        "only requests with this method",
    ),
    (
        "path",
        "a glob like \"/v1/*\", default any",
        "only requests for this path",
    ),
    (
        "host",
        "a glob, default any",
        "only requests for this host (Host header, or TLS server name)",
    ),
    (
        "header",
        "\"Name: glob\" strings, or a table",
        "only requests with these headers",
    ),
    (
        "body",
        "a table of JSON fields, like { model = \"claude-opus-*\" } (body.model in flags)",
        "only requests whose JSON body has these values",
    ),
    (
        "first",
        "a number",
        "only the first N matching requests of the run",
    ),
    ("every", "a number", "only every Nth matching request"),
    (
        "response_status",
        "statuses or classes, like 503 or \"5xx\"",
        "only when the response has one of these (faults that act on a response)",
    ),
    (
        "response_header",
        "\"Name: glob\" strings, or a table",
        "only when the response has these headers (faults that act on a response)",
    ),
];

/// `key`'s header patterns: `"Name: glob"` strings (one, or a list), a
/// table `{ Name = "glob" }`, or `key.Name = "glob"`; names lowercased.
fn headers(f: &mut Fields, key: &'static str) -> Result<Vec<(String, Pattern)>, ProfileError> {
    Ok(named_values(f, key, ':')?
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), Pattern::new(&v)))
        .collect())
}

/// `key`'s `name<sep>value` pairs, in the forms `header` takes: one
/// string, a list of them, a table `{ name = "value" }`, or
/// `key.name = "value"`; names and values as written (trimmed).
pub(crate) fn named_values(
    f: &mut Fields,
    key: &'static str,
    sep: char,
) -> Result<Vec<(String, String)>, ProfileError> {
    let mut out = Vec::new();
    if let Some(node) = f.take(key) {
        match node.value {
            Value::Table(entries) => {
                for (k, loc, v) in entries {
                    let text = scalar(&v).ok_or_else(|| f.error(key, &loc, "expected a string"))?;
                    out.push((k, text));
                }
            }
            _ => {
                let items = match node.value {
                    Value::Array(items) => items,
                    _ => vec![node],
                };
                for item in items {
                    let text = node_text(&item);
                    let (name, value) = text.split_once(sep).ok_or_else(|| {
                        let form = match sep {
                            ':' => "Name: value",
                            _ => "name=value",
                        };
                        f.error(key, &item.loc, format!("expected \"{form}\", got {text:?}"))
                    })?;
                    out.push((name.trim().to_string(), value.trim().to_string()));
                }
            }
        }
    }
    for (name, node) in f.take_prefixed(key) {
        let text = scalar(&node).ok_or_else(|| f.error(key, &node.loc, "expected a string"))?;
        out.push((name, text));
    }
    Ok(out)
}

/// Whether `headers` has each of `wanted` (a name, case-insensitive, whose
/// value matches; any of repeated ones).
fn has_headers(headers: &[(String, String)], wanted: &[(String, Pattern)]) -> bool {
    wanted.iter().all(|(name, p)| {
        headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(name) && p.matches(v))
    })
}

fn scalar(n: &Node) -> Option<String> {
    match &n.value {
        Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) => Some(node_text(n)),
        _ => None,
    }
}

/// `{ a = { b = "x" } }` -> `a.b = "x"`.
fn flatten(prefix: &str, node: Node, out: &mut Vec<(String, Pattern)>) -> Result<(), ()> {
    match node.value {
        Value::Table(entries) => {
            for (k, _, v) in entries {
                let path = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, v, out)?;
            }
            Ok(())
        }
        _ if prefix.is_empty() => Err(()),
        _ => {
            let text = scalar(&node).ok_or(())?;
            out.push((prefix.to_string(), Pattern::new(&text)));
            Ok(())
        }
    }
}

/// A dotted path into JSON: object keys, and array indexes as numbers.
fn lookup<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(v, |v, part| match v {
        serde_json::Value::Object(m) => m.get(part),
        serde_json::Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> RequestMatch {
        let pairs = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut f = Fields::from_pairs("t", "test", pairs);
        let m = RequestMatch::parse(&mut f).unwrap();
        f.finish().unwrap();
        m
    }

    fn view<'a>(
        method: &'a str,
        path: &'a str,
        headers: &'a [(String, String)],
        body: Option<&'a serde_json::Value>,
    ) -> RequestView<'a> {
        RequestView {
            method,
            path,
            host: Some("api.example.com:443"),
            headers,
            body,
        }
    }

    #[test]
    fn criteria_all_hold() {
        let body = serde_json::json!({"model": "claude-opus-4", "messages": [{"role": "user"}]});
        let h = vec![("X-Api-Key".to_string(), "sk-123".to_string())];
        let r = m(&[
            ("method", "post"),
            ("path", "/v1/*"),
            ("host", "api.example.com"),
            ("header.x-api-key", "sk-*"),
            ("body.model", "claude-opus-*"),
            ("body.messages.0.role", "user"),
        ]);
        assert!(r.needs_body());
        assert!(r.matches(&view("POST", "/v1/messages?beta=1", &h, Some(&body))));
        assert!(!r.matches(&view("GET", "/v1/messages", &h, Some(&body))));
        assert!(!r.matches(&view("POST", "/v2/x", &h, Some(&body))));
        assert!(!r.matches(&view("POST", "/v1/messages", &[], Some(&body))));
        let other = serde_json::json!({"model": "claude-haiku"});
        assert!(!r.matches(&view("POST", "/v1/messages", &h, Some(&other))));
        assert!(!r.matches(&view("POST", "/v1/messages", &h, None)));
    }

    #[test]
    fn first_and_every_count_matching_requests_of_the_run() {
        let r = m(&[("first", "2")]);
        let got: Vec<bool> = (0..5)
            .map(|_| r.admits(&view("GET", "/", &[], None)))
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
        let r = m(&[("every", "3"), ("path", "/x")]);
        let got: Vec<bool> = (0..7)
            .map(|i| r.admits(&view("GET", if i == 0 { "/y" } else { "/x" }, &[], None)))
            .collect();
        // The /y request neither matches nor counts.
        assert_eq!(got, [false, false, false, true, false, false, true]);
    }
}
