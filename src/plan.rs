//! The validated plan — rules, their matches and faults, explicit proxies,
//! the seed — and the per-connection fault decisions. Pure: no I/O and no
//! clock of its own, so decisions unit-test directly.
//!
//! Every matching rule applies, in profile order; a connection's faults are
//! the union of its matching rules' faults, each kept or dropped by its own
//! `probability` draw. A draw depends only on (seed, rule index, fault
//! index, connection sequence number), so adding a rule never changes the
//! decisions of another, and a run can be replayed with its seed.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::Arc;

use ipnet::IpNet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fault::FaultSpec;
use crate::settings::ProfileError;

/// Whether a connection leaves the wrapped program or arrives to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Outbound,
    Inbound,
}

/// One destination criterion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DstPattern {
    Net(IpNet),
    /// A lower-case host name; `*.example.com` matches its subdomains.
    Host(String),
}

impl DstPattern {
    pub(crate) fn parse(s: &str) -> Result<DstPattern, &'static str> {
        const FORM: &str =
            "an address, a CIDR like \"10.0.0.0/8\", or a host name like \"api.example.com\"";
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(DstPattern::Net(net.trunc()));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(DstPattern::Net(IpNet::from(ip)));
        }
        let name = s.strip_prefix("*.").unwrap_or(s);
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if valid {
            Ok(DstPattern::Host(s.to_ascii_lowercase()))
        } else {
            Err(FORM)
        }
    }

    /// Whether a host pattern matches `name` (never an address pattern).
    pub(crate) fn matches_name(&self, name: &str) -> bool {
        match self {
            DstPattern::Host(pat) => host_matches(pat, name),
            DstPattern::Net(_) => false,
        }
    }

    fn matches(&self, ip: Option<IpAddr>, names: &[String]) -> bool {
        match self {
            DstPattern::Net(net) => ip.is_some_and(|ip| net.contains(&canonical(ip))),
            DstPattern::Host(pat) => names.iter().any(|n| host_matches(pat, n)),
        }
    }
}

/// IPv4-mapped IPv6 addresses match IPv4 rules.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn host_matches(pattern: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.len() > suffix.len()
                && name.ends_with(suffix)
                && name[..name.len() - suffix.len()].ends_with('.')
        }
        None => name == pattern,
    }
}

impl fmt::Display for DstPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DstPattern::Net(n) if n.prefix_len() == n.max_prefix_len() => write!(f, "{}", n.addr()),
            DstPattern::Net(n) => write!(f, "{n}"),
            DstPattern::Host(h) => f.write_str(h),
        }
    }
}

/// Parses `443` or `8000-8100`.
pub(crate) fn parse_ports(s: &str) -> Result<RangeInclusive<u16>, &'static str> {
    const FORM: &str = "a port like \"443\" or a range like \"8000-8100\"";
    let s = s.trim();
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u16 = a.trim().parse().map_err(|_| FORM)?;
    let b: u16 = b.trim().parse().map_err(|_| FORM)?;
    if a == 0 || b < a {
        return Err(FORM);
    }
    Ok(a..=b)
}

/// Which connections a rule applies to. Each given criterion must hold; an
/// empty criterion matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Match {
    pub dst: Vec<DstPattern>,
    pub ports: Vec<RangeInclusive<u16>>,
    /// `None`: either direction.
    pub flow: Option<Flow>,
    /// Names of explicit proxies (`netchaos proxy`).
    pub proxies: Vec<String>,
    /// How the HTTP layer treats the rule's connections: `Http` parses them
    /// as HTTP without waiting to see (a fallback to bytes remains);
    /// `Tcp` keeps them byte relays, HTTP faults or not.
    pub protocol: Option<Protocol>,
}

/// `match.protocol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http,
    Tcp,
}

