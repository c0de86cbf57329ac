//! `netchaos proxy` without faults, and with faults that must not lose a
//! byte: exact forwarding, half-close, RST mirroring both ways, IPv6,
//! listener errors and clean shutdown.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use support::*;

const BIG: usize = 64 << 20;

/// Sends BIG bytes through `addr` to an echo server while reading the echo
/// back concurrently; returns the checksums sent and received.
fn echo_transfer(addr: std::net::SocketAddr) -> (u64, u64, usize) {
    let mut s = connect(addr);
    let mut reader = s.try_clone().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut sum = Fnv::default();
        let mut total = 0usize;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    sum.update(&buf[..n]);
                    total += n;
                }
                Err(e) => panic!("read failed after {total} bytes: {e}"),
            }
        }
        (sum.0, total)
    });
    let mut sent = Fnv::default();
    let block = pattern(3, 1 << 20);
    for i in 0..BIG / block.len() {
        // Vary the blocks so that a reordering would change the checksum.
        let mut b = block.clone();
        b[0] = i as u8;
        sent.update(&b);
        s.write_all(&b).expect("write through netchaos");
    }
    s.shutdown(Shutdown::Write).unwrap();
    let (got, total) = receiver.join().unwrap();
    (sent.0, got, total)
}

fn exact_with(faults: &[&str]) {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
    for f in faults {
        args.extend(["--fault", f]);
    }
    let proxy = Proxy::start(&args);
    let (sent, got, total) = echo_transfer(proxy.addr());
    assert_eq!(total, BIG, "byte count through netchaos with {faults:?}");
    assert_eq!(sent, got, "checksum through netchaos with {faults:?}");
    let (status, err) = proxy.stop();
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!("{BIG} upstream")),
        "summary counts bytes:\n{err}"
    );
}

#[test]
fn forwards_64_mib_each_way_exactly_without_faults() {
    exact_with(&[]);
}

#[test]
fn forwards_64_mib_each_way_exactly_with_latency() {
    exact_with(&["latency:delay=2ms,jitter=1ms,stream=both"]);
}

#[test]
fn forwards_64_mib_each_way_exactly_with_bandwidth() {
    exact_with(&["bandwidth:rate=400MB/s,stream=both"]);
}

#[test]
fn forwards_64_mib_each_way_exactly_with_slicer() {
    exact_with(&["slicer:size=16KiB,size_variation=8KiB,stream=both"]);
}

#[test]
fn half_close_reaches_the_server_and_the_reply_still_arrives() {
    // The server replies only after the client's FIN.
    let server = Server::start("127.0.0.1:0", |mut s| {
        let (req, _) = read_to_end(&mut s);
        let _ = s.write_all(format!("got {} bytes", req.len()).as_bytes());
        let _ = s.shutdown(Shutdown::Write);
    });
    for faults in [&[][..], &["--fault", "latency:delay=0,stream=both"][..]] {
        let up = server.addr.to_string();
        let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
        args.extend_from_slice(faults);
        let proxy = Proxy::start(&args);
        let mut c = connect(proxy.addr());
        c.write_all(&[7u8; 1000]).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let (reply, err) = read_to_end(&mut c);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(reply, b"got 1000 bytes", "with {faults:?}");
    }
}

#[test]
fn client_rst_reaches_the_server_as_rst() {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start("127.0.0.1:0", move |mut s| {
        let (_, err) = read_to_end(&mut s);
        let _ = tx.send(err.map(|e| e.kind()));
    });
    for faults in [&[][..], &["--fault", "latency:delay=0,stream=both"][..]] {
        let up = server.addr.to_string();
        let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
        args.extend_from_slice(faults);
        let proxy = Proxy::start(&args);
        let mut c = connect(proxy.addr());
        c.write_all(b"hello").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        set_linger_zero(&c);
        drop(c);
        let seen = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server saw the end");
        assert_eq!(
            seen,
            Some(ErrorKind::ConnectionReset),
            "server must see RST, not EOF, with {faults:?}"
        );
        drop(proxy);
    }
}

