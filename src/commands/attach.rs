//! `netchaos attach` and `netchaos run --in-place`: interception in a
//! network namespace that exists already (another process's, or
//! netchaos's own), with everything installed there removed on the way
//! out.
//!
//! Order matters: signal handling is in place before the table is
//! installed (a SIGTERM in between must not leave it behind), and
//! interception ends before open connections drain (new connections then
//! go straight to their destinations, while established ones keep their
//! translation — the table's emptied NAT chains — and finish through the
//! relay); the table goes after them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::wrap::{SECRET_ENV, forward_signals, stop_faults_after};
use super::{ApiConfig, announce_seed, api_control, open_events, runtime, start_api};
use crate::cli::{AttachArgs, Global, RunArgs};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::intercept::attach::{self, Attached, Config, Mode};
use crate::intercept::loss::LossTable;
use crate::intercept::nsthread::NsThread;
use crate::intercept::syn_gate;
use crate::intercept::{dns_forward as dns, privilege};
use crate::plan::Flow;
use crate::profile;
use crate::relay::{Endpoint, Interception, Relay, RelayOptions, Target};
use crate::ruleset::RuleSet;

/// How a namespace to attach to (or clean) is named on the command line.
#[derive(Clone, Copy)]
pub(super) struct Named<'a> {
    pub pid: Option<i32>,
    pub netns: Option<&'a Path>,
    pub container: Option<&'a str>,
    pub pod: Option<&'a str>,
}

/// The namespace named by `--pid`, `--netns`, `--container` or `--pod`:
/// its file, how `clean` would name it, and the resolv.conf its processes
/// use.
pub(super) fn namespace(named: Named<'_>) -> Result<(PathBuf, String, PathBuf)> {
    use crate::intercept::locate;
    // A container or a pod is one of its processes, named as given.
    let (pid, hint) = match (named.container, named.pod) {
        (Some(id), _) => (
            Some(locate::container(id).map_err(Error::Usage)?),
            Some(format!("--container {id}")),
        ),
        (None, Some(pod)) => (
            Some(locate::pod(pod).map_err(Error::Usage)?),
            Some(format!("--pod {pod}")),
        ),
        _ => (named.pid, None),
    };
    match (pid, named.netns) {
        (Some(pid), _) => {
            let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(Error::Usage(format!(
                    "--pid {pid}: there is no such process"
                )));
            }
            let resolv = PathBuf::from(format!("/proc/{pid}/root/etc/resolv.conf"));
            Ok((path, hint.unwrap_or_else(|| format!("--pid {pid}")), resolv))
        }
        (None, Some(p)) => {
            if !p.exists() {
                return Err(Error::Usage(format!(
                    "--netns {}: no such file (expected a network namespace file like /run/netns/NAME or /proc/PID/ns/net)",
                    p.display()
                )));
            }
            if let Ok(f) = std::fs::File::open(p) {
                crate::intercept::nsthread::check_netns(&f, p)
                    .map_err(|e| Error::Usage(format!("--netns {e}")))?;
            }
            Ok((
                p.to_path_buf(),
                format!("--netns {}", p.display()),
                PathBuf::from("/etc/resolv.conf"),
            ))
        }
        (None, None) => Err(Error::Usage(
            "give --pid PID, --netns PATH, --container ID or --pod NAMESPACE/NAME".into(),
        )),
    }
}

fn resolvers(given: Option<&Path>, default: &Path) -> Result<Vec<std::net::SocketAddr>> {
    dns::resolvers(given.unwrap_or(default), given.is_some()).map_err(|e| match given {
        Some(_) => Error::Usage(format!("--resolv-conf: {e}")),
        None => Error::runtime(e),
    })
}

/// `packet_latency`, `packet_rate` and bursty `loss` need `run`'s own namespace: the
/// delay line would queue an existing namespace's packets, and its `lo`
/// (whose packet size they depend on) is not netchaos's to change.
fn no_path_faults(plan: &crate::plan::Plan, command: &str) -> Result<()> {
    let found = plan
        .rules
        .iter()
        .flat_map(|r| r.faults.iter())
        .find(|f| crate::fault::path::is_path_fault(&f.kind));
    let Some(f) = found else { return Ok(()) };
    let (what, instead) = match &f.kind {
        crate::fault::FaultKind::Loss(_) => (
            "loss with burst above 1",
            "`loss` with burst = 1 here, or on a whole device `netchaos netem apply --loss L --loss-burst B`",
        ),
        _ => (
            f.name(),
            "`netchaos netem` inside it, or `latency`/`bandwidth` on the stream",
        ),
    };
    Err(Error::Usage(format!(
        "{what} works under `netchaos run` only, not `{command}` (it queues the packets of \
         netchaos's own namespace); for an existing namespace use {instead}"
    )))
}

