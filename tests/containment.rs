//! Containment: each attack that once got out of netchaos's boundary,
//! performed for real — by a local user through the control API, by a
//! wrapped command (as root and as an unprivileged user), by a process in
//! an attached namespace, by a flood — and asserted to fail.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn server(extra: &[&str]) -> Proxy {
    let mut args = vec!["--api", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Proxy::start_cmd("server", &args)
}

/// Creates proxy `name` (to a port nobody listens on) and tries to give it
/// a `respond` toxic that sends `file`: (status, body).
fn respond_with_file(url: &str, name: &str, file: &str) -> (u16, Value) {
    let body = format!(r#"{{"name":"{name}","listen":"127.0.0.1:0","upstream":"127.0.0.1:1"}}"#);
    let (status, _) = http("POST", &format!("{url}/proxies"), Some(&body), &[]);
    assert_eq!(status, 201);
    let toxic = serde_json::json!({
        "type": "respond",
        "attributes": {"file": file, "wait_request": false}
    });
    http(
        "POST",
        &format!("{url}/proxies/{name}/toxics"),
        Some(&toxic.to_string()),
        &[],
    )
}

fn listen_of(url: &str, name: &str) -> SocketAddr {
    let (_, v) = http("GET", &format!("{url}/proxies/{name}"), None, &[]);
    v["listen"].as_str().unwrap().parse().unwrap()
}

/// What a client of `addr` receives before the connection ends.
fn received(addr: SocketAddr) -> Vec<u8> {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return Vec::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    read_to_end(&mut s).0
}

#[test]
fn the_api_reads_no_file_unless_a_folder_was_allowed() {
    let p = server(&[]);
    let url = p.url();
    for (i, file) in ["/etc/shadow", "/etc/passwd", "relative.txt"]
        .iter()
        .enumerate()
    {
        let (status, body) = respond_with_file(&url, &format!("p{i}"), file);
        assert_eq!(status, 400, "{file}: {body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("reads no files unless"),
            "{body}"
        );
        let (_, toxics) = http("GET", &format!("{url}/proxies/p{i}/toxics"), None, &[]);
        assert_eq!(toxics, serde_json::json!([]), "no toxic was made");
        let got = received(listen_of(&url, &format!("p{i}")));
        assert!(!got.windows(5).any(|w| w == b"root:"), "{got:?}");
    }
}

#[test]
fn api_files_stay_beneath_their_folder_and_are_regular_and_small() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("reply.txt"), b"HTTP/1.1 503 canned\r\n\r\n").unwrap();
    std::fs::write(d.join("big.bin"), vec![b'x'; 2 << 20]).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", d.join("passwd-link")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("zero-link")).unwrap();
    nix::unistd::mkfifo(
        &d.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let p = server(&["--api-files", d.to_str().unwrap()]);
    let url = p.url();

    let (status, body) = respond_with_file(&url, "ok", "reply.txt");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        received(listen_of(&url, "ok")),
        b"HTTP/1.1 503 canned\r\n\r\n"
    );

    let cases: &[(&str, &str)] = &[
        ("/etc/passwd", "outside the --api-files folder"),
        (
            "../../../../../../etc/passwd",
            "outside the --api-files folder",
        ),
        ("passwd-link", "outside the --api-files folder"),
        ("zero-link", "outside the --api-files folder"),
        ("big.bin", "larger than 1MiB"),
        ("missing.txt", "No such file"),
        (".", "not a regular file"),
    ];
    for (i, (file, want)) in cases.iter().enumerate() {
        let (status, body) = respond_with_file(&url, &format!("bad{i}"), file);
        assert_eq!(status, 400, "{file}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(want),
            "{file}: {body}"
        );
    }
    // A FIFO neither hangs the request nor the API meanwhile.
    let t = Instant::now();
    let url2 = url.clone();
    let fifo = std::thread::spawn(move || respond_with_file(&url2, "fifo", "fifo"));
    let (status, _) = http("GET", &format!("{url}/version"), None, &[]);
    assert_eq!(status, 200);
    let (status, body) = fifo.join().unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("is a FIFO"),
        "{body}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // A device inside the folder (root can make one): refused too.
    if is_root() {
        let made = Command::new("mknod")
            .arg(d.join("zero"))
            .args(["c", "1", "5"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(made, "mknod");
        let (status, body) = respond_with_file(&url, "dev", "zero");
        assert_eq!(status, 400, "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("is a device"),
            "{body}"
        );
    }
    let (_, rss) = fds_and_rss(p.pid());
    assert!(rss < 64 << 20, "netchaos grew to {rss} bytes");
}

#[test]
fn profile_files_are_regular_files_of_at_most_a_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("big.bin"), vec![b'x'; (1 << 20) + 1]).unwrap();
    nix::unistd::mkfifo(
        &d.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    for (file, want) in [
        ("/dev/zero", "is a device, not a regular file"),
        ("fifo", "is a FIFO, not a regular file"),
        ("big.bin", "larger than 1MiB"),
    ] {
        let profile = d.join("p.toml");
        std::fs::write(
            &profile,
            format!("[[rules]]\n[[rules.faults]]\ntype = \"respond\"\nfile = \"{file}\"\n"),
        )
        .unwrap();
        let t = Instant::now();
        let (code, _, err) = netchaos(&["check", profile.to_str().unwrap()]);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(err.contains(want), "{file}: {err}");
        assert!(err.contains("p.toml:4:8"), "located: {err}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

/// RSS (bytes) and open descriptors of a process.
fn fds_and_rss(pid: u32) -> (usize, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (fds, kb * 1024)
}

/// A resolver that reads queries and never answers; counts what it got.
const SILENT_RESOLVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
s.settimeout(0.5)
queries = junk = 0
import select
while True:
    r, _, _ = select.select([s, sys.stdin], [], [], 0.5)
    if sys.stdin in r:
        break
    if s in r:
        d, _ = s.recvfrom(65535)
        if len(d) >= 12 and d[2] & 0x80 == 0 and d[4:6] == b"\x00\x01":
            queries += 1
        else:
            junk += 1
print(queries, junk, flush=True)
"#;

/// Floods UDP port 53 for `secs` seconds: junk, and well-formed queries
/// asking for 64 KiB replies (the most a reply buffer may hold).
const DNS_FLOOD: &str = r#"
import os, socket, struct, sys, time
secs = float(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
name = b"".join(bytes([len(p)]) + p for p in b"flood.example".split(b".")) + b"\0"
opt = b"\0" + struct.pack("!HHIH", 41, 65535, 0, 0)
end = time.monotonic() + secs
n = 0
while time.monotonic() < end:
    n += 1
    if n % 2:
        d = os.urandom(300)
    else:
        d = struct.pack("!HHHHHH", n & 0xffff, 0x0100, 1, 0, 0, 1) + name + b"\0\x01\0\x01" + opt
    try:
        s.sendto(d, ("10.53.53.53", 53))
    except BlockingIOError:
        time.sleep(0.0005)
print(n)
"#;

fn dns_flood_stays_bounded(nobody: Option<&Nobody>) {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let mut resolver = Command::new("python3")
        .args(["-c", SILENT_RESOLVER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(resolver.stdout.take().unwrap());
    let mut port = String::new();
    std::io::BufRead::read_line(&mut out, &mut port).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(&conf, format!("nameserver 127.0.0.1:{}\n", port.trim())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();

    let mut cmd = match nobody {
        Some(n) => n.command(),
        None => Command::new(BIN),
    };
    cmd.args(["run", "--resolv-conf", conf.to_str().unwrap(), "--"])
        .args(["python3", "-c", DNS_FLOOD, "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // netchaos itself (setpriv execs it, keeping the pid).
    let pid = child.id();
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the flood did not end");
        peak = peak.max(fds_and_rss(pid).1);
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let sent: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert!(sent > 2000, "the flood sent only {sent} datagrams");
    eprintln!(
        "flood of {sent} datagrams: netchaos peaked at {:.1} MiB",
        peak as f64 / 1048576.0
    );
    // The bound: 256 queries in flight, each a datagram and a socket
    // (netchaos idles at about 7 MiB).
    assert!(
        peak < 32 << 20,
        "netchaos peaked at {} MiB: {err}",
        peak >> 20
    );
    assert!(
        err.contains("DNS queries dropped by the forwarder: malformed") && err.contains("busy"),
        "{err}"
    );
    drop(resolver.stdin.take());
    let mut counts = String::new();
    std::io::BufRead::read_line(&mut out, &mut counts).unwrap();
    let _ = resolver.wait();
    let counts: Vec<u64> = counts
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts[1], 0, "junk reached the resolver: {counts:?}");
    assert!(
        counts[0] > 0 && counts[0] < sent,
        "queries forwarded: {counts:?} of {sent}"
    );
}

#[test]
fn a_dns_flood_is_bounded_in_memory_and_junk_is_not_forwarded() {
    dns_flood_stays_bounded(None);
}

#[test]
fn a_rootless_dns_flood_is_bounded_too() {
    let Some(nobody) = Nobody::new() else { return };
    dns_flood_stays_bounded(Some(&nobody));
}

/// Everything a hostile wrapped command tries, each printed as
/// `name=outcome`: it holds a descriptor of the host's network namespace
/// (fd 3), and the test's HTTP server is at argv[1].
const ESCAPES: &str = r#"
import ctypes, errno, os, socket, subprocess, sys, json
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
out["uid"] = os.getuid()
# The faulted upstream, through a socket carrying the relay's verdict mark
# when the command may set one.
host, port = sys.argv[1].split(":")
s = socket.socket()
try:
    s.setsockopt(socket.SOL_SOCKET, 36, 0x6e640600)
    out["http_mark"] = "ok"
except OSError as e:
    out["http_mark"] = errno.errorcode[e.errno]
s.settimeout(5)
s.connect((host, int(port)))
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
out["http"] = s.recv(100).decode(errors="replace").split("\r\n")[0]
if libc.ptrace(16, 1, 0, 0) == 0:
    # (--privileged-command can: let its init go again.)
    os.waitpid(1, 0x40000000)
    libc.ptrace(17, 1, 0, 0)
    out["ptrace_init"] = "ok"
else:
    out["ptrace_init"] = err()
for name, mark in (("mark_old", 0x6e63), ("mark_relay", 0x6e640600)):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, 36, mark)
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    out["raw"] = "ok"
except OSError as e:
    out["raw"] = errno.errorcode[e.errno]
try:
    open("/proc/sys/net/ipv4/ip_forward", "w").write("1")
    out["sysctl"] = "ok"
except OSError as e:
    out["sysctl"] = errno.errorcode[e.errno]
r = subprocess.run(["nft", "list", "ruleset"], capture_output=True)
out["nft"] = "ok" if r.returncode == 0 else "refused"
r = subprocess.run(["nsenter", "--net=/proc/self/fd/3", "true"], capture_output=True, pass_fds=(3,))
out["nsenter"] = "ok" if r.returncode == 0 else "refused"
out["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    b = socket.socket()
    b.bind(("0.0.0.0", 80))
    out["bind80"] = "ok"
except OSError as e:
    out["bind80"] = errno.errorcode[e.errno]
if len(sys.argv) > 2:
    path = sys.argv[2]
    open(path, "w").write("written as root")
    out["root_file"] = open(path).read()
# Last: entering the host's network namespace (fd 3).
out["setns"] = "ok" if libc.setns(3, 0x40000000) == 0 else err()
print(json.dumps(out))
"#;

/// Runs [`ESCAPES`] under `netchaos run` (with a 503 for every request),
/// handing it a descriptor of the host's network namespace as fd 3.
fn escapes(runner: Command, extra: &[&str], root_file: Option<&str>) -> (Value, String) {
    let http = Server::http(b"unfaulted");
    let target = http.addr.to_string();
    let prog = runner.get_program().to_string_lossy().into_owned();
    let mut argv: Vec<String> = runner
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    argv.extend(["run", "--fault", "respond:status=503"].map(String::from));
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.extend(["--", "python3", "-c", ESCAPES, &target].map(String::from));
    if let Some(f) = root_file {
        argv.push(f.to_string());
    }
    let quoted: Vec<String> = std::iter::once(prog)
        .chain(argv)
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3</proc/self/ns/net; exec {}",
            quoted.join(" ")
        ))
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}\n{err}"));
    (v, err)
}

#[test]
fn a_root_command_stays_root_for_files_but_cannot_leave_the_faults() {
    if !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: a root-run command's containment is tested as root");
        return;
    }
    if !need(&["python3", "nsenter", "nft", "ip"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let private = dir.path().join("root-only");
    std::fs::create_dir(&private).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = private.join("f");
    let (v, err) = escapes(Command::new(BIN), &[], file.to_str());
    assert_eq!(v["uid"], 0, "{v}");
    for key in ["setns", "ptrace_init", "mark_old", "mark_relay", "raw"] {
        assert_eq!(v[key], "EPERM", "{key}: {v}");
    }
    assert_eq!(v["sysctl"], "EROFS", "{v}");
    assert_eq!(v["nft"], "refused", "{v}");
    assert_eq!(v["nsenter"], "refused", "{v}");
    assert_eq!(v["http"], "HTTP/1.1 503 Service Unavailable", "{v}");
    assert_eq!(v["bind80"], "ok", "a service may listen on port 80: {v}");
    assert_eq!(v["root_file"], "written as root", "{v}");
    // Its own PID namespace: only its init, itself and its children.
    let procs = v["processes"].as_array().unwrap();
    assert!(procs.len() <= 5 && procs[0] == 1, "{v}");
    assert!(!err.contains("--privileged-command"), "{err}");
}

#[test]
fn privileged_command_is_explicit_and_warned_about() {
    if !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: --privileged-command is for root");
        return;
    }
    if !need(&["python3", "nsenter", "nft", "ip"]) {
        return;
    }
    let (v, err) = escapes(Command::new(BIN), &["--privileged-command"], None);
    assert!(
        err.contains("--privileged-command: the command keeps every capability"),
        "{err}"
    );
    assert_eq!(
        v["setns"], "ok",
        "it holds CAP_SYS_ADMIN over the system: {v}"
    );
    assert_eq!(v["nft"], "refused", "still never CAP_NET_ADMIN: {v}");
    // A forged mark still does not skip the redirect: the gate decides.
    assert_eq!(v["http"], "HTTP/1.1 503 Service Unavailable", "{v}");
}

#[test]
fn a_rootless_command_cannot_leave_the_faults_either() {
    let Some(nobody) = Nobody::new() else { return };
    if !need(&["python3", "nsenter", "nft", "ip"]) {
        return;
    }
    let (v, _) = escapes(nobody.command(), &[], None);
    assert_eq!(v["uid"], 65534, "{v}");
    for key in ["setns", "ptrace_init", "mark_old", "mark_relay", "raw"] {
        assert_eq!(v[key], "EPERM", "{key}: {v}");
    }
    assert!(v["sysctl"] == "EROFS" || v["sysctl"] == "EACCES", "{v}");
    assert_eq!(v["nft"], "refused", "{v}");
    assert_eq!(v["http"], "HTTP/1.1 503 Service Unavailable", "{v}");
    assert_eq!(v["bind80"], "ok", "{v}");
}

/// Processes whose command line holds `marker`, not counting zombies.
fn alive_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat
                .rsplit(')')
                .next()?
                .split_whitespace()
                .next()?
                .to_string();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(marker) && state != "Z").then(|| format!("{cmd} ({state})"))
        })
        .collect()
}

fn sigkill_ends_everything(runner: Command, script: &str, marker: &str) {
    let mut runner = runner;
    runner
        .args(["run", "--", "bash", "-c", script])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = runner.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive_with(&format!("sleep {marker}")).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(child.id(), libc::SIGKILL);
    let killed = Instant::now();
    let _ = child.wait();
    loop {
        let left = alive_with(marker);
        if left.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "still running {:?} after SIGKILL of netchaos: {left:?}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("gone {:?} after SIGKILL", killed.elapsed());
}

#[test]
fn sigkill_of_netchaos_ends_every_process_of_the_command() {
    if !need(&["bash", "ip", "nft"]) {
        return;
    }
    let m = format!("41.{}", std::process::id());
    // A command that ignores SIGTERM.
    sigkill_ends_everything(
        Command::new(BIN),
        &format!("trap '' TERM; exec sleep {m}1"),
        &format!("{m}1"),
    );
    // A grandchild, in the background.
    sigkill_ends_everything(
        Command::new(BIN),
        &format!("sleep {m}2 & wait"),
        &format!("{m}2"),
    );
    if let Some(nobody) = Nobody::new() {
        sigkill_ends_everything(
            nobody.command(),
            &format!("trap '' TERM; sleep {m}3 & wait"),
            &format!("{m}3"),
        );
    }
}

/// Inside `run`: a server on every address of the namespace, then
/// connections to the namespace's own address — to it, and to a port
/// where nothing listens.
const OWN_ADDRESS: &str = r#"
import socket, subprocess, time
own = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", "lo", "scope", "global"],
                     capture_output=True, text=True).stdout.split()[3].split("/")[0]
srv = socket.socket(); srv.bind(("0.0.0.0", 0)); srv.listen(4)
port = srv.getsockname()[1]
c = socket.create_connection((own, port), timeout=5)
a, _ = srv.accept(); a.sendall(b"inside"); print(own, c.recv(10).decode())
t = time.monotonic()
try:
    socket.create_connection((own, port + 1 if port < 65535 else 1), timeout=8)
    print("connected")
except OSError as e:
    print(type(e).__name__, round(time.monotonic() - t, 2))
"#;

#[test]
fn connections_to_the_namespaces_own_address_stay_inside() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("e.jsonl");
    let (code, out, err) = wrapped(
        &["--events", events.to_str().unwrap()],
        &["python3", "-c", OWN_ADDRESS],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with(" inside"), "{out}");
    let refused: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(refused[0], "ConnectionRefusedError", "{out}");
    assert!(refused[1].parse::<f64>().unwrap() < 2.0, "{out}");
    // Nothing was dialled from the host: no event names the own address
    // as dialled and failed.
    let own = lines[0].split_whitespace().next().unwrap();
    for e in read_events(&events) {
        if e["event"] == "error" {
            assert!(!e["dst"].as_str().unwrap_or("").starts_with(own), "{e}");
        }
    }
}

