//! HTTP/1.1 on the wire, read without rewriting: where a message's head
//! ends and what it says (method, target, status, headers), and where its
//! body ends — `content-length`, chunked, until the connection closes, or a
//! tunnel after an upgrade — so that an unfaulted request passes byte for
//! byte, and a faulted one can be answered, delayed or cut at the right
//! byte. Heads are parsed by httparse; bodies by [`Body`], fed in pieces.

use super::events::Format;

pub(crate) use crate::protocol::events::JSON_LINES;

/// The largest head read; a longer one is not HTTP netchaos will parse.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Headers per head.
const MAX_HEADERS: usize = 256;

/// Why bytes are not HTTP/1.1 netchaos can follow: malformed, or
/// ambiguous (two readers could find different ends). The HTTP layer
/// answers such a request 400 and closes its connection; it relays such a
/// response as bytes (the client reads what it would have read directly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WireError(&'static str);

/// A head longer than [`MAX_HEAD`].
const TOO_LARGE: WireError = WireError("a head longer than 64 KiB");

impl WireError {
    /// A request body whose framing broke (the event log says how).
    pub(crate) const BAD_BODY: WireError = WireError("a malformed request body");

    /// The head is longer than netchaos parses (not malformed as such: it
    /// passes as bytes, for the upstream to refuse as it would).
    pub(crate) fn is_too_large(self) -> bool {
        self == TOO_LARGE
    }
}

/// Why httparse refused a head, in the words of [`WireError`].
fn refused(e: httparse::Error) -> WireError {
    WireError(match e {
        httparse::Error::HeaderName => "a malformed header name",
        httparse::Error::HeaderValue => "a malformed header value",
        httparse::Error::NewLine => "a malformed line ending",
        httparse::Error::Status => "a malformed status line",
        httparse::Error::Token => "a malformed request line",
        httparse::Error::TooManyHeaders => "more than 256 header lines",
        httparse::Error::Version => "a malformed HTTP version",
    })
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor: u8,
    pub(crate) headers: Vec<(String, String)>,
    /// Bytes of the head, blank line included.
    pub(crate) head_len: usize,
}

/// A parsed response head.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor: u8,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) head_len: usize,
}

/// Where a message's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// Until the connection closes (a response without a length).
    UntilClose,
    /// Not HTTP any more: an upgrade (101) or a CONNECT tunnel.
    Tunnel,
}

/// A head, if `buf` holds a whole one.
pub(crate) fn request(buf: &[u8]) -> Result<Option<Request>, WireError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Request::new(&mut headers);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(head_len)) => Ok(Some(Request {
            method: r.method.unwrap_or("").to_string(),
            target: r.path.unwrap_or("").to_string(),
            minor: r.version.unwrap_or(1),
            headers: owned(r.headers),
            head_len,
        })),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => Err(TOO_LARGE),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(refused(e)),
    }
}

/// A head, if `buf` holds a whole one.
pub(crate) fn response(buf: &[u8]) -> Result<Option<Response>, WireError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut headers);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(head_len)) => Ok(Some(Response {
            status: r.code.unwrap_or(0),
            minor: r.version.unwrap_or(1),
            headers: owned(r.headers),
            head_len,
        })),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => Err(TOO_LARGE),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(refused(e)),
    }
}

/// Whether the first bytes of a connection look like an HTTP/1.x request
/// (a method token, a space): enough to try parsing it as one. A method is
/// any token (RFC 9110 §9.1: case-sensitive, `get` is a method of its own,
/// for the server to answer): its letters' case is not looked at. (Taken
/// only from a letter on: methods in use begin with one, numbers and
/// symbols begin other protocols.)
pub(crate) fn looks_like_request(first: &[u8]) -> bool {
    let method = first.iter().take_while(|b| is_tchar(**b)).count();
    (1..=MAX_METHOD).contains(&method)
        && first[0].is_ascii_alphabetic()
        && first.get(method) == Some(&b' ')
}

/// Whether the first bytes of a connection could be the start of a method
/// still arriving.
pub(crate) fn may_start_request(first: &[u8]) -> bool {
    (1..=MAX_METHOD).contains(&first.len())
        && first[0].is_ascii_alphabetic()
        && first.iter().all(|b| is_tchar(*b))
}

/// The longest method taken for one when sniffing (`UPDATEREDIRECTREF`,
/// WebDAV's, has 17 letters).
const MAX_METHOD: usize = 20;