pub(super) fn attach(g: &Global, args: &AttachArgs) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.mocks.extend(args.mock.specs()?);
    args.mock.load_cassette(&mut plan)?;
    plan.validate()?;
    let mock_timing = args.mock.timing()?;
    let api = ApiConfig::new(args.api.api, &args.api.access)?;
    let mut opts = args.relay.options()?;
    // The container keeps the trust store it started with: HTTPS to a
    // mocked host can only be ended with a CA it already trusts.
    if !plan.mocks.is_empty() && args.tls_args.tls_ca.is_none() && !super::quiet() {
        eprintln!(
            "netchaos: warning: the mock answers plain HTTP only here: HTTPS to the mocked hosts \
             needs --tls-ca and --tls-key, a CA the container trusts"
        );
    }
    // HTTPS under attach needs a CA the container already trusts.
    super::tls::check_tls_faults(
        &plan,
        args.tls_args.tls_ca.is_some(),
        "give --tls-ca and --tls-key, a CA the container trusts",
    )?;
    opts.tls = super::tls::setup(&args.tls_args, args.tls_args.tls_ca.is_some())?;
    let (path, hint, resolv) = namespace(Named {
        pid: args.pid,
        netns: args.netns.as_deref(),
        container: args.container.as_deref(),
        pod: args.pod.as_deref(),
    })?;
    let losses = LossTable::from_plan(&plan).map_err(|e| Error::Usage(e.to_string()))?;
    no_path_faults(&plan, "attach")?;
    attach::check_privileges(Mode::Attach.command(), Mode::Attach).map_err(Error::runtime)?;
    let resolvers = resolvers(args.resolv_conf.as_deref(), &resolv)?;
    let recording = open_events(&args.log)?;
    let events = recording.events.clone();
    crate::nofile::raise();
    let ns = Arc::new(NsThread::enter(Some(&path)).map_err(Error::runtime)?);
    let seed = plan.seed;
    let rules = Arc::new(RuleSet::from_plan(&plan));
    let rt = runtime()?;
    rt.block_on(async {
        let mut signals = super::ShutdownSignals::install()?;
        let mut att = attach::install(
            ns,
            Config {
                mode: Mode::Attach,
                inbound: args.inbound.clone(),
                exempt: Vec::new(),
                losses,
                replace: args.replace,
                clean_hint: hint,
                blackhole: plan.answers_unrouted(),
            },
        )
        .map_err(Error::runtime)?;
        // Before the relay: it dials the mock in its hosts' place.
        let mock = super::mocked::start(&plan, mock_timing, &events).await?;
        opts.mocks = mock.as_ref().map(|m| m.stands.clone());
        let serving = Serving::start(&mut att, rules, events.clone(), opts, resolvers)?;
        serving.api(api.as_ref()).await?;
        recording.guard(&serving.relay);
        announce_seed(seed);
        events.start(seed, "attach");
        events.plan(&plan);
        eprintln!(
            "netchaos: ready (attached to {}; Ctrl-C or SIGTERM detaches{})",
            path.display(),
            args.duration.map_or(String::new(), |d| format!(
                " (or after {})",
                crate::units::format_duration(d)
            ))
        );
        let why = match args.duration {
            Some(d) => tokio::select! {
                s = signals.recv() => s,
                _ = tokio::time::sleep(d) => "--duration",
            },
            None => signals.recv().await,
        };
        tracing::info!("detaching ({why})");
        let detached = att.detach();
        serving.stop(args.relay.drain).await;
        let removed = detached.and(att.remove());
        if let Some(m) = mock {
            m.stop().await;
        }
        let checked = recording.finish(seed);
        removed.map_err(Error::runtime)?;
        Ok(if checked {
            0
        } else {
            super::records::CHECK_FAILED
        })
    })
}

