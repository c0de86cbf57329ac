//! Resets and FINs as a path delivers them, the same clients directly and
//! through netchaos: a reset reaches a Node client as ECONNRESET, not as
//! the end of the stream (libuv takes a hang-up that arrives with unread
//! data for the end); an answer a server sent before its RST reaches the
//! client (fidelity rules 1 and 3); and a FIN right behind an answer is in
//! the client's socket when the client, told of the close, looks.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use support::*;

/// `runs` connections to 127.0.0.1:PORT one after another, each read
/// until it ends; prints how many ended each way (`EOF`, an error code,
/// `timeout`) as JSON. Busy for 20 ms once connected, as an event loop
/// with other work is: what arrives meanwhile waits unread.
const NODE_READER: &str = r#"
const net = require('net');
const [port, runs] = [Number(process.argv[1]), Number(process.argv[2])];
const ends = {};
function one(i) {
  if (i >= runs) { console.log(JSON.stringify(ends)); return; }
  const s = net.connect(port, '127.0.0.1');
  let done = false;
  const end = (how) => {
    if (done) return;
    done = true;
    clearTimeout(t);
    ends[how] = (ends[how] || 0) + 1;
    s.destroy();
    setImmediate(() => one(i + 1));
  };
  const t = setTimeout(() => end('timeout'), 10000);
  s.on('connect', () => { const until = Date.now() + 20; while (Date.now() < until) {} });
  s.on('data', () => {});
  s.on('end', () => end('EOF'));
  s.on('error', (e) => end(e.code));
  s.on('close', () => end('close'));
}
one(0);
"#;

const RUNS: &str = "20";

/// Bytes written to `s` and not yet acknowledged (TIOCOUTQ).
fn unacked(s: &std::net::TcpStream) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one c_int through the pointer, to a local.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if r < 0 { 0 } else { n }
}

/// The receive queue of this namespace's TCP socket from `local` to
/// `remote` (/proc/net/tcp, IPv4); `None` when there is none here.
fn unread_at(local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => String::new(),
    };
    let (l, r) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 4 && f[1] == l && f[2] == r)
            .then(|| u64::from_str_radix(f[4].split(':').nth(1)?, 16).ok())
            .flatten()
    })
}

/// Sends `n` bytes, and resets the connection once its peer has read
/// them (bounded: 5 s): a reset that comes after the data, as a reset a
/// round trip or more behind its data does. Directly the peer is the
/// client; through netchaos it is the relay, which reads at once, so
/// that its RST follows the data at loopback speed.
fn resets_once_read(n: usize) -> Server {
    Server::start("127.0.0.1:0", move |s| {
        let _ = (&s).write_all(&vec![b'x'; n]);
        let (me, peer) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline
            && (unacked(&s) > 0 || unread_at(peer, me).is_some_and(|q| q > 0))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        set_linger_zero(&s);
    })
}

/// How the Node reader's connections to `port` ended, directly or (with
/// `run_args`) under `netchaos run`.
fn node_ends(port: u16, run_args: Option<&[&str]>) -> String {
    let port = port.to_string();
    let cmd = ["node", "-e", NODE_READER, &port, RUNS];
    let (code, out, err) = match run_args {
        Some(args) => wrapped(args, &cmd),
        None => bounded(&cmd),
    };
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

/// Runs `cmd` directly; (code, stdout, stderr), killed after 60 s.
fn bounded(cmd: &[&str]) -> (i32, String, String) {
    let mut child = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a client");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish in 60 s", cmd[0]);
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

const ALL_RESET: &str = r#"{"ECONNRESET":20}"#;

#[test]
fn node_sees_an_upstreams_reset_as_a_reset_as_directly() {
    if !need(&["node", "ip", "nft"]) {
        return;
    }
    // One segment: nothing waits for an acknowledgement before the RST.
    let server = resets_once_read(1000);
    let port = server.addr.port();
    assert_eq!(node_ends(port, None), ALL_RESET, "directly");
    assert_eq!(node_ends(port, Some(&[])), ALL_RESET, "under run");
    // An explicit proxy: the client's socket seen in netchaos's own
    // namespace.
    let proxy = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &server.addr.to_string(),
    ]);
    let via_proxy = node_ends(proxy.addrs[0].port(), None);
    assert_eq!(via_proxy, ALL_RESET, "through proxy");
}