#[test]
fn server_rst_reaches_the_client_after_the_bytes_before_it() {
    let server = Server::start("127.0.0.1:0", |mut s| {
        s.write_all(&[1u8; 5000]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        set_linger_zero(&s);
    });
    for faults in [&[][..], &["--fault", "latency:delay=50ms,stream=both"][..]] {
        let up = server.addr.to_string();
        let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
        args.extend_from_slice(faults);
        let proxy = Proxy::start(&args);
        let mut c = connect(proxy.addr());
        let (data, err) = read_to_end(&mut c);
        assert_eq!(
            data.len(),
            5000,
            "bytes before the RST arrive first, with {faults:?}"
        );
        assert_eq!(
            err.map(|e| e.kind()),
            Some(ErrorKind::ConnectionReset),
            "client must see RST, not EOF"
        );
        drop(proxy);
    }
}

#[test]
fn unreachable_upstream_resets_the_client() {
    // A port with no listener: bind, note the port, close.
    let port = unused_port();
    let up = format!("127.0.0.1:{port}");
    let events = tempfile::NamedTempFile::new().unwrap();
    let ev = events.path().to_str().unwrap();
    let proxy = Proxy::start(&["--events", ev, "--listen", "127.0.0.1:0", "--upstream", &up]);
    // The relay accepted before it knew; it resets the client as soon as
    // the dial fails (possibly before connect() even returned).
    let err = match std::net::TcpStream::connect_timeout(&proxy.addr(), Duration::from_secs(5)) {
        Ok(mut c) => {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            read_to_end(&mut c).1
        }
        Err(e) => Some(e),
    };
    assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::ConnectionReset));
    let (_, stderr) = proxy.stop();
    assert!(
        stderr.contains("dial_refused 1"),
        "summary counts the relay error:\n{stderr}"
    );
    let events = read_events(events.path());
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "error" && e["kind"] == "dial_refused")
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "close" && e["outcome"] == "dial_failed")
    );
}

#[test]
fn ipv6_loopback_works() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        assert!(!in_ci(), "IPv6 loopback is required in CI");
        eprintln!("SKIPPED: no IPv6 loopback on this machine");
        return;
    }
    let echo = Server::echo("[::1]:0");
    let up = echo.addr.to_string();
    let proxy = Proxy::start(&[
        "--listen",
        "[::1]:0",
        "--upstream",
        &up,
        "--fault",
        "latency:delay=10ms",
    ]);
    assert!(proxy.addr().is_ipv6());
    let mut c = connect(proxy.addr());
    c.write_all(b"over v6").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (data, err) = read_to_end(&mut c);
    assert!(err.is_none());
    assert_eq!(data, b"over v6");
}

#[test]
fn a_busy_port_is_a_clear_error_and_nothing_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, _, err) = netchaos(&["proxy", "--listen", &addr, "--upstream", "127.0.0.1:9"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("cannot listen on {addr}: address already in use")),
        "{err}"
    );
    assert!(!err.contains("netchaos: ready"), "{err}");
}

#[test]
fn a_privileged_port_is_a_clear_error_for_unprivileged_users() {
    // As root, drop to nobody with setpriv; as a user, just try.
    let root = unsafe { libc::geteuid() } == 0;
    if root && missing_tool("setpriv") {
        return;
    }
    let mut cmd = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            BIN,
        ]);
        c
    } else {
        std::process::Command::new(BIN)
    };
    let out = cmd
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:81",
            "--upstream",
            "127.0.0.1:9",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE"),
        "{err}"
    );
}

#[test]
fn sigterm_shuts_down_cleanly_with_a_summary() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let proxy = Proxy::start(&[
        "--seed",
        "99",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "latency:delay=1ms",
    ]);
    let mut c = connect(proxy.addr());
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).unwrap();
    let started = Instant::now();
    let (status, err) = proxy.stop();
    assert!(status.success(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "drain is bounded"
    );
    assert!(err.contains("seed 99"), "{err}");
    assert!(err.contains("netchaos summary (seed 99"), "{err}");
    assert!(err.contains("connections: 1"), "{err}");
    assert!(err.contains("cli   latency"), "{err}");
}

#[test]
fn profile_proxies_and_rules_that_match_a_proxy_by_name() {
    let echo = Server::echo("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[proxies]]
name = "slow"
listen = "127.0.0.1:0"
upstream = "{up}"

[[proxies]]
name = "fast"
listen = "127.0.0.1:0"
upstream = "{up}"

[[rules]]
name = "only-slow"
match = {{ proxy = "slow" }}
  [[rules.faults]]
  type = "latency"
  delay = "300ms"
"#,
            up = echo.addr
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&["-p", path.to_str().unwrap()]);
    assert_eq!(proxy.addrs.len(), 2);
    let rtt = |addr| {
        let mut c = connect(addr);
        let t = Instant::now();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        t.elapsed()
    };
    let slow = rtt(proxy.addrs[0]);
    let fast = rtt(proxy.addrs[1]);
    assert!(slow >= Duration::from_millis(280), "slow proxy: {slow:?}");
    assert!(fast < Duration::from_millis(150), "fast proxy: {fast:?}");
}