/// What the relay knows about a connection when it decides its faults.
#[derive(Clone, Debug)]
pub(crate) struct ConnMeta<'a> {
    pub flow: Flow,
    pub proxy: Option<&'a str>,
    pub ip: Option<IpAddr>,
    /// Names the destination is known by (a proxy's upstream host, or names
    /// that resolved to the address).
    pub names: &'a [String],
    pub port: u16,
}

impl Match {
    pub(crate) fn matches(&self, m: &ConnMeta<'_>) -> bool {
        (self.dst.is_empty() || self.dst.iter().any(|d| d.matches(m.ip, m.names)))
            && (self.ports.is_empty() || self.ports.iter().any(|r| r.contains(&m.port)))
            && self.flow.is_none_or(|f| f == m.flow)
            && (self.proxies.is_empty()
                || m.proxy.is_some_and(|p| self.proxies.iter().any(|x| x == p)))
    }
}

impl Match {
    /// Whether a DNS query for `name` from the namespace falls under the
    /// rule: `dst` host patterns name the queried name (address patterns
    /// never match a query); ports and `protocol` are about connections
    /// and do not narrow it.
    pub(crate) fn matches_query(&self, name: &str) -> bool {
        (self.dst.is_empty() || self.dst.iter().any(|d| d.matches_name(name)))
            && self.flow.is_none_or(|f| f == Flow::Outbound)
            && self.proxies.is_empty()
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.dst.is_empty() {
            let d: Vec<String> = self.dst.iter().map(|d| d.to_string()).collect();
            parts.push(format!("dst {}", d.join(", ")));
        }
        if !self.ports.is_empty() {
            let p: Vec<String> = self
                .ports
                .iter()
                .map(|r| {
                    if r.start() == r.end() {
                        r.start().to_string()
                    } else {
                        format!("{}-{}", r.start(), r.end())
                    }
                })
                .collect();
            parts.push(format!("ports {}", p.join(", ")));
        }
        if let Some(p) = self.protocol {
            parts.push(format!(
                "protocol {}",
                if p == Protocol::Http { "http" } else { "tcp" }
            ));
        }
        if let Some(flow) = self.flow {
            parts.push(format!(
                "direction {}",
                if flow == Flow::Outbound {
                    "outbound"
                } else {
                    "inbound"
                }
            ));
        }
        if !self.proxies.is_empty() {
            parts.push(format!("proxy {}", self.proxies.join(", ")));
        }
        if parts.is_empty() {
            f.write_str("every connection")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

/// A named rule: a match and the faults for the connections it matches.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub name: Arc<str>,
    pub matcher: Match,
    pub faults: Vec<Arc<FaultSpec>>,
    /// Where the rule was defined, for duplicate-name errors.
    pub loc: String,
}

/// An explicit listen → upstream relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProxySpec {
    pub name: String,
    pub listen: SocketAddr,
    /// `host:port` as written; resolved per connection.
    pub upstream: String,
    /// The upstream speaks TLS (`--upstream-tls`, `upstream_tls = true`):
    /// netchaos does, verifying it as the upstream's host.
    pub upstream_tls: bool,
    /// Clients speak TLS to the listener (`--tls`, `tls = true`).
    pub serve_tls: bool,
    pub loc: String,
}

/// A host the built-in mock answers for, never dialled (`--mock API`,
/// `[[mocks]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MockSpec {
    /// Lower case, no trailing dot.
    pub host: String,
    pub api: crate::mock::Api,
    pub loc: String,
    /// Named by a cassette only (`--mock-from`): answered from it, not
    /// made up.
    pub replay_only: bool,
}

impl MockSpec {
    /// `--mock anthropic,openai`: each API at its provider's host.
    pub(crate) fn from_flag(s: &str) -> Result<Vec<MockSpec>, ProfileError> {
        let loc = format!("--mock {s}");
        let apis = crate::mock::Api::parse_list(s).map_err(|e| ProfileError::new(&loc, e))?;
        Ok(apis
            .into_iter()
            .map(|api| MockSpec {
                host: api.host().to_string(),
                api,
                loc: loc.clone(),
                replay_only: false,
            })
            .collect())
    }
}

