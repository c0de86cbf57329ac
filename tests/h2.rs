//! HTTP/2 through the HTTP layer: gRPC clients (grpcio, unmodified) and
//! curl's HTTP/2 meet per-request faults — over h2c with prior knowledge
//! (a proxy) and over TLS (`run --tls`, the client offering h2 alone) —
//! and an unfaulted call passes whole: its messages, trailers and status.
//!
//! The upstream is `support/grpcd.py` (grpcio) on loopback.

mod support;

use std::process::Command;

use support::*;

/// Calls through one grpcio channel to argv[1] (`secure`: TLS, trusting
/// what `run --tls` points GRPC_DEFAULT_SSL_ROOTS_FILE_PATH at), one per
/// argument after it, `METHOD:REQUEST[:TIMEOUT]` (`Chat:N`: N messages,
/// each sent once the last was echoed): prints per call its
/// answer (a unary's text, a stream's messages joined by `,` — those that
/// came before a failure too) or its failure as `CODE: details`, and how
/// long it took. `retry` as argv[2]: the channel retries RESOURCE_EXHAUSTED
/// and UNAVAILABLE (three attempts, at most 50 ms apart unless the server
/// pushes back).
const GRPC_CLIENT: &str = r#"
import json, queue, sys, time, grpc
target, args = sys.argv[1], sys.argv[2:]
opts = []
if args and args[0] == "retry":
    args = args[1:]
    policy = {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}
    config = {"methodConfig": [{"name": [{"service": "test.Echo"}], "retryPolicy": policy}]}
    opts = [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]
secure = target.startswith("secure:")
if secure:
    ch = grpc.secure_channel(target[7:], grpc.ssl_channel_credentials(), options=opts)
else:
    ch = grpc.insecure_channel(target, options=opts)
# Messages are UTF-8 text: a message that is not fails as an unparsable
# protobuf message does (INTERNAL).
text = lambda b: b.decode("utf-8")
for a in args:
    method, req, *t = a.split(":")
    timeout = float(t[0]) if t else 10
    start = time.monotonic()
    got = []
    try:
        if method == "Chat":
            # One message at a time, each after the last one's echo: a
            # body that never ends while the call waits.
            echoed = queue.Queue()
            def ask():
                for i in range(int(req)):
                    yield f"m{i}".encode()
                    echoed.get(timeout=timeout)
            for m in ch.stream_stream("/test.Echo/Chat", response_deserializer=text)(ask(), timeout=timeout):
                got.append(m)
                echoed.put(1)
            out = ",".join(got)
        elif method in ("Stream", "Fail"):
            for m in ch.unary_stream("/test.Echo/" + method, response_deserializer=text)(req.encode(), timeout=timeout):
                got.append(m)
            out = ",".join(got)
        else:
            out = ch.unary_unary("/test.Echo/" + method, response_deserializer=text)(req.encode(), timeout=timeout)
    except grpc.RpcError as e:
        out = ",".join(got + [f"{e.code().name}: {e.details()}"])
    print(json.dumps([out, round(time.monotonic() - start, 3)]), flush=True)
"#;

/// Whether grpcio is there (in CI it must be: test.sh installs it).
fn have_grpcio() -> bool {
    if !need(&["python3"]) {
        return false;
    }
    if python("import grpc", &[]).0 != 0 {
        assert!(
            !in_ci(),
            "grpcio is required in CI (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: python3 has no grpcio");
        return false;
    }
    true
}

/// A proxy with `faults` in front of `upstream` (an address).
fn proxy(upstream: &str, faults: &[&str]) -> Proxy {
    let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", upstream];
    for f in faults {
        args.extend(["--fault", f]);
    }
    Proxy::start(&args)
}

/// The calls' answers and times, through a proxy with `faults` in front
/// of `up`.
fn calls(up: &Httpd, faults: &[&str], calls: &[&str]) -> Vec<(String, f64)> {
    let p = proxy(&format!("127.0.0.1:{}", up.port), faults);
    let mut argv = vec![p.addr().to_string()];
    argv.extend(calls.iter().map(|c| c.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (rc, out, err) = python(GRPC_CLIENT, &argv);
    assert_eq!(rc, 0, "{err}");
    parse(&out)
}

fn parse(out: &str) -> Vec<(String, f64)> {
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v[0].as_str().unwrap().to_string(), v[1].as_f64().unwrap())
        })
        .collect()
}

fn answers(r: &[(String, f64)]) -> Vec<&str> {
    r.iter().map(|(a, _)| a.as_str()).collect()
}

/// The upstream's count of unary calls it has answered.
fn upstream_count(up: &Httpd) -> u64 {
    let (rc, out, err) = python(GRPC_CLIENT, &[&format!("127.0.0.1:{}", up.port), "Count:"]);
    assert_eq!(rc, 0, "{err}");
    parse(&out)[0].0.parse().unwrap()
}

/// A gRPC call answered in the upstream's place gets the status the
/// fault names (trailers-only, with its message), and the upstream never
/// sees it; a plain HTTP status reaches grpcio as a gRPC client maps it
/// (429: UNAVAILABLE); an aborted call fails as over a reset connection,
/// a truncated stream after the messages that fit, a held one at its
/// deadline; an unfaulted stream passes whole.
#[test]
fn grpc_calls_meet_http_faults_over_h2c() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let r = calls(
        &up,
        &["http_status:grpc_status=RESOURCE_EXHAUSTED,body=quota: 0 left,first=1"],
        &["Unary:a", "Unary:b", "Stream:3"],
    );
    assert_eq!(
        answers(&r),
        [
            "RESOURCE_EXHAUSTED: quota: 0 left",
            "echo:b",
            "msg-0,msg-1,msg-2"
        ]
    );
    assert_eq!(
        upstream_count(&up),
        1,
        "the answered call never reached the upstream"
    );

    let r = calls(
        &up,
        &["http_status:status=429,first=1"],
        &["Unary:a", "Unary:b"],
    );
    assert!(
        r[0].0.starts_with("UNAVAILABLE: ") && r[0].0.contains("429"),
        "{r:?}"
    );
    assert_eq!(r[1].0, "echo:b");

    // The second call on the connection: no GOAWAY before the end, which
    // would let the client retry it unseen on a new connection.
    for (then, seen) in [("reset", "reset"), ("close", "closed")] {
        let r = calls(
            &up,
            &[&format!(
                "http_abort:path=/test.Echo/Unary,every=2,then={then}"
            )],
            &["Unary:a", "Unary:b", "Unary:c"],
        );
        assert_eq!(r[0].0, "echo:a");
        assert!(r[1].0.starts_with("UNAVAILABLE: "), "{then}: {r:?}");
        assert!(r[1].0.to_lowercase().contains(seen), "{then}: {r:?}");
        assert_eq!(r[2].0, "echo:c");
    }
    assert_eq!(
        upstream_count(&up),
        6,
        "aborted calls never reached the upstream"
    );

    // Each message is 5 bytes of gRPC framing and 5 of its own: 25 bytes
    // hold two, and a cut third.
    let r = calls(
        &up,
        &["http_truncate:after_bytes=25,path=/test.Echo/Stream"],
        &["Stream:4"],
    );
    assert!(r[0].0.starts_with("msg-0,msg-1,UNAVAILABLE: "), "{r:?}");

    let r = calls(
        &up,
        &["http_delay:delay=5s,path=/test.Echo/Stream"],
        &["Stream:2:0.5", "Unary:c"],
    );
    assert!(r[0].0.starts_with("DEADLINE_EXCEEDED"), "{r:?}");
    assert_eq!(r[1].0, "echo:c");
}

/// `grpc_status` with `retry_after`: the answer carries
/// `grpc-retry-pushback-ms`, which grpcio's retry policy waits for
/// (its own backoff here is at most 50 ms); and `then = "close"` sends
/// GOAWAY after the answer, so the retry goes on a new connection.
#[test]
fn grpc_retries_wait_for_the_pushback() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let r = calls(
        &up,
        &["http_status:grpc_status=UNAVAILABLE,retry_after=1500ms,first=1,then=close"],
        &["retry", "Unary:a"],
    );
    assert_eq!(r[0].0, "echo:a", "{r:?}");
    assert!(r[0].1 >= 1.4, "the retry came after {} s", r[0].1);
    // Without the pushback, the retry follows at once.
    let r = calls(
        &up,
        &["http_status:grpc_status=UNAVAILABLE,first=1"],
        &["retry", "Unary:b"],
    );
    assert_eq!(r[0].0, "echo:b", "{r:?}");
}

