//! The Toxiproxy-compatible control API: every route and status code, a
//! Toxiproxy client written by someone else (toxiproxy-python), `netchaos
//! ctl`, faults changing on open connections, tokens, hostile input, and
//! metrics.

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

fn server(extra: &[&str]) -> Proxy {
    let mut args = vec!["--api", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    Proxy::start_cmd("server", &args)
}

fn listen_of(v: &Value) -> std::net::SocketAddr {
    v["listen"].as_str().unwrap().parse().unwrap()
}

/// Round trip of one byte through `addr`, timed.
fn rtt(addr: std::net::SocketAddr) -> Duration {
    let mut c = connect(addr);
    let t = Instant::now();
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    t.elapsed()
}

#[test]
fn routes_and_status_codes_follow_toxiproxy() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let up = echo.addr.to_string();

    let (st, v) = http("GET", &format!("{u}/version"), None, &[]);
    assert_eq!(st, 200);
    assert_eq!(v["version"], "2.12.0");

    let (st, v) = http("GET", &format!("{u}/proxies"), None, &[]);
    assert_eq!((st, v), (200, json!({})));

    // Create: 201, the real bound address, keys in any case.
    let body = json!({"NAME": "echo", "Upstream": up, "listen": "127.0.0.1:0"}).to_string();
    let (st, v) = http("POST", &format!("{u}/proxies"), Some(&body), &[]);
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["name"], "echo");
    assert_eq!(v["enabled"], true);
    assert_eq!(v["toxics"], json!([]));
    let addr = listen_of(&v);
    assert_ne!(addr.port(), 0, "the real port is reported");
    assert!(rtt(addr) < Duration::from_millis(200));

    let (st, v) = http("POST", &format!("{u}/proxies"), Some(&body), &[]);
    assert_eq!(st, 409, "{v}");
    assert_eq!(
        v,
        json!({"error": "proxy already exists", "status": 409, "title": "proxy already exists"})
    );
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies"),
        Some(r#"{"upstream": "a:1"}"#),
        &[],
    );
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (400, "missing required field: name")
    );
    let (st, _) = http("GET", &format!("{u}/proxies/nope"), None, &[]);
    assert_eq!(st, 404);

    // Toxics: create 200, list, show, partial update (PATCH and POST), delete 204.
    let tox = format!("{u}/proxies/echo/toxics");
    let (st, v) = http(
        "POST",
        &tox,
        Some(r#"{"type": "latency", "attributes": {"latency": 200, "jitter": 5}}"#),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["name"], "latency_downstream");
    assert_eq!(v["stream"], "downstream");
    assert_eq!(v["toxicity"], 1.0);
    assert!(rtt(addr) >= Duration::from_millis(190));
    let (st, _) = http("POST", &tox, Some(r#"{"type": "latency"}"#), &[]);
    assert_eq!(st, 409, "same default name");
    let (st, v) = http("POST", &tox, Some(r#"{"type": "warp_drive"}"#), &[]);
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (400, "invalid toxic type")
    );
    let (st, v) = http("GET", &tox, None, &[]);
    assert_eq!((st, v.as_array().unwrap().len()), (200, 1));
    let one = format!("{tox}/latency_downstream");
    let (st, v) = http(
        "PATCH",
        &one,
        Some(r#"{"attributes": {"latency": 50}}"#),
        &[],
    );
    assert_eq!(st, 200);
    assert_eq!(
        v["attributes"],
        json!({"latency": 50, "jitter": 5}),
        "unspecified attributes stay"
    );
    let (st, v) = http("POST", &one, Some(r#"{"toxicity": 0.5}"#), &[]);
    assert_eq!((st, v["toxicity"].as_f64()), (200, Some(0.5)));
    assert_eq!(v["attributes"]["latency"], 50);
    let (st, v) = http("GET", &one, None, &[]);
    assert_eq!((st, v["name"].as_str()), (200, Some("latency_downstream")));
    let (st, _) = http("DELETE", &one, None, &[]);
    assert_eq!(st, 204);
    let (st, _) = http("DELETE", &one, None, &[]);
    assert_eq!(st, 404);
    let (st, _) = http("GET", &one, None, &[]);
    assert_eq!(st, 404);

    // Disabling closes the listener and its connections; enabling reopens
    // the same port.
    let mut open = connect(addr);
    // A round trip first: the relay has accepted it (a connection still in
    // the kernel's accept queue is reset when the listener closes, with
    // Toxiproxy as with netchaos).
    open.write_all(b"x").unwrap();
    let mut one_byte = [0u8; 1];
    open.read_exact(&mut one_byte).unwrap();
    let (st, v) = http(
        "PATCH",
        &format!("{u}/proxies/echo"),
        Some(r#"{"enabled": false}"#),
        &[],
    );
    assert_eq!((st, v["enabled"].as_bool()), (200, Some(false)));
    // As Toxiproxy ends them: a FIN.
    let (_, err) = read_to_end(&mut open);
    assert!(err.is_none(), "open connections end with a FIN: {err:?}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no listener while disabled"
    );
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies/echo"),
        Some(r#"{"enabled": true}"#),
        &[],
    );
    assert_eq!((st, listen_of(&v)), (200, addr));
    assert!(rtt(addr) < Duration::from_millis(200));

    // Reset: toxics gone, everything enabled.
    http(
        "POST",
        &tox,
        Some(r#"{"type": "latency", "attributes": {"latency": 300}}"#),
        &[],
    );
    http(
        "PATCH",
        &format!("{u}/proxies/echo"),
        Some(r#"{"enabled": false}"#),
        &[],
    );
    let (st, _) = http("POST", &format!("{u}/reset"), None, &[]);
    assert_eq!(st, 204);
    let (_, v) = http("GET", &format!("{u}/proxies/echo"), None, &[]);
    assert_eq!(
        (v["enabled"].as_bool(), v["toxics"].clone()),
        (Some(true), json!([]))
    );
    assert!(rtt(addr) < Duration::from_millis(200));

    // Populate: 201 with every proxy.
    let pop = json!([{"name": "a", "upstream": up}, {"name": "echo", "upstream": up, "listen": "127.0.0.1:0"}]).to_string();
    let (st, v) = http("POST", &format!("{u}/populate"), Some(&pop), &[]);
    assert_eq!(st, 201, "{v}");
    let names: Vec<&str> = v["proxies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "echo"]);
    let (_, v) = http(
        "POST",
        &format!("{u}/populate"),
        Some(&json!([{"name": "a", "upstream": up}]).to_string()),
        &[],
    );
    assert_eq!(
        v["proxies"].as_array().unwrap().len(),
        1,
        "only the populated proxies: {v}"
    );
    let (st, _) = http(
        "POST",
        &format!("{u}/populate"),
        Some(r#"[{"name": "x"}]"#),
        &[],
    );
    assert_eq!(st, 400);

    // Delete: 204, and the port is free again.
    let (st, _) = http("DELETE", &format!("{u}/proxies/echo"), None, &[]);
    assert_eq!(st, 204);
    assert!(std::net::TcpStream::connect(addr).is_err());
    let (st, _) = http("DELETE", &format!("{u}/proxies/echo"), None, &[]);
    assert_eq!(st, 404);
}

#[test]
fn a_toxiproxy_client_drives_netchaos() {
    if missing_tool("python3") {
        return;
    }
    let ok = std::process::Command::new("python3")
        .args(["-c", "import toxiproxy"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !in_ci(),
            "toxiproxy-python is required in CI (scripts/test.sh installs it)"
        );
        eprintln!("SKIPPED: pip install toxiproxy-python");
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let api = s.api.unwrap();
    let script = r#"
import socket, sys, time
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
host, port, upstream = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = Toxiproxy()
t.update_api_consumer(host, port)
p = t.create(upstream=upstream, name="echo", listen="127.0.0.1:0")
addr = p.listen.rsplit(":", 1)
def rtt():
    c = socket.create_connection((addr[0], int(addr[1])), timeout=10)
    s = time.monotonic(); c.sendall(b"x"); c.recv(1); c.close()
    return time.monotonic() - s
print("plain", round(rtt(), 3))
p.add_toxic(type="latency", attributes={"latency": 300})
print("toxics", sorted(p.toxics()))
print("latency", round(rtt(), 3))
APIConsumer.post("/proxies/echo/toxics/latency_downstream", json={"attributes": {"latency": 100}})
print("updated", round(rtt(), 3), p.get_toxic("latency_downstream").attributes["latency"])
p.destroy_toxic("latency_downstream")
print("removed", round(rtt(), 3))
p.add_toxic(type="timeout", attributes={"timeout": 0})
t.reset()
print("after reset", sorted(p.toxics()), round(rtt(), 3))
print("proxies", sorted(t.proxies()))
"#;
    let (code, out, err) = python(
        script,
        &[
            &api.ip().to_string(),
            &api.port().to_string(),
            &echo.addr.to_string(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // Round trips in seconds, with generous bounds.
    let secs = |line: &str| -> f64 {
        line.split_whitespace()
            .find_map(|w| w.parse::<f64>().ok().filter(|v| *v < 10.0))
            .unwrap_or_else(|| panic!("no time in {line:?}: {out}"))
    };
    assert!(
        lines[0].starts_with("plain ") && secs(lines[0]) < 0.15,
        "{out}"
    );
    assert_eq!(lines[1], "toxics ['latency_downstream']");
    assert!((0.28..0.8).contains(&secs(lines[2])), "{out}");
    assert!(
        lines[3].starts_with("updated ") && lines[3].ends_with(" 100"),
        "{out}"
    );
    assert!((0.09..0.5).contains(&secs(lines[3])), "{out}");
    assert!(secs(lines[4]) < 0.15, "{out}");
    assert!(
        lines[5].starts_with("after reset [] ") && secs(lines[5]) < 0.15,
        "{out}"
    );
    assert_eq!(lines[6], "proxies ['echo']");
}

#[test]
fn ctl_round_trip() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let url = s.url();
    let ctl = |args: &[&str]| {
        let mut full = vec!["ctl", "--url", &url];
        full.extend_from_slice(args);
        let (code, out, err) = netchaos(&full);
        assert_eq!(code, 0, "ctl {args:?}: {err}");
        out
    };
    let up = echo.addr.to_string();
    let out = ctl(&["create", "echo", "--upstream", &up]);
    assert!(out.starts_with("echo  listen 127.0.0.1:"), "{out}");
    let addr: std::net::SocketAddr = out.split_whitespace().nth(2).unwrap().parse().unwrap();
    let out = ctl(&[
        "add",
        "echo",
        "latency:delay=250ms,stream=both",
        "--name",
        "slow",
    ]);
    assert!(out.contains("added slow (latency both"), "{out}");
    assert!(rtt(addr) >= Duration::from_millis(450), "both ways");
    ctl(&["update", "echo", "slow", "delay=10ms"]);
    assert!(rtt(addr) < Duration::from_millis(200));
    let out = ctl(&["list"]);
    assert!(
        out.contains("- slow (latency both, toxicity 1)") && out.contains("10ms"),
        "{out}"
    );
    ctl(&["disable", "echo"]);
    assert!(std::net::TcpStream::connect(addr).is_err());
    ctl(&["enable", "echo"]);
    ctl(&["remove", "echo", "slow"]);
    ctl(&["reset"]);
    assert!(ctl(&["metrics"]).contains("netchaos_connections_total{proxy=\"echo\"}"));
    ctl(&["delete", "echo"]);
    assert_eq!(ctl(&["list"]).trim(), "no proxies");
    // Errors are clear and exit 1.
    let (code, _, err) = netchaos(&["ctl", "--url", &url, "show", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("the API said 404: proxy not found"), "{err}");
    let (code, _, err) = netchaos(&["ctl", "--url", "http://127.0.0.1:9", "list"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the control API"), "{err}");
}

/// Invoked as `toxiproxy-cli`, netchaos takes that tool's commands, their
/// aliases, its flags (Go's `-flag` forms, `-h URL`, `TOXIPROXY_URL`) and
/// prints what it prints (its non-terminal output); `netchaos ctl` takes
/// the same forms.
#[test]
fn toxiproxy_cli_forms_work_as_toxiproxy_cli() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let s = server(&[]);
    let url = s.url();
    let dir = tempfile::tempdir().unwrap();
    let cli = dir.path().join("toxiproxy-cli");
    std::os::unix::fs::symlink(BIN, &cli).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&cli)
            .args(args)
            .env("TOXIPROXY_URL", &url)
            .env_remove("NETCHAOS_URL")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code().unwrap_or(-1), text, err)
    };
    let ok = |args: &[&str]| {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "toxiproxy-cli {args:?}: {err}");
        out
    };
    assert_eq!(
        ok(&["-h", &url, "create", "-l", "127.0.0.1:0", "-u", &up, "echo"]),
        "Created new proxy echo\n"
    );
    let listed = ok(&["--host", &url, "list"]);
    let fields: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(fields.len(), 5, "{listed:?}");
    assert_eq!(
        (fields[0], fields[2], fields[3], fields[4]),
        ("echo", up.as_str(), "enabled", "0"),
        "{listed:?}"
    );
    let addr: std::net::SocketAddr = fields[1].parse().unwrap();
    assert_eq!(ok(&["-host", &url, "ls"]), listed);
    assert_eq!(
        ok(&[
            "toxic",
            "add",
            "-t",
            "latency",
            "-n",
            "slow",
            "-a",
            "latency=250",
            "echo"
        ]),
        "Added downstream latency toxic 'slow' on proxy 'echo'\n"
    );
    assert!(rtt(addr) >= Duration::from_millis(240));
    let inspected = ok(&["inspect", "echo"]);
    assert!(
        inspected.starts_with("slow\ttype=latency\tstream=downstream\ttoxicity=1.00\tattributes=[")
            && inspected.contains("\tlatency=250")
            && inspected.ends_with("\t]\n"),
        "{inspected:?}"
    );
    assert_eq!(
        ok(&[
            "toxic",
            "update",
            "-n",
            "slow",
            "-a",
            "latency=10",
            "-tox",
            "0.5",
            "echo"
        ]),
        "Updated toxic 'slow' on proxy 'echo'\n"
    );
    let inspected = ok(&["i", "echo"]);
    assert!(
        inspected.contains("toxicity=0.50") && inspected.contains("\tlatency=10"),
        "{inspected:?}"
    );
    // Go's single-dash long flags, and the short aliases.
    assert_eq!(
        ok(&[
            "t",
            "a",
            "-type",
            "bandwidth",
            "-upstream",
            "-toxicName",
            "bw",
            "-attribute",
            "rate=100",
            "echo"
        ]),
        "Added upstream bandwidth toxic 'bw' on proxy 'echo'\n"
    );
    assert!(ok(&["ins", "echo"]).contains("bw\ttype=bandwidth\tstream=upstream"));
    assert_eq!(
        ok(&["toxic", "r", "-n", "bw", "echo"]),
        "Removed toxic 'bw' on proxy 'echo'\n"
    );
    assert_eq!(
        ok(&["toxic", "delete", "--toxicName", "slow", "echo"]),
        "Removed toxic 'slow' on proxy 'echo'\n"
    );
    assert_eq!(
        ok(&["i", "echo"]),
        "",
        "no toxics: nothing, as toxiproxy-cli"
    );
    assert_eq!(ok(&["toggle", "echo"]), "Proxy echo is now disabled\n");
    assert!(std::net::TcpStream::connect(addr).is_err());
    assert_eq!(ok(&["tog", "echo"]), "Proxy echo is now enabled\n");
    assert_eq!(
        ok(&["new", "--listen", "127.0.0.1:0", "--upstream", &up, "two"]),
        "Created new proxy two\n"
    );
    assert_eq!(
        ok(&["c", "-l=127.0.0.1:0", "-u", &up, "three"]),
        "Created new proxy three\n"
    );
    assert_eq!(ok(&["d", "two"]), "Deleted proxy two\n");
    assert_eq!(ok(&["delete", "three"]), "Deleted proxy three\n");
    assert!(ok(&["--version"]).starts_with("toxiproxy-cli version 2."));
    assert!(ok(&["-v"]).starts_with("toxiproxy-cli version 2."));
    // Errors: toxiproxy-cli's exit 1.
    let (code, _, err) = run(&["inspect", "nope"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = run(&["toxic", "add", "-t", "latency", "-u", "-d", "echo"]);
    assert_eq!(code, 1);
    assert!(err.contains("Only one should be specified"), "{err}");
    let (code, _, err) = run(&["toxic", "update", "-n", "x", "--toxicity", "2", "echo"]);
    assert_eq!(code, 1);
    assert!(err.contains("between 0 and 1"), "{err}");
    // `netchaos ctl` takes the same forms (and `-h URL`), and its own
    // `update` sets a toxic's probability as its toxicity.
    let ctl = |args: &[&str]| {
        let mut full = vec!["ctl", "-h", &url];
        full.extend_from_slice(args);
        let (code, out, err) = netchaos(&full);
        assert_eq!(code, 0, "ctl {args:?}: {err}");
        out
    };
    ctl(&[
        "toxic",
        "add",
        "-t",
        "latency",
        "-n",
        "p",
        "-a",
        "latency=1",
        "echo",
    ]);
    ctl(&["update", "echo", "p", "probability=0.25"]);
    assert!(ctl(&["show", "echo"]).contains("toxicity 0.25"));
    assert!(ctl(&["ls"]).starts_with("echo  listen"));
}

/// JSON given as data keeps its case through the API (Go matches only
/// the API's own keys without regard to case): a merge patch as an object,
/// a query name in a table. `ctl add` takes a JSON value with its commas.
#[test]
fn json_in_attributes_keeps_its_case_and_ctl_takes_json_values() {
    if !need(&["python3"]) {
        return;
    }
    let up = Httpd::start(None);
    let s = server(&[]);
    let url = s.url();
    let body = json!({"Name": "api", "Listen": "127.0.0.1:0", "Upstream": format!("127.0.0.1:{}", up.port)});
    let (st, v) = http(
        "POST",
        &format!("{url}/proxies"),
        Some(&body.to_string()),
        &[],
    );
    assert_eq!(st, 201, "{v}");
    let addr = listen_of(&v);
    let (code, _, err) = netchaos(&[
        "ctl",
        "--url",
        &url,
        "add",
        "api",
        r#"http_rewrite:phase=response,patch_json={"stop_reason":"max_tokens","Extra":{"K":1}},path=/json"#,
        "--name",
        "patch",
    ]);
    assert_eq!(code, 0, "{err}");
    let toxic = json!({"Name": "query", "Type": "http_rewrite", "Attributes": {
        "Set_Query": {"Beta": "1"}, "set_query.Gamma": "2", "Path": "/echo-head/*"}});
    let (st, v) = http(
        "POST",
        &format!("{url}/proxies/api/toxics"),
        Some(&toxic.to_string()),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["attributes"]["set_query"], json!({"Beta": "1"}), "{v}");
    // A JSON Patch is a list of operations: pointers and values keep their case.
    let toxic = json!({"Name": "ops", "Type": "http_rewrite", "Attributes": {
        "Phase": "response", "Path": "/json-chunked", "Patch_Ops": [
            {"op": "replace", "path": "/content/0/text", "value": "Cut"},
            {"op": "add", "path": "/Upper", "value": {"K": [1]}}]}});
    let (st, v) = http(
        "POST",
        &format!("{url}/proxies/api/toxics"),
        Some(&toxic.to_string()),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = http("GET", &format!("http://{addr}/json-chunked"), None, &[]);
    assert_eq!(st, 200);
    assert_eq!(v["content"][0]["text"], "Cut", "{v}");
    assert_eq!(v["Upper"], json!({"K": [1]}), "{v}");
    let (st, v) = http("GET", &format!("http://{addr}/json"), None, &[]);
    assert_eq!(st, 200);
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
    assert_eq!(v["Extra"], json!({"K": 1}), "{v}");
    let (_, v) = http("GET", &format!("http://{addr}/echo-head/x"), None, &[]);
    let seen = v.as_str().unwrap_or_default();
    assert!(
        seen.starts_with("GET /echo-head/x?Beta=1&Gamma=2 "),
        "{seen}"
    );
}

#[test]
fn faults_change_open_connections_without_losing_bytes() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let body = json!({"name": "e", "upstream": echo.addr.to_string()}).to_string();
    let (_, v) = http("POST", &format!("{u}/proxies"), Some(&body), &[]);
    let mut c = connect(listen_of(&v));
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 16];
    c.write_all(b"one").unwrap();
    c.read_exact(&mut buf[..3]).unwrap();

    // A stall added mid-stream holds what follows…
    let (st, _) = http(
        "POST",
        &format!("{u}/proxies/e/toxics"),
        Some(r#"{"type": "stall", "name": "hold"}"#),
        &[],
    );
    assert_eq!(st, 200);
    c.write_all(b"two").unwrap();
    let r = c.read(&mut buf);
    assert!(r.is_err(), "the stall holds the reply: {r:?}");
    // …and removing it releases the held bytes, in order.
    let (st, _) = http("DELETE", &format!("{u}/proxies/e/toxics/hold"), None, &[]);
    assert_eq!(st, 204);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.read_exact(&mut buf[..3]).unwrap();
    assert_eq!(&buf[..3], b"two");

    // Latency added to the open connection delays the bytes that follow.
    http(
        "POST",
        &format!("{u}/proxies/e/toxics"),
        Some(r#"{"type": "latency", "attributes": {"latency": 300}}"#),
        &[],
    );
    let t = Instant::now();
    c.write_all(b"three").unwrap();
    c.read_exact(&mut buf[..5]).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
    http(
        "DELETE",
        &format!("{u}/proxies/e/toxics/latency_downstream"),
        None,
        &[],
    );
    let t = Instant::now();
    c.write_all(b"four").unwrap();
    c.read_exact(&mut buf[..4]).unwrap();
    assert!(t.elapsed() < Duration::from_millis(200));
    assert_eq!(&buf[..4], b"four");
}

#[test]
fn a_non_loopback_api_needs_a_token_and_enforces_it() {
    let (code, _, err) = netchaos(&["server", "--api", "0.0.0.0:0"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("not a loopback address") && err.contains("--api-token"),
        "{err}"
    );

    let Some(ns) = TestNetns::new() else { return };
    // The server listens on the namespace's own address, with a token.
    let api = format!("{}:8474", ns.ns_ip);
    let mut child = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            BIN,
            "server",
            "--api",
            &api,
            "--api-token",
            "s3cret",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://{api}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&api).is_err() {
        assert!(Instant::now() < deadline, "the API did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, v) = http("GET", &format!("{url}/proxies"), None, &[]);
    assert_eq!(st, 401, "{v}");
    let (st, _) = http(
        "GET",
        &format!("{url}/proxies"),
        None,
        &[("Authorization", "Bearer wrong")],
    );
    assert_eq!(st, 401);
    let (st, v) = http(
        "GET",
        &format!("{url}/proxies"),
        None,
        &[("Authorization", "Bearer s3cret")],
    );
    assert_eq!((st, v), (200, json!({})));
    let (code, out, err) = netchaos(&["ctl", "--url", &url, "--token", "s3cret", "list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "no proxies");
    signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
}

#[test]
fn hostile_input_gets_4xx_and_never_a_crash() {
    let s = server(&[]);
    let u = s.url();
    http(
        "POST",
        &format!("{u}/proxies"),
        Some(r#"{"name": "p", "upstream": "127.0.0.1:9"}"#),
        &[],
    );
    let bodies: Vec<String> = vec![
        "".into(),
        "{".into(),
        "null".into(),
        "[]".into(),
        "42".into(),
        r#"{"name": 5, "upstream": []}"#.into(),
        r#"{"type": {"a": 1}}"#.into(),
        r#"{"type": "latency", "attributes": {"latency": "fast"}}"#.into(),
        r#"{"type": "latency", "attributes": {"latency": 1e300}}"#.into(),
        r#"{"type": "bandwidth", "attributes": {"rate": -1}}"#.into(),
        r#"{"type": "slicer", "attributes": {"average_size": 10, "size_variation": 99}}"#.into(),
        r#"{"type": "respond", "attributes": {"status": 99999}}"#.into(),
        r#"{"type": "stall", "attributes": {"duration": "0s"}}"#.into(),
        r#"{"type": "refuse"}"#.into(),
        r#"{"name": "q", "upstream": "127.0.0.1:9", "listen": "not an address"}"#.into(),
        format!("{{\"name\": \"{}\"}}", "x".repeat(100_000)),
        "\u{0}\u{1}\u{2}".into(),
    ];
    let routes = [
        ("POST", "/proxies"),
        ("POST", "/populate"),
        ("POST", "/proxies/p"),
        ("PATCH", "/proxies/p"),
        ("POST", "/proxies/p/toxics"),
        ("POST", "/proxies/p/toxics/none"),
        ("PATCH", "/proxies/nope/toxics/none"),
    ];
    for (method, path) in routes {
        for b in &bodies {
            let (st, v) = http(method, &format!("{u}{path}"), Some(b), &[]);
            // What Toxiproxy accepts is accepted (unknown fields, a
            // negative rate, a slicer's variation above its size: the
            // nearest sane thing, warned about); what it refuses is a 4xx,
            // or a 500 where Go fails to listen — always with a JSON error,
            // and the server goes on.
            assert!(
                st < 500
                    || st == 500
                        && v["error"]
                            .as_str()
                            .is_some_and(|e| e.starts_with("listen tcp")),
                "{method} {path} {:.60}: {st} {v}",
                b
            );
            if st >= 400 && st != 413 {
                assert!(
                    v.get("error").is_some() && v["status"] == st,
                    "{method} {path}: {v}"
                );
            }
            // The created ones would clash with the next round's.
            if method == "POST" && path == "/proxies" && st == 201 {
                http("DELETE", &format!("{u}/proxies/q"), None, &[]);
            }
        }
    }
    let (st, _) = http("GET", &format!("{u}/version"), None, &[]);
    assert_eq!(st, 200, "still serving");
    // A body over 8 MiB is refused from its declared length (the head
    // alone is sent: the answer comes before the body would be read).
    let mut raw = std::net::TcpStream::connect(u.trim_start_matches("http://")).unwrap();
    raw.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(
        &mut raw,
        b"POST /proxies HTTP/1.1\r\nHost: localhost\r\nContent-Length: 9437184\r\n\r\n",
    )
    .unwrap();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut raw, &mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 413"),
        "big bodies are refused"
    );
    let (st, _) = http(
        "GET",
        &format!("{u}/proxies"),
        None,
        &[("User-Agent", "Mozilla/5.0 (X11)")],
    );
    assert_eq!(st, 403, "browsers are refused");
    let (st, _) = http("GET", &format!("{u}/nothing/here"), None, &[]);
    assert_eq!(st, 404);
    let (st, _) = http("DELETE", &format!("{u}/version"), None, &[]);
    assert_eq!(st, 405);
    // Still alive and unharmed.
    let (st, v) = http("GET", &format!("{u}/proxies"), None, &[]);
    assert_eq!(st, 200);
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["p"]);
    let (_, stderr) = s.stop();
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn metrics_move_as_faults_are_injected() {
    let echo = Server::echo("127.0.0.1:0");
    let s = server(&[]);
    let u = s.url();
    let body = json!({"name": "m", "upstream": echo.addr.to_string()}).to_string();
    let (_, v) = http("POST", &format!("{u}/proxies"), Some(&body), &[]);
    let addr = listen_of(&v);
    http(
        "POST",
        &format!("{u}/proxies/m/toxics"),
        Some(r#"{"type": "latency", "attributes": {"latency": 1}}"#),
        &[],
    );
    let metric = |name: &str| -> f64 {
        let (_, v) = http("GET", &format!("{u}/metrics"), None, &[]);
        let text = v.as_str().unwrap().to_string();
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |n| n.parse().unwrap())
    };
    let before = metric("netchaos_faults_injected_total{rule=\"m\",fault=\"latency\"}");
    for _ in 0..3 {
        rtt(addr);
    }
    assert_eq!(
        metric("netchaos_faults_injected_total{rule=\"m\",fault=\"latency\"}"),
        before + 3.0
    );
    assert_eq!(metric("netchaos_connections_total{proxy=\"m\"}"), 3.0);
    assert!(metric("netchaos_bytes_total{proxy=\"m\",direction=\"downstream\"}") >= 3.0);
    let (_, v) = http("GET", &format!("{u}/metrics"), None, &[]);
    // netchaos's own series, and Toxiproxy's per-proxy byte counters.
    for line in v.as_str().unwrap().lines().filter(|l| !l.starts_with('#')) {
        assert!(
            line.starts_with("netchaos_") || line.starts_with("toxiproxy_proxy_"),
            "{line}"
        );
    }
    // A deleted proxy's series go with it (proxies made and deleted by
    // new names would otherwise pile up for as long as netchaos runs).
    http("DELETE", &format!("{u}/proxies/m"), None, &[]);
    let (_, v) = http("GET", &format!("{u}/metrics"), None, &[]);
    let text = v.as_str().unwrap();
    assert!(!text.contains("proxy=\"m\""), "{text}");
    // Prometheus's text format (Toxiproxy's) unless OpenMetrics is asked
    // for, as Prometheus's scraper asks; the samples are the same.
    assert!(
        text.contains("# TYPE netchaos_bytes_total counter"),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "{text}");
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (_, v) = http("GET", &format!("{u}/metrics"), None, &[("accept", accept)]);
    let om = v.as_str().unwrap();
    assert!(om.contains("# TYPE netchaos_bytes counter"), "{om}");
    assert!(om.ends_with("# EOF\n"), "{om}");
}

/// The fast path's bulk buffers show in the metrics: none out at first,
/// one held by a direction whose destination stopped reading, their
/// limit, and no read that found none left.
#[test]
fn bulk_buffers_show_in_the_metrics() {
    // Reads nothing for 10 s (a connection stays open that long at most).
    let sink = Server::start("127.0.0.1:0", |s| {
        std::thread::sleep(Duration::from_secs(10));
        drop(s);
    });
    let s = server(&[]);
    let u = s.url();
    let body = json!({"name": "b", "upstream": sink.addr.to_string()}).to_string();
    let (_, v) = http("POST", &format!("{u}/proxies"), Some(&body), &[]);
    let addr = listen_of(&v);
    let metric = |name: &str| -> u64 {
        let (_, v) = http("GET", &format!("{u}/metrics"), None, &[]);
        let text = v.as_str().unwrap().to_string();
        text.lines()
            .find(|l| l.split(' ').next() == Some(name))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(metric("netchaos_relay_bulk_buffers"), 0);
    assert_eq!(metric("netchaos_relay_bulk_buffers_limit"), 512);
    let mut c = connect(addr);
    c.set_nonblocking(true).unwrap();
    let chunk = vec![7u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut sent = 0usize;
    // Writes until the path is full (at most 256 MiB, 8 s), watching for
    // the relay to hold a bulk buffer.
    while metric("netchaos_relay_bulk_buffers") == 0 {
        assert!(
            Instant::now() < deadline && sent < 256 << 20,
            "no bulk buffer held after {sent} bytes"
        );
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(metric("netchaos_relay_bulk_buffer_misses_total"), 0);
    drop(c);
    drop(sink);
}

#[test]
fn proxy_and_run_serve_the_api_too() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let p = Proxy::start(&[
        "--api",
        "127.0.0.1:0",
        "--name",
        "given",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    let (st, v) = http("GET", &format!("{}/proxies/given", p.url()), None, &[]);
    assert_eq!(st, 200);
    assert_eq!(listen_of(&v), p.addr());
    http(
        "POST",
        &format!("{}/proxies/given/toxics", p.url()),
        Some(r#"{"type": "latency", "attributes": {"latency": 200}}"#),
        &[],
    );
    assert!(rtt(p.addr()) >= Duration::from_millis(190));
    // Connect faults need transparent interception.
    let (st, v) = http(
        "POST",
        &format!("{}/proxies/given/toxics", p.url()),
        Some(r#"{"type": "refuse"}"#),
        &[],
    );
    assert_eq!(st, 400, "{v}");
}

#[test]
fn under_run_rules_are_transparent_proxies() {
    if missing_tool("python3") || missing_tool("nft") || missing_tool("ip") {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let go = dir.path().join("go");
    // The wrapped command connects once, waits for the test to add a fault
    // through the API, then connects again.
    let script = format!(
        r#"
import os, socket, sys, time
def attempt():
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=5).close(); return "ok"
    except ConnectionRefusedError:
        return "refused"
print(attempt(), flush=True)
open("{ready}", "w").close()
for _ in range(200):
    if os.path.exists("{go}"): break
    time.sleep(0.05)
print(attempt(), flush=True)
"#,
        port = echo.addr.port(),
        ready = ready.display(),
        go = go.display()
    );
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "[[rules]]\nname = \"backend\"\nmatch = { ports = [\"1-65535\"] }\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(BIN)
        .args([
            "run",
            "--api",
            "127.0.0.1:0",
            "-p",
            profile.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            &script,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut api = None;
    for _ in 0..50 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut err, &mut line).unwrap();
        if let Some(rest) = line.split("control API on http://").nth(1) {
            api = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
    }
    let u = format!("http://{}", api.expect("the API address"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "the wrapped command did not get ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    // A loss added at run time would select no drop rule: refused, with
    // the reason, rather than accepted and doing nothing.
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies/backend/toxics"),
        Some(r#"{"type": "loss", "attributes": {"percent": 10}}"#),
        &[],
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("--fault or a profile"),
        "{v}"
    );
    std::fs::write(&go, "").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(
        out, "ok\nrefused\n",
        "the fault added through the API refused the next connect"
    );
}

#[test]
fn http_faults_are_extension_toxics_counted_in_metrics() {
    let web = Server::start("127.0.0.1:0", |mut s| {
        // Keep-alive: answers every request on the connection.
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        loop {
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                buf.drain(..end + 4);
                if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .is_err()
                {
                    return;
                }
            }
            match s.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    });
    let s = server(&[]);
    let u = s.url();
    let body = json!({"name": "api", "listen": "127.0.0.1:0", "upstream": web.addr.to_string()});
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies"),
        Some(&body.to_string()),
        &[],
    );
    assert_eq!(st, 201, "{v}");
    let addr = listen_of(&v);
    let toxic = json!({"type": "http_status", "attributes": {"status": 429, "retry_after": "1s", "first": 2}});
    let (st, v) = http(
        "POST",
        &format!("{u}/proxies/api/toxics"),
        Some(&toxic.to_string()),
        &[],
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["type"], "http_status");
    // Three requests on one keep-alive connection.
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut statuses = Vec::new();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    for _ in 0..3 {
        c.write_all(b"GET / HTTP/1.1\r\nHost: api\r\n\r\n").unwrap();
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while buf.len() < end + 4 + len {
                    let n = c.read(&mut tmp).unwrap();
                    buf.extend_from_slice(&tmp[..n]);
                }
                statuses.push(head[9..12].to_string());
                buf.drain(..end + 4 + len);
                break;
            }
            let n = c.read(&mut tmp).unwrap();
            assert!(n > 0, "closed after {statuses:?}");
            buf.extend_from_slice(&tmp[..n]);
        }
    }
    assert_eq!(statuses, ["429", "429", "200"]);
    let (_, m) = http("GET", &format!("{u}/metrics"), None, &[]);
    let m = m.as_str().unwrap().to_string();
    assert!(m.contains("netchaos_http_requests_total 3"), "{m}");
    assert!(
        m.contains("netchaos_http_faults_total{fault=\"http_status\",status=\"429\"} 2"),
        "{m}"
    );
}