/// A token character (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `buf` (a head httparse refused) begins with an HTTP/1.x
/// request line: then it is HTTP, malformed further on; else it is some
/// other protocol that happened to start like one.
pub(crate) fn starts_with_request_line(buf: &[u8]) -> bool {
    let end = buf
        .iter()
        .position(|&b| b == b'\n')
        .map_or(buf.len(), |i| i + 1);
    let mut line = buf[..end].to_vec();
    line.extend_from_slice(b"\r\n");
    let mut headers = [httparse::EMPTY_HEADER; 1];
    httparse::Request::new(&mut headers).parse(&line).is_ok()
}

fn owned(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Whether a comma-separated header holds `token` (case-insensitive).
fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The codings of the `transfer-encoding` headers, in order (`None`
/// without one); empty list elements are skipped (RFC 9110 §5.6.1).
fn transfer_codings(headers: &[(String, String)]) -> Option<Vec<&str>> {
    let mut named = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"))
        .peekable();
    named.peek()?;
    Some(
        named
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect(),
    )
}

/// The `content-length` (`None` without one): digits only (RFC 9110
/// §8.6: `+5`, `5 5` or `0x5` are not lengths); a list of the same value
/// stands for it, two different ones are an error (RFC 9112 §6.3).
fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, WireError> {
    let mut n = None;
    for v in headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .flat_map(|(_, v)| v.split(','))
    {
        let v = v.trim();
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(WireError("a content-length that is not a number"));
        }
        let m: u64 = v
            .parse()
            .map_err(|_| WireError("a content-length too large"))?;
        if n.is_some_and(|n| n != m) {
            return Err(WireError("conflicting content-lengths"));
        }
        n = Some(m);
    }
    Ok(n)
}

fn length(n: u64) -> Framing {
    if n == 0 {
        Framing::Empty
    } else {
        Framing::Length(n)
    }
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Where the body ends; an error for what a strict server refuses
    /// with a 400 and a close (RFC 9112 §6.1, §6.3, §3.2), because two
    /// readers could disagree on where this request ends (or which host it
    /// is for) — a request smuggled past netchaos's rules, or one a server
    /// behind reads differently: `Transfer-Encoding` beside
    /// `Content-Length`, in HTTP/1.0, or not ending in a single `chunked`;
    /// a length that is not a number, or two different ones; two `Host`s.
    pub(crate) fn framing(&self) -> Result<Framing, WireError> {
        let hosts = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
            .count();
        if hosts > 1 {
            return Err(WireError("more than one Host header"));
        }
        let length = content_length(&self.headers)?;
        let Some(codings) = transfer_codings(&self.headers) else {
            return Ok(match length {
                _ if self.method.eq_ignore_ascii_case("CONNECT") => Framing::Empty,
                Some(n) => self::length(n),
                None => Framing::Empty,
            });
        };
        if self.minor == 0 {
            return Err(WireError("a transfer-encoding in an HTTP/1.0 request"));
        }
        if length.is_some() {
            return Err(WireError("both content-length and transfer-encoding"));
        }
        let chunked = |t: &str| t.eq_ignore_ascii_case("chunked");
        match codings.last() {
            Some(last) if chunked(last) => {}
            _ => {
                return Err(WireError(
                    "a transfer-encoding that does not end in chunked",
                ));
            }
        }
        if codings.iter().filter(|t| chunked(t)).count() > 1 {
            return Err(WireError("a transfer-encoding with chunked twice"));
        }
        Ok(Framing::Chunked)
    }

    /// `Expect: 100-continue`: the client waits for a go-ahead (or the
    /// answer) before it sends the body.
    pub(crate) fn expects_continue(&self) -> bool {
        has_token(&self.headers, "expect", "100-continue")
    }

    /// Whether the connection may carry another request after this one.
    pub(crate) fn keep_alive(&self) -> bool {
        if self.minor == 0 {
            has_token(&self.headers, "connection", "keep-alive")
        } else {
            !has_token(&self.headers, "connection", "close")
        }
    }
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The upstream ends the connection after it: `Connection: close`, or
    /// HTTP/1.0 without `keep-alive`.
    pub(crate) fn closes(&self) -> bool {
        match self.minor {
            0 => !has_token(&self.headers, "connection", "keep-alive"),
            _ => has_token(&self.headers, "connection", "close"),
        }
    }

    /// A 1xx other than 101: the final response is still to come.
    pub(crate) fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// Where the body ends, for a response to a request with `method`.
    pub(crate) fn framing(&self, method: &str) -> Result<Framing, WireError> {
        if self.status == 101
            || (method.eq_ignore_ascii_case("CONNECT") && (200..300).contains(&self.status))
        {
            return Ok(Framing::Tunnel);
        }
        if self.is_interim()
            || self.status == 204
            || self.status == 304
            || method.eq_ignore_ascii_case("HEAD")
        {
            return Ok(Framing::Empty);
        }
        // A transfer-encoding overrides a length; one that does not end in
        // chunked runs until the close (RFC 9112 §6.3).
        match transfer_codings(&self.headers) {
            Some(codings) => Ok(match codings.last() {
                Some(t) if t.eq_ignore_ascii_case("chunked") => Framing::Chunked,
                _ => Framing::UntilClose,
            }),
            None => Ok(content_length(&self.headers)?.map_or(Framing::UntilClose, length)),
        }
    }

    /// A `Content-Encoding` other than identity.
    pub(crate) fn is_compressed(&self) -> bool {
        self.header("content-encoding").is_some_and(compressed)
    }

    /// How the body streams events ([`Format::of_media_type`]).
    pub(crate) fn stream_format(&self) -> Option<Format> {
        self.header("content-type").and_then(Format::of_media_type)
    }
}

/// Whether a `Content-Encoding` compresses (anything but none or identity).
pub(crate) fn compressed(encoding: &str) -> bool {
    let e = encoding.trim();
    !e.is_empty() && !e.eq_ignore_ascii_case("identity")
}

/// Follows a body arriving in pieces: where it ends, and (if asked) the
/// payload it carries, de-chunked.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// So many payload bytes still to come.
    Length(u64),
    /// Everything until the connection closes.
    Until,
    /// A chunk-size line: its value so far, its digits, and whether past
    /// them (in an extension).
    Size {
        value: u64,
        digits: u32,
        ext: bool,
    },
    /// The CR of a chunk-size line was read; its LF is next.
    SizeLf {
        value: u64,
        digits: u32,
    },
    /// So many bytes of the current chunk still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataCr,
    DataLf,
    /// Trailer lines: at the start of one, or within one.
    TrailerStart,
    TrailerLine,
    TrailerLf {
        empty: bool,
    },
    Done,
}

