//! Cleanup under signals: SIGINT or SIGTERM at a random moment (seeded, so
//! a failure replays) during `run`, `attach`, `run --in-place` and
//! `netem apply` leaves no table, qdisc, namespace or process behind.
//! (SIGKILL cannot be handled; `netchaos clean` covers it, see attach.rs.)

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A small seeded generator for the delays (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

const ROUNDS: usize = 8;

fn root() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: cleanup under signals is tested as root");
        return false;
    }
    !(missing_tool("nft") || missing_tool("ip") || missing_tool("tc"))
}

/// Starts `cmd`, waits `delay`, sends `sig` (alternately SIGINT and
/// SIGTERM), and waits (bounded) for it to exit; returns the exit code
/// (or 128+signal) and stderr.
fn interrupt(mut cmd: Command, delay: Duration, sig: i32) -> (i32, String) {
    let mut child: Child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    signal(child.id(), sig);
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running 20 s after signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn sig_for(round: usize) -> i32 {
    if round % 2 == 0 {
        libc::SIGINT
    } else {
        libc::SIGTERM
    }
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker)
                .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
        })
        .collect()
}

fn tables_in(ns: &TestNetns) -> String {
    let out = ns.sh("nft list tables; iptables -w -t mangle -S 2>/dev/null | grep -v '^-P'");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn run_leaves_no_process_or_namespace() {
    if !root() {
        return;
    }
    let mut rng = Rng(0x5eed_0001);
    for round in 0..ROUNDS {
        // A marker unique to this round finds netchaos, its agent and the
        // command (the agent is a fork of netchaos: same command line).
        let marker = format!("31.{}{round}", std::process::id());
        let mut cmd = Command::new(BIN);
        cmd.args([
            "run",
            "--fault",
            "latency:delay=1ms",
            "--",
            "sleep",
            &marker,
        ]);
        let delay = Duration::from_millis(rng.below(400));
        let (_, err) = interrupt(cmd, delay, sig_for(round));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = processes_with(&marker);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round} ({delay:?}): left running: {left:?}\n{err}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn attach_leaves_no_table() {
    if !root() {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    let path = format!("/run/netns/{}", ns.name);
    let before = tables_in(&ns);
    let mut rng = Rng(0x5eed_0002);
    for round in 0..ROUNDS {
        let mut cmd = Command::new(BIN);
        cmd.args(["attach", "--netns", &path, "--fault", "latency:delay=1ms"]);
        let delay = Duration::from_millis(rng.below(300));
        let (code, err) = interrupt(cmd, delay, sig_for(round));
        let left = tables_in(&ns);
        assert_eq!(
            left, before,
            "round {round} ({delay:?}, exit {code}):\n{err}"
        );
    }
}

#[test]
fn run_in_place_leaves_no_table_or_process() {
    if !root() {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    let before = tables_in(&ns);
    let mut rng = Rng(0x5eed_0003);
    for round in 0..ROUNDS {
        let marker = format!("32.{}{round}", std::process::id());
        // `ip netns exec` execs netchaos itself, so the signal reaches it.
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.name, BIN, "run", "--in-place"]);
        cmd.args(["--fault", "latency:delay=1ms", "--", "sleep", &marker]);
        let delay = Duration::from_millis(rng.below(300));
        let (code, err) = interrupt(cmd, delay, sig_for(round));
        let left = tables_in(&ns);
        assert_eq!(
            left, before,
            "round {round} ({delay:?}, exit {code}):\n{err}"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !processes_with(&marker).is_empty() {
            assert!(
                Instant::now() < deadline,
                "round {round}: {:?}",
                processes_with(&marker)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn netem_apply_is_all_or_nothing_under_signals() {
    if !root() {
        return;
    }
    let Some(ns) = TestNetns::new() else { return };
    let dev = ns.ns_if.clone();
    let qdiscs = |ns: &TestNetns| {
        let out = ns.sh(&format!(
            "tc qdisc show; tc filter show dev {dev}; tc filter show dev {dev} ingress; ip -o link show | grep -c ncifb || true"
        ));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = qdiscs(&ns);
    let mut rng = Rng(0x5eed_0004);
    let mut interrupted = 0;
    for round in 0..ROUNDS * 2 {
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns", "exec", &ns.name, BIN, "netem", "apply", "--dev", &dev,
        ]);
        // Several tc steps each: a filtered htb, or an ifb for ingress.
        if round % 2 == 0 {
            cmd.args(["--rate", "10mbit", "--dst", "10.0.0.0/8", "--dport", "80"]);
        } else {
            cmd.args(["--rate", "10mbit", "--ingress"]);
        }
        let delay = Duration::from_millis(rng.below(40));
        let (code, err) = interrupt(cmd, delay, sig_for(round));
        let now = qdiscs(&ns);
        if code == 0 {
            // Finished before the signal: all of it is there; clear it.
            assert!(
                now.contains("4e43:"),
                "round {round}: exit 0 but no setup:\n{now}\n{err}"
            );
            let cleared = ns.sh(&format!("{BIN} netem clear --dev {dev}"));
            assert!(cleared.status.success(), "{cleared:?}");
        } else {
            interrupted += 1;
            assert!(
                code == 130 || code == 143,
                "round {round}: exit {code}:\n{err}"
            );
        }
        assert_eq!(
            qdiscs(&ns),
            before,
            "round {round} ({delay:?}, exit {code}):\n{err}"
        );
    }
    eprintln!(
        "netem apply: {interrupted} of {} runs interrupted mid-way",
        ROUNDS * 2
    );
}
