//! `dns_answer` (DNS layer): a matching A or AAAA query is answered with
//! the given `addresses` (those of the query's family), with `ttl` — or,
//! with none, an empty NOERROR ("the name exists, without an address") —
//! e.g. to send a name to an address that black-holes.
//!
//! An address may be a prefix ("10.9.0.0/16"): each query then gets one
//! address drawn from it, from the query's seeded draw, so a run replays.
//! `random = true` is Chaos Mesh's DNSChaos `random` action made safe: one
//! address from the documentation ranges (RFC 5737, RFC 3849), which no
//! network routes, so a client that connects to it reaches nobody.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use rand::Rng;

use super::acts::{DnsAct, Made};
use super::dns_match::QueryMatch;
use super::dns_match::QueryView;
use super::dns_timeout::MATCH_PARAMS;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct DnsAnswer {
    /// Each answers with one address: a single address is a /32 or /128.
    addresses: Vec<IpNet>,
    /// `random = true`: one address from one of `addresses`, not one from each.
    one_of: bool,
    ttl: u32,
    matcher: QueryMatch,
}

/// Where `random = true` draws from: TEST-NET-1, -2, -3 and IPv6's
/// documentation prefix. Some networks route them (a LAN on 192.0.2.0/24,
/// a default route that takes everything), so under interception netchaos
/// drops them itself in the namespace (`intercept::nft::Blackhole`).
pub(crate) const UNROUTED: [&str; 4] = [
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "2001:db8::/32",
];

/// A and AAAA: what `dns_answer` answers unless `qtype` says otherwise.
pub(crate) const ADDRESS_TYPES: [u16; 2] = [1, 28];

impl Kind for DnsAnswer {
    const INFO: KindInfo = KindInfo {
        name: "dns_answer",
        layer: Layer::Dns,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching A/AAAA query is answered with the given addresses (none: an empty answer)",
        params: &[
            (
                "addresses",
                "IP addresses or prefixes, default none",
                "the answer (each query gets its family's; a prefix gives one random address of it)",
            ),
            (
                "random",
                "true or false, default false",
                "one random address from the documentation ranges (Chaos Mesh's `random`)",
            ),
            ("ttl", "seconds, default 60", "the records' TTL"),
            MATCH_PARAMS[0],
            (
                "qtype",
                "record types, default A and AAAA",
                "only queries of these types",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let mut addresses = Vec::new();
        for (word, loc) in f.words("addresses")?.unwrap_or_default() {
            let net = match word.parse::<IpAddr>() {
                Ok(ip) => IpNet::from(ip),
                Err(_) => word.parse::<IpNet>().map_err(|_| {
                    f.error(
                        "addresses",
                        &loc,
                        format!(
                            "expected an IP address or prefix like \"10.0.0.1\", \"::1\" \
                             or \"10.9.0.0/16\", got {word:?}"
                        ),
                    )
                })?,
            };
            addresses.push(net);
        }
        let one_of = f.boolean("random")?.unwrap_or(false);
        if one_of {
            if !addresses.is_empty() {
                return Err(f.table_error(
                    "give `addresses` or `random = true`, not both \
                     (a prefix in `addresses` already draws a random address of it)",
                ));
            }
            addresses = UNROUTED
                .iter()
                .map(|n| n.parse().expect("a prefix"))
                .collect();
        }
        Ok(DnsAnswer {
            addresses,
            one_of,
            ttl: f.integer_in("ttl", 0, i32::MAX as u64)?.unwrap_or(60) as u32,
            matcher: QueryMatch::parse(f)?.or_types(&ADDRESS_TYPES),
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let a: Vec<String> = self
            .addresses
            .iter()
            .map(|n| match n.prefix_len() == n.max_prefix_len() {
                true => n.addr().to_string(),
                false => n.to_string(),
            })
            .collect();
        // As they parse back: none is no `addresses` at all (an empty
        // NOERROR), several are words (`10.0.0.1|10.0.0.2`).
        let mut p = if self.one_of {
            vec![("random", "true".into())]
        } else if a.is_empty() {
            vec![]
        } else {
            vec![("addresses", a.join("|"))]
        };
        p.push(("ttl", self.ttl.to_string()));
        p.extend(self.matcher.params());
        p
    }

    fn on_query(
        &self,
        q: &QueryView<'_>,
        _udp: bool,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<DnsAct> {
        self.matcher().matches(q).then(|| {
            DnsAct::Answer(Made::Addresses {
                addrs: self.for_type(q.qtype, rng),
                ttl: self.ttl(),
            })
        })
    }
}

impl DnsAnswer {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }

    /// The addresses answering a query of type `qtype` (A: IPv4, AAAA:
    /// IPv6); a prefix's address is drawn from `rng`.
    pub(crate) fn for_type(&self, qtype: u16, rng: &mut impl Rng) -> Vec<IpAddr> {
        let family: Vec<&IpNet> = self
            .addresses
            .iter()
            .filter(|n| match qtype {
                1 => matches!(n, IpNet::V4(_)),
                28 => matches!(n, IpNet::V6(_)),
                _ => false,
            })
            .collect();
        if self.one_of {
            if family.is_empty() {
                return Vec::new();
            }
            let n = family[rng.random_range(0..family.len())];
            return vec![draw(n, rng)];
        }
        family.into_iter().map(|n| draw(n, rng)).collect()
    }

    /// `random = true`: its answers come from [`UNROUTED`].
    pub(crate) fn is_random(&self) -> bool {
        self.one_of
    }

    pub(crate) fn ttl(&self) -> u32 {
        self.ttl
    }
}

/// An address of `net`, uniformly: the host bits drawn from `rng`.
fn draw(net: &IpNet, rng: &mut impl Rng) -> IpAddr {
    match net {
        IpNet::V4(n) => {
            let host = !u32::from(n.netmask());
            let bits = u32::from(n.network()) | (rng.random::<u32>() & host);
            IpAddr::V4(Ipv4Addr::from(bits))
        }
        IpNet::V6(n) => {
            let host = !u128::from(n.netmask());
            let bits = u128::from(n.network()) | (rng.random::<u128>() & host);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}