/// Whether `host` is a DNS name a mock can answer for: letters, digits,
/// hyphens and dots, labels of 1-63, at most 253 in all, not an address.
pub(crate) fn is_mockable_host(host: &str) -> bool {
    let h = host.trim_end_matches('.');
    !h.is_empty()
        && h.len() <= 253
        && h.parse::<std::net::IpAddr>().is_err()
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The host part of `host:port` (`[v6]:port` unbracketed).
pub(crate) fn upstream_host(upstream: &str) -> String {
    let host = upstream.rsplit_once(':').map_or(upstream, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// Checks an upstream `host:port` (`[v6]:port` for IPv6 literals).
pub(crate) fn parse_upstream(s: &str) -> Result<String, &'static str> {
    const FORM: &str = "an upstream like \"127.0.0.1:6379\", \"db.internal:5432\" or \"[::1]:80\"";
    let s = s.trim();
    if s.parse::<SocketAddr>().is_ok() {
        return Ok(s.to_string());
    }
    let (host, port) = s.rsplit_once(':').ok_or(FORM)?;
    let port: u16 = port.parse().map_err(|_| FORM)?;
    if port == 0 || host.is_empty() || host.contains(':') || DstPattern::parse(host).is_err() {
        return Err(FORM);
    }
    Ok(s.to_string())
}

/// Parses a listen address: `127.0.0.1:8080`, `[::1]:8080`, or a bare port
/// (meaning 127.0.0.1, never every interface by accident).
pub(crate) fn parse_listen(s: &str) -> Result<SocketAddr, &'static str> {
    const FORM: &str =
        "a listen address like \"127.0.0.1:8080\", \"localhost:8080\", \"[::1]:8080\" or a port";
    let s = s.trim();
    if let Ok(port) = s.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    // A host name, as Toxiproxy takes one: its first IPv4 address.
    let (host, port) = s.rsplit_once(':').ok_or(FORM)?;
    let port: u16 = port.parse().map_err(|_| FORM)?;
    if host.is_empty() || host.contains(':') || host.contains(char::is_whitespace) {
        return Err(FORM);
    }
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs().map_err(|_| FORM)?.collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or(FORM)
}

/// Everything netchaos was told to do, validated.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    pub seed: u64,
    /// `(source, description)` of each profile.
    pub descriptions: Vec<(String, String)>,
    pub rules: Vec<Arc<Rule>>,
    pub proxies: Vec<ProxySpec>,
    /// A profile asked for HTTPS interception (`tls = "intercept"`).
    pub tls_intercept: bool,
    /// Hosts the built-in mock answers for.
    pub mocks: Vec<MockSpec>,
    /// Cassette directories profiles name (`[[mocks]] from`), and where.
    pub cassette_dirs: Vec<(std::path::PathBuf, String)>,
    /// Recorded and canned answers the mock gives first, once loaded
    /// ([`Plan::load_cassette`]).
    pub cassette: Option<std::sync::Arc<crate::mock::cassette::Cassette>>,
}

impl Plan {
    /// Whether a `dns_answer random = true` may send clients to the
    /// ranges interception must then black-hole.
    pub(crate) fn answers_unrouted(&self) -> bool {
        self.rules
            .iter()
            .flat_map(|r| &r.faults)
            .any(|f| f.kind.answers_unrouted())
    }

