//! The control API: Toxiproxy's HTTP API ([`api`]), so that existing
//! Toxiproxy clients drive netchaos, plus Prometheus metrics ([`metrics`]).
//!
//! netchaos's model maps onto Toxiproxy's: a *proxy* is either an explicit
//! listener (with its own rule, named after it) or, under `netchaos run`, a
//! rule of the profile (listen `"transparent"`); its *toxics* are that
//! rule's faults ([`model`]). Changes apply to open connections.
//!
//! Safety: the API listens on loopback unless given a token (or told
//! otherwise by toxiproxy-server's `-host`, with a warning); with a token,
//! every request must carry `Authorization: Bearer TOKEN`. Requests from
//! browsers are refused — a `Mozilla/` user agent (as Toxiproxy does), an
//! `Origin` other than the API's own, and (on loopback without a token) a
//! `Host` that is not a loopback name, which is what DNS rebinding sends —
//! so a web page cannot drive the API. Bodies are limited in size, slow
//! and surplus connections are shed ([`server`]), and the API reads no file
//! unless the operator named a folder for it (`--api-files`).

pub(crate) mod api;
pub(crate) mod gojson;
pub(crate) mod listen;
pub(crate) mod metrics;
pub(crate) mod model;
pub(crate) mod server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::Mutex;

use model::Toxic;

use crate::settings::files::FilePolicy;

use crate::error::Error;
use crate::plan::{Flow, Match};
use crate::relay::{self, Endpoint, Relay, Target};
use crate::ruleset::LiveRule;

/// Largest request body accepted (bigger ones get 413): a `/populate` of
/// tens of thousands of proxies. All bodies read at once share
/// [`server::BODY_BUDGET`].
pub(crate) const BODY_LIMIT: usize = 8 << 20;

/// Where a proxy's connections come from.
pub(crate) enum Listener {
    /// A rule of transparent interception (`netchaos run`).
    Transparent,
    /// An explicit listener.
    Socket {
        /// As given until the proxy first listens, then the address it
        /// listens on (`localhost:0` becomes `127.0.0.1:PORT`), kept while
        /// disabled so that re-enabling takes the same port — Toxiproxy's
        /// `listen`.
        listen: String,
        /// As given, never resolved here.
        upstream: String,
        /// While listening.
        endpoint: Option<Arc<Endpoint>>,
    },
}

/// A proxy as the API sees it.
pub(crate) struct ApiProxy {
    pub name: String,
    pub listener: Listener,
    pub enabled: bool,
    pub rule: Arc<LiveRule>,
    pub toxics: Vec<Toxic>,
}

/// What the interception under the API can apply to faults added at run
/// time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Explicit proxies only (`netchaos proxy`): no connect or packet
    /// faults.
    Proxy,
    /// Someone else's namespace (`attach`, `run --in-place`): connect
    /// faults and blackouts, but no packet delay line.
    Attached,
    /// Netchaos's own namespace (`run`): every fault but a new `loss`.
    Namespace,
}

/// The API's state: the relay it drives and its proxies.
pub(crate) struct Control {
    pub relay: Arc<Relay>,
    pub proxies: Mutex<BTreeMap<String, ApiProxy>>,
    /// What interception exists here (and so which connect and packet
    /// faults the API can add).
    pub reach: Reach,
    /// Where toxics may read files from (`--api-files`; none by default).
    pub files: FilePolicy,
    /// What `/metrics` adds to netchaos's own series.
    pub metrics: metrics::Extra,
    /// `--api-listen-allow`: see [`listen::refusal`].
    pub listen_allow: bool,
    /// The plan had a `dns_answer random` at start: its ranges are
    /// black-holed, so the API may add one.
    pub unrouted_ok: bool,
}

impl Control {
    pub(crate) fn new(
        relay: Arc<Relay>,
        reach: Reach,
        files: FilePolicy,
        metrics: metrics::Extra,
        listen_allow: bool,
    ) -> Arc<Control> {
        let unrouted_ok = relay
            .rules
            .rules()
            .iter()
            .any(|r| r.faults().iter().any(|f| f.spec.kind.answers_unrouted()));
        Arc::new(Control {
            relay,
            proxies: Mutex::new(BTreeMap::new()),
            reach,
            unrouted_ok,
            files,
            metrics,
            listen_allow,
        })
    }

    /// What a toxic of proxy `name` may use; `None` when there is no such
    /// proxy.
    pub(crate) async fn scope(&self, name: &str) -> Option<model::Scope> {
        let proxies = self.proxies.lock().await;
        let p = proxies.get(name)?;
        let transparent = matches!(p.listener, Listener::Transparent);
        Some(model::Scope {
            connect_ok: self.reach != Reach::Proxy && transparent,
            path_ok: self.reach == Reach::Namespace && transparent,
            tls_ok: self.relay.opts.tls.is_some(),
            unrouted_ok: self.unrouted_ok,
            files: self.files.clone(),
        })
    }

