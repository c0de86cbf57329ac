//! `netchaos attach`, `netchaos clean` and `netchaos run --in-place`, as
//! root, on namespaces made for the test (`ip netns add` with a veth pair,
//! `unshare -n`): faults reach real clients in the namespace, the relay's
//! own connections are not intercepted again, and what netchaos installed
//! is gone after SIGTERM — or, after SIGKILL, after `clean`.

mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A root-only test's prerequisites; `None` (skipped, with the reason
/// printed; a failure in CI) where they are missing.
fn setup() -> Option<TestNetns> {
    let ns = TestNetns::new()?;
    for tool in ["nft", "python3", "iptables"] {
        if missing_tool(tool) {
            return None;
        }
    }
    Some(ns)
}

/// An echo server on the host end of the veth pair: what clients in the
/// namespace reach.
fn host_echo(ns: &TestNetns) -> Server {
    Server::echo(&format!("{}:0", ns.host_ip))
}

const CLIENT: &str = r#"
import socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
t = time.monotonic()
try:
    s = socket.create_connection((host, port), timeout=8)
except OSError as e:
    print("connect-error", type(e).__name__, round(time.monotonic() - t, 3))
    sys.exit(0)
c = time.monotonic() - t
s.sendall(b"ping")
d = s.recv(100)
print("ok", round(c, 3), round(time.monotonic() - t, 3), d.decode())
"#;

/// Runs the client inside the namespace: "ok CONNECT TOTAL REPLY" or
/// "connect-error NAME SECONDS".
fn client_in(ns: &TestNetns, dir: &tempfile::TempDir, host: &str, port: u16) -> String {
    let script = dir.path().join("client.py");
    std::fs::write(&script, CLIENT).unwrap();
    let out = ns.sh(&format!(
        "timeout 20 python3 {} {host} {port}",
        script.display()
    ));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !text.is_empty(),
        "client printed nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn seconds(line: &str, field: usize) -> f64 {
    line.split_whitespace().nth(field).unwrap().parse().unwrap()
}

fn netns_path(ns: &TestNetns) -> String {
    format!("/run/netns/{}", ns.name)
}

/// The namespace's nftables tables and iptables mangle rules, as text.
fn installed(ns: &TestNetns) -> String {
    let out = ns.sh("nft list tables; iptables -w -t mangle -S 2>/dev/null");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn attach(ns: &TestNetns, extra: &[&str]) -> Proxy {
    let path = netns_path(ns);
    let mut args = vec!["--netns", path.as_str()];
    args.extend_from_slice(extra);
    let p = Proxy::start_cmd("attach", &args);
    assert!(
        p.stderr().contains("netchaos: ready"),
        "attach did not start:\n{}",
        p.stderr()
    );
    p
}

#[test]
fn attach_faults_a_namespace_without_looping_and_sigterm_removes_everything() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let host = ns.host_ip.to_string();
    let port = echo.addr.port();
    let before = client_in(&ns, &dir, &host, port);
    assert!(
        before.starts_with("ok") && seconds(&before, 2) < 0.25,
        "{before}"
    );
    let tables_before = installed(&ns);

    let events = dir.path().join("events.jsonl");
    let p = attach(
        &ns,
        &[
            "--events",
            events.to_str().unwrap(),
            "--fault",
            "latency:delay=400ms",
        ],
    );
    assert!(installed(&ns).contains("table inet netchaos"));
    let during = client_in(&ns, &dir, &host, port);
    assert!(
        during.starts_with("ok") && during.ends_with("ping"),
        "{during}"
    );
    assert!(seconds(&during, 2) >= 0.38, "the latency applies: {during}");
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");

    // One client connection, one relayed connection: the relay's own
    // upstream socket (marked) was not intercepted again.
    let opens = read_events(&events)
        .iter()
        .filter(|e| e["event"] == "open")
        .count();
    assert_eq!(opens, 1, "events: {:?}", read_events(&events));
    assert_eq!(echo.accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(err.contains("latency"), "summary: {err}");

    let left = installed(&ns);
    assert!(!left.contains("netchaos"), "left behind:\n{left}");
    assert!(!left.contains("NETCHAOS"), "left behind:\n{left}");
    assert_eq!(left, tables_before, "the namespace is as it was");
    assert!(!claim_file(&ns).exists(), "the claim file is removed");
    let after = client_in(&ns, &dir, &host, port);
    assert!(
        after.starts_with("ok") && seconds(&after, 2) < 0.25,
        "{after}"
    );
}

/// The lock file by which an attached netchaos claims `ns`.
fn claim_file(ns: &TestNetns) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(netns_path(ns)).unwrap().ino();
    std::path::PathBuf::from(format!("/run/netchaos/netns-{ino}.lock"))
}