#[test]
fn the_namespace_never_takes_an_address_the_host_uses() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "nft"]) {
        return;
    }
    // The "host" (a test namespace) uses 192.0.2.1 itself, as one machine
    // did for its gateway; a server of the host listens there.
    let o = ns.sh("ip addr add 192.0.2.1/32 dev lo && ip route add 198.51.100.0/24 dev lo");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tmp = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
python3 -c '
import socket, threading
s = socket.socket(); s.bind(("192.0.2.1", 0)); s.listen(4)
open("{dir}/port", "w").write(str(s.getsockname()[1]))
c, _ = s.accept(); c.sendall(b"host"); c.close()
' &
sleep 1
{bin} run -- sh -c 'ip -o -4 addr show dev lo scope global; python3 -c "
import socket
s = socket.create_connection((\"192.0.2.1\", int(open(\"{dir}/port\").read())), timeout=5)
print(s.recv(10).decode())
"'
wait
"#,
        dir = tmp.path().display(),
        bin = BIN
    );
    let o = ns.sh(&script);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !out.contains("192.0.2.1/32") && !out.contains("198.51.100.1/32"),
        "the namespace took an address the host uses: {out}"
    );
    assert!(out.contains("203.0.113.1/32"), "{out}");
    assert!(
        out.trim_end().ends_with("host"),
        "the host's 192.0.2.1 is reachable: {out}"
    );
}

