//! The command line: bad profiles and `--fault` strings exit 2 with a
//! message naming the place and the expected form; `check`, `profiles` and
//! `demo` do what they say.

mod support;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use support::*;

fn profile_file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap().to_string();
    (dir, p)
}

/// Checks that `netchaos check` rejects `text` with exit 2 and a message
/// containing `want` (the `{file}` placeholder is the file's path).
fn rejects(text: &str, want: &str) {
    let (_dir, path) = profile_file(text);
    let (code, out, err) = netchaos(&["check", &path]);
    assert_eq!(code, 2, "stdout: {out}\nstderr: {err}");
    let want = want.replace("{file}", &path);
    assert!(err.contains(&want), "expected {want:?} in:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_toml() {
    rejects("[[rules]\n", "{file}:1:");
    rejects("[[rules]]\nname = \n", "invalid TOML");
}

#[test]
fn unknown_keys_are_errors() {
    rejects(
        "[[rules]]\nnmae = \"x\"\n",
        "{file}:2:1: rules[0]: unknown key \"nmae\" (did you mean \"name\"?)",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"latency\"\ndelay = \"1s\"\njitterr = \"1ms\"\n",
        "{file}:5:1: latency: unknown key \"jitterr\" (did you mean \"jitter\"?)",
    );
}

#[test]
fn wrong_units_name_the_expected_form() {
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"bandwidth\"\nrate = \"fast\"\n",
        "{file}:4:8: bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\"",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"latency\"\ndelay = 100\n",
        "latency.delay: expected a duration like \"150ms\", \"2s\" or \"1m\", got 100",
    );
}

#[test]
fn impossible_values_are_rejected_at_load() {
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"slicer\"\nsize = 10\nsize_variation = 20\n",
        "size_variation (20) must be smaller than size (10)",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"latency\"\ndelay = \"1s\"\nprobability = 1.5\n",
        "latency.probability: expected a number from 0 to 1, got 1.5",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"stall\"\nduration = \"0s\"\n",
        "duration must be more than 0",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"latency\"\ndelay = \"-5ms\"\n",
        "latency.delay: expected a duration",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"teleport\"\n",
        "unknown fault type \"teleport\"",
    );
    rejects(
        "[[rules]]\n[[rules.faults]]\ntype = \"latency\"\ndelay = \"1s\"\nactive = \"9s..3s\"\n",
        "a window whose end comes after its start",
    );
    rejects("seed = -1\n", "profile.seed: expected a whole number");
}

#[test]
fn unknown_builtin_and_missing_files() {
    let (code, _, err) = netchaos(&["check", "flakey"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no built-in profile named \"flakey\" (did you mean \"flaky\"?)"),
        "{err}"
    );
    let (code, _, err) = netchaos(&["check", "/nonexistent/p.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read profile /nonexistent/p.toml: No such file or directory"),
        "{err}"
    );
}

#[test]
fn bad_fault_flags_exit_2() {
    for (flag, want) in [
        (
            "bandwidth:rate=fast",
            "bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\"",
        ),
        ("latency", "latency: missing \"delay\""),
        ("latency:delay", "expected key=value"),
        (
            "reset:after_bytes=1,after=1s",
            "either after_bytes or after",
        ),
        (
            "latency:delay=1s,stream=sideways",
            "latency.stream: expected one of",
        ),
        ("respond:data=\"unterminated", "unterminated double quote"),
        (
            "loss:percent=150",
            "loss.percent: expected a percentage between 0 and 100",
        ),
        ("connect_delay", "connect_delay: missing \"delay\""),
        ("blackout", "blackout: missing \"duration\""),
        (
            "sse:error_after_events=2,envelope=auto,error_type=overloaded_error",
            "error_type names one provider's error: give an envelope with it, not auto",
        ),
        (
            "http_status:status=529,envelope=autox",
            "expected one of \"anthropic\", \"openai\", \"gemini\", \"bedrock\" or \"auto\"",
        ),
    ] {
        let (code, _, err) = netchaos(&[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--fault",
            flag,
        ]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(want), "{flag}: expected {want:?} in {err}");
    }
}

