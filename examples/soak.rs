//! The soak driver behind `scripts/soak.sh`: many concurrent clients
//! through `netchaos proxy` and then `netchaos run`, each connection on one
//! of several lanes (rules), with every byte checked.
//!
//! * `nd` — non-destructive faults that rotate through the control API
//!   while the load runs (latency, bandwidth, slicer, slow_close): every
//!   byte must come back, in order;
//! * `reset`, `close` — after exactly 24 KiB downstream the client must see
//!   an RST, or a clean end of stream, after exactly those bytes;
//! * `stall` — a 300 ms stall after 16 KiB, then everything;
//! * `loss` (under `run` only) — 2 % packet loss: everything, by
//!   retransmission;
//! * `plain` — no fault: 64-byte round trips, for the latency netchaos adds.
//!
//! The upstreams are echo servers on loopback in this process. Under
//! `run`, the clients are this program again, inside the namespace
//! (`soak clients ...`), reporting as JSON on stdout.
//!
//! ```text
//! soak drive --netchaos PATH [--minutes N] [--clients N]
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const AFTER: usize = 24 * 1024;
const STALL_AFTER: usize = 16 * 1024;
const STALL: Duration = Duration::from_millis(300);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    match args.first().map(String::as_str) {
        Some("drive") => drive(
            &flag("--netchaos").expect("--netchaos PATH"),
            flag("--minutes").map_or(5.0, |m| m.parse().expect("--minutes")),
            flag("--clients").map_or(24, |c| c.parse().expect("--clients")),
        ),
        Some("clients") => {
            // Inside `netchaos run`: lanes as name=port pairs.
            let secs: f64 = flag("--seconds").unwrap().parse().unwrap();
            let clients: usize = flag("--clients").unwrap().parse().unwrap();
            let lanes: Vec<(String, SocketAddr)> = flag("--lanes")
                .unwrap()
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect();
            // Let the driver see netchaos idle first.
            std::thread::sleep(Duration::from_secs(1));
            let r = load(&lanes, clients, Duration::from_secs_f64(secs));
            println!("{}", r.to_json());
            // Stay a moment, so that the driver measures netchaos with
            // every connection closed but before it exits.
            std::thread::sleep(Duration::from_secs(4));
        }
        _ => {
            eprintln!("usage: soak drive --netchaos PATH [--minutes N] [--clients N]");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------- data

/// The bytes of connection `seed`: xorshift64*, as a byte stream (reads
/// of any length continue where the last one stopped).
struct Stream {
    state: u64,
    word: [u8; 8],
    used: usize,
}

#[allow(non_snake_case)]
fn Stream(seed: u64) -> Stream {
    Stream {
        state: seed | 1,
        word: [0; 8],
        used: 8,
    }
}

impl Stream {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            if self.used == 8 {
                self.state ^= self.state >> 12;
                self.state ^= self.state << 25;
                self.state ^= self.state >> 27;
                self.word = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
                self.used = 0;
            }
            *b = self.word[self.used];
            self.used += 1;
        }
    }
}

// ---------------------------------------------------------------- servers

/// An echo server; its threads end when the process does.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if c.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = c.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

// ---------------------------------------------------------------- clients

#[derive(Default)]
struct Results {
    conns: AtomicU64,
    verified: AtomicU64,
    mismatches: AtomicU64,
    per_lane: Mutex<std::collections::BTreeMap<String, (u64, u64)>>,
    samples: Mutex<Vec<String>>,
    rtts_us: Mutex<Vec<u64>>,
}

impl Results {
    fn record(&self, lane: &str, ok: Result<u64, String>) {
        self.conns.fetch_add(1, Ordering::Relaxed);
        let mut per = self.per_lane.lock().unwrap();
        let e = per.entry(lane.to_string()).or_default();
        e.0 += 1;
        match ok {
            Ok(bytes) => {
                self.verified.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(why) => {
                e.1 += 1;
                self.mismatches.fetch_add(1, Ordering::Relaxed);
                let mut s = self.samples.lock().unwrap();
                if s.len() < 10 {
                    s.push(format!("{lane}: {why}"));
                }
            }
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "conns": self.conns.load(Ordering::Relaxed),
            "verified": self.verified.load(Ordering::Relaxed),
            "mismatches": self.mismatches.load(Ordering::Relaxed),
            "per_lane": self.per_lane.lock().unwrap().iter()
                .map(|(k, (n, m))| (k.clone(), json!([n, m]))).collect::<serde_json::Map<_, _>>(),
            "samples": *self.samples.lock().unwrap(),
            "rtts_us": *self.rtts_us.lock().unwrap(),
        })
    }
}

