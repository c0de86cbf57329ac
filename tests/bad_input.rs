//! Every class of bad input, with its exact outcome: exit code 2 for bad
//! usage (nothing was started), 1 for a failure at run time, and a message
//! that names the problem and the fix. The "Bad input" table of
//! docs/errors.md lists the same cases. (Profile syntax is covered in
//! detail by cli.rs, missing kernel features by netem.rs, API tokens by
//! api.rs, stale tables by attach.rs, disabled user namespaces by run.rs;
//! here each class has at least one case, so the table is checked in one
//! place.)

mod support;

use std::process::Command;

use support::*;

fn profile(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(&p, text).unwrap();
    let s = p.to_str().unwrap().to_string();
    (dir, s)
}

/// netchaos with `args` and extra environment: (code, stdout, stderr).
fn netchaos_env(env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs netchaos with `args`; asserts the exit code and that stderr holds
/// every one of `want`, and no panic.
fn outcome(args: &[&str], code: i32, want: &[&str]) {
    let (got, _, err) = netchaos(args);
    assert_eq!(got, code, "{args:?}:\n{err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: expected {w:?} in:\n{err}");
    }
    assert!(!err.contains("panicked"), "{args:?}:\n{err}");
}

#[test]
fn bad_profiles_exit_2_and_say_where_and_what() {
    let (_d, malformed) = profile("[[rules]\n");
    outcome(&["check", &malformed], 2, &[":1:", "invalid TOML"]);
    let (_d, unknown) = profile("[[rules]]\nnmae = \"x\"\n");
    outcome(
        &["check", &unknown],
        2,
        &[":2:1:", "unknown key \"nmae\" (did you mean \"name\"?)"],
    );
    let (_d, units) =
        profile("[[rules]]\n[[rules.faults]]\ntype = \"bandwidth\"\nrate = \"fast\"\n");
    outcome(
        &["check", &units],
        2,
        &["bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\""],
    );
    let (_d, range) = profile("[[rules]]\n[[rules.faults]]\ntype = \"loss\"\npercent = 250\n");
    outcome(
        &["check", &range],
        2,
        &["loss.percent: expected a percentage between 0 and 100"],
    );
    outcome(
        &["check", "slow-netwrk"],
        2,
        &["no built-in profile named \"slow-netwrk\" (did you mean \"slow-network\"?)"],
    );
    outcome(
        &["run", "-p", "/nonexistent/profile.toml", "--", "true"],
        2,
        &["cannot read profile /nonexistent/profile.toml: No such file or directory"],
    );
}

#[test]
fn conflicting_and_impossible_options_exit_2() {
    outcome(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--fault",
            "reset:after_bytes=1,after=1s",
        ],
        2,
        &["either after_bytes or after"],
    );
    outcome(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--fault",
            "slicer:size=10,size_variation=20",
        ],
        2,
        &["size_variation (20) must be smaller than size (10)"],
    );
    outcome(
        &["run", "--in-place", "--expose", "8080", "--", "true"],
        2,
        &["'--in-place' cannot be used with '--expose"],
    );
    outcome(
        &["attach", "--pid", "1", "--netns", "/run/netns/x"],
        2,
        &["'--pid <PID>' cannot be used with '--netns <PATH>'"],
    );
    outcome(
        &["netem", "apply", "--dev", "lo", "--jitter", "5ms"],
        2,
        &["--jitter needs --delay"],
    );
    // The packet delay line queues `run`'s own namespace only.
    let me = std::process::id().to_string();
    outcome(
        &[
            "attach",
            "--pid",
            &me,
            "--fault",
            "packet_latency:delay=10ms",
        ],
        2,
        &["packet_latency works under `netchaos run` only, not `attach`"],
    );
    outcome(
        &[
            "run",
            "--in-place",
            "--fault",
            "packet_rate:rate=1mbit",
            "--",
            "true",
        ],
        2,
        &["packet_rate works under `netchaos run` only, not `run --in-place`"],
    );
    let (code, _, err) = netchaos_env(&[("NETCHAOS_THREADS", "0")], &["run", "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("NETCHAOS_THREADS must be a number of threads above 0, got \"0\""),
        "{err}"
    );
    outcome(
        &["check", "--fault", "packet_rate:rate=100bit"],
        2,
        &["packet_rate: rate must be at least 8kbit"],
    );
    outcome(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--max-connections",
            "0",
        ],
        2,
        &["invalid value '0' for '--max-connections <N>'"],
    );
    outcome(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--fault",
            "refuse",
        ],
        2,
        &["needs `netchaos run`"],
    );
    outcome(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--api",
            "0.0.0.0:0",
        ],
        2,
        &["not a loopback address", "--api-token"],
    );
    outcome(
        &["attach", "--netns", "/nonexistent/ns"],
        2,
        &["--netns /nonexistent/ns: no such file"],
    );
    outcome(
        &["clean", "--pid", "999999999"],
        2,
        &["--pid 999999999: there is no such process"],
    );
}

