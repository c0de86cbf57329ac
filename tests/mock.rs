//! The built-in upstream (`netchaos mock`) with the official SDKs, Python
//! `anthropic` and `openai`, pointed at it by `base_url`: their JSON and
//! streaming calls parse, token counting works, a malformed request
//! raises the SDK's own error, a seed replays its answers, and the timing
//! model holds at the client; and its cassettes: what `--record` kept of
//! a real upstream replays byte for byte with its timing under
//! `--mock-from`, and canned answers written by hand answer per route.

mod support;

use std::process::Command;

use support::*;

/// Whether python3 has the SDK `module` (skipped otherwise, which CI does
/// not allow).
fn has_sdk(module: &str) -> bool {
    if !need(&["python3"]) {
        return false;
    }
    if python(&format!("import {module}"), &[]).0 == 0 {
        return true;
    }
    assert!(
        !in_ci(),
        "{module} is required in CI (scripts/test.sh installs it)"
    );
    eprintln!("SKIPPED: python3 has no {module}");
    false
}

/// `netchaos mock` on a free port with `args`.
fn mock(args: &[&str]) -> Proxy {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend(args);
    let p = Proxy::start_cmd("mock", &all);
    assert!(!p.addrs.is_empty(), "no listener:\n{}", p.stderr());
    p
}

/// Fast answers for tests that do not time them.
const FAST: &[&str] = &["--ttft", "5ms", "--tokens-per-s", "2000"];

const ANTHROPIC_CALLS: &str = r#"
import sys, anthropic
c = anthropic.Anthropic(base_url=sys.argv[1], api_key="dummy", max_retries=0)
ask = [{"role": "user", "content": "Tell me about the sea"}]
m = c.messages.create(model="claude-sonnet-4-5", max_tokens=12, messages=ask)
words = m.content[0].text.split()
print("json", m.type, m.role, len(words), m.stop_reason, m.usage.input_tokens, m.usage.output_tokens)
with c.messages.stream(model="claude-haiku-4-5", max_tokens=4000, messages=ask) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
print("stream", final.stop_reason, final.usage.output_tokens == len(text.split()),
      text == final.content[0].text, text.endswith("."))
print("count", c.messages.count_tokens(model="claude-sonnet-4-5", messages=ask).input_tokens)
for kwargs, error in [
    (dict(model="claude-sonnet-4-5", messages=ask), anthropic.BadRequestError),
    (dict(model="no-such-model", max_tokens=5, messages=ask), anthropic.NotFoundError),
]:
    try:
        c.messages.create(**kwargs) if "max_tokens" in kwargs else c.post(
            "/v1/messages", body=kwargs, cast_to=object)
        print("no error")
    except error as e:
        print(type(e).__name__, e.status_code, e.body["error"]["type"], e.request_id.startswith("req_"))
r = c.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=3, messages=ask)
print("headers", r.headers["content-type"], r.headers["anthropic-ratelimit-requests-limit"],
      r.request_id != c.messages.with_raw_response.create(
          model="claude-sonnet-4-5", max_tokens=3, messages=ask).request_id)
print("text", m.content[0].text)
"#;

#[test]
fn anthropics_sdk_gets_messages_streams_counts_and_its_own_errors() {
    if !has_sdk("anthropic") {
        return;
    }
    let p = mock(&[&["--api", "anthropic", "--seed", "11"], FAST].concat());
    let (rc, out, err) = python(ANTHROPIC_CALLS, &[&format!("http://{}", p.addr())]);
    assert_eq!(rc, 0, "{err}\n{}", p.stderr());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "json message assistant 12 max_tokens 6 12",
        "{out}"
    );
    assert_eq!(lines[1], "stream end_turn True True True", "{out}");
    assert_eq!(lines[2], "count 6", "{out}");
    assert_eq!(
        lines[3], "BadRequestError 400 invalid_request_error True",
        "{out}"
    );
    assert_eq!(lines[4], "NotFoundError 404 not_found_error True", "{out}");
    assert_eq!(
        lines[5], "headers application/json 4000 True",
        "unique request ids: {out}"
    );
    // The same seed and request: the same text, from another process.
    let again = mock(&[&["--api", "anthropic", "--seed", "11"], FAST].concat());
    let (_, out2, err) = python(ANTHROPIC_CALLS, &[&format!("http://{}", again.addr())]);
    assert_eq!(out2.lines().last(), out.lines().last(), "{err}");
    let other = mock(&[&["--api", "anthropic", "--seed", "12"], FAST].concat());
    let (_, out3, err) = python(ANTHROPIC_CALLS, &[&format!("http://{}", other.addr())]);
    assert_ne!(out3.lines().last(), out.lines().last(), "{err}");
    let (status, log) = p.stop();
    assert!(status.success(), "SIGTERM ends it cleanly: {status}\n{log}");
}

const OPENAI_CALLS: &str = r#"
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="dummy", max_retries=0)
ask = [{"role": "user", "content": "Tell me about the sea"}]
r = c.chat.completions.create(model="gpt-4o-mini", messages=ask, max_completion_tokens=7)
ch = r.choices[0]
print("json", r.object, len(ch.message.content.split()), ch.finish_reason, r.usage.prompt_tokens,
      r.usage.completion_tokens, r.usage.total_tokens)
parts, usage, finish = [], None, None
for chunk in c.chat.completions.create(model="gpt-4o-mini", messages=ask, stream=True,
                                       stream_options={"include_usage": True}):
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage
text = "".join(parts)
print("stream", finish, usage.completion_tokens == len(text.split()), text.endswith("."))
resp = c.responses.create(model="gpt-4.1-mini", input="Tell me", max_output_tokens=16)
print("responses", resp.status, resp.incomplete_details.reason, len(resp.output_text.split()),
      resp.usage.output_tokens)
with c.responses.stream(model="gpt-4.1-mini", input="Tell me") as s:
    deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    final = s.get_final_response()
print("responses-stream", final.status, deltas == final.output_text)
for kwargs, error in [
    (dict(model="gpt-4o-mini", messages=[]), openai.BadRequestError),
    (dict(model="claude-x", messages=ask), openai.NotFoundError),
]:
    try:
        c.chat.completions.create(**kwargs)
        print("no error")
    except error as e:
        print(type(e).__name__, e.status_code, e.code)