/// What [`Body::scan`] did with its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Input bytes that belong to this body.
    pub(crate) used: usize,
    /// The body ended within them.
    pub(crate) done: bool,
}

impl Body {
    pub(crate) fn new(framing: Framing) -> Body {
        Body {
            state: match framing {
                Framing::Empty => State::Done,
                Framing::Length(n) => State::Length(n),
                Framing::Chunked => NEW_SIZE,
                Framing::UntilClose | Framing::Tunnel => State::Until,
            },
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes what of `input` is this body's; appends its payload (the
    /// data without chunk framing) to `payload` when given.
    pub(crate) fn scan(
        &mut self,
        input: &[u8],
        mut payload: Option<&mut Vec<u8>>,
    ) -> Result<Scan, WireError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            // Runs of payload are taken whole; framing bytes one at a time.
            if let State::Length(left) | State::Data(left) = self.state {
                let n = left.min((input.len() - i) as u64) as usize;
                if let Some(p) = payload.as_deref_mut() {
                    p.extend_from_slice(&input[i..i + n]);
                }
                i += n;
                let left = left - n as u64;
                self.state = match (self.state, left) {
                    (State::Length(_), 0) => State::Done,
                    (State::Length(_), l) => State::Length(l),
                    (_, 0) => State::DataCr,
                    (_, l) => State::Data(l),
                };
                continue;
            }
            if self.state == State::Until {
                if let Some(p) = payload.as_deref_mut() {
                    p.extend_from_slice(&input[i..]);
                }
                i = input.len();
                continue;
            }
            self.state = framing_byte(self.state, input[i])?;
            i += 1;
        }
        Ok(Scan {
            used: i,
            done: self.state == State::Done,
        })
    }
}

const NEW_SIZE: State = State::Size {
    value: 0,
    digits: 0,
    ext: false,
};

