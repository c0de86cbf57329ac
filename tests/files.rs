//! The files netchaos writes, as root on a shared host (issue 42): no
//! file of its own in `$TMPDIR` can be aimed elsewhere by another user's
//! planted link; a user-named output (`--events`, `--report`,
//! `--tls-ca-out`, `report -o`) follows no other user's link; the event
//! log is private, stops at its size, and never holds the API token.
//!
//! The "other user" is `nobody` (65534): the test makes its links and
//! directories and gives them to it (`lchown`), as if it had planted
//! them in the sticky 1777 directory that stands in for `/tmp`.
//! Everything is made in the test's own temporary directory and removed
//! with it, even when an assertion fails.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::*;

const NOBODY: u32 = 65534;
const SECRET: &str = "root-only secret\n";

/// A private directory with a root-only victim file, and a sticky
/// world-writable one beside it (the shared `/tmp`).
struct Shared {
    top: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let private = top.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(private.join("victim"), SECRET).unwrap();
        std::fs::set_permissions(
            private.join("victim"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let tmp = top.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Shared { top }
    }

    fn tmp(&self) -> PathBuf {
        self.top.path().join("tmp")
    }

    fn victim(&self) -> PathBuf {
        self.top.path().join("private/victim")
    }

    /// `nobody`'s link at `name` in the shared directory, to the victim.
    fn plant(&self, name: &str) -> PathBuf {
        let link = self.tmp().join(name);
        symlink(self.victim(), &link).unwrap();
        lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
        link
    }

    fn assert_victim_untouched(&self) {
        let m = std::fs::metadata(self.victim()).unwrap();
        assert_eq!(
            std::fs::read_to_string(self.victim()).unwrap(),
            SECRET,
            "the victim was rewritten"
        );
        assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o600));
    }
}

fn root_only() -> bool {
    if is_root() {
        return true;
    }
    assert!(!in_ci(), "CI runs the suite as root");
    eprintln!("SKIPPED: not root (the attack is on a root-run netchaos)");
    false
}

/// `nobody` fills the shared directory with what the old demo would
/// have used for the next few hundred PIDs: `netchaos-demo-<pid>/NN.jsonl`,
/// the fixed report name, the resolver's and CA's files, each a link to
/// the victim; `netchaos demo` (as root, TMPDIR there) follows none.
#[test]
fn planted_links_in_a_shared_tmp_do_not_redirect_the_demo() {
    if !root_only() {
        return;
    }
    let shared = Shared::new();
    let tmp = shared.tmp();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1);
    let mut planted = vec![shared.plant("netchaos-demo-report.html")];
    for pid in last..last + 400 {
        let dir = tmp.join(format!("netchaos-demo-{pid}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        for n in 0..4 {
            let link = dir.join(format!("{n:02}.jsonl"));
            symlink(shared.victim(), &link).unwrap();
            lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
            planted.push(link);
        }
        lchown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        planted.push(shared.plant(&format!("netchaos-demo-resolv-{pid}.conf")));
        planted.push(shared.plant(&format!("netchaos-demo-ca-{pid}.pem")));
    }
    let out = Command::new(BIN)
        .args(["demo", "--only", "healthy"])
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    assert!(text.contains("ok (HTTP 200, complete)"), "{text}");
    shared.assert_victim_untouched();
    for link in &planted {
        assert_eq!(std::fs::read_link(link).unwrap(), shared.victim());
    }
    // The report: a fresh private file of root's, its path printed.
    let report = text
        .lines()
        .find_map(|l| l.split("connection and fault): ").nth(1))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no report path in:\n{text}"));
    assert_eq!(report.parent(), Some(tmp.as_path()));
    let m = std::fs::symlink_metadata(&report).unwrap();
    assert!(m.is_file(), "{report:?}");
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600));
    assert!(
        std::fs::read_to_string(&report)
            .unwrap()
            .contains("data-lanes=\"1\"")
    );
    // Nothing else of root's is left behind: the private directory went.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::symlink_metadata(p).unwrap().uid() == 0 && *p != report)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `--events`, `--report`, `--tls-ca-out` and `report -o` naming
