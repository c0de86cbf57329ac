//! `http_rewrite` (HTTP layer): a matching request goes upstream changed,
//! or (`phase = "response"`) the upstream's response reaches the client
//! changed — Chaos Mesh HTTPChaos's `replace` and `patch`. On a request:
//! its method, path, query parameters, headers and body; on a response:
//! its status (the upstream's headers and body kept under the new code),
//! headers (a `Retry-After` added to a real 429, a header removed) and
//! body (replaced, or a JSON patch: a `stop_reason` turned `max_tokens`,
//! a `finish_reason` `length`). What frames the message (a HEAD or CONNECT method, a
//! status without a body) is not changed; a body that is rewritten is
//! read whole and sent with its new `Content-Length`, so the client and
//! the upstream still agree where each message ends. The rewriting itself
//! is [`crate::http::rewrite`].

use super::acts::HttpAct;
use super::http_match::{RequestMatch, named_values};
use super::http_reply::AnswerPhase;
use super::json_edit::JsonEdit;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Edits {
    pub(crate) method: Option<String>,
    /// The path, without the query (which is kept, or edited by `query`).
    pub(crate) path: Option<String>,
    /// Query parameters set (replaced, or added), as written.
    pub(crate) query: Vec<(String, String)>,
    pub(crate) status: Option<u16>,
    /// Headers set: every line of that name replaced by one, or added.
    pub(crate) set_headers: Vec<(String, String)>,
    /// Header names removed (every line of each).
    pub(crate) remove_headers: Vec<String>,
    /// The body replaced, or patched.
    pub(crate) body: Option<BodyEdit>,
}

/// How a body is rewritten.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BodyEdit {
    /// Replaced by these bytes (`set_body`, `set_body_file`: as shown).
    Set(Vec<u8>, Shown),
    /// A JSON body patched (`patch_json`, `patch_ops`).
    Json(JsonEdit),
}

/// How a replacement body was given, for `check` and the event log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shown {
    Text,
    File(String),
}

#[derive(Debug, Clone)]
pub(crate) struct HttpRewrite {
    phase: AnswerPhase,
    edits: Edits,
    matcher: RequestMatch,
}

/// Headers that frame the message: netchaos follows the framing it read.
const FRAMING: &[&str] = &["content-length", "transfer-encoding"];

