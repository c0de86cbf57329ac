//! Load for the HTTP-layer rows of `scripts/bench.sh`: a keep-alive HTTP
//! server (plaintext, and TLS with a CA of its own), and clients measuring
//! requests per second on one connection and the throughput of one large
//! response.
//!
//! ```text
//! http_bench server CA_OUT           print "PLAIN_ADDR TLS_ADDR", write the TLS
//!                                    server's CA to CA_OUT, serve until stdin closes
//! http_bench rps ADDR SECONDS [CA]   GET /small (100 bytes) over one keep-alive
//!                                    connection (TLS when CA is given): "req_per_sec p50_us"
//! http_bench get ADDR BYTES [CA]     one GET /big/BYTES: "gbit_per_sec"
//! http_bench answers ADDR SECONDS CONNS
//!                                    non-streamed Anthropic Messages requests of one
//!                                    token (due at once under --ttft 0) to `netchaos
//!                                    mock`, CONNS keep-alive connections at once:
//!                                    "answers_per_sec p50_us"
//! http_bench streams ADDR N TOKENS RATE
//!                                    N streamed answers at once, each of at most
//!                                    TOKENS tokens (the mock's answers run 24 to 96):
//!                                    "median_tokens_per_s worst_deviation_pct"
//! ```

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = || -> SocketAddr { args[1].parse().expect("ADDR") };
    let ca = |i: usize| args.get(i).map(|p| std::fs::read(p).expect("CA file"));
    match args.first().map(String::as_str) {
        Some("server") => server(&args[1]),
        Some("rps") => rps(addr(), args[2].parse().expect("SECONDS"), ca(3)),
        Some("get") => get(addr(), args[2].parse().expect("BYTES"), ca(3)),
        Some("answers") => answers(
            addr(),
            args[2].parse().expect("SECONDS"),
            args[3].parse().expect("CONNS"),
        ),
        Some("streams") => streams(
            addr(),
            args[2].parse().expect("N"),
            args[3].parse().expect("TOKENS"),
            args[4].parse().expect("RATE"),
        ),
        _ => {
            eprintln!(
                "usage: http_bench server CA_OUT | rps ADDR SECONDS [CA] | get ADDR BYTES [CA]"
            );
            std::process::exit(2);
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

fn server(ca_out: &str) {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: with rcgen's one default name for both, OpenSSL
    // (the HTTP peers' TLS) takes the leaf for self-signed.
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "http_bench CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(ca_out, ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
    leaf.distinguished_name = DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let leaf = leaf.signed_by(&key, &issuer).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap(),
    );
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").unwrap();
    println!(
        "{} {}",
        plain.local_addr().unwrap(),
        tls.local_addr().unwrap()
    );
    std::io::stdout().flush().unwrap();
    std::thread::spawn(move || accept(plain, None));
    std::thread::spawn(move || accept(tls, Some(config)));
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
}

fn accept(l: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) {
    for s in l.incoming().flatten() {
        let tls = tls.clone();
        std::thread::spawn(move || {
            let _ = s.set_nodelay(true);
            let conn: Box<dyn Conn> = match tls {
                Some(c) => Box::new(rustls::StreamOwned::new(
                    rustls::ServerConnection::new(c).unwrap(),
                    s,
                )),
                None => Box::new(s),
            };
            serve(conn);
        });
    }
}

/// Answers GET /small and GET /big/N on one connection until it closes.
fn serve(mut c: Box<dyn Conn>) {
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match c.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 4);
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        let n: usize = path
            .strip_prefix("/big/")
            .map_or(100, |n| n.parse().unwrap_or(0));
        let mut reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
        let first = n.min(chunk.len());
        reply.extend_from_slice(&chunk[..first]);
        if c.write_all(&reply).is_err() {
            return;
        }
        let mut left = n - first;
        while left > 0 {
            let k = left.min(chunk.len());
            if c.write_all(&chunk[..k]).is_err() {
                return;
            }
            left -= k;
        }
        let _ = c.flush();
    }
}

fn connect(addr: SocketAddr, ca: Option<Vec<u8>>) -> Box<dyn Conn> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let Some(ca) = ca else {
        return Box::new(s);
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::IpAddress(addr.ip().into());
    Box::new(rustls::StreamOwned::new(
        rustls::ClientConnection::new(Arc::new(config), name).unwrap(),
        s,
    ))
}

/// One response: reads its head and `content-length` body; the body size.
/// Anything but a 200 fails the measurement.
fn response(c: &mut dyn Conn, buf: &mut Vec<u8>, tmp: &mut [u8]) -> usize {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(buf.starts_with(b"HTTP/1.1 200"), "not a 200");
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let n: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            buf.drain(..end + 4);
            let mut got = buf.len().min(n);
            buf.drain(..got);
            while got < n {
                let k = c.read(tmp).unwrap();
                assert!(k > 0, "the connection closed mid-body");
                let used = k.min(n - got);
                got += used;
                buf.extend_from_slice(&tmp[used..k]);
            }
            return n;
        }
        let k = c.read(tmp).unwrap();
        assert!(k > 0, "the connection closed before a response");
        buf.extend_from_slice(&tmp[..k]);
    }
}