/// grpc-js (Node's HTTP/2, another implementation): a call answered
/// `RESOURCE_EXHAUSTED` with a pushback is retried after it by its retry
/// policy; one answered `PERMISSION_DENIED` is not retried.
const NODE_GRPC_CLIENT: &str = r#"
const grpc = require("@grpc/grpc-js");
const policy = { maxAttempts: 3, initialBackoff: "0.01s", maxBackoff: "0.05s", backoffMultiplier: 2,
  retryableStatusCodes: ["UNAVAILABLE", "RESOURCE_EXHAUSTED"] };
const client = new grpc.Client(process.argv[1], grpc.credentials.createInsecure(), {
  "grpc.service_config": JSON.stringify({ methodConfig: [{ name: [{ service: "test.Echo" }], retryPolicy: policy }] }),
});
const raw = (b) => b;
const call = (method, req) => new Promise((done) => {
  const t = Date.now();
  client.makeUnaryRequest("/test.Echo/" + method, raw, raw, Buffer.from(req), { deadline: Date.now() + 10000 },
    (err, v) => done([err ? `${grpc.status[err.code]}: ${err.details}` : v.toString(), (Date.now() - t) / 1000]));
});
(async () => {
  for (const a of process.argv.slice(2)) {
    const [m, r] = a.split(":");
    console.log(JSON.stringify(await call(m, r)));
  }
  client.close();
})();
"#;

#[test]
fn grpc_js_retries_after_the_pushback() {
    if !have_grpcio() {
        return;
    }
    let Some(modules) = node_modules_with("@grpc/grpc-js") else {
        return;
    };
    let up = Httpd::grpc(None);
    let p = proxy(
        &format!("127.0.0.1:{}", up.port),
        &[
            "http_status:grpc_status=RESOURCE_EXHAUSTED,retry_after=1200ms,path=/test.Echo/Unary,first=1",
            "http_status:grpc_status=PERMISSION_DENIED,body=no,path=/test.Echo/Count",
        ],
    );
    let (rc, out, err) = node(
        NODE_GRPC_CLIENT,
        &[&p.addr().to_string(), "Unary:a", "Count:"],
        &modules,
    );
    assert_eq!(rc, 0, "{err}");
    let r = parse(&out);
    assert_eq!(answers(&r), ["echo:a", "PERMISSION_DENIED: no"], "{err}");
    assert!(r[0].1 >= 1.1, "the retry came after {} s", r[0].1);
    let (_, summary) = p.stop();
    assert!(
        summary.contains("HTTP requests: 3 seen, 2 faulted"),
        "one call retried once, one not retried: {summary}"
    );
}

/// Faults that read bodies (a `body.*` match, a body rewrite) hold none
/// of a gRPC call's, which may never end: a chat that waits for each
/// echo goes on, and a unary call is not held either.
#[test]
fn grpc_message_streams_are_never_held() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let r = calls(
        &up,
        &[
            "http_status:status=500,body.model=x",
            "http_rewrite:set_body=x",
            r#"http_rewrite:phase=response,patch_json={"a":1}"#,
        ],
        &["Chat:3:5", "Unary:a:5", "Stream:2:5"],
    );
    assert_eq!(
        answers(&r),
        ["echo:m0,echo:m1,echo:m2", "echo:a", "msg-0,msg-1"]
    );
}

/// An upstream that sends its connection away (gRPC's max connection
/// age: GOAWAY, its calls in flight let finish) does not cut the client's
/// calls short: the client is sent away in turn, and a call after it
/// reaches a new connection.
#[test]
fn an_upstream_going_away_lets_calls_finish() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc_aging(400, None);
    let r = calls(
        &up,
        &["http_status:status=503,path=/nowhere"],
        &["Stream:20", "Unary:a", "Stream:20", "Unary:b"],
    );
    let twenty = (0..20)
        .map(|i| format!("msg-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(answers(&r), [&twenty, "echo:a", &twenty, "echo:b"]);
    // Under load, across several of its GOAWAYs, no call fails and none
    // hangs, as without netchaos: netchaos dials the upstream again, and
    // calls the client opens as the old connection goes go to the new one
    // (they were refused: 7 to 12 calls in 2 s), over the client's one
    // connection.
    let p = proxy(
        &format!("127.0.0.1:{}", up.port),
        &["http_status:status=503,path=/nowhere"],
    );
    let (rc, out, err) = python(LOAD, &[&p.addr().to_string()]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["ok"].as_u64().unwrap() >= 50, "{v}");
    assert_eq!(v["failed"], serde_json::json!([]), "{v}");
    let (_, err) = p.stop();
    assert!(err.contains("connections: 1 ("), "{err}");
}

/// Over TLS too (`run --tls`): netchaos dials the upstream again, with
/// TLS, when it sends its connection away, and the client's connection
/// stays the one it opened.
#[test]
fn grpc_over_tls_keeps_its_connection_across_upstream_goaways() {
    if !have_grpcio() || !need(&["ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let up = Httpd::grpc_aging(300, Some(&ca));
    let target = format!("secure:localhost:{}", up.port);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--events",
            &events.display().to_string(),
            "--fault",
            "http_status:status=503,path=/nowhere",
        ],
        &[
            "python3",
            "-c",
            GRPC_CLIENT,
            &target,
            "Stream:10",
            "Unary:a",
            "Stream:10",
            "Unary:b",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let ten = (0..10)
        .map(|i| format!("msg-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        answers(&parse(&out)),
        [&ten, "echo:a", &ten, "echo:b"],
        "{err}"
    );
    // One connection, beside grpcio's try of ::1 first (refused: the
    // server is on 127.0.0.1 alone).
    let count = |what: &str| -> u64 {
        err.split(what)
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("connections: ") - count("dial_refused "), 1, "{err}");
    // Each dial again is in the log, on the client's one connection.
    let redials: Vec<_> = read_events(&events)
        .into_iter()
        .filter(|e| e["event"] == "redial")
        .collect();
    assert!(!redials.is_empty(), "{err}");
    assert!(
        err.contains(&format!(
            "HTTP/2 upstream connections dialled again after their GOAWAY: {}",
            redials.len()
        )),
        "{err}"
    );
    assert!(
        redials
            .iter()
            .all(|e| e["conn"] == redials[0]["conn"] && e["took_ms"].as_f64().is_some()),
        "{redials:?}"
    );
}

/// Unary calls from 8 threads for 2 s, each with a 5 s deadline: how many
/// passed, and the failures.
const LOAD: &str = r#"
import grpc, json, sys, threading, time
call = grpc.insecure_channel(sys.argv[1]).unary_unary("/test.Echo/Unary")
ok, failed, end = [0], [], time.monotonic() + 2
def go():
    while time.monotonic() < end:
        try:
            call(b"x", timeout=5)
            ok[0] += 1
        except grpc.RpcError as e:
            failed.append(f"{e.code().name}: {e.details()}")
threads = [threading.Thread(target=go) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"ok": ok[0], "failed": failed}))
"#;

/// Faults that wrap a response body (an `sse` fault, `http_truncate`)
/// leave an upstream's trailers-only failure as it came.
#[test]
fn an_upstreams_own_grpc_failure_passes_under_body_faults() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    for fault in ["sse:event_delay=1ms", "http_truncate:after_bytes=100000"] {
        let r = calls(&up, &[fault], &["Missing:x"]);
        assert!(r[0].0.starts_with("UNIMPLEMENTED"), "{fault}: {r:?}");
    }
}

/// The event log says how each gRPC call ended, which its HTTP status
/// (200) does not: the upstream's status in its trailers (`trailers`:
/// a stream's OK, a failure after messages with its message decoded), in
/// a trailers-only answer (on `response`), and a `grpc_status` fault's
/// (on its `fault` line), as an `sse` fault's error does; the report
/// names them.
#[test]
fn the_event_log_says_how_grpc_calls_ended() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let report = dir.path().join("report.html");
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("127.0.0.1:{}", up.port),
        "--events",
        &events.display().to_string(),
        "--report",
        &report.display().to_string(),
        "--fault",
        "http_status:grpc_status=UNAVAILABLE,body=try later,path=*/Count",
        "--fault",
        "sse:error_after_events=1,error_type=RESOURCE_EXHAUSTED,path=*/Chat",
    ]);
    let (rc, out, err) = python(
        GRPC_CLIENT,
        &[
            &p.addr().to_string(),
            "Stream:2",
            "Fail:1",
            "Missing:x",
            "Count:",
            "Chat:1",
        ],
    );
    assert_eq!(rc, 0, "{err}");
    let quota = "Resource has been exhausted (e.g. check quota). (injected by netchaos)";
    assert_eq!(
        answers(&parse(&out)),
        [
            "msg-0,msg-1",
            "msg-0,DATA_LOSS: lost 50% ✓",
            "UNIMPLEMENTED: Method not found!",
            "UNAVAILABLE: try later",
            &format!("echo:m0,RESOURCE_EXHAUSTED: {quota}"),
        ]
    );
    drop(p);
    let lines = read_events(&events);
    let ended = |kind: &str, path: &str| -> Vec<(u64, String)> {
        lines
            .iter()
            .filter(|e| e["event"] == kind && e["http"]["path"] == path)
            .map(|e| {
                let h = &e["http"];
                // A `grpc_status` answer too: the client got :status 200.
                assert!(h["status"].is_null() || h["status"] == 200, "{e}");
                let message = h["grpc_message"].as_str().unwrap_or("").to_string();
                (h["grpc_status"].as_u64().unwrap_or(99), message)
            })
            .collect()
    };
    assert_eq!(ended("trailers", "/test.Echo/Stream"), [(0, String::new())]);
    assert_eq!(
        ended("trailers", "/test.Echo/Fail"),
        [(15, "lost 50% ✓".into())]
    );
    let missing = ended("response", "/test.Echo/Missing");
    assert_eq!(missing.len(), 1);
    assert_eq!(
        missing[0].0, 12,
        "UNIMPLEMENTED, trailers-only: {missing:?}"
    );
    assert_eq!(ended("trailers", "/test.Echo/Missing"), []);
    assert_eq!(
        ended("fault", "/test.Echo/Count"),
        [(14, "try later".into())]
    );
    // The fault's end, not the upstream's (which it never let through).
    assert_eq!(ended("fault", "/test.Echo/Chat"), [(8, quota.into())]);
    assert_eq!(ended("trailers", "/test.Echo/Chat"), []);
    let page = std::fs::read_to_string(&report).unwrap();
    for said in [
        "DATA_LOSS (15): lost 50% ✓",
        "UNIMPLEMENTED (12)",
        "UNAVAILABLE (14): try later",
        "RESOURCE_EXHAUSTED (8): Resource",
    ] {
        assert!(page.contains(said), "the report names {said}");
    }
}

