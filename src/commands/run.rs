//! `netchaos run -- CMD`: wrap a command so that its TCP connections pass
//! through the relay, with no change to the command.
//!
//! Order matters here: everything that can fail for a simple reason (the
//! plan, `--expose` ports, the event log, the resolvers) is checked before
//! the namespace agent is forked, and the agent is forked before any thread
//! exists. The command starts only once the relay is serving.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::{ApiConfig, announce_seed, api_control, open_events, runtime, start_api, wrap};
use crate::cli::{Expose, Global, RunArgs};
use crate::error::{Error, Result};
use crate::intercept::addresses::NsAddrs;
use crate::intercept::agent::AgentConfig;
use crate::intercept::loss::LossTable;
use crate::intercept::syn_gate;
use crate::intercept::trust::{self, TrustPlan};
use crate::intercept::{dns_forward as dns, privilege, sandbox};
use crate::plan::{Flow, Plan};
use crate::profile;
use crate::relay::{self, Endpoint, Interception, Relay, RelayOptions, Target};
use crate::ruleset::RuleSet;

/// `netchaos run`'s command line, checked: everything that can be wrong
/// with it is found here, before anything starts.
struct RunConfig {
    plan: Plan,
    api: Option<ApiConfig>,
    opts: RelayOptions,
    drain: std::time::Duration,
    exposes: Vec<Expose>,
    resolvers: Vec<std::net::SocketAddr>,
    argv: Vec<CString>,
    containment: privilege::Containment,
    /// HTTPS interception (`--tls`, `tls = "intercept"`), its files read,
    /// and the command's trust stores.
    tls: Option<(super::tls::Prepared, TrustPlan)>,
    /// The command's environment (netchaos's, without its secrets).
    env: Vec<CString>,
    /// The timing of the built-in mock (when the plan has mocked hosts).
    mock_timing: crate::mock::Timings,
}

impl RunConfig {
    fn from_args(g: &Global, args: &RunArgs) -> Result<RunConfig> {
        let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
        plan.mocks.extend(args.mock.specs()?);
        args.mock.load_cassette(&mut plan)?;
        plan.validate()?;
        let mock_timing = args.mock.timing()?;
        if let Some(d) = args.duration {
            wrap::stop_faults_after(&mut plan, d);
        }
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
        let given = args.resolv_conf.is_some();
        let resolvers = dns::resolvers(resolv, given).map_err(|e| match given {
            true => Error::Usage(format!("--resolv-conf: {e}")),
            false => Error::runtime(e),
        })?;
        let argv = args
            .command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::Usage("the command contains a NUL byte".into()))?;
        let containment = match (args.privileged_command, privilege::is_root()) {
            (true, true) => {
                tracing::warn!(
                    "--privileged-command: the command keeps every capability but CAP_NET_ADMIN; \
                     it can enter other namespaces, trace processes and leave the faults behind"
                );
                privilege::Containment::Privileged
            }
            (true, false) => {
                tracing::warn!(
                    "--privileged-command has no effect without root: the command runs as you, with no capability"
                );
                privilege::Containment::Full
            }
            (false, _) => privilege::Containment::Full,
        };
        // The mock's hosts are reached over HTTPS as the real ones are:
        // their TLS is ended with the run's CA.
        let tls = args.tls || plan.tls_intercept || !plan.mocks.is_empty();
        super::tls::check_tls_faults(&plan, tls, "add --tls")?;
        let mut api = ApiConfig::new(args.api.api, &args.api.access)?;
        if let Some(api) = api.as_mut().filter(|_| args.api_for_command) {
            // The port is fixed now: the command's environment is made
            // before the API listens.
            api.addr = relay::numbered(api.addr).map_err(|e| {
                Error::Runtime(anyhow::anyhow!("control API: cannot choose a port: {e}"))
            })?;
            api.command_token = api.token.as_ref().map(|_| fresh_token());
        }
        if args.api_for_command {
            crate::relay::own::share_api();
        }
        let env = command_env(api.as_ref().filter(|_| args.api_for_command));
        let prepared = match super::tls::prepare(&args.tls_args, tls)? {
            Some(p) => Some((p, trust::plan(&env).map_err(Error::Usage)?)),
            None => None,
        };
        if tls
            && !plan
                .rules
                .iter()
                .flat_map(|r| &r.faults)
                // (A `respond` reply is answered inside TLS too.)
                .any(|f| {
                    f.kind.info().needs_http_layer()
                        || matches!(f.kind, crate::fault::FaultKind::Respond(_))
                })
            && args.api.api.is_none()
            && plan.mocks.is_empty()
        {
            tracing::warn!(
                "--tls: no rule has an HTTP or TLS fault or a respond, so no connection is terminated (every one stays a byte relay)"
            );
        }
        Ok(RunConfig {
            tls: prepared,
            api,
            opts: args.relay.options()?,
            drain: args.relay.drain,
            plan,
            exposes,
            resolvers,
            argv,
            containment,
            env,
            mock_timing,
        })
    }
}

/// The command's environment: netchaos's without its secrets, and with
/// `--api-for-command`, where the API is and the command's own token.
fn command_env(shared: Option<&ApiConfig>) -> Vec<CString> {
    let mut env = wrap::command_env();
    if let Some(api) = shared {
        let url = format!("http://{}", api.addr);
        let mut set = vec![("NETCHAOS_API_URL", url.clone()), ("TOXIPROXY_URL", url)];
        if let Some(t) = &api.command_token {
            set.push(("NETCHAOS_API_TOKEN", t.clone()));
        }
        env.retain(|kv| {
            !set.iter()
                .any(|(k, _)| kv.as_bytes().starts_with(format!("{k}=").as_bytes()))
        });
        env.extend(
            set.into_iter()
                .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok()),
        );
    }
    env
}

