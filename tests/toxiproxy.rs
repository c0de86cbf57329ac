//! `netchaos server` as a drop-in for toxiproxy-server: one test per
//! difference found with Toxiproxy's own clients and suites, each asserting
//! what Toxiproxy 2.12 does — the API's shapes and codes, the data plane
//! (timeout, latency chains, reset_peer, how connections end), metrics and
//! the command line — and Toxiproxy clients written by others
//! (toxiproxy-python, toxiproxy-node-client) and a Go program speaking its
//! documented API.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

fn server(extra: &[&str]) -> Proxy {
    let mut args = vec!["--api", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Proxy::start_cmd("server", &args)
}

/// One raw HTTP/1.1 exchange: status, headers (names lower-cased), body.
fn raw(
    api: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: toxiproxy-cli\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, rest.to_string())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn create(u: &str, body: Value) -> (u16, Value) {
    http(
        "POST",
        &format!("{u}/proxies"),
        Some(&body.to_string()),
        &[],
    )
}

fn add_toxic(u: &str, proxy: &str, body: Value) -> (u16, Value) {
    http(
        "POST",
        &format!("{u}/proxies/{proxy}/toxics"),
        Some(&body.to_string()),
        &[],
    )
}

fn listen_of(v: &Value) -> SocketAddr {
    v["listen"].as_str().unwrap().parse().unwrap()
}

/// A one-line echo round trip, timed.
fn rtt(addr: SocketAddr) -> Duration {
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    c.write_all(b"omg\n").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    t.elapsed()
}

/// How a connection ended for a reader: "EOF" or "RST" (or "open").
fn ending(s: &mut TcpStream) -> &'static str {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return "EOF",
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return "RST",
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return "open";
            }
            Err(_) => return "RST",
        }
    }
}

#[test]
fn hostnames_in_listen_resolve_and_the_bound_address_is_reported() {
    let s = server(&[]);
    let u = s.url();
    let (st, v) = create(
        &u,
        json!({"name": "a", "listen": "localhost:0", "upstream": "localhost:20001"}),
    );
    assert_eq!(st, 201, "{v}");
    let listen = v["listen"].as_str().unwrap();
    assert!(
        listen.starts_with("127.0.0.1:") && !listen.ends_with(":0"),
        "{v}"
    );
    assert_eq!(v["upstream"], "localhost:20001", "upstream as given");
    assert!(TcpStream::connect(listen_of(&v)).is_ok());
    // Created disabled, the address stays as given.
    let (st, v) = create(
        &u,
        json!({"name": "b", "listen": "localhost:0", "upstream": "x:1", "enabled": false}),
    );
    assert_eq!((st, v["listen"].as_str()), (201, Some("localhost:0")));
    // "enabled": null is enabled, as Ruby's client sends it.
    let (st, v) = create(
        &u,
        json!({"name": "c", "listen": "localhost:0", "upstream": "x:1", "enabled": null}),
    );
    assert_eq!((st, v["enabled"].as_bool()), (201, Some(true)));
}

#[test]
fn a_timeout_in_force_at_accept_lets_no_byte_through() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "t", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let addr = listen_of(&v);
    for stream in ["upstream", "downstream"] {
        http("POST", &format!("{u}/reset"), None, &[]);
        let (st, _) = add_toxic(
            &u,
            "t",
            json!({"type": "timeout", "stream": stream, "attributes": {"timeout": 0}}),
        );
        assert_eq!(st, 200);
        let mut leaked = 0;
        for _ in 0..24 {
            let mut c = connect(addr);
            c.write_all(b"hello").unwrap();
            c.set_read_timeout(Some(Duration::from_millis(150)))
                .unwrap();
            let mut b = [0u8; 8];
            if matches!(c.read(&mut b), Ok(n) if n > 0) {
                leaked += 1;
            }
        }
        assert_eq!(leaked, 0, "{stream}: bytes got past a timeout toxic");
    }
}

#[test]
fn toxics_of_one_type_add_up_in_order() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "l", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let addr = listen_of(&v);
    add_toxic(
        &u,
        "l",
        json!({"type": "latency", "attributes": {"latency": 100}}),
    );
    add_toxic(
        &u,
        "l",
        json!({"type": "latency", "name": "second_latency_downstream", "attributes": {"latency": 100}}),
    );
    let t = rtt(addr);
    assert!(
        t >= Duration::from_millis(195),
        "two 100 ms latencies: {t:?}"
    );
}