#[test]
fn node_sees_a_reset_fault_as_a_reset_as_directly() {
    if !need(&["node", "ip", "nft"]) {
        return;
    }
    // Directly: the server itself resets behind 16 KiB, once they are read.
    let direct = resets_once_read(16 << 10);
    assert_eq!(node_ends(direct.addr.port(), None), ALL_RESET, "directly");
    // Through netchaos: a server that would send more, and the fault
    // resets behind the first 16 KiB.
    let more = Server::start("127.0.0.1:0", |mut s| {
        let _ = s.write_all(&[b'x'; 64 << 10]);
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut buf = [0u8; 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    });
    let fault = ["--fault", "reset:after_bytes=16384,stream=downstream"];
    assert_eq!(
        node_ends(more.addr.port(), Some(&fault)),
        ALL_RESET,
        "a reset fault under run"
    );
}

/// 30 uploads of 4 MiB to 127.0.0.1:PORT, each answered early by a server
/// that then closes (PAUSE seconds after connecting, the upload starts);
/// prints how many got the whole answer, and how each upload ended.
const EARLY_ANSWER: &str = r#"
import socket, sys, time
port, pause = int(sys.argv[1]), float(sys.argv[2])
answered, sends = 0, {}
for _ in range(30):
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    time.sleep(pause)
    try:
        c.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n" + b"a" * (4 << 20))
        how = "sent"
    except OSError as e:
        how = type(e).__name__
    sends[how] = sends.get(how, 0) + 1
    got = b""
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError:
        pass
    answered += got.startswith(b"HTTP/1.1 404 Not Found\r\n") and got.endswith(b"\r\n\r\nnot found!")
    c.close()
print(answered, sorted(sends.items()))
"#;

const NOT_FOUND: &[u8] =
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found!";

/// How many of 30 early answers reached the Python client; directly and
/// under `netchaos run`.
fn early_answers(server: &Server, pause: &str) -> [String; 2] {
    let port = server.addr.port().to_string();
    let direct = python(EARLY_ANSWER, &[&port, pause]);
    assert_eq!(direct.0, 0, "{}", direct.2);
    let (code, via_run, err) = wrapped(&[], &["python3", "-c", EARLY_ANSWER, &port, pause]);
    assert_eq!(code, 0, "{err}");
    [direct.1, via_run]
}

#[test]
fn an_answer_sent_before_the_upstreams_reset_reaches_the_client() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    // Reads the start of the request, answers, and closes with the rest
    // unread: the kernel resets the upload.
    let early = Server::start("127.0.0.1:0", |mut s| {
        let mut head = [0u8; 100];
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.read(&mut head);
        let _ = s.write_all(NOT_FOUND);
    });
    let [direct, via_run] = early_answers(&early, "0");
    assert!(direct.starts_with("30 "), "directly: {direct}");
    assert!(
        via_run.starts_with("30 "),
        "under run: {via_run}; directly {direct}"
    );
    // urllib3's test_ignore_broken_pipe_errors: the answer at once, both
    // ways shut, closed; the upload starts after and meets the RST.
    let at_once = Server::start("127.0.0.1:0", |s| {
        let _ = (&s).write_all(NOT_FOUND);
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    let [direct, via_run] = early_answers(&at_once, "0.05");
    assert!(direct.starts_with("30 "), "directly: {direct}");
    assert!(
        via_run.starts_with("30 "),
        "under run: {via_run}; directly {direct}"
    );
}

/// Python: `PORT FIFO N` — N requests on new connections to
/// 127.0.0.1:PORT, each answer read whole; then it waits for the server's
/// word that it closed (a byte on FIFO, written after its `close()`) and
/// polls the socket at once, as urllib3 checks a pooled connection before
/// reusing it. Prints how many were not yet readable: the FIN still on
/// its way.
const FIN_PROBE: &str = r#"
import os, select, socket, sys
port, fifo, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
word = os.open(fifo, os.O_RDONLY)
late = 0
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not got.endswith(b"hello"):
        d = c.recv(65536)
        assert d, "the connection ended before the answer"
        got += d
    assert select.select([word], [], [], 10)[0], "no word from the server in 10 s"
    os.read(word, 1)
    late += not select.select([c], [], [], 0)[0]
    c.close()
print(late)
"#;

const TRIES: &str = "200";

/// The same, as urllib3's test has it: the server is a thread of the
/// client's process, on its loopback, and tells the client of the close
/// with an `Event`. Prints how many times the FIN was not there yet.
const FIN_PROBE_ONE_PROCESS: &str = r#"
import select, socket, sys, threading
n = int(sys.argv[1])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(8)
closed = threading.Event()

def serve():
    for _ in range(n):
        s = listener.accept()[0]
        s.settimeout(10)
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            d = s.recv(65536)
            if not d:
                return
            head += d
        s.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        s.close()
        closed.set()

server = threading.Thread(target=serve, daemon=True)
server.start()
late = 0
for _ in range(n):
    c = socket.create_connection(listener.getsockname(), timeout=10)
    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while not got.endswith(b"hello"):
        d = c.recv(65536)
        assert d, "the connection ended before the answer"
        got += d
    assert closed.wait(10), "no word from the server in 10 s"
    closed.clear()
    late += not select.select([c], [], [], 0)[0]
    c.close()
server.join(10)
print(late)
"#;

/// Issue 49: a server that answers and closes at once (a server's idle
/// timeout, urllib3's `test_recovery_when_server_closes_connection`)
/// leaves its FIN in the client's socket before `close()` returns; a client
/// told of the close by other means and looking at once must find it
/// there through netchaos too, on the fast path and through the HTTP
/// layer. The relay sends the answer's last bytes and the FIN in one
/// segment when the FIN is behind them, and a local server's answer waits
/// briefly for it; before, the answer went alone and woke the client
/// ahead of the FIN.
#[test]
fn a_fin_right_behind_an_answer_is_there_when_the_client_looks() {
    if !need(&["python3", "ip", "nft", "mkfifo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("closed");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    // Opened for reading too, so that writing never blocks nor fails
    // between the two clients.
    let word = std::sync::Arc::new(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap(),
    );
    let server = Server::start("127.0.0.1:0", move |mut s| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                _ => return,
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        drop(s);
        let _ = (&*word).write_all(b"x");
    });
    let port = server.addr.port().to_string();
    let fifo = fifo.to_str().unwrap();
    let direct = bounded(&["python3", "-c", FIN_PROBE, &port, fifo, TRIES]);
    assert_eq!(direct.0, 0, "{}", direct.2);
    let late = |out: &str| out.trim().parse::<u32>().expect("a count");
    let direct = late(&direct.1);
    // The fast path, and the HTTP layer following every request.
    for args in [&[][..], &["--records"]] {
        let via_run = wrapped(args, &["python3", "-c", FIN_PROBE, &port, fifo, TRIES]);
        assert_eq!(via_run.0, 0, "{}", via_run.2);
        let via_run = late(&via_run.1);
        eprintln!(
            "not yet readable at EOF, of {TRIES}: directly {direct}, under run {args:?} {via_run}"
        );
        // A few allowed: a server preempted between its answer and its
        // close() outlasts the relay's hold (0–3 of 200 with both cores
        // busy; 143–165 before the answer and its FIN went together, and
        // up to 40 of 400 before answers waited for the FIN).
        assert!(
            via_run <= direct + 6,
            "under run {args:?}: {via_run} of {TRIES} late, directly {direct}"
        );
    }
}

/// Issue 49, as urllib3's suite has it: the server is a thread of the
/// wrapped command, on the command's own loopback, so the relay dials it
/// inside the namespace, where the server's `send()` and `close()` run
/// slower and the relay read the answer before the FIN two to three times
/// as often. An answer from a server on this host waits briefly for a FIN
/// behind it (`relay::answer`): 0–1 of 400 late with a release build, 59–329
/// before. A debug build's relay reads the answer late enough that the
/// FIN is mostly behind it already: on the debug build that `cargo test`
/// makes, this test passes without the wait too (2–6 late). The waits
/// themselves are tested in-process (`relay::fast`, `relay::pipeline`).
#[test]
fn a_fin_from_a_server_in_the_command_is_there_when_the_client_looks() {
    if !need(&["python3", "ip", "nft"]) {
        return;
    }
    let late = |out: &str| out.trim().parse::<u32>().expect("a count");
    let cmd = ["python3", "-c", FIN_PROBE_ONE_PROCESS, TRIES];
    let direct = bounded(&cmd);
    assert_eq!(direct.0, 0, "{}", direct.2);
    let direct = late(&direct.1);
    // The fast path, and the fault path (a stage that changes nothing).
    for args in [&[][..], &["--fault", "latency:delay=0"]] {
        let via_run = wrapped(args, &cmd);
        assert_eq!(via_run.0, 0, "{}", via_run.2);
        let via_run = late(&via_run.1);
        eprintln!(
            "not yet readable at EOF, of {TRIES}: directly {direct}, under run {args:?} {via_run}"
        );
        // A few allowed: a server preempted between its answer and its
        // close() outlasts the hold (both cores busy).
        assert!(
            via_run <= direct + 6,
            "under run {args:?}: {via_run} of {TRIES} late, directly {direct}"
        );
    }
}
