//! Upstreams that misbehave — read nothing, shut their read side, accept
//! and hang, vanish, never answer a SYN — and the connection limit. The
//! relay mirrors what the client would have seen without it, frees each
//! connection's resources (its descriptors) once the connection ends, and
//! keeps serving every other connection meanwhile.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// netchaos's open sockets (what else it opens — the event log, timers —
/// is not per connection).
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// netchaos's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Waits (bounded) until netchaos holds at most `n` descriptors.
fn fds_settle(pid: u32, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = fds(pid);
        if now <= n || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An echo round trip through `addr`, and how long it took.
fn echo_round_trip(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    t.elapsed()
}

/// Two proxies in one netchaos: `bad` to the misbehaving upstream, `good`
/// to an echo server, so that the second shows the first blocks nothing.
fn two_proxies(bad: &str, good: &Server, extra: &[&str]) -> Proxy {
    let good = good.addr.to_string();
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        bad,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &good,
    ];
    args.extend_from_slice(extra);
    let p = Proxy::start(&args);
    assert_eq!(p.addrs.len(), 2, "{}", p.stderr());
    p
}

#[test]
fn an_upstream_that_never_reads_pushes_back_on_the_client_with_bounded_memory() {
    let hold = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let h = hold.clone();
    // Accepts and never reads, until told to go.
    let deaf = Server::start("127.0.0.1:0", move |s| {
        while h.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(s);
    });
    let echo = Server::echo("127.0.0.1:0");
    for faults in [&[][..], &["--fault", "latency:delay=10ms,stream=both"][..]] {
        let p = two_proxies(&deaf.addr.to_string(), &echo, faults);
        let pid = p.pid();
        let (fds0, rss0) = (fds(pid), rss_kib(pid));
        let mut c = TcpStream::connect(p.addrs[0]).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let block = vec![9u8; 64 * 1024];
        let mut sent = 0usize;
        // Bounded: stop once a write has blocked for 0.5 s, or at 256 MiB.
        while sent < 256 << 20 {
            match c.write(&block) {
                Ok(n) => sent += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        // Socket buffers, the fast path's 512 KiB or the delay line's cap (8 MiB):
        // well under 64 MiB, and the relay's memory did not take the rest.
        assert!(sent < 64 << 20, "{sent} bytes accepted with {faults:?}");
        let grown = rss_kib(pid).saturating_sub(rss0);
        assert!(grown < 48 * 1024, "RSS grew {grown} KiB with {faults:?}");
        // Other connections are not held up.
        assert!(echo_round_trip(p.addrs[1]) < Duration::from_millis(500));
        // The client gives up (RST): the relay lets go of both sides.
        set_linger_zero(&c);
        drop(c);
        let left = fds_settle(pid, fds0);
        assert!(left <= fds0, "descriptors {fds0} -> {left} with {faults:?}");
        drop(p);
    }
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
}

/// What a client sees of an upstream, for comparing direct and relayed.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    data: Vec<u8>,
    end: Option<ErrorKind>,
}

fn see(addr: SocketAddr, send: &[u8]) -> Seen {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(send);
    let (data, err) = read_to_end(&mut c);
    Seen {
        data,
        end: err.map(|e| e.kind()),
    }
}

#[test]
fn an_upstream_that_shuts_its_read_side_is_mirrored() {
    // shutdown(SHUT_RD), a reply, then close: whatever the kernel makes of
    // that for the client directly, it must make of it through netchaos.
    let server = Server::start("127.0.0.1:0", |s| {
        let _ = s.shutdown(Shutdown::Read);
        let mut s = s;
        let _ = s.write_all(b"bye");
        std::thread::sleep(Duration::from_millis(300));
    });
    let direct = see(server.addr, b"hello");
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &server.addr.to_string(),
    ]);
    let relayed = see(p.addr(), b"hello");
    assert_eq!(direct.data, b"bye");
    assert_eq!(relayed, direct);
}

#[test]
fn an_upstream_that_half_closes_first_still_gets_the_rest() {
    // The server says its piece, sends FIN, then reads the client's bytes.
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start("127.0.0.1:0", move |mut s| {
        let _ = s.write_all(b"done talking");
        let _ = s.shutdown(Shutdown::Write);
        let (got, _) = read_to_end(&mut s);
        let _ = tx.send(got.len());
    });
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &server.addr.to_string(),
    ]);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 12];
    c.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"done talking");
    let mut rest = [0u8; 1];
    assert_eq!(c.read(&mut rest).unwrap(), 0, "the server's FIN");
    c.write_all(&vec![1u8; 300_000]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 300_000);
}

