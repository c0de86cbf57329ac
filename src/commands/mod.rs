//! The subcommands, each wiring the library's parts together: read the
//! plan, open the event log, start listeners, wait for a signal or the
//! wrapped command, print the summary. One file per subcommand; shared
//! helpers here.

mod attach;
mod check;
mod clean;
mod ctl;
mod demo;
mod drill;
mod guard;
mod mock;
mod mocked;
mod netem;
mod proxy;
mod records;
mod report;
mod run;
mod tls;
mod wrap;

use std::sync::Arc;

use anyhow::Context;
use clap::ArgMatches;

use crate::cli::{Cli, Command};
use crate::error::{Error, Result};
use crate::events::Events;

/// `-q`: what a run says on success (the seed line, the summary) is left
/// out; errors and warnings are not (`-qq` leaves warnings out too).
static QUIET: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli, matches: &ArgMatches) -> Result<u8> {
    QUIET.store(cli.global.quiet, std::sync::atomic::Ordering::Relaxed);
    match &cli.command {
        Command::Proxy(args) => {
            let sub = matches.subcommand_matches("proxy").expect("proxy matches");
            proxy::run(&cli.global, args, sub)
        }
        Command::Run(args) if args.command.is_empty() => Err(Error::Usage(
            "nothing to run: give the command after `--`, as in \
             `netchaos run --fault latency:delay=100ms -- curl -s http://127.0.0.1:8080/`"
                .into(),
        )),
        Command::Run(args) if args.in_place => attach::in_place(&cli.global, args),
        Command::Run(args) => run::run(&cli.global, args),
        Command::Attach(args) => attach::attach(&cli.global, args),
        Command::Clean(args) => clean::clean(args),
        Command::Server(args) => proxy::server(&cli.global, args),
        Command::Ctl(args) => ctl::run(args),
        Command::Netem(args) => netem::run(&cli.global, args),
        Command::Check(args) => check::check(&cli.global, args),
        Command::Profiles => {
            check::profiles();
            Ok(0)
        }
        Command::Faults { name, markdown } => check::faults(name.as_deref(), *markdown),
        Command::Mock(args) => mock::run(&cli.global, args),
        Command::Demo(args) => demo::run(&cli.global, args),
        Command::Report(args) => report::run(args),
        Command::Records(args) => records::run(args),
        Command::Drill(args) => drill::run(&cli.global, args),
        Command::Schema => {
            print!("{}", crate::events::schema::json_schema());
            Ok(0)
        }
        Command::DemoClient { addr, pooled } => demo::client(addr, *pooled),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "netchaos", &mut std::io::stdout());
            Ok(0)
        }
        Command::Man { command, dir: None } => man(command.as_deref()),
        Command::Man { dir: Some(dir), .. } => man_pages(dir),
    }
}

/// `netchaos man [COMMAND]`: the manual page, from the clap definitions.
fn man(command: Option<&str>) -> Result<u8> {
    let root = <Cli as clap::CommandFactory>::command();
    let cmd = match command {
        None => root,
        Some(name) => {
            let names: Vec<String> = root
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name().to_string())
                .collect();
            root.find_subcommand(name)
                .cloned()
                .map(|c| c.name(format!("netchaos-{name}")))
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "no command {name:?}; the commands are {}",
                        names.join(", ")
                    ))
                })?
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| Error::runtime(e.to_string()))?;
    use std::io::Write;
    std::io::stdout()
        .write_all(&out)
        .map_err(|e| Error::runtime(e.to_string()))?;
    Ok(0)
}

