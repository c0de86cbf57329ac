//! Measuring instruments for the VM checks, on plain std sockets: UDP
//! round trips, numbered UDP streams (loss, duplicates, reordering,
//! damage), TCP bulk transfers, and the client a wrapped command runs.
//! Every wait is bounded.

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

/// A UDP echo server on `addr`, for as long as the process lives.
pub fn udp_echo(addr: &str) -> SocketAddr {
    let s = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let local = s.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
    local
}

/// `n` UDP round trips to an echo server, one at a time; the times in
/// milliseconds of those answered within a second.
pub fn udp_rtts(to: SocketAddr, n: usize) -> Vec<f64> {
    let bind = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" };
    let s = UdpSocket::bind(bind).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..n as u32 {
        let t = Instant::now();
        s.send_to(&i.to_be_bytes(), to).unwrap();
        // A late answer to an earlier probe is not this one's.
        while let Ok((len, _)) = s.recv_from(&mut buf) {
            if len == 4 && buf[..4] == i.to_be_bytes() {
                out.push(t.elapsed().as_secs_f64() * 1e3);
                break;
            }
        }
    }
    out
}

/// What a receiver saw of a numbered UDP stream.
#[derive(Debug, Default)]
pub struct Stream {
    pub sent: usize,
    /// Distinct datagrams that arrived intact.
    pub received: usize,
    /// Arrivals of a number already seen.
    pub duplicates: usize,
    /// Datagrams that arrived before one sent earlier (each counted once).
    pub overtakers: usize,
    /// Arrivals whose payload was not what was sent.
    pub damaged: usize,
    /// Runs of consecutive datagrams that never arrived.
    pub loss_runs: usize,
}

impl Stream {
    /// Datagrams lost per run of losses.
    pub fn mean_loss_run(&self) -> f64 {
        (self.sent - self.received) as f64 / self.loss_runs.max(1) as f64
    }
    pub fn lost_pct(&self) -> f64 {
        100.0 * (self.sent - self.received) as f64 / self.sent as f64
    }
    pub fn pct(&self, k: usize) -> f64 {
        100.0 * k as f64 / self.sent as f64
    }
}

const PAYLOAD: usize = 200;

fn payload(i: u32) -> Vec<u8> {
    let mut p = i.to_be_bytes().to_vec();
    p.extend((0..PAYLOAD - 4).map(|k| (k as u32 ^ i.wrapping_mul(2_654_435_761)) as u8));
    p
}

/// Sends `n` numbered datagrams from a fresh socket to a receiver bound on
/// `to` (port 0 is fine), one every `gap` (none: as fast as possible), and
/// counts what arrived until `settle` passes without an arrival.
pub fn udp_stream(to: &str, n: usize, gap: Option<Duration>, settle: Duration) -> Stream {
    let rx = UdpSocket::bind(to).unwrap_or_else(|e| panic!("bind {to}: {e}"));
    // A burst must not be lost to the receiver's own buffer.
    let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(4 << 20);
    let dst = rx.local_addr().unwrap();
    let tx = UdpSocket::bind(if dst.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }).unwrap();
    let sender = thread::spawn(move || {
        for i in 0..n as u32 {
            let _ = tx.send_to(&payload(i), dst);
            if let Some(g) = gap {
                thread::sleep(g);
            }
        }
    });
    let mut seen = HashSet::new();
    let mut st = Stream {
        sent: n,
        ..Stream::default()
    };
    let mut order = Vec::new();
    let mut buf = [0u8; 2048];
    rx.set_read_timeout(Some(settle)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let Ok(len) = rx.recv(&mut buf) else {
            if sender.is_finished() {
                break;
            }
            continue;
        };
        if len < 4 {
            st.damaged += 1;
            continue;
        }
        let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
        if len != PAYLOAD || buf[..len] != payload(i)[..] {
            st.damaged += 1;
            continue;
        }
        if !seen.insert(i) {
            st.duplicates += 1;
            continue;
        }
        order.push(i);
    }
    let _ = sender.join();
    st.received = seen.len();
    st.loss_runs = (0..n as u32)
        .filter(|i| !seen.contains(i) && (*i == 0 || seen.contains(&(i - 1))))
        .count();
    // An overtaker is greater than something that arrived after it.
    let mut least_later = u32::MAX;
    for &i in order.iter().rev() {
        if i > least_later {
            st.overtakers += 1;
        }
        least_later = least_later.min(i);
    }
    st
}