#[test]
fn a_hostname_upstream_is_resolved_and_matched() {
    let echo = Server::echo("127.0.0.1:0");
    let up = format!("localhost:{}", echo.addr.port());
    let events = tempfile::NamedTempFile::new().unwrap();
    let ev = events.path().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        "[[rules]]\nname = \"by-name\"\nmatch = { dst = [\"localhost\"] }\n  [[rules.faults]]\n  type = \"latency\"\n  delay = \"1ms\"\n",
    )
    .unwrap();
    let proxy = Proxy::start(&[
        "--events",
        ev,
        "-p",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
    ]);
    let mut c = connect(proxy.addr());
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    drop(c);
    proxy.stop();
    let events = read_events(events.path());
    let fault = events
        .iter()
        .find(|e| e["event"] == "fault")
        .expect("a fault event");
    assert_eq!(fault["rule"], "by-name");
    assert_eq!(fault["host"], "localhost");
}

#[test]
fn a_slow_reader_still_gets_every_byte_in_order() {
    // The server drains slowly, so the relay's buffer and socket buffers fill
    // and it must wait for room without losing or reordering bytes.
    let (tx, rx) = std::sync::mpsc::channel();
    let server = Server::start("127.0.0.1:0", move |mut s| {
        let mut sum = Fnv::default();
        let mut total = 0usize;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    sum.update(&buf[..n]);
                    total += n;
                    if total < 4 << 20 {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
        }
        let _ = tx.send((sum.0, total));
    });
    let up = server.addr.to_string();
    let proxy = Proxy::start(&["--listen", "127.0.0.1:0", "--upstream", &up]);
    let mut c = connect(proxy.addr());
    let data = pattern(11, 16 << 20);
    c.write_all(&data).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut want = Fnv::default();
    want.update(&data);
    let (sum, total) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(total, data.len());
    assert_eq!(sum, want.0);
}

// Urgent data (MSG_OOB) helpers for the two tests below.

