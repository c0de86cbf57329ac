//! `netchaos drill FILE.toml` (or `--builtin NAME -- COMMAND`): runs a
//! drill ([`crate::drill`]) and prints its table and what failed; writes
//! JSON, JUnit XML and an HTML report when asked; exits 0 only when every
//! check held.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::{DrillArgs, Global};
use crate::drill::{builtin, output, run, spec};
use crate::error::{Error, Result};

pub(super) fn run(_g: &Global, args: &DrillArgs) -> Result<u8> {
    if args.list {
        for (name, text) in builtin::DRILLS {
            let d = spec::parse(name, text, Some("true".into())).map_err(Error::runtime)?;
            println!(
                "{name:<16} {} scenario(s): {}",
                d.scenarios.len(),
                first_line(&d.hypothesis)
            );
        }
        return Ok(0);
    }
    if let Some(name) = &args.show {
        print!("{}", builtin::get(name).map_err(Error::Usage)?);
        return Ok(0);
    }
    let command = match args.command.as_slice() {
        [] => None,
        words => Some(shell_words(words)),
    };
    let (text, origin) = match (&args.builtin, &args.file) {
        (Some(name), _) => {
            if command.is_none() {
                return Err(Error::Usage(format!(
                    "--builtin {name}: give the command under test after --, e.g. netchaos drill --builtin {name} -- python my_agent.py"
                )));
            }
            (
                builtin::get(name).map_err(Error::Usage)?.to_string(),
                name.clone(),
            )
        }
        (None, Some(file)) => (
            std::fs::read_to_string(file)
                .map_err(|e| Error::Usage(format!("{}: {e}", file.display())))?,
            file.display().to_string(),
        ),
        (None, None) => return Err(Error::Usage("a drill file, or --builtin NAME".into())),
    };
    let mut drill = spec::parse(&origin, &text, command).map_err(Error::Usage)?;
    if let Some(n) = args.repeat {
        if n == 0 || n > 100 {
            return Err(Error::Usage(format!(
                "--repeat {n}: between 1 and 100 seeds"
            )));
        }
        drill.repeat = n;
    }
    // The outputs asked for are made before anything runs: a path that
    // cannot be written stops the drill at once.
    let json = open_out(args.json.as_deref())?;
    let junit = open_out(args.junit.as_deref())?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::runtime(format!("cannot find netchaos's own binary: {e}")))?;
    let temp;
    let dir: &Path = match &args.keep_logs {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::Usage(format!("--keep-logs {}: {e}", d.display())))?;
            d
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("netchaos-drill-")
                .tempdir()
                .map_err(|e| {
                    Error::runtime(format!("cannot make a directory for the logs: {e}"))
                })?;
            temp.path()
        }
    };
    let runs = drill.clients.len() * (1 + drill.scenarios.len() * drill.repeat as usize);
    eprintln!(
        "netchaos: drill {}: {} client(s), {} scenario(s) × {} seed(s): {runs} run(s)\n  hypothesis: {}",
        drill.name,
        drill.clients.len(),
        drill.scenarios.len(),
        drill.repeat,
        first_line(&drill.hypothesis)
    );
    for s in &drill.scenarios {
        let what = match &s.fault {
            spec::Fault::Flag(f) => format!("--fault {f}"),
            spec::Fault::Profile(p) => format!("-p {p}"),
        };
        match &s.description {
            Some(d) => eprintln!("  scenario {}: {d} ({what})", s.name),
            None => eprintln!("  scenario {}: {what}", s.name),
        }
    }
    let mut n = 0;
    let outcome = run::execute(&drill, &exe, dir, &mut |r| {
        n += 1;
        let verdict = match (r.pass(), r.aborted, &r.error) {
            (_, _, Some(_)) => "error",
            (_, true, _) => "aborted",
            (true, _, _) => "pass",
            (false, _, _) => "FAIL",
        };
        eprintln!(
            "  [{n}] {} / {} (seed {}): {} request(s), {} attempt(s): {verdict}",
            r.scenario, r.client, r.seed, r.summary.requests, r.summary.attempts
        );
    });
    // With the JSON on standard output, the table goes to standard error.
    let json_out = args.json.as_deref() == Some(Path::new("-"));
    let mut out: Box<dyn Write> = match json_out {
        true => Box::new(std::io::stderr().lock()),
        false => Box::new(std::io::stdout().lock()),
    };
    let _ = writeln!(out, "\n{}", output::drill_table(&outcome));
    let failures = output::failures(&outcome);
    if !failures.is_empty() {
        let _ = write!(out, "{failures}");
    }
    let pass = outcome.pass();
    let _ = writeln!(
        out,
        "drill {}: {}",
        drill.name,
        match pass {
            true => "every check held",
            false => "the hypothesis did not hold",
        }
    );
    drop(out);
    if let Some((path, mut f)) = json {
        let v = output::drill_json(&drill, &outcome);
        let text =
            serde_json::to_string_pretty(&v).map_err(|e| Error::runtime(e.to_string()))? + "\n";
        f.write_all(text.as_bytes())
            .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    if let Some((path, mut f)) = junit {
        f.write_all(output::junit(&drill, &outcome).as_bytes())
            .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    }
    if let Some(report) = &args.report {
        write_report(report, &drill, &outcome)?;
    }
    if args.keep_logs.is_some() {
        eprintln!(
            "netchaos: each run's event log and output are in {}",
            dir.display()
        );
    }
    Ok(if pass {
        0
    } else {
        super::records::CHECK_FAILED
    })
}

