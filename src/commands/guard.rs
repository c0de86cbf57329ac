//! `--stop-if "error_rate > 0.2 over 30s"`: the staging guard-rail. The
//! HTTP attempts that ended in the window are counted as they end; once
//! the condition holds ([`StopIf`]), every rule's faults are removed at
//! once (open connections follow), a `stop_if` line is logged and a
//! warning says so. Traffic goes on unharmed; the command is not stopped.

use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::drill::stop::StopIf;
use crate::events::Events;
use crate::relay::Relay;

/// How often the rate is looked at.
const EVERY: Duration = Duration::from_millis(200);

/// Watches the error rate and removes the faults once it crosses the line.
pub(super) fn start(relay: &Arc<Relay>, events: &Arc<Events>, stop: Option<StopIf>) {
    let Some(stop) = stop else { return };
    events.watch_errors(stop.over);
    let (relay, events) = (relay.clone(), events.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            let (attempts, failed) = events.error_rate();
            if !stop.crossed(attempts, failed) {
                continue;
            }
            for rule in relay.rules.rules() {
                rule.set_faults(Vec::new());
            }
            events.stopped_if(&stop.text, attempts, failed);
            tracing::warn!(
                "--stop-if {:?}: {failed} of the last {attempts} HTTP attempts failed; every fault is removed",
                stop.text
            );
            return;
        }
    });
}