/// The state after one byte of chunk framing.
fn framing_byte(state: State, b: u8) -> Result<State, WireError> {
    Ok(match state {
        State::Size { value, digits, ext } => match b {
            b'\r' => State::SizeLf { value, digits },
            b'\n' => size_done(value, digits)?,
            _ if ext => state,
            b';' | b' ' | b'\t' => State::Size {
                value,
                digits,
                ext: true,
            },
            _ => {
                let d = (b as char)
                    .to_digit(16)
                    .ok_or(WireError("a chunk size that is not hex"))?;
                if digits >= 15 {
                    return Err(WireError("a chunk size too large"));
                }
                State::Size {
                    value: value * 16 + u64::from(d),
                    digits: digits + 1,
                    ext,
                }
            }
        },
        State::SizeLf { value, digits } => match b {
            b'\n' => size_done(value, digits)?,
            _ => return Err(WireError("a chunk size line without its LF")),
        },
        State::DataCr => match b {
            b'\r' => State::DataLf,
            b'\n' => NEW_SIZE,
            _ => return Err(WireError("a chunk without its CRLF")),
        },
        State::DataLf => match b {
            b'\n' => NEW_SIZE,
            _ => return Err(WireError("a chunk without its CRLF")),
        },
        State::TrailerStart => match b {
            b'\r' => State::TrailerLf { empty: true },
            b'\n' => State::Done,
            _ => State::TrailerLine,
        },
        State::TrailerLine => match b {
            b'\r' => State::TrailerLf { empty: false },
            b'\n' => State::TrailerStart,
            _ => State::TrailerLine,
        },
        State::TrailerLf { empty } => match (b, empty) {
            (b'\n', true) => State::Done,
            (b'\n', false) => State::TrailerStart,
            _ => return Err(WireError("a trailer line without its LF")),
        },
        State::Length(_) | State::Data(_) | State::Until | State::Done => state,
    })
}

