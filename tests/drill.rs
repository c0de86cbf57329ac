//! Drills and request records with real clients: the official `anthropic`
//! SDK and hand-written httpx clients, under `netchaos run --mock`, judged
//! from the `attempt` lines. A naive client fails `success_rate` under
//! 529 where a client with a fallback model passes `fallback` (the
//! side-by-side table); the SDK's retries honour `retry-after` where an
//! eager client's do not; a breaker client passes `breaker` where a
//! fallback-only one fails it; a retried lost POST needs one
//! Idempotency-Key; `--stop-if` removes a 503 fault and the drill says
//! aborted; JUnit XML is read by junitparser; seeds repeat.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Whether python3 has `modules` and the run can be made (skipped
/// otherwise, which CI does not allow).
fn ready(modules: &[&str]) -> bool {
    if !need(&["python3", "ip", "nft"]) {
        return false;
    }
    for m in modules {
        if python(&format!("import {m}"), &[]).0 != 0 {
            assert!(
                !in_ci(),
                "{m} is required in CI (scripts/test.sh installs it)"
            );
            eprintln!("SKIPPED: python3 has no {m}");
            return false;
        }
    }
    true
}

/// A directory with the clients' scripts and a resolver that answers
/// nothing (the mock's hosts are answered by netchaos itself).
struct Bench {
    dir: tempfile::TempDir,
    resolv: String,
}