    /// Shows every rule of the plan that no listener owns as a transparent
    /// proxy, its faults as toxics.
    pub(crate) async fn adopt_rules(&self) {
        let mut proxies = self.proxies.lock().await;
        for rule in self.relay.rules.rules() {
            if proxies.contains_key(&*rule.name) {
                continue;
            }
            let p = ApiProxy {
                name: rule.name.to_string(),
                listener: Listener::Transparent,
                enabled: rule.enabled(),
                rule: rule.clone(),
                toxics: model::toxics_for(&rule.faults()),
            };
            proxies.insert(p.name.clone(), p);
        }
    }

    /// Registers a listener that is already serving (`netchaos proxy`).
    pub(crate) async fn adopt_listener(
        &self,
        name: &str,
        bound: SocketAddr,
        upstream: &str,
        endpoint: Arc<Endpoint>,
    ) {
        let rule = self.proxy_rule(name);
        let listen = listen::shown(bound);
        self.relay.events.stats.label_proxy(name, &listen, upstream);
        let p = ApiProxy {
            name: name.to_string(),
            listener: Listener::Socket {
                listen,
                upstream: upstream.to_string(),
                endpoint: Some(endpoint),
            },
            enabled: true,
            toxics: model::toxics_for(&rule.faults()),
            rule,
        };
        self.proxies.lock().await.insert(name.to_string(), p);
    }

    /// The rule that holds a listener proxy's toxics: one named after it
    /// (the profile's, if it has one), matching the proxy.
    pub(crate) fn proxy_rule(&self, name: &str) -> Arc<LiveRule> {
        let rules = &self.relay.rules;
        rules.get(name).unwrap_or_else(|| {
            let m = Match {
                proxies: vec![name.to_string()],
                ..Match::default()
            };
            rules
                .add(name, m)
                .or_else(|| rules.get(name))
                .expect("rule exists")
        })
    }

    /// Puts a proxy's toxics in force: its rule's faults become them.
    pub(crate) fn publish(p: &ApiProxy) {
        p.rule
            .set_faults(p.toxics.iter().filter_map(|t| t.fault.clone()).collect());
    }

    /// Opens a listener proxy's socket (its `listen` resolved as Go's
    /// `net.Listen` would) and starts serving it; returns the address it
    /// listens on, as Toxiproxy shows it. Errors are Toxiproxy's 500s
    /// (`listen tcp 127.0.0.1:3310: bind: address already in use`).
    pub(crate) async fn start(
        &self,
        name: &str,
        listen: &str,
        upstream: &str,
    ) -> Result<(String, Arc<Endpoint>), model::ApiError> {
        let (listener, shown) = listen::bind(listen, self.listen_allow).await?;
        let ep = Arc::new(
            Endpoint::new(name, Target::Fixed(upstream.to_string()), Flow::Outbound)
                .ending(self.relay.opts.ends.unwrap_or(relay::EndStyle::Fin)),
        );
        self.relay.serve(listener, ep.clone());
        self.relay.events.stats.label_proxy(name, &shown, upstream);
        Ok((shown, ep))
    }
}

/// Refuses a non-loopback API address without a token.
pub(crate) fn check_api_addr(addr: SocketAddr, token: Option<&str>) -> Result<(), Error> {
    if !addr.ip().is_loopback() && token.is_none_or(str::is_empty) {
        return Err(Error::Usage(format!(
            "the control API would listen on {addr}, which is not a loopback address: anyone who can reach it \
             could change the faults. Give a token with --api-token-file FILE (or NETCHAOS_API_TOKEN); clients \
             then send `Authorization: Bearer TOKEN`. Or listen on 127.0.0.1."
        )));
    }
    Ok(())
}

/// Binds the API's listener (a busy port is a clear error) and serves it
/// until `stop` fires. Whether `addr` may be reached without a token was
/// decided with the address ([`check_api_addr`] for `--api`; toxiproxy-
/// server's `-host` listens anywhere, with a warning, as Toxiproxy does).
pub(crate) async fn serve(
    addr: SocketAddr,
    control: Arc<Control>,
    tokens: &[String],
    stop: tokio_util::sync::CancellationToken,
) -> Result<SocketAddr, Error> {
    let listener =
        relay::bind(addr).map_err(|e| Error::Runtime(anyhow::anyhow!("control API: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Runtime(e.into()))?;
    let app = api::router(control, tokens, bound);
    // The relay never dials the API on a client's behalf (`relay::own`).
    let registered = relay::own::register(relay::own::host_ns(), bound, relay::own::Kind::Api);
    tokio::spawn(async move {
        let _registered = registered;
        server::serve(listener, app, stop).await;
    });
    Ok(bound)
}
