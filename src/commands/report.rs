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
    let file = crate::outfile::create(&args.output, 0o600)
        .map_err(|e| Error::runtime(format!("cannot write the report: {e}")))?;
    crate::report::write_model(&model, file, &args.output).map_err(Error::runtime)?;
    eprintln!(
        "netchaos: report of {} connection(s) and {} fault(s) written to {}",
        model.summary.conns,
        model.summary.fault_events,
        args.output.display()
    );
    Ok(0)
}

/// A report to write at exit.
pub(super) struct Pending {
    pub(super) out: PathBuf,
    /// The page, opened at the start (taken when written).
    pub(super) file: std::sync::Mutex<Option<std::fs::File>>,
    /// The run's log.
    pub(super) log: PathBuf,
    /// The log exists only for the report: removed when this is dropped.
    pub(super) _temporary: Option<std::sync::Arc<tempfile::TempPath>>,
}

impl Pending {
    /// Writes the report from the run's log (closed by now) and `more`
    /// logs; where it went, or a warning that says why not.
    pub(super) fn write(&self, more: &[&Path]) -> Option<&Path> {
        let mut logs = vec![self.log.as_path()];
        logs.extend_from_slice(more);
        let file = self.file.lock().expect("report lock").take()?;
        match crate::report::write(&logs, file, &self.out) {
            Ok(_) => Some(&self.out),
            Err(e) => {
                tracing::warn!("no report: {e}");
                None
            }
        }
    }
}
