//! `run --tls` vouches for an upstream only to the clients whose own trust
//! accepts it. Each client — curl and Python's `requests` and `urllib`,
//! unmodified, on loopback — is run directly and through netchaos, and the
//! two answers compared: a client pinned to its own CA refuses an upstream
//! the system trusts and accepts one of its CA, a client of the system's
//! store the other way round, a client that verifies nothing reaches an
//! upstream nobody trusts, one with a flawed certificate fails on that
//! flaw, and bundles anywhere (under /tmp too) are covered, a missing one
//! named.
//!
//! The system's trust store is replaced, for one test, in a private mount
//! namespace (gone with its processes): the host's stays as it is.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// `requests` on a URL: the status, or the verification error as OpenSSL
/// names it. `no-verify` as the second argument: `verify=False`.
const REQUESTS: &str = r#"
import re, sys, warnings, requests
warnings.filterwarnings("ignore")
try:
    r = requests.get(sys.argv[1], verify=sys.argv[2] != "no-verify", timeout=10)
    print(r.status_code, r.text[:14])
except requests.exceptions.SSLError as e:
    m = re.search(r"certificate verify failed: ([^(]*)", str(e))
    print("SSLError", m.group(1).strip() if m else str(e)[-120:])
"#;

/// Python's own `urllib` (the default context: `SSL_CERT_FILE`).
const URLLIB: &str = r#"
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
except Exception as e:
    print(type(e).__name__, getattr(e, "reason", e))
"#;

/// A shell script that runs each `(label, command)` on each `(upstream,
/// url)` (`{url}` in the command) and prints one line for each: the
/// label, the upstream, the exit code and the first line of output.
fn script(clients: &[(&str, &str)], upstreams: &[(&str, String)]) -> String {
    let mut s = String::new();
    for (up, url) in upstreams {
        for (label, cmd) in clients {
            let cmd = cmd.replace("{url}", &format!("{url}/p/1"));
            s.push_str(&format!(
                "out=$({cmd} 2>&1); echo \"{label} -> {up}: $? $(printf '%s\\n' \"$out\" | head -1)\"\n"
            ));
        }
    }
    s
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The clients, as shell commands.
fn curl(extra: &str) -> String {
    format!("curl -sS {extra} --max-time 10 {{url}}")
}

fn requests(verify: bool) -> String {
    format!(
        "python3 -c {} {{url}} {}",
        sh_quote(REQUESTS),
        if verify { "verify" } else { "no-verify" }
    )
}

fn lines(out: &str) -> Vec<String> {
    out.lines().map(str::to_string).collect()
}

/// Whether `requests` is there (CI installs it).
fn have_requests() -> bool {
    if python("import requests", &[]).0 == 0 {
        return true;
    }
    assert!(!in_ci(), "python3's requests is required in CI");
    eprintln!("SKIPPED: python3 has no requests");
    false
}

/// The system's PEM bundle curl, OpenSSL and netchaos read.
fn system_bundle() -> Option<PathBuf> {
    let found = [
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/pki/tls/certs/ca-bundle.crt",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    if found.is_none() {
        assert!(!in_ci(), "CI has a system CA bundle");
        eprintln!("SKIPPED: no system CA bundle to stand in for");
    }
    found
}

/// `program`, run in a private mount namespace in which the system bundle
/// `system` is `bundle`.
fn with_system_store(system: &Path, bundle: &Path, program: &str) -> Command {
    let mut c = without_bundle_vars(Command::new("unshare"));
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        r#"mount --bind "$0" "$1" && shift && exec "$@""#,
    ])
    .arg(bundle)
    .arg(system)
    .arg(program);
    c
}

/// The variables naming CA bundles (the machine may set them all), gone:
/// each test sets those it means.
const BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "AWS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
];

fn without_bundle_vars(mut c: Command) -> Command {
    for v in BUNDLE_VARS {
        c.env_remove(v);
    }
    c
}

