//! A real container runtime: rootful Podman (installed by scripts/test.sh,
//! with a base image it builds from Debian packages), on an internal
//! network, with no traffic leaving the machine. `attach --container`
//! faults a running container's traffic, and ending it lets the
//! connections open through it finish; a pod's sidecar (`run --in-place`
//! in a container of the pod, its own PID namespace) killed with SIGKILL
//! takes over again when restarted with the same arguments; the image
//! build context stays small.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::*;

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/containers.conf");

fn podman(args: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("120").arg("podman").args(args);
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        cmd.env("CONTAINERS_CONF", CONF);
    }
    cmd.stdin(Stdio::null()).output().expect("run podman")
}

/// `podman ARGS`, which must succeed; its stdout, trimmed.
fn ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What one test made in Podman, removed when dropped (failure too).
struct Made {
    prefix: String,
    image: String,
    containers: Vec<String>,
    pods: Vec<String>,
    networks: Vec<String>,
}

impl Made {
    /// `None` (the reason printed; a failure in CI) without root, Podman
    /// or the test image.
    fn new(test: &str) -> Option<Made> {
        if unsafe { libc::geteuid() } != 0 {
            assert!(!in_ci(), "CI runs the suite as root");
            eprintln!("SKIPPED: rootful Podman needs root");
            return None;
        }
        if missing_tool("podman") || missing_tool("nsenter") {
            return None;
        }
        let image = std::env::var("NETCHAOS_TEST_IMAGE").unwrap_or_else(|_| {
            let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
            let codename = release
                .lines()
                .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
                .unwrap_or("none")
                .to_string();
            format!("localhost/netchaos-test-base:{codename}")
        });
        if !podman(&["image", "exists", &image]).status.success() {
            assert!(!in_ci(), "scripts/test.sh builds {image} in CI");
            eprintln!("SKIPPED: no image {image} (scripts/test.sh builds it with mmdebstrap)");
            return None;
        }
        let made = Made {
            prefix: format!("nctest-{}-{test}", std::process::id()),
            image,
            containers: Vec::new(),
            pods: Vec::new(),
            networks: Vec::new(),
        };
        let net = made.prefix.clone();
        let mut made = made;
        ok(&["network", "create", "--internal", &net]);
        made.networks.push(net);
        Some(made)
    }

    fn network(&self) -> &str {
        &self.networks[0]
    }

    /// Starts a container `name` of the test image (in `pod`, else on the
    /// test's network) running `cmd`; its full ID.
    fn run(&mut self, name: &str, pod: Option<&str>, extra: &[&str], cmd: &[&str]) -> String {
        let full = format!("{}-{name}", self.prefix);
        let place = match pod {
            Some(p) => format!("--pod={}-{p}", self.prefix),
            None => format!("--network={}", self.network()),
        };
        let mut args = vec!["run", "-d", "--name", &full, &place];
        args.extend_from_slice(extra);
        args.push(&self.image);
        args.extend_from_slice(cmd);
        let id = ok(&args);
        self.containers.push(full);
        id
    }

    fn pod(&mut self, name: &str) {
        let full = format!("{}-{name}", self.prefix);
        ok(&[
            "pod",
            "create",
            "--name",
            &full,
            "--network",
            self.network(),
        ]);
        self.pods.push(full);
    }

