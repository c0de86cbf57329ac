//! `netchaos proxy` (explicit listen → upstream relays) and `netchaos
//! server` (the Toxiproxy-server equivalent: the same, with the control API
//! on, and possibly no proxy until the API creates one).

use std::sync::Arc;

use clap::ArgMatches;

use super::{ApiConfig, announce_seed, api_control, open_events, runtime, start_api};
use crate::cli::{Global, ProxyArgs, RelayArgs, ServerArgs};
use crate::error::{Error, Result};
use crate::plan::{Flow, Plan};
use crate::profile;
use crate::relay::{self, Endpoint, Relay, Target};
use crate::ruleset::RuleSet;

pub(super) fn run(g: &Global, args: &ProxyArgs, m: &ArgMatches) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.proxies.extend(crate::cli::proxy_pairs(m)?);
    plan.mocks.extend(args.mock.specs()?);
    args.mock.load_cassette(&mut plan)?;
    plan.validate()?;
    let mock_timing = args.mock.timing()?;
    warn_if_nothing_mocked(&plan);
    if plan.proxies.is_empty() && args.api.api.is_none() {
        return Err(Error::Usage(
            "nothing to relay: give --listen ADDR --upstream HOST:PORT, or a profile with [[proxies]] \
             (or --api ADDR to create proxies through the control API)"
                .into(),
        ));
    }
    let api = ApiConfig::new(args.api.api, &args.api.access)?;
    let wanted = args.tls
        || args.tls_args.tls_ca.is_some()
        || plan.proxies.iter().any(|p| p.serve_tls || p.upstream_tls);
    super::tls::check_tls_faults(
        &plan,
        wanted,
        "add --tls, or serve TLS on the listener (https://)",
    )?;
    let tls = super::tls::setup(&args.tls_args, wanted)?;
    serve(
        &args.log,
        plan,
        api,
        &args.relay,
        Mode::Proxy(mock_timing),
        tls,
        args.end,
    )
}

/// Warns when `--mock` or `[[mocks]]` names hosts no proxy relays to:
/// under `proxy` only a proxy's upstream can be mocked.
fn warn_if_nothing_mocked(plan: &Plan) {
    if plan.mocks.is_empty() {
        return;
    }
    let upstreams: Vec<String> = plan
        .proxies
        .iter()
        .map(|p| crate::plan::upstream_host(&p.upstream).to_ascii_lowercase())
        .collect();
    for m in &plan.mocks {
        if !upstreams.contains(&m.host) {
            tracing::warn!(
                "{}: no proxy's upstream is {}, so the mock answers nothing for it \
                 (give --upstream {}:443, or use `netchaos run`)",
                m.loc,
                m.host,
                m.host
            );
        }
    }
}

pub(super) fn server(g: &Global, args: &ServerArgs) -> Result<u8> {
    if args.toxiproxy_version {
        println!(
            "toxiproxy-server version {} (netchaos {})",
            crate::control::model::TOXIPROXY_VERSION,
            env!("CARGO_PKG_VERSION")
        );
        return Ok(0);
    }
    let plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    super::mocked::refuse(&plan, "server")?;
    super::tls::check_tls_faults(
        &plan,
        false,
        "`netchaos server` terminates no TLS; use `netchaos proxy --tls`",
    )?;
    if !args.ignored.is_empty() {
        tracing::warn!(
            "ignoring {:?}: toxiproxy-server takes no arguments after its flags",
            args.ignored
        );
    }
    let api = match (&args.api, &args.host, args.port) {
        (Some(addr), _, _) => ApiConfig::new(Some(*addr), &args.access)?,
        // toxiproxy-server's -host/-port: any host, token or not.
        (None, host, port) => {
            let host = host.as_deref().unwrap_or("localhost");
            let port = port.unwrap_or(8474);
            let addr = resolve_api_host(host, port)?;
            let mut cfg =
                ApiConfig::new(Some("127.0.0.1:0".parse().expect("literal")), &args.access)?
                    .expect("an address was given");
            if !addr.ip().is_loopback() && cfg.token.is_none() {
                tracing::warn!(
                    "the control API listens on {addr} without a token, as toxiproxy-server does: \
                     anyone who can reach it can change the faults (--api-token-file FILE requires a token)"
                );
            }
            cfg.addr = addr;
            if host.eq_ignore_ascii_case("localhost") && addr.is_ipv4() {
                cfg.also = Some(std::net::SocketAddr::new(
                    std::net::Ipv6Addr::LOCALHOST.into(),
                    port,
                ));
            }
            Some(cfg)
        }
    };
    let api = api.map(|mut a| {
        a.metrics.runtime = args.runtime_metrics;
        a
    });
    let config = match &args.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) => {
                // As toxiproxy-server: reported, and the server starts anyway.
                tracing::error!("Error reading config file {}: {e}", path.display());
                None
            }
        },
        None => None,
    };
    serve(
        &args.log,
        plan,
        api,
        &args.relay,
        Mode::Server(config, args.toxiproxy_compat),
        None,
        args.end,
    )
}

