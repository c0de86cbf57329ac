//! The checks `scripts/vm.sh` runs inside a virtual machine booted on
//! Debian's own kernel (x86_64 or arm64): netem measured on real traffic,
//! and `run`/`attach` with the connect and packet faults on that kernel.
//! It is its own `main` (no libtest): the VM has no cargo, and the
//! harness reads the last line, `N passed, M failed`.
//!
//! On the development machine it does nothing and says so: its checks
//! change the machine's qdiscs and modules, which only a throwaway kernel
//! may have done to it.

mod netem;
mod probe;
mod run;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The outcome of one check: what was measured, or why it failed.
pub type Outcome = Result<String, String>;

/// Fails the check with a message unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Shell functions that make `ip` and `tc` mean iproute2's: Debian's
/// busybox shell runs its own applets of those names ahead of the PATH.
pub const PRELUDE: &str = "ip() { /usr/sbin/ip \"$@\"; }; tc() { /usr/sbin/tc \"$@\"; }; ";

/// A shell command's exit code, stdout and stderr; bounded by `timeout`.
pub fn sh(script: &str) -> (i32, String, String) {
    let out = Command::new("timeout")
        .args(["120", "sh", "-c", &format!("{PRELUDE}{script}")])
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a shell command that must succeed; its stdout.
pub fn must(script: &str) -> Result<String, String> {
    match sh(script) {
        (0, out, _) => Ok(out),
        (c, out, err) => Err(format!("`{script}` exited {c}: {out}{err}")),
    }
}

/// The netchaos binary under test.
pub fn bin() -> String {
    std::env::var("NETCHAOS_BIN").unwrap_or_else(|_| "/bin/netchaos".into())
}

/// Waits (bounded) until `f` holds.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Result<(), String> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{what}: not within {limit:?}"))
}

type Check = (&'static str, fn() -> Outcome);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("client") {
        std::process::exit(probe::client(&args[1..]));
    }
    if std::env::var_os("NETCHAOS_VM_GUEST").is_none() {
        println!(
            "vm_guest: nothing to do here; these checks run inside a VM on Debian's kernel: \
             scripts/vm.sh x86_64|aarch64"
        );
        return;
    }
    let only: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let mut checks: Vec<Check> = Vec::new();
    checks.extend_from_slice(netem::CHECKS);
    checks.extend_from_slice(run::CHECKS);
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in checks {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let t = Instant::now();
        let outcome = std::panic::catch_unwind(f)
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))));
        let secs = t.elapsed().as_secs_f64();
        match outcome {
            Ok(detail) => {
                passed += 1;
                println!("ok   {name} ({secs:.1} s): {detail}");
            }
            Err(why) => {
                failed += 1;
                println!("FAIL {name} ({secs:.1} s): {why}");
            }
        }
        // Whatever a check left behind must not decide the next one.
        netem::reset_lo();
    }
    // A name that picked nothing is a mistake, not a pass.
    if passed + failed == 0 {
        println!("FAIL no check is named like {only:?}");
        failed = 1;
    }
    println!("{passed} passed, {failed} failed");
    std::process::exit(i32::from(failed > 0));
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