    fn name(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// The container's main process, as this namespace sees it.
    fn pid(&self, name: &str) -> String {
        ok(&["inspect", "-f", "{{.State.Pid}}", &self.name(name)])
    }

    /// `python3 -c CODE ARGS` in the container; its stdout.
    fn python(&self, name: &str, code: &str, args: &[&str]) -> String {
        let full = self.name(name);
        let mut a = vec!["exec", &full, "timeout", "30", "python3", "-c", code];
        a.extend_from_slice(args);
        let out = podman(&a);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
            + &String::from_utf8_lossy(&out.stderr)
    }

    /// The container's network namespace's nftables tables and rules.
    fn rules(&self, name: &str) -> String {
        let out = Command::new("nsenter")
            .args(["-t", &self.pid(name), "-n", "nft", "list", "ruleset"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = podman(&["rm", "-f", "-t", "0", c]);
        }
        for p in &self.pods {
            let _ = podman(&["pod", "rm", "-f", "-t", "0", p]);
        }
        for n in &self.networks {
            let _ = podman(&["network", "rm", "-f", n]);
        }
    }
}

/// A server: "slow" gets 64 KiB over ~2.4 s; "echo" has the rest echoed,
/// anything else all of it.
const SERVER: &str = r#"
import socket, threading, time
def serve(c):
    what = c.recv(4)
    if what == b"slow":
        for _ in range(16):
            c.sendall(b"x" * 4096); time.sleep(0.15)
        c.close(); return
    if what != b"echo":
        c.sendall(what)
    while True:
        d = c.recv(1024)
        if not d: break
        c.sendall(d)
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 9000)); l.listen(64)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// One exchange by name: "ok SECONDS" or "error NAME".
const ONCE: &str = r#"
import socket, sys, time
t = time.monotonic()
try:
    s = socket.create_connection((sys.argv[1], 9000), timeout=5)
    s.sendall(b"ping"); d = s.recv(10)
    print("ok" if d == b"ping" else "bad", round(time.monotonic() - t, 3))
except OSError as e:
    print("error", type(e).__name__)
"#;

fn once(made: &Made, from: &str, to: &str) -> String {
    made.python(from, ONCE, &[&made.name(to)])
}

fn secs(line: &str) -> f64 {
    line.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1.0)
}