/// toxiproxy-server's -host, resolved as Go's listener would (the first
/// IPv4 address of a name).
fn resolve_api_host(host: &str, port: u16) -> Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<std::net::SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::Usage(format!("--host {host}: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| Error::Usage(format!("--host {host}: no address")))
}

/// Which command serves.
enum Mode {
    /// `proxy`, with the timing of its mock (if it has mocked hosts).
    Proxy(crate::mock::Timings),
    /// `server`, with the text of its `-config` file, and whether it runs
    /// as toxiproxy-server (`--toxiproxy-compat`).
    Server(Option<String>, bool),
}

fn serve(
    log: &crate::cli::EventsArg,
    plan: Plan,
    api: Option<ApiConfig>,
    relay_args: &RelayArgs,
    mode: Mode,
    tls: Option<Arc<crate::tls::Tls>>,
    ends: Option<relay::EndStyle>,
) -> Result<u8> {
    let name = match mode {
        Mode::Proxy(_) => "proxy",
        Mode::Server(..) => "server",
    };
    if let Some((rule, f)) = plan.namespace_only_fault() {
        let what = f.kind.layer().acts_on();
        let lives = match f.kind.layer() {
            crate::fault::Layer::Dns => {
                "where the namespace's DNS forwarder lives; a proxy's clients resolve names themselves"
            }
            _ => "where the SYN gate and packet rules live; explicit proxies cannot apply it",
        };
        return Err(Error::Usage(format!(
            "rule {:?}: the {} fault acts on {what} and needs `netchaos run` (or `attach`, `run --in-place`), {lives}",
            rule.name,
            f.name()
        )));
    }
    crate::nofile::raise();
    let mut opts = relay_args.options()?;
    opts.tls = tls;
    opts.ends = ends;
    let drain = relay_args.drain;
    let rt = runtime()?;
    rt.block_on(async {
        // Every listener is opened before any serves: a busy port fails the
        // whole command, with nothing half-started.
        let mut listeners = Vec::new();
        for p in &plan.proxies {
            let l = relay::bind(p.listen).map_err(|e| Error::Runtime(e.into()))?;
            listeners.push(l);
        }
        let recording = open_events(log)?;
        let events = recording.events.clone();
        announce_seed(plan.seed);
        events.start(plan.seed, name);
        events.plan(&plan);
        let mock = match &mode {
            Mode::Proxy(timing) => super::mocked::start(&plan, timing.clone(), &events).await?,
            Mode::Server(..) => None,
        };
        let mut opts = opts;
        opts.mocks = mock.as_ref().map(|m| m.stands.clone());
        let relay = Relay::new(Arc::new(RuleSet::from_plan(&plan)), events.clone(), opts);
        recording.guard(&relay);
        // Resets reach local peers after they read what came before.
        if let Ok(sockets) = crate::intercept::sock_diag::HostSockets::open() {
            relay.see_host_sockets(Arc::new(sockets));
        }
        let control = api_control(&relay, crate::control::Reach::Proxy, api.as_ref());
        for (p, l) in plan.proxies.iter().zip(listeners) {
            let addr = l.local_addr().map_err(|e| Error::Runtime(e.into()))?;
            eprintln!(
                "netchaos: proxy {:?} listening on {}{addr} -> {}{}",
                p.name,
                if p.serve_tls { "https://" } else { "" },
                if p.upstream_tls { "https://" } else { "" },
                p.upstream
            );
            let ep = Arc::new(
                Endpoint::new(
                    p.name.as_str(),
                    Target::Fixed(p.upstream.clone()),
                    Flow::Outbound,
                )
                .with_tls(relay::EndpointTls {
                    serve: p.serve_tls,
                    upstream: p
                        .upstream_tls
                        .then(|| crate::plan::upstream_host(&p.upstream)),
                }),
            );
            relay.serve(l, ep.clone());
            control.adopt_listener(&p.name, addr, &p.upstream, ep).await;
        }
        warn_if_nothing_listens(&plan.proxies);
        control.adopt_rules().await;
        if let Mode::Server(Some(config), _) = &mode {
            crate::control::api::load_config(&control, config).await;
        }
        let stop = tokio_util::sync::CancellationToken::new();
        if let (Mode::Server(..), Some(a)) = (&mode, &api) {
            toxiproxy_started(a.addr);
        }
        match start_api(api.as_ref(), control, stop.clone()).await {
            Ok(_) => {}
            // As toxiproxy-server: the API's failure is logged, and the
            // proxies made from -config go on serving until a signal.
            Err(e) if matches!(mode, Mode::Server(_, true)) => {
                tracing::error!("Server finished with error: {e}");
            }
            Err(e) => return Err(e),
        }
        // Handlers first: a signal sent as soon as "ready" is read must
        // find them, or it kills netchaos before the summary and report.
        let mut signals = super::ShutdownSignals::install()?;
        eprintln!("netchaos: ready");
        let sig = signals.recv().await;
        eprintln!(
            "netchaos: {sig}: shutting down (open connections get {})",
            crate::units::format_duration(drain)
        );
        stop.cancel();
        relay.shutdown(drain).await;
        if let Some(m) = mock {
            m.stop().await;
        }
        Ok(match recording.finish(plan.seed) {
            true => 0,
            false => super::records::CHECK_FAILED,
        })
    })
}

/// Warns at start about the proxies whose upstream is on this host with
/// nothing listening there (the socket table says so, listed once: nothing
/// is dialled to find out): their clients would meet refusals the user did
/// not ask for.
fn warn_if_nothing_listens(proxies: &[crate::plan::ProxySpec]) {
    use crate::intercept::sock_diag;
    let local: Vec<(&str, &str, std::net::SocketAddr)> = proxies
        .iter()
        .filter_map(|p| {
            let addr = p.upstream.parse::<std::net::SocketAddr>().ok()?;
            relay::is_loopback(addr).then_some((p.name.as_str(), p.upstream.as_str(), addr))
        })
        .collect();
    if local.is_empty() {
        return;
    }
    let Ok(listening) = sock_diag::open().and_then(|s| sock_diag::listeners(&s)) else {
        return;
    };
    for (name, upstream, addr) in local {
        if !listening.iter().any(|l| sock_diag::accepts(l, addr)) {
            tracing::warn!(
                "proxy {name:?}: nothing listens on its upstream {upstream} now; its clients' connections will be refused until something does"
            );
        }
    }
}
/// Toxiproxy's own start line, on stdout as its JSON logger writes it:
/// container wait strategies (Testcontainers for Rust, Python, .NET) wait
/// for "Starting Toxiproxy HTTP server" there.
fn toxiproxy_started(at: std::net::SocketAddr) {
    let time = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let line = serde_json::json!({
        "level": "info",
        "address": at.to_string(),
        "time": time,
        "message": "Starting Toxiproxy HTTP server",
    });
    println!("{line}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
}