impl Bench {
    fn new(scripts: &[(&str, &str)]) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let closed = {
            let l = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let resolv = dir.path().join("resolv.conf");
        std::fs::write(&resolv, format!("nameserver 127.0.0.1:{closed}\n")).unwrap();
        for (name, code) in scripts {
            std::fs::write(dir.path().join(name), code).unwrap();
        }
        Bench {
            resolv: resolv.display().to_string(),
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `python3 SCRIPT ARGS`, as a drill's command line.
    fn cmd(&self, script: &str, args: &str) -> String {
        format!("python3 {} {args}", self.path(script).display())
    }

    /// The run flags every run takes: the mock, fast, no resolver.
    fn run_args(&self) -> Vec<String> {
        [
            "--mock",
            "anthropic",
            "--mock-ttft",
            "5ms",
            "--mock-tokens-per-s",
            "4000",
            "--resolv-conf",
            &self.resolv,
        ]
        .map(String::from)
        .to_vec()
    }

    /// A drill file: `body` between the common keys and `[env]`.
    fn drill(&self, body: &str) -> PathBuf {
        let head = format!(
            "mock = [\"anthropic\"]\nrun_args = [\"--mock-ttft\", \"5ms\", \"--mock-tokens-per-s\", \"4000\", \"--resolv-conf\", {:?}]\n",
            self.resolv
        );
        let p = self.path("drill.toml");
        std::fs::write(
            &p,
            format!("{head}{body}\n[env]\nANTHROPIC_API_KEY = \"dummy\"\n"),
        )
        .unwrap();
        p
    }
}

/// `netchaos ARGS`, bounded in time; (code, stdout, stderr).
fn bounded(args: &[&str], limit: Duration) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("ANTHROPIC_API_KEY", "dummy")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn netchaos");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "netchaos {args:?} did not finish in {limit:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `netchaos run` with the bench's flags and `args`, then `cmd`.
fn run(b: &Bench, args: &[&str], cmd: &str) -> (i32, String, String) {
    let mut all: Vec<String> = vec!["run".into(), "-q".into()];
    all.extend(b.run_args());
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--".into(), "sh".into(), "-c".into(), cmd.into()]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    bounded(&all, Duration::from_secs(120))
}

/// A table row's cells (two spaces or more apart).
fn row<'a>(table: &'a str, scenario: &str, client: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.len() > 2 && cells[0] == scenario && cells[1] == client)
        .unwrap_or_else(|| panic!("no row {scenario} / {client} in:\n{table}"))
}

/// Sends `N` requests, one after another, to `MODEL`; the SDK's retries
/// as asked; with `FALLBACK`, a failed request goes to that model.
const SDK_CLIENT: &str = r#"
import sys, anthropic
n, retries, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
fallback = sys.argv[4] if len(sys.argv) > 4 else None
c = anthropic.Anthropic(max_retries=retries, timeout=20)
ok = 0
for i in range(n):
    for m in [model] + ([fallback] if fallback else []):
        try:
            c.messages.create(model=m, max_tokens=8, messages=[{"role": "user", "content": "question %d" % i}])
            ok += 1
            break
        except anthropic.APIError as e:
            print("error", m, type(e).__name__)
print("answered", ok)
"#;

#[test]
fn a_naive_and_a_resilient_client_side_by_side_under_529() {
    if !ready(&["anthropic", "junitparser"]) {
        return;
    }
    let b = Bench::new(&[("sdk.py", SDK_CLIENT)]);
    let file = b.drill(&format!(
        r#"
name = "failover"
hypothesis = "If the primary model returns 529, the fallback model answers every request"
[clients]
naive = "{}"
resilient = "{}"
[steady_state]
checks = ["success_rate", "max_attempts=1"]
[[scenario]]
name = "primary-outage"
fault = "http_status:status=529,envelope=anthropic,body.model=claude-sonnet-*"
checks = ["success_rate", "fallback=claude-haiku-4-5", "max_attempts=4"]
"#,
        b.cmd("sdk.py", "6 0 claude-sonnet-4-5"),
        b.cmd("sdk.py", "6 2 claude-sonnet-4-5 claude-haiku-4-5"),
    ));
    let junit = b.path("drill.xml");
    let page = b.path("drill.html");
    let (code, out, err) = bounded(
        &[
            "drill",
            &file.display().to_string(),
            "--junit",
            &junit.display().to_string(),
            "--report",
            &page.display().to_string(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, 3, "the naive client fails: exit 3\n{out}\n{err}");
    // The issue's columns, one row per scenario × client.
    let header = out.lines().find(|l| l.starts_with("scenario")).unwrap();
    let cols: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cols,
        [
            "scenario",
            "client",
            "answered",
            "fallback",
            "p50 / p95 ms",
            "calls / request",
            "faults",
            "verdict"
        ]
    );
    assert_eq!(row(&out, "steady-state", "naive")[2..4], ["6/6", "0"]);
    let naive = row(&out, "primary-outage", "naive");
    assert_eq!(
        (naive[2], naive[3], naive[5], naive[6], naive[7]),
        ("0/6", "0", "1.00", "6", "FAIL")
    );
    // Three tries of the primary (the SDK's two retries), then the fallback.
    let resilient = row(&out, "primary-outage", "resilient");
    assert_eq!(
        (
            resilient[2],
            resilient[3],
            resilient[5],
            resilient[6],
            resilient[7]
        ),
        ("6/6", "6", "4.00", "18", "pass"),
        "{out}"
    );
    // The failure names the naive client's requests.
    assert!(
        out.contains("FAILED success_rate: 0/6 requests answered")
            && out.contains("#1 (POST /v1/messages, 1 attempt"),
        "{out}"
    );
    // The page: the table, and each run's timeline linked beside it.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("primary-outage  resilient") && html.contains("Hypothesis:"),
        "{html}"
    );
    let timeline = b.path("drill-primary-outage-resilient-seed1.html");
    assert!(
        html.contains("href=\"drill-primary-outage-resilient-seed1.html\""),
        "{html}"
    );
    assert!(
        std::fs::read_to_string(&timeline)
            .unwrap()
            .contains("api.anthropic.com")
    );
    // JUnit, as a CI reads it: 4 steady-state cases (2 checks × 2
    // clients), 6 under the scenario, of which the naive client's
    // success_rate and fallback failed.
    let (rc, counts, perr) = python(
        r#"
import sys
from junitparser import JUnitXml
xml = JUnitXml.fromfile(sys.argv[1])
for suite in xml:
    failed = sorted(c.name for c in suite if not c.is_passed)
    print(suite.name, suite.tests, suite.failures, failed)
"#,
        &[&junit.display().to_string()],
    );
    assert_eq!(rc, 0, "{perr}");
    assert_eq!(
        counts.lines().collect::<Vec<_>>(),
        [
            "failover.steady-state 4 0 []",
            "failover.primary-outage 6 2 ['naive / fallback=claude-haiku-4-5', 'naive / success_rate']",
        ]
    );
}

/// Retries a 429 at once, up to ten times (no backoff, no retry-after).
const EAGER_CLIENT: &str = r#"
import httpx
c = httpx.Client(timeout=20)
body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
headers = {"x-api-key": "dummy", "anthropic-version": "2023-06-01"}
for i in range(2):
    body["messages"][0]["content"] = "hi %d" % i
    for attempt in range(11):
        r = c.post("https://api.anthropic.com/v1/messages", json=body, headers=headers)
        if r.status_code != 429:
            break
print("done")
"#;

#[test]
fn the_sdk_honours_retry_after_where_an_eager_client_breaks_both_checks() {
    if !ready(&["anthropic", "httpx"]) {
        return;
    }
    let b = Bench::new(&[("sdk.py", SDK_CLIENT), ("eager.py", EAGER_CLIENT)]);
    let fault = "http_status:status=429,retry_after=1s,envelope=anthropic";
    let expect = [
        "--fault",
        fault,
        "--expect",
        "retry_after_honoured",
        "--expect",
        "max_attempts=3",
    ];
    // The SDK (default retries: 2) waits as told, three attempts at most;
    // every request still fails, and the script exits 0.
    let (code, out, err) = run(&b, &expect, &b.cmd("sdk.py", "2 2 claude-sonnet-4-5"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("answered 0"), "{out}");
    // The eager client: eleven attempts per request, none waiting. Its
    // script passed; the contract did not: exit 3, naming its requests.
    let (code, out, err) = run(&b, &expect, &b.cmd("eager.py", ""));
    assert!(out.contains("done"), "{out}\n{err}");
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("FAILED retry_after_honoured: 20 retries after a retry-after, 20 too early")
            && err.contains("#1 (POST /v1/messages, 11 attempts"),
        "{err}"
    );
    assert!(
        err.contains("FAILED max_attempts=3: at most 11 attempt(s) per request"),
        "{err}"
    );
    assert!(err.contains("#2 (POST /v1/messages, 11 attempts"), "{err}");
}

/// A client with a fallback model; with `breaker`, three failures of the
/// primary in a row keep it off the primary for a second.
const BREAKER_CLIENT: &str = r#"
import sys, time, httpx
breaker = sys.argv[1] == "breaker"
c = httpx.Client(timeout=20)
headers = {"x-api-key": "dummy", "anthropic-version": "2023-06-01"}
failures, open_until, answered = 0, 0.0, 0
end = time.monotonic() + 3.5
i = 0
while time.monotonic() < end:
    i += 1
    models = ["claude-sonnet-4-5", "claude-haiku-4-5"]
    if breaker and time.monotonic() < open_until:
        models = models[1:]
    for m in models:
        body = {"model": m, "max_tokens": 4, "messages": [{"role": "user", "content": "q %d" % i}]}
        r = c.post("https://api.anthropic.com/v1/messages", json=body, headers=headers)
        if m == "claude-sonnet-4-5":
            if r.status_code >= 500:
                failures += 1
                if failures >= 3:
                    open_until, failures = time.monotonic() + 1.0, 0
            else:
                failures = 0
        if r.status_code == 200:
            answered += 1
            break
    time.sleep(0.05)
print("answered", answered, "of", i)
"#;

#[test]
fn a_breaker_keeps_off_the_failing_primary_and_a_plain_fallback_does_not() {
    if !ready(&["httpx"]) {
        return;
    }
    let b = Bench::new(&[("client.py", BREAKER_CLIENT)]);
    let args = [
        "--fault",
        "http_status:status=503,body.model=claude-sonnet-*",
        "--expect",
        "breaker=3,cooloff=1s",
        "--expect",
        "fallback=claude-haiku-4-5",
    ];
    let (code, out, err) = run(&b, &args, &b.cmd("client.py", "breaker"));
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = run(&b, &args, &b.cmd("client.py", "plain"));
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        err.contains("FAILED breaker=3,cooloff=1s")
            && err.contains("after its breaker should have opened"),
        "{err}"
    );
    // Both answered every request from the fallback.
    assert!(err.contains("ok     fallback=claude-haiku-4-5"), "{err}");
}

