//! `netchaos demo`: the faults hitting a real client, with nothing to
//! install. A small HTTP server runs inside this process; for each scenario
//! a real TCP client — a separate process wrapped by `netchaos run` where
//! the machine allows namespaces, else a client in this process behind
//! `netchaos proxy` — fetches a 64 KiB page from it with one fault switched
//! on, and a table shows what the client saw: time to connect, to the first
//! byte, in all, the bytes received and the outcome. The HTTPS rows send ten
//! requests over one pooled keep-alive connection (`run --tls`: the client
//! trusts the run's CA without being told), and show each request's status.
//! The DNS rows make the client resolve a name first, through the run's
//! DNS forwarder to a responder inside this process, so the time in name
//! resolution — and how it fails — has a column of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::{announce_seed, open_events, runtime};
use crate::cli::{DemoArgs, Global};
use crate::error::{Error, Result};
use crate::plan::Flow;
use crate::profile::build_plan;
use crate::relay::{self, Endpoint, Relay, RelayOptions, Target};
use crate::ruleset::RuleSet;

/// The page the built-in server sends.
const BODY_LEN: usize = 64 * 1024;
/// The client's read timeout: a read that waits this long gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The client gives name resolution this long (as curl's
/// `--connect-timeout` bounds it; many clients' connect timeouts do not).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// The name the DNS rows resolve; the demo's own responder answers it.
const DEMO_HOST: &str = "demo.netchaos.test";

