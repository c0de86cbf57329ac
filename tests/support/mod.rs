//! Shared helpers for the integration tests: the netchaos process, small
//! servers on loopback, clients, and the skip/fail policy for missing tools.
//!
//! Every server and process started here is torn down by `Drop`, so a
//! failing assertion leaves nothing running.

#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_netchaos");

/// Whether we run in CI, where a missing tool or privilege is a failure.
pub(crate) fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Skips the calling test (returns `true`) when `tool` is missing, except in
/// CI, where that is a failure.
pub(crate) fn missing_tool(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return false;
    }
    if in_ci() {
        panic!("{tool} is required in CI but was not found (scripts/test.sh installs it)");
    }
    eprintln!("SKIPPED: {tool} not found (install it, or run scripts/test.sh)");
    true
}

/// Runs netchaos to completion with `args`; returns (exit code, stdout,
/// stderr). Bounded: one that does not end in [`NETCHAOS_LIMIT`] (a
/// command that was meant to be refused, but served) is killed and fails
/// the test instead of holding the suite.
pub(crate) fn netchaos(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    let out = output_within(cmd, NETCHAOS_LIMIT);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` (no stdin, its output captured) to completion within
/// `limit`; past it the process is killed and the test fails.
pub(crate) fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(limit) else {
        signal(pid, libc::SIGKILL);
        panic!("{cmd:?} did not finish in {limit:?}: killed");
    };
    out.expect("wait")
}

/// The longest [`netchaos`] may run.
const NETCHAOS_LIMIT: Duration = Duration::from_secs(120);

/// A running `netchaos proxy` (or `server`), stopped with SIGTERM when
/// dropped.
pub(crate) struct Proxy {
    child: Option<Child>,
    /// The listening addresses, in the order netchaos announced them.
    pub addrs: Vec<SocketAddr>,
    /// The control API's address, when it has one.
    pub api: Option<SocketAddr>,
    stderr: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts `netchaos proxy ARGS` and waits until it is ready.
    pub(crate) fn start(args: &[&str]) -> Proxy {
        let p = Proxy::start_cmd("proxy", args);
        assert!(
            !p.addrs.is_empty(),
            "netchaos announced no listener:\n{}",
            p.stderr()
        );
        p
    }

    /// Starts `netchaos SUBCOMMAND ARGS` and waits until it is ready.
    pub(crate) fn start_cmd(subcommand: &str, args: &[&str]) -> Proxy {
        Proxy::start_env(subcommand, args, &[])
    }

    /// [`Proxy::start_cmd`] with `env` added to netchaos's environment.
    pub(crate) fn start_env(subcommand: &str, args: &[&str], env: &[(&str, &str)]) -> Proxy {
        let mut child = Command::new(BIN)
            .arg(subcommand)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn netchaos");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr pipe");
        let log = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push_str(&format!("{line}\n"));
                if let Some(rest) = line.split(" listening on ").nth(1) {
                    let addr = rest.split(" -> ").next().unwrap().trim();
                    let addr = addr.trim_start_matches("https://").to_string();
                    let _ = tx.send(Some(addr));
                } else if let Some(rest) = line.split("control API on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap().to_string();
                    let _ = tx.send(Some(format!("api {addr}")));
                } else if line.contains("netchaos: ready") || line.contains("error") {
                    let _ = tx.send(None);
                }
            }
            let _ = tx.send(None);
        });
        let mut proxy = Proxy {
            child: Some(child),
            addrs: Vec::new(),
            api: None,
            stderr,
            reader: Some(reader),
        };
        loop {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(Some(a)) => match a.strip_prefix("api ") {
                    Some(api) => proxy.api = Some(api.parse().expect("API address")),
                    None => proxy.addrs.push(a.parse().expect("listen address")),
                },
                Ok(None) => break,
                Err(_) => panic!("netchaos did not become ready:\n{}", proxy.stderr()),
            }
        }
        proxy
    }

    /// The control API's base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.api.expect("netchaos has a control API"))
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM and waits (bounded) for the exit; returns status and
    /// everything netchaos wrote to stderr.
    pub(crate) fn stop(mut self) -> (ExitStatus, String) {
        let status = self.terminate();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.stderr())
    }

    /// Sends SIGTERM without waiting: the caller watches what happens
    /// while netchaos winds down, then calls [`Proxy::wait`].
    pub(crate) fn term(&self) {
        signal(self.pid(), libc::SIGTERM);
    }

    /// Waits (bounded by `limit`) for an exit already under way.
    pub(crate) fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let status = self.exit_within(limit, "did not exit");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.stderr())
    }

    fn terminate(&mut self) -> ExitStatus {
        self.term();
        self.exit_within(Duration::from_secs(10), "ignored SIGTERM")
    }

    /// The exit status, within `limit`; past it netchaos is killed and
    /// the test fails, saying `what` it did.
    fn exit_within(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let mut child = self.child.take().expect("running child");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = child.try_wait().expect("wait") {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let s = child.wait().expect("wait");
                panic!("netchaos {what} in {limit:?} (killed: {s})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proxy {
    /// SIGTERM first, so that netchaos removes what it made (its lock
    /// files, its tables) as a user's Ctrl-C would; SIGKILL after 3 s.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(3);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// A TCP server on loopback running `handler` per connection in its own
/// thread; stopped (and its accept thread joined) when dropped.
pub(crate) struct Server {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start<F>(bind: &str, handler: F) -> Server
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind(bind).expect("bind test server");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let handler = Arc::new(handler);
        let (s, a) = (stop.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                let h = handler.clone();
                std::thread::spawn(move || h(conn));
            }
        });
        Server {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// Echoes everything back; closes its side after the client's FIN.
    pub(crate) fn echo(bind: &str) -> Server {
        Server::start(bind, |mut s| {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = s.shutdown(Shutdown::Write);
        })
    }

    /// Sends `n` bytes of the pattern (after reading a request line if
    /// `wait` is set), then closes.
    pub(crate) fn source(n: usize) -> Server {
        Server::start("127.0.0.1:0", move |mut s| {
            let data = pattern(0, n);
            let _ = s.write_all(&data);
            let _ = s.shutdown(Shutdown::Write);
            let mut sink = [0u8; 1024];
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
        })
    }

    /// A minimal HTTP/1.1 server: answers each request with `body`.
    pub(crate) fn http(body: &'static [u8]) -> Server {
        Server::start("127.0.0.1:0", move |mut s| {
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(body);
            let _ = s.shutdown(Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Deterministic test bytes: byte `i` of stream `seed`.
pub(crate) fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a over a byte stream, for checksums of large transfers.
#[derive(Clone, Copy)]
pub(crate) struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub(crate) fn update(&mut self, data: &[u8]) {
        for b in data {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// A loopback port nothing listens on now (bound, noted and let go): for
/// a server a test starts on it later, or for a refused connect.
pub(crate) fn unused_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Connects with a timeout and sane read/write timeouts.
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .expect("connect through netchaos");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Reads until EOF or error; returns the bytes and the error, if any.
pub(crate) fn read_to_end(s: &mut TcpStream) -> (Vec<u8>, Option<io::Error>) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Makes the next close send RST.
pub(crate) fn set_linger_zero(s: &TcpStream) {
    socket2::SockRef::from(s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// Reads the event log: one JSON object per line, each checked against
/// the documented schema (docs/events.schema.json) by an independent
/// validator — every test that reads a log checks the contract users read.
pub(crate) fn read_events(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v = serde_json::from_str(l).expect("event line is JSON");
            check_event_line(&v, l);
            v
        })
        .collect()
}

/// Waits (at most `limit`) for a line of the event log at `path` that
/// `pred` picks, and returns it: for a test that must act once something
/// has happened (a hold begun, a fault counted) rather than after a guess
/// at how long it takes. Only whole lines are read (the log may be
/// mid-write); each is checked as [`read_events`] checks it.
#[allow(dead_code)]
pub(crate) fn wait_for_event(
    path: &std::path::Path,
    limit: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        for l in whole.lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("event line is JSON");
            check_event_line(&v, l);
            if pred(&v) {
                return v;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no such event in {limit:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panics, naming the line and what is wrong, unless `v` is a line of
/// the current schema version that docs/events.schema.json accepts.
pub(crate) fn check_event_line(v: &serde_json::Value, line: &str) {
    static SCHEMA: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    let validator = SCHEMA.get_or_init(|| {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/events.schema.json"))
                .expect("docs/events.schema.json is JSON");
        jsonschema::draft202012::new(&schema).expect("docs/events.schema.json is a schema")
    });
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "event line does not match docs/events.schema.json: {errors:?}\n{line}"
    );
    assert_eq!(v["v"], 1, "event line without the schema version: {line}");
}

/// One HTTP request to the control API: (status, body as JSON or text).
pub(crate) fn http(
    method: &str,
    url: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    macro_rules! with_headers {
        ($r:expr) => {{
            let mut r = $r;
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r
        }};
    }
    let resp = match (method, body) {
        ("GET", _) => with_headers!(agent.get(url)).call(),
        ("DELETE", _) => with_headers!(agent.delete(url)).call(),
        ("POST", Some(b)) => with_headers!(agent.post(url)).send(b.to_string()),
        ("POST", None) => with_headers!(agent.post(url)).send_empty(),
        ("PATCH", b) => with_headers!(agent.patch(url)).send(b.unwrap_or("{}").to_string()),
        (m, _) => panic!("method {m}"),
    };
    let mut resp = resp.expect("HTTP request to netchaos");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// A Python snippet running beside the test, its stdout read line by
/// line; killed when dropped (a failing test leaves nothing behind).
pub(crate) struct PythonBg {
    child: Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl PythonBg {
    pub(crate) fn start(code: &str, args: &[&str]) -> PythonBg {
        PythonBg::spawn(Command::new("python3").arg("-c").arg(code).args(args))
    }

    /// The same for a Node snippet (`process.argv[1]` on are `args`).
    pub(crate) fn node(code: &str, args: &[&str]) -> PythonBg {
        PythonBg::spawn(Command::new("node").arg("-e").arg(code).args(args))
    }

    /// The same for a Python snippet run inside the named namespace.
    pub(crate) fn in_netns(netns: &str, code: &str, args: &[&str]) -> PythonBg {
        PythonBg::spawn(
            Command::new("ip")
                .args(["netns", "exec", netns, "python3", "-c", code])
                .args(args),
        )
    }

    fn spawn(c: &mut Command) -> PythonBg {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run a background snippet");
        let out = std::io::BufReader::new(child.stdout.take().expect("piped"));
        PythonBg { child, out }
    }

    /// Its next line (without the newline; empty once it has ended).
    pub(crate) fn line(&mut self) -> String {
        let mut l = String::new();
        let _ = std::io::BufRead::read_line(&mut self.out, &mut l);
        l.trim_end_matches('\n').to_string()
    }
}

impl Drop for PythonBg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a Python snippet; returns (exit code, stdout, stderr).
pub(crate) fn python(code: &str, args: &[&str]) -> (i32, String, String) {
    let child = Command::new("python3")
        .arg("-c")
        .arg(code)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    // Bounded: a client library that deadlocks (grpcio 1.75.1+ can, in
    // `_Rendezvous.__del__`, grpc/grpc#43421) fails the test instead of
    // holding CI until its own limit.
    let Ok(out) = rx.recv_timeout(PYTHON_LIMIT) else {
        signal(pid, libc::SIGKILL);
        panic!("a python3 client did not finish in {PYTHON_LIMIT:?}: killed");
    };
    let out = out.expect("wait for python3");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The longest a Python client of the tests may run.
const PYTHON_LIMIT: Duration = Duration::from_secs(180);

/// The NODE_PATH holding the Node `package` (`NETCHAOS_NODE_MODULES`,
/// where scripts/test.sh installs it), with node on PATH; `None` (skipped,
/// with the reason) otherwise, which CI does not allow.
pub(crate) fn node_modules_with(package: &str) -> Option<std::ffi::OsString> {
    let modules = std::env::var_os("NETCHAOS_NODE_MODULES")
        .filter(|m| std::path::Path::new(m).join(package).is_dir());
    if modules.is_none() {
        assert!(
            !in_ci(),
            "the Node module {package} (NETCHAOS_NODE_MODULES, set by scripts/test.sh) is required in CI"
        );
        eprintln!("SKIPPED: no {package} Node module (scripts/test.sh installs it)");
        return None;
    }
    need(&["node"]).then_some(modules).flatten()
}

/// Runs a Node snippet with `modules` on NODE_PATH (`process.argv[1]` on
/// are `args`); returns (exit code, stdout, stderr).
pub(crate) fn node(code: &str, args: &[&str], modules: &std::ffi::OsStr) -> (i32, String, String) {
    let out = Command::new("node")
        .arg("-e")
        .arg(code)
        .args(args)
        .env("NODE_PATH", modules)
        .output()
        .expect("run node");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A network namespace made for one test, joined to the host by a veth
/// pair (host side .1, namespace side .2 of a /30); deleted on drop.
pub(crate) struct TestNetns {
    pub name: String,
    pub host_ip: std::net::Ipv4Addr,
    pub ns_ip: std::net::Ipv4Addr,
    /// The host end of the veth pair.
    pub host_if: String,
    /// The namespace end.
    pub ns_if: String,
}

impl TestNetns {
    /// `None` (with a printed reason) where namespaces cannot be made: not
    /// root, or no `ip`. In CI both are required.
    pub(crate) fn new() -> Option<TestNetns> {
        static N: AtomicUsize = AtomicUsize::new(0);
        if unsafe { libc::geteuid() } != 0 {
            assert!(!in_ci(), "CI runs the suite as root");
            eprintln!("SKIPPED: making a test network namespace needs root");
            return None;
        }
        if missing_tool("ip") {
            return None;
        }
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(remove_orphaned_netns);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let id = (std::process::id() as usize * 7 + n) % 250;
        let name = format!("nctest-{}-{n}", std::process::id());
        let host_if = format!("nch{}x{n}", std::process::id() % 100_000);
        let ns_if = format!("ncn{}x{n}", std::process::id() % 100_000);
        let host_ip = std::net::Ipv4Addr::new(10, 213, id as u8, 1);
        let ns_ip = std::net::Ipv4Addr::new(10, 213, id as u8, 2);
        let ns = TestNetns {
            name,
            host_ip,
            ns_ip,
            host_if: host_if.clone(),
            ns_if: ns_if.clone(),
        };
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), ns.name.clone()],
            vec![
                "link".into(),
                "add".into(),
                host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                ns_if.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                ns_if.clone(),
                "netns".into(),
                ns.name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{host_ip}/30"),
                "dev".into(),
                host_if.clone(),
            ],
            vec!["link".into(), "set".into(), host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                ns.name.clone(),
                "addr".into(),
                "add".into(),
                format!("{ns_ip}/30"),
                "dev".into(),
                ns_if.clone(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                ns_if,
                "up".into(),
            ],
            vec![
                "-n".into(),
                ns.name.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in steps {
            let out = Command::new("ip").args(&step).output().expect("run ip");
            assert!(
                out.status.success(),
                "ip {}: {}",
                step.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(ns)
    }

    /// Runs a shell command inside the namespace.
    pub(crate) fn sh(&self, script: &str) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", script])
            .output()
            .expect("ip netns exec")
    }
}

/// Removes the test namespaces of test processes that are gone: one killed
/// (SIGKILL, a CI run stopped) never ran its [`TestNetns`]'s drop, and its
/// named namespace outlives it in `/run/netns`.
fn remove_orphaned_netns() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("nctest-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

// --- `netchaos run` ---------------------------------------------------

/// `netchaos run ARGS -- CMD...`, bounded in time; (code, stdout, stderr).
pub(crate) fn wrapped(args: &[&str], cmd: &[&str]) -> (i32, String, String) {
    wrapped_with(Command::new(BIN), args, cmd)
}

pub(crate) fn wrapped_with(mut c: Command, args: &[&str], cmd: &[&str]) -> (i32, String, String) {
    c.arg("run").args(args).arg("--").args(cmd);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn netchaos run");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("netchaos run did not finish in 60 s");
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

pub(crate) fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// An unprivileged copy of netchaos: the binary in a world-readable
/// directory, run as `nobody` with setpriv. `None` (and a printed reason)
/// when this test process cannot switch users, which CI never allows.
pub(crate) struct Nobody {
    pub dir: tempfile::TempDir,
}

impl Nobody {
    pub(crate) fn new() -> Option<Nobody> {
        if !is_root() {
            assert!(!in_ci(), "CI runs the suite as root");
            eprintln!(
                "SKIPPED: not root, so cannot switch to an unprivileged user (the rootless path runs in the other tests)"
            );
            return None;
        }
        if missing_tool("setpriv") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("netchaos");
        std::fs::copy(BIN, &bin).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Nobody { dir })
    }

    pub(crate) fn command(&self) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ]);
        c.arg(self.dir.path().join("netchaos"));
        c.current_dir("/");
        c
    }
}

/// Asserts that no process lives in the namespace `ns` (as printed by
/// `readlink /proc/self/ns/net`) and that the host has no netchaos table.
pub(crate) fn assert_nothing_left(ns: &str) {
    let ns = ns.trim();
    assert!(ns.starts_with("net:["), "not a namespace id: {ns:?}");
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        host_ns.to_str().unwrap(),
        ns,
        "the command ran in the host's namespace"
    );
    // The last processes may take a moment to be reaped.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .filter(|e| {
                std::fs::read_link(e.path().join("ns/net")).is_ok_and(|l| l.to_str() == Some(ns))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "processes left in {ns}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    if is_root() && Command::new("nft").arg("--version").output().is_ok() {
        let out = Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        let tables = String::from_utf8_lossy(&out.stdout);
        assert!(
            !tables.contains("netchaos"),
            "a netchaos table in the host namespace: {tables}"
        );
    }
}

pub(crate) fn need(tools: &[&str]) -> bool {
    tools.iter().all(|t| !missing_tool(t))
}

/// A second link into a [`TestNetns`]: a point-to-point path of two TUN
/// devices joined by `support/tunpath.py`, which holds each packet
/// `delay_ms` each way (a round trip of twice that, MTU 1500, one segment
/// per packet) — netem's delay, built without sch_netem. Stopped when
/// dropped; its devices go with the process.
pub(crate) struct DelayedPath {
    child: Child,
    /// This host's end, to bind a server to.
    pub(crate) host_ip: std::net::Ipv4Addr,
}

impl DelayedPath {
    /// `None` (with a printed reason) where there is no TUN device; in CI
    /// that is a failure.
    pub(crate) fn new(ns: &TestNetns, delay_ms: u32) -> Option<DelayedPath> {
        if !std::path::Path::new("/dev/net/tun").exists() {
            assert!(
                !in_ci(),
                "CI needs /dev/net/tun (the tun module) for the reference path"
            );
            eprintln!("SKIPPED: no /dev/net/tun for a reference path");
            return None;
        }
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tunpath.py");
        let id = ns.host_ip.octets()[2];
        let host_ip = std::net::Ipv4Addr::new(10, 214, id, 1);
        let mut child = Command::new("python3")
            .arg(script)
            .arg(delay_ms.to_string())
            .arg(&ns.name)
            .arg(ns.host_if.replacen("nch", "nto", 1))
            .arg(ns.host_if.replacen("nch", "nti", 1))
            .arg(host_ip.to_string())
            .arg(std::net::Ipv4Addr::new(10, 214, id, 2).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start tunpath.py");
        let stdout = child.stdout.take().unwrap();
        // Killed on drop from here on, a failed start included.
        let path = DelayedPath { child, host_ip };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        assert_eq!(line.trim(), "ready", "tunpath.py could not make its path");
        Some(path)
    }
}

impl Drop for DelayedPath {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `support/httpd.py`, stopped when dropped.
pub(crate) struct Httpd {
    child: Child,
    _stdin: std::process::ChildStdin,
    pub(crate) port: u16,
}

impl Httpd {
    pub(crate) fn start(tls: Option<&TestCa>) -> Httpd {
        Httpd::start_on("127.0.0.1", tls)
    }

    /// On `bind` (an address of this host).
    pub(crate) fn start_on(bind: &str, tls: Option<&TestCa>) -> Httpd {
        Httpd::spawn("httpd.py", &["--bind", bind], tls)
    }

    /// `support/grpcd.py`, a gRPC server (HTTP/2; over TLS with `tls`'s
    /// leaf), on 127.0.0.1.
    pub(crate) fn grpc(tls: Option<&TestCa>) -> Httpd {
        Httpd::spawn("grpcd.py", &[], tls)
    }

    /// The same, sending each connection away (GOAWAY) `ms` after it
    /// opened (gRPC's max connection age).
    pub(crate) fn grpc_aging(ms: u64, tls: Option<&TestCa>) -> Httpd {
        Httpd::spawn("grpcd.py", &["--max-age", &ms.to_string()], tls)
    }

    /// Its process (a test may kill it: a server that crashes).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn spawn(script: &str, args: &[&str], tls: Option<&TestCa>) -> Httpd {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/support")
            .join(script);
        let mut c = Command::new("python3");
        c.arg(script).args(args);
        if let Some(ca) = tls {
            c.arg("--cert").arg(ca.path("leaf.pem"));
            c.arg("--key").arg(ca.path("leaf.key"));
        }
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a test server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .expect("the test server prints its port");
        let stdin = child.stdin.take().unwrap();
        Httpd {
            child,
            _stdin: stdin,
            port,
        }
    }

    pub(crate) fn http(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn https(&self) -> String {
        format!("https://localhost:{}", self.port)
    }
}

impl Drop for Httpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA of the test's own and a certificate it signed for localhost and
/// 127.0.0.1, as PEM files in a temporary directory.
pub(crate) struct TestCa {
    dir: tempfile::TempDir,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        TestCa::for_names(&["localhost", "127.0.0.1"])
    }

    /// A CA, and a leaf for `names`.
    pub(crate) fn for_names(names: &[&str]) -> TestCa {
        TestCa::make(names, false)
    }

    /// A CA, and a leaf for `names` that expired yesterday.
    pub(crate) fn expired_for(names: &[&str]) -> TestCa {
        TestCa::make(names, true)
    }

    fn make(names: &[&str], expired: bool) -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        // Each its own name: clients look issuers up by name, and two
        // CAs of one name in a test would stand in for each other.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ca.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("netchaos tests' upstream CA {} {n}", std::process::id()),
        );
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut leaf = CertificateParams::new(names).unwrap();
        if expired {
            let now = time::OffsetDateTime::now_utc();
            leaf.not_before = now - time::Duration::days(30);
            leaf.not_after = now - time::Duration::days(1);
        }
        let leaf = leaf.signed_by(&leaf_key, &issuer).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        std::fs::write(dir.path().join("leaf.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.path().join("leaf.key"), leaf_key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.key"), issuer.key().serialize_pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in ["ca.pem", "ca.key", "leaf.pem", "leaf.key"] {
            std::fs::set_permissions(dir.path().join(f), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        TestCa { dir }
    }

    pub(crate) fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn ca(&self) -> String {
        self.path("ca.pem").display().to_string()
    }
}

// --- a resolver of the test's own ------------------------------------

/// `tests/support/dnsd.py` answering `names` (NAME=IP), and a resolver
/// file pointing at it; stopped on drop.
pub(crate) struct Dnsd {
    child: Child,
    _dir: tempfile::TempDir,
    pub(crate) resolv: String,
}

impl Dnsd {
    pub(crate) fn start(names: &[&str]) -> Dnsd {
        Dnsd::start_in(None, names)
    }

    /// The same, inside the named network namespace (on its loopback).
    pub(crate) fn start_in(netns: Option<&str>, names: &[&str]) -> Dnsd {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "python3"]);
                c
            }
            None => Command::new("python3"),
        };
        let mut child = cmd
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/dnsd.py"
            ))
            .args(names)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let port: u16 = line.trim().parse().expect("dnsd's port");
        let dir = tempfile::tempdir().unwrap();
        let resolv = dir.path().join("resolv.conf");
        std::fs::write(&resolv, format!("nameserver 127.0.0.1:{port}\n")).unwrap();
        Dnsd {
            child,
            resolv: resolv.display().to_string(),
            _dir: dir,
        }
    }
}

impl Drop for Dnsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Cgroups laid out as a container runtime and the kubelet lay them out,
/// in a subtree of the node's cgroup v2 hierarchy made for the test, with
/// processes in them; the processes are killed and the cgroups removed
/// when dropped.
pub(crate) struct RuntimeCgroups {
    base: std::path::PathBuf,
    dirs: Vec<std::path::PathBuf>,
    procs: Vec<std::process::Child>,
}

impl RuntimeCgroups {
    /// `None` (with the reason printed; a failure in CI) where there is no
    /// writable cgroup v2 hierarchy. `tag` names the test's subtree.
    pub(crate) fn new(tag: &str) -> Option<RuntimeCgroups> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
        });
        let base = root.map(|r| r.join(format!("nctest-{tag}-{}", std::process::id())));
        match base {
            Some(b) if std::fs::create_dir(&b).is_ok() => Some(RuntimeCgroups {
                dirs: vec![b.clone()],
                base: b,
                procs: Vec::new(),
            }),
            _ => {
                assert!(!in_ci(), "CI has a writable cgroup v2 hierarchy");
                eprintln!("SKIPPED: no writable cgroup v2 hierarchy to lay out containers in");
                None
            }
        }
    }

    /// Runs `sleep` (in the namespace `netns`, else here) in the cgroup
    /// `path` (made as needed) below the test's subtree.
    pub(crate) fn process_in(&mut self, path: &str, netns: Option<&str>) {
        let mut dir = self.base.clone();
        for comp in path.split('/') {
            dir.push(comp);
            if !dir.exists() {
                std::fs::create_dir(&dir).unwrap();
                self.dirs.push(dir.clone());
            }
        }
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "sleep", "60"]);
                c
            }
            None => {
                let mut c = Command::new("sleep");
                c.arg("60");
                c
            }
        };
        let child = cmd.stdin(Stdio::null()).spawn().unwrap();
        let pid = child.id();
        self.procs.push(child);
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for RuntimeCgroups {
    fn drop(&mut self) {
        for c in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}