/// `sse` faults count a gRPC server stream's messages as they count an
/// event stream's events: the connection dropped after two, a pause after
/// one, the call failed in its trailers with the status `error_type`
/// names, a message that does not parse (grpcio: INTERNAL), half a
/// message and the end; other calls on the connection unharmed.
#[test]
fn grpc_server_streams_break_message_by_message() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let stream = |fault: &str| calls(&up, &[fault], &["Stream:4", "Unary:a"]);
    let r = stream("sse:drop_after_events=2");
    assert!(r[0].0.starts_with("msg-0,msg-1,UNAVAILABLE: "), "{r:?}");
    assert_eq!(r[1].0, "echo:a");
    let r = stream("sse:stall_after_events=1,stall_for=700ms");
    assert_eq!(answers(&r), ["msg-0,msg-1,msg-2,msg-3", "echo:a"]);
    assert!(r[0].1 >= 0.65, "the pause: {} s", r[0].1);
    let r = stream("sse:error_after_events=2,envelope=gemini,error_type=RESOURCE_EXHAUSTED");
    assert!(
        r[0].0.starts_with("msg-0,msg-1,RESOURCE_EXHAUSTED: "),
        "{r:?}"
    );
    // After the third of three, before the upstream's own end; after a
    // unary call's one message, before its status.
    let r = calls(
        &up,
        &[
            "sse:error_after_events=3",
            "sse:error_after_events=1,path=*/Unary",
        ],
        &["Stream:3", "Unary:a"],
    );
    assert!(
        r[0].0.starts_with("msg-0,msg-1,msg-2,UNAVAILABLE: "),
        "{r:?}"
    );
    assert!(r[1].0.starts_with("UNAVAILABLE: "), "{r:?}");
    let r = stream("sse:malformed_after_events=1");
    assert!(r[0].0.starts_with("msg-0,INTERNAL: "), "{r:?}");
    let r = stream("sse:malformed_after_events=1,malformed=truncate");
    assert!(r[0].0.starts_with("msg-0,UNAVAILABLE: "), "{r:?}");
    // Silence for good: the call's deadline ends it.
    let r = calls(
        &up,
        &["sse:stall_after_events=2,path=/test.Echo/Stream"],
        &["Stream:4:1", "Unary:b"],
    );
    assert!(r[0].0.starts_with("msg-0,msg-1,DEADLINE_EXCEEDED"), "{r:?}");
    assert_eq!(r[1].0, "echo:b");
}

/// An upstream whose connection is reset under a call: the client's
/// connection is reset too (grpcio: UNAVAILABLE), as it would be without
/// netchaos, not each stream reset by netchaos's own HTTP/2 (INTERNAL).
#[test]
fn an_upstream_reset_reaches_the_client_as_a_reset() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    // A byte relay that resets the upstream's side 300 ms in.
    let breaking = proxy(&format!("127.0.0.1:{}", up.port), &["reset:after=300ms"]);
    let p = proxy(
        &breaking.addr().to_string(),
        &["http_status:status=503,path=/nowhere"],
    );
    let (rc, out, err) = python(GRPC_CLIENT, &[&p.addr().to_string(), "Stream:20"]);
    assert_eq!(rc, 0, "{err}");
    let r = parse(&out);
    assert!(r[0].0.starts_with("msg-0,"), "{r:?}");
    assert!(r[0].0.contains("UNAVAILABLE: "), "{r:?}");
}

/// `then = "close"` after an answer: a GOAWAY, and the calls already in
/// flight on the connection still finish before it closes.
#[test]
fn a_closing_answer_lets_other_calls_finish() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let p = proxy(
        &format!("127.0.0.1:{}", up.port),
        &["http_status:grpc_status=UNAVAILABLE,path=*/Unary,then=close"],
    );
    let code = r#"
import sys, threading, time, grpc
ch = grpc.insecure_channel(sys.argv[1])
got = []
def stream():
    try:
        got.extend(m.decode() for m in ch.unary_stream("/test.Echo/Stream")(b"10", timeout=10))
    except grpc.RpcError as e:
        got.append(e.code().name)
t = threading.Thread(target=stream)
t.start()
time.sleep(0.15)
try:
    ch.unary_unary("/test.Echo/Unary")(b"x", timeout=10)
except grpc.RpcError as e:
    print(e.code().name)