fn first_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Words after `--` as one shell command line (each quoted where needed).
fn shell_words(words: &[String]) -> String {
    if let [one] = words {
        // One word is taken as a command line as it is: `-- "python a.py"`.
        return one.clone();
    }
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An output file (`-`: standard output), made before the drill runs.
fn open_out(path: Option<&Path>) -> Result<Option<(PathBuf, Box<dyn Write>)>> {
    let Some(p) = path else { return Ok(None) };
    if p == Path::new("-") {
        return Ok(Some((p.to_path_buf(), Box::new(std::io::stdout()))));
    }
    let f = crate::outfile::create(p, 0o644)
        .map_err(|e| Error::Usage(format!("cannot write {}: {e}", p.display())))?;
    Ok(Some((p.to_path_buf(), Box::new(f))))
}

/// The HTML report: the drill's table and verdicts, and each run's
/// timeline (`netchaos report` of its log) beside it, linked.
fn write_report(path: &Path, drill: &spec::Drill, o: &run::Outcome) -> Result<()> {
    use crate::drill::output::xml;
    let stem = path.with_extension("");
    let mut links = String::new();
    for r in &o.runs {
        let page = PathBuf::from(format!(
            "{}-{}-{}-seed{}.html",
            stem.display(),
            run::safe(&r.scenario),
            run::safe(&r.client),
            r.seed
        ));
        let written = crate::outfile::create(&page, 0o644)
            .map_err(|e| e.to_string())
            .and_then(|f| {
                crate::report::write(&[r.log.as_path()], f, &page).map_err(|e| e.to_string())
            });
        let name = page
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        links.push_str(&match written {
            Ok(_) => format!(
                "<li><a href=\"{}\">{} / {} (seed {})</a>: {}</li>\n",
                xml(&name),
                xml(&r.scenario),
                xml(&r.client),
                r.seed,
                if r.pass() { "pass" } else { "FAIL" }
            ),
            Err(e) => format!(
                "<li>{} / {}: no timeline ({})</li>\n",
                xml(&r.scenario),
                xml(&r.client),
                xml(&e)
            ),
        });
    }
    let html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>netchaos drill {name}</title>\
<style>body{{font-family:system-ui,sans-serif;margin:2em}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style></head>\
<body><h1>Drill {name}</h1><p><b>Hypothesis:</b> {hyp}</p><h2>Verdicts</h2><pre>{table}</pre><pre>{fail}</pre>\
<h2>Each run's timeline</h2><ul>\n{links}</ul></body></html>\n",
        name = xml(&drill.name),
        hyp = xml(drill.hypothesis.trim()),
        table = xml(&output::drill_table(o)),
        fail = xml(&output::failures(o)),
    );
    let mut f = crate::outfile::create(path, 0o644)
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    f.write_all(html.as_bytes())
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    eprintln!("netchaos: drill report written to {}", path.display());
    Ok(())
}