/// POSTs twice; a request whose answer is lost (a reset) is retried
/// once, with one Idempotency-Key per request when asked.
const LOST_CLIENT: &str = r#"
import sys, uuid, httpx
keyed = sys.argv[1] == "keyed"
headers = {"x-api-key": "dummy", "anthropic-version": "2023-06-01"}
for i in range(2):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 4, "messages": [{"role": "user", "content": "pay %d" % i}]}
    h = dict(headers, **({"Idempotency-Key": str(uuid.uuid4())} if keyed else {}))
    for attempt in range(2):
        try:
            with httpx.Client(timeout=20) as c:
                c.post("https://api.anthropic.com/v1/messages", json=body, headers=h)
            break
        except httpx.TransportError as e:
            print("lost", type(e).__name__)
print("done")
"#;

#[test]
fn a_retried_lost_post_needs_one_idempotency_key() {
    if !ready(&["httpx"]) {
        return;
    }
    let b = Bench::new(&[("client.py", LOST_CLIENT)]);
    // The first request reaches the mock, which answers; the answer is
    // lost (a reset). The retry is served again.
    let args = [
        "--fault",
        "http_abort:phase=response,then=reset,first=1",
        "--expect",
        "idempotent_retries",
        "--expect",
        "no_duplicate_work=1",
    ];
    let (code, out, err) = run(&b, &args, &b.cmd("client.py", "bare"));
    assert!(out.contains("lost") && out.contains("done"), "{out}\n{err}");
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("FAILED idempotent_retries: 1 retried POST request(s), 1 without one key")
            && err.contains("retried without an Idempotency-Key"),
        "{err}"
    );
    // The upstream did the work twice for one request: counted.
    assert!(
        err.contains("ok     no_duplicate_work=1: 1 request(s) served more than once"),
        "{err}"
    );
    let (code, out, err) = run(&b, &args, &b.cmd("client.py", "keyed"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.is_empty() || !err.contains("FAILED"), "{err}");
}