impl Kind for HttpRewrite {
    const INFO: KindInfo = KindInfo {
        name: "http_rewrite",
        layer: Layer::Http,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching request goes upstream changed (method, path, query, headers, body), or (phase=response) its response reaches the client changed (status, headers, body)",
        params: &[
            (
                "phase",
                "request (default) or response",
                "change the request before it goes upstream, or the response before it reaches the client",
            ),
            (
                "set_method",
                "a method like POST (not HEAD or CONNECT)",
                "the request's method (requests sent as HEAD or CONNECT keep theirs)",
            ),
            (
                "set_path",
                "a path like /v2/items",
                "the request's path; its query string is kept",
            ),
            (
                "set_query",
                "\"name=value\" strings, or a table",
                "query parameters replaced, or added",
            ),
            (
                "set_status",
                "a status 200-599 (not 204 or 304)",
                "the response's status; its headers and body are kept",
            ),
            (
                "set_header",
                "\"Name: value\" strings, or a table",
                "headers replaced, or added (not Content-Length or Transfer-Encoding)",
            ),
            (
                "remove_header",
                "a name or a list of names (apart by | in flags)",
                "headers removed (not Content-Length or Transfer-Encoding)",
            ),
            (
                "set_body",
                "a string",
                "the body replaced (sent with its new Content-Length)",
            ),
            (
                "set_body_file",
                "a path (regular file, at most 1MiB)",
                "…or by a file's bytes",
            ),
            (
                "patch_json",
                "a JSON merge patch (RFC 7396) like '{\"stop_reason\": \"max_tokens\"}', or a table",
                "a JSON body patched: members set, null removes one (bodies up to 1MiB, not compressed)",
            ),
            (
                "patch_ops",
                "a JSON Patch (RFC 6902) like '[{\"op\": \"replace\", \"path\": \"/choices/0/finish_reason\", \"value\": \"length\"}]', or a list of tables",
                "…or operations at JSON Pointers (one array element); a failed op (a test) leaves the body as it came",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let (phase, matcher) = AnswerPhase::parse_with_match(
            f,
            "this changes the request, before any response (add phase = \"response\" to change the response)",
        )?;
        let mut edits = Edits {
            method: f.string("set_method")?,
            path: f.string("set_path")?,
            query: named_values(f, "set_query", '=')?,
            set_headers: named_values(f, "set_header", ':')?,
            ..Edits::default()
        };
        if let Some(m) = &edits.method {
            if m.is_empty() || !m.bytes().all(is_token) {
                return Err(f.table_error(format!(
                    "set_method: expected a method like POST, got {m:?}"
                )));
            }
            if ["HEAD", "CONNECT"]
                .iter()
                .any(|x| m.eq_ignore_ascii_case(x))
            {
                return Err(f.table_error(format!(
                    "set_method: {m} changes how the response is framed or turns the connection into a tunnel, for a client that did not ask for it"
                )));
            }
        }
        if let Some(p) = &edits.path {
            if !p.starts_with('/')
                || !p
                    .bytes()
                    .all(|b| b > b' ' && b < 0x7f && b != b'?' && b != b'#')
            {
                return Err(f.table_error(format!(
                    "set_path: expected a path like /v2/items (ASCII, percent-encoded, no spaces or '#'; no query: use set_query), got {p:?}"
                )));
            }
        }
        for (k, v) in &edits.query {
            if [k, v].iter().any(|s| {
                !s.bytes()
                    .all(|b| b > b' ' && b < 0x7f && !b"&#=".contains(&b))
            }) || k.is_empty()
            {
                return Err(f.table_error(format!(
                    "set_query: expected name=value without spaces, '&', '#' or a second '=' (percent-encode them), got {k:?}={v:?}"
                )));
            }
        }
        edits.status = f.integer_in("set_status", 200, 599)?.map(|s| s as u16);
        if let Some(s) = edits.status.filter(|s| *s == 204 || *s == 304) {
            return Err(f.table_error(format!(
                "set_status: a {s} has no body, and the upstream's would still follow: use http_status with phase = \"response\" to replace the whole response"
            )));
        }
        for (n, _) in f.words("remove_header")?.unwrap_or_default() {
            edits.remove_headers.push(n);
        }
        edits.body = body_edit(f)?;
        for (name, value) in &edits.set_headers {
            // RFC 9110 field-value: visible characters, spaces and tabs
            // (and obs-text); no control characters.
            if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
                return Err(f.table_error(format!(
                    "set_header: {name}'s value has a control character; one line of text is expected"
                )));
            }
        }
        for name in edits
            .set_headers
            .iter()
            .map(|(n, _)| n)
            .chain(&edits.remove_headers)
        {
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err(f.table_error(format!("expected a header name, got {name:?}")));
            }
            if FRAMING.iter().any(|x| name.eq_ignore_ascii_case(x)) {
                return Err(f.table_error(format!(
                    "{name} frames the message: netchaos keeps the framing it read, so it is not changed (http_truncate cuts a body)"
                )));
            }
        }
        let request_only = [
            ("set_method", edits.method.is_some()),
            ("set_path", edits.path.is_some()),
            ("set_query", !edits.query.is_empty()),
        ];
        match phase {
            AnswerPhase::Request if edits.status.is_some() => {
                return Err(f.table_error(
                    "set_status changes a response: add phase = \"response\" (or answer in the upstream's place with http_status)",
                ));
            }
            AnswerPhase::Response => {
                if let Some((key, _)) = request_only.iter().find(|(_, set)| *set) {
                    return Err(f.table_error(format!(
                        "{key} changes the request, and phase = \"response\" changes the response: use two faults"
                    )));
                }
            }
            AnswerPhase::Request => {}
        }
        if edits == Edits::default() {
            return Err(f.table_error(
                "nothing to change: give set_method, set_path, set_query, set_header, remove_header, set_body, set_body_file, patch_json or patch_ops (phase = \"response\": set_status, set_header, remove_header or a body)",
            ));
        }
        Ok(HttpRewrite {
            phase,
            edits,
            matcher,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let e = &self.edits;
        let mut p = vec![];
        p.extend(self.phase.param());
        if let Some(m) = &e.method {
            p.push(("set_method", m.clone()));
        }
        if let Some(x) = &e.path {
            p.push(("set_path", x.clone()));
        }
        if let Some(s) = e.status {
            p.push(("set_status", s.to_string()));
        }
        if !e.remove_headers.is_empty() {
            p.push(("remove_header", e.remove_headers.join("|")));
        }
        match &e.body {
            Some(BodyEdit::Set(b, Shown::Text)) => {
                p.push(("set_body", String::from_utf8_lossy(b).into_owned()))
            }
            Some(BodyEdit::Set(_, Shown::File(path))) => p.push(("set_body_file", path.clone())),
            Some(BodyEdit::Json(e)) => p.push(e.param()),
            None => {}
        }
        p.extend(self.matcher.params());
        p
    }

    fn named_params(&self) -> Vec<(&'static str, String, String)> {
        let e = &self.edits;
        let query = e.query.iter().map(|(k, v)| ("set_query", k, v));
        let headers = e.set_headers.iter().map(|(k, v)| ("set_header", k, v));
        query
            .chain(headers)
            .map(|(key, k, v)| (key, k.clone(), v.clone()))
            .collect()
    }

    fn request_match(&self) -> Option<&RequestMatch> {
        Some(self.matcher())
    }

    fn on_request(
        &self,
        _rng: &mut rand_chacha::ChaCha8Rng,
        _host: Option<&str>,
        _path: &str,
    ) -> Option<HttpAct> {
        Some(HttpAct::Rewrite(self.phase(), self.clone()))
    }
}

impl HttpRewrite {
    pub(crate) fn matcher(&self) -> &RequestMatch {
        &self.matcher
    }

    pub(crate) fn phase(&self) -> AnswerPhase {
        self.phase
    }

    pub(crate) fn edits(&self) -> &Edits {
        &self.edits
    }
}

/// `set_body`, `set_body_file`, `patch_json` or `patch_ops`: one of them
/// at most.
fn body_edit(f: &mut Fields) -> Result<Option<BodyEdit>, ProfileError> {
    let text = f.string("set_body")?;
    let file = f.file("set_body_file")?;
    let patch = JsonEdit::parse(f)?;
    if [text.is_some(), file.is_some(), patch.is_some()]
        .iter()
        .filter(|x| **x)
        .count()
        > 1
    {
        return Err(f.table_error(
            "give one of set_body, set_body_file and patch_json or patch_ops: each makes the whole body",
        ));
    }
    if let Some(t) = text {
        return Ok(Some(BodyEdit::Set(t.into_bytes(), Shown::Text)));
    }
    if let Some((bytes, shown)) = file {
        return Ok(Some(BodyEdit::Set(bytes, Shown::File(shown))));
    }
    Ok(patch.map(BodyEdit::Json))
}

/// RFC 9110 `tchar`: what a method or a header name is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;

    fn rewrite(pairs: &[(&str, &str)]) -> Result<HttpRewrite, ProfileError> {
        spec("http_rewrite", pairs).map(|s| match s.kind {
            FaultKind::HttpRewrite(r) => r,
            _ => unreachable!(),
        })
    }

    #[test]
    fn parses_edits_and_refuses_what_would_break_framing() {
        let r = rewrite(&[
            ("set_method", "POST"),
            ("set_path", "/v2/x"),
            ("set_query", "beta=true"),
            ("set_header", "X-Chaos: 1"),
            ("remove_header", "User-Agent"),
        ])
        .unwrap();
        let e = r.edits();
        assert_eq!(e.method.as_deref(), Some("POST"));
        assert_eq!(e.query, [("beta".to_string(), "true".to_string())]);
        assert_eq!(e.set_headers, [("X-Chaos".to_string(), "1".to_string())]);
        assert_eq!(e.remove_headers, ["User-Agent"]);
        let r = rewrite(&[
            ("phase", "response"),
            ("set_status", "503"),
            ("set_header", "Retry-After: 2"),
            ("response_status", "200"),
        ])
        .unwrap();
        assert_eq!(r.edits().status, Some(503));
        // Bodies, in either phase; a list of headers to remove.
        let r = rewrite(&[("patch_json", r#"{"stop_reason": "max_tokens"}"#)]).unwrap();
        assert_eq!(
            r.edits().body,
            Some(BodyEdit::Json(JsonEdit::Merge(
                serde_json::json!({"stop_reason": "max_tokens"})
            )))
        );
        let r = rewrite(&[
            ("phase", "response"),
            ("set_body", "{}"),
            ("remove_header", "A|B"),
        ])
        .unwrap();
        assert_eq!(
            r.edits().body,
            Some(BodyEdit::Set(b"{}".to_vec(), Shown::Text))
        );
        assert_eq!(r.edits().remove_headers, ["A", "B"]);
        for (bad, says) in [
            (vec![], "nothing to change"),
            (vec![("set_method", "HEAD")], "framed"),
            (vec![("set_method", "GE T")], "expected a method"),
            (vec![("set_path", "v2")], "expected a path"),
            (vec![("set_path", "/a?b=1")], "use set_query"),
            (
                vec![("set_header", "Content-Length: 3")],
                "frames the message",
            ),
            (
                vec![("remove_header", "transfer-encoding")],
                "frames the message",
            ),
            (vec![("set_header", "Bad Name: 3")], "header name"),
            (vec![("set_status", "503")], "phase = \"response\""),
            (
                vec![("phase", "response"), ("set_status", "204")],
                "no body",
            ),
            (
                vec![("phase", "response"), ("set_path", "/x")],
                "two faults",
            ),
            (vec![("set_query", "a=b&c")], "set_query"),
            (
                vec![("set_header", "X-A: 1"), ("response_status", "5xx")],
                "changes the request, before any response",
            ),
            (vec![("set_path", "/a#b")], "expected a path"),
            (vec![("set_body", "x"), ("patch_json", "{}")], "give one of"),
            (
                vec![("patch_json", "{\"a\": }")],
                "expected a JSON merge patch",
            ),
        ] {
            let e = rewrite(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