t.join()
print(",".join(got))
"#;
    let (rc, out, err) = python(code, &[&p.addr().to_string()]);
    assert_eq!(rc, 0, "{err}");
    let ten = (0..10)
        .map(|i| format!("msg-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(out, format!("UNAVAILABLE\n{ten}\n"), "{err}");
}

/// curl's `--http2` on an http:// URL offers an upgrade (h2c): it is
/// declined, so the server answers in HTTP/1.1 and the next request on the
/// connection still meets the faults.
#[test]
fn an_h2c_upgrade_is_declined() {
    if !need(&["curl", "python3"]) {
        return;
    }
    let up = Httpd::start(None);
    let p = proxy(
        &format!("127.0.0.1:{}", up.port),
        &["http_status:status=503,path=/p/1"],
    );
    let base = format!("http://{}", p.addr());
    let out = Command::new("curl")
        .args(["-sS", "--http2", "--max-time", "10", "-w", "%{http_code}\n"])
        .arg(format!("{base}/echo-head/a"))
        .arg(format!("{base}/p/1"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("get /echo-head/a http/1.1"), "{text}");
    assert!(
        !text.contains("upgrade") && !text.contains("http2-settings"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("503"), "{text}");
    let (_, summary) = p.stop();
    assert!(
        summary.contains("HTTP requests: 2 seen, 1 faulted"),
        "{summary}"
    );
}

/// Stream faults still act on an HTTP/2 connection's bytes: a latency on
/// every call, beside an HTTP fault on one.
#[test]
fn stream_faults_act_under_http2() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let r = calls(
        &up,
        &[
            "latency:delay=300ms,stream=downstream",
            "http_status:grpc_status=NOT_FOUND,path=/test.Echo/Count",
        ],
        &["Unary:a", "Unary:b", "Count:"],
    );
    assert_eq!(answers(&r)[..2], ["echo:a", "echo:b"]);
    assert!(r[2].0.starts_with("NOT_FOUND"), "{r:?}");
    for (a, t) in &r {
        assert!(*t >= 0.29, "{a} took {t} s");
    }
}

/// A gRPC client over TLS (it offers h2 alone) through `run --tls`: the
/// run's CA is trusted through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, the
/// upstream's TLS is verified, and the fault acts per call.
#[test]
fn grpc_over_tls_through_run() {
    if !have_grpcio() || !need(&["ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let up = Httpd::grpc(Some(&ca));
    let target = format!("secure:localhost:{}", up.port);
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--fault",
            "http_status:grpc_status=PERMISSION_DENIED,first=1",
        ],
        &[
            "python3",
            "-c",
            GRPC_CLIENT,
            &target,
            "Unary:a",
            "Unary:b",
            "Stream:2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let r = parse(&out);
    assert!(r[0].0.starts_with("PERMISSION_DENIED: "), "{r:?}\n{err}");
    assert_eq!(answers(&r)[1..], ["echo:b", "msg-0,msg-1"], "{err}");
    assert!(
        // The call ended PERMISSION_DENIED (7) under a :status 200.
        err.contains("HTTP requests: 3 seen, 1 faulted (http_status grpc-status 7: 1)"),
        "{err}"
    );
}

/// curl over HTTPS offers HTTP/2 and HTTP/1.1; a gRPC server speaks only
/// HTTP/2 and, offered HTTP/1.1 alone, agrees to no protocol (as grpc-go
/// does too). Through `run --tls` the client still gets HTTP/2 and the
/// upstream's own answer, as directly: the upstream is offered what the
/// client offered, and chooses HTTP/2. It used to be offered HTTP/1.1,
/// and spoken that to, which reset the client.
#[test]
fn a_client_offering_h2_and_http1_reaches_an_h2_only_upstream_over_tls() {
    if !have_grpcio() || !need(&["curl", "ip", "nft"]) {
        return;
    }
    let features = Command::new("curl").arg("-V").output().unwrap().stdout;
    if !String::from_utf8_lossy(&features).contains("HTTP2") {
        assert!(
            !in_ci(),
            "curl without HTTP/2 in CI (scripts/test.sh installs Debian's)"
        );
        eprintln!("SKIPPED: this curl has no HTTP/2");
        return;
    }
    let ca = TestCa::new();
    let up = Httpd::grpc(Some(&ca));
    let url = |path: &str| format!("https://localhost:{}{path}", up.port);
    const WHAT: &str = "%{http_version} %{http_code}\\n";
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "--max-time", "10", "-w", WHAT])
        .args(["--cacert", &ca.ca()])
        .arg(url("/test.Echo/Unary"))
        .output()
        .unwrap();
    let direct = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(direct.starts_with("2 "), "directly: {direct:?}");
    let script = format!(
        "for p in /down /test.Echo/Unary /test.Echo/Unary; do \
         curl -sS -o /dev/null --max-time 10 -w '{WHAT}' {}$p || echo failed; done",
        url("")
    );
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--fault",
            "http_status:status=503,path=/down",
        ],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got, ["2 503", &direct, &direct], "{err}");
    assert!(
        err.contains("HTTP requests: 3 seen, 1 faulted (http_status 503: 1)"),
        "{err}"
    );
}

/// curl's HTTP/2 (prior knowledge, not gRPC): an answer in the upstream's
/// place keeps its status and headers, and a response rewrite reaches it.
#[test]
fn curl_over_h2c_meets_status_and_rewrite_faults() {
    if !have_grpcio() || !need(&["curl"]) {
        return;
    }
    let up = Httpd::grpc(None);
    let p = proxy(
        &format!("127.0.0.1:{}", up.port),
        &[
            "http_status:status=503,retry_after=2s,path=/down",
            "http_rewrite:phase=response,set_header.x-chaos=yes",
        ],
    );
    let curl = |path: &str| {
        let out = Command::new("curl")
            .args(["-sS", "-i", "--http2-prior-knowledge", "--max-time", "10"])
            .arg(format!("http://{}{path}", p.addr()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_lowercase()
    };
    let down = curl("/down");
    assert!(down.starts_with("http/2 503"), "{down}");
    assert!(down.contains("retry-after: 2"), "{down}");
    // grpcio answers a GET that is no gRPC call; the rewrite shows on it.
    let other = curl("/test.Echo/Unary");
    assert!(other.starts_with("http/2 "), "{other}");
    assert!(other.contains("x-chaos: yes"), "{other}");
}

/// Netchaos stopping says GOAWAY, as a server stopping does: the call in
/// flight finishes within the drain, and the connection, idle after it,
/// ends then, not at the end of a long `--drain` (it used to stay open,
/// unspoken to, until the drain ran out and it was cut).
#[test]
fn stopping_sends_h2_clients_away_and_lets_calls_finish() {
    if !have_grpcio() {
        return;
    }
    let up = Httpd::grpc(None);
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("127.0.0.1:{}", up.port),
        "--drain",
        "60s",
        "--fault",
        "http_status:status=503,path=/nowhere",
    ]);
    // A 20-message stream (1 s): "ready" after its first message.
    let mut client = PythonBg::start(
        r#"
import sys, time, grpc
ch = grpc.insecure_channel(sys.argv[1])
got = []
try:
    for m in ch.unary_stream("/test.Echo/Stream")(b"20", timeout=30):
        got.append(m.decode())
        if len(got) == 1:
            print("ready", flush=True)
except grpc.RpcError as e:
    got.append(f"{e.code().name}: {e.details()}")
print(",".join(got), flush=True)
time.sleep(30)  # the channel, idle, stays open
"#,
        &[&p.addr().to_string()],
    );
    assert_eq!(client.line(), "ready");
    let t = std::time::Instant::now();
    let (status, err) = p.stop();
    let took = t.elapsed();
    assert!(status.success(), "{err}");
    let line = client.line();
    let twenty = (0..20).map(|i| format!("msg-{i}")).collect::<Vec<_>>();
    assert_eq!(line, twenty.join(","), "the call in flight finishes");
    assert!(
        took < std::time::Duration::from_secs(8),
        "netchaos took {took:?} to stop with a 60 s drain: the idle connection was not sent away"
    );
}