#[test]
fn proxy_refuses_faults_that_need_the_namespace() {
    for fault in [
        "refuse",
        "connect_timeout",
        "connect_delay:delay=1s",
        "loss:percent=5",
        "blackout:duration=1s",
    ] {
        let (code, _, err) = netchaos(&[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--fault",
            fault,
        ]);
        assert_eq!(code, 2, "{fault}: {err}");
        assert!(err.contains("needs `netchaos run`"), "{fault}: {err}");
    }
}

#[test]
fn bad_usage_exits_2() {
    let (code, _, err) = netchaos(&["proxy", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("needs both --listen ADDR and --upstream HOST:PORT"),
        "{err}"
    );
    let (code, _, _) = netchaos(&[
        "proxy",
        "--dial-timeout",
        "soon",
        "--listen",
        "1",
        "--upstream",
        "a:1",
    ]);
    assert_eq!(code, 2);
    let (code, _, _) = netchaos(&["no-such-command"]);
    assert_eq!(code, 2);
}

#[test]
fn check_prints_the_resolved_plan() {
    let (code, out, err) = netchaos(&[
        "check",
        "read-timeout",
        "--fault",
        "latency:delay=100ms,jitter=10ms",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("rule \"read-timeout\": every connection"),
        "{out}"
    );
    assert!(
        out.contains("- stall:after_bytes=0,duration=forever,stream=downstream"),
        "{out}"
    );
    assert!(out.contains("rule \"cli\": every connection"), "{out}");
    assert!(
        out.contains("- latency:delay=100ms,jitter=10ms,stream=downstream"),
        "{out}"
    );
}

#[test]
fn profiles_lists_every_builtin_with_its_description() {
    let (code, out, _) = netchaos(&["profiles"]);
    assert_eq!(code, 0);
    for name in [
        "flaky",
        "slow-network",
        "slow-path",
        "slow-stream",
        "mid-stream-drop",
        "truncated",
        "read-timeout",
        "slow-headers",
        "http-503",
        "http-429",
        "connect-timeout",
        "connection-refused",
        "slow-connect",
        "lossy",
        "partition",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(line.len() > name.len() + 10, "{name} has no description");
    }
}

#[test]
fn every_builtin_profile_checks() {
    let (_, out, _) = netchaos(&["profiles"]);
    for name in out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| !n.is_empty() && *n != "Use")
    {
        let (code, _, err) = netchaos(&["check", name]);
        assert_eq!(code, 0, "{name}: {err}");
    }
}

fn demo_table(args: &[&str]) -> (String, String) {
    let started = std::time::Instant::now();
    // The demo always leaves its report (by default in $TMPDIR): this
    // one's goes to the test's own directory, removed with it.
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.html");
    let mut full = vec!["demo", "--report", report.to_str().unwrap()];
    full.extend_from_slice(args);
    let (code, out, err) = netchaos(&full);
    assert_eq!(code, 0, "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "demo took {:?}",
        started.elapsed()
    );
    for (scenario, outcome) in [
        ("healthy", "ok (HTTP 200, complete)"),
        ("latency", "ok (HTTP 200, complete)"),
        ("slow stream", "ok (HTTP 200, complete)"),
        ("mid-stream reset", "reset (ECONNRESET)"),
        ("truncated", "truncated: "),
        ("stall (read timeout)", "read timeout"),
        ("canned 503", "HTTP 503"),
        ("HTTPS 429 at 30%", "10 requests on one connection: "),
        (
            "HTTPS first 2 fail",
            "10 requests on one connection: 503 503 200 200 200 200 200 200 200 200",
        ),
        ("HTTPS slow TTFB", "200 200 200(3"),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(scenario))
            .unwrap_or_else(|| panic!("no {scenario} row:\n{out}"));
        assert!(
            line.contains(outcome),
            "{scenario}: expected {outcome:?} in {line:?}"
        );
    }
    (out, err)
}