struct Scenario {
    name: &'static str,
    fault: Option<&'static str>,
    /// Requests over one HTTPS keep-alive connection (the HTTP layer's
    /// rows); `None`: one plain GET on its own connection.
    pooled: Option<u32>,
    /// The client resolves [`DEMO_HOST`] before it connects.
    by_name: bool,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "healthy",
        fault: None,
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "latency",
        fault: Some("latency:delay=300ms"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "slow stream",
        fault: Some("bandwidth:rate=64KB/s"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "mid-stream reset",
        fault: Some("reset:after_bytes=16KiB"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "truncated",
        fault: Some("close:after_bytes=20000"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "stall (read timeout)",
        fault: Some("stall:after_bytes=0"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "canned 503",
        fault: Some("respond:status=503"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "slow connect",
        fault: Some("connect_delay:delay=1s"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "connect timeout",
        fault: Some("connect_timeout"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "refused",
        fault: Some("refuse"),
        pooled: None,
        by_name: false,
    },
    Scenario {
        name: "DNS: slow",
        fault: Some("dns_delay:delay=300ms"),
        pooled: None,
        by_name: true,
    },
    Scenario {
        name: "DNS: NXDOMAIN",
        fault: Some("dns_error:rcode=NXDOMAIN"),
        pooled: None,
        by_name: true,
    },
    Scenario {
        name: "DNS: SERVFAIL",
        fault: Some("dns_error:rcode=SERVFAIL"),
        pooled: None,
        by_name: true,
    },
    Scenario {
        name: "DNS: timeout",
        fault: Some("dns_timeout"),
        pooled: None,
        by_name: true,
    },
    Scenario {
        name: "HTTPS 429 at 30%",
        fault: Some("http_status:status=429,probability=0.3"),
        pooled: Some(POOLED),
        by_name: false,
    },
    Scenario {
        name: "HTTPS first 2 fail",
        fault: Some("http_status:status=503,first=2"),
        pooled: Some(POOLED),
        by_name: false,
    },
    Scenario {
        name: "HTTPS slow TTFB",
        fault: Some("http_delay:delay=300ms,every=3"),
        pooled: Some(POOLED),
        by_name: false,
    },
];

/// Requests per pooled row.
const POOLED: u32 = 10;
/// The pooled rows' page (small: the rows are about statuses).
const POOLED_LEN: usize = 4 * 1024;

impl Scenario {
    /// Connect faults act on the SYN: only under `netchaos run`.
    fn needs_run(&self) -> bool {
        self.fault.is_some_and(|f| {
            crate::profile::parse_fault_flag(f).is_ok_and(|s| s.kind.layer().needs_interception())
        })
    }
}

/// What the client saw.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Seen {
    /// Time spent resolving the server's name (the DNS rows).
    #[serde(default)]
    resolve: Option<Duration>,
    /// Time spent in connect(), whether it succeeded or not.
    connect: Option<Duration>,
    connected: bool,
    /// From the start to the first reply byte.
    first_byte: Option<Duration>,
    /// From connected to the end of reading.
    read: Option<Duration>,
    total: Duration,
    bytes: usize,
    outcome: String,
}

pub(super) fn run(g: &Global, args: &DemoArgs) -> Result<u8> {
    let chosen: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| s.name.contains(o.as_str())))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        return Err(Error::Usage(format!(
            "no scenario matches --only; scenarios are: {}",
            names.join(", ")
        )));
    }
    // The demo's files (its wrapped runs' logs, the resolver's
    // configuration, the HTTPS server's CA) go in a private directory of
    // its own (0700, a fresh random name), removed when it ends.
    let scratch = crate::outfile::private_dir("netchaos-demo-")
        .map_err(|e| Error::runtime(format!("cannot make a temporary directory: {e}")))?;
    let rt = runtime()?;
    rt.block_on(async {
        let server = start_server()
            .await
            .map_err(|e| Error::runtime(format!("cannot start the demo server: {e}")))?;
        let https = HttpsServer::start(scratch.path())
            .await
            .map_err(|e| Error::runtime(format!("cannot start the demo's HTTPS server: {e}")))?;
        let dns = DemoDns::start(server.ip(), scratch.path())
            .await
            .map_err(|e| Error::runtime(format!("cannot start the demo's DNS responder: {e}")))?;
        // The demo always leaves a report of its run (each wrapped
        // client's `netchaos run` writes a log of its own, in the private
        // directory): by default a fresh file of its own (0600, a random
        // name) in the temporary directory, never a fixed name there.
        let mut log = args.log.clone();
        if log.report.is_none() {
            let (_, path) = crate::outfile::private_file("netchaos-demo-report-", ".html")
                .and_then(|f| f.keep().map_err(|e| e.error))
                .map_err(|e| Error::runtime(format!("cannot make the report's file: {e}")))?;
            log.report = Some(path);
        }
        let recording = open_events(&log)?;
        let events = recording.events.clone();
        let children = ChildLogs::new(scratch.path());
        let seed = g.seed.unwrap_or_else(rand::random);
        announce_seed(seed);
        events.start(seed, "demo");
        let mode = if args.in_process { Mode::InProcess(None) } else { probe_run().await };
        println!(
            "netchaos demo: a real TCP client fetches a {} KiB page from a built-in HTTP server on {server},",
            BODY_LEN / 1024
        );
        match &mode {
            Mode::Wrapped(_) => println!(
                "once per fault, as a separate process wrapped by `netchaos run --fault FAULT -- netchaos demo-client`."
            ),
            Mode::InProcess(why) => {
                println!("once per fault, through `netchaos proxy`, in this process.");
                if let Some(why) = why {
                    println!("(note: `netchaos run` is not available here, so the client is not wrapped: {why})");
                }
            }
        }
        println!(
            "Client timeouts: resolve {}s, connect {}s, read {}s. The DNS rows resolve {DEMO_HOST} first.\n",
            RESOLVE_TIMEOUT.as_secs(),
            CONNECT_TIMEOUT.as_secs(),
            READ_TIMEOUT.as_secs()
        );
        println!(
            "{:<22} {:<40} {:>9} {:>9} {:>9} {:>11} {:>7}  outcome",
            "scenario", "fault", "resolve", "connect", "read", "first byte", "bytes"
        );
        println!("{}", "-".repeat(146));
        for s in chosen {
            let seen = match (&mode, s.pooled) {
                (Mode::Wrapped(exe), None) => {
                    let target = match s.by_name {
                        true => format!("{DEMO_HOST}:{}", server.port()),
                        false => server.to_string(),
                    };
                    let log = children.next();
                    fetch_wrapped(exe, seed, s.fault, &target, &dns, None, &log).await
                }
                (Mode::Wrapped(exe), Some(n)) => {
                    let target = https.addr.to_string();
                    let log = children.next();
                    fetch_wrapped(exe, seed, s.fault, &target, &dns, Some((n, &https.ca_file)), &log).await
                }
                (Mode::InProcess(_), _) if s.needs_run() => {
                    println!("{:<22} {:<40} (acts on the SYN: needs `netchaos run`)", s.name, s.fault.unwrap_or("-"));
                    continue;
                }
                (Mode::InProcess(_), None) => fetch_proxied(&events, seed, s.fault, server).await?,
                (Mode::InProcess(_), Some(n)) => fetch_proxied_tls(&events, seed, s.fault, &https, n).await?,
            };
            let connect = match (seen.connect, seen.connected) {
                (Some(d), false) => format!("{} ✗", ms(Some(d))),
                (d, _) => ms(d),
            };
            println!(
                "{:<22} {:<40} {:>9} {:>9} {:>9} {:>11} {:>7}  {}",
                s.name,
                s.fault.unwrap_or("-"),
                ms(seen.resolve),
                connect,
                ms(seen.read),
                ms(seen.first_byte),
                seen.bytes,
                seen.outcome
            );
        }
        println!("\nresolve: time in name resolution; connect: time in connect() (✗: it failed); read: from connected to the end of the reply.");
        println!();
        if matches!(mode, Mode::InProcess(_)) {
            eprint!("{}", events.summary(seed));
        } else {
            events.close();
        }
        let logs = children.written();
        // `--events FILE`: the scenarios' own runs follow the demo's line,
        // each from its own `start` line (its connections numbered anew).
        if let Some(file) = &args.log.events {
            append_logs(file, &logs);
        }
        let logs: Vec<&std::path::Path> = logs.iter().map(|p| p.as_path()).collect();
        if let Some(out) = recording.report(&logs) {
            println!("The report of this run (a timeline of every connection and fault): {}", out.display());
        }
        Ok(0)
    })
}

/// Appends the scenarios' event logs to the demo's own (closed by now).
fn append_logs(file: &std::path::Path, logs: &[std::path::PathBuf]) {
    let Ok(mut out) = std::fs::OpenOptions::new().append(true).open(file) else {
        tracing::warn!("cannot add the scenarios' events to {}", file.display());
        return;
    };
    for l in logs {
        if let Ok(mut log) = std::fs::File::open(l)
            && std::io::copy(&mut log, &mut out).is_err()
        {
            tracing::warn!("cannot add the scenarios' events to {}", file.display());
            return;
        }
    }
}

/// The event logs of the wrapped clients' runs, for the report: files in
/// the demo's private directory.
struct ChildLogs {
    dir: std::path::PathBuf,
    n: std::sync::atomic::AtomicUsize,
}

impl ChildLogs {
    fn new(dir: &std::path::Path) -> ChildLogs {
        ChildLogs {
            dir: dir.to_path_buf(),
            n: Default::default(),
        }
    }

    /// Where the next wrapped run writes its log.
    fn next(&self) -> std::path::PathBuf {
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dir.join(format!("{n:02}.jsonl"))
    }

    /// The logs the runs wrote.
    fn written(&self) -> Vec<std::path::PathBuf> {
        let n = self.n.load(std::sync::atomic::Ordering::Relaxed);
        (0..n)
            .map(|i| self.dir.join(format!("{i:02}.jsonl")))
            .filter(|p| p.exists())
            .collect()
    }
}

/// How the demo runs its client.
enum Mode {
    /// A separate process under `netchaos run` (this executable).
    Wrapped(std::path::PathBuf),
    /// In this process through an in-process proxy; why, if not by choice.
    InProcess(Option<String>),
}

/// Uses `netchaos run` when this machine allows it (namespaces, nft, ip).
async fn probe_run() -> Mode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Mode::InProcess(Some(format!("cannot find this executable: {e}"))),
    };
    let out = tokio::process::Command::new(&exe)
        .args(["-qq", "run", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => Mode::Wrapped(exe),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let line = err
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("it failed");
            Mode::InProcess(Some(
                line.trim_start_matches("netchaos: error: ").to_string(),
            ))
        }
        Err(e) => Mode::InProcess(Some(e.to_string())),
    }
}

/// One scenario with the client wrapped by `netchaos run` (`pooled`: its
/// requests, over HTTPS under `--tls` with the demo server's CA trusted
/// upstream).
async fn fetch_wrapped(
    exe: &std::path::Path,
    seed: u64,
    fault: Option<&str>,
    target: &str,
    dns: &DemoDns,
    pooled: Option<(u32, &std::path::Path)>,
    log: &std::path::Path,
) -> Seen {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args([
        "-qq",
        "--seed",
        &seed.to_string(),
        "run",
        "--drain",
        "200ms",
    ]);
    cmd.arg("--events").arg(log);
    if let Some(f) = fault {
        cmd.args(["--fault", f]);
    }
    if let Some((_, ca)) = pooled {
        cmd.arg("--tls").arg("--upstream-ca").arg(ca);
    }
    cmd.arg("--resolv-conf").arg(&dns.resolv_conf);
    // glibc's resolver would wait 5 s, twice; 3 s, twice, is still well
    // past the client's own 2 s (so the DNS timeout row is the client's
    // timeout, never glibc's giving up first), and the row stays short.
    cmd.env("RES_OPTIONS", "timeout:3 attempts:2");
    cmd.arg("--").arg(exe).args(["demo-client", target]);
    if let Some((n, _)) = pooled {
        cmd.args(["--pooled", &n.to_string()]);
    }
    cmd.stdin(std::process::Stdio::null());
    let failed = |outcome: String| Seen {
        outcome,
        ..Seen::default()
    };
    match cmd.output().await {
        Ok(o) => serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
            failed(format!(
                "the wrapped client failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }),
        Err(e) => failed(format!("cannot run netchaos: {e}")),
    }
}

/// One scenario through a relay in this process.
async fn fetch_proxied(
    events: &Arc<crate::events::Events>,
    seed: u64,
    fault: Option<&str>,
    server: SocketAddr,
) -> Result<Seen> {
    let faults: Vec<String> = fault.iter().map(|f| f.to_string()).collect();
    let plan = Arc::new(build_plan(&[], &faults, Some(seed))?);
    let relay = Relay::new(
        Arc::new(RuleSet::from_plan(&plan)),
        events.clone(),
        RelayOptions::default(),
    );
    let listener = relay::bind("127.0.0.1:0".parse().expect("literal"))
        .map_err(|e| Error::Runtime(e.into()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Runtime(e.into()))?;
    relay.serve(
        listener,
        Endpoint::new("demo", Target::Fixed(server.to_string()), Flow::Outbound),
    );
    let seen = fetch(addr).await;
    relay.shutdown(Duration::from_millis(100)).await;
    Ok(seen)
}

/// One pooled HTTPS scenario through a relay in this process: TLS served
/// to the client with the relay's CA, and spoken to the demo server.
async fn fetch_proxied_tls(
    events: &Arc<crate::events::Events>,
    seed: u64,
    fault: Option<&str>,
    https: &HttpsServer,
    n: u32,
) -> Result<Seen> {
    let faults: Vec<String> = fault.iter().map(|f| f.to_string()).collect();
    let plan = Arc::new(build_plan(&[], &faults, Some(seed))?);
    let tls = crate::tls::Tls::new(
        crate::tls::Authority::generate().map_err(Error::runtime)?,
        &[("the demo CA".into(), https.ca_pem.clone().into_bytes())],
        None,
    )
    .map_err(Error::runtime)?;
    let roots = vec![tls.authority().cert_der().clone()];
    let opts = RelayOptions {
        tls: Some(Arc::new(tls)),
        ..RelayOptions::default()
    };
    let relay = Relay::new(Arc::new(RuleSet::from_plan(&plan)), events.clone(), opts);
    let listener = relay::bind("127.0.0.1:0".parse().expect("literal"))
        .map_err(|e| Error::Runtime(e.into()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Runtime(e.into()))?;
    let ep = Endpoint::new(
        "demo-https",
        Target::Fixed(https.addr.to_string()),
        Flow::Outbound,
    )
    .with_tls(relay::EndpointTls {
        serve: true,
        upstream: Some(https.addr.ip().to_string()),
    });
    relay.serve(listener, ep);
    let seen = fetch_pooled(addr, n, crate::tls::client_trusting(&roots)).await;
    relay.shutdown(Duration::from_millis(100)).await;
    Ok(seen)
}

/// `netchaos demo-client ADDR [--pooled N]`: the demo's client as its own
/// process; prints what it saw as one JSON line.
pub(super) fn client(target: &str, pooled: Option<u32>) -> Result<u8> {
    let (addr, resolve) = match target.parse::<SocketAddr>() {
        Ok(a) => (Ok(a), None),
        Err(_) if target.contains(':') => {
            let t0 = std::time::Instant::now();
            let r = resolve_first(target);
            (r, Some(t0.elapsed()))
        }
        Err(_) => {
            return Err(Error::Usage(format!(
                "demo-client: expected an address like 127.0.0.1:8080 or host:port, got {target:?}"
            )));
        }
    };
    let rt = runtime()?;
    let seen = match (addr, pooled) {
        (Err(why), _) => Seen {
            resolve,
            total: resolve.unwrap_or_default(),
            outcome: why,
            ..Seen::default()
        },
        // The host's trust store: under `run --tls`, it holds the run's CA.
        (Ok(addr), Some(n)) => rt.block_on(fetch_pooled(addr, n, crate::tls::client_trusting(&[]))),
        (Ok(addr), None) => Seen {
            resolve,
            ..rt.block_on(fetch(addr))
        },
    };
    println!(
        "{}",
        serde_json::to_string(&seen).map_err(|e| Error::runtime(e.to_string()))?
    );
    Ok(0)
}

/// Resolves `host:port` with the system's resolver (getaddrinfo), giving
/// up after [`RESOLVE_TIMEOUT`] as a client with a resolve timeout does;
/// the error says how resolution failed.
fn resolve_first(target: &str) -> std::result::Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let (tx, rx) = std::sync::mpsc::channel();
    let t = target.to_string();
    // A detached thread: getaddrinfo cannot be cancelled, and the process
    // exits without waiting for it.
    std::thread::spawn(move || {
        let _ = tx.send(t.to_socket_addrs().map(|mut a| a.next()));
    });
    match rx.recv_timeout(RESOLVE_TIMEOUT) {
        Ok(Ok(Some(a))) => Ok(a),
        Ok(Ok(None)) => Err("resolve failed: no address".into()),
        Ok(Err(e)) => Err(format!(
            "resolve failed: {}",
            e.to_string()
                .trim_start_matches("failed to lookup address information: ")
        )),
        Err(_) => Err(format!(
            "resolve timeout: no answer for {}s",
            RESOLVE_TIMEOUT.as_secs()
        )),
    }
}

/// The demo's DNS responder on loopback: [`DEMO_HOST`] is the demo
/// server's address (A), without an IPv6 one; every other name NXDOMAIN.
/// Wrapped clients reach it through the run's forwarder (`--resolv-conf`,
/// a file in the demo's private directory `dir`).
struct DemoDns {
    resolv_conf: std::path::PathBuf,
}

impl DemoDns {
    async fn start(ip: std::net::IpAddr, dir: &std::path::Path) -> std::io::Result<DemoDns> {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
        let port = sock.local_addr()?.port();
        let resolv_conf = dir.join("resolv.conf");
        std::fs::write(&resolv_conf, format!("nameserver 127.0.0.1:{port}\n"))?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1500];
            while let Ok((n, from)) = sock.recv_from(&mut buf).await {
                if let Some(reply) = demo_answer(&buf[..n], ip) {
                    let _ = sock.send_to(&reply, from).await;
                }
            }
        });
        Ok(DemoDns { resolv_conf })
    }
}

fn demo_answer(query: &[u8], ip: std::net::IpAddr) -> Option<Vec<u8>> {
    use crate::dns::decide::{Made, Query};
    use crate::fault::dns_error::Rcode;
    let q = Query::parse(query)?;
    let made = match (q.name == DEMO_HOST, q.qtype, ip) {
        (true, 1, std::net::IpAddr::V4(_)) => Made::Addresses {
            addrs: vec![ip],
            ttl: 5,
        },
        (true, _, _) => Made::Addresses {
            addrs: Vec::new(),
            ttl: 5,
        },
        (false, _, _) => Made::Error(Rcode::NxDomain),
    };
    crate::dns::reply::build(query, &made)
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    })
}