    /// Checks names for clashes: rule names and proxy names must be unique,
    /// and no two proxies may listen on the same address.
    pub(crate) fn validate(&self) -> Result<(), ProfileError> {
        let mut names: std::collections::HashMap<&str, &Rule> = std::collections::HashMap::new();
        for r in &self.rules {
            if let Some(first) = names.insert(&r.name, r) {
                return Err(ProfileError::new(
                    &r.loc,
                    format!(
                        "rule name {:?} is already used at {}; rule names must be unique",
                        r.name, first.loc
                    ),
                ));
            }
        }
        let mut names: std::collections::HashMap<&str, &ProxySpec> =
            std::collections::HashMap::new();
        let mut listens: std::collections::HashMap<SocketAddr, &ProxySpec> =
            std::collections::HashMap::new();
        for p in &self.proxies {
            if let Some(o) = names.insert(&p.name, p) {
                return Err(ProfileError::new(
                    &p.loc,
                    format!(
                        "proxy name {:?} is already used at {}; proxy names must be unique",
                        p.name, o.loc
                    ),
                ));
            }
            if p.listen.port() != 0 {
                if let Some(o) = listens.insert(p.listen, p) {
                    return Err(ProfileError::new(
                        &p.loc,
                        format!(
                            "proxy {:?} listens on {}, as proxy {:?} does",
                            p.name, p.listen, o.name
                        ),
                    ));
                }
            }
        }
        let mut hosts: std::collections::HashMap<&str, &MockSpec> =
            std::collections::HashMap::new();
        // A cassette's host speaks what the files hold, whatever API its
        // paths suggest.
        for m in self.mocks.iter().filter(|m| !m.replay_only) {
            match hosts.insert(&m.host, m) {
                Some(o) if o.api != m.api => {
                    return Err(ProfileError::new(
                        &m.loc,
                        format!(
                            "host {:?} is mocked as {} here and as {} at {}; a host speaks one API",
                            m.host,
                            m.api.name(),
                            o.api.name(),
                            o.loc
                        ),
                    ));
                }
                _ => {}
            }
        }
        if self.mocks.len() > crate::mock::stands::MAX_HOSTS {
            return Err(ProfileError::new(
                &self.mocks[0].loc,
                format!(
                    "{} mocked hosts: at most {} can be",
                    self.mocks.len(),
                    crate::mock::stands::MAX_HOSTS
                ),
            ));
        }
        Ok(())
    }

    /// The mocked hosts, each once, with its API.
    pub(crate) fn mocked_hosts(&self) -> Vec<(String, crate::mock::Api)> {
        let mut out: Vec<(String, crate::mock::Api)> = Vec::new();
        // A host --mock names speaks its API, whatever a cassette says.
        let mut mocks: Vec<&MockSpec> = self.mocks.iter().collect();
        mocks.sort_by_key(|m| m.replay_only);
        for m in mocks {
            if !out.iter().any(|(h, _)| *h == m.host) {
                out.push((m.host.clone(), m.api));
            }
        }
        out
    }

    /// Loads the cassettes profiles name and `flagged` (`--mock-from`):
    /// their hosts mocked (after the others), their answers given first.
    pub(crate) fn load_cassette(
        &mut self,
        flagged: &[std::path::PathBuf],
    ) -> Result<(), ProfileError> {
        let mut dirs: Vec<(std::path::PathBuf, String)> = self.cassette_dirs.clone();
        for d in flagged {
            dirs.push((d.clone(), format!("--mock-from {}", d.display())));
        }
        if dirs.is_empty() {
            return Ok(());
        }
        // Each on its own: an error names where it was given.
        let mut parts = Vec::with_capacity(dirs.len());
        for (d, loc) in &dirs {
            parts.push(
                crate::mock::cassette::Cassette::load(std::slice::from_ref(d))
                    .map_err(|e| ProfileError::new(loc, e))?,
            );
        }
        let c = crate::mock::cassette::Cassette::join(parts);
        let loc = dirs
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let hosts = c.hosts();
        if hosts.is_empty() && self.mocks.is_empty() {
            return Err(ProfileError::new(
                &loc,
                "its answers name no host, so no connection would reach them: give each \
                 request a \"host\", or --mock API for the hosts they answer",
            ));
        }
        for (host, api) in hosts {
            if !is_mockable_host(&host) {
                return Err(ProfileError::new(
                    &loc,
                    format!(
                        "{host:?} is not a host name the mock can stand in for (an address \
                         cannot be): record through a name"
                    ),
                ));
            }
            self.mocks.push(MockSpec {
                host,
                api,
                loc: loc.clone(),
                replay_only: true,
            });
        }
        self.cassette = Some(std::sync::Arc::new(c));
        Ok(())
    }