#[test]
fn demo_wraps_a_client_process_with_run() {
    let (out, _) = demo_table(&[]);
    let wrapped = out.contains("as a separate process wrapped by `netchaos run");
    if wrapped {
        // The DNS rows: the client resolves a name through the run's
        // forwarder, and each fault shows in the resolve phase.
        for (scenario, outcome) in [
            ("DNS: slow", "ok (HTTP 200, complete)"),
            ("DNS: NXDOMAIN", "resolve failed: Name or service not known"),
            (
                "DNS: SERVFAIL",
                "resolve failed: Temporary failure in name resolution",
            ),
            ("DNS: timeout", "resolve timeout"),
        ] {
            let line = out
                .lines()
                .find(|l| l.starts_with(scenario))
                .unwrap_or_else(|| panic!("no {scenario} row:\n{out}"));
            assert!(line.contains(outcome), "{scenario}: {line:?}");
        }
        let slow = out.lines().find(|l| l.starts_with("DNS: slow")).unwrap();
        let resolve_ms: f64 = slow
            .split_whitespace()
            .skip_while(|w| !w.starts_with("dns_delay"))
            .nth(1)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no resolve time in {slow:?}"));
        assert!(resolve_ms >= 290.0, "{slow}");
    }
    if !wrapped {
        // Only where namespaces are unavailable, and then it says why.
        assert!(
            !in_ci(),
            "CI can run `netchaos run`; the demo must use it:\n{out}"
        );
        assert!(
            out.contains("note: `netchaos run` is not available here"),
            "{out}"
        );
    }
}

#[test]
fn demo_in_process_prints_its_table_and_a_summary() {
    let (out, err) = demo_table(&["--in-process"]);
    assert!(
        out.contains("through `netchaos proxy`, in this process"),
        "{out}"
    );
    assert!(err.contains("netchaos summary"), "{err}");
}

/// The profiles shipped in examples/ (the Docker one, and the one inside
/// the Kubernetes ConfigMap) are valid.
#[test]
fn the_example_profiles_are_valid() {
    let root = env!("CARGO_MANIFEST_DIR");
    let (code, _, err) = netchaos(&["check", &format!("{root}/examples/docker/profile.toml")]);
    assert_eq!(code, 0, "{err}");
    let yaml = std::fs::read_to_string(format!("{root}/examples/kubernetes/netchaos-sidecar.yaml"))
        .unwrap();
    // The block scalar under `profile.toml: |`, de-indented.
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("profile.toml: |"));
    let key_indent = lines.next().expect("a profile.toml key").find('p').unwrap();
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
        .collect();
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap();
    let text: String = body
        .iter()
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect();
    assert!(text.contains("[[rules]]"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("profile.toml");
    std::fs::write(&p, text).unwrap();
    let (code, out, err) = netchaos(&["check", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("payments"), "{out}");
}

/// The Kubernetes manifests validate against the Kubernetes schemas,
/// offline (PyPI's kubernetes-validate, strict: no unknown field), for the
/// first version with native sidecars and the newest it knows; and they
/// say what the docs promise (a native sidecar with a startup probe, the
/// Pod Security level they need, the node agent's view of the node).
#[test]
fn the_kubernetes_manifests_validate_offline() {
    if missing_tool("kubernetes-validate") {
        return;
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let files = [
        format!("{root}/examples/kubernetes/netchaos-sidecar.yaml"),
        format!("{root}/examples/kubernetes/netchaos-node.yaml"),
    ];
    for version in ["1.29.0", "latest"] {
        let mut cmd = Command::new("kubernetes-validate");
        cmd.arg("--strict").arg("--no-warn");
        if version != "latest" {
            cmd.args(["-k", version]);
        }
        let out = cmd.args(&files).output().unwrap();
        assert!(
            out.status.success(),
            "{version}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        for kind in ["pod/checkout", "daemonset/netchaos-node", "namespace/shop"] {
            assert!(
                said.contains(&format!("passed for resource {kind}")),
                "{said}"
            );
        }
    }
    let sidecar = std::fs::read_to_string(&files[0]).unwrap();
    let init = &sidecar[sidecar.find("initContainers:").expect("a native sidecar")..];
    let init = &init[..init.find("\n  containers:").unwrap()];
    assert!(init.contains("restartPolicy: Always"), "{init}");
    assert!(init.contains("startupProbe:"), "{init}");
    assert!(init.contains("--in-place"), "{init}");
    for yaml in [&sidecar, &std::fs::read_to_string(&files[1]).unwrap()] {
        assert!(yaml.contains("pod-security.kubernetes.io/enforce: privileged"));
    }
    let node = std::fs::read_to_string(&files[1]).unwrap();
    assert!(node.contains("hostPID: true") && node.contains("/var/log/pods"));
    assert!(node.contains("netchaos attach --pod"));
}

/// The documentation's example profile (docs/faults.md, "Profiles"), as
/// written there.
fn readme_profile() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/faults.md")).unwrap();
    let at = readme.find("A profile is a TOML file").unwrap();
    let block = &readme[at..];
    let start = block.find("```toml\n").unwrap() + 8;
    let end = block[start..].find("```").unwrap();
    block[start..start + end].to_string()
}

#[test]
fn the_readme_profile_checks_cleanly_and_injects() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slow.toml");
    std::fs::write(&path, readme_profile()).unwrap();
    let (code, out, err) = netchaos(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(
        out.contains("seed: 7"),
        "the profile's seed is shown: {out}"
    );
    // Pointed at a test server and a free port, it stalls replies.
    static BODY: [u8; 4096] = [b'r'; 4096];
    let http = Server::http(&BODY);
    let text = readme_profile()
        .replace("127.0.0.1:26379", "127.0.0.1:0")
        .replace("127.0.0.1:6379", &http.addr.to_string());
    std::fs::write(&path, text).unwrap();
    let p = Proxy::start(&["-p", path.to_str().unwrap()]);
    let mut stalled = 0;
    for _ in 0..8 {
        let mut c = connect(p.addr());
        c.set_read_timeout(Some(Duration::from_millis(700)))
            .unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (got, _) = read_to_end(&mut c);
        if got.len() == 512 {
            stalled += 1;
        }
    }
    assert!(
        (1..8).contains(&stalled),
        "{stalled} of 8 stalled at 512 bytes"
    );
}

#[test]
fn check_warns_about_rules_that_never_match() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        "[[rules]]\nname = \"api\"\nmatch = { proxy = [\"api\"] }\n  [[rules.faults]]\n  type = \"reset\"\n\n[[proxies]]\nname = \"redis\"\nlisten = \"127.0.0.1:26379\"\nupstream = \"127.0.0.1:6379\"\n",
    )
    .unwrap();
    let (code, _, err) = netchaos(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "a warning, not an error: {err}");
    assert!(
        err.contains("warning: rule \"api\"") && err.contains("which no [[proxies]] defines"),
        "{err}"
    );
    // A fault its own rule keeps from acting: TLS under protocol = "tcp".
    std::fs::write(
        &path,
        "[[rules]]\nname = \"raw\"\nmatch.protocol = \"tcp\"\n[[rules.faults]]\ntype = \"tls_error\"\n",
    )
    .unwrap();
    let (code, _, err) = netchaos(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "a warning, not an error: {err}");
    assert!(
        err.contains("warning: rule \"raw\"") && err.contains("its tls_error fault never acts"),
        "{err}"
    );
}