/// `netchaos run --in-place -- CMD`.
pub(super) fn in_place(g: &Global, args: &RunArgs) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.mocks.extend(args.mock.specs()?);
    args.mock.load_cassette(&mut plan)?;
    super::mocked::refuse(&plan, "run --in-place")?;
    if let Some(d) = args.duration {
        stop_faults_after(&mut plan, d);
    }
    let api = ApiConfig::new(args.api.api, &args.api.access)?;
    let opts = args.relay.options()?;
    let resolvers = resolvers(args.resolv_conf.as_deref(), Path::new("/etc/resolv.conf"))?;
    let losses = LossTable::from_plan(&plan).map_err(|e| Error::Usage(e.to_string()))?;
    no_path_faults(&plan, "run --in-place")?;
    super::tls::check_tls_faults(
        &plan,
        false,
        "`run --in-place` terminates no TLS; use `netchaos run --tls -- CMD`, or `attach --tls-ca`",
    )?;
    attach::check_privileges(Mode::InPlace.command(), Mode::InPlace).map_err(Error::runtime)?;
    let recording = open_events(&args.log)?;
    let events = recording.events.clone();
    crate::nofile::raise();
    let ns = Arc::new(NsThread::enter(None).map_err(Error::runtime)?);
    let seed = plan.seed;
    let rules = Arc::new(RuleSet::from_plan(&plan));
    // netchaos's own API shares the namespace: its port stays unintercepted.
    let exempt = args.api.api.map(|a| vec![a.port()]).unwrap_or_default();
    let rt = runtime()?;
    rt.block_on(async {
        let pid_for_signals = forward_signals()?;
        let mut att = attach::install(
            ns,
            Config {
                mode: Mode::InPlace,
                inbound: args.inbound.clone(),
                exempt,
                losses,
                replace: args.replace,
                clean_hint: "--here".into(),
                blackhole: plan.answers_unrouted(),
            },
        )
        .map_err(Error::runtime)?;
        let serving = Serving::start(&mut att, rules, events.clone(), opts, resolvers)?;
        serving.api(api.as_ref()).await?;
        recording.guard(&serving.relay);
        announce_seed(seed);
        events.quiet_faults();
        events.start(seed, "in-place");
        events.plan(&plan);
        if let Some(d) = args.duration {
            super::wrap::announce_faults_end(&events, d);
        }
        let mut cmd = std::process::Command::new(&args.command[0]);
        cmd.args(&args.command[1..]);
        for secret in SECRET_ENV {
            cmd.env_remove(secret);
        }
        // SAFETY: the closure runs in the child between fork and exec and
        // only makes raw syscalls (prctl, capget, capset, getrlimit,
        // setrlimit), which are async-signal-safe; it allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                privilege::drop_net_admin_in_child()?;
                crate::nofile::give_back()
            });
        }
        let end = match cmd.spawn() {
            Ok(mut child) => {
                let _ = pid_for_signals.send(nix::unistd::Pid::from_raw(child.id() as i32));
                let status = tokio::task::spawn_blocking(move || child.wait())
                    .await
                    .map_err(|e| Error::runtime(e.to_string()))?
                    .map_err(|e| Error::runtime(format!("waiting for the command: {e}")))?;
                exit_code(status)
            }
            Err(e) => {
                let name = args.command[0].to_string_lossy();
                eprintln!("netchaos: cannot run {name}: {e}");
                if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                }
            }
        };
        let detached = att.detach();
        serving.stop(args.relay.drain).await;
        let removed = detached.and(att.remove());
        let checked = recording.finish(seed);
        removed.map_err(Error::runtime)?;
        Ok(match (end, checked) {
            (0, false) => super::records::CHECK_FAILED,
            (end, _) => end,
        })
    })
}

/// The command's exit code, or 128+N for a signal.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        _ => 1,
    }
}

/// The relay and its helpers, serving an attached namespace.
struct Serving {
    relay: Arc<Relay>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    api_stop: tokio_util::sync::CancellationToken,
}

impl Serving {
    fn start(
        att: &mut Attached,
        rules: Arc<RuleSet>,
        events: Arc<Events>,
        opts: RelayOptions,
        resolvers: Vec<std::net::SocketAddr>,
    ) -> Result<Serving> {
        let relay = Relay::new(rules, events, opts);
        let sandbox = att.sandbox.clone();
        let sandbox = &sandbox;
        // Toxiproxy's byte series for the interception too.
        relay
            .events
            .stats
            .label_proxy(&sandbox.label, "transparent", "every connection");
        let io = |e: std::io::Error| Error::Runtime(e.into());
        // Before the gate: its first TCP port 53 SYN already belongs to it.
        let dns_layer = relay.start_dns(
            sandbox.names.clone(),
            resolvers,
            Some(sandbox.clone() as Arc<dyn Interception>),
        );
        let queue = att.listeners.queue.try_clone().map_err(io)?;
        let mut tasks = vec![tokio::spawn(syn_gate::run(
            queue,
            relay.clone(),
            sandbox.clone(),
        ))];
        for l in std::mem::take(&mut att.listeners.tcp) {
            let l = tokio::net::TcpListener::from_std(l).map_err(io)?;
            relay.serve(
                l,
                Endpoint::new(
                    sandbox.label.clone(),
                    Target::Transparent(sandbox.clone() as Arc<dyn Interception>),
                    Flow::Outbound,
                ),
            );
        }
        for l in std::mem::take(&mut att.inbound) {
            let l = tokio::net::TcpListener::from_std(l).map_err(io)?;
            relay.serve(
                l,
                Endpoint::new(
                    format!("{}-inbound", sandbox.label),
                    Target::Transparent(sandbox.clone() as Arc<dyn Interception>),
                    Flow::Inbound,
                ),
            );
        }
        let unreachables = att.listeners.unreachables.take().map(Arc::new);
        for u in std::mem::take(&mut att.listeners.dns) {
            let u = tokio::net::UdpSocket::from_std(u).map_err(io)?;
            tasks.push(tokio::spawn(dns::serve(
                u,
                dns_layer.clone(),
                sandbox.thread(),
                unreachables.clone(),
            )));
        }
        Ok(Serving {
            relay,
            tasks,
            api_stop: tokio_util::sync::CancellationToken::new(),
        })
    }

    async fn api(&self, cfg: Option<&ApiConfig>) -> Result<()> {
        let api = api_control(&self.relay, crate::control::Reach::Attached, cfg);
        api.adopt_rules().await;
        start_api(cfg, api, self.api_stop.clone()).await.map(drop)
    }

    async fn stop(self, drain: std::time::Duration) {
        self.api_stop.cancel();
        self.relay.shutdown(drain).await;
        for t in self.tasks {
            t.abort();
        }
    }
}
