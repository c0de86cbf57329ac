//! What of netchaos itself its clients can reach: the wrapped command never
//! its own run's control API (unless the operator hands it over), no
//! client a listener of netchaos's through the relay (no self-dial loop),
//! a local user no listener a root netchaos would open for it beyond its
//! own rights; and the API serves legitimate crowds (many workers, big
//! `/populate`s, pooled idle connections) while shedding slow ones. Each
//! attack is performed for real and asserted to fail.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// What the command tries against the API at `$1` (all from inside):
/// reset every fault, list the proxies, and have netchaos listen on every
/// interface. Prints one line per attempt: curl's exit code and status.
const ATTACK: &str = r#"
api=$1
for req in "-XPOST $api/reset" "$api/proxies" \
    "-XPOST $api/proxies -d {\"name\":\"evil\",\"listen\":\"0.0.0.0:$2\",\"upstream\":\"127.0.0.1:1\"}"; do
  code=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' $req 2>/dev/null); echo "rc=$? http=$code"
done
"#;

fn attack_own_api(runner: Command) {
    let port = unused_port();
    let api = format!("127.0.0.1:{port}");
    let evil = unused_port().to_string();
    let (code, out, err) = wrapped_with(
        runner,
        &["--api", &api, "--fault", "latency:delay=1ms"],
        &["sh", "-c", ATTACK, "sh", &format!("http://{api}"), &evil],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}\n{err}");
    for l in lines {
        // curl's 7: "Failed to connect" (refused), as a closed port.
        assert_eq!(
            l, "rc=7 http=000",
            "the command reached its run's API: {out}\n{err}"
        );
    }
    assert!(err.contains("dial_own_listener 3"), "{err}");
    assert!(
        TcpStream::connect(("127.0.0.1", evil.parse::<u16>().unwrap())).is_err(),
        "netchaos listens for the command"
    );
}

#[test]
fn the_wrapped_command_cannot_drive_its_own_runs_api() {
    if !need(&["ip", "nft", "curl"]) {
        return;
    }
    attack_own_api(Command::new(BIN));
}

#[test]
fn a_rootless_command_cannot_drive_its_own_runs_api_either() {
    if !need(&["ip", "nft", "curl"]) {
        return;
    }
    let Some(nobody) = Nobody::new() else { return };
    attack_own_api(nobody.command());
}

