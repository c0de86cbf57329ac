//! Connect-phase and packet-level faults under `netchaos run`, with real
//! clients: curl's and Python requests' own error types tell a connect
//! timeout from a read timeout; the SYN gate keeps connect-phase truth;
//! loss and blackout drop real packets that TCP recovers from.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

fn need(tools: &[&str]) -> bool {
    tools.iter().all(|t| !missing_tool(t))
}

/// `netchaos run ARGS -- CMD...`; (code, stdout, stderr), bounded in time.
fn wrapped(args: &[&str], cmd: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .arg("run")
        .args(args)
        .arg("--")
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn netchaos run");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("netchaos run did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn have_requests() -> bool {
    if !need(&["python3"]) {
        return false;
    }
    let ok = Command::new("python3")
        .args(["-c", "import requests"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !in_ci(),
            "python3 requests is required in CI (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: python3 has no `requests` (pip install requests)");
    }
    ok
}

#[test]
fn curl_tells_a_connect_timeout_from_a_read_timeout() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let http = Server::http(b"hello");
    let url = format!("http://{}/", http.addr);
    let (code, _, err) = wrapped(
        &["--fault", "connect_timeout"],
        &["curl", "-sS", "--connect-timeout", "1", &url],
    );
    assert_eq!(code, 28, "{err}");
    assert!(
        err.contains("Failed to connect") || err.contains("Connection timed out"),
        "{err}"
    );
    assert!(
        err.contains("Timeout was reached") || err.contains("timed out"),
        "{err}"
    );
    assert!(
        !err.contains("0 bytes received"),
        "a connect timeout is not a read timeout: {err}"
    );

    let (code, _, err) = wrapped(
        &["--fault", "stall:after_bytes=0"],
        &[
            "curl",
            "-sS",
            "--connect-timeout",
            "1",
            "--max-time",
            "2",
            &url,
        ],
    );
    assert_eq!(code, 28, "{err}");
    assert!(
        err.contains("Operation timed out") && err.contains("with 0 bytes received"),
        "{err}"
    );
}

const REQUESTS_CLIENT: &str = r#"
import sys, time, requests
t = time.monotonic()
try:
    r = requests.get(sys.argv[1], timeout=(1, 2))
    print("OK", r.status_code)
except requests.exceptions.ConnectTimeout as e:
    print("ConnectTimeout")
except requests.exceptions.ReadTimeout as e:
    print("ReadTimeout")
except requests.exceptions.ConnectionError as e:
    print("ConnectionError", "refused" if "refused" in str(e).lower() else str(e))
print(round(time.monotonic() - t, 2))
"#;

#[test]
fn python_requests_raises_the_right_exception_for_each_phase() {
    if !have_requests() || !need(&["ip", "nft"]) {
        return;
    }
    let http = Server::http(b"hello");
    let url = format!("http://{}/", http.addr);
    for (fault, want) in [
        ("connect_timeout", "ConnectTimeout"),
        ("stall:after_bytes=0", "ReadTimeout"),
        ("refuse", "ConnectionError refused"),
        ("latency:delay=10ms", "OK 200"),
    ] {
        let (code, out, err) = wrapped(
            &["--fault", fault],
            &["python3", "-c", REQUESTS_CLIENT, &url],
        );
        assert_eq!(code, 0, "{fault}: {err}");
        assert_eq!(out.lines().next(), Some(want), "{fault}: {out}");
    }
}

#[test]
fn connect_delay_is_spent_in_connect_not_in_the_read() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let script = r#"
import socket, sys, time
t = time.monotonic()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
c = time.monotonic() - t
t = time.monotonic()
s.sendall(b"ping"); s.recv(4)
r = time.monotonic() - t
print(round(c, 3), round(r, 3))
"#;
    let (ip, port) = (echo.addr.ip().to_string(), echo.addr.port().to_string());
    let (code, out, err) = wrapped(
        &["--fault", "connect_delay:delay=300ms"],
        &["python3", "-c", script, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    let t: Vec<f64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    // The delay is in connect(); the read is a plain round trip. Measured
    // against each other, so that a loaded machine slowing both does not
    // matter.
    assert!(t[0] >= 0.28, "connect took {}s", t[0]);
    assert!(
        t[1] < t[0] / 3.0,
        "the read took {}s, connect {}s",
        t[1],
        t[0]
    );
}

#[test]
fn a_port_with_no_listener_is_refused_at_connect() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let port = unused_port().to_string();
    let script = r#"
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    print("connected")
except ConnectionRefusedError:
    print("ECONNREFUSED")
"#;
    let (code, out, err) = wrapped(&[], &["python3", "-c", script, &port]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        "ECONNREFUSED",
        "connect-phase truth: refused at connect, not connected then reset"
    );
}