#[test]
fn after_sigkill_attach_refuses_and_clean_removes_the_table_once() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let (host, port) = (ns.host_ip.to_string(), echo.addr.port());
    let path = netns_path(&ns);

    let p = attach(&ns, &["--fault", "latency:delay=10ms"]);
    signal(p.pid(), libc::SIGKILL);
    drop(p); // reaped
    assert!(
        installed(&ns).contains("table inet netchaos"),
        "the table stays after SIGKILL"
    );
    assert!(claim_file(&ns).exists(), "and so does the claim file");
    // Nobody serves the redirect now: the namespace's TCP is black-holed.
    let cut = client_in(&ns, &dir, &host, port);
    assert!(cut.starts_with("connect-error"), "{cut}");

    let (code, _, err) = netchaos(&["attach", "--netns", &path, "--fault", "latency:delay=1ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no longer running"), "{err}");
    assert!(
        err.contains(&format!("netchaos clean --netns {path}")),
        "{err}"
    );
    assert!(err.contains("--replace"), "{err}");

    let (code, out, err) = netchaos(&["clean", "--netns", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("removed: nftables table inet netchaos"),
        "{out}"
    );
    assert!(
        !claim_file(&ns).exists(),
        "a dead netchaos's claim file goes"
    );
    let left = installed(&ns);
    assert!(
        !left.contains("netchaos") && !left.contains("NETCHAOS"),
        "{left}"
    );
    let qdiscs = ns.sh(&format!("tc qdisc show dev {}", ns.ns_if));
    assert!(!String::from_utf8_lossy(&qdiscs.stdout).contains("4e43"));
    let (code, out, err) = netchaos(&["clean", "--netns", &path]);
    assert_eq!(code, 0, "a second clean is a no-op: {err}");
    assert!(out.contains("nothing of netchaos's"), "{out}");
    let back = client_in(&ns, &dir, &host, port);
    assert!(back.starts_with("ok"), "traffic flows again: {back}");

    // --replace starts over a dead netchaos's table.
    let p = attach(&ns, &["--fault", "latency:delay=10ms"]);
    signal(p.pid(), libc::SIGKILL);
    drop(p);
    let p = attach(&ns, &["--replace", "--fault", "latency:delay=300ms"]);
    let line = client_in(&ns, &dir, &host, port);
    assert!(seconds(&line, 2) >= 0.28, "{line}");
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    let left = installed(&ns);
    assert!(
        !left.contains("netchaos") && !left.contains("NETCHAOS"),
        "{left}"
    );

    // clean itself removes the claim file a SIGKILL leaves.
    let p = attach(&ns, &["--fault", "latency:delay=10ms"]);
    signal(p.pid(), libc::SIGKILL);
    drop(p);
    assert!(claim_file(&ns).exists());
    let (code, out, err) = netchaos(&["clean", "--netns", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed: claim file"), "{out}");
    assert!(!claim_file(&ns).exists());
}

#[test]
fn a_live_attach_is_neither_doubled_nor_cleaned() {
    let Some(ns) = setup() else { return };
    let path = netns_path(&ns);
    let p = attach(&ns, &["--fault", "latency:delay=10ms"]);
    let (code, _, err) = netchaos(&["attach", "--netns", &path, "--replace"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("another netchaos (pid {})", p.pid())),
        "{err}"
    );
    let (code, _, err) = netchaos(&["clean", "--netns", &path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is running and owns"), "{err}");
    assert!(installed(&ns).contains("table inet netchaos"));
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    assert!(!installed(&ns).contains("netchaos"));
}

#[test]
fn connect_faults_and_connect_phase_truth_in_an_attached_namespace() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let host = ns.host_ip.to_string();
    // A port nobody listens on: refused, as without netchaos.
    let closed = std::net::TcpListener::bind((ns.host_ip, 0)).unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        format!(
            "[[rules]]\nname = \"refused\"\nmatch = {{ ports = [\"{}\"] }}\n  [[rules.faults]]\n  type = \"refuse\"\n",
            echo.addr.port()
        ),
    )
    .unwrap();
    let p = attach(&ns, &["-p", profile.to_str().unwrap()]);
    let refused = client_in(&ns, &dir, &host, echo.addr.port());
    assert!(
        refused.starts_with("connect-error ConnectionRefusedError"),
        "{refused}"
    );
    let truth = client_in(&ns, &dir, &host, closed_port);
    assert!(
        truth.starts_with("connect-error ConnectionRefusedError"),
        "{truth}"
    );
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    assert_eq!(echo.accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn inbound_connections_to_a_local_port_pass_through_the_relay() {
    let Some(ns) = setup() else { return };
    let port = 20_000 + (std::process::id() % 5000) as u16;
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(format!(
            "import socket\nl=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             l.bind(('0.0.0.0', {port})); l.listen(); print('up', flush=True)\n\
             for _ in range(4):\n    c,_=l.accept(); c.sendall(c.recv(100)); c.close()"
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    server.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    let round_trip = || {
        let t = Instant::now();
        let mut c =
            std::net::TcpStream::connect_timeout(&(ns.ns_ip, port).into(), Duration::from_secs(5))
                .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"hi").unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf, b"hi");
        t.elapsed()
    };
    assert!(round_trip() < Duration::from_millis(250));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "[[rules]]\nname = \"in\"\nmatch = { direction = \"inbound\" }\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"400ms\"\n",
    )
    .unwrap();
    let portarg = port.to_string();
    let p = attach(
        &ns,
        &["--inbound", &portarg, "-p", profile.to_str().unwrap()],
    );
    let slow = round_trip();
    let (status, err) = p.stop();
    let fast = round_trip();
    let _ = server.kill();
    let _ = server.wait();
    assert!(status.success(), "{err}");
    assert!(
        slow >= Duration::from_millis(380),
        "inbound latency: {slow:?}"
    );
    assert!(
        fast < Duration::from_millis(250),
        "after detaching: {fast:?}"
    );
    assert!(err.contains("in ") && err.contains("latency"), "{err}");
    assert!(!installed(&ns).contains("netchaos"));
}

#[test]
fn attach_learns_names_from_the_namespaces_own_resolver() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    // As in a container: a default route, so that the resolver named in
    // /etc/resolv.conf is routable (netchaos redirects the query anyway).
    let route = ns.sh(&format!("ip route add default via {}", ns.host_ip));
    assert!(route.status.success(), "{route:?}");
    // The resolver lives inside the namespace, on its loopback.
    let names: Vec<String> = ["api.test", "tcp.test", "gone.test"]
        .iter()
        .map(|n| format!("{n}={}", ns.host_ip))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let dnsd = Dnsd::start_in(Some(&ns.name), &names);
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "[[rules]]\nname = \"api\"\nmatch = { dst = [\"api.test\"] }\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"400ms\"\n\
         [[rules]]\nname = \"dns\"\n  [[rules.faults]]\n  type = \"dns_error\"\n  name = \"gone.test\"\n\
         [[rules.faults]]\n  type = \"dns_truncate\"\n  name = \"tcp.test\"\n",
    )
    .unwrap();
    let p = attach(
        &ns,
        &[
            "--resolv-conf",
            &dnsd.resolv,
            "-p",
            profile.to_str().unwrap(),
        ],
    );
    // Whatever resolver the namespace's resolv.conf names, UDP port 53 goes
    // to netchaos's forwarder, which asks the one in --resolv-conf.
    let by_name = client_in(&ns, &dir, "api.test", echo.addr.port());
    // DNS faults in the attached namespace: NXDOMAIN in the resolver's
    // place, and a truncated answer retried over TCP — dialled from inside
    // the namespace to its own resolver.
    let gai_py = dir.path().join("gai.py");
    std::fs::write(
        &gai_py,
        "import socket\nfor n in ('gone.test', 'tcp.test'):\n    try:\n        print(n, socket.getaddrinfo(n, 80, socket.AF_INET)[0][4][0])\n    except socket.gaierror as e:\n        print(n, e.errno)\n",
    )
    .unwrap();
    let gai = ns.sh(&format!(
        "RES_OPTIONS='timeout:2 attempts:1' timeout 20 python3 {}",
        gai_py.display()
    ));
    let gai = String::from_utf8_lossy(&gai.stdout).to_string();
    let (status, err) = p.stop();
    drop(dnsd);
    assert!(status.success(), "{err}");
    assert!(by_name.starts_with("ok"), "{by_name}");
    assert!(seconds(&by_name, 2) >= 0.38, "matched by name: {by_name}");
    assert!(gai.contains("gone.test -2"), "{gai}\n{err}");
    assert!(
        gai.contains(&format!("tcp.test {}", ns.host_ip)),
        "{gai}\n{err}"
    );
    assert!(err.contains("DNS queries:"), "{err}");
}

#[test]
fn attach_detaches_after_its_duration() {
    let Some(ns) = setup() else { return };
    let path = netns_path(&ns);
    let t = Instant::now();
    let (code, _, err) = netchaos(&[
        "attach",
        "--netns",
        &path,
        "--duration",
        "1s",
        "--fault",
        "latency:delay=10ms",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert!(err.contains("netchaos summary"), "{err}");
    assert!(!installed(&ns).contains("netchaos"));
}

/// A client in the namespace with two connections open through the
/// relay: `a` in the middle of a slow download, `b` an idle pooled one.
/// It says `ready`, waits for the file ARGV[3], then finishes both.
const TWO_OPEN: &str = r#"
import os, socket, sys, time
host, port, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    a = socket.create_connection((host, port), timeout=15)
    a.sendall(b"slow")
    b = socket.create_connection((host, port), timeout=15)
    b.sendall(b"echoone")
    one = b.recv(100)
    got = b""
    while len(got) < 4096:
        got += a.recv(65536)
    print("ready", one.decode(), flush=True)
    for _ in range(300):
        if os.path.exists(go):
            break
        time.sleep(0.05)
    while len(got) < 65536:
        d = a.recv(65536)
        if not d:
            break
        got += d
    b.sendall(b"two")
    two = b.recv(100)
    print("done", len(got), two.decode(), flush=True)
except OSError as e:
    print("error", type(e).__name__, e, len(got) if "got" in dir() else -1, flush=True)
"#;

#[test]
fn ending_attach_lets_open_connections_finish_through_the_relay() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    // "slow": 64 KiB in 16 pieces over ~2.4 s; "echo": echoes the rest.
    let server = Server::start(&format!("{}:0", ns.host_ip), |mut s| {
        let mut what = [0u8; 4];
        if s.read_exact(&mut what).is_err() {
            return;
        }
        if &what == b"slow" {
            for _ in 0..16 {
                if s.write_all(&[b'x'; 4096]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        } else {
            if &what != b"echo" && s.write_all(&what).is_err() {
                return;
            }
            let mut buf = [0u8; 1024];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    });
    let events = dir.path().join("events.jsonl");
    let p = attach(
        &ns,
        &[
            "--events",
            events.to_str().unwrap(),
            "--drain",
            "20s",
            "--fault",
            "latency:delay=20ms",
        ],
    );
    let go = dir.path().join("go");
    let host = ns.host_ip.to_string();
    let port = server.addr.port().to_string();
    let mut client = PythonBg::in_netns(&ns.name, TWO_OPEN, &[&host, &port, go.to_str().unwrap()]);
    assert_eq!(client.line(), "ready one");

    // Detach while both are open: the redirect goes at once (a new
    // connection goes straight to the server) ...
    let rules =
        || String::from_utf8_lossy(&ns.sh("nft list table inet netchaos").stdout).into_owned();
    assert!(rules().contains("redirect"), "{}", rules());
    p.term();
    let t = Instant::now();
    while rules().contains("redirect") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", rules());
        std::thread::sleep(Duration::from_millis(20));
    }
    let direct = client_in(&ns, &dir, &host, server.addr.port());
    assert!(direct.starts_with("ok"), "{direct}");
    // ... and the two open ones finish through the relay.
    std::fs::write(&go, "").unwrap();
    let done = client.line();
    assert_eq!(done, "done 65536 two", "{}", p.stderr());
    let (status, err) = p.wait(Duration::from_secs(15));
    assert!(status.success(), "{err}");
    let left = installed(&ns);
    assert!(!left.contains("netchaos"), "left behind:\n{left}");
    // Two connections went through the relay; the one after detaching
    // did not.
    let opens = read_events(&events)
        .iter()
        .filter(|e| e["event"] == "open")
        .count();
    assert_eq!(opens, 2, "{err}");
    assert_eq!(server.accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[test]
fn attach_without_privileges_names_the_missing_capabilities() {
    let Some(ns) = setup() else { return };
    if missing_tool("setpriv") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("netchaos");
    std::fs::copy(BIN, &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(&bin)
            .args(args)
            .current_dir("/")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let path = netns_path(&ns);
    let (code, err) = nobody(&["attach", "--netns", &path, "--fault", "latency:delay=1ms"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("CAP_SYS_ADMIN") && err.contains("CAP_NET_ADMIN"),
        "{err}"
    );
    assert!(err.contains("Nothing was changed"), "{err}");
    let (code, err) = nobody(&["run", "--in-place", "--", "true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("CAP_NET_ADMIN") && !err.contains("CAP_SYS_ADMIN"),
        "{err}"
    );
    assert!(!installed(&ns).contains("netchaos"));
}

/// Runs `script` in a throwaway network namespace (`unshare -n`) that has
/// a loopback HTTP-ish echo server on `port`.
fn in_throwaway_ns(script: &str) -> (i32, String, String) {
    let out = Command::new("timeout")
        .args(["60", "unshare", "-n", "sh", "-c", script])
        .env("NC", BIN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `run --in-place`'s command keeps the open-files soft limit it was
/// given, as under `run` (tests/run.rs), though netchaos lifts its own.
#[test]
fn run_in_place_keeps_the_commands_open_files_limit() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: run --in-place needs root (CAP_NET_ADMIN)");
        return;
    }
    if missing_tool("unshare") || missing_tool("nft") {
        return;
    }
    let (code, out, err) = in_throwaway_ns(
        r#"ip link set lo up; ulimit -S -n 200; "$NC" run --in-place -- sh -c 'ulimit -n'"#,
    );
    assert_eq!((code, out.trim()), (0, "200"), "{err}");
}

#[test]
fn run_in_place_faults_the_current_namespace_and_cleans_up() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: run --in-place needs root (CAP_NET_ADMIN)");
        return;
    }
    for tool in ["unshare", "nft", "python3", "curl"] {
        if missing_tool(tool) {
            return;
        }
    }
    let script = r#"
set -e
ip link set lo up
python3 -c '
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 18099)); l.listen()
for _ in range(3):
    c, _ = l.accept(); c.recv(1000)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"); c.close()
' &
sleep 0.5
curl -sS -o /dev/null -w 'before %{time_total}\n' http://127.0.0.1:18099/
"$NC" run --in-place --fault latency:delay=400ms -- \
    curl -sS -o /dev/null -w 'during %{time_total}\n' http://127.0.0.1:18099/
echo "tables: [$(nft list tables)]"
curl -sS -o /dev/null -w 'after %{time_total}\n' http://127.0.0.1:18099/
"#;
    let (code, out, err) = in_throwaway_ns(script);
    assert_eq!(code, 0, "{out}\n{err}");
    let t = |name: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line in {out}\n{err}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(t("before") < 0.25, "{out}");
    assert!(t("during") >= 0.38, "{out}");
    assert!(t("after") < 0.25, "{out}");
    assert!(out.contains("tables: []"), "cleaned up: {out}");
}

/// A pod's sidecar: `run --in-place` in the namespace `ns`, in a PID
/// namespace (and /proc) of its own, as a container runtime starts it;
/// killed (with what it started) when dropped.
struct Sidecar {
    child: std::process::Child,
    /// netchaos's pid as the test sees it.
    pid: u32,
    log: std::path::PathBuf,
}

impl Sidecar {
    fn start(ns: &TestNetns, dir: &tempfile::TempDir, n: u32, fault: &str) -> Sidecar {
        let log = dir.path().join(format!("sidecar-{n}.log"));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
            ])
            .args([
                BIN,
                "run",
                "--in-place",
                "--fault",
                fault,
                "--",
                "sleep",
                "60",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut side = Sidecar { child, pid: 0, log };
        let t = Instant::now();
        // Ready once it says its seed (after its table is in: a table left
        // by a killed one does not count) and its pid is known.
        while side.pid == 0
            || !side.log().contains("netchaos: seed")
            || !installed(ns).contains("table inet netchaos")
        {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the sidecar did not start:\n{}",
                side.log()
            );
            if let Some(status) = side.child.try_wait().unwrap() {
                panic!("the sidecar exited ({status}):\n{}", side.log());
            }
            let unshare = side.child.id();
            side.pid = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                .ok()
                .and_then(|c| c.split_whitespace().next().and_then(|p| p.parse().ok()))
                .unwrap_or(0);
            std::thread::sleep(Duration::from_millis(50));
        }
        side
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Signals netchaos and waits (bounded) for the sidecar to end.
    fn end(&mut self, sig: i32) -> std::process::ExitStatus {
        signal(self.pid, sig);
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(t.elapsed() < Duration::from_secs(15), "{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // (Never kill(0, …): that is the test's own process group.
            // unshare --kill-child ends netchaos with unshare anyway.)
            if self.pid != 0 {
                signal(self.pid, libc::SIGKILL);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn a_sidecar_killed_in_its_own_pid_namespace_recovers_when_restarted() {
    let Some(ns) = setup() else { return };
    if missing_tool("unshare") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let (host, port) = (ns.host_ip.to_string(), echo.addr.port());

    let mut first = Sidecar::start(&ns, &dir, 1, "latency:delay=10ms");
    first.end(libc::SIGKILL);
    assert!(
        installed(&ns).contains("table inet netchaos"),
        "the table stays after SIGKILL"
    );
    let cut = client_in(&ns, &dir, &host, port);
    assert!(
        cut.starts_with("connect-error"),
        "the app is cut off: {cut}"
    );

    // The same sidecar, restarted (another PID namespace, where the old
    // owner's pid means nothing): it tells the owner is gone and takes
    // over by itself.
    let mut second = Sidecar::start(&ns, &dir, 2, "latency:delay=300ms");
    let log = second.log();
    assert!(log.contains("no longer running"), "{log}");
    let line = client_in(&ns, &dir, &host, port);
    assert!(
        line.starts_with("ok") && seconds(&line, 2) >= 0.28,
        "the app's connections work again, faulted: {line}"
    );

    // A live sidecar in another PID namespace is still told apart from
    // debris: neither a second one nor `clean` takes its table.
    let path = netns_path(&ns);
    let (code, _, err) = netchaos(&["clean", "--netns", &path]);
    assert_ne!(code, 0, "clean refuses a live owner: {err}");
    assert!(err.contains("is running"), "{err}");

    // (The command's status is passed on: `sleep` ended by the SIGTERM.)
    let status = second.end(libc::SIGTERM);
    assert_eq!(status.code(), Some(143), "{}", second.log());
    let left = installed(&ns);
    assert!(!left.contains("netchaos"), "left behind:\n{left}");
    let back = client_in(&ns, &dir, &host, port);
    assert!(back.starts_with("ok") && seconds(&back, 2) < 0.25, "{back}");
}

#[test]
fn attach_finds_a_container_by_id_and_a_pod_by_name_from_the_node() {
    let Some(ns) = setup() else { return };
    let Some(mut cg) = RuntimeCgroups::new("attach") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let (host, port) = (ns.host_ip.to_string(), echo.addr.port());
    let id = format!(
        "{:016x}",
        0x4e43_0000_0000_0000u64 + u64::from(std::process::id())
    )
    .repeat(4);
    // Podman's monitor for that container, first (a lower pid): it runs in
    // the node's namespace and must not be taken for the container.
    cg.process_in(&format!("machine.slice/libpod-conmon-{id}.scope"), None);
    cg.process_in(&format!("machine.slice/libpod-{id}.scope"), Some(&ns.name));

    let p = Proxy::start_cmd(
        "attach",
        &["--container", &id[..12], "--fault", "latency:delay=300ms"],
    );
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    let line = client_in(&ns, &dir, &host, port);
    assert!(
        line.starts_with("ok") && seconds(&line, 2) >= 0.28,
        "the container's traffic is faulted: {line}\n{}",
        p.stderr()
    );
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");

    // A pod, by NAMESPACE/NAME: the kubelet's log directory names its UID,
    // the systemd cgroup driver's slices carry it.
    let uid = format!("0a1b2c3d-0000-4000-8000-{:012x}", std::process::id());
    let slice = uid.replace('-', "_");
    // CRI-O may put its monitor in the pod's cgroup (conmon_cgroup =
    // "pod"): first (a lower pid), in the node's namespace, it is not the
    // pod.
    cg.process_in(
        &format!(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice}.slice/crio-conmon-{}.scope",
            "cd".repeat(32)
        ),
        None,
    );
    cg.process_in(
        &format!(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice}.slice/cri-containerd-{}.scope",
            "ab".repeat(32)
        ),
        Some(&ns.name),
    );
    let pods = dir.path().join("pods");
    std::fs::create_dir_all(pods.join(format!("shop_checkout_{uid}"))).unwrap();
    let pods_env = [("NETCHAOS_POD_LOG_DIR", pods.to_str().unwrap())];
    let p = Proxy::start_env(
        "attach",
        &["--pod", "shop/checkout", "--fault", "latency:delay=300ms"],
        &pods_env,
    );
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    let line = client_in(&ns, &dir, &host, port);
    assert!(
        line.starts_with("ok") && seconds(&line, 2) >= 0.28,
        "{line}"
    );
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");

    // clean takes the same names; unknown ones are usage errors.
    let (code, out, err) = netchaos(&["clean", "--container", &id[..12]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing of netchaos's"), "{out}");
    let (code, _, err) = netchaos(&["attach", "--container", "0123456789ab"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no running process belongs to a container"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["attach", "--pod", "shop/nope"])
        .envs(pods_env)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no such pod"), "{err}");
}

/// Asserts the command's report: no CAP_NET_ADMIN in any set, nft denied,
/// its exit code passed on, and nothing left after.
/// `bounding`: CAP_NET_ADMIN is gone from the bounding set too (else
/// no_new_privs must be set, so that exec cannot hand it back).
fn assert_command_locked_out(out: &str, bounding: bool) {
    assert!(out.contains("list: denied"), "{out}");
    assert!(out.contains("delete: denied"), "{out}");
    assert!(out.contains("exit 7"), "the command's exit code: {out}");
    assert!(out.contains("tables: []"), "{out}");
    let caps: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
    assert_eq!(caps.len(), 4, "{out}");
    if !bounding {
        assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    }
    for line in caps
        .into_iter()
        .filter(|l| bounding || !l.starts_with("CapBnd"))
    {
        let hex = line.split_whitespace().nth(1).unwrap();
        let caps = u64::from_str_radix(hex, 16).unwrap();
        assert_eq!(caps & (1 << 12), 0, "CAP_NET_ADMIN held: {line}");
    }
}

const LOCKED_OUT: &str = r#"
ip link set lo up
$PREFIX "$NC" run --in-place --fault latency:delay=1ms -- sh -c '
    grep -E "^(Cap(Eff|Prm|Bnd|Amb)|NoNewPrivs)" /proc/self/status
    nft list tables >/dev/null 2>&1 && echo "list: allowed" || echo "list: denied"
    nft delete table inet netchaos >/dev/null 2>&1 && echo "delete: allowed" || echo "delete: denied"
    exit 7'
echo "exit $?"
echo "tables: [$(nft list tables)]"
"#;

#[test]
fn the_in_place_command_cannot_see_or_change_the_rules() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: run --in-place needs root (CAP_NET_ADMIN)");
        return;
    }
    for tool in ["unshare", "nft"] {
        if missing_tool(tool) {
            return;
        }
    }
    let (code, out, err) = in_throwaway_ns(&LOCKED_OUT.replace("$PREFIX", ""));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_command_locked_out(&out, true);
}

/// A container that adds NET_ADMIN alone (Kubernetes `drop: [ALL]`,
/// `add: [NET_ADMIN]`) has no CAP_SETPCAP to shrink the bounding set:
/// netchaos falls back to no_new_privs, and the command still holds no
/// CAP_NET_ADMIN.
#[test]
fn without_cap_setpcap_the_in_place_command_is_still_locked_out() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: run --in-place needs root (CAP_NET_ADMIN)");
        return;
    }
    for tool in ["unshare", "nft", "setpriv"] {
        if missing_tool(tool) {
            return;
        }
    }
    let script = LOCKED_OUT.replace("$PREFIX", "setpriv --bounding-set=-setpcap");
    let (code, out, err) = in_throwaway_ns(&script);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_command_locked_out(&out, false);
}

#[test]
fn a_missing_namespace_is_a_usage_error() {
    let (code, _, err) = netchaos(&["attach", "--netns", "/nonexistent/netns"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no such file"), "{err}");
    let (code, _, err) = netchaos(&["clean", "--pid", "999999999"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no such process"), "{err}");
    let (code, _, err) = netchaos(&["run", "--inbound", "80", "--", "true"]);
    assert_eq!(code, 2, "--inbound needs --in-place: {err}");
}

#[test]
fn under_attach_rules_are_proxies_of_the_control_api() {
    let Some(ns) = setup() else { return };
    let dir = tempfile::tempdir().unwrap();
    let echo = host_echo(&ns);
    let host = ns.host_ip.to_string();
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        format!(
            "[[rules]]\nname = \"backend\"\nmatch = {{ ports = [\"{}\"] }}\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"1ms\"\n",
            echo.addr.port()
        ),
    )
    .unwrap();
    let p = attach(
        &ns,
        &["--api", "127.0.0.1:0", "-p", profile.to_str().unwrap()],
    );
    let u = p.url();
    let first = client_in(&ns, &dir, &host, echo.addr.port());
    assert!(first.starts_with("ok"), "{first}");
    let (st, v) = http("GET", &format!("{u}/proxies/backend"), None, &[]);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["listen"], "transparent");
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies/backend/toxics"),
        Some(r#"{"type": "refuse"}"#),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    let second = client_in(&ns, &dir, &host, echo.addr.port());
    assert!(
        second.starts_with("connect-error ConnectionRefusedError"),
        "{second}"
    );
    let (st, metrics) = http("GET", &format!("{u}/metrics"), None, &[]);
    assert_eq!(st, 200);
    assert!(
        metrics.as_str().unwrap().contains("proxy=\"attach\""),
        "{metrics}"
    );
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    assert!(!installed(&ns).contains("netchaos"));
}

#[test]
fn attach_terminates_https_with_a_ca_the_namespace_already_trusts() {
    let Some(ns) = setup() else { return };
    if missing_tool("curl") {
        return;
    }
    let host = ns.host_ip.to_string();
    // The upstream's own CA, and the CA "the container" trusts.
    let upstream_ca = TestCa::for_names(&[&host]);
    let trusted = TestCa::new();
    let web = Httpd::start_on(&host, Some(&upstream_ca));
    let url = format!("https://{host}:{}/p/4", web.port);
    let curl = format!(
        "for i in 1 2; do curl -sS --cacert {} -o /dev/null -w '%{{http_code}} ' {url}; done",
        trusted.ca()
    );
    let p = attach(
        &ns,
        &[
            "--tls-ca",
            &trusted.ca(),
            "--tls-key",
            &trusted.path("ca.key").display().to_string(),
            "--upstream-ca",
            &upstream_ca.ca(),
            "--fault",
            "http_status:status=503,first=1",
        ],
    );
    let out = ns.sh(&curl);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "503 200",
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        p.stderr()
    );
    let (status, err) = p.stop();
    assert!(status.success(), "{err}");
    assert!(err.contains("http_status 503: 1"), "{err}");
    // Without a CA of its own, attach leaves HTTPS alone: the client's
    // connection reaches the upstream untouched (its certificate, verified
    // against the upstream's CA).
    let p = attach(&ns, &["--fault", "http_status:status=503"]);
    let plain = format!(
        "curl -sS --cacert {} -o /dev/null -w '%{{http_code}}' {url}",
        upstream_ca.ca()
    );
    let out = ns.sh(&plain);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200");
    drop(p);
}

/// `attach --mock`: in an attached namespace (a container's stand-in),
/// the SDK's lookups of the provider's host are answered with the mock's
/// address and its requests answered by the mock — plain HTTP as it is,
/// HTTPS with a CA the namespace already trusts — and nothing else is
/// dialled; on detach the mock stops with the relay.
#[test]
fn attach_mock_answers_in_the_providers_place() {
    let Some(ns) = setup() else { return };
    if missing_tool("curl") {
        return;
    }
    if python("import anthropic", &[]).0 != 0 {
        assert!(
            !in_ci(),
            "anthropic is required in CI (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: python3 has no anthropic");
        return;
    }
    // As in a container: a default route (the mocked address must be
    // routable for the SYN to leave), and a resolver file naming a port
    // where nothing answers: only the mock's names resolve.
    let route = ns.sh(&format!("ip route add default via {}", ns.host_ip));
    assert!(route.status.success(), "{route:?}");
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.1:9\n").unwrap();
    let trusted = TestCa::new();
    let events = dir.path().join("events.jsonl");
    let p = attach(
        &ns,
        &[
            "--mock",
            "anthropic",
            "--mock-ttft",
            "5ms",
            "--resolv-conf",
            resolv.to_str().unwrap(),
            "--tls-ca",
            &trusted.ca(),
            "--tls-key",
            &trusted.path("ca.key").display().to_string(),
            "--events",
            events.to_str().unwrap(),
            "--fault",
            "http_status:status=529,first=1",
        ],
    );
    let script = dir.path().join("sdk.py");
    std::fs::write(
        &script,
        r#"
import anthropic
a = anthropic.Anthropic(base_url="http://api.anthropic.com", api_key="dummy", max_retries=0)
ask = [{"role": "user", "content": "hi"}]
try:
    a.messages.create(model="claude-x", max_tokens=3, messages=ask)
except anthropic.APIStatusError as e:
    print("first", type(e).__name__)
m = a.messages.create(model="claude-x", max_tokens=3, messages=ask)
print("then", m.stop_reason, m.usage.output_tokens)
"#,
    )
    .unwrap();
    let sdk = ns.sh(&format!("timeout 30 python3 {}", script.display()));
    let curl = ns.sh(&format!(
        "curl -sS --cacert {} https://api.anthropic.com/v1/messages/count_tokens \
         -H 'x-api-key: k' -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' \
         -d '{{\"model\":\"claude-x\",\"messages\":[{{\"role\":\"user\",\"content\":\"a b\"}}]}}'",
        trusted.ca()
    ));
    let (status, err) = p.stop();
    let sdk_out = String::from_utf8_lossy(&sdk.stdout).to_string();
    assert_eq!(
        sdk_out.lines().collect::<Vec<_>>(),
        ["first OverloadedError", "then max_tokens 3"],
        "{}\n{err}",
        String::from_utf8_lossy(&sdk.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&curl.stdout).trim(),
        r#"{"input_tokens":3}"#,
        "{}\n{err}",
        String::from_utf8_lossy(&curl.stderr)
    );
    assert!(status.success(), "{err}");
    assert!(err.contains("answered by the mock: 2 request(s)"), "{err}");
    let log = read_events(&events);
    let opens: Vec<_> = log.iter().filter(|e| e["event"] == "open").collect();
    assert!(!opens.is_empty());
    assert!(
        opens.iter().all(|o| o["mock"] == "anthropic"),
        "only the mock was dialled: {opens:?}"
    );
    assert!(!log.iter().any(|e| e["event"] == "error"), "{log:?}");
    // Nothing of it is left running: the mock's port closed with attach.
    assert!(!installed(&ns).contains("netchaos"), "{}", installed(&ns));
}