/// `--api-for-command`: the command gets the API's address and a token of
/// its own; the operator's token (file) stays out of its reach.
#[test]
fn api_for_command_hands_over_the_api_with_a_token_of_its_own() {
    if !need(&["ip", "nft", "curl"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "operator-secret\n").unwrap();
    let script = r#"
echo "url=$NETCHAOS_API_URL toxiproxy=$TOXIPROXY_URL"
echo "token=$NETCHAOS_API_TOKEN"
echo "file=$(cat "$1" 2>&1)"
curl -sS -m 5 -o /dev/null -w 'with=%{http_code}\n' -H "Authorization: Bearer $NETCHAOS_API_TOKEN" "$NETCHAOS_API_URL/proxies"
curl -sS -m 5 -o /dev/null -w 'without=%{http_code}\n' "$NETCHAOS_API_URL/proxies"
"#;
    let (code, out, err) = wrapped(
        &[
            "--api",
            "127.0.0.1:0",
            "--api-token-file",
            tf.to_str().unwrap(),
            "--api-for-command",
            "--fault",
            "latency:delay=1ms",
        ],
        &["sh", "-c", script, "sh", tf.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let field = |k: &str| {
        out.split_whitespace()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .to_string()
    };
    let url = field("url");
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
        "{out}"
    );
    assert!(out.contains(&format!("toxiproxy={url}")), "{out}");
    let token = field("token");
    assert_eq!(token.len(), 32, "{out}");
    assert!(
        !out.contains("operator-secret"),
        "the command read the operator's token: {out}"
    );
    assert!(
        out.contains("\nfile=\n"),
        "the token file is hidden (empty): {out}"
    );
    assert_eq!(field("with"), "200", "{out}\n{err}");
    assert_eq!(field("without"), "401", "{out}\n{err}");
}

/// A root `netchaos server`'s default loopback API, no token: another
/// local user asks it to listen on a privileged port and on every
/// interface (which would expose a loopback-only service to the network).
#[test]
fn a_local_user_cannot_make_a_root_server_listen_beyond_its_rights() {
    if !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: a root server's listen policy is tested as root");
        return;
    }
    if !need(&["curl", "setpriv"]) {
        return;
    }
    let p = Proxy::start_cmd("server", &["--api", "127.0.0.1:0"]);
    let allowed = Proxy::start_cmd("server", &["--api", "127.0.0.1:0", "--api-listen-allow"]);
    let post = |url: &str, user: &str, name: &str, listen: &str| -> (String, String) {
        let body = format!(r#"{{"name":"{name}","listen":"{listen}","upstream":"127.0.0.1:1"}}"#);
        let mut c = Command::new("setpriv");
        if user == "nobody" {
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        }
        let out = c
            .args(["curl", "-sS", "-m", "5", "-w", "\n%{http_code}", "-XPOST"])
            .arg(format!("{url}/proxies"))
            .args(["-d", &body])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.to_string(), body.to_string())
    };
    let low = "127.0.0.1:81";
    let wide = format!("0.0.0.0:{}", unused_port());
    let (code, body) = post(&p.url(), "nobody", "low", low);
    assert_eq!(code, "403", "{body}");
    assert!(
        body.contains("privileged port (81)") && body.contains("--api-listen-allow"),
        "{body}"
    );
    let (code, body) = post(&p.url(), "nobody", "wide", &wide);
    assert_eq!(code, "403", "{body}");
    assert!(body.contains("beyond the API's own interface"), "{body}");
    assert!(
        TcpStream::connect("127.0.0.1:81").is_err(),
        "port 81 was opened"
    );
    // Its own rights are fine: a loopback port above 1024.
    let (code, body) = post(&p.url(), "nobody", "fine", "127.0.0.1:0");
    assert_eq!(code, "201", "{body}");
    // Root asks for itself; the operator may allow it for everyone.
    let (code, body) = post(&p.url(), "root", "root-wide", &wide);
    assert_eq!(code, "201", "{body}");
    let wide2 = format!("0.0.0.0:{}", unused_port());
    let (code, body) = post(&allowed.url(), "nobody", "allowed", &wide2);
    assert_eq!(code, "201", "{body}");
}

/// Under `attach`, a process of the namespace connects to the relay's own
/// listener: netchaos refuses it once instead of dialling itself until it
/// runs out of descriptors.
#[test]
fn a_connection_to_the_relays_own_listener_is_refused_not_looped() {
    let Some(ns) = TestNetns::new() else { return };
    if !need(&["nft", "iptables", "python3", "ss"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let path = format!("/run/netns/{}", ns.name);
    let p = Proxy::start_cmd(
        "attach",
        &[
            "--netns",
            &path,
            "--events",
            events.to_str().unwrap(),
            "--fault",
            "latency:delay=1ms",
        ],
    );
    assert!(p.stderr().contains("netchaos: ready"), "{}", p.stderr());
    let listening = String::from_utf8_lossy(&ns.sh("ss -Htln").stdout).into_owned();
    let port = listening
        .lines()
        .find_map(|l| {
            l.split_whitespace()
                .nth(3)?
                .strip_prefix("127.0.0.1:")?
                .parse::<u16>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no relay listener in {listening}"));
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", p.pid()))
            .unwrap()
            .count()
    };
    let before = fds();
    let out = ns.sh(&format!(
        "timeout 20 python3 -c 'import socket\ntry:\n  socket.create_connection((\"127.0.0.1\", {port}), timeout=5); print(\"connected\")\nexcept OSError as e: print(type(e).__name__)'"
    ));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), "ConnectionRefusedError", "{text}");
    std::thread::sleep(Duration::from_millis(300));
    let after = fds();
    assert!(
        after < before + 8,
        "descriptors {before} -> {after}: a self-dial loop"
    );
    let (_, err) = p.stop();
    let opens = read_events(&events)
        .iter()
        .filter(|e| e["event"] == "open")
        .count();
    assert!(opens <= 1, "{opens} connections opened: {err}");
    assert!(err.contains("dial_own_listener"), "{err}");
}

/// The API serves a test suite's crowd: 100 workers at once on kept
/// connections, a `/populate` of 700 proxies, and a pooled connection
/// left idle longer than the old 10 s.
#[test]
fn the_api_serves_many_clients_big_populates_and_idle_pools() {
    let p = Proxy::start_cmd("server", &["--api", "127.0.0.1:0"]);
    let api = p.api.unwrap();
    let workers: Vec<_> = (0..100)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(api).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut ok = 0;
                for _ in 0..3 {
                    s.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n")
                        .unwrap();
                    let mut buf = [0u8; 4096];
                    let n = s.read(&mut buf).unwrap();
                    if buf[..n].starts_with(b"HTTP/1.1 200") {
                        ok += 1;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                ok
            })
        })
        .collect();
    // All held open at once, then all answered.
    let ok: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(ok, 300);

    let proxies: Vec<Value> = (0..700)
        .map(|i| {
            serde_json::json!({
                "name": format!("populated-proxy-number-{i:04}"),
                "listen": "127.0.0.1:0",
                "upstream": "127.0.0.1:1",
                "enabled": false,
            })
        })
        .collect();
    let body = serde_json::to_string(&proxies).unwrap();
    // Beyond the old 64 KiB limit (Toxiproxy has none).
    assert!(body.len() > 64 << 10, "{}", body.len());
    let (status, v) = http("POST", &format!("{}/populate", p.url()), Some(&body), &[]);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["proxies"].as_array().map(Vec::len), Some(700));
    // A body beyond 8 MiB is refused from its length, before it is sent.
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /proxies HTTP/1.1\r\nHost: localhost\r\nContent-Length: 9437184\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );

    // A pooled connection idle for 12 s is still served.
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4096];
    s.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert!(s.read(&mut buf).unwrap() > 0);
    std::thread::sleep(Duration::from_secs(12));
    s.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "the idle connection was closed"
    );
}

