//! `netchaos run -- CMD` with real clients (curl, Python) wrapped in the
//! namespace, as root and as an unprivileged user: interception, host
//! loopback, IPv6, DNS names, --expose, exit codes, signals, privileges,
//! and that nothing is left behind.

mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

#[test]
fn curl_reaches_host_loopback_through_a_latency_fault() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let http = Server::http(b"hello from the host");
    let url = format!("http://{}/", http.addr);
    let script = format!("readlink /proc/self/ns/net; curl -sS -w ' %{{time_total}}' {url}");
    let (code, out, err) = wrapped(&["--fault", "latency:delay=300ms"], &["sh", "-c", &script]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let ns = lines.next().unwrap().to_string();
    let rest = lines.next().unwrap();
    assert!(rest.starts_with("hello from the host "), "{rest}");
    let secs: f64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (0.28..2.0).contains(&secs),
        "curl took {secs}s with 300 ms of latency"
    );
    assert!(err.contains("cli   latency"), "{err}");
    assert_nothing_left(&ns);
}

const PY_RESET: &str = r#"
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

#[test]
fn python_gets_econnreset_after_the_stated_bytes() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let source = Server::source(200_000);
    let (ip, port) = (source.addr.ip().to_string(), source.addr.port().to_string());
    let (code, out, err) = wrapped(
        &["--fault", "reset:after_bytes=5000"],
        &["python3", "-c", PY_RESET, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "5000 ECONNRESET");
}

#[test]
fn ipv6_loopback_is_intercepted_too() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        assert!(!in_ci(), "IPv6 loopback is required in CI");
        eprintln!("SKIPPED: no IPv6 loopback");
        return;
    }
    let server = Server::start("[::1]:0", |mut s| {
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nv6");
    });
    let url = format!("http://[::1]:{}/", server.addr.port());
    let (code, out, err) = wrapped(
        &["--fault", "latency:delay=200ms"],
        &["curl", "-sS", "-w", " %{time_total}", &url],
    );
    assert_eq!(code, 0, "{err}");
    let secs: f64 = out.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(out.starts_with("v6 ") && secs >= 0.18, "{out}");
}

#[test]
fn a_hostname_rule_matches_through_the_dns_forwarder() {
    if !need(&["python3", "curl", "ip", "nft"]) {
        return;
    }
    // api.test resolves to 127.0.0.2 (our server); 127.0.0.1 stays unnamed.
    let http = Server::start("127.0.0.2:0", |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    });
    let port = http.addr.port();
    let dns = Dnsd::start(&["api.test=127.0.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "[[rules]]\nname = \"api\"\nmatch = { dst = [\"api.test\"] }\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"400ms\"\n",
    )
    .unwrap();
    let events = dir.path().join("events.jsonl");
    let script = format!(
        "curl -sS -o /dev/null -w '%{{time_total}}\\n' http://api.test:{port}/ && \
         curl -sS -o /dev/null -w '%{{time_total}}\\n' http://127.0.0.2:{port}/"
    );
    let (code, out, err) = wrapped(
        &[
            "--events",
            events.to_str().unwrap(),
            "--resolv-conf",
            &dns.resolv,
            "-p",
            profile.to_str().unwrap(),
        ],
        &["sh", "-c", &script],
    );
    drop(dns);
    assert_eq!(code, 0, "{err}");
    let times: Vec<f64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(times[0] >= 0.38, "by name: {times:?}");
    // The address was learned from the name, so it matches by address too.
    assert!(
        times[1] >= 0.38,
        "the address api.test resolved to: {times:?}"
    );
    let ev = read_events(&events);
    let f = ev
        .iter()
        .find(|e| e["event"] == "fault")
        .expect("a fault event");
    assert_eq!(f["rule"], "api");
    assert_eq!(f["host"], "api.test");
}

#[test]
fn the_exit_code_is_the_commands() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let (code, _, _) = wrapped(&[], &["sh", "-c", "exit 7"]);
    assert_eq!(code, 7);
    let (code, _, _) = wrapped(&[], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(code, 128 + 9, "a signal N becomes 128+N");
    let (code, _, err) = wrapped(&[], &["/nonexistent/command"]);
    assert_eq!(code, 127);
    assert!(
        err.contains("cannot run /nonexistent/command: No such file or directory"),
        "{err}"
    );
}

#[test]
fn sigterm_to_netchaos_reaches_the_command() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let mut child = Command::new(BIN)
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    signal(child.id(), libc::SIGTERM);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(rest, "got TERM\n");
    assert_eq!(status.code(), Some(3));
}