#[test]
fn an_upstream_that_accepts_and_hangs_holds_only_its_own_connection() {
    let (tx, rx) = std::sync::mpsc::channel::<TcpStream>();
    let hung = Server::start("127.0.0.1:0", move |s| {
        let _ = tx.send(s); // kept by the test, silent
    });
    let echo = Server::echo("127.0.0.1:0");
    let p = two_proxies(&hung.addr.to_string(), &echo, &[]);
    let pid = p.pid();
    let fds0 = fds(pid);
    let mut clients = Vec::new();
    for _ in 0..20 {
        let mut c = TcpStream::connect(p.addrs[0]).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        c.write_all(b"anyone there?").unwrap();
        clients.push(c);
    }
    let mut upstreams: Vec<TcpStream> = (0..20)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
        .collect();
    // As without netchaos: silence, then the client's own read timeout.
    let mut buf = [0u8; 16];
    let e = clients[0].read(&mut buf).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );
    assert!(echo_round_trip(p.addrs[1]) < Duration::from_millis(500));
    // The clients close: the hung upstream sees their FIN, as it would have.
    for c in clients {
        drop(c);
    }
    for u in &mut upstreams {
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (got, err) = read_to_end(u);
        assert_eq!(
            (got.as_slice(), err.map(|e| e.kind())),
            (&b"anyone there?"[..], None)
        );
    }
    // And when it finally closes, nothing of those connections remains.
    drop(upstreams);
    let left = fds_settle(pid, fds0);
    assert!(left <= fds0, "descriptors {fds0} -> {left}");
}

#[test]
fn an_upstream_that_never_answers_the_syn_does_not_stall_the_accept_loop() {
    let Some(ns) = TestNetns::new() else { return };
    if missing_tool("nft") {
        return;
    }
    // Inside the namespace every packet is dropped: a dead host.
    let drop_all = ns.sh("nft add table inet dead && nft add chain inet dead in '{ type filter hook input priority 0; policy drop; }'");
    assert!(drop_all.status.success(), "{drop_all:?}");
    let echo = Server::echo("127.0.0.1:0");
    let dead = format!("{}:9", ns.ns_ip);
    let p = two_proxies(&dead, &echo, &["--dial-timeout", "3s"]);
    let t = Instant::now();
    let clients: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect_timeout(&p.addrs[0], Duration::from_secs(2)).unwrap())
        .collect();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "accepts took {:?}",
        t.elapsed()
    );
    assert!(echo_round_trip(p.addrs[1]) < Duration::from_millis(500));
    // After the dial timeout each client is reset, as an unreachable
    // upstream resets it.
    for mut c in clients {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (_, err) = read_to_end(&mut c);
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
    }
}

#[test]
fn an_upstream_that_vanishes_while_the_client_waits_is_given_up_on_and_freed() {
    let Some(ns) = TestNetns::new() else { return };
    if missing_tool("nft") || missing_tool("python3") {
        return;
    }
    let port = 21_000 + (std::process::id() % 5000) as u16;
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(format!(
            "import socket, time\nl=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             l.bind(('{}', {port})); l.listen(); print('up', flush=True)\nc,_=l.accept(); c.recv(100)\ntime.sleep(60)",
            ns.ns_ip
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    server.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    let echo = Server::echo("127.0.0.1:0");
    let upstream = format!("{}:{port}", ns.ns_ip);
    let good = echo.addr.to_string();
    let mut child = Command::new(BIN)
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream", &upstream])
        .args(["--listen", "127.0.0.1:0", "--upstream", &good])
        .env("NETCHAOS_PEER_TIMEOUT", "3s")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut addrs = Vec::new();
    let mut line = String::new();
    while addrs.len() < 2 {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut lines, &mut line).unwrap() > 0);
        if let Some(rest) = line.split(" listening on ").nth(1) {
            addrs.push(
                rest.split(" -> ")
                    .next()
                    .unwrap()
                    .parse::<SocketAddr>()
                    .unwrap(),
            );
        }
    }
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
    let pid = child.id();
    let fds0 = fds(pid);
    let mut c = TcpStream::connect(addrs[0]).unwrap();
    c.write_all(b"hello").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The host vanishes while the client waits for its answer: from now
    // on nothing comes back, not even an RST. Keepalive notices.
    let gone = ns.sh("nft add table inet gone && nft add chain inet gone in '{ type filter hook input priority 0; policy drop; }'");
    assert!(gone.status.success(), "{gone:?}");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = Instant::now();
    let (_, err) = read_to_end(&mut c);
    let waited = t.elapsed();
    let other = echo_round_trip(addrs[1]);
    let left = fds_settle(pid, fds0);
    signal(pid, libc::SIGTERM);
    let _ = child.wait();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
    assert!(
        waited < Duration::from_secs(15),
        "given up after {waited:?}"
    );
    assert!(other < Duration::from_millis(500));
    assert!(left <= fds0, "descriptors {fds0} -> {left}");
}