/// `netchaos man --dir DIR`: every page, the command's and each visible
/// subcommand's (`netchaos-run.1`), as files: what a package installs.
fn man_pages(dir: &std::path::Path) -> Result<u8> {
    let root = <Cli as clap::CommandFactory>::command();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(Error::from)?;
    let mut pages = vec![("netchaos".to_string(), root.clone())];
    for sub in root.get_subcommands().filter(|c| !c.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("netchaos-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut out)
            .map_err(|e| Error::runtime(e.to_string()))?;
        std::fs::write(&path, out)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(Error::from)?;
    }
    Ok(0)
}

/// Keeps the relay's freed read buffers for reuse instead of handing them
/// back to the kernel. The fault pipeline reads in chunks of up to 512
/// KiB, each freed once written; glibc's defaults return such a chunk to
/// the kernel (its dynamic thresholds trim the heap top) and fault fresh,
/// zeroed pages in for the next: 2.1 million page faults in 12 s of
/// iperf3 through `latency:delay=0`, against 1,800 with these settings,
/// and 0.39-0.43x direct throughput against 0.55-0.62x (interleaved
/// rounds). Free memory kept is bounded by the trim threshold; a user's
/// own malloc settings (`GLIBC_TUNABLES`, `MALLOC_*_`) win.
fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let users = std::env::vars_os().any(|(k, v)| {
            let k = k.to_string_lossy();
            k.starts_with("MALLOC_")
                || (k == "GLIBC_TUNABLES" && v.to_string_lossy().contains("malloc"))
        });
        if users {
            return;
        }
        // SAFETY: mallopt only sets two allocator parameters, under the
        // allocator's own lock; any thread may call it at any time.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        }
    }
}

/// The runtime: one worker thread per two CPUs (`NETCHAOS_THREADS`
/// overrides), and a single-threaded runtime where that is one. A relay is
/// light on CPU and heavy on wake-ups: the programs it sits between need
/// the other half of the machine, and on a small machine a second worker
/// mostly adds cross-thread hand-offs. Measured on 2 cores against two
/// workers, in interleaved rounds: 9–15 % more connections opened per
/// second (three runs), bulk as fast, and 64-byte round trips the same
/// within their spread (one run 5 µs faster, one 4 µs slower).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    keep_freed_buffers();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = match std::env::var("NETCHAOS_THREADS") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "NETCHAOS_THREADS must be a number of threads above 0, got {v:?}"
                ))
            })?,
        Err(_) => (cpus / 2).max(1),
    };
    let mut b = if threads == 1 {
        crate::timer::tighten_slack();
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all()
        .on_thread_start(crate::timer::tighten_slack)
        .build()
        .context("cannot start the async runtime")
        .map_err(Error::Runtime)
}

/// Opens the event log named by `--events` (with `--report` and no
/// `--events`, a private temporary one) and, with `--report`, the page
/// to write at exit: both now, so that a path netchaos must not write
/// (another user's link: see `outfile`) stops it before anything starts.
/// [`Recording::finish`] ends them.
pub(crate) fn open_events(log: &crate::cli::EventsArg) -> Result<Recording> {
    let cannot =
        |what: &str, e: std::io::Error| Error::runtime(format!("cannot write {what}: {e}"));
    // Checked before anything is made.
    let rule = crate::drill::records::GroupBy::parse(&log.group_by).map_err(Error::Usage)?;
    let checks = crate::drill::checks::parse_all(&log.expect).map_err(Error::Usage)?;
    let stop_if = match &log.stop_if {
        Some(s) => Some(guard::StopIf::parse(s).map_err(Error::Usage)?),
        None => None,
    };
    let report = match &log.report {
        Some(out) => Some((
            out.clone(),
            crate::outfile::create(out, 0o600).map_err(|e| cannot("the report", e))?,
        )),
        None => None,
    };
    // The records --expect judges and --stop-if counts are the log's.
    let records = log.records || log.record.is_some() || !checks.is_empty() || stop_if.is_some();
    if let Some(dir) = &log.record {
        crate::http::tape::start(dir)
            .map_err(|e| Error::Usage(format!("--record {}: {e}", dir.display())))?;
    }
    let needs_log = report.is_some() || records;
    let (file, path, temporary) = match &log.events {
        Some(p) => (
            Some(crate::outfile::create(p, 0o600).map_err(|e| cannot("the event log", e))?),
            Some(p.clone()),
            None,
        ),
        None if needs_log => {
            let (file, path) = crate::outfile::private_file("netchaos-events-", ".jsonl")
                .map_err(|e| cannot("a temporary event log", e))?
                .into_parts();
            (Some(file), Some(path.to_path_buf()), Some(path))
        }
        None => (None, None, None),
    };
    let events = Arc::new(match file {
        Some(f) => Events::to_file(f, log.events_max),
        None => Events::in_memory(),
    });
    if records {
        events.follow_http();
    }
    // A header the attempts are grouped by is kept on their lines.
    if let crate::drill::records::GroupBy::Header(h) = &rule {
        crate::http::attempt::also_keep(h);
    }
    let temporary = temporary.map(Arc::new);
    Ok(Recording {
        events,
        report: report.map(|(out, file)| report::Pending {
            out,
            file: std::sync::Mutex::new(Some(file)),
            log: path.clone().expect("a report has a log"),
            _temporary: temporary.clone(),
        }),
        expect: (!checks.is_empty()).then(|| Expect {
            checks,
            rule,
            log: path.expect("checks have a log"),
            _temporary: temporary,
        }),
        stop_if,
    })
}