try:
    c.post("/chat/completions", body={"messages": ask}, cast_to=object)
except openai.BadRequestError as e:
    print("no model", e.status_code, e.message.endswith("you must provide a model parameter"))
raw = c.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=ask, max_tokens=2)
print("headers", raw.headers["x-request-id"].startswith("req_"), raw.headers["x-ratelimit-limit-requests"])
print("text", ch.message.content)
"#;

#[test]
fn openais_sdk_gets_chat_completions_responses_and_its_own_errors() {
    if !has_sdk("openai") {
        return;
    }
    let p = mock(&[&["--api", "openai", "--seed", "3"], FAST].concat());
    let (rc, out, err) = python(OPENAI_CALLS, &[&format!("http://{}", p.addr())]);
    assert_eq!(rc, 0, "{err}\n{}", p.stderr());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "json chat.completion 7 length 6 7 13", "{out}");
    assert_eq!(lines[1], "stream stop True True", "{out}");
    assert_eq!(
        lines[2], "responses incomplete max_output_tokens 16 16",
        "{out}"
    );
    assert_eq!(lines[3], "responses-stream completed True", "{out}");
    assert_eq!(lines[4], "BadRequestError 400 empty_array", "{out}");
    assert_eq!(lines[5], "NotFoundError 404 model_not_found", "{out}");
    assert_eq!(lines[6], "no model 400 True", "{out}");
    assert_eq!(lines[7], "headers True 10000", "{out}");
    let again = mock(&[&["--api", "openai", "--seed", "3"], FAST].concat());
    let (_, out2, err) = python(OPENAI_CALLS, &[&format!("http://{}", again.addr())]);
    assert_eq!(out2.lines().last(), out.lines().last(), "{err}");
}