/// `nobody`'s link in the shared directory: refused before anything
/// starts, with the reason; a link of the running user's is followed.
#[test]
fn user_named_outputs_follow_no_other_users_link() {
    if !root_only() {
        return;
    }
    let shared = Shared::new();
    let link = shared.plant("out");
    let l = link.to_str().unwrap();
    for args in [
        vec!["--events", l],
        vec!["--report", l],
        vec!["--tls", "--tls-ca-out", l],
    ] {
        let marker = shared.tmp().join("ran");
        let (code, _, err) = wrapped(&args, &["touch", marker.to_str().unwrap()]);
        assert_ne!(code, 0, "{args:?}: {err}");
        assert!(
            err.contains("a symbolic link owned by uid 65534") && err.contains(l),
            "{args:?}: {err}"
        );
        assert!(!marker.exists(), "{args:?}: the command ran");
        shared.assert_victim_untouched();
    }
    // `netchaos report -o`, and a link among the directories.
    let log = shared.top.path().join("private/log.jsonl");
    std::fs::write(&log, "").unwrap();
    let dir_link = shared.tmp().join("d");
    symlink(shared.top.path().join("private"), &dir_link).unwrap();
    lchown(&dir_link, Some(NOBODY), Some(NOBODY)).unwrap();
    for out in [link.clone(), dir_link.join("victim")] {
        let (code, _, err) =
            netchaos(&["report", log.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_ne!(code, 0, "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
        shared.assert_victim_untouched();
    }
    // root's own link, to a file of root's: followed; a new log is 0600.
    let mine = shared.tmp().join("mine");
    let target = shared.top.path().join("private/events.jsonl");
    symlink(&target, &mine).unwrap();
    let (code, _, err) = wrapped(&["--events", mine.to_str().unwrap()], &["true"]);
    assert_eq!(code, 0, "{err}");
    let m = std::fs::metadata(&target).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .contains("\"event\":\"start\"")
    );
}

/// The event log of a command that opens connection after connection:
/// 0600, at most its `--events-max` plus one `truncated` line, the
/// summary counting every connection; neither the log nor the report
/// holds the API token (given as a flag, in the environment, or handed
/// to the command); the temporary log behind `--report` alone is 0600.
#[test]
fn the_event_log_is_private_bounded_and_holds_no_token() {
    if missing_tool("python3") {
        return;
    }
    let upstream = Server::echo("127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let page = dir.path().join("report.html");
    let conns = 600;
    let script = format!(
        "import socket\nfor _ in range({conns}):\n    socket.create_connection(('127.0.0.1', {})).close()\n# ENVTOKEN987 FLAGTOKEN123",
        upstream.addr.port()
    );
    let mut c = Command::new(BIN);
    c.env("NETCHAOS_API_TOKEN", "ENVTOKEN987");
    let (code, _, err) = wrapped_with(
        c,
        &[
            "--api",
            "127.0.0.1:0",
            "--api-token",
            "FLAGTOKEN123",
            "--events-max",
            "64KiB",
            "--events",
            log.to_str().unwrap(),
            "--report",
            page.to_str().unwrap(),
        ],
        &["python3", "-c", &script],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&log).unwrap();
    let m = std::fs::metadata(&log).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600, "the log is private");
    let last = text.lines().last().unwrap();
    let end: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(end["event"], "truncated", "{last}");
    assert_eq!(end["max_bytes"], 64 * 1024);
    assert!(
        (text.len() - last.len() - 1) as u64 <= 64 * 1024,
        "{} bytes before the truncated line",
        text.len() - last.len() - 1
    );
    assert!(
        err.contains(&format!("connections: {conns} ")),
        "the summary counts them all: {err}"
    );
    assert!(err.contains("event log: cut at its size (64KiB"), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("reached its size"), "the report says so");
    for secret in ["FLAGTOKEN123", "ENVTOKEN987"] {
        assert!(!text.contains(secret), "{secret} in the log");
        assert!(!html.contains(secret), "{secret} in the report");
    }
    assert!(
        text.contains("<hidden>"),
        "the argv line says it was hidden"
    );

    // --report alone: its temporary log is the run's own, 0600.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut c = Command::new(BIN);
    c.env("TMPDIR", &tmp);
    let alone = dir.path().join("alone.html");
    let (code, out, err) = wrapped_with(
        c,
        &["--report", alone.to_str().unwrap()],
        &["sh", "-c", "stat -c %a \"$TMPDIR\"/netchaos-events-*.jsonl"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "600");
    assert!(
        std::fs::read_dir(&tmp).unwrap().next().is_none(),
        "removed after"
    );
    assert!(alone.exists());
}
