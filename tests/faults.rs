//! Each stream fault's observable effect on real clients (Python's socket
//! module, curl, and plain Rust sockets), with generous tolerances, plus
//! seeded probability and activity windows.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use support::*;

fn proxy_to(up: &Server, faults: &[&str]) -> Proxy {
    let up = up.addr.to_string();
    let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
    for f in faults {
        args.extend(["--fault", f]);
    }
    Proxy::start(&args)
}

/// Median round trip of a 64-byte ping, measured by a Python client.
fn python_rtt_ms(addr: std::net::SocketAddr) -> f64 {
    let code = r#"
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(7):
    t = time.monotonic()
    s.sendall(b"x" * 64)
    got = b""
    while len(got) < 64:
        got += s.recv(64 - len(got))
    times.append(time.monotonic() - t)
times.sort()
print(times[len(times) // 2] * 1000)
"#;
    let (rc, out, err) = python(code, &[&addr.ip().to_string(), &addr.port().to_string()]);
    assert_eq!(rc, 0, "{err}");
    out.trim().parse().unwrap()
}

#[test]
fn latency_adds_its_delay_to_a_round_trip() {
    if missing_tool("python3") {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let plain = proxy_to(&echo, &[]);
    let delayed = proxy_to(&echo, &["latency:delay=100ms"]);
    let base = python_rtt_ms(plain.addr());
    let slow = python_rtt_ms(delayed.addr());
    assert!(base < 30.0, "no fault: {base} ms");
    assert!(
        (90.0..200.0).contains(&(slow - base)),
        "latency 100ms added {} ms",
        slow - base
    );
}

#[test]
fn bandwidth_reaches_its_rate_within_ten_percent() {
    if missing_tool("curl") {
        return;
    }
    static BODY: [u8; 1_500_000] = [b'b'; 1_500_000];
    let http = Server::http(&BODY);
    let proxy = proxy_to(&http, &["bandwidth:rate=500KB/s"]);
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download} %{time_total}",
            &format!("http://{}/", proxy.addr()),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    let size: f64 = it.next().unwrap().parse().unwrap();
    let secs: f64 = it.next().unwrap().parse().unwrap();
    assert_eq!(size, 1_500_000.0);
    let rate = size / secs;
    // The bucket never lets more through than its rate (plus the initial
    // burst); a busy machine may read slower than that, so the lower bound
    // is generous.
    assert!(
        (300_000.0..=550_000.0).contains(&rate),
        "measured {rate:.0} B/s for 500KB/s over {secs:.2}s"
    );
}

#[test]
fn zero_rate_holds_the_stream_without_spinning() {
    let source = Server::source(1000);
    let proxy = proxy_to(&source, &["bandwidth:rate=0"]);
    let cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    };
    let mut c = connect(proxy.addr());
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let before = cpu(proxy.pid());
    let mut buf = [0u8; 100];
    let r = c.read(&mut buf);
    assert!(
        matches!(&r, Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut),
        "{r:?}"
    );
    let used = cpu(proxy.pid()) - before;
    assert!(
        used < 0.3,
        "netchaos used {used:.2}s of CPU while holding a zero-rate stream for 2s"
    );
}

#[test]
fn stall_fires_a_read_timeout_and_keeps_the_connection_open() {
    if missing_tool("python3") {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let proxy = proxy_to(&echo, &["stall:after_bytes=5"]);
    let code = r#"
import socket, sys, errno
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"hello world")
got = b""
while len(got) < 5:
    got += s.recv(100)
assert got == b"hello", got
s.settimeout(1.0)
try:
    s.recv(100)
    print("NO TIMEOUT")
except socket.timeout:
    print("read timeout")
# Still open: no EOF, no reset, and writes are accepted.
s.setblocking(False)
try:
    data = s.recv(100, socket.MSG_PEEK)
    print("EOF" if data == b"" else "DATA")
except BlockingIOError:
    print("still open")
s.send(b"more")
print("write ok")
"#;
    let (rc, out, err) = python(
        code,
        &[
            &proxy.addr().ip().to_string(),
            &proxy.addr().port().to_string(),
        ],
    );
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out, "read timeout\nstill open\nwrite ok\n");
}