fn rps(addr: SocketAddr, secs: f64, ca: Option<Vec<u8>>) {
    let mut c = connect(addr, ca);
    let (mut buf, mut tmp) = (Vec::new(), vec![0u8; 64 * 1024]);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut times = Vec::new();
    let started = Instant::now();
    while Instant::now() < deadline {
        let t = Instant::now();
        c.write_all(b"GET /small HTTP/1.1\r\nHost: bench\r\n\r\n")
            .unwrap();
        c.flush().unwrap();
        response(c.as_mut(), &mut buf, &mut tmp);
        times.push(t.elapsed());
    }
    let rate = times.len() as f64 / started.elapsed().as_secs_f64();
    times.sort();
    println!(
        "{rate:.0} {:.1}",
        times[times.len() / 2].as_secs_f64() * 1e6
    );
}

fn get(addr: SocketAddr, bytes: usize, ca: Option<Vec<u8>>) {
    let mut c = connect(addr, ca);
    let (mut buf, mut tmp) = (Vec::new(), vec![0u8; 256 * 1024]);
    let t = Instant::now();
    c.write_all(format!("GET /big/{bytes} HTTP/1.1\r\nHost: bench\r\n\r\n").as_bytes())
        .unwrap();
    c.flush().unwrap();
    let n = response(c.as_mut(), &mut buf, &mut tmp);
    println!("{:.2}", n as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
}

/// A Messages request for `tokens` tokens, streamed or not.
fn messages(tokens: u32, stream: bool, n: usize) -> Vec<u8> {
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":{tokens},"stream":{stream},"messages":[{{"role":"user","content":"question {n}"}}]}}"#
    );
    format!(
        "POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn answers(addr: SocketAddr, secs: f64, conns: usize) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let workers: Vec<_> = (0..conns)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = connect(addr, None);
                let (mut buf, mut tmp) = (Vec::new(), vec![0u8; 64 * 1024]);
                let mut times = Vec::new();
                let mut n = w * 1_000_000;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    c.write_all(&messages(1, false, n)).unwrap();
                    c.flush().unwrap();
                    response(c.as_mut(), &mut buf, &mut tmp);
                    assert!(buf.is_empty(), "one answer per request");
                    times.push(t.elapsed());
                    n += 1;
                }
                times
            })
        })
        .collect();
    let mut times: Vec<Duration> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let rate = times.len() as f64 / started.elapsed().as_secs_f64();
    times.sort();
    println!(
        "{rate:.0} {:.1}",
        times[times.len() / 2].as_secs_f64() * 1e6
    );
}

fn streams(addr: SocketAddr, n: usize, tokens: u32, rate: f64) {
    let start = Arc::new(std::sync::Barrier::new(n));
    let workers: Vec<_> = (0..n)
        .map(|k| {
            let start = start.clone();
            std::thread::spawn(move || {
                let mut c = connect(addr, None);
                start.wait();
                c.write_all(&messages(tokens, true, k)).unwrap();
                c.flush().unwrap();
                // Each delta event's arrival; the stream ends at message_stop.
                let (mut seen, mut tmp) = (Vec::new(), vec![0u8; 16 * 1024]);
                let mut arrivals = Vec::new();
                // Whole lines only are looked at, each once.
                let mut scanned = 0;
                loop {
                    let got = c.read(&mut tmp).unwrap();
                    assert!(got > 0, "the stream ended early");
                    seen.extend_from_slice(&tmp[..got]);
                    if scanned == 0 {
                        assert!(seen.starts_with(b"HTTP/1.1 200"), "not a 200");
                    }
                    let end = seen.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                    let fresh = String::from_utf8_lossy(&seen[scanned.min(end)..end]).into_owned();
                    scanned = end;
                    let now = Instant::now();
                    arrivals.extend(fresh.matches("event: content_block_delta").map(|_| now));
                    if fresh.contains("event: message_stop") {
                        break;
                    }
                }
                let span = (arrivals[arrivals.len() - 1] - arrivals[0]).as_secs_f64();
                (arrivals.len() - 1) as f64 / span
            })
        })
        .collect();
    let mut rates: Vec<f64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    rates.sort_by(f64::total_cmp);
    let worst = rates
        .iter()
        .map(|r| (r - rate).abs() / rate * 100.0)
        .fold(0.0, f64::max);
    println!("{:.1} {worst:.1}", rates[rates.len() / 2]);
}