/// The built-in upstream: answers every request with a 64 KiB page.
async fn start_server() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let mut reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {BODY_LEN}\r\nConnection: close\r\n\r\n"
                )
                .into_bytes();
                reply.extend((0..BODY_LEN).map(|i| b'a' + (i % 26) as u8));
                if sock.write_all(&reply).await.is_ok() {
                    let _ = sock.shutdown().await;
                    // Wait for the client's close so that our close is clean.
                    let _ = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf)).await;
                }
            });
        }
    });
    Ok(addr)
}

/// The demo's HTTPS server: keep-alive, a 4 KiB page per request, with a
/// certificate from a CA of its own (written to a file for `--upstream-ca`
/// in the demo's private directory `dir`).
struct HttpsServer {
    addr: SocketAddr,
    ca_pem: String,
    ca_file: std::path::PathBuf,
}

impl HttpsServer {
    async fn start(dir: &std::path::Path) -> std::io::Result<HttpsServer> {
        let ca = crate::tls::Authority::generate().map_err(std::io::Error::other)?;
        let config = crate::tls::serving(&ca, "127.0.0.1").map_err(std::io::Error::other)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.cert_pem())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = sock.set_nodelay(true);
                    if let Ok(mut s) = acceptor.accept(sock).await {
                        serve_keep_alive(&mut s).await;
                    }
                });
            }
        });
        Ok(HttpsServer {
            addr,
            ca_pem: ca.cert_pem().to_string(),
            ca_file,
        })
    }
}