/// Asks every 100 ms for `SECONDS`, no retries; says how many answered
/// in each half.
const STEADY_CLIENT: &str = r#"
import sys, time, anthropic
c = anthropic.Anthropic(max_retries=0, timeout=20)
end = time.monotonic() + float(sys.argv[1])
ok = i = 0
while time.monotonic() < end:
    i += 1
    try:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=[{"role": "user", "content": "q %d" % i}])
        ok += 1
    except anthropic.APIError:
        pass
    time.sleep(0.1)
print("answered", ok, "of", i)
"#;

#[test]
fn stop_if_removes_the_faults_and_the_drill_says_aborted() {
    if !ready(&["anthropic"]) {
        return;
    }
    let b = Bench::new(&[("client.py", STEADY_CLIENT)]);
    // Directly: a 503 on every request until the guard-rail removes it.
    let events = b.path("ev.jsonl");
    let (code, out, err) = run(
        &b,
        &[
            "--fault",
            "http_status:status=503",
            "--stop-if",
            "error_rate > 0.5 over 2s",
            "--events",
            &events.display().to_string(),
        ],
        &b.cmd("client.py", "4"),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let lines = read_events(&events);
    let stop = lines
        .iter()
        .find(|l| l["event"] == "stop_if")
        .unwrap_or_else(|| panic!("no stop_if line:\n{err}"));
    let stop_t = stop["t"].as_f64().unwrap();
    let attempts: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["event"] == "attempt").collect();
    // Crossed at the fifth failure (the least it judges), checked every
    // 200 ms: within about a second of the first.
    let first = attempts[0]["start"].as_f64().unwrap();
    assert!(
        stop_t - first < 2.0,
        "stopped {:.2}s after the first attempt",
        stop_t - first
    );
    // Before: 503s; after, answered.
    let after: Vec<_> = attempts
        .iter()
        .filter(|a| a["start"].as_f64().unwrap() > stop_t + 0.05)
        .collect();
    assert!(!after.is_empty(), "no attempt after the stop");
    assert!(
        after.iter().all(|a| a["http"]["status"] == 200),
        "{after:?}"
    );
    assert!(attempts[0]["http"]["status"] == 503);
    // In a drill: the scenario is marked aborted.
    let file = b.drill(&format!(
        r#"
hypothesis = "the client survives an outage"
command = "{}"
stop = "error_rate > 0.5 over 2s"
[steady_state]
checks = ["success_rate"]
[[scenario]]
name = "outage"
fault = "http_status:status=503"
checks = ["max_attempts=1"]
"#,
        b.cmd("client.py", "3")
    ));
    let json = b.path("out.json");
    let (code, out, err) = bounded(
        &[
            "drill",
            &file.display().to_string(),
            "--json",
            &json.display().to_string(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, 3, "{out}\n{err}");
    assert_eq!(row(&out, "outage", "client")[7], "aborted", "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["pass"], false);
    assert_eq!(v["rows"][1]["verdict"], "aborted");
    assert_eq!(v["rows"][1]["runs"][0]["aborted"], true);
}

#[test]
fn repeat_gives_a_verdict_per_seed_and_one_overall() {
    if !ready(&["anthropic"]) {
        return;
    }
    let b = Bench::new(&[("sdk.py", SDK_CLIENT)]);
    let file = b.drill(&format!(
        r#"
hypothesis = "retries absorb a 30% overload"
command = "{}"
repeat = 3
seed = 40
[steady_state]
checks = ["success_rate"]
[[scenario]]
name = "overloaded"
profile = "llm-overloaded"
checks = ["max_attempts=3"]
"#,
        b.cmd("sdk.py", "4 2 claude-sonnet-4-5")
    ));
    let (code, out, err) = bounded(
        &["drill", &file.display().to_string(), "--json", "-"],
        Duration::from_secs(240),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    // The JSON alone on standard output; the table on standard error.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(row(&err, "overloaded", "client")[7], "pass", "{err}");
    let runs = v["rows"][1]["runs"].as_array().unwrap();
    let seeds: Vec<u64> = runs.iter().map(|r| r["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, [40, 41, 42]);
    assert_eq!(v["rows"][1]["verdict"], "pass");
    assert!(err.contains("[4] overloaded / client (seed 42)"), "{err}");
}

#[test]
fn records_show_every_attempt_over_http2_too() {
    if !ready(&["httpx", "h2"]) {
        return;
    }
    let client = r#"
import httpx
with httpx.Client(http2=True, timeout=20) as c:
    for m in ["claude-sonnet-4-5", "claude-haiku-4-5"]:
        r = c.post("https://api.anthropic.com/v1/messages", headers={"x-api-key": "dummy",
            "anthropic-version": "2023-06-01", "Idempotency-Key": "k-" + m},
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "model": m})
        print(r.http_version, r.status_code)
"#;
    let b = Bench::new(&[("two.py", client)]);
    let events = b.path("ev.jsonl");
    let (code, out, err) = run(
        &b,
        &["--records", "--events", &events.display().to_string()],
        &b.cmd("two.py", ""),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out, "HTTP/2 200\nHTTP/2 200\n");
    let ev = events.display().to_string();
    let (code, json, err) = netchaos(&["records", &ev, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let models: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["claude-sonnet-4-5", "claude-haiku-4-5"]);
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|a| a["status"] == 200 && a["error"].is_null())
    );
    let lines = read_events(&events);
    let a = lines.iter().find(|l| l["event"] == "attempt").unwrap();
    assert_eq!(a["http"]["proto"], "h2");
    assert_eq!(
        a["http"]["headers"]["idempotency-key"],
        "k-claude-sonnet-4-5"
    );
    // The table and CSV; keyed by the header, two requests of one attempt.
    let (code, table, _) = netchaos(&["records", &ev, "--group-by", "header:idempotency-key"]);
    assert_eq!(code, 0);
    assert!(
        table
            .starts_with("2 attempt(s) in 2 logical request(s), grouped by header:idempotency-key"),
        "{table}"
    );
    assert!(
        table.contains("api.anthropic.com/claude-haiku-4-5   POST /v1/messages  200"),
        "{table}"
    );
    let (_, csv, _) = netchaos(&["records", &ev, "--csv"]);
    assert!(
        csv.starts_with("request,attempt,start_s,host,model,method,path,status,error,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 3);
    // Judged from the command line, with the exit status to say so.
    let (code, _, err) = netchaos(&[
        "records",
        &ev,
        "--expect",
        "max_attempts=1",
        "--expect",
        "latency_p95=1ms",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("ok     max_attempts=1") && err.contains("FAILED latency_p95=1ms"),
        "{err}"
    );
}

#[test]
fn bad_drills_and_checks_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.toml");
    std::fs::write(
        &file,
        "hypothesis = \"x\"\ncommand = \"true\"\n[steady_state]\nchecks = [\"success_rate\"]\n[[scenario]]\nname = \"a\"\nfault = \"http_status:status=503\"\nchecks = [\"max_atempts=3\"]\n",
    )
    .unwrap();
    let (code, _, err) = netchaos(&["drill", &file.display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("d.toml:8:") && err.contains("did you mean \"max_attempts\""),
        "{err}"
    );
    let (code, _, err) = netchaos(&["drill", "--builtin", "nope", "--", "true"]);
    assert_eq!(code, 2);
    assert!(err.contains("the built-in drills: llm-failover"), "{err}");
    let (code, _, err) = netchaos(&["drill", "--builtin", "llm-failover"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("give the command under test after --"),
        "{err}"
    );
    // A check or a stop condition the run cannot judge: refused at once.
    let (code, _, err) = netchaos(&["run", "--expect", "sucess_rate", "--", "true"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean \"success_rate\""), "{err}");
    let (code, _, err) = netchaos(&["run", "--group-by", "bodies", "--", "true"]);
    assert_eq!(code, 2);
    assert!(err.contains("group_by \"bodies\": expected auto"), "{err}");
    let (code, _, err) = netchaos(&["run", "--mock-model", "opus", "--", "true"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--mock-model \"opus\": expected GLOB:"),
        "{err}"
    );
    let (code, _, err) = netchaos(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:1",
        "--stop-if",
        "error_rate > 5 over 1s",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("between 0 and 1"), "{err}");
    let (code, _, err) = netchaos(&[
        "records",
        &dir.path().join("missing.jsonl").display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.jsonl"), "{err}");
    // The built-in drill prints as a template, and is listed.
    let (code, out, _) = netchaos(&["drill", "--show", "llm-failover"]);
    assert_eq!(code, 0);
    assert!(out.contains("[[scenario]]") && out.contains("hypothesis"));
    let (code, out, _) = netchaos(&["drill", "--list"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("llm-failover"), "{out}");
}

#[test]
fn a_drill_runs_rootless_with_a_stock_user_path() {
    let Some(nobody) = Nobody::new() else {
        return;
    };
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let dir = nobody.dir.path();
    let logs = dir.join("logs");
    std::fs::create_dir(&logs).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let closed = {
        let l = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    std::fs::write(
        dir.join("resolv.conf"),
        format!("nameserver 127.0.0.1:{closed}\n"),
    )
    .unwrap();
    // curl, no retries: three requests, one after another.
    let client = "id -u > $NETCHAOS_DRILL_SCENARIO.uid; for i in 1 2 3; do curl -sS -o /dev/null -w '%{http_code}\\n' -H 'x-api-key: d' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"q'$i'\"}]}' https://api.anthropic.com/v1/messages; done";
    std::fs::write(
        dir.join("drill.toml"),
        format!(
            r#"
hypothesis = "curl gets its answers"
command = {client:?}
mock = ["anthropic"]
run_args = ["--mock-ttft", "5ms", "--mock-tokens-per-s", "4000", "--resolv-conf", {:?}]
[steady_state]
checks = ["success_rate", "max_attempts=1"]
[[scenario]]
name = "first-two-fail"
fault = "http_status:status=503,first=2"
checks = ["success_rate=0.3"]
[[scenario]]
name = "all-fail"
fault = "http_status:status=503"
checks = ["success_rate"]
stop = "none"
"#,
            dir.join("resolv.conf").display()
        ),
    )
    .unwrap();
    let mut c = nobody.command();
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/")
        .current_dir(&logs)
        .args(["drill", &dir.join("drill.toml").display().to_string()])
        .args(["--keep-logs", &logs.display().to_string()])
        .stdin(Stdio::null());
    let out = c.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert_eq!(
        row(&stdout, "steady-state", "client")[2..],
        [
            "3/3",
            "0",
            row(&stdout, "steady-state", "client")[4],
            "1.00",
            "0",
            "pass"
        ]
    );
    assert_eq!(row(&stdout, "first-two-fail", "client")[2], "1/3");
    assert_eq!(row(&stdout, "first-two-fail", "client")[7], "pass");
    assert_eq!(row(&stdout, "all-fail", "client")[7], "FAIL");
    // The commands ran as nobody.
    let uid = std::fs::read_to_string(logs.join("all-fail.uid")).unwrap();
    assert_eq!(uid.trim(), "65534");
}

/// How each attempt ended, as its record says: a client that gave up
/// while the head was held got no status (`no_response`); a chunked
/// request body still gives its model; over HTTP/2, a stream ended by the
/// provider's error event is `stream_error`, and a request answered in
/// the upstream's place keeps its model.
#[test]
fn records_say_how_each_attempt_ended() {
    if !ready(&["httpx", "h2"]) || !need(&["curl"]) {
        return;
    }
    let client = r#"
import httpx, sys
h = {"x-api-key": "dummy", "anthropic-version": "2023-06-01"}
url = "https://api.anthropic.com/v1/messages"
def body(model, stream=False):
    return {"model": model, "max_tokens": 40, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}]}
# Gives up at 0.5 s on a head held 3 s.
try:
    httpx.post(url, headers=h, json=body("held"), timeout=0.5)
except httpx.TimeoutException:
    print("timed out")
# A chunked body (a generator: no length).
import json
def chunks():
    yield json.dumps(body("claude-haiku-4-5"))[:20].encode()
    yield json.dumps(body("claude-haiku-4-5"))[20:].encode()
print(httpx.post(url, headers=h, content=chunks(), timeout=10).status_code)
with httpx.Client(http2=True, timeout=10) as c:
    # Answered in the upstream's place, over HTTP/2.
    print(c.post(url, headers=h, json=body("answered")).status_code)
    # A stream the provider's error event ends, over HTTP/2.
    with c.stream("POST", url, headers=h, json=body("claude-sonnet-4-5", True)) as r:
        print(r.http_version, sum(1 for _ in r.iter_lines()) > 0)
"#;
    let b = Bench::new(&[("ended.py", client)]);
    let events = b.path("ev.jsonl");
    let (code, out, err) = run(
        &b,
        &[
            "--records",
            "--events",
            &events.display().to_string(),
            "--fault",
            "http_delay:delay=3s,body.model=held",
            "--fault",
            "http_status:status=503,body.model=answered",
            "--fault",
            "sse:error_after_events=2,body.model=claude-sonnet-4-5",
        ],
        &b.cmd("ended.py", ""),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out, "timed out\n200\n503\nHTTP/2 True\n", "{err}");
    let lines = read_events(&events);
    let by_model = |m: &str| {
        lines
            .iter()
            .find(|l| l["event"] == "attempt" && l["http"]["model"] == m)
            .unwrap_or_else(|| panic!("no attempt for {m}: {lines:?}"))
            .clone()
    };
    let held = by_model("held");
    assert_eq!(held["error"], "no_response");
    assert!(held["http"].get("status").is_none(), "{held}");
    assert!(held.get("head_ms").is_none(), "{held}");
    assert_eq!(by_model("claude-haiku-4-5")["http"]["status"], 200);
    let answered = by_model("answered");
    assert_eq!(
        (
            answered["http"]["proto"].as_str(),
            answered["http"]["status"].as_u64()
        ),
        (Some("h2"), Some(503))
    );
    let streamed = by_model("claude-sonnet-4-5");
    assert_eq!(streamed["error"], "stream_error", "{streamed}");
    assert_eq!(streamed["http"]["status"], 200);
}