/// Both APIs on one port, told apart by path; HTTP/2 with prior
/// knowledge too.
#[test]
fn one_mock_serves_both_apis_and_h2c() {
    if !need(&["curl"]) {
        return;
    }
    let p = mock(FAST);
    let base = format!("http://{}", p.addr());
    let curl = |path: &str, headers: &[&str], body: &str, h2: bool| {
        let mut args = vec!["-sS", "-o", "-", "-w", "\n%{http_code} %{http_version}"];
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        for h in headers {
            args.extend(["-H", h]);
        }
        let url = format!("{base}{path}");
        args.extend(["-H", "content-type: application/json", "-d", body, &url]);
        let out = std::process::Command::new("curl")
            .args(&args)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let anthropic = curl(
        "/v1/messages",
        &["x-api-key: k", "anthropic-version: 2023-06-01"],
        r#"{"model":"claude-x","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}"#,
        true,
    );
    assert!(anthropic.ends_with("\n200 2"), "{anthropic}");
    assert!(anthropic.contains(r#""type":"message""#), "{anthropic}");
    let openai = curl(
        "/v1/chat/completions",
        &["authorization: Bearer k"],
        r#"{"model":"gpt-4o","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        false,
    );
    assert!(openai.ends_with("data: [DONE]\n\n\n200 1.1"), "{openai}");
    let unknown = curl("/v1/embeddings", &[], "{}", false);
    assert!(unknown.ends_with("\n404 1.1"), "{unknown}");
    assert!(
        unknown.contains(r#""error":{"#),
        "OpenAI's envelope: {unknown}"
    );
}

/// The client sees the time to first token and the rate it was given,
/// within 10 % (the median of several answers).
#[test]
fn the_timing_model_holds_at_the_client() {
    if !has_sdk("anthropic") {
        return;
    }
    let p = mock(&["--ttft", "200ms±10ms", "--tokens-per-s", "200"]);
    let code = r#"
import sys, time, statistics, anthropic
c = anthropic.Anthropic(base_url=sys.argv[1], api_key="dummy", max_retries=0)
c.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "warm"}])
ttfts, rates = [], []
for i in range(7):
    start = time.perf_counter()
    times = []
    with c.messages.stream(model="claude-x", max_tokens=20,
                           messages=[{"role": "user", "content": f"question {i}"}]) as s:
        for _ in s.text_stream:
            times.append(time.perf_counter())
    assert len(times) == 20, len(times)
    ttfts.append(times[0] - start)
    rates.append((len(times) - 1) / (times[-1] - times[0]))
print(round(statistics.median(ttfts) * 1000), round(statistics.median(rates)))
"#;
    let (rc, out, err) = python(code, &[&format!("http://{}", p.addr())]);
    assert_eq!(rc, 0, "{err}");
    let v: Vec<f64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!((180.0..=220.0).contains(&v[0]), "ttft {} ms", v[0]);
    assert!((180.0..=220.0).contains(&v[1]), "{} tokens/s", v[1]);
}

#[test]
fn bad_flags_are_refused_before_it_starts() {
    for (args, says) in [
        (&["--api", "mistral"][..], "anthropic, openai or gemini"),
        (&["--ttft", "100ms±1s"][..], "larger"),
        (&["--tokens-per-s", "0"][..], "above 0"),
        (&["--listen", "nowhere"][..], "--listen"),
    ] {
        let mut all = vec!["mock"];
        all.extend(args);
        let (rc, _, err) = netchaos(&all);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A resolver file naming a port where nothing listens: a query the DNS
/// layer forwarded would go unanswered (no test uses the machine's).
fn no_resolver() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let closed = {
        let l = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let path = dir.path().join("resolv.conf");
    std::fs::write(&path, format!("nameserver 127.0.0.1:{closed}\n")).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

/// Both official SDKs with their default base URLs (HTTPS to the real
/// hosts), a dummy key and no network: answered by the mock.
const HERMETIC: &str = r#"
import anthropic, openai
a = anthropic.Anthropic(api_key="dummy", max_retries=0)
ask = [{"role": "user", "content": "Tell me about the sea"}]
m = a.messages.create(model="claude-sonnet-4-5", max_tokens=9, messages=ask)
print("anthropic", m.stop_reason, m.usage.output_tokens, len(m.content[0].text.split()))
with a.messages.stream(model="claude-sonnet-4-5", max_tokens=4000, messages=ask) as s:
    text = "".join(s.text_stream)
print("anthropic-stream", s.get_final_message().stop_reason, text.endswith("."))
print("count", a.messages.count_tokens(model="claude-sonnet-4-5", messages=ask).input_tokens)
try:
    a.post("/v1/messages", body={"model": "claude-sonnet-4-5", "messages": ask}, cast_to=object)
except anthropic.BadRequestError as e:
    print("anthropic", type(e).__name__, e.body["error"]["message"])
o = openai.OpenAI(api_key="dummy", max_retries=0)
c = o.chat.completions.create(model="gpt-4o-mini", messages=ask, max_completion_tokens=5)
print("openai", c.choices[0].finish_reason, c.usage.completion_tokens)
parts = [ch.choices[0].delta.content or "" for ch in o.chat.completions.create(
    model="gpt-4o-mini", messages=ask, stream=True) if ch.choices]
print("openai-stream", "".join(parts).endswith("."))
try:
    o.chat.completions.create(model="gpt-4o-mini", messages=[])
except openai.BadRequestError as e:
    print("openai", type(e).__name__, e.code)
print("text", m.content[0].text, c.choices[0].message.content)
"#;

/// `run --mock`: the SDKs reach https://api.anthropic.com and
/// https://api.openai.com as they are, in a namespace with no route
/// anywhere and no resolver; nothing is dialled but the mock, every
/// connection is marked in the event log, and the seed replays the text.
#[test]
fn run_mock_answers_the_sdks_default_hosts_with_no_network() {
    if !has_sdk("anthropic") || !has_sdk("openai") || !need(&["ip", "nft"]) {
        return;
    }
    let (_dir, resolv) = no_resolver();
    let events = tempfile::NamedTempFile::new().unwrap();
    let ev = events.path().display().to_string();
    let run = |ev: &str| {
        wrapped(
            &[
                "--mock",
                "anthropic,openai",
                "--mock-ttft",
                "5ms",
                "--mock-tokens-per-s",
                "2000",
                "--seed",
                "21",
                "--resolv-conf",
                &resolv,
                "--events",
                ev,
            ],
            &["python3", "-c", HERMETIC],
        )
    };
    let (code, out, err) = run(&ev);
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..7],
        [
            "anthropic max_tokens 9 9",
            "anthropic-stream end_turn True",
            "count 6",
            "anthropic BadRequestError max_tokens: Field required",
            "openai length 5",
            "openai-stream True",
            "openai BadRequestError empty_array",
        ],
        "{out}\n{err}"
    );
    assert!(
        err.contains("answered by the mock: 7 request(s), 2 of them refused"),
        "{err}"
    );
    let log = read_events(events.path());
    let opens: Vec<&serde_json::Value> = log.iter().filter(|e| e["event"] == "open").collect();
    assert!(!opens.is_empty());
    for o in &opens {
        assert!(
            o["mock"] == "anthropic" || o["mock"] == "openai",
            "every connection went to the mock: {o}"
        );
        assert!(["api.anthropic.com", "api.openai.com"].contains(&o["host"].as_str().unwrap()));
    }
    assert!(
        !log.iter().any(|e| e["event"] == "error"),
        "nothing was dialled but the mock: {log:?}"
    );
    let answered = log.iter().filter(|e| e["event"] == "response").count();
    assert_eq!(answered, 7, "each answer is marked");
    // The same seed: the same answers, in another run.
    let again = tempfile::NamedTempFile::new().unwrap();
    let (_, out2, err) = run(&again.path().display().to_string());
    assert_eq!(out2.lines().last(), out.lines().last(), "{err}");
}

/// Faults act on the mock as on a real upstream: `llm-overloaded`
/// answers 3 in 10 in its place with Anthropic's 529 (the mock never
/// sees them), and an `sse` error acts on the mock's own stream.
#[test]
fn faults_compose_with_the_mock() {
    if !has_sdk("anthropic") || !need(&["ip", "nft"]) {
        return;
    }
    let (_dir, resolv) = no_resolver();
    let code = r#"
import anthropic
a = anthropic.Anthropic(api_key="dummy", max_retries=0)
n = {}
for i in range(100):
    try:
        a.messages.create(model="claude-x", max_tokens=2,
                          messages=[{"role": "user", "content": f"q{i}"}])
        k = "ok"
    except anthropic.APIStatusError as e:
        k = type(e).__name__
    n[k] = n.get(k, 0) + 1
print(n.get("OverloadedError", 0), n.get("ok", 0))
"#;
    let args = [
        "--mock",
        "anthropic",
        "--mock-ttft",
        "0",
        "--mock-tokens-per-s",
        "10000",
        "--seed",
        "5",
        "--resolv-conf",
        &resolv,
        "-p",
        "llm-overloaded",
    ];
    let (rc, out, err) = wrapped(&args, &["python3", "-c", code]);
    assert_eq!(rc, 0, "{err}");
    let v: Vec<u32> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v[0] + v[1], 100, "{out}");
    assert!((15..=45).contains(&v[0]), "a binomial share of 529s: {out}");
    assert!(
        err.contains(&format!("answered by the mock: {} request(s)", v[1])),
        "the 529s never reached the mock: {err}"
    );
    let stream = r#"
import anthropic
a = anthropic.Anthropic(api_key="dummy", max_retries=0)
try:
    with a.messages.stream(model="claude-x", max_tokens=50,
                           messages=[{"role": "user", "content": "hi"}]) as s:
        "".join(s.text_stream)
    print("no error")
except anthropic.APIStatusError as e:
    print(type(e).__name__, e.body["error"]["type"])
"#;
    let mut args = args.to_vec();
    args.pop();
    args.push("llm-stream-error");
    let (rc, out, err) = wrapped(&args, &["python3", "-c", stream]);
    assert_eq!(rc, 0, "{err}");
    // The SDK raises a stream's error event as its APIStatusError, with
    // the provider's body.
    assert_eq!(out.trim(), "APIStatusError overloaded_error", "{err}");
}

/// `proxy --mock`: a proxy to https://api.anthropic.com reaches the mock
/// instead (the name is not even resolved), with the proxy's faults.
#[test]
fn proxy_mock_stands_in_for_its_upstream() {
    if !has_sdk("anthropic") {
        return;
    }
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream-tls",
        "api.anthropic.com:443",
        "--mock",
        "anthropic",
        "--mock-ttft",
        "0",
        "--fault",
        "http_status:status=529,envelope=anthropic,first=1",
    ]);
    let code = r#"