/// Slow API clients (half a head, or a head and a body that never comes)
/// fill every slot; a new client is still served at once, the slow ones
/// are closed, and the relay goes on.
#[test]
fn slow_api_clients_give_way_to_new_ones() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let p = Proxy::start(&[
        "--api",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    let api = p.api.unwrap();
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", p.pid()))
            .unwrap()
            .count()
    };
    let before = fds();
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    let held: Vec<TcpStream> = (0..1100)
        .filter_map(|i| {
            let mut s = TcpStream::connect_timeout(&api, Duration::from_secs(2)).ok()?;
            let _ = match i % 2 {
                0 => s.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\nX-Slow: "),
                _ => s.write_all(
                    b"POST /proxies HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n\r\n",
                ),
            };
            Some(s)
        })
        .collect();
    assert!(held.len() > 600, "opened {}", held.len());
    std::thread::sleep(Duration::from_millis(500));
    let during = fds();
    assert!(
        during < before + 512 + 16,
        "{during} descriptors open (from {before}) under {} slow API connections",
        held.len()
    );
    // A new client is served at once: the idlest slow one makes room.
    let t = Instant::now();
    let (status, _) = http("GET", &format!("http://{api}/version"), None, &[]);
    assert_eq!(status, 200);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let mut c = connect(p.addr());
    c.write_all(b"still relaying").unwrap();
    let mut buf = [0u8; 14];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"still relaying");
    // Beyond the 512 slots, every slow one was closed (each within a
    // second of the newcomer that evicted it).
    std::thread::sleep(Duration::from_millis(1500));
    let n = held.len();
    let closed = held
        .into_iter()
        .filter(|s| {
            let mut s = s;
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut b = [0u8; 64];
            match s.read(&mut b) {
                Ok(0) => true,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => false,
            }
        })
        .count();
    assert!(
        closed + 512 + 1 >= n,
        "only {closed} of {n} slow connections were closed"
    );
}

#[test]
fn api_addresses_of_its_own_are_never_dialled_by_a_proxy() {
    // A proxy whose upstream is the API itself: refused like a closed port.
    let p = Proxy::start_cmd("server", &["--api", "127.0.0.1:0"]);
    let api = p.api.unwrap();
    let body = format!(r#"{{"name":"loop","listen":"127.0.0.1:0","upstream":"{api}"}}"#);
    let (status, v) = http("POST", &format!("{}/proxies", p.url()), Some(&body), &[]);
    assert_eq!(status, 201, "{v}");
    let listen: SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
    let mut s = TcpStream::connect(listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"POST /reset HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut buf = [0u8; 256];
    let r = s.read(&mut buf);
    assert!(
        !matches!(r, Ok(n) if n > 0),
        "the proxy reached the API: {:?}",
        r.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    );
}