#[test]
fn completions_and_manual_pages_generate() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = netchaos(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("netchaos") && out.contains("--fault"),
            "{shell}: {out:.200}"
        );
    }
    let (code, out, _) = netchaos(&["man"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(".TH netchaos 1") && out.contains("run"),
        "{out:.300}"
    );
    let (code, out, _) = netchaos(&["man", "run"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(".TH netchaos-run 1") && out.contains("\\-\\-tls"),
        "{out:.300}"
    );
    let (code, _, err) = netchaos(&["man", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no command \"nope\""), "{err}");
    // Every page as a file, as the Debian package installs them.
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let (code, _, err) = netchaos(&["man", "--dir", pages.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for page in [
        "netchaos.1",
        "netchaos-run.1",
        "netchaos-attach.1",
        "netchaos-drill.1",
    ] {
        let text = std::fs::read_to_string(pages.join(page)).unwrap();
        assert!(text.contains(".TH netchaos"), "{page}: {text:.200}");
    }
}

#[test]
fn logs_have_no_colour_on_a_pipe_and_run_without_a_command_says_where_it_goes() {
    // (A warning logged before anything starts.)
    let (_, _, err) = netchaos(&["run", "--tls", "--", "true"]);
    assert!(err.contains("WARN"), "{err}");
    assert!(!err.contains('\u{1b}'), "ANSI escapes on a pipe: {err:?}");
    let (code, _, err) = netchaos(&["run", "--fault", "latency:delay=1ms"]);
    assert_eq!(code, 2);
    assert!(err.contains("give the command after `--`"), "{err}");
    let (_, out, _) = netchaos(&["check", "--help"]);
    assert!(!out.contains("--events"), "check has no event log: {out}");
}

/// What a newcomer's small mistakes and asks get (issue 47): a misspelt
/// key named beside the missing one, `-p flaky.toml` pointed at the
/// built-in, `check -p`, completions that offer profiles and fault types,
/// `-q` silent on success, a proxy to a port nothing listens on warned.
#[test]
fn small_mistakes_get_pointed_answers() {
    let (code, _, err) = netchaos(&["check", "--fault", "latency:dealy=100ms"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("\"dealy\" is given: did you mean \"delay\"?"),
        "{err}"
    );
    let (code, _, err) = netchaos(&["check", "-p", "flaky.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the built-in profile of that name is `-p flaky`"),
        "{err}"
    );
    let (code, out, err) = netchaos(&["check", "-p", "flaky"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("flaky: ok") && out.contains("rule"),
        "{out}\n{err}"
    );
    let (code, out, _) = netchaos(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("llm-overloaded") && out.contains("latency:"),
        "completions offer profiles and fault types"
    );
    let closed = unused_port();
    let p = Proxy::start(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("127.0.0.1:{closed}"),
    ]);
    assert!(
        p.stderr().contains("nothing listens on its upstream"),
        "{}",
        p.stderr()
    );
}

/// `-q`: nothing at all on success (the seed is in the event log).
#[test]
fn quiet_runs_print_nothing_on_success() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let (code, out, err) = wrapped(&["-q", "--fault", "latency:delay=1ms"], &["true"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((out.as_str(), err.as_str()), ("", ""));
}

/// `--report` to a place it cannot be written: refused before the command
/// runs, with a non-zero exit (it used to run the whole command, then warn
/// and exit 0).
#[test]
fn a_report_that_cannot_be_written_stops_the_run_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let report = dir.path().join("no-such-dir/r.html");
    let (code, _, err) = netchaos(&[
        "run",
        "--report",
        report.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("cannot write the report"), "{err}");
    assert!(!marker.exists(), "the command ran");
}

/// `demo --events FILE` holds the scenarios' own runs, each from its own
/// `start` line, not only the demo's.
#[test]
fn demo_events_hold_each_scenarios_run() {
    if !need(&["ip", "nft"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.jsonl");
    let report = dir.path().join("report.html");
    let (code, _, err) = netchaos(&[
        "demo",
        "--only",
        "healthy",
        "--events",
        file.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let events = read_events(&file);
    let starts = events.iter().filter(|e| e["event"] == "start").count();
    let closes = events.iter().filter(|e| e["event"] == "close").count();
    assert!(
        starts >= 2 && closes >= 1,
        "{starts} starts, {closes} closes: {events:?}"
    );
}

/// `netchaos faults | head` and the like end quietly, as other Unix tools
/// do, instead of panicking on the closed pipe (Rust ignores SIGPIPE): the
/// listing's stdout is a pipe whose reader is already gone, and the
/// process ends by SIGPIPE with nothing on stderr (before: a panic, or an
/// error message).
#[test]
fn a_listing_cut_short_by_its_reader_ends_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let bin = env!("CARGO_BIN_EXE_netchaos");
    for args in [
        &["faults"][..],
        &["profiles"],
        &["man"],
        &["completions", "bash"],
    ] {
        let (reader, writer) = nix::unistd::pipe().unwrap();
        drop(reader);
        let out = Command::new(bin)
            .args(args)
            .stdout(std::process::Stdio::from(writer))
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?} {err}",
            out.status
        );
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

/// `netchaos schema` prints the event log's JSON Schema, as
/// docs/events.schema.json holds it; it takes no argument.
#[test]
fn schema_prints_the_documented_event_schema() {
    let (code, out, err) = netchaos(&["schema"]);
    assert_eq!(code, 0, "{err}");
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/events.schema.json"
    ))
    .unwrap();
    assert_eq!(out, doc);
    let (code, _, err) = netchaos(&["schema", "extra"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unexpected argument 'extra'"), "{err}");
}