fn output(mut c: Command) -> (i32, String, String) {
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run a client");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn count(events: &Path, kind: &str) -> usize {
    read_events(events)
        .iter()
        .filter(|e| e["event"] == "error" && e["kind"] == kind)
        .count()
}

fn count_opens(events: &Path) -> usize {
    read_events(events)
        .iter()
        .filter(|e| e["event"] == "open")
        .count()
}

/// Every connection through the HTTP layer (where TLS is terminated),
/// none faulted.
const THROUGH_HTTP: &[&str] = &["--tls", "--fault", "http_status:status=503,probability=0"];

#[test]
fn a_pinned_client_trusts_through_tls_exactly_what_it_trusts_directly() {
    if !need(&["curl", "python3", "ip", "nft", "unshare", "mount"]) || !have_requests() {
        return;
    }
    if !is_root() {
        assert!(!in_ci(), "CI runs the suite as root");
        eprintln!("SKIPPED: not root, so no mount namespace to change the system's store in");
        return;
    }
    let Some(system) = system_bundle() else {
        return;
    };
    // CA-A: the client's own (its bundle under /tmp); CA-B: in the
    // system's store (here, the host's plus B).
    let (ca_a, ca_b) = (TestCa::new(), TestCa::new());
    let (up_a, up_b) = (Httpd::start(Some(&ca_a)), Httpd::start(Some(&ca_b)));
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("system.pem");
    let mut pem = std::fs::read(&system).unwrap();
    pem.extend(std::fs::read(ca_b.path("ca.pem")).unwrap());
    std::fs::write(&bundle, pem).unwrap();
    let events = dir.path().join("events.jsonl");

    // curl and requests pinned to CA-A (requests reads CURL_CA_BUNDLE
    // when REQUESTS_CA_BUNDLE is unset), and curl on the system's store.
    let clients = [
        ("curl pinned", curl("-o /dev/null")),
        (
            "curl system",
            format!("env -u CURL_CA_BUNDLE {}", curl("-o /dev/null")),
        ),
        ("requests pinned", requests(true)),
    ];
    let clients: Vec<(&str, &str)> = clients.iter().map(|(l, c)| (*l, c.as_str())).collect();
    let run = script(&clients, &[("A", up_a.https()), ("B", up_b.https())]);
    let pinned = ("CURL_CA_BUNDLE", ca_a.ca());

    let mut direct = with_system_store(&system, &bundle, "sh");
    direct.args(["-c", &run]).env(pinned.0, &pinned.1);
    let (code, direct, err) = output(direct);
    assert_eq!(code, 0, "{err}");
    let direct = lines(&direct);
    let verdicts: Vec<(&str, bool)> = direct
        .iter()
        .map(|l| {
            let (who, rest) = l.split_once(": ").unwrap();
            (who, rest.starts_with("0 ") && !rest.contains("SSLError"))
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("curl pinned -> A", true),
            ("curl system -> A", false),
            ("requests pinned -> A", true),
            ("curl pinned -> B", false),
            ("curl system -> B", true),
            ("requests pinned -> B", false),
        ],
        "directly, each client trusts its own store:\n{direct:#?}"
    );

    let mut args = THROUGH_HTTP.to_vec();
    let ev = events.display().to_string();
    args.extend(["--events", &ev]);
    let mut through = with_system_store(&system, &bundle, BIN);
    through.env(pinned.0, &pinned.1);
    let (code, out, err) = wrapped_with(through, &args, &["sh", "-c", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines(&out),
        direct,
        "through netchaos, each client trusts what it does directly (errors alike)\n{err}"
    );
    // Every upstream is trusted by one store or the other: the refusals
    // are the clients' own.
    assert_eq!(count(&events, "upstream_tls_untrusted"), 0, "{err}");
    assert_eq!(count(&events, "upstream_tls_unverified"), 0, "{err}");
    assert_eq!(count_opens(&events), 6, "{err}");
}

#[test]
fn clients_that_verify_nothing_reach_an_upstream_nobody_trusts() {
    if !need(&["curl", "python3", "ip", "nft"]) || !have_requests() {
        return;
    }
    // A private CA, in no store and not given with --upstream-ca.
    let ca = TestCa::new();
    let up = Httpd::start(Some(&ca));
    // Those that verify nothing first: once a client has refused the
    // stand-in (its issuer unknown: it may pin the upstream's CA), that
    // destination is relayed untouched.
    let clients = [
        ("curl -k", curl("-k")),
        ("requests verify=False", requests(false)),
        ("curl", curl("-o /dev/null")),
        ("requests", requests(true)),
    ];
    let clients: Vec<(&str, &str)> = clients.iter().map(|(l, c)| (*l, c.as_str())).collect();
    let run = script(&clients, &[("C", up.https())]);
    let (code, direct, err) = output({
        let mut c = without_bundle_vars(Command::new("sh"));
        c.args(["-c", &run]);
        c
    });
    assert_eq!(code, 0, "{err}");
    let direct = lines(&direct);
    assert_eq!(
        direct[0],
        "curl -k -> C: 0 body-1;body-1;body-1;body-1;body-1;body-1;body-1;body-1;body-1;body-1;"
    );
    assert!(direct[1].ends_with(": 0 200 body-1;body-1;"), "{direct:#?}");
    assert!(direct[2].starts_with("curl -> C: 60 "), "{direct:#?}");
    assert!(direct[3].contains("SSLError"), "{direct:#?}");

    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let mut args = THROUGH_HTTP.to_vec();
    let ev = events.display().to_string();
    args.extend(["--events", &ev]);
    let through = without_bundle_vars(Command::new(BIN));
    let (code, out, err) = wrapped_with(through, &args, &["sh", "-c", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines(&out),
        direct,
        "through netchaos, as directly (the same verification errors)\n{err}"
    );
    assert_eq!(count(&events, "upstream_tls_unverified"), 2, "{err}");
    // curl refused the stand-in; requests then met the upstream itself.
    assert_eq!(count(&events, "upstream_tls_untrusted"), 1, "{err}");
    let refused: Vec<_> = read_events(&events)
        .into_iter()
        .filter(|e| e["event"] == "tls_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{err}");
    assert_eq!(
        refused[0]["destination"],
        format!("localhost:{}", up.port),
        "{err}"
    );
}

#[test]
fn bundles_under_tmp_are_covered_read_only_and_a_missing_one_is_named() {
    if !need(&["curl", "python3", "ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let up = Httpd::start(Some(&ca));
    // Under /tmp, where netchaos stages its copies.
    let dir = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::copy(ca.path("ca.pem"), &bundle).unwrap();
    let before = std::fs::read(&bundle).unwrap();
    let bundle_s = bundle.display().to_string();
    let urllib = format!("python3 -c {} {{url}}", sh_quote(URLLIB));
    let clients = [
        ("curl", curl("-o /dev/null -w %{http_code}")),
        ("urllib", urllib),
    ];
    let clients: Vec<(&str, &str)> = clients.iter().map(|(l, c)| (*l, c.as_str())).collect();
    let run = script(&clients, &[("D", up.https())]);
    let env = [("SSL_CERT_FILE", &bundle_s), ("CURL_CA_BUNDLE", &bundle_s)];
    let (code, direct, err) = output({
        let mut c = without_bundle_vars(Command::new("sh"));
        c.args(["-c", &run]).envs(env);
        c
    });
    assert_eq!(code, 0, "{err}");
    let direct = lines(&direct);
    assert_eq!(direct, ["curl -> D: 0 200", "urllib -> D: 0 200"]);

    let mut c = without_bundle_vars(Command::new(BIN));
    c.envs(env);
    let probe =
        format!("{run}(: >> \"$SSL_CERT_FILE\") 2>/dev/null && echo writable || echo read-only");
    let (code, out, err) = wrapped_with(c, THROUGH_HTTP, &["sh", "-c", &probe]);
    assert_eq!(code, 0, "{err}");
    let mut want = direct.clone();
    want.push("read-only".into());
    assert_eq!(lines(&out), want, "{err}");
    assert_eq!(
        std::fs::read(&bundle).unwrap(),
        before,
        "the file itself is untouched"
    );

    // A variable naming no file: refused, naming both.
    let missing = dir.path().join("missing.pem");
    let mut c = without_bundle_vars(Command::new(BIN));
    c.env("SSL_CERT_FILE", &missing);
    let (code, _, err) = wrapped_with(c, &["--tls"], &["true"]);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(
        err.contains("SSL_CERT_FILE") && err.contains(&missing.display().to_string()),
        "names the variable and the file: {err}"
    );
}

#[test]
fn a_flawed_upstream_fails_each_client_on_its_own_flaw() {
    if !need(&["curl", "python3", "ip", "nft"]) {
        return;
    }
    // Trusted by the client's bundle, but for another name, or expired.
    let (wrong, expired) = (
        TestCa::for_names(&["elsewhere.test"]),
        TestCa::expired_for(&["localhost", "127.0.0.1"]),
    );
    let (up_w, up_e) = (Httpd::start(Some(&wrong)), Httpd::start(Some(&expired)));
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("cas.pem");
    let mut pem = std::fs::read(wrong.path("ca.pem")).unwrap();
    pem.extend(std::fs::read(expired.path("ca.pem")).unwrap());
    std::fs::write(&bundle, pem).unwrap();
    let bundle = bundle.display().to_string();
    let urllib = format!("python3 -c {} {{url}}", sh_quote(URLLIB));
    let clients = [
        ("curl", curl("-o /dev/null")),
        ("curl -k", curl("-k -o /dev/null -w %{http_code}")),
        ("urllib", urllib),
    ];
    let clients: Vec<(&str, &str)> = clients.iter().map(|(l, c)| (*l, c.as_str())).collect();
    let run = script(
        &clients,
        &[("wrong name", up_w.https()), ("expired", up_e.https())],
    );
    let env = [("SSL_CERT_FILE", &bundle), ("CURL_CA_BUNDLE", &bundle)];
    let (code, direct, err) = output({
        let mut c = without_bundle_vars(Command::new("sh"));
        c.args(["-c", &run]).envs(env);
        c
    });
    assert_eq!(code, 0, "{err}");
    let direct = lines(&direct);
    let has = |i: usize, what: &str| assert!(direct[i].contains(what), "{direct:#?}");
    has(0, "no alternative certificate subject name");
    has(1, ": 0 200");
    has(2, "Hostname mismatch");
    has(3, "certificate has expired");
    has(4, ": 0 200");
    has(5, "certificate has expired");

    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let mut args = THROUGH_HTTP.to_vec();
    let ev = events.display().to_string();
    args.extend(["--events", &ev]);
    let mut c = without_bundle_vars(Command::new(BIN));
    c.envs(env);
    let (code, out, err) = wrapped_with(c, &args, &["sh", "-c", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&out), direct, "the same flaw, the same errors\n{err}");
    // Each connection's upstream was judged flawed, and the log says how
    // (curl checks the name after its handshake: a verifying curl too
    // completes one on the wrong name's stand-in).
    let judged: Vec<String> = read_events(&events)
        .iter()
        .filter(|e| e["event"] == "error")
        .map(|e| e["detail"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(judged.len(), 6, "{err}");
    assert_eq!(
        judged
            .iter()
            .filter(|d| d.contains("not valid for name"))
            .count(),
        3,
        "{judged:#?}"
    );
    assert_eq!(
        judged.iter().filter(|d| d.contains("expired")).count(),
        3,
        "{judged:#?}"
    );
    assert!(
        count(&events, "upstream_tls_unverified") >= 2,
        "curl -k went on: {judged:#?}"
    );
}

/// Python's `ssl` pinned to a CA by an explicit `cafile` (no store
/// netchaos covers): argv[1] the host's port, argv[2] the CA file, then
/// one new connection for each further argument; prints the status of
/// each, or its error's class.
const PINNED: &str = r#"
import http.client, ssl, sys
port, cafile = int(sys.argv[1]), sys.argv[2]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.load_verify_locations(cafile=cafile)
for _ in sys.argv[3:]:
    c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
    try:
        c.request("GET", "/p/1")
        print("python", c.getresponse().status, flush=True)
    except Exception as e:
        print("python", type(e).__name__, flush=True)
    c.close()
"#;

/// Issue 48, item 11: clients pinned to their own CA (Python's `ssl` with
/// an explicit `cafile`, curl with `--cacert`) keep working under `run
/// --tls`: a rule scoped to another host (by `match.dst`, or a fault's
/// `host`) does not intercept them at all; a path-only rule does, but the
/// first refusal is logged and summarised by destination, and the later
/// connections there are relayed untouched — whether netchaos trusts the
/// upstream (`--upstream-ca`) or not.
#[test]
fn clients_pinned_to_their_own_ca_are_relayed_untouched() {
    if !need(&["curl", "python3", "ip", "nft"]) {
        return;
    }
    let ca = TestCa::new();
    let (up_py, up_curl) = (Httpd::start(Some(&ca)), Httpd::start(Some(&ca)));
    let dir = tempfile::tempdir().unwrap();
    let (py_port, curl_port) = (up_py.port.to_string(), up_curl.port.to_string());
    let run = format!(
        "python3 -c {} {py_port} {ca} 1 2 3; for i in 1 2 3; do \
         curl -fsS -o /dev/null --cacert {ca} --max-time 10 \
         https://localhost:{curl_port}/p/1 2>/dev/null && echo curl 200 || echo curl failed; done",
        sh_quote(PINNED),
        ca = ca.ca()
    );
    let (code, direct, err) = output({
        let mut c = without_bundle_vars(Command::new("sh"));
        c.args(["-c", &run]);
        c
    });
    assert_eq!(code, 0, "{err}");
    let all_ok = [
        "python 200",
        "python 200",
        "python 200",
        "curl 200",
        "curl 200",
        "curl 200",
    ];
    assert_eq!(lines(&direct), all_ok, "directly");

    // Scoped to another host: never intercepted.
    let scoped = dir.path().join("scoped.toml");
    std::fs::write(
        &scoped,
        "[[rules]]\nname = \"other\"\nmatch.dst = [\"other.example\"]\n  [[rules.faults]]\n  type = \"http_status\"\n  status = 503\n",
    )
    .unwrap();
    let scoped = scoped.display().to_string();
    let by_profile: &[&str] = &["-p", &scoped];
    let by_host: &[&str] = &["--fault", "http_status:status=503,host=other.example"];
    for (i, rule) in [by_profile, by_host].into_iter().enumerate() {
        let events = dir.path().join(format!("scoped-{i}.jsonl"));
        let ev = events.display().to_string();
        let mut args = vec!["--tls", "--events", &ev];
        args.extend(rule);
        let through = without_bundle_vars(Command::new(BIN));
        let (code, out, err) = wrapped_with(through, &args, &["sh", "-c", &run]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lines(&out), all_ok, "{rule:?}\n{err}");
        let paths: Vec<_> = read_events(&events)
            .into_iter()
            .filter(|e| e["event"] == "close")
            .map(|e| e["path"].clone())
            .collect();
        assert_eq!(paths, vec!["splice"; 6], "not intercepted: {rule:?}\n{err}");
        assert!(!err.contains("refused the run's certificate"), "{err}");
    }

    // A fault's host that is the server's (with its port, or without):
    // intercepted, and faulted, for a client of the run's CA.
    for host in ["localhost", &format!("localhost:{curl_port}")] {
        let fault = format!("http_status:status=503,host={host}");
        let url = format!("https://localhost:{curl_port}/p/1");
        let through = without_bundle_vars(Command::new(BIN));
        let (code, out, err) = wrapped_with(
            through,
            &["--tls", "--upstream-ca", &ca.ca(), "--fault", &fault],
            &["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", &url],
        );
        assert_eq!((code, out.as_str()), (0, "503"), "{fault}: {err}");
    }

    // A path-only rule: each client's first connection is refused, the
    // rest relayed untouched; with the upstream trusted by netchaos or not.
    let ca_file = ca.ca();
    let trusted: &[&str] = &["--upstream-ca", &ca_file];
    for (i, trust) in [trusted, &[]].into_iter().enumerate() {
        let events = dir.path().join(format!("path-only-{i}.jsonl"));
        let ev = events.display().to_string();
        let mut args = vec!["--tls", "--events", &ev];
        args.extend(["--fault", "http_status:status=503,path=/never-matches"]);
        args.extend(trust);
        let through = without_bundle_vars(Command::new(BIN));
        let (code, out, err) = wrapped_with(through, &args, &["sh", "-c", &run]);
        assert_eq!(code, 0, "{err}");
        let out = lines(&out);
        assert_eq!(out.len(), 6, "{out:#?}\n{err}");
        assert_eq!(out[0], "python SSLCertVerificationError", "{err}");
        assert_eq!(out[1..3], all_ok[1..3], "{err}");
        assert_eq!(out[3], "curl failed", "{err}");
        assert_eq!(out[4..], all_ok[4..], "{err}");
        let ev = read_events(&events);
        let refused: Vec<_> = ev.iter().filter(|e| e["event"] == "tls_refused").collect();
        let dests: Vec<_> = refused.iter().map(|e| e["destination"].clone()).collect();
        assert_eq!(
            dests,
            [
                format!("localhost:{py_port}"),
                format!("localhost:{curl_port}")
            ],
            "{err}"
        );
        assert!(refused.iter().all(|e| e["passthrough"] == true), "{err}");
        assert!(
            refused
                .iter()
                .all(|e| e["advice"].as_str().unwrap().contains("--tls-ca FILE")),
            "{refused:?}"
        );
        // In connection order (their close lines come as each ends: the
        // next client's refusal may close before this one's last).
        let mut closes: Vec<_> = ev.iter().filter(|e| e["event"] == "close").collect();
        closes.sort_by_key(|e| e["conn"].as_u64());
        let paths: Vec<_> = closes
            .iter()
            .map(|e| e["path"].as_str().unwrap_or("?").to_string())
            .collect();
        assert_eq!(
            paths,
            ["https", "splice", "splice", "https", "splice", "splice"],
            "{err}"
        );
        for port in [&py_port, &curl_port] {
            assert!(
                err.contains(&format!(
                    "localhost:{port}: 1 connection(s) refused (UnknownCA), 2 later one(s) relayed untouched"
                )),
                "the summary says it by destination:\n{err}"
            );
        }
        assert!(err.contains("scope the rule"), "and what to do:\n{err}");
    }
}

/// `check` says when a rule's HTTP faults match every HTTPS connection
/// (under `run --tls`, each terminated); not when the rule or its faults
/// name the hosts.
#[test]
fn check_says_when_http_faults_match_every_https_connection() {
    let warned = |args: &[&str]| {
        let mut a = vec!["check"];
        a.extend(args);
        let (code, _, err) = netchaos(&a);
        assert_eq!(code, 0, "{err}");
        err.contains("matches every HTTPS connection")
    };
    assert!(warned(&["--fault", "http_status:status=503,path=/v1/*"]));
    assert!(warned(&["--fault", "tls_error:error=expired"]));
    assert!(!warned(&[
        "--fault",
        "http_status:status=503,host=api.example.com"
    ]));
    assert!(!warned(&["--fault", "latency:delay=10ms"]));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(
        &p,
        "[[rules]]\nname = \"api\"\nmatch.ports = [\"443\"]\n  [[rules.faults]]\n  type = \"http_status\"\n  status = 503\n",
    )
    .unwrap();
    assert!(!warned(&[p.to_str().unwrap()]));
}
