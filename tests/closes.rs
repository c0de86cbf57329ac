//! How connections end, as the client's socket sees it and as the event
//! log says it: a clean close stays a FIN on every path (`splice`,
//! `pipeline`, `http`, `https`, HTTP/2), with or without TLS's
//! `close_notify`, and each close line counts the bytes the relay
//! delivered, as the summary does — a reset fault's too.
//!
//! Real clients (Python's `ssl`, Go's `crypto/tls`, Node's `tls`) against
//! `support/httpd.py` on loopback, directly and through `netchaos run`.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use support::*;

/// A fault that matches no request: every HTTPS connection through the
/// HTTP layer, none faulted.
const NEVER: &str = "http_status:status=503,path=/never-matches";

/// Python: `HOST PORT CA MODE PROTO` — one request on a new connection
/// (`plain`: HTTP; `h1`: HTTPS; `h2`: HTTP/2 over TLS, a gRPC call), the
/// answer read whole, then the client's end: `bare`, a FIN alone (without
/// `close_notify` under TLS); `notify`, `close_notify` first. Then it reads
/// until the connection ends and prints `py MODE PORT END GOT SENT`: its
/// local port, how the connection ended (`eof`, `reset`, or `alert`: a TLS
/// alert before the FIN), and the bytes it read and sent (plaintext). CA
/// `-`: the default trust.
const PY_CLIENT: &str = r#"
import socket, ssl, sys
host, port, ca, mode, proto = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
raw = socket.create_connection((host, port), timeout=10)
local = raw.getsockname()[1]
s = raw
if proto != "plain":
    ctx = ssl.create_default_context(cafile=None if ca == "-" else ca)
    ctx.set_alpn_protocols(["h2"] if proto == "h2" else ["http/1.1"])
    s = ctx.wrap_socket(raw, server_hostname="localhost")
got = sent = 0
def send(b):
    global sent
    s.sendall(b)
    sent += len(b)
if proto == "h2":
    import h2.config, h2.connection, h2.events
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "POST"), (":path", "/test.Echo/Unary"), (":scheme", "https"),
                       (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")])
    c.send_data(1, b"\x00\x00\x00\x00\x02hi", end_stream=True)
    send(c.data_to_send())
    done = False
    while not done:
        b = s.recv(65536)
        assert b, "the connection ended before the answer"
        got += len(b)
        for e in c.receive_data(b):
            done = done or isinstance(e, h2.events.StreamEnded)
        send(c.data_to_send())
    c.close_connection()
    send(c.data_to_send())
else:
    send(b"GET /p/1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
    buf = b""
    while not (b"\r\n\r\n" in buf and len(buf.split(b"\r\n\r\n", 1)[1]) >= 70):
        b = s.recv(65536)
        assert b, "the connection ended before the answer"
        buf += b
    got = len(buf)
def drain(sock):
    global got
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                return "eof"
            got += len(b)
    except ConnectionResetError:
        return "reset"
    except ssl.SSLEOFError:
        return "eof"
    except ssl.SSLError as e:
        return "alert" if "ALERT" in str(e).upper() else f"ssl:{e}"
if mode == "notify" and proto != "plain":
    # close_notify, then whatever ends the connection: the server's own
    # close_notify (then the FIN), or its FIN.
    try:
        rest = s.unwrap()
        rest.shutdown(socket.SHUT_WR)
        end = "eof" if rest.recv(65536) == b"" else "data"
    except ConnectionResetError:
        end = "reset"
    except ssl.SSLEOFError:
        end = "eof"
    except ssl.SSLError as e:
        end = "alert" if "ALERT" in str(e).upper() else f"ssl:{e}"
else:
    # A FIN alone; what arrives (plaintext) still read.
    socket.socket.shutdown(s, socket.SHUT_WR)
    end = drain(s)
print("py", mode, local, end, got, sent, flush=True)
"#;

/// Go: `ADDR CA MODE` — one HTTPS request on a new connection, read whole,
/// then `CloseWrite` (`notify`: `close_notify` first; `bare`: the FIN
/// alone), then the socket read to its end: `go MODE PORT END GOT SENT`.
const GO_CLIENT: &str = r#"package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

func main() {
	addr, ca, mode := os.Args[1], os.Args[2], os.Args[3]
	cfg := &tls.Config{ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	if ca != "-" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			panic(err)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Println("go", mode, "dial:", err)
		os.Exit(1)
	}
	c := tls.Client(raw, cfg)
	req := "GET /p/1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		fmt.Println("go", mode, "write:", err)
		os.Exit(1)
	}
	var got []byte
	buf := make([]byte, 65536)
	for {
		i := bytes.Index(got, []byte("\r\n\r\n"))
		if i >= 0 && len(got)-i-4 >= 70 {
			break
		}
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			fmt.Println("go", mode, "read:", err)
			os.Exit(1)
		}
	}
	if mode == "notify" {
		c.CloseWrite()
	}
	raw.(*net.TCPConn).CloseWrite()
	end := "eof"
	for {
		_, err := raw.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, syscall.ECONNRESET) {
			end = "reset"
		} else if err != io.EOF {
			end = err.Error()
		}
		break
	}
	_, port, _ := net.SplitHostPort(raw.LocalAddr().String())
	fmt.Println("go", mode, port, end, len(got), len(req))
}
"#;

