//! The README's commands, run. Every line of a ```sh block in README.md
//! that starts with `netchaos ` (after an optional `sudo `, with `\`
//! continuations joined) must have an entry in [`TABLE`], and the entry
//! runs it: for real, with loopback stand-ins for what the README leaves
//! to the reader (the command after `--` becomes a small python3 client of
//! a test server on 127.0.0.1, well-known ports become free ones, a
//! container is a `sleep` in a network namespace and a cgroup the test
//! made, `eth0` a veth device in the test's namespace), and asserts the
//! exit code and that the fault was felt (a 429 seen, latency measured, a
//! stream stalled). Where the kernel lacks what a command needs (netem),
//! the same flags are checked with `--dry-run` instead, with the reason
//! printed.
//!
//! A `netchaos` line in the README that is not in the table fails
//! `every_readme_command_is_in_the_table`, naming it, and so does a table
//! entry the README no longer has: the guide and this test cannot drift.
//!
//! Hygiene: traffic goes only to loopback and to namespaces the test
//! made; every `run` gets `--resolv-conf` naming the test's own resolver
//! (`support/dnsd.py`, which knows no names); mocked hosts are answered
//! by netchaos itself; every wait is bounded; servers, namespaces,
//! cgroups and files are removed by `Drop` even when an assertion fails.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

// --- the README's lines ----------------------------------------------

/// The README's `netchaos` command lines, in order: from its ```sh
/// blocks, continuations joined, a trailing `# comment` removed.
fn readme_commands() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut lines = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for raw in text.lines() {
        if raw.trim_start().starts_with("```") {
            in_sh = !in_sh && raw.trim() == "```sh";
            pending.clear();
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = raw.trim();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        let whole = format!("{pending}{line}");
        pending.clear();
        let whole = strip_comment(&whole);
        let cmd = whole.strip_prefix("sudo ").unwrap_or(&whole);
        if cmd.starts_with("netchaos ") {
            lines.push(whole.clone());
        }
    }
    lines
}

/// `line` without a trailing shell comment (a `#` that starts a word
/// outside quotes).
fn strip_comment(line: &str) -> String {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => {
                return line[..i].trim_end().to_string();
            }
            _ => {}
        }
        prev = c;
    }
    line.trim_end().to_string()
}

/// Shell words of `line`: quotes removed ('…' and "…"), no expansion (the
/// handlers substitute `$(…)` before).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut have = false;
    let (mut single, mut double) = (false, false);
    for c in line.chars() {
        match c {
            '\'' if !double => {
                single = !single;
                have = true;
            }
            '"' if !single => {
                double = !double;
                have = true;
            }
            c if c.is_whitespace() && !single && !double => {
                if have {
                    out.push(std::mem::take(&mut cur));
                    have = false;
                }
            }
            c => {
                cur.push(c);
                have = true;
            }
        }
    }
    assert!(!single && !double, "unbalanced quotes in {line:?}");
    if have {
        out.push(cur);
    }
    out
}

/// The netchaos arguments of a README line (without `sudo netchaos`),
/// after `subs` (pairs of text and its stand-in), up to and without `--`;
/// and the README's command after `--`, which the caller replaces.
fn args_of(line: &str, subs: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
    let mut text = line.strip_prefix("sudo ").unwrap_or(line).to_string();
    for (from, to) in subs {
        assert!(text.contains(from), "{from:?} is not in {line:?}");
        text = text.replace(from, to);
    }
    let w = words(&text);
    assert_eq!(w[0], "netchaos", "{line}");
    match w.iter().position(|a| a == "--") {
        Some(at) => (w[1..at].to_vec(), w[at + 1..].to_vec()),
        None => (w[1..].to_vec(), Vec::new()),
    }
}

// --- running netchaos ------------------------------------------------

/// What a finished command gave.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Out {
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to completion within `limit` (killed, and the test failed,
/// past it).
fn finish(cmd: Command, limit: Duration) -> Out {
    let started = Instant::now();
    let out = output_within(cmd, limit);
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// `netchaos ARGS`, in `cwd`, within `limit`.
fn nc(args: &[String], cwd: &std::path::Path, env: &[(&str, &str)], limit: Duration) -> Out {
    let mut c = Command::new(BIN);
    c.args(args).current_dir(cwd).envs(env.iter().copied());
    finish(c, limit)
}

/// The same inside the test's network namespace `ns`.
fn nc_in(ns: &TestNetns, args: &[String], cwd: &std::path::Path, limit: Duration) -> Out {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &ns.name, BIN])
        .args(args)
        .current_dir(cwd);
    finish(c, limit)
}