/// SIGSTOP now, SIGCONT when dropped (on a failure too).
struct Stopped(u32);
impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}
fn send_urgent(s: &std::net::TcpStream, bytes: &[u8]) {
    // SAFETY: send(2) on a live socket with a buffer and its length.
    let n = unsafe {
        libc::send(
            s.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_OOB,
        )
    };
    assert_eq!(n, bytes.len() as isize, "send MSG_OOB");
}
/// Whether `s`'s next read starts at the urgent mark (SIOCATMARK,
/// 0x8905 on x86_64 and aarch64; the libc crate lacks it for Linux).
fn at_mark(s: &std::net::TcpStream) -> bool {
    let mut at: libc::c_int = 0;
    // SAFETY: ioctl(2) on a live socket writing one c_int.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), 0x8905, &mut at) };
    r == 0 && at != 0
}
/// Waits (bounded) until `pid` is stopped, as SIGSTOP takes effect
/// asynchronously.
fn wait_stopped(pid: u32) {
    for _ in 0..1000 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("netchaos (pid {pid}) did not stop");
}
fn recv_urgent(s: &std::net::TcpStream) -> std::io::Result<u8> {
    let mut b = 0u8;
    // SAFETY: recv(2) on a live socket into one byte.
    let n = unsafe { libc::recv(s.as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_OOB) };
    if n == 1 {
        Ok(b)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Urgent data (`MSG_OOB`: telnet's Synch, FTP's ABOR). A read stops in
/// front of the urgent mark with bytes still queued behind it; the fast
/// path once took that short read for an emptied socket and stalled the
/// direction until the sender wrote again. It now carries the stream on,
/// and the urgent byte as urgent, as a direct connection does. A faulted
/// direction carries the stream; its urgent byte is dropped (what a
/// receiver without SO_OOBINLINE reads of it), which is not asserted.
#[test]
fn urgent_data_neither_stalls_the_stream_nor_loses_its_mark() {
    // Both ways: client -> server (a socket accepted from the listener)
    // and server -> client (one the relay dialled).
    let cases = [
        (&[][..], true),
        (&[][..], false),
        (&["--fault", "latency:delay=1ms,stream=both"][..], true),
    ];
    for (faults, upstream_bound) in cases {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up = upstream.local_addr().unwrap().to_string();
        let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", &up];
        args.extend_from_slice(faults);
        let proxy = Proxy::start(&args);
        let c = connect(proxy.addr());
        let (s, _) = upstream.accept().unwrap();
        let (mut from, mut to) = if upstream_bound { (c, s) } else { (s, c) };
        let case = format!("with {faults:?}, towards the upstream: {upstream_bound}");
        to.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        from.write_all(b"hi").unwrap();
        let mut hi = [0u8; 2];
        to.read_exact(&mut hi).unwrap();
        // Stopped, the relay finds it all queued at its next read: the
        // bytes before the mark, the urgent byte, the bytes after it.
        let stopped = Stopped(proxy.pid());
        signal(stopped.0, libc::SIGSTOP);
        wait_stopped(stopped.0);
        send_urgent(&from, b"abcX");
        from.write_all(b"def").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(stopped);
        let mut got = vec![0u8; 3];
        to.read_exact(&mut got).unwrap();
        if faults.is_empty() {
            // Reads stop at the mark: the urgent byte is there, out of
            // band, until a read passes it, and right after "abc".
            let deadline = Instant::now() + Duration::from_secs(10);
            let urgent = loop {
                match recv_urgent(&to) {
                    Ok(b) => {
                        assert!(
                            at_mark(&to),
                            "the mark is where the urgent byte was sent, {case}"
                        );
                        break Some(b);
                    }
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => break None,
                }
            };
            assert_eq!(
                urgent,
                Some(b'X'),
                "the urgent byte arrives as urgent, {case}"
            );
        }
        let mut rest = vec![0u8; 3];
        let r = to.read_exact(&mut rest);
        assert!(
            r.is_ok(),
            "the bytes after the urgent mark arrive ({r:?}), {case}"
        );
        got.extend(rest);
        assert_eq!(got, b"abcdef", "{case}");
        drop(proxy);
    }
}

/// An urgent byte read while bytes before it still wait for a destination
/// that is not reading (the fast path's bulk buffer): it goes out after
/// all of them, with the mark right behind the last.
#[test]
fn urgent_data_behind_a_backed_up_stream_keeps_its_place() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = upstream.local_addr().unwrap().to_string();
    let proxy = Proxy::start(&["--listen", "127.0.0.1:0", "--upstream", &up]);
    let mut c = connect(proxy.addr());
    let (mut s, _) = upstream.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Less than the relay and the server's socket take without a read.
    let filler = pattern(5, 768 << 10);
    let sender = {
        let filler = filler.clone();
        std::thread::spawn(move || {
            c.write_all(&filler).unwrap();
            // All of it acknowledged (bounded): the urgent byte then
            // travels with "abc", not in a later segment (a relay that has
            // read up to the mark before the byte is there meets it first,
            // and the kernel skips it: the documented loss).
            for _ in 0..1000 {
                let mut queued: libc::c_int = 0;
                // SAFETY: TIOCOUTQ on a live socket writes one c_int.
                unsafe { libc::ioctl(c.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
                if queued == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            send_urgent(&c, b"abcX");
            c.write_all(b"def").unwrap();
            c
        })
    };
    // The server reads nothing until the relay holds bytes for it.
    std::thread::sleep(Duration::from_millis(700));
    let mut got = vec![0u8; filler.len() + 3];
    s.read_exact(&mut got).unwrap();
    assert!(
        got[..filler.len()] == filler[..],
        "the stream before the mark"
    );
    assert_eq!(&got[filler.len()..], b"abc");
    let deadline = Instant::now() + Duration::from_secs(10);
    let urgent = loop {
        match recv_urgent(&s) {
            Ok(b) => break Some(b),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    assert_eq!(urgent, Some(b'X'), "the urgent byte arrives as urgent");
    assert!(at_mark(&s), "the mark is right after 'abc'");
    let mut rest = [0u8; 3];
    s.read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"def");
    drop(sender.join().unwrap());
}

#[test]
fn the_summary_counts_connections_and_says_which_ways() {
    let echo = Server::echo("127.0.0.1:0");
    let up = echo.addr.to_string();
    let proxy = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up,
        "--fault",
        "latency:delay=1ms,stream=both",
    ]);
    for _ in 0..3 {
        let mut c = connect(proxy.addr());
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
    }
    let (_, err) = proxy.stop();
    assert!(
        err.lines().any(|l| l.contains("cli")
            && l.contains("latency")
            && l.contains("3 connections (both ways)")),
        "{err}"
    );
}