import sys, anthropic
a = anthropic.Anthropic(base_url=sys.argv[1], api_key="dummy", max_retries=0)
for i in range(2):
    try:
        m = a.messages.create(model="claude-x", max_tokens=3, messages=[{"role": "user", "content": "hi"}])
        print(m.stop_reason, m.usage.output_tokens)
    except anthropic.APIStatusError as e:
        print(type(e).__name__)
"#;
    let (rc, out, err) = python(code, &[&format!("http://{}", p.addr())]);
    assert_eq!(rc, 0, "{err}\n{}", p.stderr());
    assert_eq!(out, "OverloadedError\nmax_tokens 3\n", "{}", p.stderr());
    let (_, log) = p.stop();
    assert!(log.contains("answered by the mock: 1 request(s)"), "{log}");
    assert!(!log.contains("resolve"), "{log}");
}

/// `[[mocks]]` is checked as the rest of a profile; where the mock cannot
/// stand in, `--mock` is refused before anything starts.
#[test]
fn mocks_are_checked_and_refused_where_they_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let good = write(
        "good.toml",
        "[[mocks]]\napi = \"openai\"\nhost = \"LLM.internal\"\n\n[[mocks]]\napi = \"anthropic\"\n",
    );
    let (rc, out, err) = netchaos(&["check", &good]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("mock llm.internal: answered by the built-in mock (openai API)"),
        "{out}"
    );
    assert!(out.contains("mock api.anthropic.com:"), "{out}");
    for (text, says) in [
        (
            "[[mocks]]\napi = \"mistral\"\n",
            "bad.toml:2:7: mocks[0].api",
        ),
        (
            "[[mocks]]\napi = \"openai\"\nhost = \"http://x\"\n",
            "mocks[0].host: expected a host name",
        ),
        ("[[mocks]]\nhost = \"a.b\"\n", "missing \"api\""),
        ("[[mocks]]\napi = \"openai\"\nport = 1\n", "port"),
        (
            "[[mocks]]\napi = \"openai\"\nhost = \"a.b\"\n[[mocks]]\napi = \"anthropic\"\nhost = \"a.b\"\n",
            "a host speaks one API",
        ),
    ] {
        let bad = write("bad.toml", text);
        let (rc, _, err) = netchaos(&["check", &bad]);
        assert_eq!(rc, 2, "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    // A cassette named by a profile, relative to it: checked as a run
    // reads it, its hosts listed.
    std::fs::create_dir(dir.path().join("cas")).unwrap();
    write(
        "cas/a.json",
        r#"{"request": {"host": "llm.internal", "path": "/v1/messages"}, "response": {}}"#,
    );
    let from = write("from.toml", "[[mocks]]\nfrom = \"cas\"\n");
    let (rc, out, err) = netchaos(&["check", &from]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("mock llm.internal: answered"), "{out}");
    write(
        "cas/b.json",
        r#"{"request": {}, "response": {"status": 1000}}"#,
    );
    let (rc, _, err) = netchaos(&["check", &from]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("mocks[0]") && err.contains("b.json: response status 1000"),
        "{err}"
    );
    let both = write("both.toml", "[[mocks]]\nfrom = \"cas\"\napi = \"openai\"\n");
    let (rc, _, err) = netchaos(&["check", &both]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("stands alone"), "{err}");
    for args in [
        &["run", "--in-place", "--mock", "openai", "--", "true"][..],
        &["run", "--mock", "mistral", "--", "true"][..],
        &["server", "-p", &good][..],
        &["server", "-p", &from][..],
        &["run", "--in-place", "-p", &from, "--", "true"][..],
    ] {
        let (rc, _, err) = netchaos(args);
        assert_eq!(rc, 2, "{args:?}: {err}");
    }
}

/// The Node SDKs (`@anthropic-ai/sdk`, `openai`), as Python's above:
/// their default base URLs, a dummy key, no route and no resolver; JSON
/// and streamed answers parse, tokens are counted, a malformed request
/// gets the SDK's own BadRequestError; and under `llm-overloaded`, a
/// binomial share of 100 calls at maxRetries 0 gets OverloadedError (529)
/// while nothing but the mock is dialled.
const NODE_HERMETIC: &str = r#"
const Anthropic = require("@anthropic-ai/sdk");
const OpenAI = require("openai");
(async () => {
  const a = new Anthropic({ apiKey: "dummy", maxRetries: 0 });
  const ask = [{ role: "user", content: "Tell me about the sea" }];
  const calls = Number(process.argv[2] || 0);
  if (calls > 0) {
    let overloaded = 0, ok = 0, other = 0;
    for (let i = 0; i < calls; i++) {
      try {
        await a.messages.create({ model: "claude-sonnet-4-5", max_tokens: 3, messages: ask });
        ok++;
      } catch (e) {
        if (e.status === 529 && e.error.error.type === "overloaded_error") overloaded++; else { other++; console.error(e); }
      }
    }
    console.log("calls", ok, overloaded, other);
    return;
  }
  const m = await a.messages.create({ model: "claude-sonnet-4-5", max_tokens: 9, messages: ask });
  console.log("anthropic", m.stop_reason, m.usage.output_tokens, m.content[0].text.split(" ").length);
  const s = a.messages.stream({ model: "claude-sonnet-4-5", max_tokens: 4000, messages: ask });
  let text = "";
  s.on("text", (t) => { text += t; });
  const final = await s.finalMessage();
  console.log("anthropic-stream", final.stop_reason, text.endsWith("."), text === final.content[0].text);
  const n = await a.messages.countTokens({ model: "claude-sonnet-4-5", messages: ask });
  console.log("count", n.input_tokens);
  try {
    await a.messages.create({ model: "claude-sonnet-4-5", messages: ask });
  } catch (e) {
    console.log("anthropic", e.constructor.name, e.status);
  }
  const o = new OpenAI({ apiKey: "dummy", maxRetries: 0 });
  const c = await o.chat.completions.create({ model: "gpt-4o-mini", messages: ask, max_completion_tokens: 5 });
  console.log("openai", c.choices[0].finish_reason, c.usage.completion_tokens);
  const stream = await o.chat.completions.create({ model: "gpt-4o-mini", messages: ask, stream: true,
    stream_options: { include_usage: true } });
  let parts = "", usage = null;
  for await (const ch of stream) {
    if (ch.choices.length) parts += ch.choices[0].delta.content || "";
    if (ch.usage) usage = ch.usage;
  }
  console.log("openai-stream", parts.endsWith("."), usage !== null && usage.completion_tokens > 0);
  try {
    await o.chat.completions.create({ model: "gpt-4o-mini", messages: [] });
  } catch (e) {
    console.log("openai", e.constructor.name, e.status);
  }
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[test]
fn nodes_sdks_get_the_mock_with_their_default_hosts_and_no_network() {
    let Some(modules) = node_modules_with("@anthropic-ai/sdk") else {
        return;
    };
    if node_modules_with("openai").is_none() || !need(&["ip", "nft"]) {
        return;
    }
    let (_dir, resolv) = no_resolver();
    let script = _dir.path().join("hermetic.js");
    std::fs::write(&script, NODE_HERMETIC).unwrap();
    let script = script.display().to_string();
    let run = |extra: &[&str], arg: &str, events: &str| {
        let mut c = Command::new(BIN);
        c.env("NODE_PATH", &modules);
        let mut args = vec![
            "--mock",
            "anthropic,openai",
            "--mock-ttft",
            "5ms",
            "--mock-tokens-per-s",
            "4000",
            "--seed",
            "21",
            "--resolv-conf",
            &resolv,
            "--events",
            events,
        ];
        args.extend(extra);
        wrapped_with(c, &args, &["node", &script, arg])
    };
    let events = tempfile::NamedTempFile::new().unwrap();
    let (code, out, err) = run(&[], "0", &events.path().display().to_string());
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "anthropic max_tokens 9 9",
            "anthropic-stream end_turn true true",
            "count 6",
            "anthropic BadRequestError 400",
            "openai length 5",
            "openai-stream true true",
            "openai BadRequestError 400",
        ],
        "{err}"
    );
    // 100 calls under llm-overloaded (3 in 10): a binomial share of 529s
    // (mean 30, sd 4.6: 15..=45 is more than 3 sd each way), and every
    // connection went to the mock.
    let events = tempfile::NamedTempFile::new().unwrap();
    let (code, out, err) = run(
        &["-p", "llm-overloaded"],
        "100",
        &events.path().display().to_string(),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let counts: Vec<u32> = out
        .trim()
        .strip_prefix("calls ")
        .unwrap_or_else(|| panic!("{out}\n{err}"))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts[0] + counts[1], 100, "{out}\n{err}");
    assert_eq!(counts[2], 0, "{err}");
    assert!((15..=45).contains(&counts[1]), "{counts:?}");
    let log = read_events(events.path());
    assert!(
        log.iter()
            .filter(|e| e["event"] == "open")
            .all(|o| o["mock"] == "anthropic")
    );
    assert!(
        !log.iter().any(|e| e["event"] == "error"),
        "nothing else was dialled"
    );
}

/// `--model GLOB:…`: a model the glob matches gets its own timing (a slow
/// primary beside a fast fallback), the others the base timing.
#[test]
fn a_model_glob_gets_its_own_timing() {
    if !has_sdk("anthropic") {
        return;
    }
    let p = mock(&[
        "--api",
        "anthropic",
        "--ttft",
        "5ms",
        "--tokens-per-s",
        "4000",
        "--model",
        "claude-opus-*:ttft=1s",
    ]);
    let (rc, out, err) = python(
        r#"
import sys, time, anthropic
c = anthropic.Anthropic(base_url=sys.argv[1], api_key="dummy", max_retries=0)
for model in ["claude-opus-4-1", "claude-haiku-4-5"]:
    t = time.monotonic()
    c.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    print(model, time.monotonic() - t)
"#,
        &[&format!("http://{}", p.addr())],
    );
    assert_eq!(rc, 0, "{err}\n{}", p.stderr());
    let took: Vec<f64> = out
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(took[0] >= 1.0, "opus: {out}");
    assert!(took[1] < 1.0, "haiku took the base timing: {out}");
    // A glob's timing that cannot be read is refused before it starts.
    let (code, _, err) = netchaos(&["mock", "--listen", "127.0.0.1:0", "--model", "opus"]);
    assert_eq!(code, 2);
    assert!(err.contains("--model \"opus\": expected GLOB:"), "{err}");
}

/// Tool use, as an agent's loop runs it: offered a tool, the answer calls
/// it (arguments made from its schema), and once the tool's result comes
/// back, the answer is text — JSON and streamed, both APIs, through the
/// SDKs' own parsing and stream accumulation.
#[test]
fn an_agents_tool_loop_runs_against_the_mock() {
    if !has_sdk("anthropic") || !has_sdk("openai") {
        return;
    }
    let p = mock(&[&["--seed", "5"], FAST].concat());
    let (rc, out, err) = python(
        r#"
import sys, json, anthropic, openai
base = sys.argv[1]
a = anthropic.Anthropic(base_url=base, api_key="dummy", max_retries=0)
tools = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 2}},
    "required": ["city", "days"]}}]
