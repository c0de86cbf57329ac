//! The subcommands, each wiring the library's parts together: read the
//! plan, open the event log, start listeners, wait for a signal, print the
//! summary.

use std::sync::Arc;

use anyhow::Context;
use clap::ArgMatches;

use crate::cli::{CheckArgs, Cli, Command, Global, ProxyArgs};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::plan::Flow;
use crate::profile::{self, builtin};
use crate::relay::{self, Endpoint, Relay, RelayOptions};

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli, matches: &ArgMatches) -> Result<u8> {
    match &cli.command {
        Command::Proxy(args) => {
            let sub = matches.subcommand_matches("proxy").expect("proxy matches");
            proxy(&cli.global, args, sub)
        }
        Command::Check(args) => check(&cli.global, args),
        Command::Profiles => {
            profiles();
            Ok(0)
        }
        Command::Demo(args) => crate::demo::run(&cli.global, args),
    }
}

/// A multi-threaded runtime sized to the machine.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Error::Runtime)
}

/// Lifts the soft open-files limit to the hard limit: every relayed
/// connection costs two descriptors.
pub fn raise_nofile_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
            tracing::debug!("could not raise RLIMIT_NOFILE from {soft} to {hard}");
        }
    }
}

/// Opens the event log named by `--events`.
pub fn open_events(g: &Global) -> Result<Arc<Events>> {
    Events::open(g.events.as_deref())
        .map(Arc::new)
        .with_context(|| {
            format!(
                "cannot write the event log {}",
                g.events
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string())
            )
        })
        .map_err(Error::Runtime)
}

pub fn announce_seed(seed: u64) {
    eprintln!("netchaos: seed {seed} (replay this run with --seed {seed})");
}

/// Completes on SIGINT or SIGTERM (and SIGHUP), naming the signal.
pub async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = hup.recv() => "SIGHUP",
    }
}

fn proxy(g: &Global, args: &ProxyArgs, m: &ArgMatches) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.proxies.extend(crate::cli::proxy_pairs(m)?);
    plan.validate()?;
    if plan.proxies.is_empty() {
        return Err(Error::Usage(
            "nothing to relay: give --listen ADDR --upstream HOST:PORT, or a profile with [[proxies]]".into(),
        ));
    }
    raise_nofile_limit();
    let rt = runtime()?;
    rt.block_on(async {
        // Every listener is opened before any serves: a busy port fails the
        // whole command, with nothing half-started.
        let mut listeners = Vec::new();
        for p in &plan.proxies {
            let l = relay::bind(p.listen).map_err(|e| Error::Runtime(e.into()))?;
            listeners.push(l);
        }
        let events = open_events(g)?;
        announce_seed(plan.seed);
        events.start(plan.seed, "proxy");
        let plan = Arc::new(plan);
        let relay = Relay::new(
            plan.clone(),
            events.clone(),
            RelayOptions {
                dial_timeout: args.dial_timeout,
            },
        );
        for (p, l) in plan.proxies.iter().zip(listeners) {
            let addr = l.local_addr().map_err(|e| Error::Runtime(e.into()))?;
            eprintln!(
                "netchaos: proxy {:?} listening on {addr} -> {}",
                p.name, p.upstream
            );
            relay.serve(
                l,
                Endpoint {
                    name: p.name.as_str().into(),
                    upstream: p.upstream.clone(),
                    flow: Flow::Outbound,
                },
            );
        }
        eprintln!("netchaos: ready");
        let sig = shutdown_signal().await;
        eprintln!(
            "netchaos: {sig}: shutting down (open connections get {})",
            crate::units::format_duration(args.drain)
        );
        relay.shutdown(args.drain).await;
        eprint!("{}", events.summary(plan.seed));
        Ok(0)
    })
}

fn check(g: &Global, args: &CheckArgs) -> Result<u8> {
    if args.files.is_empty() && args.faults.is_empty() {
        return Err(Error::Usage(
            "nothing to check: give profile files or built-in names, or --fault specs".into(),
        ));
    }
    for f in &args.files {
        // Each profile on its own first, so a clash between two is reported
        // after each was found valid.
        profile::load(f)?;
        eprintln!("{f}: ok");
    }
    let plan = profile::build_plan(&args.files, &args.faults, g.seed.or(Some(0)))?;
    let mut text = plan.render();
    if g.seed.is_none() {
        text = text.replacen(
            "seed: 0\n",
            "seed: (drawn at start unless a profile or --seed sets one)\n",
            1,
        );
    }
    print!("{text}");
    Ok(0)
}

fn profiles() {
    let list = builtin::list();
    let w = list.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, desc) in list {
        println!("{name:<w$}  {desc}");
    }
    println!("\nUse one with -p NAME; see its rules with `netchaos check NAME`.");
}