/// `--expect`: the checks to judge the log by at exit.
struct Expect {
    checks: Vec<crate::drill::checks::Check>,
    rule: crate::drill::records::GroupBy,
    log: std::path::PathBuf,
    _temporary: Option<Arc<tempfile::TempPath>>,
}

/// The event log and, with `--report`, the report to write from it at
/// exit; with `--expect`, the checks to judge it by.
pub(crate) struct Recording {
    pub(crate) events: Arc<Events>,
    report: Option<report::Pending>,
    expect: Option<Expect>,
    stop_if: Option<guard::StopIf>,
}

impl Recording {
    /// Starts `--stop-if`'s watch over the relay's faults.
    pub(crate) fn guard(&self, relay: &Arc<crate::relay::Relay>) {
        guard::start(relay, &self.events, self.stop_if.clone());
    }

    /// Prints the exit summary (which closes the log), then writes the
    /// report. A report that cannot be written is a warning: the run's
    /// own exit status stands. Whether every `--expect` check held.
    pub(crate) fn finish(&self, seed: u64) -> bool {
        if !quiet() {
            eprint!("{}", self.events.summary(seed));
        } else {
            self.events.close();
        }
        if let Some(out) = self.report(&[])
            && !quiet()
        {
            eprintln!("netchaos: report written to {}", out.display());
        }
        if let Some((dir, n)) = crate::http::tape::written()
            && !quiet()
        {
            eprintln!("netchaos: recorded {n} exchange(s) into {}", dir.display());
        }
        let Some(x) = &self.expect else { return true };
        let judged = crate::drill::records::read(&[x.log.as_path()], &x.rule).map(|r| {
            let vs: Vec<_> = x.checks.iter().map(|c| c.judge(&r)).collect();
            (r.groups.len(), r.recs.len(), vs)
        });
        match judged {
            Ok((requests, attempts, vs)) => {
                let pass = vs.iter().all(|v| v.pass);
                // Said even under -q when a check failed: it decides the
                // exit status.
                if !quiet() || !pass {
                    eprint!(
                        "netchaos: checks on {requests} request(s), {attempts} attempt(s):\n{}",
                        crate::drill::output::verdicts(&vs)
                    );
                }
                pass
            }
            Err(e) => {
                eprintln!("netchaos: cannot judge the records: {e}");
                false
            }
        }
    }

    /// Writes the report (if one was asked for) from the log, closed by
    /// now, and `more` logs on the same time axis.
    pub(crate) fn report(&self, more: &[&std::path::Path]) -> Option<&std::path::Path> {
        self.report.as_ref().and_then(|r| r.write(more))
    }
}