msgs = [{"role": "user", "content": "Weather in Paris?"}]
m = a.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=msgs)
use = [b for b in m.content if b.type == "tool_use"][0]
print("anthropic", m.stop_reason, use.name, json.dumps(use.input, sort_keys=True), use.id.startswith("toolu_"))
msgs += [{"role": "assistant", "content": m.content},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
final = a.messages.create(model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=msgs)
print("anthropic-final", final.stop_reason, [b.type for b in final.content])
with a.messages.stream(model="claude-sonnet-4-5", max_tokens=200, tools=tools, messages=msgs[:1]) as s:
    fm = s.get_final_message()
print("anthropic-stream", fm.stop_reason, [b.type for b in fm.content], fm.content[-1].input == use.input)
o = openai.OpenAI(base_url=base + "/v1", api_key="dummy", max_retries=0)
ft = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
    "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
ask = [{"role": "user", "content": "find"}]
c = o.chat.completions.create(model="gpt-4o-mini", messages=ask, tools=ft)
tc = c.choices[0].message.tool_calls[0]
print("openai", c.choices[0].finish_reason, tc.function.name, tc.function.arguments, c.choices[0].message.content)
calls = {}
for ch in o.chat.completions.create(model="gpt-4o-mini", messages=ask, tools=ft, stream=True):
    for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
        calls.setdefault(d.index, "")
        calls[d.index] += d.function.arguments or ""
    if ch.choices and ch.choices[0].finish_reason:
        print("openai-stream", ch.choices[0].finish_reason, calls)
after = o.chat.completions.create(model="gpt-4o-mini", tools=ft, messages=ask + [
    c.choices[0].message, {"role": "tool", "tool_call_id": tc.id, "content": "found"}])
print("openai-final", after.choices[0].finish_reason, after.choices[0].message.content is not None)
"#,
        &[&format!("http://{}", p.addr())],
    );
    assert_eq!(rc, 0, "{err}\n{}", p.stderr());
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "anthropic tool_use get_weather {\"city\": \"netchaos\", \"days\": 2} True",
            "anthropic-final end_turn ['text']",
            "anthropic-stream tool_use ['text', 'tool_use'] True",
            "openai tool_calls lookup {\"q\":\"netchaos\"} None",
            "openai-stream tool_calls {0: '{\"q\":\"netchaos\"}'}",
            "openai-final stop True",
        ],
        "{err}"
    );
}