#[test]
fn runtime_failures_exit_1_and_say_what_to_do() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    outcome(
        &["proxy", "--listen", &addr, "--upstream", "127.0.0.1:9"],
        1,
        &[
            &format!("cannot listen on {addr}: address already in use"),
            "choose another port",
        ],
    );
    outcome(
        &[
            "proxy",
            "--events",
            "/nonexistent/dir/e.jsonl",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
        ],
        1,
        &["cannot write the event log: /nonexistent/dir/e.jsonl"],
    );
}

#[test]
fn a_missing_tool_is_named_with_its_package() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: needs root (netchaos run without a user namespace)");
        return;
    }
    if missing_tool("ip") {
        return;
    }
    if missing_tool("unshare") {
        return;
    }
    // A machine with `ip` but no `nft`: in a mount namespace of the test's,
    // /usr/sbin (where /sbin leads) holds only `ip`, and so does the PATH.
    let dir = tempfile::tempdir().unwrap();
    let ip = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v ip"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::fs::copy(ip.trim(), dir.path().join("ip")).unwrap();
    let d = dir.path().display();
    let script = format!(
        "mount --bind {d} /usr/sbin && mount --bind {d} /usr/local/sbin 2>/dev/null; \
         PATH={d} exec {BIN} run -- /bin/true"
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the `nft` command was not found (looked in ")
            && err.contains("/usr/sbin")
            && err.contains("): install nftables (apt-get install nftables)"),
        "{err}"
    );
}

