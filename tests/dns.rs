//! The DNS layer under `netchaos run`: real clients (curl, Python's
//! resolver, `requests`, a raw UDP client) resolving through the run's
//! forwarder against a responder the test starts on loopback
//! (`--resolv-conf`), with `dns_error`, `dns_timeout`, `dns_delay`,
//! `dns_answer` and `dns_truncate` — each seen by the client as the
//! resolution failure (or answer) it is, in the resolve phase.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::*;

/// The loopback DNS responder (tests/support/dnsd.py), UDP and TCP.
struct Dnsd {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Dnsd {
    fn start(records: &[&str]) -> Dnsd {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("queries.log");
        let mut child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/dnsd.py"
            ))
            .arg("--log")
            .arg(&log)
            .args(records)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("dnsd's port");
        Dnsd {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// The queries the responder saw: "TRANSPORT NAME QTYPE" lines.
    fn queries(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Dnsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A profile file and a resolv.conf naming the responder, in `dir`.
fn setup(dir: &Path, dnsd: &Dnsd, profile: &str) -> (String, String) {
    let resolv = dir.join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver 127.0.0.1:{}\n", dnsd.port)).unwrap();
    let p = dir.join("p.toml");
    std::fs::write(&p, profile).unwrap();
    (
        resolv.to_str().unwrap().to_string(),
        p.to_str().unwrap().to_string(),
    )
}

/// `netchaos run` with the responder and profile, glibc's resolver told
/// to wait `timeout` seconds per try and try `attempts` times.
fn run_dns(
    resolv: &str,
    profile: &str,
    events: Option<&Path>,
    res_options: &str,
    cmd: &[&str],
) -> (i32, String, String) {
    let mut c = Command::new(BIN);
    c.env("RES_OPTIONS", res_options);
    let mut args = vec!["--resolv-conf", resolv, "-p", profile];
    if let Some(e) = events {
        args.extend(["--events", e.to_str().unwrap()]);
    }
    wrapped_with(c, &args, cmd)
}

fn ok_server(bind: &str, body: &'static str) -> Server {
    Server::start(bind, move |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    })
}

const GAI: &str = r#"
import socket, sys
for name in sys.argv[1:]:
    try:
        socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)
        print(name, "ok")
    except socket.gaierror as e:
        print(name, e.errno)
"#;

#[test]
fn nxdomain_and_servfail_are_the_clients_own_resolution_errors() {
    if !need(&["python3", "curl", "ip", "nft"]) {
        return;
    }
    let web = ok_server("127.0.0.2:0", "ok");
    let port = web.addr.port();
    let dnsd = Dnsd::start(&[
        "nx.test=127.0.0.2",
        "sf.test=127.0.0.2",
        "fine.test=127.0.0.2",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        r#"
[[rules]]
name = "dns"
  [[rules.faults]]
  type = "dns_error"
  rcode = "NXDOMAIN"
  name = "nx.test"
  [[rules.faults]]
  type = "dns_error"
  rcode = "SERVFAIL"
  name = "sf.test"
"#,
    );
    let events = dir.path().join("events.jsonl");
    let script = format!(
        "curl -sS http://nx.test:{port}/; echo \" curl-nx=$?\"; \
         curl -sS http://sf.test:{port}/; echo \" curl-sf=$?\"; \
         curl -sS http://fine.test:{port}/; echo \" curl-fine=$?\"; \
         python3 -c '{GAI}' nx.test sf.test fine.test"
    );
    let (code, out, err) = run_dns(
        &resolv,
        &profile,
        Some(&events),
        "timeout:2 attempts:1",
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    // curl: exit 6, "Could not resolve host", for both; the healthy name
    // still resolves and connects.
    assert!(out.contains("curl-nx=6"), "{out}\n{err}");
    assert!(out.contains("curl-sf=6"), "{out}\n{err}");
    assert!(out.contains("ok curl-fine=0"), "{out}\n{err}");
    assert!(err.contains("Could not resolve host: nx.test"), "{err}");
    // glibc: NXDOMAIN is EAI_NONAME (-2), "Name or service not known";
    // SERVFAIL is EAI_AGAIN (-3), "Temporary failure in name resolution".
    assert!(out.contains("nx.test -2"), "{out}");
    assert!(out.contains("sf.test -3"), "{out}");
    assert!(out.contains("fine.test ok"), "{out}");
    // Answered in the resolver's place: it never saw the faulted names.
    let seen = dnsd.queries();
    assert!(!seen.iter().any(|q| q.contains(" nx.test ")), "{seen:?}");
    assert!(seen.iter().any(|q| q.contains(" fine.test ")), "{seen:?}");
    let ev = read_events(&events);
    let faults: Vec<_> = ev.iter().filter(|e| e["event"] == "fault").collect();
    assert!(
        faults
            .iter()
            .all(|f| f["fault"] == "dns_error" && f["dns"]["name"].is_string())
    );
    assert!(
        faults
            .iter()
            .any(|f| f["dns"]["name"] == "nx.test" && f["params"]["rcode"] == "NXDOMAIN")
    );
    assert!(err.contains("DNS queries:"), "summary: {err}");
    // The report's resolve section lists every DNS fault of the log.
    let html = dir.path().join("report.html");
    let (code, _, rerr) = netchaos(&[
        "report",
        events.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{rerr}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(&format!("data-dns-faults=\"{}\"", faults.len())),
        "{} DNS faults in the log",
        faults.len()
    );
    assert_eq!(page.matches("class=\"dns-fault\"").count(), faults.len());
    assert!(
        page.contains("<td>nx.test</td><td>A</td><td>dns_error</td>"),
        "{page}"
    );
}

#[test]
fn a_dns_timeout_fails_in_the_resolve_phase_and_outlasts_a_connect_timeout() {
    if !need(&["python3", "curl", "ip", "nft"]) {
        return;
    }
    let web = ok_server("127.0.0.2:0", "ok");
    let port = web.addr.port();
    let dnsd = Dnsd::start(&["api.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        "[[rules]]\nname = \"dns\"\n  [[rules.faults]]\n  type = \"dns_timeout\"\n  name = \"api.test\"\n",
    );
    let requests = format!(
        r#"
import time, requests
t = time.monotonic()
try:
    requests.get("http://api.test:{port}/", timeout=(1, 2))
    print("requests: no error")
except Exception as e:
    print("requests:", type(e).__name__)
print("requests-hung %.2f" % (time.monotonic() - t))
"#
    );
    let script = format!(
        "curl -sS --connect-timeout 1 -o /dev/null http://api.test:{port}/; echo \"curl=$?\"; \
         python3 -c '{requests}'"
    );
    let (code, out, err) = run_dns(
        &resolv,
        &profile,
        None,
        "timeout:3 attempts:1",
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    // curl's --connect-timeout bounds resolution: exit 28 in the resolve phase.
    assert!(out.contains("curl=28"), "{out}\n{err}");
    assert!(err.contains("Resolving timed out"), "{err}");
    // requests' connect timeout (1 s) does not: it waits out the resolver.
    let hung: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("requests-hung "))
        .expect("requests' time")
        .parse()
        .unwrap();
    assert!(out.contains("requests: ConnectionError"), "{out}");
    assert!(
        hung >= 2.5,
        "requests gave up after {hung:.2}s, within its connect timeout"
    );
    println!("requests with timeout=(1, 2) hung {hung:.2}s on an unanswered name");
    assert!(
        dnsd.queries().iter().all(|q| !q.contains("api.test")),
        "the resolver saw a timed-out query: {:?}",
        dnsd.queries()
    );
}

#[test]
fn dns_delay_is_time_in_resolution_not_in_connect() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let web = ok_server("127.0.0.2:0", "ok");
    let port = web.addr.port();
    let dnsd = Dnsd::start(&["slow.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        "[[rules]]\nname = \"dns\"\n  [[rules.faults]]\n  type = \"dns_delay\"\n  delay = \"300ms\"\n",
    );
    let url = format!("http://slow.test:{port}/");
    let events = dir.path().join("events.jsonl");
    let (code, out, err) = run_dns(
        &resolv,
        &profile,
        Some(&events),
        "timeout:3 attempts:1",
        &[
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-4",
            "-w",
            "%{time_namelookup} %{time_connect}",
            &url,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let t: Vec<f64> = out.split(' ').map(|x| x.trim().parse().unwrap()).collect();
    assert!(t[0] >= 0.29, "name lookup {:.3}s", t[0]);
    // The connect itself stays fast: the delay is all in resolution. The
    // bound is loose for a busy machine; the lookup's is what it asserts.
    assert!(
        t[1] - t[0] < t[0],
        "connect took {:.3}s after the lookup",
        t[1] - t[0]
    );
}

#[test]
fn dns_answer_sends_a_name_elsewhere_and_truncation_retries_over_tcp() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let real = ok_server("127.0.0.2:0", "real");
    let port = real.addr.port();
    let _moved = ok_server(&format!("127.0.0.3:{port}"), "moved");
    let dnsd = Dnsd::start(&["moved.test=127.0.0.2", "tc.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    // tc.test: truncated over UDP, so glibc asks again over TCP, where the
    // answer is learned too — the latency rule matches it by name.
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        r#"
[[rules]]
name = "dns"
  [[rules.faults]]
  type = "dns_answer"
  name = "moved.test"
  addresses = ["127.0.0.3"]
  ttl = 5
  [[rules.faults]]
  type = "dns_truncate"
  name = "tc.test"

[[rules]]
name = "slow-by-name"
match = { dst = ["tc.test"] }
  [[rules.faults]]
  type = "latency"
  delay = "400ms"
"#,
    );
    let script = format!(
        "curl -sS -4 http://moved.test:{port}/; echo; \
         curl -sS -4 -o /dev/null -w '%{{time_total}}' http://tc.test:{port}/"
    );
    let (code, out, err) = run_dns(
        &resolv,
        &profile,
        None,
        "timeout:3 attempts:1",
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("moved"), "{out}");
    let t: f64 = lines.next().unwrap().trim().parse().unwrap();
    assert!(
        t >= 0.38,
        "tc.test was not matched by the name learned over TCP: {t}"
    );
    let seen = dnsd.queries();
    assert!(
        seen.iter().any(|q| q == "tcp tc.test 1"),
        "no TCP retry: {seen:?}"
    );
    assert!(!seen.iter().any(|q| q.contains("moved.test")), "{seen:?}");
}

/// Resolves each name (`getaddrinfo`, one family) `n` times; prints
/// "name family address" per answer.
const RESOLVE: &str = r#"
import socket, sys
n = int(sys.argv[1])
for name in sys.argv[2:]:
    for fam, tag in ((socket.AF_INET, "4"), (socket.AF_INET6, "6")):
        for _ in range(n):
            for a in {i[4][0] for i in socket.getaddrinfo(name, 80, fam, socket.SOCK_STREAM)}:
                print(name, tag, a)
"#;

#[test]
fn dns_answer_draws_from_prefixes_and_random_from_the_documentation_ranges() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let dnsd = Dnsd::start(&["rnd.test=127.0.0.2", "pfx.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        r#"
[[rules]]
name = "dns"
  [[rules.faults]]
  type = "dns_answer"
  name = "rnd.test"
  random = true
  [[rules.faults]]
  type = "dns_answer"
  name = "pfx.test"
  addresses = ["10.77.0.0/16", "fd00:77::/64"]
"#,
    );
    let (code, out, err) = run_dns(
        &resolv,
        &profile,
        None,
        "timeout:2 attempts:1",
        &["python3", "-c", RESOLVE, "6", "rnd.test", "pfx.test"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let nets =
        |list: &[&str]| -> Vec<ipnet::IpNet> { list.iter().map(|n| n.parse().unwrap()).collect() };
    let doc = nets(&[
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "2001:db8::/32",
    ]);
    let pfx = nets(&["10.77.0.0/16", "fd00:77::/64"]);
    let mut seen: std::collections::HashMap<(String, String), std::collections::HashSet<String>> =
        Default::default();
    for line in out.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let ip: std::net::IpAddr = f[2].parse().unwrap();
        let within = if f[0] == "rnd.test" { &doc } else { &pfx };
        assert!(
            within.iter().any(|n| n.contains(&ip)),
            "{line}: outside {within:?}"
        );
        assert_eq!(ip.is_ipv6(), f[1] == "6", "{line}: the query's family");
        seen.entry((f[0].into(), f[1].into()))
            .or_default()
            .insert(f[2].into());
    }
    assert_eq!(seen.len(), 4, "both names, both families: {out}");
    for (k, v) in &seen {
        assert!(
            v.len() >= 2,
            "{k:?}: every query the same address {v:?}; draws are per query"
        );
    }
    let asked = dnsd.queries();
    assert!(
        !asked
            .iter()
            .any(|q| q.contains("rnd.test") || q.contains("pfx.test")),
        "{asked:?}"
    );
}

/// Sends each query (name `q{i}.test`, id `i`) twice, the second a
/// retransmission; prints per query "i rcode rcode" ("-" for no answer).
const RAW: &str = r#"
import socket, struct, sys
n = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.4)
s.connect(("127.0.0.53", 53))
def q(i):
    name = b"".join(bytes([len(l)]) + l for l in (b"q%d" % i, b"test")) + b"\0"
    return struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0) + name + struct.pack("!HH", 1, 1)
for i in range(n):
    codes = []
    for attempt in range(2):
        s.send(q(i))
        try:
            while True:
                r = s.recv(512)
                if struct.unpack("!H", r[:2])[0] == i:
                    codes.append(str(r[3] & 15))
                    break
        except socket.timeout:
            codes.append("-")
    print(i, *codes)
"#;

#[test]
fn probability_draws_per_query_replay_with_the_seed_and_retries_keep_their_fate() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let records: Vec<String> = (0..20).map(|i| format!("q{i}.test=127.0.0.2")).collect();
    let records: Vec<&str> = records.iter().map(String::as_str).collect();
    let dnsd = Dnsd::start(&records);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(
        dir.path(),
        &dnsd,
        r#"seed = 7
[[rules]]
name = "flaky-dns"
  [[rules.faults]]
  type = "dns_error"
  rcode = "SERVFAIL"
  probability = 0.5
  name = "*.test"
  [[rules.faults]]
  type = "dns_timeout"
  name = "q19.test"
"#,
    );
    let once = || {
        let (code, out, err) = run_dns(
            &resolv,
            &profile,
            None,
            "timeout:1 attempts:1",
            &["python3", "-c", RAW, "20"],
        );
        assert_eq!(code, 0, "{err}");
        out
    };
    let first = once();
    let second = once();
    assert_eq!(first, second, "the same seed faults the same queries");
    let rows: Vec<Vec<&str>> = first.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.len(), 20, "{first}");
    for r in &rows {
        // A retransmission gets its query's fate: the same code, or silence.
        assert_eq!(
            r[1], r[2],
            "query {} changed its fate on retry: {first}",
            r[0]
        );
    }
    let servfail = rows[..19].iter().filter(|r| r[1] == "2").count();
    let ok = rows[..19].iter().filter(|r| r[1] == "0").count();
    assert!(
        (3..=16).contains(&servfail),
        "{servfail} of 19 SERVFAIL: {first}"
    );
    assert_eq!(
        servfail + ok,
        19,
        "only SERVFAIL or the real answer: {first}"
    );
    // q19: the first ending fault in rule order wins — SERVFAIL when its
    // draw says so, else never answered; never the real answer.
    assert_ne!(rows[19][1], "0", "{first}");
    assert!(
        !dnsd.queries().iter().any(|q| q.contains("q19.test")),
        "the resolver saw q19: {:?}",
        dnsd.queries()
    );
}

#[test]
fn dns_faults_are_extension_toxics_of_the_api_counted_in_metrics() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let dnsd = Dnsd::start(&["api.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let (resolv, profile) = setup(dir.path(), &dnsd, "[[rules]]\nname = \"dns\"\n");
    let (ready, go, end) = (
        dir.path().join("ready"),
        dir.path().join("go"),
        dir.path().join("end"),
    );
    // Resolves, waits for the test to add a toxic through the API,
    // resolves again, then waits for the test to read the metrics.
    let script = format!(
        r#"
import os, socket, time
def attempt():
    try:
        socket.getaddrinfo("api.test", 80, socket.AF_INET); return "ok"
    except socket.gaierror as e:
        return str(e.errno)
def wait(path):
    for _ in range(400):
        if os.path.exists(path): return
        time.sleep(0.05)
print(attempt(), flush=True)
open("{ready}", "w").close()
wait("{go}")
print(attempt(), flush=True)
wait("{end}")
"#,
        ready = ready.display(),
        go = go.display(),
        end = end.display()
    );
    let mut child = Command::new(BIN)
        .env("RES_OPTIONS", "timeout:2 attempts:1")
        .args([
            "run",
            "--api",
            "127.0.0.1:0",
            "--resolv-conf",
            &resolv,
            "-p",
            &profile,
        ])
        .args(["--", "python3", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut api = None;
    for _ in 0..50 {
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        if let Some(rest) = line.split("control API on http://").nth(1) {
            api = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
    }
    let u = format!("http://{}", api.expect("the API address"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready.exists() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the wrapped command did not get ready");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies/dns/toxics"),
        Some(
            r#"{"name": "nx", "type": "dns_error", "attributes": {"rcode": "NXDOMAIN", "name": "api.test"}}"#,
        ),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["type"], "dns_error");
    std::fs::write(&go, "").unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = String::new();
    for _ in 0..2 {
        out.read_line(&mut lines).unwrap();
    }
    let (st, metrics) = http("GET", &format!("{u}/metrics"), None, &[]);
    std::fs::write(&end, "").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(
        lines, "ok\n-2\n",
        "the toxic added through the API answered NXDOMAIN"
    );
    assert_eq!(st, 200);
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metrics.contains("netchaos_dns_faults_total{fault=\"dns_error\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("netchaos_dns_queries_total "), "{metrics}");
}

/// A lookup whose resolver refuses or cannot be reached: a connected UDP
/// query's error, `getaddrinfo`'s, and their time (after 0.1 s of
/// start-up under `run`, so that the start is not counted).
const FAILED_LOOKUP: &str = r#"
import socket, sys, time
time.sleep(float(sys.argv[2]))
t = time.monotonic()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
try:
    u.connect((sys.argv[1], 53))
    u.send(bytes.fromhex("123401000001000000000000076578616d706c6507696e76616c69640000010001"))
    u.recv(512)
    udp = "answered"
except OSError as e:
    udp = e.errno
try:
    socket.getaddrinfo("example.invalid", 80, socket.AF_INET, socket.SOCK_STREAM)
    gai = "resolved"
except socket.gaierror as e:
    gai = e.errno
print(udp, gai, round(time.monotonic() - t, 3))
"#;

/// [`FAILED_LOOKUP`] and curl in `ns` with `resolver` as its only
/// nameserver (a resolv.conf bound in a mount namespace of its own),
/// directly or under `netchaos run`: the Python line, and curl's exit
/// code and time.
fn failed_lookup(ns: &TestNetns, resolver: &str, run: bool) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(&conf, format!("nameserver {resolver}\n")).unwrap();
    let script = dir.path().join("lookup.py");
    std::fs::write(&script, FAILED_LOOKUP).unwrap();
    let wrap = if run {
        format!("{BIN} run --")
    } else {
        String::new()
    };
    // Bounded by glibc's own: 2 s per try, one try.
    let cmd = format!(
        "export RES_OPTIONS='timeout:2 attempts:1'; \
         unshare -m sh -c 'mount --bind {conf} /etc/resolv.conf && \
         {wrap} python3 {script} {resolver} 0.1 && \
         {wrap} sh -c \"curl -sS -o /dev/null -w %{{time_total}} http://example.invalid/ 2>/dev/null; echo \\\" \\$?\\\"\"'",
        conf = conf.display(),
        script = script.display(),
    );
    let out = ns.sh(&cmd);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let py = lines.next().unwrap_or_default().to_string();
    let curl = lines.next().unwrap_or_default().trim().to_string();
    (py, curl)
}

/// The seconds at the end of a line.
fn secs(line: &str) -> f64 {
    let last = line.split_whitespace().last().unwrap_or_default();
    last.parse()
        .unwrap_or_else(|_| panic!("no time in {line:?}"))
}

#[test]
fn a_refusing_or_unreachable_resolver_fails_a_lookup_as_fast_as_directly() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "curl", "nft", "unshare"]) {
        return;
    }
    // Nothing listens on port 53 in the namespace: refused (ICMP port
    // unreachable). It has no route to 192.0.2.53: unreachable at once.
    for (resolver, udp) in [("127.0.0.1", "111"), ("192.0.2.53", "101")] {
        let (direct, direct_curl) = failed_lookup(&ns, resolver, false);
        let (run, run_curl) = failed_lookup(&ns, resolver, true);
        eprintln!(
            "{resolver}: directly {direct} / curl {direct_curl}; run {run} / curl {run_curl}"
        );
        let what = |l: &str| l.rsplit_once(' ').map(|(w, _)| w.to_string());
        // ECONNREFUSED / ENETUNREACH on the query's own socket, and
        // getaddrinfo's EAI_AGAIN (-3), at once.
        assert_eq!(
            what(&direct),
            Some(format!("{udp} -3")),
            "directly: {direct}"
        );
        assert_eq!(
            what(&run),
            what(&direct),
            "{resolver}: run {run}, directly {direct}"
        );
        assert!(
            secs(&run) <= secs(&direct) + 0.5,
            "{resolver}: run {run}, directly {direct}"
        );
        // curl: "Could not resolve host" (6), as fast.
        assert!(direct_curl.ends_with(" 6"), "directly: {direct_curl}");
        assert!(run_curl.ends_with(" 6"), "{resolver}: run {run_curl}");
        let curl_secs = |l: &str| secs(l.trim_end_matches(" 6"));
        assert!(
            curl_secs(&run_curl) <= curl_secs(&direct_curl) + 0.5,
            "{resolver}: curl under run {run_curl}, directly {direct_curl}"
        );
    }
}
