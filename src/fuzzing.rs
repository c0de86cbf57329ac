//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz) and for the
//! test that replays their corpus (`tests/fuzz_corpus.rs`). Each takes
//! arbitrary bytes and must return without panicking; where an input is
//! accepted, it also checks a property that must hold for it.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::control::Control;
use crate::events::Events;
use crate::plan::Plan;
use crate::relay::{Relay, RelayOptions};
use crate::ruleset::RuleSet;

/// A profile: parsed, and on success built into a plan; errors must render.
pub fn profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::profile::parse("fuzz.toml", text, None) {
        Ok(doc) => {
            let _ = format!("{doc:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// A `--fault` string: parsed; what parses must also describe itself
/// (display, parameters) and pass the plan's checks as a rule of its own.
pub fn fault_flag(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::profile::parse_fault_flag(text) {
        Ok(spec) => {
            // Printed, parsed again: the same fault. What `netchaos faults`,
            // the summary, the API and the event log print can be pasted
            // back as a flag.
            let printed = spec.to_string();
            let again = crate::profile::parse_fault_flag(&printed).unwrap_or_else(|e| {
                panic!("{text:?} prints as {printed:?}, which does not parse: {e}")
            });
            assert_eq!(
                format!("{again:?}"),
                format!("{spec:?}"),
                "{text:?} prints as {printed:?}, which parses to another fault"
            );
            let _ = spec.all_params();
            let _ = crate::profile::build_plan(&[], &[text.to_string()], Some(1));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

struct Api {
    rt: tokio::runtime::Runtime,
    control: Arc<Control>,
}

fn api() -> &'static Api {
    static API: OnceLock<Api> = OnceLock::new();
    API.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let control = rt.block_on(async {
            let relay = Relay::new(
                Arc::new(RuleSet::from_plan(&Plan::default())),
                Arc::new(Events::in_memory()),
                RelayOptions::default(),
            );
            Control::new(
                relay,
                crate::control::Reach::Proxy,
                crate::settings::files::FilePolicy::Nowhere,
                Default::default(),
                false,
            )
        });
        Api { rt, control }
    })
}

/// One HTTP request to the control API, from bytes: the first picks the
/// method, then the path up to a newline, then the body. The API must
/// answer every request (no panic, no 5xx), and proxies made are deleted
/// again so that the fuzzer's process does not fill up with listeners.
pub fn api_request(data: &[u8]) {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = ["GET", "POST", "PATCH", "DELETE", "PUT"][usize::from(m) % 5];
    let (path, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let Ok(req) = axum::http::Request::builder()
        .method(method)
        .uri(format!("/{}", path.trim_start_matches('/')))
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
    else {
        return;
    };
    let a = api();
    a.rt.block_on(async {
        let router =
            crate::control::api::router(a.control.clone(), &[], ([127, 0, 0, 1], 8474).into());
        let resp = router.oneshot(req).await.expect("the router is infallible");
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        // A 5xx only for what Toxiproxy also answers 500: a listen address
        // that cannot be bound (busy, not local, privileged).
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !status.is_server_error() || (status == 500 && text.contains("listen tcp")),
            "{method} /{path}: {status} {text}"
        );
        let names: Vec<String> = a.control.proxies.lock().await.keys().cloned().collect();
        for name in names {
            let del = axum::http::Request::builder()
                .method("DELETE")
                .uri(format!("/proxies/{}", percent_encode(&name)))
                .body(Body::empty())
                .expect("a valid request");
            let router =
                crate::control::api::router(a.control.clone(), &[], ([127, 0, 0, 1], 8474).into());
            let _ = router.oneshot(del).await;
        }
        a.control.proxies.lock().await.clear();
    });
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Cuts `data` into pieces whose sizes the data's own bytes choose, so
/// that every target sees the same input arrive whole and in pieces.
fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut i = 0usize;
    while !rest.is_empty() {
        let n = (usize::from(data[i % data.len()]) % 7 + 1).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
        i += 1;
    }
    out
}

/// HTTP/1.1 as the wire sends it, from an untrusted peer: a request or
/// response head (the first byte chooses which, and how a body that
/// follows is framed), and the body scanned whole and in pieces — which
/// must agree on where it ends, what is malformed, and its payload.
pub fn http1(data: &[u8]) {
    use crate::http::wire::{self, Body, Framing};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => {
            if let Ok(Some(r)) = wire::request(rest) {
                assert!(r.head_len <= rest.len());
                let _ = (r.framing(), r.keep_alive(), r.expects_continue());
            }
        }
        1 => {
            if let Ok(Some(r)) = wire::response(rest) {
                assert!(r.head_len <= rest.len());
                let _ = (
                    r.framing("GET"),
                    r.framing("HEAD"),
                    r.closes(),
                    r.stream_format(),
                );
            }
        }
        m => {
            let framing = match m {
                2 => Framing::Chunked,
                _ => Framing::Length(rest.len() as u64 / 2),
            };
            let scan = |parts: &[&[u8]]| {
                let mut body = Body::new(framing);
                let mut payload = Vec::new();
                let mut used = 0;
                for p in parts {
                    match body.scan(p, Some(&mut payload)) {
                        Ok(s) => {
                            used += s.used;
                            if s.done {
                                return (Ok(used), payload);
                            }
                        }
                        Err(e) => return (Err(e), payload),
                    }
                }
                (Ok(usize::MAX), payload)
            };
            let whole = scan(&[rest]);
            let cut = scan(&pieces(rest));
            assert_eq!(
                whole.0.is_ok(),
                cut.0.is_ok(),
                "whole and in pieces disagree"
            );
            if whole.0.is_ok() {
                assert_eq!(whole, cut, "whole and in pieces disagree");
            }
        }
    }
}

/// A streamed body cut into events (SSE, JSON lines, AWS event-stream
/// frames) or gRPC messages, whole and in pieces: every byte comes out
/// once, in order, and the units agree however the body arrived.
pub fn stream_units(data: &[u8]) {
    use crate::http::events::Format;
    use crate::http::h2_stream::{Units, cut};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let units = match mode % 4 {
        0 => Units::Events(Format::EventStream),
        1 => Units::Events(Format::JsonLines),
        2 => Units::Events(Format::AwsEventStream),
        _ => Units::Grpc,
    };
    let whole = cut(units, &[rest]);
    let split = cut(units, &pieces(rest));
    for got in [&whole, &split] {
        let joined: Vec<u8> = got.iter().flat_map(|(b, _)| b.to_vec()).collect();
        assert_eq!(joined, rest, "bytes were lost or added");
    }
    let counted = |u: &[(bytes::Bytes, bool)]| -> Vec<bytes::Bytes> {
        u.iter()
            .filter(|(_, c)| *c)
            .map(|(b, _)| b.clone())
            .collect()
    };
    assert_eq!(counted(&whole), counted(&split), "the counted units differ");
}

/// One AWS event-stream frame: what parses re-encodes to the same bytes
/// (lengths and CRCs recomputed), and its JSON and event type read.
pub fn aws_frame(data: &[u8]) {
    use crate::http::eventstream::Frame;
    if let Some(f) = Frame::parse(data) {
        assert_eq!(f.encode(), data, "a parsed frame re-encodes to itself");
        let _ = (f.is_event(), f.event_type(), f.json(), f.wrapped_bytes());
    }
}

/// A DNS message from a client: what the DNS layer takes for a query gets
/// each reply it can make, and each reply is a response to that query.
pub fn dns_query(data: &[u8]) {
    use crate::dns::decide::{Made, Query};
    let Some(q) = Query::parse(data) else {
        return;
    };
    for made in [
        Made::Truncated,
        Made::Error(crate::fault::dns_error::Rcode::ServFail),
        Made::Addresses {
            addrs: vec!["192.0.2.1".parse().expect("an address")],
            ttl: 5,
        },
    ] {
        if let Some(reply) = crate::dns::reply::build(data, &made) {
            let p = simple_dns::Packet::parse(&reply).expect("a reply made parses");
            assert_eq!(p.id(), q.id);
            assert!(Query::parse(&reply).is_none(), "a reply is no query");
        }
    }
}
