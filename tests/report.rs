//! `netchaos report` and `--report`: reports of real runs (proxy and `run`,
//! several fault kinds) opened in headless Chromium over the DevTools
//! protocol (`support/report_check.py`): the page loads with no console
//! error, no exception and no network request; its lanes and fault marks
//! number the connections and faults of the event log; hovering a fault
//! mark shows that fault. A 10,000-connection log renders in a few seconds.
//! Screenshots go to `target/tmp/report-*.png`.
//!
//! What is counted: `#report` carries `data-lanes` (connections),
//! `data-faults` (fault events) and `data-requests` (HTTP requests); up to
//! 1,500 connections every lane is a `.lane` element and every fault a
//! `.fault-mark`, beyond that the lanes are drawn on a canvas and the
//! attributes alone say the counts.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// The page's check, as `report_check.py` prints it.
fn open_in_chromium(page: &Path, shot: &str) -> Value {
    open_in_chromium_with(page, shot, &[])
}

/// The same with `report_check.py`'s options (`--zoom-requests`).
fn open_in_chromium_with(page: &Path, shot: &str, options: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/report_check.py");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shot);
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg("chromium")
        .arg(page)
        .arg(&shot)
        .args(options)
        .output()
        .expect("run report_check.py");
    assert!(
        out.status.success(),
        "report_check.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("screenshot: {}", shot.display());
    serde_json::from_slice(&out.stdout).expect("report_check.py prints JSON")
}

/// What the event log says: connections, fault events, HTTP requests.
fn log_counts(events: &[Value]) -> (usize, usize, usize) {
    let conns: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["event"] == "open" || e["event"] == "close")
        .filter_map(|e| e["conn"].as_u64())
        .collect();
    let faults = events.iter().filter(|e| e["event"] == "fault").count();
    let requests: BTreeSet<(u64, u64)> = events
        .iter()
        .filter(|e| e["http"].is_object())
        .map(|e| {
            (
                e["conn"].as_u64().unwrap(),
                e["http"]["request"].as_u64().unwrap(),
            )
        })
        .collect();
    (conns.len(), faults, requests.len())
}

/// The checks every report passes: nothing fetched, nothing failed,
/// counts as in the log, the hovered fault shown.
fn assert_page(check: &Value, events: &[Value]) {
    assert_eq!(check["console_errors"], serde_json::json!([]), "{check}");
    assert_eq!(check["exceptions"], serde_json::json!([]), "{check}");
    assert_eq!(check["log_errors"], serde_json::json!([]), "{check}");
    assert_eq!(
        check["requests"],
        serde_json::json!([]),
        "no network request: {check}"
    );
    let (conns, faults, requests) = log_counts(events);
    let c = &check["counts"];
    assert!(
        conns > 0 && faults > 0,
        "the run made connections and faults"
    );
    assert_eq!(c["lanes"], conns, "{check}");
    assert_eq!(c["faults"], faults, "{check}");
    assert_eq!(c["requests"], requests, "{check}");
    assert_eq!(c["mode"], "dom", "{check}");
    assert_eq!(c["dom_lanes"], conns, "a lane per connection: {check}");
    assert_eq!(c["dom_faults"], faults, "a mark per fault: {check}");
    assert_eq!(c["dom_requests"], requests, "a mark per request: {check}");
    let kinds: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["event"] == "fault")
        .map(|e| e["fault"].as_str().unwrap())
        .collect();
    let shown: BTreeSet<&str> = c["fault_kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(kinds, shown, "every fault kind has its marks");
    let tip = &check["tip"];
    let hovered = tip["hovered"].as_str().expect("a fault mark was hovered");
    assert_eq!(tip["hidden"], false, "{check}");
    let text = tip["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("fault {hovered} (rule ")),
        "the tooltip names the hovered fault {hovered}: {text}"
    );
    assert!(text.contains("params: "), "and its parameters: {text}");
}

/// The page references nothing outside itself.
fn assert_self_contained(page: &Path) {
    let html = std::fs::read_to_string(page).expect("the report was written");
    for needle in ["<link", "src=", "href=", "@import", "<img", "<iframe"] {
        assert!(!html.contains(needle), "the report contains {needle:?}");
    }
    let urls = html.matches("url(").count();
    assert_eq!(
        urls,
        html.matches("url(#").count(),
        "only url(#local) references"
    );
}

fn get(addr: std::net::SocketAddr) {
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /item HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
}

/// `phase = "response"`: the request reached the upstream, which answered;
/// the page says whose answer the client got instead of it.
#[test]
fn a_replaced_response_is_shown_with_the_upstreams_status() {
    if missing_tool("chromium") || missing_tool("python3") {
        return;
    }
    let upstream = Server::http(b"fine");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let up = upstream.addr.to_string();
    let proxy = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "http_status:status=502,phase=response",
        "--report",
        page.to_str().unwrap(),
    ]);
    get(proxy.addr());
    let (status, err) = proxy.stop();
    assert!(status.success(), "{err}");
    let check = open_in_chromium(&page, "report-replaced.png");
    let tip = check["req_tip"]["text"].as_str().unwrap_or_default();
    assert!(
        tip.contains("status 502 injected by netchaos in place of the upstream's 200"),
        "{check}"
    );
}