/// Runs the clients for `dur`; lanes by name. `plain` is the latency
/// probe, every other lane gets the workers in turn.
fn load(lanes: &[(String, SocketAddr)], clients: usize, dur: Duration) -> Arc<Results> {
    let results = Arc::new(Results::default());
    let deadline = Instant::now() + dur;
    let work: Vec<(String, SocketAddr)> = lanes
        .iter()
        .filter(|(n, _)| n != "plain")
        .cloned()
        .collect();
    let mut threads = Vec::new();
    for w in 0..clients {
        let (work, results) = (work.clone(), results.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while Instant::now() < deadline {
                let (lane, addr) = &work[(w + i as usize) % work.len()];
                let seed = ((w as u64) << 40) ^ i ^ 0x9e37_79b9;
                let size =
                    4096 + (seed.wrapping_mul(2_654_435_761) % (256 * 1024)) as usize + AFTER;
                results.record(lane, one_connection(lane, *addr, seed, size));
                i += 1;
            }
        }));
    }
    if let Some((_, addr)) = lanes.iter().find(|(n, _)| n == "plain") {
        let (addr, results) = (*addr, results.clone());
        threads.push(std::thread::spawn(move || {
            let rtts = probe(addr, deadline);
            results.rtts_us.lock().unwrap().extend(rtts);
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    results
}

/// 64-byte round trips on one connection, every 20 ms, until `deadline`.
fn probe(addr: SocketAddr, deadline: Instant) -> Vec<u64> {
    let mut out = Vec::new();
    let Ok(mut c) = TcpStream::connect(addr) else {
        return out;
    };
    let _ = c.set_nodelay(true);
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [7u8; 64];
    while Instant::now() < deadline {
        let t = Instant::now();
        if c.write_all(&buf).is_err() || c.read_exact(&mut buf).is_err() {
            break;
        }
        out.push(t.elapsed().as_micros() as u64);
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

/// One connection on `lane`: sends `size` bytes of stream `seed` and
/// checks what comes back against what the lane's fault says. Ok: the
/// bytes verified.
fn one_connection(lane: &str, addr: SocketAddr, seed: u64, size: usize) -> Result<u64, String> {
    let c = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut writer = c.try_clone().map_err(|e| e.to_string())?;
    // The writer's own error: an RST may be reported to whichever of the
    // two threads touches the socket first.
    let w = std::thread::spawn(move || -> Option<std::io::ErrorKind> {
        let mut s = Stream(seed);
        let mut buf = vec![0u8; 16 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len());
            s.fill(&mut buf[..n]);
            if let Err(e) = writer.write_all(&buf[..n]) {
                return Some(e.kind());
            }
            left -= n;
        }
        let _ = writer.shutdown(Shutdown::Write);
        None
    });
    let mut reader = c;
    let mut expect = Stream(seed);
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let mut want = vec![0u8; 64 * 1024];
    let mut longest_gap = Duration::ZERO;
    let mut last = Instant::now();
    let end = loop {
        match reader.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                longest_gap = longest_gap.max(last.elapsed());
                last = Instant::now();
                expect.fill(&mut want[..n]);
                if buf[..n] != want[..n] {
                    let _ = reader.shutdown(Shutdown::Both);
                    let _ = w.join();
                    return Err(format!("bytes differ within {got}..{}", got + n));
                }
                got += n;
            }
            Err(e) => break Some(e.kind()),
        }
    };
    let wrote = w.join().ok().flatten();
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
    let reset_seen = end == Some(ConnectionReset)
        || (end.is_none() && matches!(wrote, Some(ConnectionReset | BrokenPipe)));
    let ok = match lane {
        "reset" => got == AFTER && reset_seen,
        "close" => got == AFTER && end.is_none(),
        "stall" => got == size && end.is_none() && longest_gap >= STALL - Duration::from_millis(30),
        _ => got == size && end.is_none(),
    };
    if ok {
        Ok(got as u64)
    } else {
        Err(format!(
            "{got} of {size} bytes, then {end:?} (longest gap {longest_gap:?})"
        ))
    }
}

// ---------------------------------------------------------------- driver

fn profile(lanes: &[(&str, SocketAddr)], proxies: bool, loss: bool) -> String {
    let mut p = String::from("description = \"soak\"\n");
    let matcher = |name: &str, up: SocketAddr| {
        if proxies {
            format!("match = {{ proxy = [\"{name}\"] }}")
        } else {
            format!("match = {{ ports = [\"{}\"] }}", up.port())
        }
    };
    for (name, up) in lanes {
        if proxies {
            p.push_str(&format!(
                "[[proxies]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nupstream = \"{up}\"\n"
            ));
        }
    }
    for (name, up) in lanes {
        let fault = match *name {
            "reset" => format!("type = \"reset\"\nafter_bytes = {AFTER}"),
            "close" => format!("type = \"close\"\nafter_bytes = {AFTER}"),
            "stall" => format!(
                "type = \"stall\"\nafter_bytes = {STALL_AFTER}\nduration = \"{}ms\"\nthen = \"release\"",
                STALL.as_millis()
            ),
            "loss" if loss => "type = \"loss\"\npercent = 2".to_string(),
            // `nd` starts with latency; the rotation changes it.
            "nd" => "type = \"latency\"\ndelay = \"5ms\"".to_string(),
            _ => continue,
        };
        p.push_str(&format!(
            "[[rules]]\nname = \"{name}\"\n{}\n  [[rules.faults]]\n  {}\n",
            matcher(name, *up),
            fault.replace('\n', "\n  ")
        ));
    }
    p
}

/// The faults the `nd` lane goes through, as Toxiproxy toxics.
fn rotation() -> Vec<Value> {
    vec![
        json!({"name": "rot", "type": "latency", "stream": "downstream", "attributes": {"latency": 20, "jitter": 10}}),
        json!({"name": "rot", "type": "bandwidth", "stream": "downstream", "attributes": {"rate": 4000}}),
        json!({"name": "rot", "type": "slicer", "stream": "downstream", "attributes": {"average_size": 512, "size_variation": 256, "delay": 200}}),
        json!({"name": "rot", "type": "slow_close", "stream": "downstream", "attributes": {"delay": 50}}),
        json!({"name": "rot", "type": "latency", "stream": "upstream", "attributes": {"latency": 15}}),
    ]
}

fn rotate(api: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let api = api.to_string();
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut n = 0u64;
        let faults = rotation();
        while !stop.load(Ordering::SeqCst) {
            for _ in 0..50 {
                if stop.load(Ordering::SeqCst) {
                    return n;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // Remove whatever the lane has and put the next fault on.
            let toxics: Value = agent
                .get(&format!("{api}/proxies/nd/toxics"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(json!([]));
            for t in toxics.as_array().into_iter().flatten() {
                if let Some(name) = t["name"].as_str() {
                    let _ = agent
                        .delete(&format!("{api}/proxies/nd/toxics/{name}"))
                        .call();
                }
            }
            let next = &faults[n as usize % faults.len()];
            let _ = agent
                .post(&format!("{api}/proxies/nd/toxics"))
                .send(next.to_string());
            n += 1;
        }
        n
    })
}

/// netchaos's open descriptors and resident memory (KiB).
fn usage(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    if std::env::var_os("SOAK_DEBUG").is_some() {
        let mut kinds = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let l = std::fs::read_link(e.path())
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default();
            *kinds
                .entry(l.split(':').next().unwrap_or("").to_string())
                .or_insert(0) += 1;
        }
        eprintln!("pid {pid}: {kinds:?}");
        let _ = Command::new("ss").args(["-tanp"]).status();
    }
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    (fds, rss)
}

/// Starts netchaos; returns the child, its API URL and its listeners by
/// proxy name (from its announcements on stderr).
fn start(
    netchaos: &str,
    args: &[String],
    want_listeners: usize,
) -> (
    Child,
    String,
    Vec<(String, SocketAddr)>,
    std::io::BufReader<std::process::ChildStderr>,
) {
    let mut child = Command::new(netchaos)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start netchaos");
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let (mut api, mut listeners) = (String::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while (api.is_empty() || listeners.len() < want_listeners) && Instant::now() < deadline {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(rest) = line.split("control API on ").nth(1) {
            api = rest.split_whitespace().next().unwrap().to_string();
        }
        if let (Some(name), Some(rest)) = (
            line.split("proxy \"")
                .nth(1)
                .and_then(|r| r.split('"').next()),
            line.split(" listening on ").nth(1),
        ) {
            listeners.push((
                name.to_string(),
                rest.split(" -> ").next().unwrap().trim().parse().unwrap(),
            ));
        }
    }
    assert!(!api.is_empty(), "netchaos did not start its API");
    (child, api, listeners, err)
}

struct Phase {
    name: &'static str,
    results: Value,
    rotations: u64,
    start: (usize, u64),
    /// A third of the way into the load: the level it settles at.
    warm: (usize, u64),
    end: (usize, u64),
    direct_rtts: Vec<u64>,
}

fn drive(netchaos: &str, minutes: f64, clients: usize) {
    let names = ["nd", "reset", "close", "stall", "loss", "plain"];
    let ups: Vec<(&str, SocketAddr)> = names.iter().map(|n| (*n, echo_server())).collect();
    let plain_up = ups.iter().find(|(n, _)| *n == "plain").unwrap().1;
    if std::env::var_os("SOAK_DEBUG").is_some() {
        eprintln!("upstreams: {ups:?}");
    }
    let dir = std::env::temp_dir().join(format!("netchaos-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let half = Duration::from_secs_f64(minutes * 60.0 / 2.0);
    let mut phases = Vec::new();

    // Phase 1: netchaos proxy, one listener per lane (no loss: it needs
    // the namespace).
    {
        let lanes: Vec<(&str, SocketAddr)> =
            ups.iter().filter(|(n, _)| *n != "loss").cloned().collect();
        let prof = dir.join("proxy.toml");
        std::fs::write(&prof, profile(&lanes, true, false)).unwrap();
        let args: Vec<String> = [
            "proxy",
            "-q",
            "--api",
            "127.0.0.1:0",
            "-p",
            prof.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (mut child, api, listeners, err) = start(netchaos, &args, lanes.len());
        let drain = std::thread::spawn(move || {
            let mut err = err;
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(500));
        let start_usage = usage(pid);
        let warm = std::thread::spawn(move || {
            std::thread::sleep(half / 3);
            usage(pid)
        });
        let stop = Arc::new(AtomicBool::new(false));
        let rot = rotate(&format!("http://{api}"), stop.clone());
        let direct = std::thread::spawn(move || probe(plain_up, Instant::now() + half));
        let r = load(&listeners, clients, half);
        stop.store(true, Ordering::SeqCst);
        let rotations = rot.join().unwrap();
        let direct_rtts = direct.join().unwrap();
        std::thread::sleep(Duration::from_secs(3)); // drained
        let end_usage = usage(pid);
        terminate(pid);
        let _ = child.wait();
        let _ = drain.join();
        phases.push(Phase {
            name: "netchaos proxy",
            results: r.to_json(),
            rotations,
            start: start_usage,
            warm: warm.join().unwrap(),
            end: end_usage,
            direct_rtts,
        });
    }

    // Phase 2: netchaos run, the clients inside the namespace.
    {
        let prof = dir.join("run.toml");
        std::fs::write(&prof, profile(&ups, false, true)).unwrap();
        let me = std::env::current_exe().unwrap();
        let lanes_arg = ups
            .iter()
            .map(|(n, a)| format!("{n}={a}"))
            .collect::<Vec<_>>()
            .join(",");
        let args: Vec<String> = vec![
            "run".into(),
            "-q".into(),
            "--api".into(),
            "127.0.0.1:0".into(),
            "-p".into(),
            prof.to_str().unwrap().into(),
            "--".into(),
            me.to_str().unwrap().into(),
            "clients".into(),
            "--seconds".into(),
            half.as_secs_f64().to_string(),
            "--clients".into(),
            clients.to_string(),
            "--lanes".into(),
            lanes_arg,
        ];
        let (mut child, api, _, err) = start(netchaos, &args, 0);
        let drain = std::thread::spawn(move || {
            let mut err = err;
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(500));
        let start_usage = usage(pid);
        let warm = std::thread::spawn(move || {
            std::thread::sleep(half / 3);
            usage(pid)
        });
        let stop = Arc::new(AtomicBool::new(false));
        let rot = rotate(&format!("http://{api}"), stop.clone());
        let direct = std::thread::spawn(move || probe(plain_up, Instant::now() + half));
        let mut out = String::new();
        let _ = std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut out,
        );
        stop.store(true, Ordering::SeqCst);
        let rotations = rot.join().unwrap();
        let direct_rtts = direct.join().unwrap();
        // The clients are done and wait before exiting: measure netchaos
        // with every connection closed.
        std::thread::sleep(Duration::from_secs(3));
        let end_usage = usage(pid);
        let _ = child.wait();
        let log = drain.join().unwrap_or_default();
        if std::env::var_os("SOAK_DEBUG").is_some() {
            eprintln!("{log}");
        }
        phases.push(Phase {
            name: "netchaos run",
            results: serde_json::from_str(out.trim()).unwrap_or(
                json!({"conns": 0, "mismatches": 1, "samples": ["no report from the clients"]}),
            ),
            rotations,
            start: start_usage,
            warm: warm.join().unwrap(),
            end: end_usage,
            direct_rtts,
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    report(&phases, minutes, clients);
}

fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn report(phases: &[Phase], minutes: f64, clients: usize) {
    println!(
        "Soak: {minutes} min ({} min per phase), {clients} concurrent clients, on {}.\n",
        minutes / 2.0,
        host()
    );
    println!(
        "| phase | connections | bytes verified | mismatches | fault rotations | fds start / loaded / drained | RSS start / loaded / drained | RTT p50 direct / relayed | RTT p99 direct / relayed | p99 added |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut total_mismatches = 0;
    for ph in phases {
        let r = &ph.results;
        let mut relayed: Vec<u64> = r["rtts_us"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let mut direct = ph.direct_rtts.clone();
        let (d50, d99, r50, r99) = (
            pct(&mut direct, 0.5),
            pct(&mut direct, 0.99),
            pct(&mut relayed, 0.5),
            pct(&mut relayed, 0.99),
        );
        let mismatches = r["mismatches"].as_u64().unwrap_or(0);
        total_mismatches += mismatches;
        println!(
            "| {} | {} | {:.1} MiB | {} | {} | {} / {} / {} | {:.1} / {:.1} / {:.1} MiB | {} / {} µs | {} / {} µs | {} µs |",
            ph.name,
            r["conns"],
            r["verified"].as_u64().unwrap_or(0) as f64 / 1048576.0,
            mismatches,
            ph.rotations,
            ph.start.0,
            ph.warm.0,
            ph.end.0,
            ph.start.1 as f64 / 1024.0,
            ph.warm.1 as f64 / 1024.0,
            ph.end.1 as f64 / 1024.0,
            d50,
            r50,
            d99,
            r99,
            r99.saturating_sub(d99)
        );
    }
    println!();
    for ph in phases {
        let lanes = ph.results["per_lane"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {} ({} wrong)", v[0], v[1]))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        println!("* {}: connections by lane: {lanes}", ph.name);
        for s in ph.results["samples"].as_array().into_iter().flatten() {
            println!("  * mismatch: {}", s.as_str().unwrap_or(""));
        }
    }
    if total_mismatches > 0 {
        std::process::exit(1);
    }
}

fn host() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} CPUs, Linux {}", kernel.trim())
}