/// `args` with `--resolv-conf FILE` after `run`: the run's DNS goes to
/// the test's resolver only.
fn with_resolver(mut args: Vec<String>, resolv: &str) -> Vec<String> {
    assert_eq!(args[0], "run");
    args.insert(1, "--resolv-conf".into());
    args.insert(2, resolv.into());
    args
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

// --- stand-ins -------------------------------------------------------

/// An LLM client with no SDK: python3's urllib against the providers'
/// real base URLs (answered by `--mock`), or against URL.
///   many N            N requests, one attempt each; and one to OpenAI
///   retry N A         N requests, up to A attempts, honouring retry-after
///   stream            one streamed answer, read with a 2 s read timeout
///   plain URL N       N requests to URL, one attempt each
const LLM_CLIENT: &str = r#"
import http.client, json, socket, ssl, sys, time, urllib.request, urllib.error
A = "https://api.anthropic.com/v1/messages"
H = {"x-api-key": "dummy", "anthropic-version": "2023-06-01", "content-type": "application/json"}
def body(i, stream=False):
    b = {"model": "claude-sonnet-4-5", "max_tokens": 8,
         "messages": [{"role": "user", "content": "question %d" % i}]}
    if stream:
        b["stream"] = True
    return json.dumps(b).encode()
def once(url, data, headers, timeout=10):
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, None
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, e.headers.get("retry-after")
mode = sys.argv[1]
if mode == "many":
    for i in range(int(sys.argv[2])):
        print("status", once(A, body(i), H)[0])
    o = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode()
    print("openai", once("https://api.openai.com/v1/chat/completions", o,
                         {"authorization": "Bearer dummy", "content-type": "application/json"})[0])
elif mode == "retry":
    answered = 0
    for i in range(int(sys.argv[2])):
        for n in range(int(sys.argv[3])):
            status, ra = once(A, body(i), H)
            print("status", status, "retry-after", ra)
            if status == 200:
                answered += 1
                break
            if n + 1 < int(sys.argv[3]):
                time.sleep(float(ra) if ra else 0.2)
    print("answered", answered)
elif mode == "stream":
    # http.client keeps the connection alive, as the SDKs do (urllib
    # asks for Connection: close).
    c = http.client.HTTPSConnection("api.anthropic.com", timeout=2,
                                    context=ssl.create_default_context())
    c.request("POST", "/v1/messages", body=body(0, True), headers=H)
    r = c.getresponse()
    events = 0
    try:
        while True:
            line = r.readline()
            if not line:
                print("events", events, "end")
                break
            if line.startswith(b"event:"):
                events += 1
    except (socket.timeout, TimeoutError):
        print("events", events, "timeout")
elif mode == "plain":
    for i in range(int(sys.argv[3])):
        print("status", once(sys.argv[2], body(i), {"content-type": "application/json"})[0])
"#;

/// A TCP client: python3's sockets.
///   rtt HOST PORT        connect, send "ping", read the echo: "ok CONNECT TOTAL"
///   fetch HOST PORT      read to the end: "bytes N"
///   blackout HOST PORT   an echo at once, another after 2.5 s (2 s timeout)
///   connect HOST PORT    connect with a 1 s timeout: "connected" or the error
///   api                  GET $TOXIPROXY_URL/proxies: "api STATUS"
const TCP_CLIENT: &str = r#"
import os, socket, sys, time, urllib.request
mode = sys.argv[1]
if mode == "api":
    with urllib.request.urlopen(os.environ["TOXIPROXY_URL"] + "/proxies", timeout=5) as r:
        print("api", r.status)
    sys.exit(0)
host, port = sys.argv[2], int(sys.argv[3])
t = time.monotonic()
if mode == "connect":
    try:
        socket.create_connection((host, port), timeout=1)
        print("connected")
    except OSError as e:
        print("connect-error", type(e).__name__, round(time.monotonic() - t, 3))
    sys.exit(0)
s = socket.create_connection((host, port), timeout=8)
c = time.monotonic() - t
if mode == "rtt":
    s.sendall(b"ping")
    d = s.recv(100)
    print("ok", round(c, 3), round(time.monotonic() - t, 3), d.decode())
elif mode == "fetch":
    n = 0
    while True:
        b = s.recv(65536)
        if not b:
            break
        n += len(b)
    print("bytes", n)
elif mode == "blackout":
    s.sendall(b"a")
    print("first", s.recv(10).decode())
    time.sleep(2.5)
    s.settimeout(2)
    try:
        s.sendall(b"b")
        print("then", s.recv(10).decode())
    except (socket.timeout, TimeoutError):
        print("then timeout")
"#;

fn llm(args: &[&str]) -> Vec<String> {
    let mut v = strings(&["python3", "-c", LLM_CLIENT]);
    v.extend(strings(args));
    v
}

fn tcp(args: &[&str]) -> Vec<String> {
    let mut v = strings(&["python3", "-c", TCP_CLIENT]);
    v.extend(strings(args));
    v
}

// --- the per-tour state ----------------------------------------------

/// What one tour's lines share: a working directory (the README's
/// relative files land there), the test's resolver, and what earlier
/// lines started. Everything goes with it.
struct Ctx {
    dir: tempfile::TempDir,
    dns: Dnsd,
    server: Option<Proxy>,
    echo: Option<Server>,
    ns: Option<TestNetns>,
    cg: Option<RuntimeCgroups>,
    pods: Option<tempfile::TempDir>,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            dir: tempfile::tempdir().unwrap(),
            dns: Dnsd::start(&[]),
            server: None,
            echo: None,
            ns: None,
            cg: None,
            pods: None,
        }
    }

    fn cwd(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// `netchaos run …` of `line`, its command replaced by `cmd`, with
    /// the test's resolver; `subs` as for [`args_of`].
    fn run(&self, line: &str, subs: &[(&str, &str)], cmd: Vec<String>, limit: Duration) -> Out {
        let (args, _readme_cmd) = args_of(line, subs);
        let mut args = with_resolver(args, &self.dns.resolv);
        args.push("--".into());
        args.extend(cmd);
        nc(&args, self.cwd(), &[], limit)
    }

    /// An echo server on loopback, shared by the tour's lines.
    fn echo(&mut self) -> SocketAddr {
        self.echo
            .get_or_insert_with(|| Server::echo("127.0.0.1:0"))
            .addr
    }

    /// `netchaos server` on a free port, shared by the `ctl` lines.
    fn api(&mut self) -> String {
        self.server
            .get_or_insert_with(|| Proxy::start_cmd("server", &["--api", "127.0.0.1:0"]))
            .url()
    }

    /// The tour's network namespace (a veth to the host), `None` where
    /// namespaces cannot be made (printed; a failure in CI).
    fn netns(&mut self) -> Option<&TestNetns> {
        if self.ns.is_none() {
            self.ns = TestNetns::new();
        }
        self.ns.as_ref()
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Requires `tools` and root for a line that needs them: false (skipped,
/// with the reason printed) without, which CI does not allow.
fn can(line: &str, tools: &[&str], root: bool) -> bool {
    if root && !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: {line}: needs root");
        return false;
    }
    need(tools)
}

fn field(line: &str, n: usize) -> f64 {
    line.split_whitespace().nth(n).unwrap().parse().unwrap()
}

fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.starts_with(needle)).count()
}

