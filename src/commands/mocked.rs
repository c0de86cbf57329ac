//! `--mock` on `run`, `proxy` and `attach`: the built-in mock started beside the
//! relay, on loopback in netchaos's own namespace, answering for the
//! plan's mocked hosts; the relay dials it in their place.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::events::Events;
use crate::mock::stands::Stands;
use crate::mock::{Mock, Timings, server::Server};
use crate::plan::Plan;

/// The mock while it runs: where it stands in, and how to stop it.
pub(crate) struct Running {
    pub(crate) stands: Arc<Stands>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops it once the relay is done (its open answers were drained
    /// with the relay's connections).
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Starts the mock for the plan's mocked hosts (none: `None`), with the
/// run's seed, counting its answers in `events`.
pub(crate) async fn start(
    plan: &Plan,
    timing: Timings,
    events: &Arc<Events>,
) -> Result<Option<Running>> {
    let hosts = plan.mocked_hosts();
    if hosts.is_empty() {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(|e| Error::runtime(format!("the mock cannot listen on loopback: {e}")))?;
    let at = listener
        .local_addr()
        .map_err(|e| Error::Runtime(e.into()))?;
    let mut apis: Vec<crate::mock::Api> = Vec::new();
    for (_, api) in &hosts {
        if !apis.contains(api) {
            apis.push(*api);
        }
    }
    let mut mock = Mock::new(apis, plan.seed, timing).with_hosts(&hosts);
    if let Some(c) = &plan.cassette {
        mock = mock.with_cassette(c.clone(), plan.replay_only_hosts());
    }
    let mock = Arc::new(mock);
    let counted = events.clone();
    let observer: crate::mock::server::Observer = Arc::new(move |status| {
        counted.stats.mock_answers.fetch_add(1, Ordering::Relaxed);
        if (400..500).contains(&status) {
            counted.stats.mock_refusals.fetch_add(1, Ordering::Relaxed);
        }
    });
    let stop = CancellationToken::new();
    let task = tokio::spawn(Server::new(mock, Some(observer)).serve(listener, stop.clone()));
    let stands = Arc::new(Stands::new(at, &hosts));
    if !super::quiet() {
        let names: Vec<String> = stands
            .hosts()
            .iter()
            .map(|s| format!("{} ({})", s.host, s.api.name()))
            .collect();
        eprintln!(
            "netchaos: the built-in mock answers for {} (never dialled)",
            names.join(", ")
        );
        if let Some(c) = &plan.cassette {
            eprintln!("netchaos: the mock answers from {} first", c.dirs);
        }
    }
    Ok(Some(Running { stands, stop, task }))
}

/// `--mock` and `[[mocks]]` where they cannot work (`run --in-place`,
/// `server`): refused before anything starts.
pub(crate) fn refuse(plan: &Plan, command: &str) -> Result<()> {
    let first = plan.mocks.first().map(|m| &m.loc);
    match first.or(plan.cassette_dirs.first().map(|(_, loc)| loc)) {
        Some(loc) => Err(Error::Usage(format!(
            "{}: the built-in mock works under `netchaos run`, `proxy` and `attach`, not `{command}` \
             (`netchaos mock` serves it on a port of its own)",
            loc
        ))),
        None => Ok(()),
    }
}
