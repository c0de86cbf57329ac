//! Running a drill: each client's steady state (its command under
//! `netchaos run` without faults; its checks must hold, or the client's
//! scenarios are not run: the drill is invalid for it), then each
//! scenario under its one fault, once per seed. Every run is this same
//! binary's `run` with `--records` and an event log of its own, its
//! command's output kept in a file beside it; its records are judged by
//! the scenario's checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::checks::{Check, Verdict};
use super::output::Summary;
use super::records;
use super::spec::{Drill, Fault};

/// The steady state's name where scenarios are named.
pub(crate) const STEADY: &str = "steady-state";

/// One run of one client: steady state or a scenario, one seed.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Run {
    pub scenario: String,
    pub client: String,
    pub seed: u64,
    /// The command's exit status (none: killed at the timeout).
    pub exit: Option<i32>,
    /// The stop condition was crossed: the faults were removed.
    pub aborted: bool,
    pub timed_out: bool,
    pub summary: Summary,
    /// Each logical request's time (ms), for percentiles over seeds.
    #[serde(skip)]
    pub request_ms: Vec<f64>,
    #[serde(serialize_with = "verdicts_json")]
    pub verdicts: Vec<Verdict>,
    /// Why the run could not be judged, if it could not.
    pub error: Option<String>,
    pub log: PathBuf,
    pub output: PathBuf,
}

fn verdicts_json<S: serde::Serializer>(vs: &[Verdict], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(vs.len()))?;
    for v in vs {
        seq.serialize_element(&serde_json::json!({
            "check": v.check,
            "pass": v.pass,
            "measured": v.measured,
            "offenders": v.offenders,
            "broken": v.broken,
        }))?;
    }
    seq.end()
}

impl Run {
    /// Every check held, and the run was whole.
    pub(crate) fn pass(&self) -> bool {
        self.error.is_none() && !self.aborted && self.verdicts.iter().all(|v| v.pass)
    }
}

/// A drill's runs, in the order they ran.
pub(crate) struct Outcome {
    pub runs: Vec<Run>,
    /// Clients whose steady state failed: their scenarios were not run.
    pub invalid: Vec<String>,
}

impl Outcome {
    pub(crate) fn pass(&self) -> bool {
        self.invalid.is_empty() && self.runs.iter().all(Run::pass)
    }
}

/// Runs `drill`: `exe` is netchaos, `dir` where the logs and outputs go;
/// `said` is told of each run as it ends.
pub(crate) fn execute(
    drill: &Drill,
    exe: &Path,
    dir: &Path,
    said: &mut dyn FnMut(&Run),
) -> Outcome {
    let mut out = Outcome {
        runs: Vec::new(),
        invalid: Vec::new(),
    };
    for (client, command) in &drill.clients {
        let steady = one(drill, exe, dir, client, command, None, drill.seed);
        said(&steady);
        let valid = steady.pass();
        out.runs.push(steady);
        if !valid {
            out.invalid.push(client.clone());
            continue;
        }
        for s in &drill.scenarios {
            for k in 0..u64::from(drill.repeat) {
                let run = one(drill, exe, dir, client, command, Some(s), drill.seed + k);
                said(&run);
                out.runs.push(run);
            }
        }
    }
    out
}

