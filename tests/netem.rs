//! `netchaos netem`: the exact tc commands for each combination of options
//! (golden), real shaping with tbf on a veth in a throwaway namespace, the
//! refusal to touch a qdisc netchaos did not create, and the message when
//! the kernel lacks sch_netem.

mod support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

fn dry(args: &[&str]) -> String {
    let mut full = vec!["netem", "apply", "--dry-run"];
    full.extend_from_slice(args);
    let (code, out, err) = netchaos(&full);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

#[test]
fn dry_run_prints_the_exact_commands() {
    assert_eq!(
        dry(&[
            "--dev",
            "eth0",
            "--delay",
            "100ms",
            "--jitter",
            "10ms",
            "--correlation",
            "25",
            "--distribution",
            "pareto"
        ]),
        "tc qdisc add dev eth0 root handle 4e43: netem delay 100000us 10000us 25% distribution pareto\n"
    );
    assert_eq!(
        dry(&[
            "--dev",
            "eth0",
            "--loss",
            "2%",
            "--duplicate",
            "1",
            "--corrupt",
            "0.5",
            "--limit",
            "500"
        ]),
        "tc qdisc add dev eth0 root handle 4e43: netem loss 2% duplicate 1% corrupt 0.5% limit 500\n"
    );
    assert_eq!(
        dry(&[
            "--dev",
            "eth0",
            "--delay",
            "10ms",
            "--reorder",
            "25",
            "--gap",
            "5",
            "--seed",
            "42"
        ]),
        "tc qdisc add dev eth0 root handle 4e43: netem delay 10000us reorder 25% gap 5 seed 42\n"
    );
    assert_eq!(
        dry(&["--dev", "eth0", "--rate", "8mbit"]),
        "tc qdisc add dev eth0 root handle 4e43: tbf rate 8000000bit burst 16384 latency 50ms\n"
    );
    assert_eq!(
        dry(&["--dev", "eth0", "--delay", "5ms", "--rate", "1mbit"]),
        "tc qdisc add dev eth0 root handle 4e43: netem delay 5000us rate 1000000bit\n"
    );
    let filtered = dry(&[
        "--dev",
        "eth0",
        "--loss",
        "5",
        "--dst",
        "10.1.0.0/16",
        "--dst",
        "fd00::1",
        "--sport",
        "8443",
    ]);
    assert_eq!(
        filtered,
        "tc qdisc add dev eth0 root handle 4e43: prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n\
         tc qdisc add dev eth0 parent 4e43:4 handle 4e44: netem loss 5%\n\
         tc filter add dev eth0 parent 4e43: protocol ip prio 1 u32 match ip dst 10.1.0.0/16 match ip sport 8443 0xffff flowid 4e43:4\n\
         tc filter add dev eth0 parent 4e43: protocol ipv6 prio 2 u32 match ip6 dst fd00::1/128 match ip6 sport 8443 0xffff flowid 4e43:4\n"
    );
    let htb = dry(&["--dev", "eth0", "--rate", "1mbit", "--dport", "80"]);
    assert!(
        htb.starts_with("tc qdisc add dev eth0 root handle 4e43: htb default 1\n"),
        "{htb}"
    );
    assert!(
        htb.contains("protocol ip prio 1 u32 match ip dport 80 0xffff flowid 4e43:2"),
        "{htb}"
    );
    let ingress = dry(&["--dev", "eth0", "--ingress", "--delay", "1ms"]);
    assert!(
        ingress.starts_with("ip link add ncifb7a25a404 type ifb\n"),
        "{ingress}"
    );
    assert!(
        ingress.ends_with("tc qdisc add dev ncifb7a25a404 root handle 4e43: netem delay 1000us\n"),
        "{ingress}"
    );
}

#[test]
fn impossible_options_exit_2() {
    for (args, want) in [
        (&["--dev", "eth0"][..], "nothing to apply"),
        (
            &["--dev", "eth0", "--jitter", "5ms"][..],
            "--jitter needs --delay",
        ),
        (
            &["--dev", "eth0", "--delay", "5ms", "--gap", "2"][..],
            "--gap needs --reorder",
        ),
        (&["--dev", "eth0", "--loss", "101"][..], "percentage"),
        (
            &[
                "--dev",
                "eth0",
                "--delay",
                "5ms",
                "--jitter",
                "1ms",
                "--distribution",
                "weird",
            ][..],
            "--distribution",
        ),
        (&["--loss", "1"][..], "--dev is required"),
    ] {
        let mut full = vec!["netem", "apply", "--dry-run"];
        full.extend_from_slice(args);
        let (code, _, err) = netchaos(&full);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err}");
    }
}

fn kernel_has_netem() -> bool {
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", "tc qdisc add dev lo root netem delay 1ms"])
        .output()
        .unwrap();
    out.status.success()
}