#[test]
fn an_unreachable_network_fails_at_once_as_it_would_without_netchaos() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "nft"]) {
        return;
    }
    const CONNECT: &str = "import socket, time, sys
t = time.monotonic()
try:
    socket.create_connection(('10.254.254.254', 80), timeout=8)
except OSError as e:
    print(type(e).__name__, e.errno, round(time.monotonic() - t, 2))";
    let direct = ns.sh(&format!("python3 -c \"{CONNECT}\""));
    let direct = String::from_utf8_lossy(&direct.stdout).to_string();
    assert!(
        direct.starts_with("OSError 101 "),
        "ENETUNREACH without netchaos: {direct}"
    );
    let through = ns.sh(&format!("{BIN} run -- python3 -c \"{CONNECT}\""));
    let text = String::from_utf8_lossy(&through.stdout).to_string();
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(
        f[..2],
        ["OSError", "101"],
        "{text}{}",
        String::from_utf8_lossy(&through.stderr)
    );
    assert!(f[2].parse::<f64>().unwrap() < 2.0, "{text}");
}

const FORGED_MARKS: &str = r#"
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
for mark in [int(m, 0) for m in sys.argv[3:]]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, 36, struct.pack("I", mark))
    s.settimeout(5)
    s.connect((host, port))
    s.sendall(b"direct")
    print(hex(mark), s.recv(20).decode())