// --- the table -------------------------------------------------------

type Handler = fn(&mut Ctx, &str);

/// Each README line and how it is exercised, by tour.
const TABLE: &[(&str, &str, Handler)] = &[
    // A first look.
    ("look", "netchaos demo", demo),
    ("look", "netchaos profiles", profiles),
    ("look", "netchaos faults", faults),
    ("look", "netchaos check -p flaky", check_flaky),
    // Testing an LLM or HTTP client.
    (
        "llm",
        "netchaos run --mock anthropic,openai -p llm-overloaded -- pytest tests/",
        llm_overloaded,
    ),
    (
        "llm",
        "netchaos run --mock anthropic --fault 'http_status:status=429,envelope=anthropic,retry_after=2s,first=2' -- python my_agent.py",
        llm_429_first_two,
    ),
    (
        "llm",
        "netchaos run --mock anthropic --fault 'http_status:status=529,envelope=anthropic' -- python my_agent.py",
        llm_529_always,
    ),
    (
        "llm",
        "netchaos run --mock anthropic -p sse-stall -- python my_agent.py",
        llm_sse_stall,
    ),
    (
        "llm",
        "netchaos run --tls -p llm-rate-limited -- python my_agent.py",
        llm_tls_rate_limited,
    ),
    (
        "llm",
        "netchaos run --mock anthropic -p llm-rate-limited --expect retry_after_honoured --expect max_attempts=3 -- pytest",
        llm_expect,
    ),
    (
        "llm",
        "netchaos drill --builtin llm-failover -- python my_agent.py",
        llm_drill,
    ),
    (
        "llm",
        "netchaos run --records --events ev.jsonl --mock anthropic -- python my_agent.py",
        llm_records_run,
    ),
    ("llm", "netchaos records ev.jsonl", llm_records),
    ("llm", "netchaos report ev.jsonl -o report.html", llm_report),
    // Coming from Toxiproxy.
    ("toxiproxy", "netchaos server", tox_server),
    (
        "toxiproxy",
        "netchaos ctl create redis --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379",
        tox_ctl_create,
    ),
    (
        "toxiproxy",
        "netchaos ctl add redis latency:delay=100ms,jitter=20ms --name slow",
        tox_ctl_add,
    ),
    ("toxiproxy", "netchaos ctl list", tox_ctl_list),
    ("toxiproxy", "netchaos ctl reset", tox_ctl_reset),
    (
        "toxiproxy",
        "netchaos proxy --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379 --fault latency:delay=100ms",
        tox_proxy_latency,
    ),
    (
        "toxiproxy",
        "netchaos proxy --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379 --fault stall:after_bytes=512,duration=5s",
        tox_proxy_stall,
    ),
    (
        "toxiproxy",
        "netchaos proxy -p http-503 --listen 8080 --upstream 127.0.0.1:80",
        tox_proxy_503,
    ),
    (
        "toxiproxy",
        "netchaos run --api 127.0.0.1:8474 --api-for-command -- pytest",
        tox_run_api,
    ),
    // Coming from tc-netem or Chaos Mesh.
    (
        "netem",
        "netchaos run --fault loss:percent=5 -- ./load-test.sh",
        netem_loss,
    ),
    (
        "netem",
        "netchaos run -p slow-path -- ./integration-tests.sh",
        netem_slow_path,
    ),
    (
        "netem",
        "netchaos run --fault blackout:after=2s,duration=10s -- ./client",
        netem_blackout,
    ),
    (
        "netem",
        "netchaos run -p connect-timeout -- ./client",
        netem_connect_timeout,
    ),
    (
        "netem",
        "sudo netchaos netem apply --dev eth0 --delay 100ms --jitter 20ms --loss 1",
        netem_apply,
    ),
    (
        "netem",
        "sudo netchaos netem apply --dev eth0 --dst 10.0.0.0/8 --dport 5432 --delay 50ms",
        netem_apply,
    ),
    (
        "netem",
        "netchaos netem apply --dev eth0 --loss 2 --loss-burst 5 --dry-run",
        netem_dry_run,
    ),
    (
        "netem",
        "sudo netchaos netem show --dev eth0",
        netem_show_clear,
    ),
    (
        "netem",
        "sudo netchaos netem clear --dev eth0",
        netem_show_clear,
    ),
    // Staging containers and pods.
    (
        "containers",
        "sudo netchaos attach --container 4f1c3a0d9b2e -p slow-network --duration 10m",
        attach_container,
    ),
    (
        "containers",
        "sudo netchaos attach --pid \"$(docker inspect -f '{{.State.Pid}}' web)\" -p flaky --duration 10m",
        attach_pid,
    ),
    (
        "containers",
        "sudo netchaos attach --pid \"$(docker inspect -f '{{.State.Pid}}' web)\" --inbound 8080 -p http-503 --duration 10m",
        attach_inbound,
    ),
    (
        "containers",
        "sudo netchaos attach --pod shop/checkout -p flaky --duration 10m",
        attach_pod,
    ),
    (
        "containers",
        "netchaos run --in-place -p slow-network -- ./my-service",
        in_place,
    ),
    (
        "containers",
        "sudo netchaos clean --container 4f1c3a0d9b2e",
        clean_container,
    ),
    (
        "containers",
        "sudo netchaos clean --netns /run/netns/blue",
        clean_netns,
    ),
];