async fn serve_keep_alive<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(s: &mut S) {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {POOLED_LEN}\r\n\r\n"
    )
    .into_bytes();
    reply.extend((0..POOLED_LEN).map(|i| b'a' + (i % 26) as u8));
    loop {
        while let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            req.drain(..end + 4);
            if s.write_all(&reply).await.is_err() {
                return;
            }
        }
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
}

/// `n` GETs over one HTTPS keep-alive connection; the outcome lists each
/// response's status.
async fn fetch_pooled(addr: SocketAddr, n: u32, config: Arc<rustls::ClientConfig>) -> Seen {
    let t0 = Instant::now();
    let mut seen = Seen::default();
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            seen.outcome = format!("connect failed: {e}");
            return seen;
        }
        Err(_) => {
            seen.outcome = "connect timeout".into();
            return seen;
        }
    };
    seen.connect = Some(t0.elapsed());
    seen.connected = true;
    let t_connected = Instant::now();
    let _ = tcp.set_nodelay(true);
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut s = match tokio::time::timeout(
        READ_TIMEOUT,
        tokio_rustls::TlsConnector::from(config).connect(name, tcp),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            seen.outcome = format!("TLS failed: {e}");
            return seen;
        }
        Err(_) => {
            seen.outcome = "TLS handshake timeout".into();
            return seen;
        }
    };
    let mut statuses = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let ending = 'requests: loop {
        if statuses.len() == n as usize {
            break String::new();
        }
        let asked = Instant::now();
        if s.write_all(b"GET /demo HTTP/1.1\r\nHost: demo\r\n\r\n")
            .await
            .is_err()
        {
            break "write failed".into();
        }
        // One response: its head, then content-length bytes.
        let mut want: Option<usize> = None;
        loop {
            if want.is_none()
                && let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n")
            {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let status = head.split_whitespace().nth(1).unwrap_or("?").to_string();
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                seen.first_byte.get_or_insert(t0.elapsed());
                // A slow answer shows its wait.
                let waited = asked.elapsed();
                statuses.push(if waited > Duration::from_millis(100) {
                    format!("{status}({})", ms(Some(waited)).replace(' ', ""))
                } else {
                    status
                });
                buf.drain(..end + 4);
                want = Some(len);
            }
            if let Some(len) = want
                && buf.len() >= len
            {
                buf.drain(..len);
                seen.bytes += len;
                continue 'requests;
            }
            match tokio::time::timeout(READ_TIMEOUT, s.read(&mut chunk)).await {
                Err(_) => break 'requests "read timeout".into(),
                Ok(Ok(0)) => break 'requests "the connection closed".into(),
                Ok(Err(e)) => break 'requests format!("read error: {e}"),
                Ok(Ok(k)) => buf.extend_from_slice(&chunk[..k]),
            }
        }
    };
    seen.read = Some(t_connected.elapsed());
    seen.total = t0.elapsed();
    seen.outcome = format!(
        "{} on one connection: {}",
        if ending.is_empty() {
            format!("{n} requests")
        } else {
            format!("{ending} after {} requests", statuses.len())
        },
        statuses.join(" ")
    );
    seen
}