#[test]
fn an_upstream_that_drops_syns_gives_a_connect_timeout_not_a_reset() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "nft"]) {
        return;
    }
    // A host on a veth whose firewall silently drops SYNs to port 80.
    let out = ns.sh("nft add table inet t && nft add chain inet t in '{ type filter hook input priority 0; }' && nft add rule inet t in tcp dport 80 drop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], 80), timeout=2)
    print("connected")
except socket.timeout:
    print("timeout", round(time.monotonic() - t, 1))
except OSError as e:
    print("error", e)
"#;
    let (code, out, err) = wrapped(&[], &["python3", "-c", script, &ns.ns_ip.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("timeout 2"), "{out}");
}

/// 4 MiB each way through `run` with a loss `fault`: every byte arrives,
/// byte-exact, after real retransmissions by the client's TCP, which saw
/// an Ethernet path's MSS (1448 with timestamps), not the 64 KiB packets
/// of a bare loopback.
fn lossy_transfer(fault: &str) {
    // The server reads the client's 4 MiB, then sends 4 MiB of pattern.
    let server = Server::start("127.0.0.1:0", |mut s| {
        use std::io::{Read, Write};
        let mut got = 0;
        let mut buf = vec![0u8; 65536];
        while got < 4 << 20 {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got += n,
            }
        }
        let _ = s.write_all(&pattern(5, 4 << 20));
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.read(&mut buf);
    });
    let mut want = Fnv::default();
    want.update(&pattern(5, 4 << 20));
    let script = r#"
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.sendall(b"u" * (4 << 20))
h, n = 0xcbf29ce484222325, 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    n += len(b)
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
print(n, h, struct.unpack("I", info[100:104])[0], struct.unpack("I", info[16:20])[0])
"#;
    let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
    let (code, out, err) = wrapped(&["--fault", fault], &["python3", "-c", script, &ip, &port]);
    assert_eq!(code, 0, "{err}");
    let f: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(f[0], 4 << 20, "{fault}: every byte arrived");
    assert_eq!(f[1], want.0, "{fault}: byte-exact");
    assert!(
        f[2] > 0,
        "{fault}: the client's TCP retransmitted (tcpi_total_retrans = {})",
        f[2]
    );
    assert!(
        (1400..=1460).contains(&f[3]),
        "{fault}: the client's MSS is {} (a real path's is 1448)",
        f[3]
    );
    assert!(!err.contains("segmentation offload"), "{err}");
    assert!(err.contains("cli   loss"), "{err}");
}

#[test]
fn loss_delivers_every_byte_with_real_retransmissions() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    lossy_transfer("loss:percent=10");
}

#[test]
fn bursty_loss_delivers_every_byte_with_real_retransmissions() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    // Runs of 4 on average, in the packet delay line (whose model is
    // unit-tested for run lengths, and checked against netem's gemodel
    // in the VM): TCP gets every byte back, by retransmitting.
    lossy_transfer("loss:percent=5,burst=4");
}