/// Node: `HOST PORT CA MODE` — one HTTPS request on a new connection, read
/// whole, then `notify`: `end()` (`close_notify`, then the FIN); `bare`:
/// the TCP socket's own `end()` (the FIN alone). `node MODE PORT END GOT
/// SENT` once the connection has closed (`alert`: a TLS alert came first).
const NODE_CLIENT: &str = r#"
const tls = require("tls"), net = require("net"), fs = require("fs");
const [host, port, ca, mode] = process.argv.slice(2);
const raw = net.connect({ host, port: +port });
const opts = { socket: raw, servername: "localhost", ALPNProtocols: ["http/1.1"] };
if (ca !== "-") opts.ca = fs.readFileSync(ca);
const req = "GET /p/1 HTTP/1.1\r\nHost: localhost\r\n\r\n";
const s = tls.connect(opts, () => s.write(req));
let got = Buffer.alloc(0), closing = false, end = "eof", local;
raw.on("connect", () => (local = raw.localPort));
s.on("data", (d) => {
  got = Buffer.concat([got, d]);
  const i = got.indexOf("\r\n\r\n");
  if (!closing && i >= 0 && got.length - i - 4 >= 70) {
    closing = true;
    if (mode === "notify") s.end(); else raw.end();
  }
});
const failed = (e) => {
  end = ["ECONNRESET", "EPIPE"].includes(e.code) ? "reset" : /ALERT/.test(e.code || "") ? "alert" : String(e.code);
};
s.on("error", failed);
raw.on("error", failed);
raw.on("close", () => console.log("node", mode, local, end, got.length, req.length));
"#;

/// One line of a client: (client, mode, local port, end, got, sent).
type Line = (String, String, String, String, u64, u64);

fn parse(out: &str) -> Vec<Line> {
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "{l:?} in\n{out}");
            (
                f[0].into(),
                f[1].into(),
                f[2].into(),
                f[3].into(),
                f[4].parse().expect(l),
                f[5].parse().expect(l),
            )
        })
        .collect()
}

/// The close lines of a run, by the client's local port.
fn closes(events: &Path) -> BTreeMap<String, serde_json::Value> {
    read_events(events)
        .into_iter()
        .filter(|e| e["event"] == "close")
        .map(|e| {
            let port = e["client"].as_str().unwrap().rsplit(':').next().unwrap();
            (port.to_string(), e)
        })
        .collect()
}

/// The summary's bytes (upstream, downstream).
fn summary_bytes(err: &str) -> (u64, u64) {
    let line = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("bytes: "))
        .expect(err);
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