"#;

#[test]
fn a_process_in_an_attached_namespace_cannot_forge_the_relays_mark() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["python3", "nft", "iptables"]) {
        return;
    }
    let echo = Server::echo(&format!("{}:0", ns.host_ip));
    let p = Proxy::start_cmd(
        "attach",
        &[
            "--netns",
            &format!("/run/netns/{}", ns.name),
            "--fault",
            "respond:data=FAULTED,then=close,wait_request=false",
        ],
    );
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    // Even knowing every mark netchaos uses — the old constant, the gate's
    // verdict for the relay, and this run's random DNS mark — a root
    // process with CAP_NET_RAW in the namespace is still intercepted.
    let table = String::from_utf8_lossy(&ns.sh("nft list table inet netchaos").stdout).to_string();
    let udp_mark = table
        .lines()
        .find(|l| l.contains("meta l4proto udp meta mark"))
        .and_then(|l| l.split_whitespace().nth(5))
        .unwrap_or_else(|| panic!("{table}"))
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("forge.py");
    std::fs::write(&script, FORGED_MARKS).unwrap();
    let o = ns.sh(&format!(
        "python3 {} {} {} 0x6e63 0x6e640600 {udp_mark}",
        script.display(),
        ns.host_ip,
        echo.addr.port()
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.lines().count(),
        3,
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for line in out.lines() {
        assert!(
            line.ends_with(" FAULTED"),
            "a forged mark skipped the faults: {line}"
        );
    }
}

#[test]
fn browsers_and_rebound_names_are_refused() {
    let p = server(&[]);
    let url = p.url();
    let port = p.api.unwrap().port();
    let v = format!("{url}/version");
    let get = |headers: &[(&str, &str)]| http("GET", &v, None, headers).0;
    assert_eq!(get(&[]), 200);
    assert_eq!(get(&[("Origin", "http://evil.example")]), 403);
    assert_eq!(get(&[("Origin", "null")]), 403);
    assert_eq!(get(&[("Origin", &format!("http://localhost:{port}"))]), 200);
    assert_eq!(get(&[("Host", &format!("evil.example:{port}"))]), 403);
    assert_eq!(get(&[("Host", "evil.example")]), 403);
    assert_eq!(get(&[("Host", &format!("localhost:{port}"))]), 200);
    assert_eq!(get(&[("Host", &format!("127.0.0.1:{port}"))]), 200);
    // Through a port forward (kubectl port-forward, ssh -L) the Host names
    // loopback with the forwarded port; a page on another local port is
    // still another origin.
    assert_eq!(get(&[("Host", "localhost:18474")]), 200);
    assert_eq!(get(&[("Host", "[::1]:18474")]), 200);
    assert_eq!(get(&[("Origin", "http://localhost:18474")]), 403);
    assert_eq!(get(&[("User-Agent", "Mozilla/5.0")]), 403);
    let body = r#"{"name":"x","listen":"127.0.0.1:0","upstream":"127.0.0.1:1"}"#;
    let (status, _) = http(
        "POST",
        &format!("{url}/proxies"),
        Some(body),
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(status, 403);
    let (_, proxies) = http("GET", &format!("{url}/proxies"), None, &[]);
    assert_eq!(proxies, serde_json::json!({}), "nothing was made");

    // With a token, a name other than loopback is fine (a Docker network),
    // but the token is needed.
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "s3cret-token\n").unwrap();
    let p = server(&["--api-token-file", tf.to_str().unwrap()]);
    let v = format!("{}/version", p.url());
    let auth = ("Authorization", "Bearer s3cret-token");
    assert_eq!(http("GET", &v, None, &[("Host", "toxiproxy:8474")]).0, 401);
    assert_eq!(
        http("GET", &v, None, &[("Host", "toxiproxy:8474"), auth]).0,
        200
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid())).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains("s3cret"),
        "the token is not in ps"
    );
}