#[test]
fn reset_gives_econnreset_after_exactly_the_stated_bytes() {
    if missing_tool("python3") {
        return;
    }
    let source = Server::source(100_000);
    let proxy = proxy_to(&source, &["reset:after_bytes=4096"]);
    let code = r#"
import socket, sys
# A reset that comes right after the bytes can beat connect()'s return on a
# loaded machine (the handshake completes while the client waits for a
# core): that is the fault too early for this client, not a wrong fault, so
# it connects again.
for attempt in range(5):
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
        break
    except ConnectionResetError:
        if attempt == 4:
            raise
n = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            print(n, "EOF")
            break
        n += len(b)
except ConnectionResetError:
    print(n, "ECONNRESET")
"#;
    let (rc, out, err) = python(
        code,
        &[
            &proxy.addr().ip().to_string(),
            &proxy.addr().port().to_string(),
        ],
    );
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), "4096 ECONNRESET");
}

#[test]
fn reset_also_reaches_the_server() {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start("127.0.0.1:0", move |mut s| {
        let (_, err) = read_to_end(&mut s);
        let _ = tx.send(err.map(|e| e.kind()));
    });
    let proxy = proxy_to(&server, &["reset:after_bytes=10,stream=upstream"]);
    let mut c = connect(proxy.addr());
    let _ = c.write_all(&[0u8; 100]);
    let seen = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(seen, Some(ErrorKind::ConnectionReset));
    let (_, err) = read_to_end(&mut c);
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
}

#[test]
fn close_truncates_at_exactly_after_bytes_with_a_clean_fin() {
    let source = Server::source(100_000);
    let proxy = proxy_to(&source, &["close:after_bytes=10000"]);
    let mut c = connect(proxy.addr());
    let (data, err) = read_to_end(&mut c);
    assert!(err.is_none(), "a clean FIN, not an error: {err:?}");
    assert_eq!(data.len(), 10_000);
    assert_eq!(
        data,
        pattern(0, 10_000),
        "the bytes before the cut are intact"
    );
}

#[test]
fn curl_sees_a_truncated_body_under_close() {
    if missing_tool("curl") {
        return;
    }
    static BODY: [u8; 50_000] = [b'z'; 50_000];
    let http = Server::http(&BODY);
    let proxy = proxy_to(&http, &["close:after_bytes=20000"]);
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
            &format!("http://{}/", proxy.addr()),
        ])
        .output()
        .unwrap();
    // curl: "transfer closed with N bytes remaining to read" is exit 18.
    assert_eq!(
        out.status.code(),
        Some(18),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(got < 20_000 && got > 19_000, "{got} body bytes");
}

#[test]
fn respond_sends_canned_bytes_and_never_contacts_the_upstream() {
    if missing_tool("curl") {
        return;
    }
    let http = Server::http(b"real");
    let proxy = proxy_to(&http, &["respond:status=503,body=\"down for maintenance\""]);
    let out = std::process::Command::new("curl")
        .args(["-s", "-i", &format!("http://{}/", proxy.addr())])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\ndown for maintenance"), "{text}");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        http.accepted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the upstream saw a connection"
    );
}

#[test]
fn respond_then_reset_and_raw_data() {
    let source = Server::source(10);
    let proxy = proxy_to(&source, &["respond:data=\"+PONG\\r\\n\",then=reset"]);
    let mut c = connect(proxy.addr());
    c.write_all(b"PING\r\n").unwrap();
    let (data, err) = read_to_end(&mut c);
    assert_eq!(data, b"+PONG\r\n");
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
}

#[test]
fn slow_close_delays_only_the_fin() {
    let source = Server::source(1000);
    let proxy = proxy_to(&source, &["slow_close:delay=1s"]);
    let mut c = connect(proxy.addr());
    let t = Instant::now();
    let mut buf = vec![0u8; 1000];
    c.read_exact(&mut buf).unwrap();
    let data_at = t.elapsed();
    let (rest, err) = read_to_end(&mut c);
    let fin_at = t.elapsed();
    assert!(rest.is_empty() && err.is_none());
    assert!(
        data_at < Duration::from_millis(300),
        "data came at {data_at:?}"
    );
    assert!(
        fin_at >= Duration::from_millis(900) && fin_at < Duration::from_secs(3),
        "FIN came at {fin_at:?}"
    );
}