#[test]
fn expose_carries_an_inbound_connection_with_an_inbound_fault() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let host_port = unused_port();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "[[rules]]\nname = \"in\"\nmatch = { direction = \"inbound\" }\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"300ms\"\n\
         [[rules]]\nname = \"out\"\nmatch = { direction = \"outbound\" }\n  [[rules.faults]]\n  type = \"reset\"\n",
    )
    .unwrap();
    // An echo server inside the namespace, on its own port 9000.
    let server = r#"
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 9000)); l.listen()
print("listening", flush=True)
c, _ = l.accept()
c.sendall(c.recv(100))
c.close()
"#;
    let mut child = Command::new(BIN)
        .args([
            "run",
            "-p",
            profile.to_str().unwrap(),
            "--expose",
            &format!("{host_port}:9000"),
            "--",
            "python3",
            "-c",
            server,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "listening\n");
    let mut c = connect(format!("127.0.0.1:{host_port}").parse().unwrap());
    let t = Instant::now();
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).unwrap();
    let rtt = t.elapsed();
    assert_eq!(&buf, b"ping");
    assert!(
        rtt >= Duration::from_millis(280),
        "inbound latency applied: {rtt:?}"
    );
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("in    latency"), "{err}");
    assert!(
        !err.contains("reset"),
        "the outbound rule must not touch inbound connections: {err}"
    );
}

#[test]
fn a_service_inside_keeps_its_loopback_connections_inside() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    // The host listens on a port, and so does the wrapped command: the
    // command's own client must reach the inner one.
    let host = Server::start("127.0.0.1:0", |mut s| {
        let _ = s.write_all(b"host");
    });
    let port = host.addr.port().to_string();
    let script = r#"
import socket, sys, threading
port = int(sys.argv[1])
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port)); l.listen()
def serve():
    c, _ = l.accept(); c.sendall(b"inner"); c.close()
threading.Thread(target=serve, daemon=True).start()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
print(s.recv(100).decode())
"#;
    let (code, out, err) = wrapped(
        &["--fault", "latency:delay=1ms"],
        &["python3", "-c", script, &port],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "inner");
    assert!(
        err.contains("connections: 1"),
        "it still went through the relay: {err}"
    );
}

#[test]
fn the_command_cannot_see_or_change_the_rules() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let script = "grep -E '^Cap(Eff|Bnd|Amb)' /proc/self/status; nft list ruleset >/dev/null 2>&1 && echo NFT-LISTED; nft delete table inet netchaos >/dev/null 2>&1 && echo NFT-DELETED; echo done";
    let (code, out, err) = wrapped(&[], &["sh", "-c", script]);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("done\n") && !out.contains("NFT-"), "{out}");
    let cap = |name: &str| -> u64 {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    const NET_ADMIN: u64 = 1 << 12;
    assert_eq!(cap("CapEff:") & NET_ADMIN, 0, "{out}");
    assert_eq!(cap("CapAmb:"), 0, "{out}");
    if is_root() {
        assert_eq!(
            cap("CapBnd:") & NET_ADMIN,
            0,
            "CAP_NET_ADMIN must leave the bounding set: {out}"
        );
    } else {
        assert_eq!(cap("CapEff:"), 0, "rootless: no capabilities at all: {out}");
    }
}