/// Gemini's framing (model in the path, chunks without event names, no
/// end marker), through Google's own SDK (`google-genai`) with its
/// default host and no network: JSON, a stream, token counting, and
/// Google's own 404; with `llm-overloaded`, a share of Gemini's 503s in
/// the mock's place, and a stream broken by Gemini's error event.
#[test]
fn googles_sdk_gets_gemini_with_its_default_host_and_no_network() {
    if !has_sdk("google.genai") || !need(&["ip", "nft"]) {
        return;
    }
    let (_dir, resolv) = no_resolver();
    let code = r#"
import sys
from google import genai
from google.genai import types, errors
c = genai.Client(api_key="dummy")
mode = sys.argv[1]
if mode == "calls":
    ok = unavailable = 0
    for i in range(60):
        try:
            c.models.generate_content(model="gemini-2.5-flash", contents="q %d" % i)
            ok += 1
        except errors.ServerError as e:
            unavailable += e.code == 503 and e.status == "UNAVAILABLE"
    print("calls", ok, unavailable)
    sys.exit()
if mode == "broken":
    try:
        for ch in c.models.generate_content_stream(model="gemini-2.5-flash", contents="Tell me about the sea"):
            pass
        print("no error")
    except errors.APIError as e:
        print("broken", type(e).__name__, e.code)
    sys.exit()
r = c.models.generate_content(model="gemini-2.5-flash", contents="Tell me about the sea",
    config=types.GenerateContentConfig(max_output_tokens=7))
print("json", r.candidates[0].finish_reason, r.usage_metadata.candidates_token_count, len(r.text.split()))
chunks = list(c.models.generate_content_stream(model="gemini-2.5-flash", contents="Tell me about the sea"))
text = "".join(ch.text or "" for ch in chunks)
print("stream", len(chunks) > 3, text.endswith("."), chunks[-1].candidates[0].finish_reason)
print("count", c.models.count_tokens(model="gemini-2.5-flash", contents="Tell me about the sea").total_tokens)
try:
    c.models.generate_content(model="gpt-4o", contents="x")
except errors.ClientError as e:
    print("error", type(e).__name__, e.code, e.status)
"#;
    let run = |extra: &[&str], mode: &str| {
        let mut args = vec![
            "--mock",
            "gemini",
            "--mock-ttft",
            "5ms",
            "--mock-tokens-per-s",
            "4000",
            "--seed",
            "9",
            "--resolv-conf",
            &resolv,
        ];
        args.extend(extra);
        wrapped(&args, &["python3", "-c", code, mode])
    };
    let (rc, out, err) = run(&[], "plain");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "json FinishReason.MAX_TOKENS 7 7",
            "stream True True FinishReason.STOP",
            "count 6",
            "error ClientError 404 NOT_FOUND",
        ],
        "{err}"
    );
    // 60 calls, 3 in 10 overloaded (mean 18, sd 3.5): Gemini's own 503.
    let (rc, out, err) = run(&["-p", "llm-overloaded"], "calls");
    assert_eq!(rc, 0, "{out}\n{err}");
    let n: Vec<u32> = out
        .trim()
        .strip_prefix("calls ")
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(n[0] + n[1], 60, "{out}\n{err}");
    assert!((6..=30).contains(&n[1]), "{n:?}");
    // The stream's error event, as Gemini's stream carries one (INTERNAL).
    let (rc, out, err) = run(&["-p", "llm-stream-error"], "broken");
    assert_eq!(rc, 0, "{out}\n{err}");
    assert!(out.starts_with("broken ServerError 500"), "{out}\n{err}");
}

/// The test's own upstream for recordings: a `netchaos mock` on
/// 127.0.0.2 with this timing, reached by the name `llm.test` through a
/// resolver of the test's; its port.
fn named_upstream(ttft: &str, tokens_per_s: &str) -> (Proxy, u16, Dnsd) {
    let up = Proxy::start_cmd(
        "mock",
        &[
            "--listen",
            "127.0.0.2:0",
            "--ttft",
            ttft,
            "--tokens-per-s",
            tokens_per_s,
        ],
    );
    let port = up.addrs[0].port();
    (up, port, Dnsd::start(&["llm.test=127.0.0.2"]))
}

/// The client both runs of the record/replay test use: the SDK's JSON
/// call (HTTP/1.1), a stream read raw with httpx (HTTP/1.1) and one with
/// curl over h2c; the streams' bytes hashed, and the moments of their
/// first token and last byte.
const RECORDED_CLIENT: &str = r#"
import hashlib, subprocess, sys, time, anthropic, httpx
base = sys.argv[1]
c = anthropic.Anthropic(base_url=base, api_key="sk-ant-secret-1", max_retries=0)
m = c.messages.create(model="claude-x", max_tokens=6, messages=[{"role": "user", "content": "hi"}])
print("json", m.id, m.content[0].text, m.usage.output_tokens)
ask = {"model": "claude-x", "max_tokens": 12, "stream": True,
       "messages": [{"role": "user", "content": "tell me"}]}