/// The control API as the command line asked for it, checked before
/// anything starts.
pub(crate) struct ApiConfig {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) token: Option<String>,
    /// `run --api-for-command`: the command's own token (when the API
    /// needs one).
    pub(crate) command_token: Option<String>,
    pub(crate) files: crate::settings::files::FilePolicy,
    /// `--api-listen-allow`.
    pub(crate) listen_allow: bool,
    /// What `/metrics` adds (`server --runtime-metrics`).
    pub(crate) metrics: crate::control::metrics::Extra,
    /// A second address on the same port, served when it can be bound:
    /// `[::1]` beside `127.0.0.1` for the host `localhost`, which clients
    /// may try first on IPv6.
    pub(crate) also: Option<std::net::SocketAddr>,
}

impl ApiConfig {
    /// `None` when no API was asked for.
    pub(crate) fn new(
        addr: Option<std::net::SocketAddr>,
        access: &crate::cli::ApiAccess,
    ) -> Result<Option<ApiConfig>> {
        let Some(addr) = addr else { return Ok(None) };
        let token = access.token()?;
        crate::control::check_api_addr(addr, token.as_deref())?;
        Ok(Some(ApiConfig {
            addr,
            token,
            command_token: None,
            files: access.files()?,
            listen_allow: access.api_listen_allow,
            metrics: Default::default(),
            also: None,
        }))
    }
}

impl ApiConfig {
    /// The tokens the API takes: the operator's and the command's.
    fn tokens(&self) -> Vec<String> {
        self.token
            .iter()
            .chain(&self.command_token)
            .cloned()
            .collect()
    }
}

/// The API's state over `relay` (with the file policy its toxics get).
pub(crate) fn api_control(
    relay: &Arc<crate::relay::Relay>,
    reach: crate::control::Reach,
    api: Option<&ApiConfig>,
) -> Arc<crate::control::Control> {
    let files = api.map_or(crate::settings::files::FilePolicy::Nowhere, |a| {
        a.files.clone()
    });
    let metrics = api.map(|a| a.metrics).unwrap_or_default();
    let listen_allow = api.is_some_and(|a| a.listen_allow);
    crate::control::Control::new(relay.clone(), reach, files, metrics, listen_allow)
}

/// Starts the control API when one was asked for, printing where it
/// listens.
pub(crate) async fn start_api(
    api: Option<&ApiConfig>,
    control: Arc<crate::control::Control>,
    stop: tokio_util::sync::CancellationToken,
) -> Result<Option<std::net::SocketAddr>> {
    let mut listening = None;
    if let Some(api) = api {
        let bound =
            crate::control::serve(api.addr, control.clone(), &api.tokens(), stop.clone()).await?;
        eprintln!("netchaos: control API on http://{bound} (Toxiproxy-compatible)");
        listening = Some(bound);
        if let Some(also) = api.also {
            let also = std::net::SocketAddr::new(also.ip(), bound.port());
            if crate::control::serve(also, control, &api.tokens(), stop)
                .await
                .is_ok()
            {
                tracing::debug!("control API also on http://{also}");
            }
        }
    }
    Ok(listening)
}

pub(crate) fn announce_seed(seed: u64) {
    if !quiet() {
        eprintln!("netchaos: seed {seed} (replay this run with --seed {seed})");
    }
}

/// SIGINT, SIGTERM and SIGHUP handlers, installed up front: between
/// installing something (a table in another namespace) and waiting for the
/// signal to remove it, a signal must find them in place.
pub(crate) struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub(crate) fn install() -> Result<ShutdownSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        let fail = |e: std::io::Error| Error::runtime(format!("cannot handle signals: {e}"));
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).map_err(fail)?,
            int: signal(SignalKind::interrupt()).map_err(fail)?,
            hup: signal(SignalKind::hangup()).map_err(fail)?,
        })
    }

    /// Completes on the next signal, naming it.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}
