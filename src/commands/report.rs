//! `netchaos report EVENTS.jsonl... -o report.html`, and the report that
//! `--report FILE` writes at exit from the run's own log.

use std::path::{Path, PathBuf};

use crate::cli::ReportArgs;
use crate::error::{Error, Result};

pub(super) fn run(args: &ReportArgs) -> Result<u8> {
    let logs: Vec<&Path> = args.logs.iter().map(PathBuf::as_path).collect();
    // A log that cannot be read is bad input (nothing was written); a page
    // that cannot be written is a failure at run time.
    let model = crate::report::read(&logs).map_err(|e| Error::Usage(e.to_string()))?;
    crate::report::write_model(&model, &args.output).map_err(Error::runtime)?;
    eprintln!(
        "netchaos: report of {} connection(s) and {} fault(s) written to {}",
        model.summary.conns,
        model.summary.fault_events,
        args.output.display()
    );
    Ok(0)
}

/// Where `--report` without `--events` records the run: a file of this
/// process's own in the temporary directory, removed once the report is
/// written.
pub(super) fn temporary_log() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "netchaos-events-{}-{nanos}.jsonl",
        std::process::id()
    ))
}

/// A report to write at exit.
pub(super) struct Pending {
    pub(super) out: PathBuf,
    /// The run's log.
    pub(super) log: PathBuf,
    /// The log exists only for the report.
    pub(super) temporary: bool,
}

impl Pending {
    /// Writes the report from the run's log (closed by now) and `more`
    /// logs; where it went, or a warning that says why not.
    pub(super) fn write(&self, more: &[&Path]) -> Option<&Path> {
        let mut logs = vec![self.log.as_path()];
        logs.extend_from_slice(more);
        match crate::report::write(&logs, &self.out) {
            Ok(_) => Some(&self.out),
            Err(e) => {
                tracing::warn!("no report: {e}");
                None
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}