/// Sends `bytes` from the host to a sink inside `ns`; returns the rate in
/// bytes per second.
fn transfer(ns: &TestNetns, bytes: usize) -> f64 {
    let port = 18_000 + (std::process::id() % 1000) as u16;
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(format!(
            "import socket\nl=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             l.bind(('{}', {port})); l.listen(); print('up', flush=True)\nc,_=l.accept()\n\
             while c.recv(1<<16): pass\nc.close()",
            ns.ns_ip
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = [0u8; 3];
    sink.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
    let mut c = std::net::TcpStream::connect((ns.ns_ip, port)).unwrap();
    let block = vec![7u8; 64 * 1024];
    let t = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        c.write_all(&block).unwrap();
        sent += block.len();
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = sink.wait();
    sent as f64 / t.elapsed().as_secs_f64()
}

#[test]
fn rate_shapes_for_real_with_tbf_and_clear_removes_it() {
    let Some(ns) = TestNetns::new() else { return };
    if missing_tool("tc") || missing_tool("python3") {
        return;
    }
    let dev = ns.host_if.as_str();
    let (code, _, err) = netchaos(&["netem", "apply", "--dev", dev, "--rate", "4mbit"]);
    assert_eq!(code, 0, "{err}");
    let rate = transfer(&ns, 1_500_000);
    // 4 mbit = 500 kB/s; the socket buffers absorb a little at the start.
    assert!(
        (400_000.0..650_000.0).contains(&rate),
        "{rate:.0} B/s through a 4mbit tbf"
    );
    let (_, out, _) = netchaos(&["netem", "show", "--dev", dev]);
    assert!(out.contains("netchaos qdisc tbf 4e43: root"), "{out}");
    let (code, _, err) = netchaos(&["netem", "clear", "--dev", dev]);
    assert_eq!(code, 0, "{err}");
    let qd = Command::new("tc")
        .args(["qdisc", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&qd.stdout).contains("4e43"),
        "cleared"
    );
    let (code, _, err) = netchaos(&["netem", "clear", "--dev", dev]);
    assert_eq!(code, 0, "a second clear is a no-op: {err}");
    assert!(err.contains("nothing of netchaos's"), "{err}");
    assert!(transfer(&ns, 1_500_000) > 2_000_000.0, "unshaped again");
}

#[test]
fn a_foreign_root_qdisc_is_never_replaced() {
    let Some(ns) = TestNetns::new() else { return };
    let dev = ns.host_if.as_str();
    let out = Command::new("tc")
        .args(["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let (code, _, err) = netchaos(&["netem", "apply", "--dev", dev, "--rate", "1mbit"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("already has a root qdisc (htb 1:) that netchaos did not create"),
        "{err}"
    );
    let (code, _, _) = netchaos(&["netem", "clear", "--dev", dev]);
    assert_eq!(code, 0);
    let qd = Command::new("tc")
        .args(["qdisc", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&qd.stdout).contains("qdisc htb 1: root"),
        "clear left the foreign qdisc alone"
    );
}

#[test]
fn delay_needs_sch_netem_and_says_so_or_is_measured() {
    let Some(ns) = TestNetns::new() else { return };
    let dev = ns.host_if.as_str();
    let (code, _, err) = netchaos(&["netem", "apply", "--dev", dev, "--delay", "200ms"]);
    if !kernel_has_netem() {
        eprintln!(
            "sch_netem is absent on this kernel: checking the message (skipped: measuring the delay)"
        );
        assert_eq!(code, 1);
        assert!(
            err.contains("no netem qdisc (module sch_netem)") && err.contains("modprobe sch_netem"),
            "{err}"
        );
        assert!(err.contains("netchaos run"), "names the alternative: {err}");
        let qd = Command::new("tc")
            .args(["qdisc", "show", "dev", dev])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&qd.stdout).contains("4e43"),
            "nothing half-applied"
        );
        return;
    }
    assert_eq!(code, 0, "{err}");
    let out = Command::new("ping")
        .args(["-c", "3", "-i", "0.2", &ns.ns_ip.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let avg: f64 = text
        .rsplit("= ")
        .next()
        .unwrap()
        .split('/')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(avg >= 190.0, "ping {avg} ms with 200 ms of netem delay");
    netchaos(&["netem", "clear", "--dev", dev]);
}

#[test]
fn ingress_shaping_goes_through_an_ifb_and_is_cleared() {
    let Some(ns) = TestNetns::new() else { return };
    let dev = ns.host_if.as_str();
    let (code, _, err) = netchaos(&[
        "netem",
        "apply",
        "--dev",
        dev,
        "--ingress",
        "--rate",
        "2mbit",
    ]);
    if code != 0 && err.contains("module ifb") {
        eprintln!("SKIPPED (kernel feature absent): ifb");
        return;
    }
    assert_eq!(code, 0, "{err}");
    // netchaos names its ifb `ncifb` + an FNV-1a hash of the device name.
    let mut h = Fnv::default();
    h.update(dev.as_bytes());
    let ifb = format!("ncifb{:08x}", h.0 as u32);
    assert!(
        Command::new("ip")
            .args(["link", "show", &ifb])
            .output()
            .unwrap()
            .status
            .success()
    );
    let (code, _, err) = netchaos(&["netem", "clear", "--dev", dev]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !Command::new("ip")
            .args(["link", "show", &ifb])
            .output()
            .unwrap()
            .status
            .success(),
        "ifb removed"
    );
}

#[test]
fn a_profile_can_carry_the_netem_settings() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("host.toml");
    std::fs::write(&p, "description = \"slow host\"\n[netem]\ndev = \"eth9\"\ndelay = \"40ms\"\nloss = 1\nrate = \"1mbit\"\n").unwrap();
    let out = dry(&["-p", p.to_str().unwrap()]);
    assert_eq!(
        out,
        "tc qdisc add dev eth9 root handle 4e43: netem delay 40000us loss 1% rate 1000000bit\n"
    );
    let out = dry(&["-p", p.to_str().unwrap(), "--dev", "eth1", "--delay", "1ms"]);
    assert!(
        out.starts_with("tc qdisc add dev eth1 root handle 4e43: netem delay 1000us loss 1%"),
        "flags win: {out}"
    );
    std::fs::write(&p, "[netem]\ndev = \"eth0\"\njitter = \"1ms\"\n").unwrap();
    let (code, _, err) = netchaos(&["netem", "apply", "--dry-run", "-p", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("jitter needs delay"), "{err}");
    let _ = Duration::ZERO;
}