#[test]
fn a_reader_that_pauses_longer_than_the_peer_timeout_keeps_its_connection() {
    // The attack on fidelity: TCP_USER_TIMEOUT on the relay's sockets made
    // Linux (>= 5.11) abort a connection whose reader kept its window
    // closed for longer than the timeout while answering every probe. A
    // direct connection stays open (RFC 1122 4.2.2.17): so must this one,
    // whichever side pauses.
    const SIZE: usize = 16 << 20;
    const PAUSE: Duration = Duration::from_secs(5);
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (down_addr, up_addr) = (down.local_addr().unwrap(), up.local_addr().unwrap());
    let p = Proxy::start_env(
        "proxy",
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &down_addr.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &up_addr.to_string(),
        ],
        &[("NETCHAOS_PEER_TIMEOUT", "1s")],
    );
    // Server → client, the client pausing.
    let sender = std::thread::spawn(move || {
        let (mut s, _) = down.accept().unwrap();
        s.set_write_timeout(Some(PAUSE * 4)).unwrap();
        s.write_all(&vec![b'd'; SIZE])
    });
    // Client → server, the server pausing.
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = up.accept().unwrap();
        std::thread::sleep(PAUSE);
        s.set_read_timeout(Some(PAUSE * 4)).unwrap();
        read_to_end(&mut s)
    });
    let mut reader = TcpStream::connect(p.addrs[0]).unwrap();
    let download = std::thread::spawn(move || {
        std::thread::sleep(PAUSE);
        reader.set_read_timeout(Some(PAUSE * 4)).unwrap();
        read_to_end(&mut reader)
    });
    let mut writer = TcpStream::connect(p.addrs[1]).unwrap();
    writer.set_write_timeout(Some(PAUSE * 4)).unwrap();
    let wrote = writer
        .write_all(&vec![b'u'; SIZE])
        .and_then(|_| writer.shutdown(Shutdown::Write));
    assert!(wrote.is_ok(), "the client's upload failed: {wrote:?}");
    let (got, err) = download.join().unwrap();
    assert!(err.is_none(), "the client's download failed: {err:?}");
    assert_eq!(got.len(), SIZE);
    assert!(sender.join().unwrap().is_ok());
    let (received, err) = receiver.join().unwrap();
    assert!(err.is_none(), "the server's read failed: {err:?}");
    assert_eq!(received.len(), SIZE);
    drop(p);
}

#[test]
fn at_the_connection_limit_new_clients_are_refused_at_connect() {
    let echo = Server::echo("127.0.0.1:0");
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &echo.addr.to_string(),
        "--max-connections",
        "3",
        "--api",
        "127.0.0.1:0",
    ]);
    let open: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(p.addr()).unwrap())
        .collect();
    // Until the relay holds all three (the kernel accepts before it does).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, m) = http("GET", &format!("{}/metrics", p.url()), None, &[]);
        let m = m.as_str().unwrap_or_default().to_string();
        if m.lines()
            .any(|l| l.starts_with("netchaos_connections_open{") && l.ends_with(" 3"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "three connections never open:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..5 {
        let e = TcpStream::connect_timeout(&p.addr(), Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    }
    // The open ones are untouched.
    for mut c in &open {
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
    }
    drop(open);
    // Room again: served as usual.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&p.addr(), Duration::from_secs(2)) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("still refused: {e}\n{}", p.stderr()),
        }
    }
    assert!(echo_round_trip(p.addr()) < Duration::from_millis(500));
    let (_, m) = http("GET", &format!("{}/metrics", p.url()), None, &[]);
    assert!(
        m.as_str()
            .unwrap()
            .contains("netchaos_listener_pauses_total{reason=\"limit\"}"),
        "{m}"
    );
    let (status, err) = p.stop();
    assert!(status.success());
    assert!(
        err.contains("listeners paused (new connections refused): limit"),
        "{err}"
    );
    assert!(err.contains("--max-connections"), "logged: {err}");
}