/// An upstream that dies under a call (its connection closed, no GOAWAY)
/// fails the call as it does without netchaos: the client's connection
/// closes too, `UNAVAILABLE` (which retry policies name), where netchaos's
/// HTTP/2 used to reset the stream `INTERNAL`. Both before the answer's
/// head (a slow unary call) and within its messages (a stream).
#[test]
fn an_upstream_that_dies_under_a_call_fails_it_as_without_netchaos() {
    if !have_grpcio() {
        return;
    }
    // `Stream`: 20 messages, the server killed after the second;
    // `Sleep`: an answer 10 s away, the server killed after 0.5 s.
    const DYING: &str = r#"
import os, signal, sys, threading, grpc
target, pid, method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ch = grpc.insecure_channel(target)
got = []
try:
    if method == "Stream":
        for m in ch.unary_stream("/test.Echo/Stream")(b"20", timeout=20):
            got.append(m)
            if len(got) == 2:
                os.kill(pid, signal.SIGKILL)
    else:
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        ch.unary_unary("/test.Echo/Sleep")(b"10", timeout=20)
    print("OK")
except grpc.RpcError as e:
    print(e.code().name)
"#;
    let run = |through: bool, method: &str| {
        let up = Httpd::grpc(None);
        let upstream = format!("127.0.0.1:{}", up.port);
        let p = through.then(|| proxy(&upstream, &["http_status:status=503,path=/nowhere"]));
        let target = p.as_ref().map_or(upstream, |p| p.addr().to_string());
        let (rc, out, err) = python(DYING, &[&target, &up.pid().to_string(), method]);
        assert_eq!(rc, 0, "{err}");
        out.trim().to_string()
    };
    for method in ["Stream", "Sleep"] {
        let direct = run(false, method);
        assert_eq!(direct, "UNAVAILABLE", "{method} without netchaos");
        assert_eq!(run(true, method), direct, "{method} through netchaos");
    }
}

/// An HTTP/2 upstream (Node's own http2, h2c) streaming five events 20 ms
/// apart on argv[1] (`sse`: an event stream; `sse-len`: the same with a
/// content-length; `ndjson`: JSON lines), and an HTTP/2 client (the same
/// module) reading one stream through argv[2]: prints what it got, how
/// it ended (`end`: its END_STREAM; `cut:RST` where its connection ended
/// under it; `error:CODE`; `timeout` after argv[4] ms) and the time.
const H2_EVENTS: &str = r#"
const http2 = require("http2");
const [port, via, mode, wait] = process.argv.slice(1);
const events = [0, 1, 2, 3, 4].map((i) => mode === "ndjson"
  ? `{"i":${i},"done":false}\n`
  : `event: message_delta\ndata: {"i":${i},"delta":{"stop_reason":null}}\n\n`);
const server = http2.createServer();
server.on("stream", (stream) => {
  stream.on("error", () => {});
  const head = { ":status": 200, "content-type": mode === "ndjson" ? "application/x-ndjson" : "text/event-stream" };
  if (mode === "sse-len") head["content-length"] = events.join("").length;
  stream.respond(head);
  let i = 0;
  const t = setInterval(() => {
    if (stream.destroyed) return clearInterval(t);
    stream.write(events[i]);
    if (++i === events.length) { clearInterval(t); stream.end(); }
  }, 20);
});
server.listen(+port, "127.0.0.1", () => {
  const start = Date.now();
  const session = http2.connect(`http://${via}`);
  session.on("error", () => {});
  const req = session.request({ ":path": "/v1/messages" });
  let body = "";
  const done = (how) => {
    console.log(JSON.stringify({ body, how, ms: Date.now() - start }));
    process.exit(0);
  };
  req.setEncoding("utf8");
  req.on("data", (d) => (body += d));
  req.on("error", (e) => done(`error:${e.code}`));
  req.on("close", () => done(req.rstCode === 0 ? "end" : `cut:${req.rstCode}`));
  setTimeout(() => done("timeout"), +wait);
});
"#;

/// `sse` faults act on event streams over HTTP/2 (not gRPC) as over
/// HTTP/1.1, each event passed on as it is counted: the provider's error
/// event and the stream's clean end, a dropped connection, a malformed
/// event, a patch that changes the events' length (the upstream's
/// content-length no longer stands), a stall, late events, and NDJSON's
/// lines counted alike. They used to pass unfaulted.
#[test]
fn event_streams_over_http2_meet_sse_faults() {
    if !need(&["node"]) {
        return;
    }
    let port = unused_port().to_string();
    // A stall is told by the client's timeout; anything else ends well
    // before 10 s, however busy the machine.
    let through = |mode: &str, fault: Option<&str>| -> (serde_json::Value, String) {
        let wait = match fault.is_some_and(|f| f.contains("stall")) {
            true => "1500",
            false => "10000",
        };
        let up = format!("127.0.0.1:{port}");
        let p = proxy(&up, fault.as_slice());
        let addr = p.addr().to_string();
        let (rc, out, err) = node(H2_EVENTS, &[&port, &addr, mode, wait], "".as_ref());
        assert_eq!(rc, 0, "{err}");
        let (_, summary) = p.stop();
        (serde_json::from_str(out.trim()).unwrap(), summary)
    };
    let datas = |v: &serde_json::Value| -> Vec<String> {
        let body = v["body"].as_str().unwrap();
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    };
    let parses = |d: &String| serde_json::from_str::<serde_json::Value>(d).is_ok();

    let (v, _) = through("sse", None);
    assert_eq!(
        (datas(&v).len(), v["how"].as_str()),
        (5, Some("end")),
        "{v}"
    );

    let (v, summary) = through("sse", Some("sse:error_after_events=2"));
    let d = datas(&v);
    assert_eq!((d.len(), v["how"].as_str()), (3, Some("end")), "{v}");
    assert!(
        v["body"].as_str().unwrap().contains("event: error\n"),
        "{v}"
    );
    assert!(d[2].contains("overloaded_error"), "{v}");
    assert!(summary.contains("1 faulted"), "{summary}");

    let (v, _) = through("sse", Some("sse:drop_after_events=2"));
    assert_eq!(datas(&v).len(), 2, "{v}");
    assert!(v["how"].as_str().unwrap().starts_with("cut:"), "{v}");
    let (v, _) = through("sse", Some("sse:drop_after_events=2,then=reset"));
    assert_eq!(
        (datas(&v).len(), v["how"].as_str()),
        (2, Some("error:ECONNRESET")),
        "{v}"
    );

    let (v, _) = through("sse", Some("sse:malformed_after_events=1"));
    let d = datas(&v);
    assert_eq!(d.len(), 5, "{v}");
    assert_eq!(
        d.iter().map(parses).collect::<Vec<_>>(),
        [true, false, true, true, true],
        "{v}"
    );

    let (v, _) = through(
        "sse-len",
        Some(r#"sse:patch_json={"delta":{"stop_reason":"max_tokens"}},event=message_delta"#),
    );
    let d = datas(&v);
    assert_eq!((d.len(), v["how"].as_str()), (5, Some("end")), "{v}");
    assert!(
        d.iter()
            .all(|d| d.contains(r#""stop_reason":"max_tokens""#)),
        "{v}"
    );

    let (v, _) = through("sse", Some("sse:stall_after_events=1"));
    assert_eq!(
        (datas(&v).len(), v["how"].as_str()),
        (1, Some("timeout")),
        "{v}"
    );

    let (v, _) = through("sse", Some("sse:event_delay=250ms"));
    assert_eq!(
        (datas(&v).len(), v["how"].as_str()),
        (5, Some("end")),
        "{v}"
    );
    assert!(v["ms"].as_u64().unwrap() >= 1200, "{v}");

    let (v, _) = through("ndjson", Some("sse:error_after_events=1,envelope=ollama"));
    let lines: Vec<&str> = v["body"].as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), 2, "{v}");
    assert!(lines[1].starts_with(r#"{"error":"#), "{v}");
}

/// An HTTP/2 upstream (Node's http2, h2c) on argv[1] whose first
/// connection answers one request and then goes away (GOAWAY), and whose
/// later ones go away as soon as they open (a server shutting down); and
/// a client holding one connection through argv[2]: one request, then
/// idle. Prints the first answer's status and the GOAWAY the client got.
const H2_GOING_AWAY: &str = r#"
const http2 = require("http2");
const [port, via] = process.argv.slice(1);
let sessions = 0;
const server = http2.createServer();
server.on("session", (s) => {
  s.on("error", () => {});
  if (sessions++ > 0) s.close();
});
server.on("stream", (stream) => {
  stream.on("error", () => {});
  stream.respond({ ":status": 200 });
  stream.end("ok", () => stream.session.close());
});
server.listen(+port, "127.0.0.1", () => {
  const session = http2.connect(`http://${via}`);
  session.on("error", () => {});
  const out = { status: null, goaway: null };
  const done = () => { console.log(JSON.stringify(out)); process.exit(0); };
  session.on("goaway", (code) => { out.goaway = code; done(); });
  const req = session.request({ ":path": "/" });
  req.on("response", (h) => (out.status = h[":status"]));
  req.resume();
  setTimeout(done, 3000);
});
"#;

/// An upstream that sends the connection netchaos dialled again away at
/// once is going, not ageing its connections: netchaos does not dial it
/// a third time but sends the client away (GOAWAY), and the event log
/// says why (`goaway`, `soon`) beside the `redial` before it.
#[test]
fn an_upstream_going_for_good_sends_the_client_away_and_says_so() {
    if !need(&["node"]) {
        return;
    }
    let port = unused_port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("127.0.0.1:{port}"),
        "--events",
        &events.display().to_string(),
        "--fault",
        "http_status:status=503,path=/nowhere",
    ]);
    let (rc, out, err) = node(H2_GOING_AWAY, &[&port, &p.addr().to_string()], "".as_ref());
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // The answer, then netchaos's GOAWAY (NO_ERROR), not the 3 s timeout.
    assert_eq!(v, serde_json::json!({"status": 200, "goaway": 0}), "{out}");
    let (_, err) = p.stop();
    let log = read_events(&events);
    let kinds: Vec<_> = log
        .iter()
        .filter(|e| e["event"] == "redial" || e["event"] == "goaway")
        .map(|e| (e["event"].as_str().unwrap(), e["reason"].as_str()))
        .collect();
    // Dialled again (more than once where a busy machine delayed the
    // upstream's GOAWAY past 100 ms), then given up on.
    let (last, before) = kinds.split_last().expect("events");
    assert_eq!(*last, ("goaway", Some("soon")), "{err}");
    assert!(
        !before.is_empty() && before.iter().all(|k| *k == ("redial", None)),
        "{kinds:?}"
    );
}

/// An HTTP/2 upstream (Node's http2) on argv[1] whose `/big` streams
/// 3 MiB of events at once and whose `/small` answers "ok"; a client
/// through argv[2] opens three `/big` streams, then (0.5 s later) asks
/// for `/small` on the same connection: prints the answer or `timeout`.
const H2_CROWD: &str = r#"
const http2 = require("http2");
const [port, via] = process.argv.slice(1);
const server = http2.createServer();
server.on("session", (s) => s.on("error", () => {}));
server.on("stream", (stream, headers) => {
  stream.on("error", () => {});
  if (headers[":path"] === "/small") return stream.respond({ ":status": 200 }), stream.end("ok");
  stream.respond({ ":status": 200, "content-type": "text/event-stream" });
  const event = `data: ${"x".repeat(16 * 1024)}\n\n`;
  for (let i = 0; i < 192; i++) stream.write(event);
});
server.listen(+port, "127.0.0.1", () => {
  const session = http2.connect(`http://${via}`);
  session.on("error", () => {});
  for (let i = 0; i < 3; i++) {
    const big = session.request({ ":path": "/big" });
    big.on("error", () => {});
    big.resume();
  }
  setTimeout(() => {
    const req = session.request({ ":path": "/small" });
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (d) => (body += d));
    req.on("end", () => { console.log(body); process.exit(0); });
  }, 500);
  setTimeout(() => { console.log("timeout"); process.exit(0); }, 8000);
});
"#;

