//! `netchaos run -- CMD`: wrap a command so that its TCP connections pass
//! through the relay, with no change to the command.
//!
//! Order matters here: everything that can fail for a simple reason (the
//! plan, `--expose` ports, the event log, the resolvers) is checked before
//! the namespace agent is forked, and the agent is forked before any thread
//! exists. The command starts only once the relay is serving.

use std::ffi::CString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::Arc;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

use super::{
    ApiConfig, announce_seed, api_control, open_events, raise_nofile_limit, runtime, start_api,
};
use crate::cli::{Expose, Global, RunArgs};
use crate::error::{Error, Result};
use crate::fault::FaultSpec;
use crate::intercept::addresses::NsAddrs;
use crate::intercept::agent::AgentConfig;
use crate::intercept::loss::LossTable;
use crate::intercept::syn_gate;
use crate::intercept::{dns, privilege, sandbox};
use crate::plan::{Flow, Plan, Rule};
use crate::profile;
use crate::relay::{self, Endpoint, Interception, Relay, RelayOptions, Target};
use crate::ruleset::RuleSet;

pub(super) fn run(g: &Global, args: &RunArgs) -> Result<u8> {
    if args.in_place {
        return super::attach::in_place(g, args);
    }
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    if let Some(d) = args.duration {
        stop_faults_after(&mut plan, d);
    }
    let api_cfg = ApiConfig::new(args.api.api, &args.api.access)?;
    let opts = RelayOptions::new(args.dial_timeout, args.max_connections)
        .map_err(|e| Error::Usage(e.to_string()))?;
    let exposes = args
        .expose
        .iter()
        .map(|e| Expose::parse(e))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Usage(e.to_string()))?;
    let resolv = args
        .resolv_conf
        .as_deref()
        .unwrap_or(Path::new("/etc/resolv.conf"));
    let resolvers = dns::resolvers(resolv, args.resolv_conf.is_some()).map_err(|e| match &args
        .resolv_conf
    {
        Some(_) => Error::Usage(format!("--resolv-conf: {e}")),
        None => Error::runtime(e),
    })?;
    let argv = args
        .command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| Error::Usage("the command contains a NUL byte".into()))?;
    // Host-side listeners first: a busy port stops us before anything runs.
    let expose_listeners = exposes
        .iter()
        .map(|e| relay::bind_std(e.host).map_err(|e| Error::Runtime(e.into())))
        .collect::<Result<Vec<_>>>()?;
    let events = open_events(g)?;
    raise_nofile_limit();

    let losses = LossTable::from_plan(&plan).map_err(|e| Error::Usage(e.to_string()))?;
    let rootless = !privilege::is_root();
    let containment = if args.privileged_command && !rootless {
        tracing::warn!(
            "--privileged-command: the command keeps every capability but CAP_NET_ADMIN; \
             it can enter other namespaces, trace processes and leave the faults behind"
        );
        privilege::Containment::Privileged
    } else {
        if args.privileged_command {
            tracing::warn!(
                "--privileged-command has no effect without root: the command runs as you, with no capability"
            );
        }
        privilege::Containment::Full
    };
    let cfg = AgentConfig {
        rootless,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        argv,
        env: command_env(),
        losses: losses.rules(),
        addrs: NsAddrs::choose().map_err(Error::runtime)?,
        containment,
        parent: nix::unistd::getpid(),
        udp_mark: crate::intercept::nft::random_udp_mark(),
    };
    let (sandbox, listeners, control) = sandbox::create(cfg, losses).map_err(Error::runtime)?;
    let seed = plan.seed;
    let plan = Arc::new(plan);
    let rt = runtime()?;
    let end = rt.block_on(async {
        let relay = Relay::new(Arc::new(RuleSet::from_plan(&plan)), events.clone(), opts);
        let gate = tokio::spawn(syn_gate::run(
            listeners.queue,
            relay.clone(),
            sandbox.clone(),
        ));
        for l in listeners.tcp {
            let l = tokio::net::TcpListener::from_std(l).map_err(|e| Error::Runtime(e.into()))?;
            relay.serve(
                l,
                Endpoint::new(
                    "run",
                    Target::Transparent(sandbox.clone() as Arc<dyn Interception>),
                    Flow::Outbound,
                ),
            );
        }
        let resolvers = Arc::new(resolvers);
        let mut dns_tasks = Vec::new();
        for u in listeners.dns {
            let u = tokio::net::UdpSocket::from_std(u).map_err(|e| Error::Runtime(e.into()))?;
            dns_tasks.push(tokio::spawn(dns::serve(
                u,
                resolvers.clone(),
                sandbox.names.clone(),
                None,
                events.clone(),
            )));
        }
        for (e, l) in exposes.iter().zip(expose_listeners) {
            let l = tokio::net::TcpListener::from_std(l).map_err(|e| Error::Runtime(e.into()))?;
            relay.serve(
                l,
                Endpoint::new(
                    format!("expose-{}", e.host.port()),
                    Target::Inside {
                        port: e.ns_port,
                        ns: sandbox.clone(),
                    },
                    Flow::Inbound,
                ),
            );
        }
        let api_stop = tokio_util::sync::CancellationToken::new();
        let api = api_control(&relay, true, api_cfg.as_ref());
        api.adopt_rules().await;
        start_api(api_cfg.as_ref(), api, api_stop.clone()).await?;
        announce_seed(seed);
        events.start(seed, "run");
        let control = Arc::new(control);
        let pid_for_signals = forward_signals()?;
        let c = control.clone();
        let pid = tokio::task::spawn_blocking(move || c.start_command())
            .await
            .map_err(|e| Error::runtime(e.to_string()))?
            .map_err(Error::runtime)?;
        let _ = pid_for_signals.send(pid);
        let c = control.clone();
        let end = tokio::task::spawn_blocking(move || c.wait())
            .await
            .map_err(|e| Error::runtime(e.to_string()))?;
        api_stop.cancel();
        relay.shutdown(args.drain).await;
        for t in dns_tasks {
            t.abort();
        }
        gate.abort();
        let left = control.kill_leftovers();
        if left > 0 {
            tracing::warn!("ended {left} process(es) the command left running in its namespace");
        }
        eprint!("{}", events.summary(seed));
        Ok::<_, Error>(end)
    })?;
    // The runtime's sockets into the namespace close here; with its last
    // process gone, the namespace and its nftables table disappear.
    drop(rt);
    Ok(end.exit_code())
}