t0 = time.monotonic()
raw, first = b"", None
with httpx.stream("POST", base + "/v1/messages", json=ask,
                  headers={"x-api-key": "sk-ant-secret-2", "anthropic-version": "2023-06-01"}) as r:
    for b in r.iter_raw():
        raw += b
        if first is None and b"content_block_delta" in raw:
            first = time.monotonic() - t0
last = time.monotonic() - t0
print("h1", r.status_code, r.headers["request-id"], hashlib.sha256(raw).hexdigest())
print("h1-times %.3f %.3f" % (first, last))
out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-N", base + "/v1/messages",
    "-H", "x-api-key: sk-ant-secret-3", "-H", "anthropic-version: 2023-06-01",
    "-H", "content-type: application/json", "-d", '{"model":"claude-x","max_tokens":4,"stream":true,'
    '"messages":[{"role":"user","content":"h2"}]}', "-w", "\n%{http_version} %{http_code}"],
    capture_output=True, check=True).stdout
body, _, tail = out.rpartition(b"\n")
print("h2", tail.decode(), hashlib.sha256(body).hexdigest(), body.count(b"content_block_delta"))
"#;

/// `--record DIR` keeps what the test's own upstream (a `netchaos mock`
/// on 127.0.0.2, reached by name through the test's resolver) answered,
/// keys redacted; `--mock-from DIR` replays it with that upstream and
/// resolver gone: the same bytes over HTTP/1.1 and h2c, the same request
/// ids, and the timing's shape (first token ~300 ms, then 40 tokens/s).
#[test]
fn a_recorded_exchange_replays_byte_identical_with_its_timing() {
    if !has_sdk("anthropic") || !has_sdk("httpx") || !need(&["ip", "nft", "curl"]) {
        return;
    }
    let (up, port, dns) = named_upstream("300ms", "40");
    let dir = tempfile::tempdir().unwrap();
    let cas = dir.path().join("cassette");
    let cas_s = cas.display().to_string();
    let base = format!("http://llm.test:{port}");
    let (code, recorded, err) = wrapped(
        &["--record", &cas_s, "--resolv-conf", &dns.resolv],
        &["python3", "-c", RECORDED_CLIENT, &base],
    );
    assert_eq!(code, 0, "{recorded}\n{err}");
    assert!(err.contains("recorded 3 exchange(s) into"), "{err}");
    drop(up);
    drop(dns);
    let files: Vec<_> = std::fs::read_dir(&cas)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains("sk-ant-secret"), "a key was kept: {text}");
        assert!(text.contains("[redacted]"), "{text}");
    }
    let (_none, resolv) = no_resolver();
    let events = dir.path().join("replay.jsonl");
    let (code, replayed, err) = wrapped(
        &[
            "--mock-from",
            &cas_s,
            "--resolv-conf",
            &resolv,
            "--events",
            events.to_str().unwrap(),
        ],
        &["python3", "-c", RECORDED_CLIENT, &base],
    );
    assert_eq!(code, 0, "{replayed}\n{err}");
    let same = |l: &str| !l.starts_with("h1-times");
    let rec: Vec<&str> = recorded.lines().filter(|l| same(l)).collect();
    let rep: Vec<&str> = replayed.lines().filter(|l| same(l)).collect();
    assert_eq!(rec.len(), 3, "{recorded}");
    assert_eq!(rep, rec, "the replay gives the recorded bytes\n{err}");
    assert!(rec[2].starts_with("h2 2 200 "), "{recorded}");
    let times = |out: &str| -> (f64, f64) {
        let l = out.lines().find(|l| l.starts_with("h1-times")).unwrap();
        let v: Vec<f64> = l.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        (v[0], v[1])
    };
    let ((f0, l0), (f1, l1)) = (times(&recorded), times(&replayed));
    // Lower bounds hold however busy the machine: the replay waits as
    // the upstream did (first token ~300 ms, 11 more at 40/s ~ 275 ms).
    assert!(f0 >= 0.28 && f1 >= 0.8 * f0, "first token: {f0} then {f1}");
    assert!(
        l1 - f1 >= 0.8 * (l0 - f0),
        "stream: {f0}..{l0} then {f1}..{l1}"
    );
    assert!(f1 < f0 + 1.0 && l1 < l0 + 2.0, "{f0}..{l0} then {f1}..{l1}");
    let log = read_events(&events);
    assert!(
        log.iter()
            .filter(|e| e["event"] == "open")
            .all(|o| o["mock"].is_string() && o["host"] == "llm.test"),
        "every connection went to the mock"
    );
    assert!(!log.iter().any(|e| e["event"] == "error"), "{log:?}");
}

/// Canned answers written by hand, per route: under `run --mock-from`
/// with the SDK's default host (a request nothing matches is the API's
/// 404, marked unrecorded), and under `netchaos mock --from` beside the
/// made-up answers; an SSE body spaced `every_ms` apart streams so.
#[test]
fn canned_answers_per_route_answer_the_sdks() {
    if !has_sdk("anthropic") || !has_sdk("openai") || !need(&["ip", "nft"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("messages.json"),
        r#"{"request": {"method": "POST", "host": "api.anthropic.com", "path": "/v1/messages"},
            "response": {"status": 200, "head_ms": 50, "headers": [["request-id", "req_canned"]],
              "body": {"id": "msg_canned", "type": "message", "role": "assistant",
                       "model": "claude-x", "content": [{"type": "text", "text": "canned answer"}],
                       "stop_reason": "end_turn", "stop_sequence": null,
                       "usage": {"input_tokens": 3, "output_tokens": 2}}}}"#,
    )
    .unwrap();
    let sse = (0..5)
        .map(|i| {
            format!(
                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"g\",\
                 \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{i} \"}},\"finish_reason\":null}}]}}\n\n"
            )
        })
        .collect::<String>()
        + "data: [DONE]\n\n";
    std::fs::write(dir.path().join("chat.sse"), sse).unwrap();
    std::fs::write(
        dir.path().join("chat.json"),
        r#"{"request": {"host": "api.openai.com", "path": "/v1/chat/completions"},
            "response": {"headers": [["content-type", "text/event-stream"]],
                         "body_file": "chat.sse", "every_ms": 60}}"#,
    )
    .unwrap();
    let code = r#"
