//! `netchaos proxy` (explicit listen → upstream relays) and `netchaos
//! server` (the Toxiproxy-server equivalent: the same, with the control API
//! on, and possibly no proxy until the API creates one).

use std::sync::Arc;

use clap::ArgMatches;

use super::{
    ApiConfig, announce_seed, api_control, open_events, raise_nofile_limit, runtime,
    shutdown_signal, start_api,
};
use crate::cli::{Global, ProxyArgs, RelayArgs, ServerArgs};
use crate::error::{Error, Result};
use crate::plan::{Flow, Plan};
use crate::profile;
use crate::relay::{self, Endpoint, Relay, Target};
use crate::ruleset::RuleSet;

pub(super) fn run(g: &Global, args: &ProxyArgs, m: &ArgMatches) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.proxies.extend(crate::cli::proxy_pairs(m)?);
    plan.validate()?;
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
    let tls = super::tls::setup(&args.tls_args, wanted)?;
    serve(g, plan, api, &args.relay, "proxy", tls)
}

pub(super) fn server(g: &Global, args: &ServerArgs) -> Result<u8> {
    let plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    let api = ApiConfig::new(Some(args.api), &args.access)?;
    serve(g, plan, api, &args.relay, "server", None)
}

fn serve(
    g: &Global,
    plan: Plan,
    api: Option<ApiConfig>,
    relay_args: &RelayArgs,
    mode: &str,
    tls: Option<Arc<crate::tls::Tls>>,
) -> Result<u8> {
    if let Some((rule, f)) = plan.namespace_only_fault() {
        let what = f.kind.layer().acts_on();
        return Err(Error::Usage(format!(
            "rule {:?}: the {} fault acts on {what} and needs `netchaos run` (or `attach`, `run --in-place`), \
             where the SYN gate and packet rules live; explicit proxies cannot apply it",
            rule.name,
            f.name()
        )));
    }
    raise_nofile_limit();
    let mut opts = relay_args.options()?;
    opts.tls = tls;
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
        let events = open_events(g)?;
        announce_seed(plan.seed);
        events.start(plan.seed, mode);
        let relay = Relay::new(Arc::new(RuleSet::from_plan(&plan)), events.clone(), opts);
        let control = api_control(&relay, false, api.as_ref());
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
            control
                .adopt_listener(&p.name, &p.listen.to_string(), addr, &p.upstream, ep)
                .await;
        }
        control.adopt_rules().await;
        let stop = tokio_util::sync::CancellationToken::new();
        start_api(api.as_ref(), control, stop.clone()).await?;
        eprintln!("netchaos: ready");
        let sig = shutdown_signal().await;
        eprintln!(
            "netchaos: {sig}: shutting down (open connections get {})",
            crate::units::format_duration(drain)
        );
        stop.cancel();
        relay.shutdown(drain).await;
        eprint!("{}", events.summary(plan.seed));
        Ok(0)
    })
}