#[test]
fn every_readme_command_is_in_the_table() {
    let readme = readme_commands();
    assert!(
        readme.len() >= 20,
        "the README's commands were found: {readme:#?}"
    );
    let missing: Vec<&String> = readme
        .iter()
        .filter(|l| !TABLE.iter().any(|(_, t, _)| t == l))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md has netchaos command lines that tests/readme.rs does not exercise \
         (add each to TABLE):\n{}",
        missing
            .iter()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let stale: Vec<&str> = TABLE
        .iter()
        .map(|(_, t, _)| *t)
        .filter(|t| !readme.iter().any(|l| l == t))
        .collect();
    assert!(
        stale.is_empty(),
        "tests/readme.rs exercises lines README.md no longer has:\n{}",
        stale.join("\n")
    );
}

/// Runs the tour's lines in the README's order.
fn tour(name: &str) {
    let readme = readme_commands();
    let mut ctx = Ctx::new();
    let mut ran = 0;
    for line in &readme {
        for (t, l, handler) in TABLE {
            if *t == name && l == line {
                eprintln!("README: {line}");
                handler(&mut ctx, line);
                ran += 1;
            }
        }
    }
    assert!(ran > 0, "no README line of the tour {name}");
}

#[test]
fn a_first_look() {
    tour("look");
}

#[test]
fn testing_an_llm_or_http_client() {
    if !can("the LLM tour", &["python3", "ip", "nft"], false) {
        return;
    }
    tour("llm");
}

#[test]
fn coming_from_toxiproxy() {
    if !can("the Toxiproxy tour", &["python3", "ip", "nft"], false) {
        return;
    }
    tour("toxiproxy");
}

#[test]
fn coming_from_tc_netem_or_chaos_mesh() {
    if !can("the netem tour", &["python3", "ip", "nft", "tc"], false) {
        return;
    }
    tour("netem");
}

#[test]
fn staging_containers_and_pods() {
    if !can(
        "the containers tour",
        &["python3", "ip", "nft", "iptables"],
        true,
    ) {
        return;
    }
    tour("containers");
}

// --- a first look ----------------------------------------------------

fn demo(ctx: &mut Ctx, line: &str) {
    let (args, _) = args_of(line, &[]);
    // The demo's report goes to $TMPDIR: the tour's own directory.
    let tmp = ctx.cwd().display().to_string();
    let out = nc(&args, ctx.cwd(), &[("TMPDIR", &tmp)], secs(120));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.all().contains("The report of this run"),
        "{}",
        out.all()
    );
    assert!(out.all().contains("connect"), "{}", out.all());
}

fn profiles(ctx: &mut Ctx, line: &str) {
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &[], secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    for name in [
        "flaky",
        "llm-overloaded",
        "sse-stall",
        "slow-path",
        "slow-network",
    ] {
        assert!(out.stdout.contains(name), "{name}: {}", out.stdout);
    }
}

fn faults(ctx: &mut Ctx, line: &str) {
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &[], secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    for name in ["latency", "http_status", "loss", "blackout", "dns_error"] {
        assert!(out.stdout.contains(name), "{name}: {}", out.stdout);
    }
}

fn check_flaky(ctx: &mut Ctx, line: &str) {
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &[], secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("latency"), "{}", out.stdout);
}