#[test]
fn loss_is_as_harsh_as_the_same_loss_on_a_real_path() {
    if !need(&["python3", "ip", "nft", "ethtool"]) {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    // The reference: a veth at MTU 1500 carrying one segment per packet,
    // nftables dropping 10 % of the TCP packets each way in the client's
    // namespace.
    segments_as_a_nic(&ns);
    let rules = ns.sh(
        "nft -f - <<'EOF'\ntable inet refloss {\n\
         chain i { type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < 10 drop; }\n\
         chain o { type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < 10 drop; }\n}\nEOF",
    );
    assert!(
        rules.status.success(),
        "{}",
        String::from_utf8_lossy(&rules.stderr)
    );
    let server = body_server(&format!("{}:0", ns.host_ip), 2 << 20);
    let (ip, port) = (ns.host_ip.to_string(), server.addr.port().to_string());
    // Most transfers recover every loss (~150 of ~1,450 segments) by fast
    // retransmission in tens of milliseconds; some, on both paths, also
    // wait out a retransmission timeout (200 ms at least), and how many
    // does is a coin toss per transfer, which would make a mean or a
    // median of all of them flap. So the two are compared apart, over
    // interleaved rounds: the time of the transfers that recovered by
    // retransmission alone (median), and how many waited out a timeout.
    let (mut real, mut faulted) = (Vec::new(), Vec::new());
    // Each time counts from the connection's establishment: a lost SYN
    // costs a second on both paths, and the handshake's losses are tested
    // by themselves.
    let since_connect = |(connect, total, bytes, _): (f64, f64, u64, u64)| {
        assert!(bytes > 2 << 20, "{bytes} bytes");
        ((total - connect) * 1e4).round() / 1e4
    };
    for _ in 0..15 {
        real.push(since_connect(get_in(&ns, &ip, &port)));
        let (code, out, err) = wrapped(
            &["--fault", "loss:percent=10"],
            &["python3", "-c", TIMED_GET, &ip, &port],
        );
        assert_eq!(code, 0, "{err}");
        faulted.push(since_connect(timed_get(&out)));
    }
    // Below the shortest retransmission timeout.
    const STALL: f64 = 0.15;
    let split = |v: &[f64]| {
        let mut quick: Vec<f64> = v.iter().copied().filter(|t| *t < STALL).collect();
        quick.sort_by(f64::total_cmp);
        let stalled = v.len() - quick.len();
        (quick.get(quick.len() / 2).copied(), stalled)
    };
    let ((real_quick, real_stalled), (quick, stalled)) = (split(&real), split(&faulted));
    eprintln!(
        "2 MiB at 10 % loss, seconds: real path {real:?}, netchaos {faulted:?}; \
         by retransmission alone (median): {real_quick:?} real, {quick:?} netchaos; \
         waited out a timeout: {real_stalled} real, {stalled} netchaos, of 15"
    );
    let (Some(real_quick), Some(quick)) = (real_quick, quick) else {
        panic!(
            "every transfer waited out a retransmission timeout: real path {real:?}, netchaos {faulted:?}"
        );
    };
    // 20 ms of allowance above: with both cores busy the relay's extra
    // hop costs the quick transfers (~25 ms) more than the path does.
    assert!(
        quick >= 0.5 * real_quick && quick <= 2.0 * real_quick + 0.02,
        "recovering by retransmission, netchaos took {quick}s (median) where the real path took {real_quick}s"
    );
    // A binomial count each (3–8 of 15 seen): apart by more than 7
    // is beyond chance (a loss far milder or far harsher than the path's).
    assert!(
        stalled.abs_diff(real_stalled) <= 7,
        "{stalled} of 15 transfers under netchaos waited out a timeout, {real_stalled} on the real path"
    );
}

#[test]
fn a_blackout_stalls_the_transfer_and_it_completes_intact() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let source = Server::source(4 << 20);
    let mut want = Fnv::default();
    want.update(&pattern(0, 4 << 20));
    let script = r#"
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
t = time.monotonic()
h, n, gap, last = 0xcbf29ce484222325, 0, 0.0, time.monotonic()
while True:
    b = s.recv(1 << 16)
    now = time.monotonic()
    gap, last = max(gap, now - last), now
    if not b:
        break
    n += len(b)
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
print(n, h, round(gap, 2))
"#;
    let (ip, port) = (source.addr.ip().to_string(), source.addr.port().to_string());
    let (code, out, err) = wrapped(
        &["--fault", "blackout:after_bytes=1MiB,duration=2s"],
        &["python3", "-c", script, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f[0], (4u64 << 20).to_string(), "{out}");
    assert_eq!(f[1], want.0.to_string(), "byte-exact after the partition");
    let gap: f64 = f[2].parse().unwrap();
    assert!(
        (1.9..8.0).contains(&gap),
        "the longest pause was {gap}s for a 2 s blackout"
    );
}

/// A server on `addr` that sends 32 KiB every 20 ms (1.6 MB/s) for 6 s,
/// then closes; it reports the longest its `send()` blocked. Its send
/// buffer is the kernel's, autotuned.
fn paced_server(addr: &str) -> (Server, std::sync::mpsc::Receiver<f64>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = Server::start(addr, move |mut c| {
        let chunk = vec![b'x'; 32 << 10];
        let mut worst = 0f64;
        for _ in 0..300 {
            let t = Instant::now();
            if c.write_all(&chunk).is_err() {
                break;
            }
            worst = worst.max(t.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = tx.lock().unwrap().send(worst);
    });
    (server, rx)
}

/// Reads until the end of the stream; prints the bytes.
const READ_ALL: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=40)
n = 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    n += len(b)
print(n)
"#;

#[test]
fn a_blackout_cuts_the_server_off_too() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    let sent = (300 * (32 << 10)).to_string();
    // The reference: a real partition, nftables dropping everything in the
    // client's namespace from 1 s to 4 s, across a veth at MTU 1500.
    let (server, done) = paced_server(&format!("{}:0", ns.host_ip));
    let real = ns.sh(&format!(
        "python3 -c '{}' {} {} & sleep 1; \
         nft add table inet part; \
         nft add chain inet part i '{{ type filter hook input priority 0; policy drop; }}'; \
         nft add chain inet part o '{{ type filter hook output priority 0; policy drop; }}'; \
         sleep 3; nft delete table inet part; wait",
        READ_ALL.replace('\'', "'\"'\"'"),
        ns.host_ip,
        server.addr.port()
    ));
    assert!(
        real.status.success(),
        "{}",
        String::from_utf8_lossy(&real.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&real.stdout).trim(), sent);
    let reference = done.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut worst = Vec::new();
    for fault in ["latency:delay=1ms", "blackout:after=1s,duration=3s"] {
        let (server, done) = paced_server("127.0.0.1:0");
        let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
        let (code, out, err) = wrapped(
            &["--fault", fault],
            &["python3", "-c", READ_ALL, &ip, &port],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim(), sent, "{fault}: {err}");
        worst.push(done.recv_timeout(Duration::from_secs(30)).unwrap());
    }
    eprintln!(
        "longest send() block: {:.2}s without, {:.2}s with a 3 s blackout, {reference:.2}s in a real 3 s partition",
        worst[0], worst[1]
    );
    assert!(
        reference >= 2.0,
        "the real partition blocked the server's send() only {reference}s"
    );
    // In a real partition the server's window fills and its send() blocks
    // until the path is back; a relay that went on reading (or let the
    // server autotune its buffer to loopback's megabytes) would hide that.
    assert!(
        worst[0] < 1.0,
        "without a partition send() blocked {}s",
        worst[0]
    );
    assert!(
        worst[1] >= 1.5,
        "during a 3 s blackout the server's send() blocked at most {}s ({reference}s in a real partition)",
        worst[1]
    );
}

/// Listens on the namespace's loopback, connects to itself through the
/// relay, and prints the MSS the accepted (server) side uses.
const INSIDE_MSS: &str = r#"
import socket
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen()
c = socket.create_connection(l.getsockname(), timeout=10)
l.settimeout(10)
a, _ = l.accept()
print(a.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
"#;

/// A service inside the namespace, dialled from inside, is shaped as a
/// host one is: under a blackout its connection has an Ethernet MSS, so
/// its send buffer does not autotune to loopback's megabytes.
#[test]
fn a_blackout_gives_a_service_inside_the_namespace_an_ethernet_mss() {
    if !need(&["python3"]) {
        return;
    }
    let mut mss = Vec::new();
    for fault in ["latency:delay=1ms", "blackout:after=60s,duration=1s"] {
        let (code, out, err) = wrapped(&["--fault", fault], &["python3", "-c", INSIDE_MSS]);
        assert_eq!(code, 0, "{fault}: {err}");
        mss.push(
            out.trim()
                .parse::<u32>()
                .unwrap_or_else(|e| panic!("{fault}: {out:?} {e}: {err}")),
        );
    }
    assert!(
        mss[0] > 1500,
        "without a blackout: loopback's MSS, got {}",
        mss[0]
    );
    assert!(
        mss[1] <= 1460,
        "under a blackout: an Ethernet MSS, got {}",
        mss[1]
    );
}

/// Writes to a server that never reads until no write has gone through
/// for 2 s; prints the bytes the path accepted.
const WRITE_UNTIL_BLOCKED: &str = include_str!("support/write_until_blocked.py");

#[test]
fn a_server_that_never_reads_stops_the_client_as_soon_as_directly() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    // Holds every connection open, unread, until the test ends.
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    let sink = Server::start("127.0.0.1:0", move |c| keep.lock().unwrap().push(c));
    let (ip, port) = (sink.addr.ip().to_string(), sink.addr.port().to_string());
    let accepted = |out: &str| -> f64 { out.trim().parse().unwrap_or_else(|_| panic!("{out:?}")) };
    // Autotuning varies from run to run: the direct path's larger figure.
    let direct = (0..2)
        .map(|_| accepted(&python(WRITE_UNTIL_BLOCKED, &[&ip, &port]).1))
        .fold(0f64, f64::max);
    let proxy = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &sink.addr.to_string(),
    ]);
    let (_, via_proxy, _) = python(
        WRITE_UNTIL_BLOCKED,
        &["127.0.0.1", &proxy.addrs[0].port().to_string()],
    );
    let (code, via_run, err) = wrapped(&[], &["python3", "-c", WRITE_UNTIL_BLOCKED, &ip, &port]);
    assert_eq!(code, 0, "{err}");
    for (path, bytes) in [("proxy", accepted(&via_proxy)), ("run", accepted(&via_run))] {
        // The relay adds its own buffers to the two peers'; they must not
        // let a client believe megabytes more were taken than directly.
        assert!(
            bytes <= 1.5 * direct,
            "{path}: {bytes} bytes accepted before the write blocked, directly {direct}"
        );
        assert!(bytes >= direct * 0.9, "{path}: {bytes} of {direct}");
    }
}