/// Polls (bounded) until the server container answers.
fn wait_for_server(made: &Made, from: &str, to: &str) {
    let t = Instant::now();
    loop {
        let line = once(made, from, to);
        if line.starts_with("ok") {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{line}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two connections open through the relay (a download in flight, an idle
/// pooled one): "ready", then, once /tmp/go exists, both finish.
const TWO_OPEN: &str = r#"
import os, socket, sys, time
got = b""
try:
    a = socket.create_connection((sys.argv[1], 9000), timeout=15); a.sendall(b"slow")
    b = socket.create_connection((sys.argv[1], 9000), timeout=15); b.sendall(b"echoone")
    one = b.recv(100)
    while len(got) < 4096:
        got += a.recv(65536)
    print("ready", one.decode(), flush=True)
    for _ in range(300):
        if os.path.exists("/tmp/go"): break
        time.sleep(0.05)
    while len(got) < 65536:
        d = a.recv(65536)
        if not d: break
        got += d
    b.sendall(b"two"); two = b.recv(100)
    print("done", len(got), two.decode(), flush=True)
except OSError as e:
    print("error", type(e).__name__, len(got), flush=True)
"#;

#[test]
fn attach_faults_a_podman_container_and_ending_it_keeps_open_connections() {
    let Some(mut made) = Made::new("attach") else {
        return;
    };
    made.run("srv", None, &[], &["python3", "-c", SERVER]);
    let id = made.run("cli", None, &[], &["sleep", "300"]);
    wait_for_server(&made, "cli", "srv");

    let p = Proxy::start_cmd(
        "attach",
        &[
            "--container",
            &id[..12],
            "--drain",
            "20s",
            "--fault",
            "latency:delay=300ms",
        ],
    );
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    // By name: the container's own resolver (Podman's) answers through
    // netchaos's DNS layer.
    let line = once(&made, "cli", "srv");
    assert!(
        line.starts_with("ok") && secs(&line) >= 0.28,
        "{line}\n{}",
        p.stderr()
    );

    let cli = made.name("cli");
    let srv = made.name("srv");
    let mut two = Command::new("podman")
        .args([
            "exec", &cli, "timeout", "60", "python3", "-c", TWO_OPEN, &srv,
        ])
        .env(
            "CONTAINERS_CONF",
            std::env::var("CONTAINERS_CONF").unwrap_or(CONF.into()),
        )
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(two.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready one", "{}", p.stderr());

    p.term();
    let t = Instant::now();
    while made.rules("cli").contains("redirect") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{}",
            made.rules("cli")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let direct = once(&made, "cli", "srv");
    assert!(
        direct.starts_with("ok") && secs(&direct) < 0.25,
        "new connections go direct: {direct}"
    );
    ok(&["exec", &cli, "touch", "/tmp/go"]);
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let _ = two.wait();
    assert_eq!(line.trim(), "done 65536 two", "{}", p.stderr());
    let (status, err) = p.wait(Duration::from_secs(25));
    assert!(status.success(), "{err}");
    assert!(
        !made.rules("cli").contains("netchaos"),
        "{}",
        made.rules("cli")
    );
}

#[test]
fn a_pods_sidecar_killed_with_sigkill_takes_over_when_restarted() {
    let Some(mut made) = Made::new("pod") else {
        return;
    };
    made.run("srv", None, &[], &["python3", "-c", SERVER]);
    made.pod("pod");
    made.run("app", Some("pod"), &[], &["sleep", "300"]);
    wait_for_server(&made, "app", "srv");
    let bin = format!("{BIN}:/usr/local/bin/netchaos:ro");
    made.run(
        "sidecar",
        Some("pod"),
        &["--cap-drop=all", "--cap-add=NET_ADMIN", "-v", &bin],
        &[
            "netchaos",
            "run",
            "--in-place",
            "--fault",
            "latency:delay=300ms",
            "--",
            "sleep",
            "600",
        ],
    );
    // The table's owner line: a restarted sidecar is ready once the table
    // is its own (the killed one's has the same rules).
    let owner = |made: &Made| {
        made.rules("app")
            .lines()
            .find(|l| l.contains("comment \"netchaos"))
            .map(str::to_string)
    };
    let ready = |made: &Made, before: Option<String>| {
        let t = Instant::now();
        while !made.rules("app").contains("redirect") || owner(made) == before {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the sidecar did not start: {}",
                String::from_utf8_lossy(&podman(&["logs", &made.name("sidecar")]).stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    ready(&made, None);
    let line = once(&made, "app", "srv");
    assert!(line.starts_with("ok") && secs(&line) >= 0.28, "{line}");

    let sidecar = made.name("sidecar");
    ok(&["kill", "-s", "KILL", &sidecar]);
    let _ = podman(&["wait", &sidecar]);
    assert!(
        made.rules("app").contains("table inet netchaos"),
        "the table stays"
    );
    let cut = once(&made, "app", "srv");
    assert!(cut.starts_with("error"), "the app is cut off: {cut}");

    // Restarted as the kubelet (or `--restart`) would: same arguments.
    let killed = owner(&made);
    assert!(killed.is_some(), "{}", made.rules("app"));
    ok(&["start", &sidecar]);
    ready(&made, killed);
    let logs = String::from_utf8_lossy(&podman(&["logs", &sidecar]).stderr).into_owned();
    assert!(logs.contains("no longer running"), "{logs}");
    let line = once(&made, "app", "srv");
    assert!(
        line.starts_with("ok") && secs(&line) >= 0.28,
        "the app's connections work again, faulted: {line}"
    );

    ok(&["stop", "-t", "10", &sidecar]);
    assert!(
        !made.rules("app").contains("netchaos"),
        "{}",
        made.rules("app")
    );
    let back = once(&made, "app", "srv");
    assert!(back.starts_with("ok") && secs(&back) < 0.25, "{back}");
}

/// What `docker build .` sends stays small: `.dockerignore` keeps the build
/// outputs and the history out (measured by Podman itself, from a build
/// on the test image that copies the context in).
#[test]
fn the_image_build_context_is_under_10_mb() {
    let Some(made) = Made::new("context") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("Containerfile");
    std::fs::write(
        &file,
        format!("FROM {}\nCOPY . /ctx\nRUN du -sk /ctx\n", made.image),
    )
    .unwrap();
    let tag = format!("localhost/{}:ctx", made.prefix);
    let out = podman(&[
        "build",
        "--network=none",
        "-f",
        file.to_str().unwrap(),
        "-t",
        &tag,
        env!("CARGO_MANIFEST_DIR"),
    ]);
    let _ = podman(&["rmi", "-f", &tag]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_suffix("\t/ctx").and_then(|n| n.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no size in {text}"));
    assert!(kb < 10 * 1024, "the build context is {kb} KiB");
    assert!(kb > 100, "the sources are in it: {kb} KiB");
}