/// A TCP server on `addr` that reads each connection to its end.
pub fn tcp_sink(addr: &str) -> SocketAddr {
    let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let local = l.local_addr().unwrap();
    thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                let _ = c.write_all(b"done");
            });
        }
    });
    local
}

/// Seconds to write `bytes` to a [`tcp_sink`] and have it confirm.
pub fn tcp_send(to: SocketAddr, bytes: usize) -> f64 {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(10)).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(120))).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let chunk = vec![7u8; 65536];
    let mut left = bytes;
    while left > 0 {
        let k = left.min(chunk.len());
        c.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut done = [0u8; 4];
    c.read_exact(&mut done).unwrap();
    t.elapsed().as_secs_f64()
}

/// A TCP server on `addr` that answers every connection with `bytes`
/// bytes, then closes (having read what the client sent: a close with
/// unread bytes would be a reset).
pub fn tcp_source(addr: &str, bytes: usize) -> SocketAddr {
    let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let local = l.local_addr().unwrap();
    thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let mut hello = [0u8; 6];
                let _ = c.read_exact(&mut hello);
                let chunk = vec![b'x'; 65536];
                let mut left = bytes;
                while left > 0 {
                    let k = left.min(chunk.len());
                    if c.write_all(&chunk[..k]).is_err() {
                        return;
                    }
                    left -= k;
                }
                let _ = c.shutdown(std::net::Shutdown::Write);
                let mut rest = [0u8; 1024];
                while matches!(c.read(&mut rest), Ok(n) if n > 0) {}
            });
        }
    });
    local
}

/// The percentile `p` (0–100) of `xs`.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((p / 100.0) * (v.len() - 1) as f64).round() as usize]
}

/// The standard deviation of `xs`.
pub fn stddev(xs: &[f64]) -> f64 {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt()
}

/// The standard deviation of `xs` read off its interquartile range (as
/// for a normal distribution: IQR / 1.349): a few round trips that an
/// emulated CPU starved by a busy host made late move it little, where
/// they would double [`stddev`].
pub fn robust_stddev(xs: &[f64]) -> f64 {
    (percentile(xs, 75.0) - percentile(xs, 25.0)) / 1.349
}

/// The wrapped client (`vm_guest client connect|read ADDR`): one line on
/// stdout saying what happened, in the words a test compares —
/// `connected MS`, `refused`, `timeout MS`, `reset after N`, `eof after N`,
/// `read-timeout after N`, or `error KIND`.
pub fn client(args: &[String]) -> i32 {
    let (Some(mode), Some(addr)) = (args.first(), args.get(1)) else {
        eprintln!("usage: vm_guest client connect|read ADDR [SECONDS]");
        return 2;
    };
    let addr: SocketAddr = addr.parse().expect("an address");
    let secs: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let t = Instant::now();
    let mut c = match TcpStream::connect_timeout(&addr, Duration::from_secs(secs)) {
        Ok(c) => c,
        Err(e) => {
            let ms = t.elapsed().as_millis();
            match e.kind() {
                ErrorKind::ConnectionRefused => println!("refused"),
                ErrorKind::TimedOut => println!("timeout {ms}"),
                _ => println!("error {e}"),
            }
            return 0;
        }
    };
    let connect_ms = t.elapsed().as_secs_f64() * 1e3;
    if mode == "connect" {
        println!("connected {}", t.elapsed().as_millis());
        return 0;
    }
    let _ = c.write_all(b"hello\n");
    c.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut n = 0usize;
    let mut buf = vec![0u8; 65536];
    loop {
        match c.read(&mut buf) {
            Ok(0) => {
                let total = t.elapsed().as_secs_f64() * 1e3;
                println!("eof after {n} connect_ms {connect_ms:.1} total_ms {total:.1}");
                return 0;
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                println!("reset after {n}");
                return 0;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                println!("read-timeout after {n}");
                return 0;
            }
            Err(e) => {
                println!("error {e}");
                return 0;
            }
        }
    }
}