#[test]
fn given_up_connections_end_with_a_fin() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    // Upstream down: the client connects, then reads the end.
    let (_, v) = create(
        &u,
        json!({"name": "down", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}),
    );
    let addr = listen_of(&v);
    let endings: Vec<&str> = (0..20)
        .map(|_| ending(&mut TcpStream::connect(addr).expect("connect() itself succeeds")))
        .collect();
    assert!(endings.iter().all(|e| *e == "EOF"), "{endings:?}");
    // Disabled, deleted, repointed: open connections end with a FIN.
    let (_, v) = create(
        &u,
        json!({"name": "up", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let addr = listen_of(&v);
    let open = || {
        let mut c = connect(addr);
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        c
    };
    let mut c = open();
    http(
        "POST",
        &format!("{u}/proxies/up"),
        Some(r#"{"enabled": false}"#),
        &[],
    );
    assert_eq!(ending(&mut c), "EOF", "disabled");
    http(
        "POST",
        &format!("{u}/proxies/up"),
        Some(r#"{"enabled": true}"#),
        &[],
    );
    let mut c = open();
    let other = Server::echo("127.0.0.1:0");
    http(
        "PATCH",
        &format!("{u}/proxies/up"),
        Some(&json!({"upstream": other.addr.to_string()}).to_string()),
        &[],
    );
    assert_eq!(ending(&mut c), "EOF", "upstream changed");
    let mut c = open();
    http("DELETE", &format!("{u}/proxies/up"), None, &[]);
    assert_eq!(ending(&mut c), "EOF", "deleted");
    drop(s);
    // --end rst restores netchaos's truthful RST.
    let s = server(&["--end", "rst"]);
    let (_, v) = create(
        &s.url(),
        json!({"name": "down", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}),
    );
    let mut c = TcpStream::connect(listen_of(&v)).unwrap();
    assert_eq!(ending(&mut c), "RST");
}

#[test]
fn reset_peer_starts_its_clock_at_the_first_data() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "r", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let addr = listen_of(&v);
    add_toxic(
        &u,
        "r",
        json!({"type": "reset_peer", "attributes": {"timeout": 300}}),
    );
    let mut idle = connect(addr);
    std::thread::sleep(Duration::from_millis(600));
    idle.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut b = [0u8; 8];
    assert!(
        matches!(idle.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "an idle connection stays open past the timeout"
    );
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    idle.write_all(b"ping").unwrap();
    let r = idle.read(&mut b);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the echo never gets through, an RST comes: {r:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn status_codes_and_populate_as_toxiproxy() {
    let s = server(&[]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "one", "listen": "localhost:0", "upstream": "x:1"}),
    );
    let taken = v["listen"].as_str().unwrap().to_string();
    let (st, v) = create(
        &u,
        json!({"name": "two", "listen": taken, "upstream": "x:1"}),
    );
    assert_eq!(st, 500);
    assert_eq!(
        v["error"],
        format!("listen tcp {taken}: bind: address already in use")
    );
    assert_eq!(
        create(&u, json!({"name": "", "upstream": "x:1"})).1["error"],
        "missing required field: name"
    );
    // A bad second entry: the first stays made, the third is never tried.
    let body = json!([
        {"name": "p1", "listen": "127.0.0.1:0", "upstream": "x:1"},
        {"name": "p2", "listen": "local373", "upstream": "x:1"},
        {"name": "p3", "listen": "127.0.0.1:0", "upstream": "x:1"}
    ]);
    let (st, v) = http(
        "POST",
        &format!("{u}/populate"),
        Some(&body.to_string()),
        &[],
    );
    assert_eq!(st, 500, "{v}");
    assert_eq!(v["proxies"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["proxies"][0]["name"], "p1");
    let (_, all) = http("GET", &format!("{u}/proxies"), None, &[]);
    assert!(all.get("p1").is_some() && all.get("p2").is_none() && all.get("p3").is_none());
    let (st, v) = http(
        "POST",
        &format!("{u}/populate"),
        Some(r#"[{"name": "x"}]"#),
        &[],
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("missing required field: upstream at proxy 1"))
    );
    let (st, v) = http("POST", &format!("{u}/populate"), Some("[]"), &[]);
    assert_eq!((st, &v["proxies"]), (201, &Value::Null), "{v}");
    // Go's decoder names the anonymous item type Toxiproxy decodes into
    // (checked against Go's encoding/json), and takes `null` as nothing.
    let item = r#"struct { toxiproxy.Proxy; Enabled *bool "json:\"enabled\"" }"#;
    for (body, want) in [
        (
            r#"{"a":1}"#,
            format!("cannot unmarshal object into Go value of type []{item}"),
        ),
        (
            r#""x""#,
            format!("cannot unmarshal string into Go value of type []{item}"),
        ),
        (
            "[1]",
            format!("cannot unmarshal number into Go value of type {item}"),
        ),
        (
            "[null]",
            "missing required field: name at proxy 1".to_string(),
        ),
    ] {
        let (st, v) = http("POST", &format!("{u}/populate"), Some(body), &[]);
        assert_eq!(st, 400, "{body}: {v}");
        let e = v["error"].as_str().unwrap();
        assert!(e.ends_with(&want), "{body}: {e}");
    }
    let (st, v) = http("POST", &format!("{u}/populate"), Some("null"), &[]);
    assert_eq!((st, &v["proxies"]), (201, &Value::Null), "{v}");
}

#[test]
fn what_toxiproxy_accepts_is_accepted() {
    let s = server(&[]);
    let u = s.url();
    let (st, _) = create(
        &u,
        json!({"name": "p", "listen": "127.0.0.1:0", "upstream": "nocolon"}),
    );
    assert_eq!(st, 201, "an upstream without a port is taken as given");
    for (body, name) in [
        (
            json!({"type": "latency", "toxicity": 1.5}),
            "latency_downstream",
        ),
        (
            json!({"type": "latency", "name": "neg", "toxicity": -0.5, "attributes": {"latency": -5}}),
            "neg",
        ),
        (
            json!({"type": "latency", "name": "seven", "toxicity": 7}),
            "seven",
        ),
        (
            json!({"type": "bandwidth", "attributes": {"rate": -1}}),
            "bandwidth_downstream",
        ),
        (
            json!({"type": "latency", "stream": "UPSTREAM"}),
            "latency_UPSTREAM",
        ),
        (json!({"type": "slicer"}), "slicer_downstream"),
        (
            json!({"type": "slicer", "name": "eq", "attributes": {"average_size": 8, "size_variation": 8}}),
            "eq",
        ),
        (
            json!({"type": "latency", "name": "bogus", "attributes": {"latency": 5, "bogus": 1}}),
            "bogus",
        ),
    ] {
        let (st, v) = add_toxic(&u, "p", body.clone());
        assert_eq!((st, v["name"].as_str()), (200, Some(name)), "{body}: {v}");
    }
    let (_, v) = http("GET", &format!("{u}/proxies/p/toxics/bogus"), None, &[]);
    assert_eq!(
        v["attributes"],
        json!({"latency": 5, "jitter": 0}),
        "unknown attributes ignored"
    );
    let (st, v) = add_toxic(
        &u,
        "p",
        json!({"type": "latency", "name": "typed", "attributes": {"latency": "100"}}),
    );
    assert_eq!(st, 400);
    assert_eq!(
        v["error"],
        "bad request body: json: cannot unmarshal string into Go struct field LatencyToxic.attributes.latency of type int64"
    );
}

#[test]
fn headers_and_shapes_are_toxiproxys() {
    let s = server(&[]);
    let api = s.api.unwrap();
    let (st, h, body) = raw(api, "GET", "/version", None);
    assert_eq!(st, 200);
    assert_eq!(body, "{\"version\": \"2.12.0\"}\n");
    assert!(
        header(&h, "x-toxiproxy-request-id").is_some_and(|id| id.len() == 20),
        "{h:?}"
    );
    let (st, h, body) = raw(api, "GET", "/proxies/nope", None);
    assert_eq!(st, 404);
    assert_eq!(
        header(&h, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(
        body,
        "{\"error\":\"proxy not found\",\"status\":404,\"title\":\"proxy not found\"}\n"
    );
    let (st, _, body) = raw(api, "GET", "/", None);
    assert_eq!((st, body.as_str()), (404, "404 page not found\n"));
    assert_eq!(raw(api, "HEAD", "/version", None).0, 405);
    let (st, _, body) = raw(
        api,
        "POST",
        "/proxies",
        // Go's decoder reads the first value and leaves what follows.
        Some(r#"{"name":"p","listen":"127.0.0.1:0","upstream":"x:1"} trailing"#),
    );
    assert_eq!(st, 201, "{body}");
    assert!(
        body.contains(r#""enabled":true,"Logger":{},"toxics":[]"#),
        "{body}"
    );
    let u = s.url();
    add_toxic(&u, "p", json!({"type": "latency", "name": "d1"}));
    add_toxic(
        &u,
        "p",
        json!({"type": "latency", "name": "u1", "stream": "upstream"}),
    );
    add_toxic(&u, "p", json!({"type": "latency", "name": "d2"}));
    let (_, v) = http("GET", &format!("{u}/proxies/p/toxics"), None, &[]);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["u1", "d1", "d2"], "upstream toxics first");
    let (st, v) = add_toxic(&u, "p", json!({"type": "slow_close", "name": "u1"}));
    assert_eq!(
        (st, v["error"].as_str()),
        (409, Some("toxic already exists"))
    );
}

#[test]
fn toxiproxys_metric_series_are_served() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&["--proxy-metrics", "--runtime-metrics"]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "shopify_http", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let listen = v["listen"].as_str().unwrap().to_string();
    rtt(listen.parse().unwrap());
    let (_, m) = http("GET", &format!("{u}/metrics"), None, &[]);
    let m = m.as_str().unwrap();
    let series = format!(
        "toxiproxy_proxy_sent_bytes_total{{direction=\"downstream\",listener=\"{listen}\",proxy=\"shopify_http\",upstream=\"{}\"}} 4",
        echo.addr
    );
    assert!(m.lines().any(|l| l == series), "{series} in\n{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("toxiproxy_proxy_received_bytes_total{direction=\"upstream\""))
    );
    assert!(
        m.lines().any(|l| l.starts_with("go_info"))
            && m.lines().any(|l| l.starts_with("go_goroutines"))
    );
}

#[test]
fn toxiproxy_servers_command_line_works() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"[{"Name": "redis", "Listen": "localhost:0", "Upstream": "localhost:6379"}]"#,
    )
    .unwrap();
    // As toxiproxy-server is started in docker-compose files and images.
    let s = Proxy::start_cmd(
        "server",
        &[
            "-host",
            "127.0.0.1",
            &format!("-port={port}"),
            "-config",
            config.to_str().unwrap(),
            "-seed",
            "3",
        ],
    );
    let (st, v) = http(
        "GET",
        &format!("http://127.0.0.1:{port}/proxies"),
        None,
        &[],
    );
    assert_eq!(st, 200, "{}", s.stderr());
    assert!(
        v["redis"]["listen"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{v}"
    );
    assert!(s.stderr().contains("seed 3"), "{}", s.stderr());
    drop(s);
    // As Toxiproxy's Docker image starts it (`/toxiproxy -host=0.0.0.0`):
    // it serves, with a warning, and answers the container's own names.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = Proxy::start_cmd("server", &["-host=0.0.0.0", &format!("-port={port}")]);
    let version = format!("http://127.0.0.1:{port}/version");
    for host in ["toxiproxy:8474", "172.17.0.2:8474", "localhost"] {
        let (st, v) = http("GET", &version, None, &[("Host", host)]);
        assert_eq!(
            (st, &v["version"]),
            (200, &json!("2.12.0")),
            "Host {host}: {}",
            s.stderr()
        );
    }
    assert!(
        s.stderr()
            .contains("without a token, as toxiproxy-server does: anyone who"),
        "{}",
        s.stderr()
    );
    drop(s);
    let (code, out, _) = netchaos(&["server", "-version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("toxiproxy-server version 2.12.0"), "{out}");
    // A binary named toxiproxy-server is netchaos server.
    let bin = dir.path().join("toxiproxy-server");
    std::os::unix::fs::symlink(BIN, &bin).unwrap();
    let out = Command::new(&bin).arg("-version").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("toxiproxy-server version"),
        "{out:?}"
    );
}

#[test]
fn sub_millisecond_slicer_delays_are_honoured() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let (_, v) = create(
        &u,
        json!({"name": "s", "listen": "127.0.0.1:0", "upstream": echo.addr.to_string()}),
    );
    let addr = listen_of(&v);
    add_toxic(
        &u,
        "s",
        json!({"type": "slicer", "attributes": {"average_size": 1, "delay": 500}}),
    );
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    c.write_all(&[b'x'; 64]).unwrap();
    let mut b = [0u8; 64];
    c.read_exact(&mut b).unwrap();
    let took = t.elapsed();
    // 64 slices 500 µs apart: at least 32 ms (how close to it, with a
    // millisecond timer at 64 ms and more, is measured by scripts/bench.sh:
    // a test's timing must hold on a loaded machine).
    assert!(took >= Duration::from_millis(31), "{took:?}");
    assert_eq!(b, [b'x'; 64]);
}

#[test]
fn toxiproxy_python_drives_the_server() {
    if !need(&["python3"]) {
        return;
    }
    if python("import toxiproxy", &[]).0 != 0 {
        assert!(!in_ci(), "toxiproxy-python is required in CI");
        eprintln!("SKIPPED: no toxiproxy-python");
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let api = s.api.unwrap();
    let code = r#"
import socket, sys, time
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
APIConsumer.host, APIConsumer.port = sys.argv[1], int(sys.argv[2])
t = Toxiproxy()
p = t.create(upstream=sys.argv[3], name="test_echo", listen="127.0.0.1:0")
host, port = p.listen.split(":")
def rt():
    s = socket.create_connection((host, int(port)))
    t0 = time.monotonic(); s.sendall(b"omg\n"); s.recv(4); return time.monotonic() - t0
p.add_toxic(type="latency", attributes={"latency": 100})
p.add_toxic(type="latency", name="second_latency_downstream", attributes={"latency": 100})
assert 0.19 <= rt() < 0.6, rt()
p.disable()
assert socket.socket().connect_ex((host, int(port))) != 0
p.enable()
assert [x.name for x in p.toxics().values()] == ["latency_downstream", "second_latency_downstream"]
t.reset()
assert rt() < 0.1 and p.toxics() == {}
p.destroy()
print("ok")
"#;
    let (rc, out, err) = python(
        code,
        &[
            &api.ip().to_string(),
            &api.port().to_string(),
            &echo.addr.to_string(),
        ],
    );
    assert_eq!((rc, out.trim()), (0, "ok"), "{err}");
}

#[test]
fn toxiproxy_node_client_drives_the_server() {
    let Some(modules) = node_modules_with("toxiproxy-node-client") else {
        return;
    };
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let code = r#"
const { Toxiproxy } = require("toxiproxy-node-client");
const net = require("net");
const rt = (host, port) => new Promise((ok, bad) => {
  const t = Date.now(); const c = net.connect(port, host, () => c.write("omg\n"));
  c.on("data", () => { c.destroy(); ok(Date.now() - t); }); c.on("error", bad);
});
(async () => {
  // (With -e, the first argument is argv[1].)
  const tp = new Toxiproxy(process.argv[1]);
  const proxy = await tp.createProxy({ listen: "localhost:0", name: "node_echo", upstream: process.argv[2] });
  const [host, port] = proxy.listen.split(":");
  if (host !== "127.0.0.1") throw new Error("listen " + proxy.listen);
  const toxic = await proxy.addToxic({ type: "latency", attributes: { latency: 150, jitter: 0 } });
  if (toxic.name !== "latency_downstream" || toxic.toxicity !== 1) throw new Error(JSON.stringify(toxic));
  const took = await rt(host, Number(port));
  if (took < 140) throw new Error("latency " + took);
  try { await tp.createProxy({ listen: "localhost:0", name: "node_echo", upstream: "x:1" }); throw new Error("no 409"); }
  catch (e) { if (!String(e).includes("409")) throw e; }
  const all = await tp.getAll();
  if (!all.node_echo) throw new Error("getAll");
  await tp.reset();
  await proxy.remove();
  console.log("ok");
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let (_, out, err) = node(code, &[&s.url(), &echo.addr.to_string()], &modules);
    assert_eq!(out.trim(), "ok", "{err}");
}

#[test]
fn a_go_program_on_toxiproxys_documented_api() {
    if !need(&["go"]) {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("main.go");
    std::fs::write(&src, GO_CLIENT).unwrap();
    let bin = dir.path().join("client");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(&src)
        .env("GOCACHE", dir.path().join("cache"))
        .env("GOPATH", dir.path().join("gopath"))
        .env("GO111MODULE", "off")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&bin)
        .arg(s.url())
        .arg(echo.addr.to_string())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What Toxiproxy's Go client does, with net/http: its requests, and the
/// answers its tests expect.
const GO_CLIENT: &str = r#"package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

var base = os.Args[1]

type apiErr struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

func call(method, path string, body interface{}, want int, out interface{}) {
	var buf bytes.Buffer
	if body != nil {
		json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, base+path, &buf)
	req.Header.Set("User-Agent", "toxiproxy-cli")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fail("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var e apiErr
		json.NewDecoder(resp.Body).Decode(&e)
		fail("%s %s: HTTP %d (%+v), want %d", method, path, resp.StatusCode, e, want)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			fail("%s %s: decode: %v", method, path, err)
		}
	}
}

func fail(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}

type proxy struct {
	Name     string                   `json:"name"`
	Listen   string                   `json:"listen"`
	Upstream string                   `json:"upstream"`
	Enabled  bool                     `json:"enabled"`
	Toxics   []map[string]interface{} `json:"toxics"`
}

func main() {
	var p proxy
	call("POST", "/proxies", map[string]interface{}{"name": "mysql_master", "listen": "localhost:0", "upstream": os.Args[2], "enabled": true, "toxics": nil}, 201, &p)
	if !strings.HasPrefix(p.Listen, "127.0.0.1:") {
		fail("listen %s", p.Listen)
	}
	var e apiErr
	call("POST", "/proxies", map[string]interface{}{"name": "mysql_master", "listen": "localhost:0", "upstream": "x:1"}, 409, nil)
	call("POST", "/proxies", map[string]interface{}{"name": "other", "listen": p.Listen, "upstream": "x:1"}, 500, &e)
	if e.Error != "listen tcp "+p.Listen+": bind: address already in use" || e.Status != 500 {
		fail("port conflict: %+v", e)
	}
	var t map[string]interface{}
	call("POST", "/proxies/mysql_master/toxics", map[string]interface{}{"type": "latency", "stream": "upstream", "toxicity": 1, "attributes": map[string]interface{}{"latency": 100, "jitter": 10}}, 200, &t)
	if t["name"] != "latency_upstream" || t["attributes"].(map[string]interface{})["latency"] != 100.0 {
		fail("toxic %v", t)
	}
	call("PATCH", "/proxies/mysql_master/toxics/latency_upstream", map[string]interface{}{"attributes": map[string]interface{}{"latency": 50}, "toxicity": 0.5}, 200, &t)
	if t["attributes"].(map[string]interface{})["jitter"] != 10.0 || t["toxicity"] != 0.5 {
		fail("update %v", t)
	}
	call("POST", "/proxies/mysql_master/toxics/latency_upstream", map[string]interface{}{"toxicity": 1}, 200, &t)
	c, err := net.DialTimeout("tcp", p.Listen, 2*time.Second)
	if err != nil {
		fail("dial: %v", err)
	}
	start := time.Now()
	c.Write([]byte("omg\n"))
	c.Read(make([]byte, 4))
	if time.Since(start) < 35*time.Millisecond {
		fail("no latency: %v", time.Since(start))
	}
	c.Close()
	call("POST", "/proxies/mysql_master", map[string]interface{}{"enabled": false}, 200, &p)
	if _, err := net.DialTimeout("tcp", p.Listen, time.Second); err == nil {
		fail("disabled proxy accepts")
	}
	call("POST", "/reset", nil, 204, nil)
	call("GET", "/proxies/mysql_master", nil, 200, &p)
	if !p.Enabled || len(p.Toxics) != 0 {
		fail("after reset: %+v", p)
	}
	var pop struct{ Proxies []proxy }
	call("POST", "/populate", []map[string]interface{}{{"name": "one", "listen": "localhost:0", "upstream": "localhost:7171"}}, 201, &pop)
	if len(pop.Proxies) != 1 || !pop.Proxies[0].Enabled {
		fail("populate %+v", pop)
	}
	call("POST", "/populate", []map[string]interface{}{{"name": "one", "listen": "localhost:7070", "upstream": "localhost:7171"}, {"name": "", "listen": ""}}, 400, &e)
	if e.Error != "missing required field: name at proxy 2" {
		fail("populate error %+v", e)
	}
	call("DELETE", "/proxies/mysql_master", nil, 204, nil)
	call("DELETE", "/proxies/mysql_master", nil, 404, &e)
	if e.Error != "proxy not found" {
		fail("delete: %+v", e)
	}
	fmt.Println("ok")
}
"#;

/// Toxiproxy's toxic tests, against real sockets: bandwidth gives no
/// up-front credit (`rate: 1` is 1000 bytes a second from the first byte),
/// latency passes a close on at once when no bytes wait ahead of it, and
/// an updated limit_data counts the bytes that already passed.
#[test]
fn toxics_keep_toxiproxys_semantics() {
    // Each connection: 1000 bytes, then a byte from the client says what
    // next: `g`, 80 more bytes and a close; `c`, a close.
    let up = Server::start("127.0.0.1:0", |mut s| {
        let _ = s.write_all(&[b'x'; 1000]);
        let mut b = [0u8; 1];
        if s.read_exact(&mut b).is_ok() && b[0] == b'g' {
            let _ = s.write_all(&[b'y'; 80]);
        }
    });
    let p = server(&[]);
    let u = p.url();
    let (st, v) = create(
        &u,
        json!({"name": "t", "listen": "127.0.0.1:0", "upstream": up.addr.to_string()}),
    );
    assert_eq!(st, 201, "{v}");
    let addr = listen_of(&v);
    let toxics = format!("{u}/proxies/t/toxics");

    // bandwidth rate 1 (KB/s): well under all of it in the first 500 ms.
    add_toxic(
        &u,
        "t",
        json!({"name": "bw", "type": "bandwidth", "attributes": {"rate": 1}}),
    );
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let t0 = Instant::now();
    let mut got = 0;
    let mut b = [0u8; 2000];
    while t0.elapsed() < Duration::from_millis(500) {
        if let Ok(n) = c.read(&mut b) {
            got += n;
        }
    }
    assert!(got < 700, "{got} of 1000 bytes in 500 ms at 1 KB/s");
    // ... and all of it, in time.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = vec![0u8; 1000 - got];
    c.read_exact(&mut rest).unwrap();
    drop(c);
    http("DELETE", &format!("{toxics}/bw"), None, &[]);

    // latency 2 s: the upstream's close, with no bytes ahead of it, comes
    // at once, not 2 s later. (Bounded with a second to spare: a delayed
    // close takes 2 s at the least, however busy the machine.)
    add_toxic(
        &u,
        "t",
        json!({"name": "lat", "type": "latency", "attributes": {"latency": 2000}}),
    );
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut first = [0u8; 1000];
    c.read_exact(&mut first).unwrap();
    let t1 = Instant::now();
    c.write_all(b"c").unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert!(t1.elapsed() < Duration::from_secs(1), "{:?}", t1.elapsed());
    drop(c);
    http("DELETE", &format!("{toxics}/lat"), None, &[]);

    // limit_data 1010, 1000 passed; raised to 1040: 40 more, then EOF (a
    // fresh count would pass all 80).
    add_toxic(
        &u,
        "t",
        json!({"name": "lim", "type": "limit_data", "attributes": {"bytes": 1010}}),
    );
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.read_exact(&mut first).unwrap();
    let (st, v) = http(
        "POST",
        &format!("{toxics}/lim"),
        Some(r#"{"attributes": {"bytes": 1040}}"#),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    c.write_all(b"g").unwrap();
    let mut rest = Vec::new();
    let r = c.read_to_end(&mut rest);
    assert_eq!(
        rest.len(),
        40,
        "the update kept the count of what passed ({r:?}): {}",
        p.stderr()
    );
}

/// A Toxiproxy client updates a toxic that came from a profile (or
/// `--fault`) with Toxiproxy's attribute names: the toxic takes them,
/// keeping what it had (jitter) in Toxiproxy's units.
#[test]
fn a_profile_toxic_takes_toxiproxys_attribute_names() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let p = Proxy::start(&[
        "--api",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "latency:delay=100ms,jitter=20ms",
    ]);
    // The --fault rule shows as the proxy `cli`, its fault as a toxic.
    let url = format!("{}/proxies/cli/toxics/latency_downstream", p.url());
    let (status, v) = http("GET", &url, None, &[]);
    assert_eq!(status, 200, "{v}");
    let (status, v) = http(
        "POST",
        &url,
        Some(r#"{"attributes":{"latency":1000}}"#),
        &[],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["attributes"]["latency"], 1000, "{v}");
    assert_eq!(v["attributes"]["jitter"], 20, "{v}");
    // The fault follows: a round trip now takes about a second.
    let t = std::time::Instant::now();
    let mut c = connect(p.addr());
    std::io::Write::write_all(&mut c, b"x").unwrap();
    let mut b = [0u8; 1];
    std::io::Read::read_exact(&mut c, &mut b).unwrap();
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

/// toxiproxy-server's start as its users' tooling expects it: the start
/// line on stdout (container wait strategies wait for it), Go's flag
/// forms (`-flag=true`, `--version`, a trailing argument ignored), and,
/// run by Toxiproxy's name, a busy API port logged while it keeps running.
#[test]
fn toxiproxy_servers_start_line_flags_and_busy_port() {
    let dir = tempfile::tempdir().unwrap();
    let tox = dir.path().join("toxiproxy-server");
    std::os::unix::fs::symlink(BIN, &tox).unwrap();
    let port = unused_port().to_string();
    let mut c = Command::new(&tox)
        .args([
            "-host",
            "127.0.0.1",
            "-port",
            &port,
            "-proxy-metrics=true",
            "-runtime-metrics=false",
            "extra",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(c.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["message"], "Starting Toxiproxy HTTP server", "{line}");
    assert_eq!(v["address"], format!("127.0.0.1:{port}"), "{line}");
    // The port is busy now: a second server logs that and keeps running.
    let mut busy = Command::new(&tox)
        .args(["-host", "127.0.0.1", "-port", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(busy.try_wait().unwrap().is_none(), "the busy server exited");
    for p in [&mut c, &mut busy] {
        signal(p.id(), libc::SIGTERM);
    }
    let out = busy.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Server finished with error"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = c.wait();
    let v = Command::new(&tox).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("toxiproxy-server version 2.12.0"));
}

/// Toxiproxy's TestPopulateExistingProxy with a host-name listen: the
/// proxy asked for again as it is keeps its toxics.
#[test]
fn populating_an_unchanged_proxy_named_by_host_keeps_its_toxics() {
    let p = server(&[]);
    let port = unused_port();
    let body =
        format!(r#"[{{"name":"one","listen":"localhost:{port}","upstream":"localhost:7171"}}]"#);
    let (status, v) = http("POST", &format!("{}/populate", p.url()), Some(&body), &[]);
    assert_eq!(status, 201, "{v}");
    let (status, v) = add_toxic(
        &p.url(),
        "one",
        json!({"type": "latency", "attributes": {"latency": 100}}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = http("POST", &format!("{}/populate", p.url()), Some(&body), &[]);
    assert_eq!(status, 201, "{v}");
    let (_, v) = http("GET", &format!("{}/proxies/one/toxics", p.url()), None, &[]);
    assert_eq!(
        v.as_array().map(Vec::len),
        Some(1),
        "the toxic was dropped: {v}"
    );
}

/// A `stall` added through the API holds the data until it is removed;
/// removed mid-transfer, with the client's upload backed up behind it
/// (the relay's reader waiting for room in a stage that reads nothing),
/// what it held and the rest go through, every byte. (The relay once
/// could not pause that reader to unlink the stage: the data stayed held
/// for good, and no later change to the connection's faults took.)
#[test]
fn a_stall_removed_mid_upload_lets_the_rest_through() {
    const TOTAL: usize = 32 << 20;
    let (tx, rx) = std::sync::mpsc::channel();
    let up = Server::start("127.0.0.1:0", move |mut s| {
        let mut got = 0usize;
        let mut b = vec![0u8; 1 << 16];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 {
                break;
            }
            got += n;
        }
        let _ = tx.send(got);
    });
    let p = server(&[]);
    let u = p.url();
    let (st, v) = create(
        &u,
        json!({"name": "t", "listen": "127.0.0.1:0", "upstream": up.addr.to_string()}),
    );
    assert_eq!(st, 201, "{v}");
    let addr = listen_of(&v);
    let (st, v) = add_toxic(
        &u,
        "t",
        json!({"name": "hold", "type": "stall", "stream": "upstream", "attributes": {}}),
    );
    assert_eq!(st, 200, "{v}");
    use std::sync::atomic::{AtomicUsize, Ordering};
    let sent = std::sync::Arc::new(AtomicUsize::new(0));
    let mut c = connect(addr);
    let writer = {
        let sent = sent.clone();
        let mut c = c.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b'u'; 1 << 16];
            while sent.load(Ordering::SeqCst) < TOTAL {
                if c.write_all(&chunk).is_err() {
                    return;
                }
                sent.fetch_add(chunk.len(), Ordering::SeqCst);
            }
            let _ = c.shutdown(std::net::Shutdown::Write);
        })
    };
    // Until the upload is backed up: nothing more accepted for 300 ms.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = sent.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        assert!(Instant::now() < deadline, "the upload never backed up");
        last = now;
    }
    assert!(last < TOTAL, "the whole upload got past the stall");
    let (st, _) = http("DELETE", &format!("{u}/proxies/t/toxics/hold"), None, &[]);
    assert_eq!(st, 204);
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the upload stayed held: {}", p.stderr()));
    assert_eq!(got, TOTAL);
    writer.join().unwrap();
    let mut rest = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.read_to_end(&mut rest);
}