/// Each client's close line: the outcome, the path, and the bytes it
/// read and sent; and all of them add up to the summary.
fn assert_closes(lines: &[Line], events: &Path, err: &str, path: &str) {
    let closes = closes(events);
    assert_eq!(closes.len(), lines.len(), "{closes:#?}\n{err}");
    let (mut up, mut down) = (0, 0);
    for (client, mode, port, _, got, sent) in lines {
        let c = &closes[port];
        let who = format!("{client} {mode}: {c}");
        assert_eq!(c["outcome"], "fin", "{who}\n{err}");
        assert_eq!(c["path"], path, "{who}");
        assert_eq!(c["bytes_downstream"], *got, "{who}");
        assert_eq!(c["bytes_upstream"], *sent, "{who}");
        up += sent;
        down += got;
    }
    assert_eq!(summary_bytes(err), (up, down), "{err}");
}

/// Issue 48, item 4: Python, Go and Node close kept TLS connections with
/// a bare FIN, or with `close_notify` first. Through `run --tls` the relay
/// answered the first with an RST and logged `reset` with no bytes
/// downstream; a client sending `close_notify` got ECONNRESET where
/// directly it reads EOF. Now each sees the end it sees directly — never a
/// reset — and the close line says `fin`, with the bytes it read and sent.
/// (An OpenSSL server answers a bare FIN with a `decode_error` alert, which
/// rustls cannot make: through netchaos, the FIN after it.)
#[test]
fn tls_clients_closing_with_or_without_close_notify_see_their_eof() {
    if !need(&["python3", "go", "node", "ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let up = Httpd::start(Some(&ca));
    let work = tempfile::tempdir().unwrap();
    let (py, node) = (work.path().join("c.py"), work.path().join("c.js"));
    std::fs::write(&py, PY_CLIENT).unwrap();
    std::fs::write(&node, NODE_CLIENT).unwrap();
    let go_src = work.path().join("main.go");
    std::fs::write(&go_src, GO_CLIENT).unwrap();
    let go = work.path().join("goclient");
    let built = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&go)
        .arg(&go_src)
        .env("GOCACHE", work.path().join("gocache"))
        .env("GOPATH", work.path().join("gopath"))
        .env("GO111MODULE", "off")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let port = up.port;
    let script = |ca: &str| {
        let mut s = String::new();
        for mode in ["bare", "notify"] {
            s.push_str(&format!(
                "python3 {py} localhost {port} {ca} {mode} h1; {go} 127.0.0.1:{port} {ca} {mode}; \
                 node {node} localhost {port} {ca} {mode}; ",
                py = py.display(),
                go = go.display(),
                node = node.display()
            ));
        }
        s
    };
    let out = Command::new("sh")
        .args(["-c", &script(&ca.ca())])
        .output()
        .unwrap();
    let direct = parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(direct.len(), 6, "{direct:?}");
    let events = work.path().join("events.jsonl");
    let ev = events.display().to_string();
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--events",
            &ev,
            "--fault",
            NEVER,
        ],
        &["sh", "-c", &script("-")],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let through = parse(&out);
    assert_eq!(through.len(), 6, "{out}\n{err}");
    eprintln!("directly {direct:?}\nthrough netchaos {through:?}");
    for (d, t) in direct.iter().zip(&through) {
        assert_eq!((&d.0, &d.1), (&t.0, &t.1));
        let who = format!("{} {}: directly {d:?}, through netchaos {t:?}", d.0, d.1);
        assert_eq!(t.3, "eof", "{who}\n{err}");
        // Directly, the alert the server answered a bare FIN with, or
        // the EOF; never a reset either way.
        assert!(d.3 == "eof" || d.3 == "alert", "{who}");
        // The same answer, the same request.
        assert_eq!((d.4, d.5), (t.4, t.5), "{who}");
    }
    assert_closes(&through, &events, &err, "https");
}