/// Streams stalled for good by `sse` still have what their upstream sends
/// read and dropped, as over HTTP/1.1: three of them, 3 MiB each, would
/// otherwise hold the upstream connection's flow-control window (5 MiB)
/// and every other stream on it would wait.
#[test]
fn streams_stalled_for_good_do_not_hold_the_others() {
    if !need(&["node"]) {
        return;
    }
    let port = unused_port().to_string();
    let p = proxy(
        &format!("127.0.0.1:{port}"),
        &["sse:stall_after_events=1,path=/big"],
    );
    let (rc, out, err) = node(H2_CROWD, &[&port, &p.addr().to_string()], "".as_ref());
    assert_eq!((rc, out.trim()), (0, "ok"), "{err}");
}

/// A client through argv[1] speaking HTTP/2 (prior knowledge) that sends
/// HEADERS without END_HEADERS, then CONTINUATION frames without end (16
/// KiB of well-formed header fields each), reading what comes back
/// meanwhile. Prints the GOAWAY's code, the bytes it sent before and after
/// it, and how long after it its connection failed (`null` if it still
/// took bytes 10 s later).
const CONTINUATION_FLOOD: &str = r#"
import errno, json, select, socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
def frame(kind, flags, stream, payload):
    return struct.pack("!I", len(payload))[1:] + bytes([kind, flags]) + struct.pack("!I", stream) + payload
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
# :method GET, :scheme http, :path / from the static table; no END_HEADERS.
s.sendall(frame(1, 0x1, 1, b"\x82\x86\x84"))
field = b"\x00\x03x-a" + bytes([100]) + b"a" * 100
cont = frame(9, 0, 1, field * (16384 // len(field)))
s.setblocking(False)
got, goaway, sent, before, at, closed = b"", None, 0, None, None, None
def read(d):
    global got, goaway, before, at
    got += d
    while len(got) >= 9 and goaway is None:
        n = int.from_bytes(got[:3], "big")
        if len(got) < 9 + n:
            break
        if got[3] == 7:
            goaway = int.from_bytes(got[13:17], "big")
            before, at = sent, time.monotonic()
        got = got[9 + n:]
start = time.monotonic()
pending = memoryview(cont)
while time.monotonic() - (at or start) < 10:
    r, w, _ = select.select([s], [s], [], 0.5)
    try:
        if r:
            read(s.recv(65536))
        if w:
            k = s.send(pending)
            sent += k
            pending = pending[k:] if k < len(pending) else memoryview(cont)
    except OSError:
        # What arrived before the reset is still there to read.
        try:
            while d := s.recv(65536):
                read(d)
        except OSError:
            pass
        closed = time.monotonic() - (at or start)
        break
print(json.dumps({"goaway": goaway, "before": before, "after": sent - (before or 0), "sent": sent, "closed_in": closed, "since_start": time.monotonic() - start}))
"#;

/// A CONTINUATION flood (HEADERS that never end) is sent away with hyper's
/// GOAWAY, and then its connection ends: netchaos stops reading it and
/// resets it once it has dropped a little (it used to read and drop
/// without end, 47 GB in 20 s at half a core).
#[test]
fn a_continuation_flood_is_cut_off_after_its_goaway() {
    if !need(&["python3"]) {
        return;
    }
    let up = Server::start("127.0.0.1:0", |mut s| {
        let mut buf = [0u8; 65536];
        while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {}
    });
    let p = proxy(
        &up.addr.to_string(),
        &["http_status:status=503,path=/nowhere"],
    );
    let (rc, out, err) = python(CONTINUATION_FLOOD, &[&p.addr().to_string()]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // ENHANCE_YOUR_CALM (too many CONTINUATION frames), or another
    // connection error h2 finds first; unseen when the reset came before
    // the client read it (a busy machine), which a server closing with
    // bytes unread may do too.
    assert_ne!(v["goaway"].as_u64(), Some(0), "{v}");
    let closed = v["closed_in"].as_f64();
    assert!(closed.is_some_and(|t| t < 5.0), "still open: {v}");
    // What the kernel buffers hold (both ends' socket buffers), the few
    // frames hyper reads before its GOAWAY, and the little netchaos reads
    // and drops after it.
    let sent = v["sent"].as_u64().unwrap();
    assert!(sent < 32 << 20, "{sent} bytes taken: {v}");
    eprintln!("{v}");
}

/// Whether Python has httpx with its HTTP/2 (h2); in CI it must.
fn have_httpx_h2() -> bool {
    if !need(&["python3"]) {
        return false;
    }
    if python("import h2, httpx", &[]).0 != 0 {
        assert!(
            !in_ci(),
            "httpx and h2 are required in CI (scripts/test.sh installs them)"
        );
        eprintln!("SKIPPED: python3 has no httpx or h2");
        return false;
    }
    true
}

/// An HTTPS upstream (Node's http2, argv: certificate, key, `h1` to let
/// HTTP/1.1 clients in too) that answers every request with the HTTP
/// version it was asked in (`x-seen`); prints its port.
const H2_SEEN: &str = r#"
const http2 = require("http2"), fs = require("fs");
const [cert, key, h1] = process.argv.slice(1);
const server = http2.createSecureServer({
  cert: fs.readFileSync(cert), key: fs.readFileSync(key), allowHTTP1: h1 === "h1",
});
server.on("request", (req, res) => {
  res.setHeader("x-seen", req.httpVersion);
  res.end("hello");
});
server.on("sessionError", () => {});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
"#;

/// httpx over HTTP/2 (argv[1] `h2only`: `http1=False`), one connection,
/// one GET per URL after it: `httpx PATH VERSION STATUS X-SEEN`.
const HTTPX_SEEN: &str = r#"
import sys, httpx
mode, urls = sys.argv[1], sys.argv[2:]
with httpx.Client(http2=True, http1=mode != "h2only", timeout=10) as c:
    for u in urls:
        p = u.rsplit("/", 1)[1]
        try:
            r = c.get(u)
            v = r.http_version.removeprefix("HTTP/")
            print("httpx", p, v, r.status_code, r.headers.get("x-seen", ""), flush=True)
        except Exception as e:
            print("httpx", p, "error", type(e).__name__, flush=True)
"#;

/// Go's net/http, the same.
const GO_SEEN: &str = r#"package main
import ("fmt"; "io"; "net/http"; "os"; "strings")
func main() {
	for _, u := range os.Args[1:] {
		p := u[strings.LastIndex(u, "/")+1:]
		r, err := http.Get(u)
		if err != nil { fmt.Println("go", p, "error"); continue }
		io.Copy(io.Discard, r.Body); r.Body.Close()
		v := "1.1"
		if r.ProtoMajor == 2 { v = "2" }
		fmt.Println("go", p, v, r.StatusCode, r.Header.Get("x-seen"))
	}
}"#;

/// Java's HttpClient, the same.
const JAVA_SEEN: &str = r#"import java.net.http.*; import java.net.URI;
public class Main { public static void main(String[] a) throws Exception {
  var c = HttpClient.newHttpClient();
  for (var u : a) {
    var p = u.substring(u.lastIndexOf('/') + 1);
    var r = c.send(HttpRequest.newBuilder(URI.create(u)).build(), HttpResponse.BodyHandlers.ofString());
    var v = r.version() == HttpClient.Version.HTTP_2 ? "2" : "1.1";
    System.out.println("java " + p + " " + v + " " + r.statusCode() + " " + r.headers().firstValue("x-seen").orElse(""));
  }
}}"#;

/// The clients of [`H2_SEEN`]'s answers: a shell script for curl
/// `--http2`, Go, Java and httpx, each asking `/ok` then `/down` of `base`
/// on one connection, built in `work`.
fn seen_clients(work: &std::path::Path, base: &str) -> String {
    let go = work.join("main.go");
    std::fs::write(&go, GO_SEEN).unwrap();
    let gobin = work.join("goclient");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&gobin)
        .arg(&go)
        .env("GOCACHE", work.join("gocache"))
        .env("GOPATH", work.join("gopath"))
        .env("GO111MODULE", "off")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let java = work.join("Main.java");
    std::fs::write(&java, JAVA_SEEN).unwrap();
    let py = work.join("client.py");
    std::fs::write(&py, HTTPX_SEEN).unwrap();
    let (ok, down) = (format!("{base}/ok"), format!("{base}/down"));
    format!(
        "curl -sS --http2 -o /dev/null -w 'curl ok %{{http_version}} %{{http_code}} %header{{x-seen}}\\n' {ok} \
         --next -sS --http2 -o /dev/null -w 'curl down %{{http_version}} %{{http_code}} %header{{x-seen}}\\n' {down} 2>&1; \
         {gobin} {ok} {down}; java {java} {ok} {down}; python3 {py} both {ok} {down}",
        gobin = gobin.display(),
        java = java.display(),
        py = py.display(),
    )
}

/// The clients' lines, sorted, each trimmed.
fn lines(out: &str) -> Vec<String> {
    let mut l: Vec<String> = out.lines().map(|l| l.trim().to_string()).collect();
    l.sort();
    l
}

/// Go, Java, curl `--http2` and httpx offer HTTP/2 and HTTP/1.1, and an
/// upstream that speaks both chooses HTTP/2: through `run --tls` with a
/// fault armed they still speak HTTP/2, and so does the upstream
/// (`x-seen: 2.0`), as directly; the fault acts per request on the same
/// connection. netchaos used to agree HTTP/1.1 with them whenever an HTTP
/// fault was armed.
#[test]
fn clients_offering_h2_keep_it_through_run_tls() {
    if !have_httpx_h2() || !need(&["node", "curl", "go", "java", "keytool", "ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let mut up = PythonBg::node(
        H2_SEEN,
        &[
            &ca.path("leaf.pem").display().to_string(),
            &ca.path("leaf.key").display().to_string(),
            "h1",
        ],
    );
    let port = up.line();
    let work = tempfile::tempdir().unwrap();
    let script = seen_clients(work.path(), &format!("https://localhost:{port}"));
    // Directly, each trusting the test's CA.
    let store = work.path().join("trust.p12");
    let made = Command::new("keytool")
        .args([
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-storetype",
            "PKCS12",
        ])
        .args(["-storepass", "changeit", "-file", &ca.ca(), "-keystore"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let direct = Command::new("sh")
        .args(["-c", &script])
        .env("SSL_CERT_FILE", ca.ca())
        .env("CURL_CA_BUNDLE", ca.ca())
        .env(
            "JAVA_TOOL_OPTIONS",
            format!(
                "-Djavax.net.ssl.trustStore={} -Djavax.net.ssl.trustStorePassword=changeit",
                store.display()
            ),
        )
        .output()
        .unwrap();
    let direct = lines(&String::from_utf8_lossy(&direct.stdout));
    let want: Vec<String> = ["curl", "go", "httpx", "java"]
        .iter()
        .flat_map(|c| [format!("{c} down 2 200 2.0"), format!("{c} ok 2 200 2.0")])
        .collect();
    assert_eq!(direct, want, "directly");
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--fault",
            "http_status:status=503,path=/down",
        ],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    let through: Vec<String> = direct
        .iter()
        .map(|l| l.replace("down 2 200 2.0", "down 2 503"))
        .collect();
    assert_eq!(lines(&out), through, "{err}");
    assert!(
        err.contains("HTTP requests: 8 seen, 4 faulted (http_status 503: 4)"),
        "{err}"
    );
}

/// An upstream that speaks HTTP/2 alone (Node's http2, `allowHTTP1:
/// false`) and a client that does too (httpx, `http1=False`): through
/// `run --tls` with a fault armed they meet over HTTP/2 and the fault acts
/// per request, as directly they meet; an HTTP/1.1-only client (curl
/// `--http1.1`) is refused by that upstream's `no_application_protocol`
/// alert, through netchaos as directly (curl exit 35). netchaos used to
/// offer the upstream HTTP/1.1 alone: every connection reset.
#[test]
fn an_h2_only_client_reaches_an_h2_only_upstream_through_run_tls() {
    if !have_httpx_h2() || !need(&["node", "curl", "ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let mut up = PythonBg::node(
        H2_SEEN,
        &[
            &ca.path("leaf.pem").display().to_string(),
            &ca.path("leaf.key").display().to_string(),
        ],
    );
    let base = format!("https://localhost:{}", up.line());
    let script = format!(
        "python3 -c '{HTTPX_SEEN}' h2only {base}/ok {base}/down {base}/ok; \
         curl -sS --http1.1 -o /dev/null {base}/ok 2>/dev/null; echo curl-http1.1 $?"
    );
    let direct = Command::new("sh")
        .args(["-c", &script])
        .env("SSL_CERT_FILE", ca.ca())
        .env("CURL_CA_BUNDLE", ca.ca())
        .output()
        .unwrap();
    let direct = String::from_utf8_lossy(&direct.stdout).into_owned();
    assert_eq!(
        direct.lines().collect::<Vec<_>>(),
        [
            "httpx ok 2 200 2.0",
            "httpx down 2 200 2.0",
            "httpx ok 2 200 2.0",
            "curl-http1.1 35"
        ],
        "directly"
    );
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--fault",
            "http_status:status=503,path=/down",
        ],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        direct.replace("down 2 200 2.0", "down 2 503 "),
        "{err}"
    );
    assert!(
        err.contains("HTTP requests: 3 seen, 1 faulted (http_status 503: 1)"),
        "{err}"
    );
}

/// An HTTP/2 upstream (h2c, Python's h2) that answers every stream with
/// an event stream of four events, then resets it `NO_ERROR` (no
/// END_STREAM); prints its port.
const H2_RESETTING: &str = r#"
import socket, threading, time
import h2.config, h2.connection, h2.events

def serve(sock):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    lock = threading.Lock()
    def send():
        sock.sendall(c.data_to_send())
    def answer(sid):
        with lock:
            c.send_headers(sid, [(":status", "200"), ("content-type", "text/event-stream")])
            send()
        for i in range(4):
            time.sleep(0.01)
            with lock:
                c.send_data(sid, f'event: delta\ndata: {{"i":{i}}}\n\n'.encode())
                send()
        with lock:
            c.reset_stream(sid, error_code=0)
            send()
    try:
        with lock:
            c.initiate_connection()
            send()
        while d := sock.recv(65536):
            with lock:
                events = c.receive_data(d)
                send()
            for e in events:
                if isinstance(e, h2.events.RequestReceived):
                    threading.Thread(target=answer, args=(e.stream_id,), daemon=True).start()
    except Exception:
        pass
    sock.close()

l = socket.create_server(("127.0.0.1", 0))
print(l.getsockname()[1], flush=True)
while True:
    s, _ = l.accept()
    threading.Thread(target=serve, args=(s,), daemon=True).start()
"#;

/// httpx (HTTP/2 with prior knowledge) reading argv[1]'s event stream:
/// the events it got, and how the stream ended.
const HTTPX_EVENTS: &str = r#"
import sys, httpx
got, how = 0, "ok"
try:
    with httpx.Client(http1=False, http2=True, timeout=10) as c:
        with c.stream("GET", sys.argv[1]) as r:
            for line in r.iter_lines():
                got += line.startswith("data: ")
except Exception as e:
    how = f"{type(e).__name__}: {e}"
print(got, how)
"#;

/// An upstream that resets a stream `NO_ERROR` in the middle of its answer
/// cut that answer short: the client's stream is reset `NO_ERROR` too
/// (httpx raises `RemoteProtocolError … StreamReset … error_code:0` after
/// the four events, as directly), and the event log says so. hyper takes
/// such a reset for the body's end, and netchaos used to end the client's
/// stream cleanly under any HTTP fault: a cut answer taken for a whole
/// one.
#[test]
fn an_upstreams_no_error_reset_mid_answer_stays_a_reset() {
    if !have_httpx_h2() {
        return;
    }
    let mut up = PythonBg::start(H2_RESETTING, &[]);
    let port = up.line();
    let (rc, direct, err) = python(HTTPX_EVENTS, &[&format!("http://127.0.0.1:{port}/v1")]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        direct.starts_with("4 RemoteProtocolError: ") && direct.contains("error_code:0"),
        "directly: {direct}"
    );
    for fault in [
        "http_status:status=503,path=/never",
        "sse:error_after_events=9",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("events.jsonl");
        let p = Proxy::start(&[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("127.0.0.1:{port}"),
            "--events",
            &events.display().to_string(),
            "--fault",
            fault,
        ]);
        let (rc, out, err) = python(HTTPX_EVENTS, &[&format!("http://{}/v1", p.addr())]);
        assert_eq!(rc, 0, "{err}");
        let (_, summary) = p.stop();
        // The stream's number may differ: netchaos's own HTTP/2.
        assert_eq!(out, direct, "under {fault}: {summary}");
        let resets: Vec<_> = read_events(&events)
            .into_iter()
            .filter(|e| e["event"] == "stream_reset")
            .collect();
        assert_eq!(resets.len(), 1, "{resets:?}");
        assert_eq!(
            (&resets[0]["reason"], &resets[0]["http"]["status"]),
            (&"NO_ERROR".into(), &200.into()),
            "{resets:?}"
        );
    }
}

/// An h2c upstream (Node's http2) on argv[1] answering 200, and a client
/// through argv[2] POSTing a JSON body per argument after them
/// (`CONTENT-TYPE|MODEL`, `-` for no content type), one connection:
/// prints the statuses.
const H2_POSTS: &str = r#"
const http2 = require("http2");
const [port, via, ...posts] = process.argv.slice(1);
const server = http2.createServer();
server.on("stream", (s) => { s.on("error", () => {}); s.resume(); s.on("end", () => { s.respond({ ":status": 200 }); s.end("ok"); }); });
server.listen(+port, "127.0.0.1", async () => {
  const session = http2.connect(`http://${via}`);
  session.on("error", () => {});
  const out = [];
  for (const p of posts) {
    const [type, model] = p.split("|");
    const head = { ":method": "POST", ":path": "/v1/messages" };
    if (type !== "-") head["content-type"] = type;
    out.push(await new Promise((done) => {
      const req = session.request(head);
      req.on("response", (h) => done(h[":status"]));
      req.on("error", (e) => done(e.code));
      req.resume();
      req.end(JSON.stringify({ model, max_tokens: 1 }));
    }));
  }
  console.log(out.join(" "));
  process.exit(0);
});
"#;

/// `body.*` matches a JSON body over HTTP/2 whatever its content type says
/// (`text/plain`, none), as over HTTP/1.1; it used to need
/// `application/json` on HTTP/2 only.
#[test]
fn body_fields_match_on_h2_without_a_json_content_type() {
    if !need(&["node"]) {
        return;
    }
    let port = unused_port().to_string();
    let p = proxy(
        &format!("127.0.0.1:{port}"),
        &["http_status:status=503,body.model=claude-*"],
    );
    let posts = [
        "text/plain|claude-3",
        "-|claude-3",
        "application/json|claude-3",
        "text/plain|gpt-4",
    ];
    let mut args = vec![port.as_str()];
    let via = p.addr().to_string();
    args.push(&via);
    args.extend(posts);
    let (rc, out, err) = node(H2_POSTS, &args, "".as_ref());
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), "503 503 503 200", "{err}");
}

/// A request answered in the upstream's place while the client is still
/// sending its body: the client gets the answer, as from a server that
/// answers early (RFC 9113 §8.1), not a bare stream error. The body used
/// to be dropped at once, and hyper's reset of the stream (CANCEL)
/// discarded the answer still queued: curl said "Stream error in the
/// HTTP/2 framing layer" 4 times in 6 (through `run --mock` over HTTPS).
#[test]
fn an_answer_before_the_request_body_has_come_reaches_the_client() {
    if !need(&["curl", "sh"]) {
        return;
    }
    // The built-in mock as the upstream: it serves h2c, and reads a
    // request's body before it answers.
    let up = Proxy::start_cmd("mock", &["--listen", "127.0.0.1:0", "--ttft", "5ms"]);
    let p = proxy(
        &up.addr().to_string(),
        &["http_status:status=529,path=/v1/*"],
    );
    // The body's second half comes 300 ms after the head.
    let curl = |base: &str, path: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(
                "(printf '{\"a\":'; sleep 0.3; printf '1}') | curl -sS -o /dev/null \
                 -w '%{http_code}' --http2-prior-knowledge --max-time 10 -X POST \
                 -H 'content-type: application/json' -T - \"$0\"",
            )
            .arg(format!("http://{base}{path}"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    // Directly, the mock answers (its 401: no key), and curl ends cleanly.
    let (ok, code, err) = curl(&up.addr().to_string(), "/v1/messages");
    assert!(ok && code == "401", "directly: {code} {err}");
    for i in 0..5 {
        let (ok, code, err) = curl(&p.addr().to_string(), "/v1/messages");
        assert!(ok && code == "529", "try {i}: {code} {err}");
    }
}