#[test]
fn under_run_the_limit_refuses_at_the_syn() {
    if missing_tool("python3") || missing_tool("nft") || missing_tool("ip") {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    let script = format!(
        "import socket, time\n\
         a = socket.create_connection(('127.0.0.1', {port}))\n\
         time.sleep(0.3)\n\
         try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\n\
         except ConnectionRefusedError:\n    print('refused')\n\
         a.sendall(b'x'); print(a.recv(1))",
        port = echo.addr.port()
    );
    let out = Command::new(BIN)
        .args([
            "run",
            "--max-connections",
            "1",
            "--",
            "python3",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout, "refused\nb'x'\n", "{stderr}");
    assert!(
        stderr.contains("connections refused at the SYN (limit): 1"),
        "{stderr}"
    );
}

#[test]
fn out_of_descriptors_new_clients_are_refused_and_netchaos_lives_on() {
    if missing_tool("prlimit") {
        return;
    }
    let echo = Server::echo("127.0.0.1:0");
    // 48 descriptors in all, and no connection limit to stop earlier:
    // accept or the upstream dial runs out of descriptors first.
    let mut child = Command::new("prlimit")
        .args(["--nofile=48:48", BIN, "proxy", "--listen", "127.0.0.1:0"])
        .args([
            "--upstream",
            &echo.addr.to_string(),
            "--max-connections",
            "10000",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr: SocketAddr = loop {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut lines, &mut line).unwrap() > 0,
            "netchaos exited"
        );
        if let Some(rest) = line.split(" listening on ").nth(1) {
            break rest.split(" -> ").next().unwrap().parse().unwrap();
        }
    };
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = lines.read_to_string(&mut s);
        s
    });
    let mut open = Vec::new();
    let (mut refused, mut reset) = (0, 0);
    for _ in 0..60 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(mut c) => {
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = c.write_all(b"x");
                let mut b = [0u8; 1];
                match c.read(&mut b) {
                    Ok(1) => open.push(c),
                    _ => reset += 1, // accepted, but no descriptor left to dial
                }
            }
            // Completed by the kernel while queued, then reset when the
            // listener paused without a descriptor to accept it with: the
            // reset can reach the socket before connect() returns.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => reset += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
                refused += 1;
            }
        }
    }
    assert!(open.len() >= 5, "served {}", open.len());
    assert!(refused + reset > 0, "the limit was never reached");
    // Still alive, and the connections it holds still work.
    assert!(child.try_wait().unwrap().is_none(), "netchaos exited");
    for c in &mut open {
        c.write_all(b"y").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"y");
    }
    // With descriptors free again, new clients are served.
    drop(open);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok_and(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            c.write_all(b"z").is_ok() && c.read_exact(&mut b).is_ok()
        });
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(child.id(), libc::SIGTERM);
    let status = child.wait().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    eprintln!("refused {refused}, reset {reset}");
}

#[test]
fn a_server_streaming_into_a_connection_netchaos_closed_learns_at_its_next_write() {
    // The client's side is closed by a fault (limit_data). A client that
    // closes its socket makes the server's next write fail (an RST); the
    // relay read and dropped what the server sent for 2 s instead, so a
    // server streaming an answer (tokens, events) went on that long.
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up_addr = up.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = up.accept().unwrap();
        let chunk = [b's'; 4096];
        // Bounded: 20 s of writes at most.
        for _ in 0..4000 {
            if let Err(e) = s.write_all(&chunk) {
                return Some((Instant::now(), e.kind()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    });
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up_addr.to_string(),
        "--fault",
        "limit_data:bytes=64KiB",
    ]);
    let mut c = TcpStream::connect(p.addrs[0]).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (got, err) = read_to_end(&mut c);
    let closed = Instant::now();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.len(), 64 << 10, "the first 64 KiB, then the close");
    drop(c);
    let (failed, kind) = server
        .join()
        .unwrap()
        .expect("the server's writes never failed");
    let after = failed.saturating_duration_since(closed);
    assert!(
        matches!(kind, ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        "{kind:?}"
    );
    // The relay's old linger was 2 s; a write fails within a few ms now.
    assert!(
        after < Duration::from_millis(1500),
        "the server wrote on for {after:?} after the client's close"
    );
}