// --- testing an LLM or HTTP client -----------------------------------

fn llm_overloaded(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["many", "30"]), secs(120));
    assert_eq!(out.code, 0, "{}", out.all());
    let (overloaded, ok) = (
        count(&out.stdout, "status 529"),
        count(&out.stdout, "status 200"),
    );
    assert_eq!(overloaded + ok, 30, "{}", out.all());
    assert!(overloaded >= 1 && ok >= 1, "some 529s: {}", out.all());
    assert!(out.stdout.contains("openai "), "{}", out.all());
    assert!(
        out.stderr.contains("answered by the mock"),
        "{}",
        out.stderr
    );
}

fn llm_429_first_two(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["retry", "1", "3"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert_eq!(
        count(&out.stdout, "status 429 retry-after 2"),
        2,
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("answered 1"), "{}", out.all());
    assert!(out.took >= secs(4), "two waits of 2 s: {:?}", out.took);
}

fn llm_529_always(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["retry", "1", "3"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert_eq!(count(&out.stdout, "status 529"), 3, "{}", out.all());
    assert!(out.stdout.contains("answered 0"), "{}", out.all());
}

fn llm_sse_stall(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["stream"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("events 4 timeout"),
        "four events, then the read timeout: {}",
        out.all()
    );
}

/// The real API stands in as a plaintext server on loopback: the
/// profile's 429s reach it all the same (`--tls` only matters for HTTPS).
fn llm_tls_rate_limited(ctx: &mut Ctx, line: &str) {
    static BODY: &[u8] = br#"{"type":"message","content":[]}"#;
    let api = Server::http(BODY);
    let url = format!("http://{}/v1/messages", api.addr);
    let out = ctx.run(line, &[], llm(&["plain", &url, "40"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    let (limited, ok) = (
        count(&out.stdout, "status 429"),
        count(&out.stdout, "status 200"),
    );
    assert_eq!(limited + ok, 40, "{}", out.all());
    assert!(limited >= 1 && ok >= 1, "some 429s: {}", out.all());
}

fn llm_expect(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["retry", "3", "3"]), secs(90));
    assert_eq!(
        out.code,
        0,
        "a client that honours retry-after keeps the contract: {}",
        out.all()
    );
    assert!(out.stdout.contains("answered"), "{}", out.all());
}

fn llm_drill(ctx: &mut Ctx, line: &str) {
    let (args, _) = args_of(line, &[]);
    let mut args = args;
    args.push("--".into());
    args.extend(llm(&["retry", "3", "3"]));
    let out = nc(&args, ctx.cwd(), &[], secs(300));
    assert!(
        out.code == 0 || out.code == 3,
        "a verdict (0: held, 3: did not): {}",
        out.all()
    );
    let steady = out
        .stdout
        .lines()
        .find(|l| l.starts_with("steady-state"))
        .unwrap_or_else(|| panic!("no steady state: {}", out.all()));
    assert!(steady.ends_with("pass"), "{steady}");
    for scenario in ["overloaded-529", "rate-limited-429", "all-down"] {
        assert!(out.stdout.contains(scenario), "{scenario}: {}", out.all());
    }
}

/// `run --records --events ev.jsonl`: the log, with its request records.
fn llm_records_run(ctx: &mut Ctx, line: &str) {
    let out = ctx.run(line, &[], llm(&["retry", "2", "1"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    let log = read_events(&ctx.cwd().join("ev.jsonl"));
    let attempts = log.iter().filter(|e| e["event"] == "attempt").count();
    assert_eq!(attempts, 2, "one record per attempt: {log:?}");
}

fn events_written(ctx: &mut Ctx) {
    if !ctx.cwd().join("ev.jsonl").exists() {
        llm_records_run(
            ctx,
            "netchaos run --records --events ev.jsonl --mock anthropic -- python my_agent.py",
        );
    }
}

fn llm_records(ctx: &mut Ctx, line: &str) {
    events_written(ctx);
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &[], secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("/v1/messages"), "{}", out.all());
}

fn llm_report(ctx: &mut Ctx, line: &str) {
    events_written(ctx);
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &[], secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    let page = std::fs::read_to_string(ctx.cwd().join("report.html")).unwrap();
    assert!(page.contains("<html"), "an HTML page");
}

// --- coming from Toxiproxy -------------------------------------------

/// `netchaos server` on a free port (the README's 8474 may be taken on a
/// developer's machine): Toxiproxy's API answers.
fn tox_server(ctx: &mut Ctx, line: &str) {
    let (args, _) = args_of(line, &[]);
    assert_eq!(args, ["server"]);
    let url = ctx.api();
    let (status, version) = http("GET", &format!("{url}/version"), None, &[]);
    assert_eq!(status, 200);
    assert!(version.to_string().contains("2.12"), "{version}");
}

/// A `ctl` line against the tour's server (NETCHAOS_URL), its addresses
/// replaced by a free port and the tour's echo server.
fn ctl(ctx: &mut Ctx, line: &str, listen: Option<u16>) -> Out {
    let url = ctx.api();
    let echo = ctx.echo().to_string();
    let listen = format!("127.0.0.1:{}", listen.unwrap_or_else(unused_port));
    let mut subs = Vec::new();
    if line.contains("127.0.0.1:26379") {
        subs.push(("127.0.0.1:26379", listen.as_str()));
    }
    if line.contains("127.0.0.1:6379") {
        subs.push(("127.0.0.1:6379", echo.as_str()));
    }
    let (args, _) = args_of(line, &subs);
    nc(&args, ctx.cwd(), &[("NETCHAOS_URL", &url)], secs(30))
}

/// The proxy `redis` exists (as the create line makes it).
fn redis(ctx: &mut Ctx) -> SocketAddr {
    let url = ctx.api();
    let (status, v) = http("GET", &format!("{url}/proxies/redis"), None, &[]);
    if status != 200 {
        let out = ctl(
            ctx,
            "netchaos ctl create redis --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379",
            None,
        );
        assert_eq!(out.code, 0, "{}", out.all());
        return redis(ctx);
    }
    v["listen"].as_str().unwrap().parse().unwrap()
}

/// One byte's round trip through `addr` to an echo server.
fn rtt(addr: SocketAddr) -> Duration {
    let mut c = TcpStream::connect_timeout(&addr, secs(5)).unwrap();
    c.set_read_timeout(Some(secs(10))).unwrap();
    let t = Instant::now();
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    t.elapsed()
}

fn tox_ctl_create(ctx: &mut Ctx, line: &str) {
    let out = ctl(ctx, line, None);
    assert_eq!(out.code, 0, "{}", out.all());
    let addr = redis(ctx);
    assert!(rtt(addr) < Duration::from_millis(80), "no fault yet");
}

fn tox_ctl_add(ctx: &mut Ctx, line: &str) {
    let addr = redis(ctx);
    let out = ctl(ctx, line, None);
    assert_eq!(out.code, 0, "{}", out.all());
    let t = rtt(addr);
    assert!(t >= Duration::from_millis(75), "100 ms ± 20 ms: {t:?}");
}

fn tox_ctl_list(ctx: &mut Ctx, line: &str) {
    redis(ctx);
    let out = ctl(ctx, line, None);
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("redis"), "{}", out.all());
}

fn tox_ctl_reset(ctx: &mut Ctx, line: &str) {
    let addr = redis(ctx);
    let out = ctl(ctx, line, None);
    assert_eq!(out.code, 0, "{}", out.all());
    let (_, v) = http("GET", &format!("{}/proxies/redis", ctx.api()), None, &[]);
    assert_eq!(v["toxics"], serde_json::json!([]), "{v}");
    assert!(rtt(addr) < Duration::from_millis(80), "no fault left");
}

/// A `proxy` line, its listener on a free port, its upstream `upstream`.
fn proxy(line: &str, upstream: &str) -> Proxy {
    let listen = format!("127.0.0.1:{}", unused_port());
    let mut subs = vec![];
    if line.contains("127.0.0.1:26379") {
        subs.push(("127.0.0.1:26379", listen.as_str()));
    } else {
        subs.push(("--listen 8080", "--listen PORT"));
    }
    let from = if line.contains("127.0.0.1:6379") {
        "127.0.0.1:6379"
    } else {
        "127.0.0.1:80"
    };
    subs.push((from, upstream));
    let (mut args, _) = args_of(line, &subs);
    for a in &mut args {
        if a == "PORT" {
            *a = listen.clone();
        }
    }
    assert_eq!(args[0], "proxy");
    let strs: Vec<&str> = args[1..].iter().map(|s| s.as_str()).collect();
    Proxy::start(&strs)
}

fn tox_proxy_latency(ctx: &mut Ctx, line: &str) {
    let echo = ctx.echo().to_string();
    let p = proxy(line, &echo);
    let t = rtt(p.addr());
    assert!(t >= Duration::from_millis(95), "100 ms: {t:?}");
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
}

fn tox_proxy_stall(ctx: &mut Ctx, line: &str) {
    let echo = ctx.echo().to_string();
    let p = proxy(line, &echo);
    let mut c = TcpStream::connect_timeout(&p.addr(), secs(5)).unwrap();
    c.write_all(&[b'x'; 1024]).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    let until = Instant::now() + secs(3);
    while Instant::now() < until {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    assert_eq!(got.len(), 512, "512 bytes, then the stall");
}

fn tox_proxy_503(_ctx: &mut Ctx, line: &str) {
    static BODY: &[u8] = b"the upstream";
    let api = Server::http(BODY);
    let p = proxy(line, &api.addr.to_string());
    let mut c = TcpStream::connect_timeout(&p.addr(), secs(5)).unwrap();
    c.set_read_timeout(Some(secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: api\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert_eq!(
        api.accepted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the upstream never sees it"
    );
}

fn tox_run_api(ctx: &mut Ctx, line: &str) {
    let port = format!("127.0.0.1:{}", unused_port());
    let out = ctx.run(line, &[("127.0.0.1:8474", &port)], tcp(&["api"]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("api 200"), "{}", out.all());
}

// --- coming from tc-netem or Chaos Mesh ------------------------------

fn netem_loss(ctx: &mut Ctx, line: &str) {
    let src = Server::source(1 << 20);
    let port = src.addr.port().to_string();
    let out = ctx.run(line, &[], tcp(&["fetch", "127.0.0.1", &port]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("bytes 1048576"),
        "every byte, retransmitted: {}",
        out.all()
    );
}

fn netem_slow_path(ctx: &mut Ctx, line: &str) {
    let port = ctx.echo().port().to_string();
    let out = ctx.run(line, &[], tcp(&["rtt", "127.0.0.1", &port]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    let l = out.stdout.lines().find(|l| l.starts_with("ok")).unwrap();
    assert!(field(l, 1) >= 0.09, "connect() takes the round trip: {l}");
}

fn netem_blackout(ctx: &mut Ctx, line: &str) {
    let port = ctx.echo().port().to_string();
    let out = ctx.run(line, &[], tcp(&["blackout", "127.0.0.1", &port]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("first a"), "{}", out.all());
    assert!(
        out.stdout.contains("then timeout"),
        "cut off after 2 s: {}",
        out.all()
    );
}

fn netem_connect_timeout(ctx: &mut Ctx, line: &str) {
    let port = ctx.echo().port().to_string();
    let out = ctx.run(line, &[], tcp(&["connect", "127.0.0.1", &port]), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("connect-error TimeoutError"),
        "{}",
        out.all()
    );
}

/// The tour's namespace with an `eth0` (one end of a veth pair in it),
/// the README's device.
fn eth0(ctx: &mut Ctx) -> Option<&TestNetns> {
    let ns = ctx.netns()?;
    let out = ns.sh("ip link show eth0 >/dev/null 2>&1 || { ip link add eth0 type veth peer name eth0p && ip link set eth0 up && ip link set eth0p up; }");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(ns)
}

/// `netem apply` on the namespace's `eth0`: for real, then shown and
/// cleared; where the kernel has no netem (or prio) qdisc, the same
/// flags with `--dry-run` (the reason printed).
fn netem_apply(ctx: &mut Ctx, line: &str) {
    if !can(line, &[], true) {
        return;
    }
    let cwd = ctx.cwd().to_path_buf();
    let Some(ns) = eth0(ctx) else { return };
    let (args, _) = args_of(line, &[]);
    let out = nc_in(ns, &args, &cwd, secs(30));
    if out.code == 0 {
        let shown = nc_in(
            ns,
            &strings(&["netem", "show", "--dev", "eth0"]),
            &cwd,
            secs(30),
        );
        assert!(shown.all().contains("netem"), "{}", shown.all());
        let clear = nc_in(
            ns,
            &strings(&["netem", "clear", "--dev", "eth0"]),
            &cwd,
            secs(30),
        );
        assert_eq!(clear.code, 0, "{}", clear.all());
        return;
    }
    assert!(
        out.stderr.contains("the kernel has no") && out.stderr.contains("(module sch_"),
        "only a missing qdisc module may stop it: {}",
        out.all()
    );
    eprintln!(
        "NOTE: {line}: the kernel lacks a qdisc module (sch_netem or sch_prio); checked with --dry-run"
    );
    let mut dry = args.clone();
    dry.push("--dry-run".into());
    let out = nc_in(ns, &dry, &cwd, secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("tc qdisc add dev eth0"),
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("netem delay"), "{}", out.all());
}

fn netem_dry_run(ctx: &mut Ctx, line: &str) {
    let (args, _) = args_of(line, &[]);
    let out = nc(&args, ctx.cwd(), &[], secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(out.stdout.contains("loss gemodel"), "{}", out.all());
}

fn netem_show_clear(ctx: &mut Ctx, line: &str) {
    if !can(line, &[], true) {
        return;
    }
    let cwd = ctx.cwd().to_path_buf();
    let Some(ns) = eth0(ctx) else { return };
    let out = nc_in(ns, &args_of(line, &[]).0, &cwd, secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
}

// --- staging containers and pods -------------------------------------

/// The README's container: a full ID starting 4f1c3a0d9b2e.
fn container_id() -> String {
    format!("4f1c3a0d9b2e{}", "0".repeat(52))
}

/// A client inside the namespace against an echo server on the host end
/// of its veth: "ok CONNECT TOTAL REPLY".
fn client_in(ctx: &mut Ctx) -> String {
    let ns = ctx.ns.as_ref().unwrap();
    let echo = ctx
        .echo
        .get_or_insert_with(|| Server::echo(&format!("{}:0", ns.host_ip)));
    let script = ctx.dir.path().join("client.py");
    std::fs::write(&script, TCP_CLIENT).unwrap();
    let out = ns.sh(&format!(
        "timeout 20 python3 {} rtt {} {}",
        script.display(),
        ns.host_ip,
        echo.addr.port()
    ));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        text.starts_with("ok"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The tour's namespace and, in cgroups laid out as the runtimes lay
/// them, a `sleep` in it for the README's container and for the pod
/// shop/checkout (found through `NETCHAOS_POD_LOG_DIR`).
fn containers(ctx: &mut Ctx) -> Option<Vec<(&'static str, String)>> {
    let ns = ctx.netns()?.name.clone();
    if ctx.cg.is_none() {
        let mut cg = RuntimeCgroups::new("readme")?;
        cg.process_in(
            &format!("machine.slice/libpod-{}.scope", container_id()),
            Some(&ns),
        );
        let uid = format!("0a1b2c3d-0000-4000-8000-{:012x}", std::process::id());
        cg.process_in(
            &format!(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{}.scope",
                uid.replace('-', "_"),
                "ab".repeat(32)
            ),
            Some(&ns),
        );
        let pods = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(pods.path().join(format!("shop_checkout_{uid}"))).unwrap();
        ctx.cg = Some(cg);
        ctx.pods = Some(pods);
    }
    let pods = ctx.pods.as_ref().unwrap().path().display().to_string();
    Some(vec![("NETCHAOS_POD_LOG_DIR", pods)])
}

/// An `attach` line, started (and stopped by the caller or on drop).
fn attach(args: &[String], env: &[(&str, String)]) -> Proxy {
    assert_eq!(args[0], "attach");
    let strs: Vec<&str> = args[1..].iter().map(|s| s.as_str()).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = Proxy::start_env("attach", &strs, &env);
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    p
}

fn attach_container(ctx: &mut Ctx, line: &str) {
    let Some(env) = containers(ctx) else { return };
    let p = attach(&args_of(line, &[]).0, &env);
    let l = client_in(ctx);
    assert!(field(&l, 2) >= 0.2, "150 ms ± 30 ms each way: {l}");
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
}

/// The README's `$(docker inspect …)`: a process in the namespace.
const DOCKER_PID: &str = "$(docker inspect -f '{{.State.Pid}}' web)";

fn sleeper(ctx: &mut Ctx) -> Option<Sleeper> {
    let ns = ctx.netns()?;
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.name, "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    Some(Sleeper(child))
}

/// A `sleep` in the namespace, killed on drop.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attach_pid(ctx: &mut Ctx, line: &str) {
    let Some(s) = sleeper(ctx) else { return };
    let pid = s.0.id().to_string();
    let p = attach(&args_of(line, &[(DOCKER_PID, &pid)]).0, &[]);
    client_in(ctx);
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    assert!(err.contains("connections"), "a summary: {err}");
}

const HTTPD_8080: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
s = http.server.HTTPServer(("0.0.0.0", 8080), H)
print("ready", flush=True)
s.serve_forever()
"#;

fn attach_inbound(ctx: &mut Ctx, line: &str) {
    let Some(s) = sleeper(ctx) else { return };
    let ns = ctx.ns.as_ref().unwrap();
    let mut server = PythonBg::in_netns(&ns.name, HTTPD_8080, &[]);
    assert_eq!(server.line(), "ready");
    let pid = s.0.id().to_string();
    let p = attach(&args_of(line, &[(DOCKER_PID, &pid)]).0, &[]);
    let to = SocketAddr::from((ns.ns_ip, 8080));
    let mut c = TcpStream::connect_timeout(&to, secs(5)).unwrap();
    c.set_read_timeout(Some(secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: web\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
}

fn attach_pod(ctx: &mut Ctx, line: &str) {
    let Some(env) = containers(ctx) else { return };
    let p = attach(&args_of(line, &[]).0, &env);
    client_in(ctx);
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
}

/// `run --in-place` as a sidecar would: inside the namespace.
fn in_place(ctx: &mut Ctx, line: &str) {
    if ctx.netns().is_none() {
        return;
    }
    let ns = ctx.ns.as_ref().unwrap();
    let echo = ctx
        .echo
        .get_or_insert_with(|| Server::echo(&format!("{}:0", ns.host_ip)));
    let (host, port) = (ns.host_ip.to_string(), echo.addr.port().to_string());
    let (mut args, _) = args_of(line, &[]);
    args.push("--".into());
    args.extend(tcp(&["rtt", &host, &port]));
    let out = nc_in(ns, &args, ctx.dir.path(), secs(60));
    assert_eq!(out.code, 0, "{}", out.all());
    let l = out.stdout.lines().find(|l| l.starts_with("ok")).unwrap();
    assert!(field(l, 2) >= 0.2, "150 ms ± 30 ms each way: {l}");
    let tables = ns.sh("nft list tables");
    assert!(
        !String::from_utf8_lossy(&tables.stdout).contains("netchaos"),
        "the table goes with the command"
    );
}

fn clean_container(ctx: &mut Ctx, line: &str) {
    let Some(env) = containers(ctx) else { return };
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = nc(&args_of(line, &[]).0, ctx.cwd(), &env, secs(30));
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("nothing of netchaos's"),
        "{}",
        out.all()
    );
}

fn clean_netns(ctx: &mut Ctx, line: &str) {
    let Some(ns) = ctx.netns() else { return };
    let path = format!("/run/netns/{}", ns.name);
    let out = nc(
        &args_of(line, &[("/run/netns/blue", &path)]).0,
        ctx.cwd(),
        &[],
        secs(30),
    );
    assert_eq!(out.code, 0, "{}", out.all());
    assert!(
        out.stdout.contains("nothing of netchaos's"),
        "{}",
        out.all()
    );
}

// --- containers, laid out as the runtimes lay them out ----------------
