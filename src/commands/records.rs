//! `netchaos records EVENTS.jsonl...`: the request records of event logs,
//! as a table, JSON or CSV, and judged by `--expect` checks.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::RecordsArgs;
use crate::drill::{checks, output, records};
use crate::error::{Error, Result};

/// The exit status when a check fails (the command, if any, passed).
pub(crate) const CHECK_FAILED: u8 = 3;

pub(super) fn run(args: &RecordsArgs) -> Result<u8> {
    let rule = records::GroupBy::parse(&args.group_by).map_err(Error::Usage)?;
    let checks = checks::parse_all(&args.expect).map_err(Error::Usage)?;
    let logs: Vec<&Path> = args.logs.iter().map(PathBuf::as_path).collect();
    let r = records::read(&logs, &rule).map_err(Error::Usage)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if args.json {
        output::json(&r, &mut out)
    } else if args.csv {
        output::csv(&r, &mut out)
    } else {
        output::table(&r, &mut out)
    };
    // A closed pipe (`| head`) is no failure of ours.
    let _ = written.and_then(|()| out.flush());
    drop(out);
    if checks.is_empty() {
        return Ok(0);
    }
    let verdicts: Vec<_> = checks.iter().map(|c| c.judge(&r)).collect();
    eprint!("netchaos: checks\n{}", output::verdicts(&verdicts));
    Ok(match verdicts.iter().all(|v| v.pass) {
        true => 0,
        false => CHECK_FAILED,
    })
}