#[test]
fn tokens_are_never_blank_and_never_reach_the_wrapped_command() {
    for blank in [" ", "", "\t"] {
        let (code, _, err) = netchaos(&["server", "--api", "127.0.0.1:0", "--api-token", blank]);
        assert_eq!(code, 2, "{blank:?}: {err}");
        assert!(err.contains("the API token is blank"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("empty");
    std::fs::write(&tf, "\n").unwrap();
    let (code, _, err) = netchaos(&["server", "--api-token-file", tf.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    if !need(&["ip", "nft"]) {
        return;
    }
    let mut c = Command::new(BIN);
    c.env("NETCHAOS_API_TOKEN", "inherited-secret");
    let (code, out, err) = wrapped_with(c, &["--api", "127.0.0.1:0"], &["env"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("PATH="), "{out}");
    assert!(
        !out.contains("inherited-secret"),
        "the command saw the token: {out}"
    );
}

#[test]
fn two_attaches_at_once_get_the_same_clear_refusal() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["nft", "iptables"]) {
        return;
    }
    let path = format!("/run/netns/{}", ns.name);
    for round in 0..3 {
        let start = || {
            Command::new(BIN)
                .args([
                    "attach",
                    "--netns",
                    &path,
                    "--fault",
                    "latency:delay=1ms",
                    "--duration",
                    "3s",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(), start());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let outs = [&a, &b];
        let won = outs.iter().filter(|o| o.status.success()).count();
        assert_eq!(won, 1, "round {round}: exactly one attaches");
        let lost = outs.iter().find(|o| !o.status.success()).unwrap();
        let err = String::from_utf8_lossy(&lost.stderr);
        assert_eq!(lost.status.code(), Some(1), "{err}");
        assert!(
            err.contains("another netchaos (pid") && err.contains("is already intercepting"),
            "round {round}: {err}"
        );
        assert!(!err.contains("Operation not permitted"), "{err}");
    }
}

/// `dns_answer random = true` sends clients to the documentation ranges,
/// which some networks route (here: two of them routed out of the test's
/// namespace, as on a LAN). Nothing may leave for them: a client that
/// connects reaches nobody, and the relay never dials there.
#[test]
fn random_dns_answers_lead_nowhere_even_where_the_ranges_are_routed() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["nft", "python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = ns.host_ip;
    let setup = ns.sh(&format!(
        "ip route add 198.51.100.0/24 via {host} && ip route add 203.0.113.0/24 via {host} && \
         nft add table inet leak && \
         nft add chain inet leak out '{{ type filter hook postrouting priority 0; }}' && \
         nft add rule inet leak out ip daddr '{{ 198.51.100.0/24, 203.0.113.0/24 }}' counter"
    ));
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    // No resolver is asked: dns_answer answers in its place.
    let rc = dir.path().join("resolv.conf");
    std::fs::write(&rc, "nameserver 127.0.0.1\n").unwrap();
    let client = dir.path().join("client.py");
    std::fs::write(
        &client,
        r#"
import socket, time
for i in range(8):
    a = socket.getaddrinfo(f"api{i}.example", 80, socket.AF_INET)[0][4][0]
    t = time.monotonic()
    try:
        socket.create_connection((a, 80), timeout=1).close()
        print(a, "connected")
    except OSError as e:
        print(a, type(e).__name__, round(time.monotonic() - t, 1))
"#,
    )
    .unwrap();
    // (A fixed seed: its eight draws put some in the routed ranges.)
    let out = ns.sh(&format!(
        "timeout 60 {BIN} run -q --seed 7 --resolv-conf {} --fault dns_answer:random=true -- python3 {}",
        rc.display(),
        client.display()
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}\n{err}");
    let routed = lines
        .iter()
        .filter(|l| l.starts_with("198.51.100.") || l.starts_with("203.0.113."))
        .count();
    assert!(routed > 0, "no answer fell in a routed range: {text}");
    for l in &lines {
        assert!(
            l.contains("TimeoutError"),
            "a client reached someone: {l}\n{text}"
        );
    }
    let counted = String::from_utf8_lossy(&ns.sh("nft list table inet leak").stdout).into_owned();
    assert!(
        counted.contains("counter packets 0 bytes 0"),
        "packets left for the random answers:\n{counted}"
    );
}

/// The freezer of the cgroup netchaos runs in: a v1 `freezer` hierarchy, or
/// cgroup v2's `cgroup.freeze`.
fn freezer_root() -> Option<(std::path::PathBuf, &'static str, &'static str)> {
    let v1 = std::path::Path::new("/sys/fs/cgroup/freezer");
    if v1.join("cgroup.procs").exists() {
        return Some((v1.to_path_buf(), "freezer.state", "FROZEN"));
    }
    for v2 in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
        let p = std::path::Path::new(v2);
        if p.join("cgroup.controllers").exists() {
            return Some((p.to_path_buf(), "cgroup.freeze", "1"));
        }
    }
    None
}

/// A cgroup made for the test and removed after it, even on failure.
struct TestCgroup(std::path::PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Thawed first, should a failed run have left it frozen; the
        // command's own cgroups below it go first.
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        let _ = std::fs::write(self.0.join("cgroup.freeze"), "0");
        if let Ok(children) = std::fs::read_dir(&self.0) {
            for c in children.flatten().filter(|c| c.path().is_dir()) {
                let _ = std::fs::remove_dir(c.path());
            }
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A root command tries to reach netchaos through the host's cgroup and
/// kernel files: freeze the cgroup it shares with netchaos, leave it, mount
/// a cgroup hierarchy of its own, write the kernel log and the SysRq
/// trigger. All fail; the relay goes on serving.
#[test]
fn a_root_command_cannot_freeze_netchaos_or_write_kernel_files() {
    if !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: a root-run command's containment is tested as root");
        return;
    }
    if !need(&["ip", "nft", "curl", "unshare", "dmesg"]) {
        return;
    }
    let Some((root, knob, frozen)) = freezer_root() else {
        assert!(!in_ci(), "no cgroup freezer on this machine");
        eprintln!("SKIPPED: no cgroup freezer (v1 freezer or v2 cgroup.freeze)");
        return;
    };
    // netchaos in a cgroup of the test's own, as under a service manager.
    let cg = TestCgroup(root.join(format!("nctest-{}", std::process::id())));
    std::fs::create_dir(&cg.0).unwrap();
    let http = Server::http(b"still served");
    let marker = format!("netchaos-kmsg-{}", std::process::id());
    let script = format!(
        r#"
echo {marker} > /dev/kmsg 2>/dev/null
echo "kmsg rc=$?"
for f in /sys/fs/cgroup/freezer/freezer.state /sys/fs/cgroup/freezer/{name}/freezer.state \
         /sys/fs/cgroup/{name}/cgroup.freeze /sys/fs/cgroup/unified/{name}/cgroup.freeze; do
  if [ -e "$f" ]; then echo {frozen} > "$f" 2>/dev/null; echo "freeze rc=$?"; fi
done
for f in /sys/fs/cgroup/freezer/cgroup.procs /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do
  if [ -e "$f" ]; then echo $$ > "$f" 2>/dev/null; echo "move rc=$?"; fi
done
echo h > /proc/sysrq-trigger 2>/dev/null; echo "sysrq rc=$?"
mkdir -p /tmp/nc-cg-$$
unshare -Urmc sh -c 'mount -t cgroup2 none /tmp/nc-cg-$$ 2>/dev/null && echo 1 > /tmp/nc-cg-$$/cgroup.freeze && cat /tmp/nc-cg-$$/cgroup.procs | wc -l' 2>/dev/null
echo "remount rc=$?"
rmdir /tmp/nc-cg-$$
curl -sS -m 5 http://{addr}/ ; echo
"#,
        name = cg.0.file_name().unwrap().to_string_lossy(),
        addr = http.addr,
    );
    let procs = cg.0.join("cgroup.procs");
    // Should the attack work, a watchdog outside the cgroup thaws it, so
    // that the test fails instead of hanging.
    let (thaw, thawed) = (
        cg.0.clone(),
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (done, thawed) = (done.clone(), thawed.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if t.elapsed() > Duration::from_secs(60) {
                    let _ = std::fs::write(thaw.join("freezer.state"), "THAWED");
                    let _ = std::fs::write(thaw.join("cgroup.freeze"), "0");
                    thawed.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let out = Command::new("timeout")
        .args(["-s", "KILL", "90", "sh", "-c"])
        .arg(format!(
            "echo $$ > {} && exec {BIN} run -q --fault latency:delay=1ms -- sh -c '{}'",
            procs.display(),
            script.replace('\'', r"'\''")
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watchdog.join().unwrap();
    assert!(
        !thawed.load(std::sync::atomic::Ordering::SeqCst),
        "netchaos was frozen (thawed by the test after 60 s)"
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{err}");
    assert!(
        text.contains("still served"),
        "the relay stopped: {text}\n{err}"
    );
    for l in text
        .lines()
        .filter(|l| l.contains(" rc=") && !l.starts_with("kmsg") && !l.starts_with("remount"))
    {
        assert!(!l.ends_with("rc=0"), "{l}\n{text}");
    }
    // A remounted hierarchy, if the kernel allows one, is the command's
    // own cgroup: freezing it froze nothing of netchaos's.
    let state = std::fs::read_to_string(cg.0.join(knob)).unwrap_or_default();
    assert!(
        state.trim() != frozen && state.trim() != "FREEZING",
        "netchaos's cgroup was frozen: {state}"
    );
    let dmesg = Command::new("dmesg").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&dmesg.stdout).contains(&marker),
        "the command wrote into the kernel log"
    );
    // The command's own cgroup below netchaos's is gone with it.
    let left: Vec<_> = std::fs::read_dir(&cg.0)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("netchaos-command.")
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The HTTP layer's budget for the flood tests (the default is 256 MiB).
const HTTP_BUDGET: u64 = 64 << 20;

/// An upstream that accepts and never reads: what is sent to it backs up
/// into netchaos. Its connections close when it is dropped.
struct DeafUpstream {
    addr: SocketAddr,
    held: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DeafUpstream {
    fn start() -> DeafUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, s) = (held.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => h.lock().unwrap().push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        DeafUpstream {
            addr,
            held,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DeafUpstream {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.held.lock().unwrap().clear();
    }
}

/// How many flood connections the open-files limit allows here (each
/// holds two descriptors in this process: the client's, the upstream's).
fn flood_size(want: usize) -> usize {
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .unwrap_or((1024, 1024));
    want.min((soft as usize).saturating_sub(200) / 2)
}

/// `n` clients each send `msg` through `p` (to a deaf upstream), round
/// after round, until none makes progress for 2 s (at most 40 s): the
/// clients (still open), and netchaos's peak RSS meanwhile.
fn http_flood(p: &Proxy, msg: &[u8], n: usize) -> (Vec<TcpStream>, u64) {
    let mut clients: Vec<(TcpStream, usize)> = (0..n)
        .map(|_| {
            let c = TcpStream::connect_timeout(&p.addr(), Duration::from_secs(5)).unwrap();
            c.set_nonblocking(true).unwrap();
            (c, 0)
        })
        .collect();
    let (start, mut moved) = (Instant::now(), Instant::now());
    let mut peak = 0;
    while moved.elapsed() < Duration::from_secs(2) && start.elapsed() < Duration::from_secs(40) {
        let mut any = false;
        for (c, sent) in clients.iter_mut().filter(|(_, sent)| *sent < msg.len()) {
            let end = msg.len().min(*sent + (256 << 10));
            if let Ok(k) = c.write(&msg[*sent..end]) {
                *sent += k;
                any |= k > 0;
            }
        }
        peak = peak.max(fds_and_rss(p.pid()).1);
        if any {
            moved = Instant::now();
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let sent: usize = clients.iter().map(|(_, s)| s).sum();
    eprintln!(
        "{n} clients sent {} MiB in {:.1} s; netchaos peaked at {} MiB",
        sent >> 20,
        start.elapsed().as_secs_f64(),
        peak >> 20
    );
    (clients.into_iter().map(|(c, _)| c).collect(), peak)
}

/// Waits (at most 10 s) for netchaos's RSS to fall below `bound`; the
/// RSS then.
fn rss_falls_below(p: &Proxy, bound: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rss = fds_and_rss(p.pid()).1;
        if rss < bound || Instant::now() > deadline {
            return rss;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ceiling of a flood of `n` connections: the budget, what each
/// connection holds outside it (its small reads and their one round in
/// flight: 96 KiB allowed, about 35-75 KiB measured), and netchaos's
/// own 48 MiB (it idles at about 21 MiB).
fn flood_ceiling(n: usize) -> u64 {
    HTTP_BUDGET + n as u64 * (96 << 10) + (48 << 20)
}

/// 2,500 clients each send a 1 MiB header line (no end) through the HTTP
/// layer to an upstream that reads nothing: netchaos stays under its
/// budget plus a small allowance per connection (it grew to 2.5 GB, and
/// kept it after they closed); a head longer than the allowance is
/// answered 431 while the budget is spent, a short request still gets
/// its answer; and the memory goes back when the connections close.
#[test]
fn a_flood_of_huge_http_heads_stays_within_the_memory_budget() {
    let n = flood_size(2500);
    let up = DeafUpstream::start();
    let p = Proxy::start_env(
        "proxy",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up.addr.to_string(),
            "--fault",
            "http_status:status=503,path=/nowhere",
        ],
        &[("NETCHAOS_HTTP_MEMORY", "64MiB")],
    );
    let idle = fds_and_rss(p.pid()).1;
    let mut msg = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    msg.resize(1 << 20, b'a');
    let (clients, peak) = http_flood(&p, &msg, n);
    assert!(
        peak < flood_ceiling(n),
        "netchaos peaked at {} MiB (ceiling {} MiB)",
        peak >> 20,
        flood_ceiling(n) >> 20
    );
    // The budget is spent (the upstream reads nothing): a long head is
    // refused, a short request is served.
    let ask = |req: &[u8]| {
        let mut c = TcpStream::connect_timeout(&p.addr(), Duration::from_secs(5)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(req).unwrap();
        let mut got = [0u8; 64];
        let k = c.read(&mut got).unwrap_or(0);
        String::from_utf8_lossy(&got[..k]).into_owned()
    };
    let mut long = b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ".to_vec();
    long.resize(20 << 10, b'a');
    let answer = ask(&long);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:?}");
    let answer = ask(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer:?}");
    drop(clients);
    drop(up);
    let after = rss_falls_below(&p, idle + (32 << 20));
    eprintln!(
        "idle {} MiB, after the close {} MiB",
        idle >> 20,
        after >> 20
    );
    assert!(
        after < idle + (32 << 20),
        "{} MiB after the connections closed (idle: {} MiB)",
        after >> 20,
        idle >> 20
    );
    let (_, err) = p.stop();
    assert!(err.contains("memory budget"), "{err}");
}

/// 2,000 clients each send most of a 1 MiB JSON body that a fault wants
/// to match (`body.model`), to an upstream that reads nothing: bodies are
/// held whole only within the budget (the rest pass on unmatched), and
/// netchaos stays under the same ceiling (it grew to 3.5 GB).
#[test]
fn a_flood_of_held_http_bodies_stays_within_the_memory_budget() {
    let n = flood_size(2000);
    let up = DeafUpstream::start();
    let p = Proxy::start_env(
        "proxy",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up.addr.to_string(),
            "--fault",
            "http_status:status=503,body.model=nothing",
        ],
        &[("NETCHAOS_HTTP_MEMORY", "64MiB")],
    );
    let idle = fds_and_rss(p.pid()).1;
    let size = 1 << 20;
    let mut msg = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n[",
        size + 16
    )
    .into_bytes();
    while msg.len() < size {
        msg.extend_from_slice(b"1,");
    }
    let (clients, peak) = http_flood(&p, &msg, n);
    assert!(
        peak < flood_ceiling(n),
        "netchaos peaked at {} MiB (ceiling {} MiB)",
        peak >> 20,
        flood_ceiling(n) >> 20
    );
    drop(clients);
    drop(up);
    // Given back: from a peak of 200-240 MiB to within 64 MiB of idle.
    // (Measured after the closes, two cores busy: idle + 32-42 MiB in the
    // runs that stayed highest, idle + under 32 in most, once idle + 49
    // (a CI run, 2026-12-07, with other work on the machine); the
    // allocator's fragmentation, not the budget, which is empty by then.)
    let after = rss_falls_below(&p, idle + (64 << 20));
    assert!(
        after < idle + (64 << 20),
        "{} MiB after the connections closed (idle: {} MiB)",
        after >> 20,
        idle >> 20
    );
}
