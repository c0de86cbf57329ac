//! Messages rewritten on their way: the `Host` of a proxy speaking TLS
//! upstream, and `http_rewrite`'s edits — a request's method, path, query
//! and headers, a response's status and headers, and either's body. A
//! head keeps its framing unless its body is rewritten: then the new body
//! goes with its own `Content-Length` ([`reframed`]), so both peers still
//! agree where each message ends.

use bytes::Bytes;
use serde_json::Value;

use super::wire::JSON_LINES;

use crate::fault::http_reply::reason;
use crate::fault::http_rewrite::{BodyEdit, Edits};

/// A request head without its offer to upgrade to HTTP/2 in the clear
/// (`Upgrade: h2c`, `HTTP2-Settings`, and their `Connection` options;
/// `connection` is that header's value).
pub(crate) fn without_h2c(head: &[u8], connection: Option<&str>) -> Bytes {
    let head = set_header(head, "Upgrade", None);
    let head = set_header(&head, "HTTP2-Settings", None);
    let kept: Vec<&str> = connection
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| {
            !t.is_empty()
                && !t.eq_ignore_ascii_case("upgrade")
                && !t.eq_ignore_ascii_case("http2-settings")
        })
        .collect();
    let value = kept.join(", ");
    set_header(
        &head,
        "Connection",
        (!kept.is_empty()).then_some(value.as_str()),
    )
}

/// The head with its `name` header (every line of it) replaced by one
/// saying `value`, added when there was none; with no value, removed.
pub(crate) fn set_header(bytes: &[u8], name: &str, value: Option<&str>) -> Bytes {
    let line_out = value.map_or(String::new(), |v| format!("{name}: {v}\r\n"));
    let mut out = Vec::with_capacity(bytes.len() + line_out.len());
    let mut seen = false;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let field = line.split(|b| *b == b':').next().unwrap_or(b"");
        if line.contains(&b':') && field.eq_ignore_ascii_case(name.as_bytes()) {
            if !seen {
                out.extend_from_slice(line_out.as_bytes());
                seen = true;
            }
            continue;
        }
        if !seen && (line == b"\r\n" || line == b"\n") {
            out.extend_from_slice(line_out.as_bytes());
            seen = true;
        }
        out.extend_from_slice(line);
    }
    Bytes::from(out)
}

/// A request head (blank line included) with `e`'s edits made. A request
/// sent as HEAD or CONNECT keeps its method (its response is framed by
/// it), and a CONNECT its target (an authority, not a path). The request
/// line is rebuilt only when it changes.
pub(crate) fn request(head: &[u8], e: &Edits) -> Bytes {
    let (line, rest) = first_line(head);
    let rest = headers(rest, e);
    let text = String::from_utf8_lossy(line);
    let mut parts = text.trim_end().splitn(3, ' ');
    let edits_line = e.method.is_some() || e.path.is_some() || !e.query.is_empty();
    let (Some(method), Some(target), Some(version), true) =
        (parts.next(), parts.next(), parts.next(), edits_line)
    else {
        let mut out = line.to_vec();
        out.extend_from_slice(&rest);
        return Bytes::from(out);
    };
    let fixed = ["HEAD", "CONNECT"]
        .iter()
        .any(|m| method.eq_ignore_ascii_case(m));
    let new_method = e.method.as_deref().filter(|_| !fixed).unwrap_or(method);
    let target = match method.eq_ignore_ascii_case("CONNECT") {
        true => target.to_string(),
        false => edit_target(target, e.path.as_deref(), &e.query),
    };
    let mut out = format!("{new_method} {target} {version}\r\n").into_bytes();
    out.extend_from_slice(&rest);
    Bytes::from(out)
}

/// A response head with `e`'s edits made. `status_framed`: its status
/// frames what follows (a 101, or the answer to a CONNECT: a tunnel or
/// not), so it is kept. A response that had no body by its status (204,
/// 304) says `Content-Length: 0` under its new one (and no chunking), or
/// the client would wait for a body that never comes.
pub(crate) fn response(head: &[u8], e: &Edits, status: u16, status_framed: bool) -> Bytes {
    let (line, rest) = first_line(head);
    let mut rest = headers(rest, e);
    let new = e.status.filter(|s| *s != status && !status_framed);
    let Some(new) = new else {
        let mut out = line.to_vec();
        out.extend_from_slice(&rest);
        return Bytes::from(out);
    };
    let text = String::from_utf8_lossy(line);
    let version = text.split(' ').next().unwrap_or("HTTP/1.1");
    if status == 204 || status == 304 {
        rest = set_header(&rest, "Transfer-Encoding", None);
        rest = set_header(&rest, "Content-Length", Some("0"));
    }
    let mut out = format!("{version} {new} {}\r\n", reason(new)).into_bytes();
    out.extend_from_slice(&rest);
    Bytes::from(out)
}

