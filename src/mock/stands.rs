//! Where the mock stands in for a provider (`--mock`, `[[mocks]]`): the
//! hosts it answers for, the addresses `run`'s DNS layer gives those
//! names (so that a machine with no network resolves them), and where
//! the mock listens, which the relay dials in their place.
//!
//! Each mocked host gets its own pair of addresses from the benchmarking
//! ranges (RFC 2544's 198.18.0.0/15, RFC 5180's 2001:2::/48), which no
//! network routes to: a connection to one can only have come from a
//! lookup the DNS layer answered.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::Api;

/// One host the mock answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stand {
    /// Lower case, without a trailing dot.
    pub(crate) host: String,
    pub(crate) api: Api,
    pub(crate) v4: Ipv4Addr,
    pub(crate) v6: Ipv6Addr,
}

/// Every host the mock answers for, and where it listens.
#[derive(Debug)]
pub(crate) struct Stands {
    at: SocketAddr,
    hosts: Vec<Stand>,
}

/// The most hosts one run may mock (each takes an address of its own).
pub(crate) const MAX_HOSTS: usize = 250;

impl Stands {
    /// The mock at `at`, for `hosts` (in order; at most [`MAX_HOSTS`]).
    pub(crate) fn new(at: SocketAddr, hosts: &[(String, Api)]) -> Stands {
        let hosts = hosts
            .iter()
            .take(MAX_HOSTS)
            .enumerate()
            .map(|(i, (host, api))| {
                let n = i as u8 + 1;
                Stand {
                    host: normal(host),
                    api: *api,
                    v4: Ipv4Addr::new(198, 18, 0, n),
                    v6: Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(n)),
                }
            })
            .collect();
        Stands { at, hosts }
    }

    /// Where the mock listens (in netchaos's own namespace).
    pub(crate) fn at(&self) -> SocketAddr {
        self.at
    }

    /// The host a connection to `ip` is for, when it is a mocked one's.
    pub(crate) fn by_ip(&self, ip: IpAddr) -> Option<&Stand> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.hosts.iter().find(|s| match ip {
            IpAddr::V4(v4) => s.v4 == v4,
            IpAddr::V6(v6) => s.v6 == v6,
        })
    }

    /// The mocked host named `name` (any case, a trailing dot or not).
    pub(crate) fn by_name(&self, name: &str) -> Option<&Stand> {
        let name = normal(name);
        self.hosts.iter().find(|s| s.host == name)
    }

    pub(crate) fn hosts(&self) -> &[Stand] {
        &self.hosts
    }
}

fn normal(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_has_its_own_addresses() {
        let s = Stands::new(
            "127.0.0.1:9".parse().unwrap(),
            &[
                ("API.anthropic.com.".into(), Api::Anthropic),
                ("api.openai.com".into(), Api::OpenAi),
            ],
        );
        let a = s.by_name("api.anthropic.com").unwrap();
        assert_eq!(a.v4, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(s.by_name("API.OPENAI.COM.").unwrap().api, Api::OpenAi);
        assert_eq!(
            s.by_ip("198.18.0.2".parse().unwrap()).unwrap().host,
            "api.openai.com"
        );
        assert_eq!(
            s.by_ip("2001:2::1".parse().unwrap()).unwrap().api,
            Api::Anthropic
        );
        assert_eq!(
            s.by_ip("::ffff:198.18.0.1".parse().unwrap()).unwrap().api,
            Api::Anthropic
        );
        assert!(s.by_ip("198.18.0.3".parse().unwrap()).is_none());
        assert!(s.by_name("example.com").is_none());
    }
}