#[test]
fn duration_stops_fault_injection_but_not_traffic() {
    if !need(&["curl", "ip", "nft"]) {
        return;
    }
    let http = Server::http(b"x");
    let url = format!("http://{}/", http.addr);
    let script = format!(
        "curl -sS -o /dev/null -w '%{{time_total}}\\n' {url}; sleep 2.2; curl -sS -o /dev/null -w '%{{time_total}}\\n' {url}"
    );
    let (code, out, err) = wrapped(
        &["--duration", "2s", "--fault", "latency:delay=300ms"],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    let t: Vec<f64> = out.lines().map(|l| l.parse().unwrap()).collect();
    assert!(t[0] >= 0.28, "during the experiment: {t:?}");
    assert!(t[1] < 0.2, "after --duration: {t:?}");
}

#[test]
fn unprivileged_users_wrap_commands_too() {
    let Some(nobody) = Nobody::new() else { return };
    if !need(&["python3", "curl", "ip", "nft"]) {
        return;
    }
    let http = Server::http(b"hi");
    let url = format!("http://{}/", http.addr);
    let script = format!("readlink /proc/self/ns/net; id -u; curl -sS -w ' %{{time_total}}' {url}");
    let (code, out, err) = wrapped_with(
        nobody.command(),
        &["--fault", "latency:delay=300ms"],
        &["sh", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[1], "65534",
        "the command keeps the invoking user's uid"
    );
    let secs: f64 = lines[2].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(lines[2].starts_with("hi ") && secs >= 0.28, "{out}");
    assert_nothing_left(lines[0]);

    let source = Server::source(100_000);
    let (ip, port) = (source.addr.ip().to_string(), source.addr.port().to_string());
    let (code, out, err) = wrapped_with(
        nobody.command(),
        &["--fault", "reset:after_bytes=1000"],
        &["python3", "-c", PY_RESET, &ip, &port],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "1000 ECONNRESET");

    let (code, _, _) = wrapped_with(nobody.command(), &[], &["sh", "-c", "exit 9"]);
    assert_eq!(code, 9);

    // The SYN gate works rootless too: a refusal and a connect timeout.
    let (code, _, err) = wrapped_with(
        nobody.command(),
        &["--fault", "refuse"],
        &["curl", "-sS", &url],
    );
    assert_eq!(code, 7, "{err}");
    let (code, _, err) = wrapped_with(
        nobody.command(),
        &["--fault", "connect_timeout"],
        &["curl", "-sS", "--connect-timeout", "1", &url],
    );
    assert_eq!(code, 28, "{err}");
    assert!(err.contains("Failed to connect"), "{err}");
}

#[test]
fn disabled_user_namespaces_are_explained_and_the_command_never_runs() {
    let Some(nobody) = Nobody::new() else { return };
    if !need(&["python3"]) {
        return;
    }
    // Inside a user namespace of our own, limit nested user namespaces to
    // 0 (this sysctl is per namespace, so the machine is untouched), then
    // run netchaos as an unprivileged user there.
    let marker = nobody.dir.path().join("ran");
    let inner = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid=65534 --regid=65534 --clear-groups {} run -- touch {}",
        nobody.dir.path().join("netchaos").display(),
        marker.display()
    );
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/userns.py"
        ))
        .args(["sh", "-c", &inner])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("user.max_user_namespaces is 0"), "{err}");
    assert!(err.contains("The command was not run"), "{err}");
    assert!(!marker.exists(), "the command ran");

    // The demo falls back to an in-process client there, and says why.
    // (Its report goes to a directory of nobody's in the test's, removed
    // with it.)
    let reports = nobody.dir.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    std::os::unix::fs::chown(&reports, Some(65534), Some(65534)).unwrap();
    let inner = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid=65534 --regid=65534 --clear-groups {} demo --only healthy --report {}",
        nobody.dir.path().join("netchaos").display(),
        reports.join("report.html").display()
    );
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/userns.py"
        ))
        .args(["sh", "-c", &inner])
        .current_dir("/")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("note: `netchaos run` is not available here"),
        "{text}"
    );
    assert!(text.contains("user.max_user_namespaces is 0"), "{text}");
    assert!(text.contains("ok (HTTP 200, complete)"), "{text}");
}

#[test]
fn duration_says_when_the_faults_stop() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let (code, _, err) = wrapped(
        &["--duration", "300ms", "--fault", "latency:delay=1ms"],
        &["sleep", "1"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("--duration 300ms: the faults stop now"),
        "{err}"
    );
    assert!(
        err.contains("--duration: the faults stopped 300ms after the start"),
        "{err}"
    );
}

#[test]
fn rootless_run_finds_its_tools_on_a_stock_user_path() {
    let Some(nobody) = Nobody::new() else {
        return;
    };
    if !need(&["curl"]) {
        return;
    }
    let http = Server::http(b"through the namespace");
    let mut c = nobody.command();
    // Debian's login PATH for ordinary users: no /usr/sbin, where nft and
    // ip live.
    c.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/");
    let (code, out, err) = wrapped_with(
        c,
        &["--fault", "latency:delay=200ms"],
        &[
            "curl",
            "-sS",
            "-w",
            " %{time_total}",
            &format!("http://{}/", http.addr),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (body, secs) = out.rsplit_once(' ').unwrap();
    assert_eq!(body, "through the namespace");
    assert!(secs.parse::<f64>().unwrap() >= 0.19, "{out}");
}

/// `c` started with a soft open-files limit of 200.
fn with_soft_nofile_200(mut c: Command) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: getrlimit and setrlimit are async-signal-safe syscalls on one
    // struct on the child's stack.
    unsafe {
        c.pre_exec(|| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
            l.rlim_cur = 200;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// The wrapped command keeps the open-files limit it was given: netchaos
/// lifts its own soft limit to the hard one for its connections, and used
/// to hand that to the command too (1,024 became 1,048,576 on a stock
/// system: a difference select()-based code, and programs that close
/// every descriptor up to the limit before they exec, notice). As root
/// and rootless (`--in-place`: tests/attach.rs).
#[test]
fn the_command_keeps_its_open_files_limit() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let limit = ["sh", "-c", "ulimit -n"];
    let (code, out, err) = wrapped_with(with_soft_nofile_200(Command::new(BIN)), &[], &limit);
    assert_eq!((code, out.trim()), (0, "200"), "{err}");
    let Some(nobody) = Nobody::new() else { return };
    let (code, out, err) = wrapped_with(with_soft_nofile_200(nobody.command()), &[], &limit);
    assert_eq!((code, out.trim()), (0, "200"), "{err}");
}