/// Makes `ns`'s veth carry one segment per packet, both ends: TSO and GSO
/// off, as a NIC cuts segments before the wire; GRO off (veth's default),
/// so none are merged on the way in.
fn segments_as_a_nic(ns: &TestNetns) {
    for (netns, dev) in [(None, &ns.host_if), (Some(&ns.name), &ns.ns_if)] {
        let mut c = match netns {
            Some(n) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", n, "ethtool"]);
                c
            }
            None => Command::new("ethtool"),
        };
        let out = c
            .args(["-K", dev, "tso", "off", "gso", "off", "gro", "off"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Accepts connections on ARGV[1]:ARGV[2] and holds them, never reading;
/// prints "ready" once listening.
const NEVER_READS: &str = r#"
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(16)
print("ready", flush=True)
held = []
while len(held) < 64:
    held.append(l.accept()[0])
"#;

/// Node: writes 64 KiB chunks until none has reached the kernel for 2 s
/// (a write's callback runs once its bytes are in the socket) and prints
/// the bytes the kernel took.
const NODE_WRITE_UNTIL_BLOCKED: &str = r#"
const net = require("net");
const s = net.connect(+process.argv[2], process.argv[1]);
const chunk = Buffer.alloc(65536, 120);
let taken = 0, last = Date.now();
s.on("connect", function pump() {
  while (s.write(chunk, () => { taken += chunk.length; last = Date.now(); }));
  s.once("drain", pump);
});
s.on("error", (e) => { console.error(e.message); process.exit(1); });
const check = setInterval(() => {
  if (taken > 0 && Date.now() - last > 2000) {
    console.log(taken);
    process.exit(0);
  }
}, 100);
setTimeout(() => { clearInterval(check); console.log(taken); process.exit(0); }, 30000);
"#;

/// requests.post of 2 MiB with timeout (2, 3): the exception's class and
/// message, and when it came.
const REQUESTS_POST: &str = r#"
import sys, time, requests
t = time.monotonic()
try:
    requests.post(f"http://{sys.argv[1]}:{sys.argv[2]}/", data=b"x" * (2 << 20), timeout=(2, 3))
    print("answered")
except Exception as e:
    print(type(e).__name__, "timed out" in str(e), round(time.monotonic() - t, 1))
"#;

/// The reference: a server across a veth at MTU 1500 (one segment per
/// packet) that never reads. What each client's `send()` takes before
/// it blocks under `run` is within 1.5× of what it takes directly — not
/// the megabytes a loopback-sized send buffer and the relay's own buffers
/// would take — so a client fails in the phase it would: `requests.post`
/// of 2 MiB times out in the send, not waiting for the answer.
#[test]
fn a_server_that_never_reads_across_a_path_stops_every_client_as_the_path_does() {
    if !need(&["python3", "ip", "nft", "ethtool", "curl", "node"]) || !have_requests() {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    segments_as_a_nic(&ns);
    let ip = ns.ns_ip.to_string();
    let mut sink = PythonBg::in_netns(&ns.name, NEVER_READS, &[&ip, "9000"]);
    assert_eq!(sink.line(), "ready");
    let bytes = |client: &str, out: &str| -> f64 {
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{client}: {out:?}"))
    };
    let body = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(body.path(), vec![b'x'; 8 << 20]).unwrap();
    let data = format!("@{}", body.path().display());
    let url = format!("http://{ip}:9000/");
    let curl = [
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "--max-time",
        "4",
        "--data-binary",
        &data,
        "-w",
        "%{size_upload}",
        &url,
    ];
    let clients: [(&str, Vec<&str>); 3] = [
        (
            "python",
            vec!["python3", "-c", WRITE_UNTIL_BLOCKED, &ip, "9000"],
        ),
        (
            "node",
            vec!["node", "-e", NODE_WRITE_UNTIL_BLOCKED, &ip, "9000"],
        ),
        ("curl", curl.to_vec()),
    ];
    for (client, cmd) in &clients {
        // Autotuning varies from run to run: the direct path's range.
        let direct: Vec<f64> = (0..2)
            .map(|_| {
                let out = Command::new(cmd[0]).args(&cmd[1..]).output().unwrap();
                bytes(client, &String::from_utf8_lossy(&out.stdout))
            })
            .collect();
        let (least, most) = (direct[0].min(direct[1]), direct[0].max(direct[1]));
        let (_, out, err) = wrapped(&[], cmd);
        let under_run = bytes(client, &out);
        eprintln!("{client}: {under_run} bytes taken under run, {direct:?} directly");
        assert!(
            (least / 1.5..=most * 1.5).contains(&under_run),
            "{client}: {under_run} bytes taken before the write blocked under run, {direct:?} directly: {err}"
        );
    }
    let (_, direct, _) = python(REQUESTS_POST, &[&ip, "9000"]);
    let (code, via_run, err) = wrapped(&[], &["python3", "-c", REQUESTS_POST, &ip, "9000"]);
    assert_eq!(code, 0, "{err}");
    // "ConnectionError True 2.0": the class, whether it timed out, when.
    let split = |s: &str| -> (String, f64) {
        let (what, at) = s.trim().rsplit_once(' ').unwrap_or_else(|| panic!("{s:?}"));
        (
            what.to_string(),
            at.parse().unwrap_or_else(|_| panic!("{s:?}")),
        )
    };
    let ((real, real_at), (got, got_at)) = (split(&direct), split(&via_run));
    assert_eq!(real, "ConnectionError True", "the reference: {direct}");
    assert_eq!(got, real, "under run: {via_run}, directly: {direct}");
    assert!(
        (got_at - real_at).abs() <= 0.5,
        "under run after {got_at} s, directly after {real_at} s"
    );
}

/// Which of 20 connection attempts were refused, under a seed.
fn refused_pattern(seed: &str) -> String {
    let echo = Server::echo("127.0.0.1:0");
    let script = r#"
import socket, sys
out = ""
for i in range(20):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
        out += "."
    except ConnectionRefusedError:
        out += "R"
print(out)
"#;
    let (code, out, err) = wrapped(
        &["--seed", seed, "--fault", "refuse:probability=0.5"],
        &["python3", "-c", script, &echo.addr.port().to_string()],
    );
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

#[test]
fn a_seed_refuses_the_same_connections_twice() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let a = refused_pattern("42");
    let b = refused_pattern("42");
    assert_eq!(a, b, "same seed, same fates");
    let refused = a.matches('R').count();
    assert!((3..=17).contains(&refused), "{a}");
}

#[test]
fn connect_faults_are_recorded() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("e.jsonl");
    let script = "import socket,sys\ntry:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)\nexcept OSError:\n    pass";
    let (code, _, err) = wrapped(
        &["--events", events.to_str().unwrap(), "--fault", "refuse"],
        &["python3", "-c", script, &echo.addr.port().to_string()],
    );
    assert_eq!(code, 0, "{err}");
    let ev = read_events(&events);
    let f = ev
        .iter()
        .find(|e| e["event"] == "fault")
        .expect("fault event");
    assert_eq!(f["fault"], "refuse");
    assert_eq!(f["dst"], echo.addr.to_string());
    assert!(
        ev.iter()
            .any(|e| e["event"] == "close" && e["outcome"] == "refused")
    );
    assert!(err.contains("cli   refuse"), "{err}");
}

/// Fetches `http://HOST:PORT/` with Python (no proxy): prints the connect
/// time, the whole time, the bytes and the client's smoothed RTT (µs).
const TIMED_GET: &str = r#"
import socket, struct, sys, time
t0 = time.monotonic()
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
t1 = time.monotonic()
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
n = 0
while True:
    b = s.recv(1 << 16)
    if not b:
        break
    n += len(b)
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
print(t1 - t0, time.monotonic() - t0, n, struct.unpack("I", info[68:72])[0])
"#;

fn timed_get(out: &str) -> (f64, f64, u64, u64) {
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{out}");
    (
        f[0].parse().unwrap(),
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
    )
}

/// [`TIMED_GET`] run in `ns`, parsed.
fn get_in(ns: &TestNetns, ip: &str, port: &str) -> (f64, f64, u64, u64) {
    let out = ns.sh(&format!(
        "python3 -c '{}' {ip} {port}",
        TIMED_GET.replace('\'', "'\"'\"'")
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    timed_get(&String::from_utf8_lossy(&out.stdout))
}

/// A server on `bind` answering each GET with `len` bytes of pattern.
fn body_server(bind: &str, len: usize) -> Server {
    let body: &'static [u8] = Box::leak(pattern(3, len).into_boxed_slice());
    Server::start(bind, move |mut s| {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(body);
        let _ = s.shutdown(std::net::Shutdown::Write);
    })
}

#[test]
fn packet_latency_is_a_slower_path_handshake_and_slow_start_included() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    // The reference, where the test may build it (root, a TUN device): a
    // real path with a 50 ms round trip (25 ms each way, MTU 1500) into a
    // namespace of the test's, and the same server at its end. Without
    // it, netchaos's side still runs against what such a path gives.
    let ns = TestNetns::new();
    let path = ns.as_ref().and_then(|ns| DelayedPath::new(ns, 25));
    let bind = match &path {
        Some(p) => format!("{}:0", p.host_ip),
        None => "127.0.0.1:0".into(),
    };
    let server = body_server(&bind, 1 << 20);
    let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
    // netchaos: the same server, reached from `run`'s namespace over the
    // host's loopback (the delayed path is not on that route). Three
    // interleaved rounds, medians: one GET's slow start is at the mercy
    // of a descheduled process on either side.
    let get = ["python3", "-c", TIMED_GET, &ip, &port];
    let (mut real, mut faulted) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        if let (Some(ns), Some(_)) = (&ns, &path) {
            real.push(get_in(ns, &ip, &port));
        }
        let (code, out, err) = wrapped(&["--fault", "packet_latency:delay=50ms"], &get);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("cli   packet_latency"), "{err}");
        faulted.push(timed_get(&out));
    }
    let median = |v: &[(f64, f64, u64, u64)], f: fn(&(f64, f64, u64, u64)) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    let connect = median(&faulted, |r| r.0);
    let total = median(&faulted, |r| r.1);
    let rtt = median(&faulted, |r| r.3 as f64);
    assert!(faulted.iter().all(|r| r.2 > 1 << 20), "{faulted:?}");
    // connect() takes one round trip: the SYN and the SYN-ACK cross the path.
    assert!(
        (0.049..0.2).contains(&connect),
        "connect() took {connect}s over a 50 ms path"
    );
    // The client's TCP measures the path.
    assert!(
        (49_000.0..150_000.0).contains(&rtt),
        "the client's TCP measured an RTT of {rtt} µs"
    );
    if real.is_empty() {
        // Slow start over 50 ms round trips: about 7 of them for 1 MiB,
        // 0.43 s over a real path (a stream delay takes ~0.1 s).
        eprintln!("no reference path here (see above): 1 MiB GET {total:.3}s under packet_latency");
        assert!(
            (0.3..3.0).contains(&total),
            "a 1 MiB GET took {total}s over a 50 ms path"
        );
        return;
    }
    let (real_connect, real_total) = (median(&real, |r| r.0), median(&real, |r| r.1));
    let real_rtt = median(&real, |r| r.3 as f64);
    eprintln!(
        "50 ms round trip (medians of 3): connect {real_connect:.4}s real, {connect:.4}s packet_latency; \
         1 MiB GET {real_total:.3}s real, {total:.3}s packet_latency; \
         tcpi_rtt {real_rtt} µs real, {rtt} µs packet_latency"
    );
    assert!(
        real.iter().zip(&faulted).all(|(r, f)| r.2 == f.2),
        "{real:?} {faulted:?}"
    );
    assert!(
        real_connect >= 0.049,
        "the reference path's connect took {real_connect}s"
    );
    assert!(real_total > 0.3, "the reference path took {real_total}s");
    let ratio = total / real_total;
    assert!(
        (0.67..=1.5).contains(&ratio),
        "a 1 MiB GET took {total}s under packet_latency, {real_total}s over a real 50 ms path"
    );
}

/// Applies an HTB rate on `dev`'s egress; the root qdisc goes with the
/// namespace.
fn htb(dev: &str, rate: &str) {
    for args in [
        vec![
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
        ],
        vec![
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
        ],
    ] {
        let out = Command::new("tc").args(&args).output().expect("tc");
        assert!(
            out.status.success(),
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn packet_rate_transfers_as_fast_as_a_real_link_of_that_rate() {
    if !need(&["python3", "ip", "nft", "tc"]) {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    // The reference: the same server and client across a veth (MTU 1500)
    // whose server→client side is an 8 mbit HTB link.
    let reference = body_server(&format!("{}:0", ns.host_ip), 1 << 20);
    htb(&ns.host_if, "8mbit");
    let port = reference.addr.port().to_string();
    let host = ns.host_ip.to_string();
    let (_, real_total, real_bytes, _) = get_in(&ns, &host, &port);
    // netchaos: the same server, reached from `run`'s namespace over the
    // host's loopback (the HTB link is not on that path).
    let (code, out, err) = wrapped(
        &["--fault", "packet_rate:rate=8mbit"],
        &["python3", "-c", TIMED_GET, &host, &port],
    );
    assert_eq!(code, 0, "{err}");
    let (_, total, bytes, _) = timed_get(&out);
    eprintln!("1 MiB at 8 mbit: {real_total:.3}s on an HTB link, {total:.3}s under packet_rate");
    assert_eq!(bytes, real_bytes);
    // 1 MiB at 1 MB/s is a second on both.
    assert!(real_total > 0.9, "the reference link took {real_total}s");
    let ratio = total / real_total;
    assert!(
        (0.67..1.5).contains(&ratio),
        "packet_rate took {total}s where the real link took {real_total}s"
    );
}

#[test]
fn a_full_link_queue_drops_and_tcp_retransmits_every_byte() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let (tx, got) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let server = Server::start("127.0.0.1:0", move |mut s| {
        use std::io::Read;
        let mut h = Fnv::default();
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => h.update(&buf[..n]),
            }
        }
        let _ = tx.lock().unwrap().send(h.0);
    });
    // 2 MiB up a 16 mbit link that queues 8 packets: slow start overruns
    // the queue, as it would a shallow router buffer.
    let script = r#"
import socket, struct, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.sendall(bytes(range(256)) * 8192)
s.shutdown(socket.SHUT_WR)
s.recv(1)
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
print(struct.unpack("I", info[100:104])[0])
"#;
    let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
    let (code, out, err) = wrapped(
        &["--fault", "packet_rate:rate=16mbit,queue=8,stream=upstream"],
        &["python3", "-c", script, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    let retrans: u64 = out.trim().parse().unwrap();
    let mut want = Fnv::default();
    want.update(&(0..=255u8).collect::<Vec<_>>().repeat(8192));
    assert_eq!(
        got.recv_timeout(Duration::from_secs(30)).unwrap(),
        want.0,
        "byte-exact"
    );
    assert!(retrans > 0, "the queue never overflowed: no retransmission");
}

#[test]
fn the_slow_path_profile_slows_the_handshake() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let server = Server::http(b"ok");
    let (ip, port) = (server.addr.ip().to_string(), server.addr.port().to_string());
    let (code, out, err) = wrapped(
        &["-p", "slow-path"],
        &["python3", "-c", TIMED_GET, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    let (connect, _, _, rtt) = timed_get(&out);
    assert!(
        (0.099..0.4).contains(&connect),
        "connect() took {connect}s on a 100 ms path"
    );
    assert!(rtt >= 99_000, "the client's TCP measured {rtt} µs");
}

/// A client that gives up connecting (its own connect timeout) while
/// `connect_delay` holds its SYN never reaches the server: on a real path
/// its kernel would answer the late SYN-ACK with an RST, and the server
/// would never accept. Nothing is dialled for it, and the summary counts
/// the attempts as abandoned.
#[test]
fn a_connect_the_client_gave_up_never_reaches_the_server() {
    if !need(&["python3", "nft"]) {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let script = r#"
import socket, sys, time
for i in range(3):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
        print("connected")
    except OSError as e:
        print(type(e).__name__)
time.sleep(4)
"#;
    let port = echo.addr.port().to_string();
    let (code, out, err) = wrapped(
        &["--fault", "connect_delay:delay=3s"],
        &["python3", "-c", script, &port],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().filter(|l| *l == "TimeoutError").count(),
        3,
        "{out}"
    );
    let accepted = echo.accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        accepted, 0,
        "the server accepted {accepted} ghost connection(s)\n{err}"
    );
    assert!(
        err.contains("connection attempts abandoned by their client (no upstream kept): 3"),
        "{err}"
    );
}

/// With no fault and an upstream that never answers, the relay's SYNs
/// stop when the client gives up; a path that opens later does not put a
/// connection through for a client that is gone.
#[test]
fn a_dial_stops_when_its_client_gives_up() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "nft"]) {
        return;
    }
    let out = ns.sh(
        "nft add table inet t && nft add chain inet t in '{ type filter hook input priority 0; }' && \
         nft add rule inet t in tcp dport 80 tcp flags syn counter drop",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
import socket, sys, time
try:
    socket.create_connection((sys.argv[1], 80), timeout=1)
    print("connected")
except OSError as e:
    print(type(e).__name__)
time.sleep(8)
"#;
    let (code, out, err) = wrapped(&[], &["python3", "-c", script, &ns.ns_ip.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "TimeoutError", "{out}");
    let rules = String::from_utf8_lossy(&ns.sh("nft list chain inet t in").stdout).into_owned();
    let syns: u64 = rules
        .split("counter packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {rules}"));
    // The first SYN and at most the retransmission at 1 s; a dial left
    // running would have sent those at 3 and 7 s too.
    assert!(
        syns <= 2,
        "{syns} SYNs reached the silent host in 8 s\n{err}"
    );
    assert!(err.contains("abandoned by their client"), "{err}");
}

/// A client that binds its source port is seen from that port by the
/// server, as directly (urllib3's `test_source_address_works`): the relay
/// dials from the same port where the host has it free.
#[test]
fn the_server_sees_the_source_port_the_client_bound() {
    if !need(&["python3", "nft"]) {
        return;
    }
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let server = Server::start("127.0.0.1:0", move |mut c| {
        s2.lock().unwrap().push(c.peer_addr().unwrap().port());
        let _ = c.write_all(b"ok");
    });
    let port = unused_port();
    let script = r#"
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[2])))
s.settimeout(5)
s.connect(("127.0.0.1", int(sys.argv[1])))
print(s.recv(10).decode())
"#;
    let (code, out, err) = wrapped(
        &["--fault", "latency:delay=1ms"],
        &[
            "python3",
            "-c",
            script,
            &server.addr.port().to_string(),
            &port.to_string(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "ok", "{err}");
    assert_eq!(*seen.lock().unwrap(), [port], "{err}");
}

/// A server of the command's own (urllib3's test servers, which key on
/// the client's port): the relay cannot take the client's 4-tuple inside
/// the namespace, so it dials from the namespace's own address with the
/// client's port and the table writes 127.0.0.1 / ::1 back. Bound and
/// automatic ports, IPv4 and IPv6; the connection did go through the
/// relay (its latency was felt).
#[test]
fn a_server_in_the_namespace_sees_the_clients_own_address_and_port() {
    if !need(&["python3", "nft"]) {
        return;
    }
    let script = r#"
import socket, threading, sys, time
fam = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
host = "::1" if sys.argv[1] == "6" else "127.0.0.1"
l = socket.socket(fam); l.bind((host, 0)); l.listen()
port = l.getsockname()[1]
seen = []
def serve():
    for _ in range(2):
        c, a = l.accept(); seen.append(a[:2]); c.sendall(b"ok"); c.close()
t = threading.Thread(target=serve); t.start()
f = socket.socket(fam); f.bind((host, 0)); bound = f.getsockname()[1]; f.close()
a = socket.socket(fam); a.bind((host, bound)); a.settimeout(5)
start = time.monotonic(); a.connect((host, port)); assert a.recv(10) == b"ok"
took = time.monotonic() - start
b = socket.socket(fam); b.settimeout(5); b.connect((host, port)); assert b.recv(10) == b"ok"
t.join(5)
want = [(host, bound), (host, b.getsockname()[1])]
print("same" if seen == want else f"differ: {seen} vs {want}", f"{took:.3f}")
"#;
    // As root, and rootless (the NAT rule in a user-owned namespace).
    let nobody = Nobody::new();
    let mut runs: Vec<(&str, Option<Command>)> = vec![("4", None), ("6", None)];
    if let Some(n) = &nobody {
        let mut c = n.command();
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", "/");
        runs.push(("4", Some(c)));
    }
    for (family, as_user) in runs {
        let args = ["--fault", "latency:delay=150ms"];
        let cmd = ["python3", "-c", script, family];
        let (code, out, err) = match as_user {
            Some(c) => wrapped_with(c, &args, &cmd),
            None => wrapped(&args, &cmd),
        };
        assert_eq!(code, 0, "IPv{family}: {err}");
        let (verdict, took) = out.trim().split_once(' ').expect(&out);
        assert_eq!(verdict, "same", "IPv{family}: {out} {err}");
        let took: f64 = took.parse().unwrap();
        assert!(
            took >= 0.14,
            "IPv{family}: not through the relay ({took} s)"
        );
    }
}