/// The body after `edit`, or `None` when it does not apply: a JSON patch
/// on a body that is not JSON (`json`: its `Content-Type` says JSON; and
/// it parses), or one whose operation failed (a `test`). A patch that
/// changes no value leaves the bytes as they were (its re-serialisation
/// would differ in spacing alone).
pub(crate) fn body(payload: &[u8], edit: &BodyEdit, json: bool) -> Option<Vec<u8>> {
    match edit {
        BodyEdit::Set(bytes, _) => Some(bytes.clone()),
        BodyEdit::Json(_) if !json => None,
        BodyEdit::Json(patch) => {
            let was: Value = serde_json::from_slice(payload).ok()?;
            let now = patch.apply(&was)?;
            match now == was {
                true => Some(payload.to_vec()),
                false => serde_json::to_vec(&now).ok(),
            }
        }
    }
}

/// Media types of bodies that stream for as long as their sender likes
/// (beside JSON lines, [`JSON_LINES`]): rewriting one would hold it back
/// until it ended.
const STREAMS: &[&str] = &[
    "text/event-stream",
    "application/stream+json",
    "multipart/x-mixed-replace",
    "application/vnd.amazon.eventstream",
];

/// The media type of a `Content-Type`, lowercased, without parameters.
fn media_type(headers: &[(String, String)]) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// Whether a message with these headers has a body netchaos can rewrite:
/// not compressed (`Content-Encoding` other than identity), framed by its
/// length or plain chunking, and not a stream (events, NDJSON …).
pub(crate) fn body_editable(headers: &[(String, String)]) -> bool {
    let plain = headers.iter().all(|(k, v)| {
        let v = v.trim();
        match k.to_ascii_lowercase().as_str() {
            "content-encoding" => v.is_empty() || v.eq_ignore_ascii_case("identity"),
            "transfer-encoding" => v.eq_ignore_ascii_case("chunked"),
            _ => true,
        }
    });
    plain
        && media_type(headers)
            .is_none_or(|t| !STREAMS.contains(&t.as_str()) && !JSON_LINES.contains(&t.as_str()))
}

/// Whether the `Content-Type` says JSON (`application/json`, `…+json`):
/// the bodies a `patch_json` applies to.
pub(crate) fn is_json(headers: &[(String, String)]) -> bool {
    media_type(headers).is_some_and(|t| t == "application/json" || t.ends_with("+json"))
}

/// A head made to frame a body of `len` bytes: its `Content-Length`, and
/// no chunking (the body goes whole, its trailers dropped). `closes`: the
/// body ran until the connection closed, which still ends it after this
/// body — the head says so, or a client would reuse the connection.
pub(crate) fn reframed(head: &[u8], len: usize, closes: bool) -> Bytes {
    let mut head = set_header(head, "Transfer-Encoding", None);
    if closes {
        head = set_header(&head, "Connection", Some("close"));
    }
    set_header(&head, "Content-Length", Some(&len.to_string()))
}

/// (the first line, the rest), the line with its end.
fn first_line(head: &[u8]) -> (&[u8], &[u8]) {
    match head.iter().position(|b| *b == b'\n') {
        Some(i) => head.split_at(i + 1),
        None => (head, &[]),
    }
}

/// The header lines (and blank line) with `e`'s removals and settings.
fn headers(lines: &[u8], e: &Edits) -> Bytes {
    let mut out = Bytes::copy_from_slice(lines);
    for name in &e.remove_headers {
        out = set_header(&out, name, None);
    }
    for (name, value) in &e.set_headers {
        out = set_header(&out, name, Some(value));
    }
    out
}