#[test]
fn slicer_delivers_everything_in_paced_pieces() {
    let source = Server::source(1000);
    let proxy = proxy_to(&source, &["slicer:size=100,size_variation=20,delay=50ms"]);
    let mut c = connect(proxy.addr());
    let t = Instant::now();
    let (data, err) = read_to_end(&mut c);
    assert!(err.is_none());
    assert_eq!(data, pattern(0, 1000));
    // At least 1000/120 pieces, 50 ms apart.
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
}

/// Which connection ids got the fault, from the event log of one run.
fn faulted_ids(seed: &str) -> Vec<u64> {
    let echo = Server::echo("127.0.0.1:0");
    let events = tempfile::NamedTempFile::new().unwrap();
    let up = echo.addr.to_string();
    let proxy = Proxy::start(&[
        "--seed",
        seed,
        "--events",
        events.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "latency:delay=1ms,probability=0.5",
    ]);
    for _ in 0..40 {
        let mut c = connect(proxy.addr());
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        c.shutdown(Shutdown::Both).unwrap();
    }
    proxy.stop();
    let mut ids: Vec<u64> = read_events(events.path())
        .iter()
        .filter(|e| e["event"] == "fault")
        .map(|e| e["conn"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[test]
fn probability_splits_connections_and_a_seed_replays_them() {
    let a = faulted_ids("1234");
    let b = faulted_ids("1234");
    assert!((8..=32).contains(&a.len()), "{} of 40 at p=0.5", a.len());
    assert_eq!(a, b, "the same seed picks the same connections");
    assert_ne!(a, faulted_ids("999"), "another seed picks others");
}

#[test]
fn active_window_limits_when_a_fault_acts() {
    let echo = Server::echo("127.0.0.1:0");
    let started = Instant::now();
    let proxy = proxy_to(&echo, &["latency:delay=300ms,active=2s.."]);
    let rtt = || {
        let mut c = connect(proxy.addr());
        let t = Instant::now();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        t.elapsed()
    };
    let early = rtt();
    assert!(
        early < Duration::from_millis(200),
        "before the window: {early:?}"
    );
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
    let late = rtt();
    assert!(
        late >= Duration::from_millis(280),
        "inside the window: {late:?}"
    );
}

#[test]
fn the_event_log_records_each_fault_with_its_context() {
    let source = Server::source(100);
    let events = tempfile::NamedTempFile::new().unwrap();
    let up = source.addr.to_string();
    let proxy = Proxy::start(&[
        "--seed",
        "8908911256518419541",
        "--events",
        events.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "reset:after_bytes=10",
    ]);
    // Bound first, so that its address is known even if the reset (10
    // bytes into a reply sent at once) lands before connect() returns.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    let client = sock.local_addr().unwrap().as_socket().unwrap().to_string();
    if sock.connect(&proxy.addr().into()).is_ok() {
        let mut c: std::net::TcpStream = sock.into();
        let _ = read_to_end(&mut c);
    }
    proxy.stop();
    let ev = read_events(events.path());
    assert_eq!(ev[0]["event"], "start");
    // Above 2^53: readers that parse numbers as doubles get another
    // number; `seed_str` is exact for them.
    assert_eq!(ev[0]["seed"].as_u64(), Some(8908911256518419541));
    assert_eq!(ev[0]["seed_str"], "8908911256518419541");
    assert_ne!(8908911256518419541u64 as f64 as u64, 8908911256518419541);
    let f = ev
        .iter()
        .find(|e| e["event"] == "fault")
        .expect("fault event");
    assert_eq!(f["fault"], "reset");
    assert_eq!(f["rule"], "cli");
    assert_eq!(f["conn"], 1);
    assert_eq!(f["client"], client.as_str());
    assert_eq!(f["dst"], up.as_str());
    assert_eq!(f["direction"], "downstream");
    assert_eq!(f["params"]["after_bytes"], "10");
    assert!(f["time"].as_str().unwrap().ends_with('Z'));
    let close = ev
        .iter()
        .find(|e| e["event"] == "close")
        .expect("close event");
    assert_eq!(close["outcome"], "reset");
    assert_eq!(close["bytes_downstream"], 10);
    // Milliseconds to the microsecond, as the phases: never shorter than
    // the first byte's moment, as a truncated duration was.
    let duration = close["duration_ms"].as_f64().unwrap();
    if let Some(first) = close["first_byte_downstream_ms"].as_f64() {
        assert!(duration >= first, "{close}");
    }
    assert!(close["duration_ms"].is_f64(), "{close}");
}