/// Variables that carry netchaos's own secrets: the command never sees them.
pub(super) const SECRET_ENV: &[&str] = &["NETCHAOS_API_TOKEN"];

/// netchaos's environment without its secrets, for the command.
fn command_env() -> Vec<CString> {
    std::env::vars_os()
        .filter(|(k, _)| !SECRET_ENV.iter().any(|s| k == s))
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// `--duration`: every fault's window ends at `d`.
pub(super) fn stop_faults_after(plan: &mut Plan, d: std::time::Duration) {
    plan.rules = plan
        .rules
        .iter()
        .map(|r| {
            let faults = r
                .faults
                .iter()
                .map(|f| {
                    Arc::new(FaultSpec {
                        active: f.active.clamp_end(d),
                        ..(**f).clone()
                    })
                })
                .collect();
            Arc::new(Rule {
                faults,
                ..(**r).clone()
            })
        })
        .collect();
}

/// Forwards SIGINT, SIGTERM and SIGHUP sent to netchaos to the command.
/// Signals the terminal generated (Ctrl-C) already reached the command,
/// which shares netchaos's process group, and are not sent twice.
///
/// The handlers are installed before the command starts (so a signal can
/// never find netchaos without them); one that arrives before the command's
/// pid is known is delivered as soon as it is.
pub(super) fn forward_signals() -> Result<std::sync::mpsc::Sender<Pid>> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| Error::runtime(format!("cannot handle signals: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel::<Pid>();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut pid = None;
            for info in signals.forever() {
                if info.cause == Cause::Kernel {
                    continue;
                }
                if pid.is_none() {
                    pid = rx.recv().ok();
                }
                if let (Some(pid), Ok(sig)) = (pid, Signal::try_from(info.signal)) {
                    tracing::info!("forwarding {sig} to the command (pid {pid})");
                    let _ = kill(pid, sig);
                }
            }
        })
        .map_err(|e| Error::runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(tx)
}