/// A request target with its path replaced and query parameters set
/// (replaced where the name is there, its repeats dropped; else added).
/// An absolute-form target (`http://host/path`) keeps its scheme and
/// authority; `*` is left alone.
fn edit_target(target: &str, path: Option<&str>, query: &[(String, String)]) -> String {
    if target == "*" {
        return target.to_string();
    }
    let start = match target.find("://") {
        Some(i) => target[i + 3..]
            .find(['/', '?'])
            .map_or(target.len(), |j| i + 3 + j),
        None => 0,
    };
    let (prefix, rest) = target.split_at(start);
    let (old_path, old_query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let mut params: Vec<String> = old_query
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    for (k, v) in query {
        let named = |p: &String| p.split('=').next() == Some(k.as_str());
        let pair = format!("{k}={v}");
        match params.iter().position(named) {
            Some(i) => {
                params[i] = pair;
                let mut j = i + 1;
                while j < params.len() {
                    if named(&params[j]) {
                        params.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => params.push(pair),
        }
    }
    let path = path.unwrap_or(if old_path.is_empty() { "/" } else { old_path });
    match (params.is_empty(), old_query) {
        (true, Some("")) => format!("{prefix}{path}?"),
        (true, _) => format!("{prefix}{path}"),
        (false, _) => format!("{prefix}{path}?{}", params.join("&")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_h2c_upgrade_offer_is_taken_out() {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
        let out = without_h2c(head, Some("Upgrade, HTTP2-Settings, close"));
        assert_eq!(
            &out[..],
            &b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..]
        );
        let head = b"GET / HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n";
        assert_eq!(
            &without_h2c(head, Some("Upgrade, HTTP2-Settings"))[..],
            &b"GET / HTTP/1.1\r\n\r\n"[..]
        );
    }
    use crate::fault::json_edit::JsonEdit;

    fn edits() -> Edits {
        Edits::default()
    }

    #[test]
    fn a_header_is_replaced_or_added() {
        let raw = b"GET / HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nAccept: */*\r\n\r\n";
        let out = set_header(raw, "Host", Some("api.example.com"));
        assert_eq!(
            &out[..],
            b"GET / HTTP/1.1\r\nHost: api.example.com\r\nAccept: */*\r\n\r\n"
        );
        let raw = b"GET / HTTP/1.0\r\n\r\n";
        assert_eq!(
            &set_header(raw, "Host", Some("a"))[..],
            b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"
        );
        let raw = b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nconnection: x\r\n\r\n";
        assert_eq!(
            &set_header(raw, "Connection", Some("close"))[..],
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
        );
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nContent-Length-X: 1\r\n\r\n";
        assert_eq!(
            &set_header(raw, "content-length", None)[..],
            b"HTTP/1.1 200 OK\r\nContent-Length-X: 1\r\n\r\n"
        );
    }

    #[test]
    fn a_request_gets_its_method_path_query_and_headers_changed() {
        let e = Edits {
            method: Some("POST".into()),
            path: Some("/v2/items".into()),
            query: vec![("beta".into(), "true".into()), ("n".into(), "2".into())],
            set_headers: vec![("X-Chaos".into(), "1".into())],
            remove_headers: vec!["user-agent".into()],
            ..edits()
        };
        let raw = b"GET /v1/items?n=1&a=b&n=3 HTTP/1.1\r\nHost: x\r\nUser-Agent: curl\r\n\r\n";
        assert_eq!(
            &request(raw, &e)[..],
            &b"POST /v2/items?n=2&a=b&beta=true HTTP/1.1\r\nHost: x\r\nX-Chaos: 1\r\n\r\n"[..]
        );
        // HEAD keeps its method (its response has no body); absolute-form
        // keeps its authority.
        let raw = b"HEAD http://x:8080/a?q HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(
            &request(raw, &e)[..],
            &b"HEAD http://x:8080/v2/items?q&beta=true&n=2 HTTP/1.1\r\nHost: x\r\nX-Chaos: 1\r\n\r\n"[..]
        );
        let only_query = Edits {
            query: vec![("k".into(), "v".into())],
            ..edits()
        };
        assert_eq!(edit_target("/p", None, &only_query.query), "/p?k=v");
        assert_eq!(
            edit_target("http://h", None, &only_query.query),
            "http://h/?k=v"
        );
        assert_eq!(edit_target("/p?", None, &[]), "/p?");
        assert_eq!(
            edit_target("http://h?q=1", None, &only_query.query),
            "http://h/?q=1&k=v"
        );
        // A lowercase head is still HEAD; a CONNECT keeps its authority;
        // headers alone leave the request line as it was sent.
        let raw = b"head /a HTTP/1.1\r\n\r\n";
        assert_eq!(&request(raw, &e)[..5], b"head ");
        let raw = b"CONNECT h:443 HTTP/1.1\r\n\r\n";
        assert!(request(raw, &e).starts_with(b"CONNECT h:443 HTTP/1.1\r\n"));
        let headers_only = Edits {
            set_headers: vec![("X-A".into(), "1".into())],
            ..edits()
        };
        let raw = b"GET /a?x&&y HTTP/1.1\r\n\r\n";
        assert_eq!(
            &request(raw, &headers_only)[..],
            b"GET /a?x&&y HTTP/1.1\r\nX-A: 1\r\n\r\n"
        );
    }

    #[test]
    fn a_json_merge_patch_follows_rfc_7396() {
        let patch = |target: &str, patch: &str| -> String {
            let edit = BodyEdit::Json(JsonEdit::Merge(serde_json::from_str(patch).unwrap()));
            String::from_utf8(body(target.as_bytes(), &edit, true).expect("JSON")).unwrap()
        };
        // RFC 7396's own example, members kept in their order.
        assert_eq!(
            patch(
                r#"{"title":"Goodbye!","author":{"givenName":"John","familyName":"Doe"},"tags":["example","sample"],"content":"This will be unchanged"}"#,
                r#"{"title":"Hello!","phoneNumber":"+01-123-456-7890","author":{"familyName":null},"tags":["example"]}"#
            ),
            r#"{"title":"Hello!","author":{"givenName":"John"},"tags":["example"],"content":"This will be unchanged","phoneNumber":"+01-123-456-7890"}"#
        );
        assert_eq!(
            patch(r#"{"a":"b"}"#, r#"{"a":{"b":"c"}}"#),
            r#"{"a":{"b":"c"}}"#
        );
        assert_eq!(patch(r#"["a","b"]"#, r#"{"a":"c"}"#), r#"{"a":"c"}"#);
        assert_eq!(patch(r#"{"a":"foo"}"#, "null"), "null");
        assert_eq!(patch(r#"{"e":null}"#, r#"{"a":1}"#), r#"{"e":null,"a":1}"#);
        // Nothing changed: the bytes stay as they came, spacing and all.
        assert_eq!(patch("{ \"a\" : 1 }\n", r#"{"a":1}"#), "{ \"a\" : 1 }\n");
        let edit = BodyEdit::Json(JsonEdit::Merge(serde_json::json!({"a": 1})));
        assert_eq!(body(b"<html>", &edit, true), None);
        // Only a body its Content-Type calls JSON is patched.
        assert_eq!(body(b"42", &edit, false), None);
        let h = |t: &str| vec![("Content-Type".to_string(), t.to_string())];
        assert!(is_json(&h("application/json; charset=utf-8")));
        assert!(is_json(&h("application/problem+json")));
        assert!(!is_json(&h("text/plain")));
        assert!(!body_editable(&h("application/x-ndjson")));
        assert!(body_editable(&h("application/json")));
    }

    #[test]
    fn a_rewritten_body_is_framed_by_its_length() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n";
        assert_eq!(
            &reframed(raw, 12, false)[..],
            b"HTTP/1.1 200 OK\r\nX: y\r\nContent-Length: 12\r\n\r\n"
        );
        let raw = b"HTTP/1.0 200 OK\r\n\r\n";
        assert_eq!(
            &reframed(raw, 2, true)[..],
            b"HTTP/1.0 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n"
        );
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(body_editable(&h("Transfer-Encoding", "chunked")));
        assert!(body_editable(&h("Content-Encoding", "identity")));
        assert!(!body_editable(&h("Content-Encoding", "gzip")));
        assert!(!body_editable(&h("Transfer-Encoding", "gzip, chunked")));
    }

    #[test]
    fn a_response_keeps_its_body_under_a_new_status() {
        let e = Edits {
            status: Some(503),
            set_headers: vec![("Retry-After".into(), "2".into())],
            ..edits()
        };
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(
            &response(raw, &e, 200, false)[..],
            &b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\nRetry-After: 2\r\n\r\n"[..]
        );
        // A 304's length describes a body it does not carry.
        let raw = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 900\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            &response(raw, &e, 304, false)[..],
            &b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 2\r\n\r\n"[..]
        );
        // A 101 keeps its status (what follows is a tunnel).
        let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
        assert!(response(raw, &e, 101, true).starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
        let headers_only = Edits {
            remove_headers: vec!["Server".into()],
            ..edits()
        };
        let raw = b"HTTP/1.0 200 Fine\r\nServer: x\r\n\r\n";
        assert_eq!(
            &response(raw, &headers_only, 200, false)[..],
            b"HTTP/1.0 200 Fine\r\n\r\n"
        );
    }
}