    /// Mocked hosts answered from the cassette only.
    pub(crate) fn replay_only_hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in &self.mocks {
            let only = self
                .mocks
                .iter()
                .filter(|x| x.host == m.host)
                .all(|x| x.replay_only);
            if only && !out.contains(&m.host) {
                out.push(m.host.clone());
            }
        }
        out
    }

    /// The first fault that only works inside `netchaos run`'s namespace
    /// (connect and packet layers), with its rule.
    pub(crate) fn namespace_only_fault(&self) -> Option<(&Rule, &FaultSpec)> {
        self.rules
            .iter()
            .flat_map(|r| r.faults.iter().map(move |f| (&**r, &**f)))
            .find(|(_, f)| f.kind.layer().needs_interception())
    }

    /// Rules that can never match where the plan would run: a `proxy`
    /// name no `[[proxies]]` defines, a `direction` that rule's connections
    /// cannot have; and faults their own rule keeps from acting (HTTP or
    /// TLS faults under `match.protocol = "tcp"`).
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let defined: Vec<&str> = self.proxies.iter().map(|p| p.name.as_str()).collect();
        for r in &self.rules {
            let m = &r.matcher;
            if m.protocol == Some(Protocol::Tcp) {
                if let Some(f) = r.faults.iter().find(|f| f.kind.info().needs_http_layer()) {
                    out.push(format!(
                        "rule {:?} ({}) has match.protocol = \"tcp\", which keeps its connections byte relays (except where netchaos serves or speaks TLS): its {} fault never acts on them",
                        r.name,
                        r.loc,
                        f.name()
                    ));
                }
            }
            if m.proxies.is_empty()
                && m.dst.is_empty()
                && m.ports.is_empty()
                && m.protocol.is_none()
            {
                let unscoped = r
                    .faults
                    .iter()
                    .find(|f| f.kind.info().needs_http_layer() && !f.kind.names_hosts());
                if let Some(f) = unscoped {
                    out.push(format!(
                        "rule {:?} ({}) has an HTTP or TLS fault ({}) and no match.dst, match.ports or host: under `run --tls` it matches every HTTPS connection, each of which is terminated with the run's CA — a client that pins a CA of its own refuses it (that destination is then relayed untouched, and the summary says so); scope the rule to the servers you mean to fault",
                        r.name,
                        r.loc,
                        f.name()
                    ));
                }
            }
            if m.proxies.is_empty() {
                continue;
            }
            if m.flow == Some(Flow::Inbound) {
                out.push(format!(
                    "rule {:?} ({}) matches proxies and direction = \"inbound\": explicit proxies' connections are outbound, so it never matches",
                    r.name, r.loc
                ));
            }
            if !m.proxies.iter().any(|p| defined.contains(&p.as_str())) {
                let names = crate::settings::quoted_list(
                    &m.proxies.iter().map(String::as_str).collect::<Vec<_>>(),
                );
                out.push(if defined.is_empty() {
                    format!(
                        "rule {:?} ({}) matches only proxies named {names}, and none is defined here: add it under [[proxies]], or name a --listen with --name",
                        r.name, r.loc
                    )
                } else {
                    format!(
                        "rule {:?} ({}) matches only proxies named {names}, which no [[proxies]] defines (they are {}): it never matches",
                        r.name,
                        r.loc,
                        crate::settings::quoted_list(&defined)
                    )
                });
            }
        }
        out
    }

    /// The plan as `netchaos check` prints it.
    pub(crate) fn render(&self) -> String {
        let mut out = format!("seed: {}\n", self.seed);
        for (src, d) in &self.descriptions {
            out.push_str(&format!("profile {src}: {d}\n"));
        }
        if self.proxies.is_empty() {
            out.push_str("proxies: none (transparent interception, or --listen/--upstream)\n");
        }
        for p in &self.proxies {
            out.push_str(&format!(
                "proxy {:?}: listen {}{} -> upstream {}{}\n",
                p.name,
                if p.serve_tls { "https://" } else { "" },
                p.listen,
                if p.upstream_tls { "https://" } else { "" },
                p.upstream
            ));
        }
        for (host, api) in self.mocked_hosts() {
            out.push_str(&format!(
                "mock {host}: answered by the built-in mock ({} API), never dialled\n",
                api.name()
            ));
        }
        if self.tls_intercept {
            out.push_str(
                "tls: intercept (under `netchaos run`, HTTPS is terminated for HTTP and TLS faults, with the run's CA)\n",
            );
        }
        if self.rules.is_empty() {
            out.push_str("rules: none (traffic passes unharmed)\n");
        }
        for r in &self.rules {
            out.push_str(&format!("rule {:?}: {}\n", r.name, r.matcher));
            if r.faults.is_empty() {
                out.push_str("  (no faults)\n");
            }
            for f in &r.faults {
                out.push_str(&format!("  - {f}\n"));
            }
        }
        out
    }
}