fn size_done(value: u64, digits: u32) -> Result<State, WireError> {
    if digits == 0 {
        return Err(WireError("an empty chunk size"));
    }
    Ok(if value == 0 {
        State::TrailerStart
    } else {
        State::Data(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; the bytes used and payload.
    fn scan_in(framing: Framing, input: &[u8], step: usize) -> (usize, bool, Vec<u8>) {
        let mut body = Body::new(framing);
        let mut payload = Vec::new();
        let mut used = 0;
        for piece in input.chunks(step) {
            let s = body.scan(piece, Some(&mut payload)).unwrap();
            used += s.used;
            if s.done {
                return (used, true, payload);
            }
        }
        (used, body.is_done(), payload)
    }

    #[test]
    fn chunked_bodies_end_where_they_end_in_any_split() {
        let wire = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in 1..wire.len() {
            let (used, done, payload) = scan_in(Framing::Chunked, wire, step);
            assert!(done, "step {step}");
            assert_eq!(used, wire.len() - 4, "step {step}");
            assert_eq!(payload, b"Wikipedia in\r\n\r\nchunks.", "step {step}");
        }
        let (used, done, _) = scan_in(Framing::Chunked, b"0\r\n\r\nGET", 2);
        assert!(done);
        assert_eq!(used, 5);
    }

    #[test]
    fn lengths_and_bad_chunks() {
        let (used, done, payload) = scan_in(Framing::Length(3), b"abcdef", 2);
        assert_eq!((used, done, payload.as_slice()), (3, true, &b"abc"[..]));
        let (used, done, _) = scan_in(Framing::UntilClose, b"abcdef", 4);
        assert_eq!((used, done), (6, false));
        assert!(Body::new(Framing::Chunked).scan(b"zz\r\n", None).is_err());
        assert!(Body::new(Framing::Chunked).scan(b"\r\n", None).is_err());
        assert!(Body::new(Framing::Chunked).scan(b"1\r\nab", None).is_err());
        assert!(
            Body::new(Framing::Chunked)
                .scan(b"fffffffffffffffff\r\n", None)
                .is_err()
        );
    }

    /// What a strict server refuses (RFC 9112 §6.1, §6.3, §3.2), and the
    /// valid forms beside it.
    #[test]
    fn ambiguous_request_framing_is_an_error() {
        let framing = |extra: &str, version: &str| {
            let head = format!("POST / HTTP/1.{version}\r\nHost: a\r\n{extra}\r\n");
            request(head.as_bytes()).unwrap().unwrap().framing()
        };
        for (extra, version) in [
            ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "1"),
            ("Transfer-Encoding: chunked\r\n", "0"),
            ("Transfer-Encoding: xchunked\r\n", "1"),
            ("Transfer-Encoding: chunked, identity\r\n", "1"),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "1",
            ),
            ("Transfer-Encoding: \r\n", "1"),
            ("Content-Length: +5\r\n", "1"),
            ("Content-Length: 5 5\r\n", "1"),
            ("Content-Length: 0x5\r\n", "1"),
            ("Content-Length: 99999999999999999999999\r\n", "1"),
            ("Content-Length: 5\r\nContent-Length: 6\r\n", "1"),
            ("Host: b\r\n", "1"),
        ] {
            assert!(
                framing(extra, version).is_err(),
                "{extra:?} HTTP/1.{version}"
            );
        }
        assert_eq!(
            framing("Transfer-Encoding: gzip, chunked\r\n", "1"),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing(
                "Transfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n",
                "1"
            ),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing("Content-Length: 5, 5\r\n", "1"),
            Ok(Framing::Length(5))
        );
        assert_eq!(framing("", "0"), Ok(Framing::Empty));
        // A response's transfer-encoding not ending in chunked runs until
        // the close; beside a length, it wins.
        let r = response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.framing("GET"), Ok(Framing::UntilClose));
        let r =
            response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .unwrap();
        assert_eq!(r.framing("GET"), Ok(Framing::Chunked));
    }

    #[test]
    fn any_method_token_is_http_and_other_first_lines_are_not() {
        let r = request(b"get /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.method, "get");
        for first in [
            &b"get / HTTP/1.1"[..],
            b"M-SEARCH * HTTP/1.1",
            b"PROPFIND /",
        ] {
            assert!(looks_like_request(first), "{first:?}");
        }
        assert!(may_start_request(b"pos") && !may_start_request(b"*1\r\n"));
        assert!(!may_start_request(b"1234") && !looks_like_request(b"+OK hi"));
        assert!(!looks_like_request(b"*1\r\n$4\r\nPING"));
        // httparse refuses both; only the first is HTTP (a bad header line).
        let bad_header = b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n";
        assert!(request(bad_header).is_err());
        assert!(starts_with_request_line(bad_header));
        for bad in [
            &b"GET / HTTP/1.1\r\nA : b\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
            b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
        ] {
            assert!(request(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert!(starts_with_request_line(bad));
        }
        assert!(request(b"get key\r\n").is_err());
        assert!(!starts_with_request_line(b"get key\r\n"));
        assert!(!starts_with_request_line(b"set key 0 0 5\r\nhello\r\n"));
    }

    #[test]
    fn heads_and_framing() {
        let r = request(b"POST /v1/messages HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.method.as_str(), r.target.as_str(), r.head_len),
            ("POST", "/v1/messages", 80)
        );
        assert_eq!(r.framing(), Ok(Framing::Length(5)));
        assert!(r.expects_continue() && r.keep_alive());
        assert!(request(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap().is_none());
        assert!(
            request(b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
                .unwrap()
                .unwrap()
                .framing()
                .is_err()
        );
        let r = request(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!r.keep_alive());
        assert_eq!(r.framing(), Ok(Framing::Empty));
        let r = response(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap().unwrap();
        assert!(r.stream_format() == Some(Format::EventStream) && !r.closes());
        let other = response(b"HTTP/1.1 200 OK\r\nContent-Type: Application/X-NDJSON\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(other.stream_format(), Some(Format::JsonLines));
        let other = response(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(other.stream_format(), None);
        assert_eq!(r.framing("POST"), Ok(Framing::Chunked));
        // HTTP/1.0 closes unless it says keep-alive; 1.1 only if it says close.
        for (head, closes) in [
            (&b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"[..], true),
            (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", false),
            (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", true),
        ] {
            assert_eq!(response(head).unwrap().unwrap().closes(), closes);
        }
        assert_eq!(r.framing("HEAD"), Ok(Framing::Empty));
        let r = response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.framing("GET"), Ok(Framing::Tunnel));
        let r = response(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap().unwrap();
        assert!(r.is_interim());
        let r = response(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(r.framing("GET"), Ok(Framing::UntilClose));
        assert!(
            response(b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n")
                .unwrap()
                .unwrap()
                .framing("GET")
                .is_err()
        );
        assert!(looks_like_request(b"GET / HTTP/1.1"));
        assert!(looks_like_request(b"OPTIONS * HTTP/1.1"));
        assert!(!looks_like_request(b"\x16\x03\x01"));
        assert!(!looks_like_request(b"SSH-2.0-OpenSSH"));
    }
}