/// A token of 128 random bits, as 32 hex digits.
fn fresh_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn run(g: &Global, args: &RunArgs) -> Result<u8> {
    let RunConfig {
        plan,
        api: api_cfg,
        opts,
        drain,
        exposes,
        resolvers,
        argv,
        containment,
        tls,
        env,
        mock_timing,
    } = RunConfig::from_args(g, args)?;
    let mut opts = opts;
    // Host-side listeners first: a busy port stops us before anything runs.
    let expose_listeners = exposes
        .iter()
        .map(|e| relay::bind_std(e.host).map_err(|e| Error::Runtime(e.into())))
        .collect::<Result<Vec<_>>>()?;
    let recording = open_events(&args.log)?;
    let events = recording.events.clone();
    crate::nofile::raise();

    let losses = LossTable::from_plan(&plan).map_err(|e| Error::Usage(e.to_string()))?;
    let cfg = AgentConfig {
        rootless: !privilege::is_root(),
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        argv,
        env,
        losses: losses.rules(),
        delayed: plan
            .rules
            .iter()
            .flat_map(|r| r.faults.iter())
            .any(|f| crate::fault::path::is_path_fault(&f.kind)),
        addrs: NsAddrs::choose().map_err(Error::runtime)?,
        containment,
        parent: nix::unistd::getpid(),
        udp_mark: crate::intercept::nft::random_udp_mark(),
        hidden: args.api.access.api_token_file.iter().cloned().collect(),
        blackhole: plan.answers_unrouted(),
    };
    let (sandbox, listeners, control) = sandbox::create(cfg, losses).map_err(Error::runtime)?;
    // Made after the agent's fork: the CAs' keys are in netchaos's memory
    // only, never in the namespace's processes. Upstreams are judged
    // against the command's stores as they were before being covered.
    let mut trust = None;
    if let Some((prepared, plan)) = tls {
        let stores = (!plan.stores.is_empty()).then(|| plan.stores.clone());
        let t = prepared.build(stores)?;
        trust = Some(plan.covering(|i| t.cas_for_store(i)));
        opts.tls = Some(t);
    }
    let seed = plan.seed;
    let plan = Arc::new(plan);
    let rt = runtime()?;
    let end = rt.block_on(async {
        // Before the relay: it dials the mock in its hosts' place.
        let mock = super::mocked::start(&plan, mock_timing, &events).await?;
        opts.mocks = mock.as_ref().map(|m| m.stands.clone());
        let relay = Relay::new(Arc::new(RuleSet::from_plan(&plan)), events.clone(), opts);
        recording.guard(&relay);
        // Resets reach local peers after they read what came before.
        if let Ok(sockets) = crate::intercept::sock_diag::HostSockets::open() {
            relay.see_host_sockets(Arc::new(sockets));
        }
        // Toxiproxy's byte series for the interception too (dashboards
        // read toxiproxy_proxy_*): one proxy, named as its connections are.
        events
            .stats
            .label_proxy(&sandbox.label, "transparent", "every connection");
        let gate = tokio::spawn(syn_gate::run(
            listeners.queue,
            relay.clone(),
            sandbox.clone(),
        ));
        let delay_line = tokio::spawn(crate::intercept::delay_line::run(
            listeners
                .delay_queue
                .expect("run's agent opens the delay line's queue"),
            sandbox
                .delay_line
                .clone()
                .expect("run's sandbox has a delay line"),
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
        let dns_layer = relay.start_dns(sandbox.names.clone(), resolvers, None);
        let mut dns_tasks = Vec::new();
        let unreachables = listeners.unreachables.map(Arc::new);
        for u in listeners.dns {
            let u = tokio::net::UdpSocket::from_std(u).map_err(|e| Error::Runtime(e.into()))?;
            let serve = dns::serve(u, dns_layer.clone(), None, unreachables.clone());
            dns_tasks.push(tokio::spawn(serve));
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
        let api = api_control(&relay, crate::control::Reach::Namespace, api_cfg.as_ref());
        api.adopt_rules().await;
        start_api(api_cfg.as_ref(), api, api_stop.clone()).await?;
        announce_seed(seed);
        events.quiet_faults();
        events.start(seed, "run");
        events.plan(&plan);
        if let Some(d) = args.duration {
            wrap::announce_faults_end(&events, d);
        }
        let control = Arc::new(control);
        let pid_for_signals = wrap::forward_signals()?;
        let c = control.clone();
        let pid = tokio::task::spawn_blocking(move || c.start_command(trust))
            .await
            .map_err(|e| Error::runtime(e.to_string()))?
            .map_err(Error::runtime)?;
        let _ = pid_for_signals.send(pid);
        let c = control.clone();
        let end = tokio::task::spawn_blocking(move || c.wait())
            .await
            .map_err(|e| Error::runtime(e.to_string()))?;
        api_stop.cancel();
        relay.shutdown(drain).await;
        if let Some(m) = mock {
            m.stop().await;
        }
        for t in dns_tasks {
            t.abort();
        }
        gate.abort();
        delay_line.abort();
        let left = control.kill_leftovers();
        if left > 0 {
            tracing::warn!("ended {left} process(es) the command left running in its namespace");
        }
        let checked = recording.finish(seed);
        Ok::<_, Error>((end, checked))
    })?;
    // The runtime's sockets into the namespace close here; with its last
    // process gone, the namespace and its nftables table disappear.
    drop(rt);
    // A suite that passed while its client broke the contract fails.
    Ok(match (end.0.exit_code(), end.1) {
        (0, false) => super::records::CHECK_FAILED,
        (code, _) => code,
    })
}