/// Issue 48, item 4, on the other paths: a plaintext client's FIN through
/// the fast path (no fault), the pipeline (a stream fault) and the HTTP
/// layer (an HTTP fault), and an HTTP/2 client's bare FIN over TLS (a
/// gRPC server upstream): the client reads its EOF, and each close line
/// says `fin` with the bytes it read and sent.
#[test]
fn every_path_ends_a_clean_close_with_a_fin_and_counts_its_bytes() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let up = Httpd::start(None);
    let work = tempfile::tempdir().unwrap();
    let py = work.path().join("c.py");
    std::fs::write(&py, PY_CLIENT).unwrap();
    let plain = format!(
        "for i in 1 2; do python3 {} 127.0.0.1 {} - bare plain; done",
        py.display(),
        up.port
    );
    for (path, fault) in [
        ("splice", None),
        ("pipeline", Some("latency:delay=1ms")),
        ("http", Some(NEVER)),
    ] {
        let events = work.path().join(format!("{path}.jsonl"));
        let ev = events.display().to_string();
        let mut args = vec!["--events", ev.as_str()];
        if let Some(f) = fault {
            args.extend(["--fault", f]);
        }
        let (code, out, err) = wrapped(&args, &["sh", "-c", &plain]);
        assert_eq!(code, 0, "{path}: {out}\n{err}");
        let lines = parse(&out);
        assert_eq!(lines.len(), 2, "{path}: {out}\n{err}");
        assert!(lines.iter().all(|l| l.3 == "eof"), "{path}: {out}");
        assert_closes(&lines, &events, &err, path);
    }

    // HTTP/2 over TLS, closed bare (as httpx and grpcio close).
    if python("import grpc, h2", &[]).0 != 0 {
        assert!(
            !in_ci(),
            "grpcio and h2 are required in CI (scripts/test.sh installs them)"
        );
        eprintln!("SKIPPED: python3 has no grpcio or h2");
        return;
    }
    let ca = TestCa::new();
    let grpc = Httpd::grpc(Some(&ca));
    let events = work.path().join("h2.jsonl");
    let ev = events.display().to_string();
    let h2 = format!("python3 {} localhost {} - bare h2", py.display(), grpc.port);
    let (code, out, err) = wrapped(
        &[
            "--tls",
            "--upstream-ca",
            &ca.ca(),
            "--events",
            &ev,
            "--fault",
            NEVER,
        ],
        &["sh", "-c", &h2],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let lines = parse(&out);
    eprintln!("HTTP/2: {lines:?}");
    assert_eq!(lines.len(), 1, "{out}\n{err}");
    assert_eq!(lines[0].3, "eof", "{out}\n{err}");
    assert_closes(&lines, &events, &err, "https");
}

/// Issue 48, item 4: a connection ended by a `reset` fault logged
/// `bytes_upstream: 0` although its request had gone up. Its close line
/// now counts both ways, as the summary does.
#[test]
fn a_reset_faults_close_line_counts_both_ways() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let up = Httpd::start(None);
    let work = tempfile::tempdir().unwrap();
    let events = work.path().join("events.jsonl");
    let ev = events.display().to_string();
    let client = r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
req = b"GET /big/100000 HTTP/1.1\r\nHost: x\r\n\r\n"
s.sendall(req)
got = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            end = "eof"
            break
        got += len(b)
except ConnectionResetError:
    end = "reset"
print(end, got, len(req))
"#;
    let port = up.port.to_string();
    let (code, out, err) = wrapped(
        &[
            "--events",
            &ev,
            "--fault",
            "reset:after_bytes=1000,stream=downstream",
        ],
        &["python3", "-c", client, &port],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let f: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(f[0], "reset", "{out}\n{err}");
    let (got, sent): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
    assert!(got <= 1000, "{out}");
    let closes = closes(&events);
    let c = closes.values().next().expect("a close line");
    assert_eq!(c["outcome"], "reset", "{c}");
    assert_eq!(c["bytes_upstream"], sent, "{c}");
    assert_eq!(c["bytes_downstream"], 1000, "{c}");
    assert_eq!(summary_bytes(&err), (sent, 1000), "{err}");
}
