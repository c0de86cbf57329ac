//! `dns_answer` (DNS layer): a matching A or AAAA query is answered with
//! the given `addresses` (those of the query's family), with `ttl` — or,
//! with none, an empty NOERROR ("the name exists, without an address") —
//! e.g. to send a name to an address that black-holes.

use std::net::IpAddr;

use super::dns_match::QueryMatch;
use super::dns_timeout::MATCH_PARAMS;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError, node_text};

#[derive(Debug, Clone)]
pub(crate) struct DnsAnswer {
    addresses: Vec<IpAddr>,
    ttl: u32,
    matcher: QueryMatch,
}

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
            ("addresses", "IP addresses, default none", "the answer (each query gets its family's)"),
            ("ttl", "seconds, default 60", "the records' TTL"),
            MATCH_PARAMS[0],
            ("qtype", "record types, default A and AAAA", "only queries of these types"),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let mut addresses = Vec::new();
        for n in f.strings("addresses")?.unwrap_or_default() {
            let text = node_text(&n);
            // `--fault` gives one string: "10.0.0.1|10.0.0.2" or spaces.
            for part in text.split(['|', ' ']).filter(|s| !s.is_empty()) {
                let ip: IpAddr = part.parse().map_err(|_| {
                    f.error(
                        "addresses",
                        &n.loc,
                        format!("expected an IP address like \"10.0.0.1\" or \"::1\", got {part:?}"),
                    )
                })?;
                addresses.push(ip);
            }
        }
        let ttl = f.integer_in("ttl", 0, i32::MAX as u64)?.unwrap_or(60) as u32;
        Ok(DnsAnswer {
            addresses,
            ttl,
            matcher: QueryMatch::parse(f)?.or_types(&ADDRESS_TYPES),
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let a: Vec<String> = self.addresses.iter().map(|a| a.to_string()).collect();
        let mut p = vec![
            ("addresses", if a.is_empty() { "none".into() } else { a.join(",") }),
            ("ttl", self.ttl.to_string()),
        ];
        p.extend(self.matcher.params());
        p
    }
}

impl DnsAnswer {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }

    /// The addresses answering a query of type `qtype` (A: IPv4, AAAA: IPv6).
    pub(crate) fn for_type(&self, qtype: u16) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().copied().filter(move |a| match qtype {
            1 => a.is_ipv4(),
            28 => a.is_ipv6(),
            _ => false,
        })
    }

    pub(crate) fn ttl(&self) -> u32 {
        self.ttl
    }
}