#[test]
fn missing_privileges_exit_1_and_name_them() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: needs root to switch to an unprivileged user");
        return;
    }
    if missing_tool("setpriv") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("netchaos");
    std::fs::copy(BIN, &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(&bin)
            .args(args)
            .current_dir("/")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = nobody(&["netem", "apply", "--dev", "lo", "--rate", "1mbit"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("operation not permitted: shaping lo needs root or CAP_NET_ADMIN"),
        "{err}"
    );
    let (code, err) = nobody(&["clean", "--here"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("CAP_NET_ADMIN") && err.contains("Nothing was changed"),
        "{err}"
    );
    let (code, err) = nobody(&[
        "proxy",
        "--listen",
        "127.0.0.1:80",
        "--upstream",
        "127.0.0.1:9",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("permission denied (ports below 1024 need root"),
        "{err}"
    );
}

/// The inputs that were once accepted or misreported (issue: containment).
#[test]
fn inputs_once_accepted_or_misreported_now_say_what_is_wrong() {
    outcome(
        &[
            "run",
            "--resolv-conf",
            "/nonexistent/resolv.conf",
            "--",
            "true",
        ],
        2,
        &["--resolv-conf: cannot read /nonexistent/resolv.conf"],
    );
    let (code, _, err) = {
        let out = Command::new(BIN)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ])
            .env("NETCHAOS_PEER_TIMEOUT", "soon")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("NETCHAOS_PEER_TIMEOUT=\"soon\": expected a duration"),
        "{err}"
    );
    for (value, want) in [("1MiB", "at least 16MiB"), ("lots", "expected a size")] {
        let out = Command::new(BIN)
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ])
            .env("NETCHAOS_HTTP_MEMORY", value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("NETCHAOS_HTTP_MEMORY=\"{value}\"")) && err.contains(want),
            "{err}"
        );
    }
    outcome(
        &["check", "--fault", "latency:delay=100ms,buffer=100GiB"],
        2,
        &["buffer is at most 64MiB", "got 100GiB"],
    );
    let dir = tempfile::tempdir().unwrap();
    outcome(
        &["check", dir.path().to_str().unwrap()],
        2,
        &["is a directory; give a profile file"],
    );
    outcome(
        &["check", "--fault", "latency:delay=1ms,delay=2ms"],
        2,
        &["\"delay\" is given twice"],
    );
    if unsafe { libc::geteuid() } == 0 {
        outcome(
            &[
                "attach",
                "--netns",
                "/etc/hosts",
                "--fault",
                "latency:delay=1ms",
            ],
            2,
            &["/etc/hosts is not a namespace file"],
        );
    }
    // A write error on the event log is said once and counted.
    let out = Command::new(BIN)
        .args([
            "run",
            "--events",
            "/dev/full",
            "--fault",
            "latency:delay=1ms",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write the event log"), "{err}");
    assert_eq!(
        err.matches("cannot write the event log").count(),
        1,
        "{err}"
    );
    assert!(err.contains("line(s) could not be written"), "{err}");
}

#[test]
fn an_api_number_beyond_range_is_refused_as_go_refuses_it() {
    let p = Proxy::start_cmd("server", &["--api", "127.0.0.1:0"]);
    let url = p.url();
    let body = r#"{"name":"n","listen":"127.0.0.1:0","upstream":"127.0.0.1:1"}"#;
    assert_eq!(
        http("POST", &format!("{url}/proxies"), Some(body), &[]).0,
        201
    );
    let toxic = r#"{"type":"latency","attributes":{"latency":18446744073709551616}}"#;
    let (status, v) = http("POST", &format!("{url}/proxies/n/toxics"), Some(toxic), &[]);
    assert_eq!(status, 400, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.starts_with("bad request body: json: cannot unmarshal number")
            && e.ends_with("of type int64"),
        "{v}"
    );
}

#[test]
fn checking_many_rules_takes_time_in_proportion() {
    let dir = tempfile::tempdir().unwrap();
    let write = |n: usize| {
        let p = dir.path().join(format!("r{n}.toml"));
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[rules]]\nname = \"r{i}\"\nmatch = {{ ports = [\"{}\"] }}\n[[rules.faults]]\ntype = \"latency\"\ndelay = \"1ms\"\n",
                1 + i % 60000
            ));
        }
        std::fs::write(&p, text).unwrap();
        p
    };
    let time = |p: &std::path::Path| {
        let t = std::time::Instant::now();
        let (code, _, err) = netchaos(&["check", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        t.elapsed().as_secs_f64()
    };
    let (small, large) = (write(5_000), write(40_000));
    let (a, b) = (time(&small), time(&large));
    // Linear: 8 times the rules in about 8 times the time (quadratic
    // would be 64); generous for a busy machine.
    assert!(b < 24.0 * a + 2.0, "5k rules {a:.2}s, 40k rules {b:.2}s");
}

#[test]
fn tls_files_and_flags_are_checked_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let junk = junk.display().to_string();
    for (args, expect) in [
        (
            vec![
                "run",
                "--tls",
                "--upstream-ca",
                "/nonexistent.pem",
                "--",
                "true",
            ],
            "--upstream-ca /nonexistent.pem: No such file",
        ),
        (
            vec!["run", "--tls", "--upstream-ca", &junk, "--", "true"],
            "no PEM certificate in it",
        ),
        (
            vec![
                "run",
                "--tls",
                "--tls-ca",
                &junk,
                "--tls-key",
                &junk,
                "--",
                "true",
            ],
            "PKCS#8",
        ),
        (
            vec!["run", "--tls-ca-out", "/tmp/x.pem", "--", "true"],
            "--tls-ca-out has no effect without TLS",
        ),
        (
            vec![
                "run",
                "--tls",
                "--tls-ca-out",
                "/nonexistent/dir/ca.pem",
                "--",
                "true",
            ],
            "no such directory",
        ),
        (
            vec![
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream-tls",
                "localhost:1",
                "--upstream",
                "127.0.0.1:2",
            ],
            "give --upstream or --upstream-tls, not both",
        ),
        (
            vec!["check", "--fault", "http_status:status=99"],
            "http_status.status: expected a whole number from 100 to 599",
        ),
        (
            vec![
                "check",
                "--fault",
                "sse:stall_after_events=1,drop_after_events=2",
            ],
            "give at most one of",
        ),
        (
            vec!["check", "--fault", "http_delay:delay=1s,phase=body"],
            "http_delay.phase: expected one of",
        ),
        (
            vec!["check", "--fault", "http_status:status=429,headers=nocolon"],
            "expected \"Name: value\"",
        ),
        (
            vec!["check", "--fault", "dns_error:rcode=BOGUS"],
            "rcode: expected \"NXDOMAIN\", \"SERVFAIL\" or \"REFUSED\"",
        ),
        (
            vec!["check", "--fault", "dns_answer:addresses=notanip"],
            "expected an IP address",
        ),
        (
            vec![
                "check",
                "--fault",
                "http_status:status=503,response_status=200",
            ],
            "response_status needs a response to look at, and this answers in the upstream's place",
        ),
        (
            vec!["check", "--fault", "http_truncate:response_status=200|6xx"],
            "expected a status 200-599 like 503 or a class like \"5xx\", got \"6xx\"",
        ),
        (
            vec![
                "check",
                "--fault",
                "dns_answer:addresses=10.0.0.1,random=true",
            ],
            "give `addresses` or `random = true`, not both",
        ),
        (vec!["check", "--fault", "dns_delay"], "missing \"delay\""),
        (
            vec!["check", "--fault", "dns_timeout:qtype=AAAAA"],
            "unknown query type \"AAAAA\"",
        ),
        (
            vec!["check", "--fault", "dns_timeout:name=bad name"],
            "expected a host name",
        ),
        (
            vec![
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:2",
                "-p",
                "nxdomain",
            ],
            "needs `netchaos run`",
        ),
        (
            vec!["report", "/nonexistent/events.jsonl"],
            "cannot read /nonexistent/events.jsonl",
        ),
    ] {
        let (code, _, err) = netchaos(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(expect),
            "{args:?}: expected {expect:?} in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