/// A file name's safe form of a name.
pub(crate) fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn one(
    drill: &Drill,
    exe: &Path,
    dir: &Path,
    client: &str,
    command: &str,
    scenario: Option<&super::spec::Scenario>,
    seed: u64,
) -> Run {
    let name = scenario.map_or(STEADY, |s| s.name.as_str());
    let stem = format!("{}-{}-seed{seed}", safe(name), safe(client));
    let log = dir.join(format!("{stem}.jsonl"));
    let output = dir.join(format!("{stem}.out"));
    let mut run = Run {
        scenario: name.to_string(),
        client: client.to_string(),
        seed,
        exit: None,
        aborted: false,
        timed_out: false,
        summary: Summary::of(&records::empty()),
        request_ms: Vec::new(),
        verdicts: Vec::new(),
        error: None,
        log: log.clone(),
        output: output.clone(),
    };
    let mut args: Vec<String> = vec![
        "run".into(),
        "-q".into(),
        "--records".into(),
        "--events".into(),
        log.display().to_string(),
        "--seed".into(),
        seed.to_string(),
        // Only for the header a rule groups by, which the lines then keep.
        "--group-by".into(),
        drill.group_by.to_string(),
    ];
    if !drill.mock.is_empty() {
        args.push("--mock".into());
        args.push(drill.mock.join(","));
    }
    let checks: &[Check] = match scenario {
        None => &drill.steady,
        Some(s) => {
            match &s.fault {
                Fault::Flag(f) => args.extend(["--fault".into(), f.clone()]),
                Fault::Profile(p) => args.extend(["-p".into(), p.clone()]),
            }
            match s.stop.as_ref().or(drill.stop.as_ref()) {
                Some(stop) if stop != "none" => args.extend(["--stop-if".into(), stop.clone()]),
                _ => {}
            }
            &s.checks
        }
    };
    args.extend(drill.run_args.iter().cloned());
    args.extend(["--".into(), "sh".into(), "-c".into(), command.to_string()]);
    // A log left by an earlier drill in a kept directory must not be
    // judged in place of this run's (netchaos may refuse to start).
    let _ = std::fs::remove_file(&log);
    let out_file = match std::fs::File::create(&output) {
        Ok(f) => f,
        Err(e) => {
            run.error = Some(format!("cannot write {}: {e}", output.display()));
            return run;
        }
    };
    let err_file = match out_file.try_clone() {
        Ok(f) => f,
        Err(e) => {
            run.error = Some(e.to_string());
            return run;
        }
    };
    let child = Command::new(exe)
        .args(&args)
        .envs(drill.env.iter().map(|(k, v)| (k, v)))
        .env("NETCHAOS_DRILL_SEED", seed.to_string())
        .env("NETCHAOS_DRILL_SCENARIO", name)
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            run.error = Some(format!("cannot start {}: {e}", exe.display()));
            return run;
        }
    };
    let deadline = Instant::now() + drill.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                run.timed_out = true;
                // netchaos passes SIGTERM on to the command, then cleans up.
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let grace = Instant::now() + Duration::from_secs(10);
                while Instant::now() < grace {
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                run.error = Some(e.to_string());
                let _ = child.kill();
                break child.wait().ok();
            }
        }
    };
    run.exit = status.and_then(|s| s.code());
    if run.timed_out {
        run.error = Some(format!(
            "the command ran past the drill's timeout ({})",
            humantime::format_duration(drill.timeout)
        ));
    }
    match records::read(&[log.as_path()], &drill.group_by) {
        Ok(r) => {
            run.aborted = r.stopped;
            run.summary = Summary::of(&r);
            run.request_ms = r
                .groups
                .iter()
                .map(|g| super::checks::request_ms(&r, g))
                .collect();
            run.verdicts = checks.iter().map(|c| c.judge(&r)).collect();
            if drill.exit_zero {
                run.verdicts.push(Verdict {
                    check: "command_exit".into(),
                    pass: run.exit == Some(0),
                    measured: match run.exit {
                        Some(c) => format!("the command exited {c}"),
                        None => "the command was killed".into(),
                    },
                    offenders: Vec::new(),
                    broken: usize::from(run.exit != Some(0)),
                });
            }
        }
        Err(e) => {
            // netchaos itself failed (bad fault, no privilege): its words
            // are in the output.
            let tail = std::fs::read_to_string(&output).unwrap_or_default();
            let last: Vec<&str> = tail.lines().rev().take(3).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            run.error
                .get_or_insert(format!("no records ({e}): {}", last.join(" / ")));
        }
    }
    run
}