/// Whether connection `seq` gets the fault (`rule`, `fault`) of the given
/// probability, and the seed for the fault's own random choices on it.
/// Independent of every other rule and fault.
pub(crate) fn draw(seed: u64, rule: u64, fault: u64, seq: u64, probability: f64) -> (bool, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, rule, fault));
    rng.set_stream(seq);
    let u: f64 = rng.random();
    let stage_seed: u64 = rng.random();
    (u < probability, stage_seed)
}

/// SplitMix64 over (seed, a, b): independent streams per rule and fault.
pub(crate) fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut z =
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta<'a>(ip: &str, port: u16, names: &'a [String]) -> ConnMeta<'a> {
        ConnMeta {
            flow: Flow::Outbound,
            proxy: None,
            ip: Some(ip.parse().unwrap()),
            names,
            port,
        }
    }

    #[test]
    fn matching_criteria() {
        let m = Match {
            dst: vec![
                DstPattern::parse("10.0.0.0/8").unwrap(),
                DstPattern::parse("*.example.com").unwrap(),
            ],
            ports: vec![
                parse_ports("443").unwrap(),
                parse_ports("8000-8100").unwrap(),
            ],
            flow: Some(Flow::Outbound),
            proxies: vec![],
            protocol: None,
        };
        assert!(m.matches(&meta("10.1.2.3", 443, &[])));
        assert!(m.matches(&meta("10.1.2.3", 8050, &[])));
        assert!(!m.matches(&meta("10.1.2.3", 80, &[])));
        assert!(!m.matches(&meta("192.168.1.1", 443, &[])));
        let names = vec!["API.example.com.".to_string()];
        assert!(m.matches(&meta("192.168.1.1", 443, &names)));
        let bare = vec!["example.com".to_string()];
        assert!(
            !m.matches(&meta("192.168.1.1", 443, &bare)),
            "*.x does not match x itself"
        );
        assert!(Match::default().matches(&meta("1.2.3.4", 1, &[])));
        let mapped = Match {
            dst: vec![DstPattern::parse("127.0.0.1").unwrap()],
            ..Match::default()
        };
        assert!(mapped.matches(&meta("::ffff:127.0.0.1", 1, &[])));
    }

    #[test]
    fn bad_patterns() {
        assert!(DstPattern::parse("10.0.0.0/33").is_err());
        assert!(DstPattern::parse("exa mple.com").is_err());
        assert!(parse_ports("0").is_err());
        assert!(parse_ports("90-80").is_err());
        assert!(parse_ports("http").is_err());
        assert!(parse_upstream("localhost").is_err());
        assert!(parse_upstream("localhost:6379").is_ok());
        assert!(parse_upstream("[::1]:80").is_ok());
        assert_eq!(
            parse_listen("8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
    }
}
