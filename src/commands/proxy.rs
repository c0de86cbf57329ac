//! `netchaos proxy`: explicit listen → upstream relays.

use std::sync::Arc;

use clap::ArgMatches;

use super::{announce_seed, open_events, raise_nofile_limit, runtime, shutdown_signal};
use crate::cli::{Global, ProxyArgs};
use crate::error::{Error, Result};
use crate::plan::Flow;
use crate::profile;
use crate::ruleset::RuleSet;
use crate::relay::{self, Endpoint, Relay, RelayOptions, Target};

pub fn run(g: &Global, args: &ProxyArgs, m: &ArgMatches) -> Result<u8> {
    let mut plan = profile::build_plan(&args.faults.profiles, &args.faults.faults, g.seed)?;
    plan.proxies.extend(crate::cli::proxy_pairs(m)?);
    plan.validate()?;
    if let Some((rule, f)) = plan.namespace_only_fault() {
        let what = if f.kind.layer() == "connect" {
            "the SYN"
        } else {
            "packets"
        };
        return Err(Error::Usage(format!(
            "rule {:?}: the {} fault acts on {what} and needs `netchaos run`, where the SYN gate and \
             packet rules live; explicit proxies cannot apply it",
            rule.name,
            f.name()
        )));
    }
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
            Arc::new(RuleSet::from_plan(&plan)),
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
                Endpoint::new(p.name.as_str(), Target::Fixed(p.upstream.clone()), Flow::Outbound),
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