/// A plain HTTP/1.1 GET with connect and read timeouts, timing each phase.
async fn fetch(addr: SocketAddr) -> Seen {
    let t0 = Instant::now();
    let mut seen = Seen::default();
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
    seen.connect = Some(t0.elapsed());
    let mut sock = match connected {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            seen.total = t0.elapsed();
            seen.outcome = format!("connect failed: {e}");
            return seen;
        }
        Err(_) => {
            seen.total = t0.elapsed();
            seen.outcome = format!(
                "connect timeout: no answer to the SYN for {}s",
                CONNECT_TIMEOUT.as_secs()
            );
            return seen;
        }
    };
    seen.connected = true;
    let t_connected = Instant::now();
    let _ = sock.set_nodelay(true);
    if let Err(e) = sock
        .write_all(b"GET /demo HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
        .await
    {
        seen.total = t0.elapsed();
        seen.outcome = format!("write failed: {e}");
        return seen;
    }
    let mut data = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let ending = loop {
        match tokio::time::timeout(READ_TIMEOUT, sock.read(&mut buf)).await {
            Err(_) => break format!("read timeout: no data for {}s", READ_TIMEOUT.as_secs()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                break "reset (ECONNRESET)".to_string();
            }
            Ok(Err(e)) => break format!("read error: {e}"),
            Ok(Ok(0)) => break String::new(),
            Ok(Ok(n)) => {
                seen.first_byte.get_or_insert(t0.elapsed());
                data.extend_from_slice(&buf[..n]);
            }
        }
    };
    seen.read = Some(t_connected.elapsed());
    seen.total = t0.elapsed();
    seen.bytes = data.len();
    seen.outcome = classify(&data, ending);
    seen
}

/// Names the outcome from the bytes received and how reading ended.
fn classify(data: &[u8], ending: String) -> String {
    let head_end = data
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    let Some(head_end) = head_end else {
        return if ending.is_empty() {
            "closed before a reply".into()
        } else {
            format!("{ending} before a reply")
        };
    };
    let head = String::from_utf8_lossy(&data[..head_end]);
    let status = head.split_whitespace().nth(1).unwrap_or("?").to_string();
    let length: Option<usize> = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().ok())
        })
        .flatten();
    let body = data.len() - head_end;
    match (ending.is_empty(), length) {
        (false, _) => format!("{ending} after {body} body bytes"),
        (true, Some(n)) if body < n => {
            format!("truncated: {body} of {n} body bytes, then a clean FIN")
        }
        (true, _) if status == "200" => "ok (HTTP 200, complete)".into(),
        (true, _) => format!("HTTP {status} from netchaos (upstream never contacted)"),
    }
}