#[test]
fn proxy_report_shows_every_connection_fault_and_request() {
    if missing_tool("chromium") || missing_tool("python3") {
        return;
    }
    static BODY: [u8; 8192] = [b'x'; 8192];
    let upstream = Server::http(&BODY);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let page = dir.path().join("report.html");
    let up = upstream.addr.to_string();
    let proxy = Proxy::start(&[
        "--seed",
        "7",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "http_status:status=429,retry_after=1s,first=2",
        "--fault",
        "latency:delay=5ms",
        "--fault",
        "reset:after_bytes=3000,probability=0.5",
        "--events",
        log.to_str().unwrap(),
        "--report",
        page.to_str().unwrap(),
    ]);
    for _ in 0..8 {
        get(proxy.addr());
    }
    let (status, err) = proxy.stop();
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!("report written to {}", page.display())),
        "{err}"
    );
    assert_self_contained(&page);
    let events = read_events(&log);
    let check = open_in_chromium(&page, "report-proxy.png");
    assert_page(&check, &events);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "close" && e["dial_ms"].is_f64()),
        "close lines carry the connect phase"
    );
    // Eight connections one after another from one host: linked where
    // the one before failed (a 429, a reset) — the retries — not all.
    let mut failed = std::collections::BTreeMap::<u64, bool>::new();
    for e in &events {
        let Some(id) = e["conn"].as_u64() else {
            continue;
        };
        let f = failed.entry(id).or_default();
        *f |= e["event"] == "close" && e["outcome"] != "fin";
        *f |= e["http"]["status"]
            .as_u64()
            .is_some_and(|s| s == 429 || s >= 500);
    }
    let retries = (2..=8u64)
        .filter(|id| failed.get(&(id - 1)) == Some(&true))
        .count();
    assert!(
        (2..7).contains(&retries),
        "the 429s are retried: {failed:?}"
    );
    assert_eq!(check["counts"]["retry_links"], retries, "{check}");
    let tip = check["req_tip"]["text"].as_str().unwrap_or_default();
    assert!(
        tip.contains("status 429 injected by netchaos (the upstream never saw it)"),
        "the first request's tooltip: {check}"
    );
    let ends: BTreeSet<&str> = check["counts"]["end_classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(ends.contains("reset"), "resets are drawn as such: {ends:?}");

    // The same log, rendered again by `netchaos report`: the same page.
    let again = dir.path().join("again.html");
    let (code, _, err) = netchaos(&[
        "report",
        log.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("report of 8 connection(s)"), "{err}");
}

#[test]
fn run_report_without_events_file() {
    if missing_tool("chromium") || missing_tool("python3") || missing_tool("curl") {
        return;
    }
    static BODY: [u8; 16384] = [b'y'; 16384];
    let upstream = Server::http(&BODY);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let page = dir.path().join("report.html");
    let url = format!("http://{}/", upstream.addr);
    let script = format!("for i in 1 2 3 4 5; do curl -s -o /dev/null --max-time 10 {url}; done");
    let (code, _, err) = wrapped(
        &[
            "--seed",
            "3",
            "--fault",
            "close:after_bytes=4000,probability=0.5",
            "--fault",
            "connect_delay:delay=30ms",
            "--fault",
            "slicer:size=4096,delay=1ms",
            "--events",
            log.to_str().unwrap(),
            "--report",
            page.to_str().unwrap(),
        ],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    assert_self_contained(&page);
    let events = read_events(&log);
    let check = open_in_chromium(&page, "report-run.png");
    assert_page(&check, &events);

    // --report alone: the log lives in a temporary file, removed after.
    let alone = dir.path().join("alone.html");
    let (code, _, err) = wrapped(
        &[
            "--fault",
            "latency:delay=5ms",
            "--report",
            alone.to_str().unwrap(),
        ],
        &["curl", "-s", "-o", "/dev/null", "--max-time", "10", &url],
    );
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&alone).expect("--report alone writes the report");
    assert!(html.contains("data-lanes=\"1\""), "one connection");
    assert!(html.contains("data-faults=\"1\""), "one fault");
}

#[test]
fn report_is_written_on_sigint() {
    let upstream = Server::echo("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let up = upstream.addr.to_string();
    let mut child = std::process::Command::new(BIN)
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream", &up])
        .args(["--fault", "latency:delay=1ms", "--report"])
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !text.contains("netchaos: ready") && Instant::now() < deadline {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0) == 0 {
            break;
        }
        text.push_str(&line);
    }
    signal(child.id(), libc::SIGINT);
    let _ = err.read_to_string(&mut text);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("netchaos ignored SIGINT:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(text.contains("report written to"), "{text}");
    assert!(
        std::fs::read_to_string(&page)
            .unwrap()
            .contains("data-lanes=\"0\"")
    );
}

/// A synthetic 10,000-connection log in the event log's own format: a
/// hundred clients retrying against five destinations, a fault on every
/// third connection, HTTP requests on some.
fn big_log(path: &Path) -> (usize, usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut line = |v: Value| writeln!(f, "{v}").unwrap();
    line(
        serde_json::json!({"time": "2026-12-01T10:00:00.000Z", "t": 0.0, "event": "start", "seed": 1, "version": "0.1.0", "mode": "proxy"}),
    );
    line(
        serde_json::json!({"time": "2026-12-01T10:00:00.000Z", "t": 0.0, "event": "plan", "argv": ["netchaos", "proxy"], "profiles": [],
        "rules": [{"name": "cli", "faults": [{"fault": "reset", "params": {"after_bytes": "4096", "active": "10s..40s"}, "active_from_ms": 10000, "active_until_ms": 40000}]}]}),
    );
    let mut faults = 0;
    for i in 0..10_000u64 {
        let t = i as f64 * 0.006;
        let client = format!("10.0.{}.{}:{}", i % 100 / 50, i % 50, 30000 + i % 20000);
        let dst = format!("10.1.0.{}:443", i % 5);
        let base = serde_json::json!({"conn": i, "client": client, "dst": dst, "proxy": "api"});
        let with = |extra: Value, ev: &str, t: f64| {
            let mut v = base.clone();
            v["time"] = "2026-12-01T10:00:00.000Z".into();
            v["t"] = t.into();
            v["event"] = ev.into();
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        line(with(serde_json::json!({}), "open", t));
        if i % 3 == 0 {
            faults += 1;
            line(with(
                serde_json::json!({"rule": "cli", "fault": "reset", "direction": "downstream", "params": {"after_bytes": "4096"}}),
                "fault",
                t + 0.02,
            ));
        }
        if i % 7 == 0 {
            line(with(
                serde_json::json!({"http": {"request": 0, "method": "GET", "path": "/v1/items", "status": 200}}),
                "response",
                t + 0.01,
            ));
        }
        let outcome = if i % 3 == 0 { "reset" } else { "fin" };
        line(with(
            serde_json::json!({"outcome": outcome, "bytes_upstream": 300, "bytes_downstream": 4096, "duration_ms": 40,
                "dial_ms": 1.2, "first_byte_downstream_ms": 8.5, "path": "pipeline"}),
            "close",
            t + 0.04,
        ));
    }
    (10_000, faults)
}

#[test]
fn ten_thousand_connections_render_in_a_few_seconds() {
    if missing_tool("chromium") || missing_tool("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.jsonl");
    let page: PathBuf = dir.path().join("big.html");
    let (conns, faults) = big_log(&log);
    let started = Instant::now();
    let (code, _, err) = netchaos(&[
        "report",
        log.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    let built = started.elapsed();
    assert_eq!(code, 0, "{err}");
    assert_self_contained(&page);
    let check = open_in_chromium(&page, "report-10k.png");
    eprintln!(
        "10,000 connections: `netchaos report` {:.2} s, page drawn {} ms after navigation, {} KiB",
        built.as_secs_f64(),
        check["counts"]["rendered_ms"],
        std::fs::metadata(&page).unwrap().len() / 1024
    );
    assert_eq!(check["console_errors"], serde_json::json!([]), "{check}");
    assert_eq!(check["exceptions"], serde_json::json!([]), "{check}");
    assert_eq!(check["requests"], serde_json::json!([]), "{check}");
    let c = &check["counts"];
    assert_eq!(c["mode"], "canvas", "{check}");
    assert_eq!(c["lanes"], conns, "{check}");
    assert_eq!(c["faults"], faults, "{check}");
    assert!(
        c["rendered_ms"].as_u64().unwrap() < 5000,
        "drawn within 5 s: {check}"
    );
    assert!(
        built < Duration::from_secs(10),
        "built within 10 s: {built:?}"
    );
    let tip = check["tip"]["text"].as_str().unwrap_or("");
    assert!(
        tip.contains("connection #"),
        "hovering the canvas names a connection: {check}"
    );
}

/// A 100 MB log (160,000 connections, a fault and a request on each)
/// makes a report in bounded memory: the log is read a line at a time,
/// the timeline draws the first 25,000 connections and counts the rest,
/// and the page is written as it is made. (Before: ~13 bytes of memory
/// per byte of log, 1.3 GB for this one.)
#[test]
fn a_hundred_megabyte_log_is_reported_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.jsonl");
    let page = dir.path().join("big.html");
    let conns = 160_000u64;
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
        writeln!(f, r#"{{"time":"2026-12-01T10:00:00.000Z","t":0.0,"event":"start","seed":1,"version":"0.1.0","mode":"run"}}"#).unwrap();
        for i in 0..conns {
            let t = i as f64 * 0.001;
            let base = format!(
                r#""conn":{i},"client":"10.0.{}.{}:{}","dst":"10.1.0.{}:443","proxy":"api""#,
                i % 100 / 50,
                i % 50,
                30000 + i % 20000,
                i % 5
            );
            writeln!(
                f,
                r#"{{"time":"2026-12-01T10:00:00.000Z","t":{t},"event":"open",{base}}}"#
            )
            .unwrap();
            writeln!(f, r#"{{"time":"2026-12-01T10:00:00.000Z","t":{t},"event":"fault",{base},"rule":"cli","fault":"http_status","http":{{"request":0,"method":"POST","path":"/v1/messages","status":529}},"params":{{"status":"529"}}}}"#).unwrap();
            writeln!(f, r#"{{"time":"2026-12-01T10:00:00.000Z","t":{t},"event":"close",{base},"outcome":"fin","bytes_upstream":300,"bytes_downstream":4096,"duration_ms":40,"dial_ms":1.2,"first_byte_downstream_ms":8.5,"path":"http","activity":{{"start_ms":8.5,"bucket_ms":10,"upstream":[300],"downstream":[4096]}}}}"#).unwrap();
        }
    }
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size > 100_000_000, "{size} bytes");
    let started = Instant::now();
    // Reaped by wait4 below, which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = std::process::Command::new(BIN)
        .args([
            "report",
            log.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // wait4 for the child's own peak RSS (ru_maxrss, KiB).
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let took = started.elapsed();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    let html = std::fs::read_to_string(&page).unwrap();
    eprintln!(
        "{} MB log: report in {:.1} s, peak RSS {peak_mib:.0} MiB, page {} KiB",
        size / 1_000_000,
        took.as_secs_f64(),
        html.len() / 1024
    );
    assert!(peak_mib < 200.0, "peak RSS {peak_mib:.0} MiB");
    assert!(
        html.contains("data-lanes=\"25000\""),
        "the first 25,000 drawn"
    );
    assert!(html.contains(&format!("The timeline draws 25000 of {conns} connections")));
    assert!(html.contains(&format!("<td class=\"n\">{conns}</td><td>fin {conns}</td>")));
}

/// Requests 1 ms apart on a 10 s run stay apart at the whole run's zoom
/// (side by side, each hoverable) and, zoomed in with Ctrl+wheel where they
/// are, stand at their own times, 1 ms apart: checked on the marks'
/// boxes in headless Chromium at both zoom levels, with a screenshot of
/// each (`target/tmp/report-1ms*.png`). They used to be drawn on top of
/// each other until zoomed.
#[test]
fn requests_a_millisecond_apart_stay_apart_at_two_zoom_levels() {
    if missing_tool("chromium") || missing_tool("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let base = r#""conn":1,"client":"127.0.0.1:5000","dst":"127.0.0.1:80","proxy":"p""#;
    let mut text = format!("{{\"t\":0.0,\"event\":\"open\",{base}}}\n");
    for n in 0..8 {
        let t = 5.0 + n as f64 * 0.001;
        text += &format!(
            "{{\"t\":{t},\"event\":\"response\",{base},\"http\":{{\"request\":{n},\"method\":\"GET\",\"path\":\"/r{n}\",\"status\":200}}}}\n"
        );
    }
    text += &format!(
        "{{\"t\":10.0,\"event\":\"close\",{base},\"path\":\"http\",\"outcome\":\"fin\",\"bytes_upstream\":1,\"bytes_downstream\":1,\"duration_ms\":10000.0}}\n"
    );
    // And a burst of 100 requests in 10 ms on a second connection: side by
    // side they would run 500 px from their time; cut short with "+N".
    let burst = r#""conn":2,"client":"127.0.0.1:5001","dst":"127.0.0.1:80","proxy":"p""#;
    text += &format!("{{\"t\":0.0,\"event\":\"open\",{burst}}}\n");
    for n in 0..100 {
        let t = 2.0 + n as f64 * 0.0001;
        text += &format!(
            "{{\"t\":{t},\"event\":\"response\",{burst},\"http\":{{\"request\":{n},\"method\":\"GET\",\"path\":\"/b\",\"status\":200}}}}\n"
        );
    }
    text += &format!(
        "{{\"t\":10.0,\"event\":\"close\",{burst},\"path\":\"http\",\"outcome\":\"fin\",\"bytes_upstream\":1,\"bytes_downstream\":1,\"duration_ms\":10000.0}}\n"
    );
    std::fs::write(&log, text).unwrap();
    let page = dir.path().join("report.html");
    let (code, _, err) = netchaos(&[
        "report",
        log.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let check = open_in_chromium_with(&page, "report-1ms.png", &["--zoom-requests"]);
    assert_eq!(check["exceptions"], serde_json::json!([]), "{check}");
    let boxes = &check["req_boxes"];
    // The marks of one lane (by their height on the page): the first
    // lane's are the 8 requests 1 ms apart, the second's the burst.
    let lanes = |level: &str| -> Vec<Vec<(f64, f64)>> {
        let mut by: std::collections::BTreeMap<i64, Vec<(f64, f64)>> = Default::default();
        for b in boxes[level].as_array().unwrap() {
            by.entry(b[2].as_f64().unwrap().round() as i64)
                .or_default()
                .push((b[0].as_f64().unwrap(), b[1].as_f64().unwrap()));
        }
        by.into_values().collect()
    };
    let xs = |level: &str| lanes(level)[0].clone();
    assert!(boxes["zoomed_span"].as_f64().unwrap() <= 0.02, "{boxes}");
    for level in ["whole", "zoomed"] {
        let b = xs(level);
        assert_eq!(b.len(), 8, "{level}: {boxes}");
        for w in b.windows(2) {
            assert!(
                w[1].0 >= w[0].0 + w[0].1,
                "{level}: marks overlap: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
    }
    // The burst at the whole run: as many marks as fit within 40 px of
    // their time, and "+N" for the rest.
    let burst = &lanes("whole")[1];
    let more: Vec<&str> = boxes["whole_more"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(burst.len() < 15, "{} marks drawn side by side", burst.len());
    assert_eq!(
        more,
        [format!("+{}", 100 - burst.len()).as_str()],
        "{boxes}"
    );
    // Zoomed in, at their own times: evenly spaced, wider apart than side
    // by side.
    let z = xs("zoomed");
    let gaps: Vec<f64> = z.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let (lo, hi) = gaps
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), g| (lo.min(*g), hi.max(*g)));
    assert!(lo > 5.0 && hi - lo < 1.5, "zoomed gaps {gaps:?}");
}