import sys, time, anthropic, openai
kw = {"base_url": sys.argv[1]} if len(sys.argv) > 1 else {}
a = anthropic.Anthropic(api_key="dummy", max_retries=0, **kw)
r = a.messages.with_raw_response.create(model="claude-x", max_tokens=5,
                                        messages=[{"role": "user", "content": "hi"}])
print("anthropic", r.parse().content[0].text, r.request_id)
try:
    print("count", a.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hi"}]).input_tokens)
except anthropic.NotFoundError as e:
    print("count", type(e).__name__, e.response.headers.get("x-netchaos-mock"), "nothing in" in str(e))
okw = {"base_url": sys.argv[1] + "/v1"} if len(sys.argv) > 1 else {}
o = openai.OpenAI(api_key="dummy", max_retries=0, **okw)
t0 = time.monotonic()
parts = [ch.choices[0].delta.content for ch in o.chat.completions.create(
    model="g", messages=[{"role": "user", "content": "hi"}], stream=True)]
print("openai", "".join(parts).strip(), "%.2f" % (time.monotonic() - t0))
"#;
    let (_none, resolv) = no_resolver();
    let cas = dir.path().display().to_string();
    let (rc, out, err) = wrapped(
        &["--mock-from", &cas, "--resolv-conf", &resolv],
        &["python3", "-c", code],
    );
    assert_eq!(rc, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "anthropic canned answer req_canned",
        "{out}\n{err}"
    );
    assert_eq!(
        lines[1], "count NotFoundError unrecorded True",
        "{out}\n{err}"
    );
    assert!(lines[2].starts_with("openai w0 w1 w2 w3 w4 "), "{out}");
    let secs: f64 = lines[2].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(secs >= 0.24, "five events 60 ms apart: {secs}");
    // Standalone: what the cassette does not hold is made up.
    let m = mock(&["--from", &cas, "--ttft", "5ms", "--tokens-per-s", "2000"]);
    let base = format!("http://{}", m.addrs[0]);
    let (rc, out, err) = python(code, &[&base]);
    assert_eq!(rc, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "anthropic canned answer req_canned", "{out}");
    assert_eq!(lines[1], "count 2", "made up: {out}");
    assert!(lines[2].starts_with("openai w0 w1 w2 w3 w4 "), "{out}");
}

/// A cassette that cannot be used stops the run before anything starts,
/// saying which file and why.
#[test]
fn bad_cassettes_are_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(
        bad.join("x.json"),
        r#"{"request": {}, "response": {"status": 42}}"#,
    )
    .unwrap();
    let hostless = dir.path().join("hostless");
    std::fs::create_dir(&hostless).unwrap();
    std::fs::write(
        hostless.join("a.json"),
        r#"{"request": {"path": "/v1/messages"}, "response": {}}"#,
    )
    .unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    let s = |p: &std::path::Path| p.display().to_string();
    let missing = s(&dir.path().join("missing"));
    for (args, says) in [
        (
            vec!["run", "--mock-from", &missing, "--", "true"],
            "No such file",
        ),
        (
            vec!["run", "--mock-from", &s(&bad), "--", "true"],
            "x.json: response status 42",
        ),
        (
            vec!["run", "--mock-from", &s(&hostless), "--", "true"],
            "name no host",
        ),
        (vec!["mock", "--from", &s(&bad)], "status 42"),
        (vec!["run", "--record", &s(&file), "--", "true"], "--record"),
        (
            vec![
                "proxy",
                "--mock-from",
                &missing,
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "a.test:1",
            ],
            "missing",
        ),
    ] {
        let (rc, _, err) = netchaos(&args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--record` keeps only what a replay can stand in for, as the upstream
/// sent it: not an exchange a fault was set to follow (an `sse` stall
/// that never came still passed the body through the fault), not one a
/// connection fault slowed, not one to an address; credentials in
/// headers and queries are redacted.
#[test]
fn what_a_fault_touched_or_an_address_answered_is_not_recorded() {
    if !need(&["ip", "nft", "curl"]) {
        return;
    }
    let (_up, port, dns) = named_upstream("5ms", "2000");
    let dir = tempfile::tempdir().unwrap();
    let ask = r#"{"model":"claude-x","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}"#;
    let curl = |url: &str| {
        format!(
            "curl -sS -o /dev/null -H 'x-api-key: k' -H 'anthropic-version: 2023-06-01' \
             -H 'content-type: application/json' -H 'x-amz-security-token: tok' -d '{ask}' '{url}'"
        )
    };
    for (name, fault, url) in [
        (
            "sse",
            "sse:stall_after_events=1000",
            format!("http://llm.test:{port}/v1/messages"),
        ),
        (
            "latency",
            "latency:delay=1ms",
            format!("http://llm.test:{port}/v1/messages"),
        ),
        (
            "address",
            "",
            format!("http://127.0.0.2:{port}/v1/messages"),
        ),
        (
            "clean",
            "",
            format!("http://llm.test:{port}/v1/messages?key=AIzaSecret&beta=true"),
        ),
    ] {
        let cas = dir.path().join(name);
        let cas_s = cas.display().to_string();
        let mut args = vec!["--record", &cas_s, "--resolv-conf", &dns.resolv];
        if !fault.is_empty() {
            args.extend(["--fault", fault]);
        }
        let (code, _, err) = wrapped(&args, &["sh", "-c", &curl(&url)]);
        assert_eq!(code, 0, "{name}: {err}");
        let files: Vec<_> = std::fs::read_dir(&cas).unwrap().collect();
        match name {
            "clean" => {
                assert_eq!(files.len(), 1, "{err}");
                let text = std::fs::read_to_string(files[0].as_ref().unwrap().path()).unwrap();
                assert!(
                    !text.contains("AIzaSecret") && !text.contains("\"tok\""),
                    "{text}"
                );
                assert!(text.contains("key=%5Bredacted%5D&beta=true"), "{text}");
                assert!(
                    text.contains("content_block_delta"),
                    "the body is kept: {text}"
                );
            }
            _ => assert!(files.is_empty(), "{name}: {files:?}\n{err}"),
        }
    }
}
