//! The addresses `netchaos run`'s namespace gives itself (on `lo`, so that
//! a default route exists), chosen so that they cannot be mistaken for
//! anything on the host: a connection the command makes to one of them is
//! a connection to itself and stays inside, and no address the host uses
//! (its own, a gateway, a network it routes to) is hidden from the command.
//!
//! Candidates are the documentation ranges (RFC 5737, RFC 3849), which no
//! network should use — but some do (one machine had 192.0.2.1 as its
//! gateway), so each is checked against the host's interfaces and its main
//! routing table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The namespace's own addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NsAddrs {
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
}

impl NsAddrs {
    /// Whether `ip` is one of the namespace's own (or a link-local one,
    /// which is only meaningful inside it).
    pub(crate) fn is_own(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => v4 == self.v4 || v4.is_link_local(),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4 == self.v4,
                None => v6 == self.v6 || (v6.segments()[0] & 0xffc0) == 0xfe80,
            },
        }
    }

    /// The first candidates the host does not use.
    pub(crate) fn choose() -> Result<NsAddrs, super::error::InterceptError> {
        use super::error::InterceptError::Unavailable;
        let host = HostNet::read();
        let v4 = candidates_v4()
            .find(|a| !host.uses(IpAddr::V4(*a)))
            .ok_or_else(|| Unavailable("no address of 192.0.2.0/24, 198.51.100.0/24 or 203.0.113.0/24 is free of the host's routes and addresses, so the namespace has none to give itself".into()))?;
        let v6 = candidates_v6()
            .find(|a| !host.uses(IpAddr::V6(*a)))
            .ok_or_else(|| {
                Unavailable(
                    "no address of 2001:db8::/32 is free of the host's routes and addresses".into(),
                )
            })?;
        Ok(NsAddrs { v4, v6 })
    }
}

fn candidates_v4() -> impl Iterator<Item = Ipv4Addr> {
    let nets = [[192, 0, 2], [198, 51, 100], [203, 0, 113]];
    let firsts = nets.map(|[a, b, c]| Ipv4Addr::new(a, b, c, 1));
    let others = nets
        .into_iter()
        .flat_map(|[a, b, c]| (2..255).map(move |d| Ipv4Addr::new(a, b, c, d)));
    firsts.into_iter().chain(others)
}

fn candidates_v6() -> impl Iterator<Item = Ipv6Addr> {
    (0u16..4096).map(|n| Ipv6Addr::new(0x2001, 0xdb8, n, 0, 0, 0, 0, 1))
}

/// What the host's network uses: its addresses, gateways and routed
/// networks (the default route aside).
#[derive(Default, Debug)]
struct HostNet {
    addrs: Vec<IpAddr>,
    gateways: Vec<IpAddr>,
    nets: Vec<ipnet::IpNet>,
}

impl HostNet {
    fn read() -> HostNet {
        let mut h = HostNet::default();
        if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
            for a in addrs {
                let Some(sa) = a.address else { continue };
                if let Some(v4) = sa.as_sockaddr_in() {
                    h.addrs.push(IpAddr::V4(v4.ip()));
                } else if let Some(v6) = sa.as_sockaddr_in6() {
                    h.addrs.push(IpAddr::V6(v6.ip()));
                }
            }
        }
        if let Ok(t) = std::fs::read_to_string("/proc/net/route") {
            h.add_routes_v4(&t);
        }
        if let Ok(t) = std::fs::read_to_string("/proc/net/ipv6_route") {
            h.add_routes_v6(&t);
        }
        h
    }

    /// `/proc/net/route`: destination, gateway and mask as little-endian hex.
    fn add_routes_v4(&mut self, text: &str) {
        let hex = |s: &str| {
            u32::from_str_radix(s, 16)
                .ok()
                .map(|n| Ipv4Addr::from(n.swap_bytes()))
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(dst), Some(gw), Some(mask)) = (
                f.get(1).and_then(|s| hex(s)),
                f.get(2).and_then(|s| hex(s)),
                f.get(7).and_then(|s| hex(s)),
            ) else {
                continue;
            };
            if !gw.is_unspecified() {
                self.gateways.push(IpAddr::V4(gw));
            }
            let prefix = u32::from(mask).leading_ones() as u8;
            if prefix > 0 {
                if let Ok(net) = ipnet::Ipv4Net::new(dst, prefix) {
                    self.nets.push(net.into());
                }
            }
        }
    }

    /// `/proc/net/ipv6_route`: destination, its prefix length, source,
    /// its prefix length, next hop, … (hex, no separators).
    fn add_routes_v6(&mut self, text: &str) {
        let addr = |s: &str| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from);
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(dst), Some(prefix), Some(gw)) = (
                f.first().and_then(|s| addr(s)),
                f.get(1).and_then(|s| u8::from_str_radix(s, 16).ok()),
                f.get(4).and_then(|s| addr(s)),
            ) else {
                continue;
            };
            if !gw.is_unspecified() {
                self.gateways.push(IpAddr::V6(gw));
            }
            if prefix > 0 {
                if let Ok(net) = ipnet::Ipv6Net::new(dst, prefix) {
                    self.nets.push(net.into());
                }
            }
        }
    }

    fn uses(&self, ip: IpAddr) -> bool {
        self.addrs.contains(&ip)
            || self.gateways.contains(&ip)
            || self.nets.iter().any(|n| n.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_or_a_routed_network_is_never_chosen() {
        let mut h = HostNet::default();
        // default via 192.0.2.1; 198.51.100.0/24 on an interface.
        h.add_routes_v4(
            "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
             eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
             eth1\t006433C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
        );
        assert!(h.uses("192.0.2.1".parse().unwrap()), "{h:?}");
        assert!(h.uses("198.51.100.7".parse().unwrap()));
        assert!(
            !h.uses("203.0.113.1".parse().unwrap()),
            "the default route does not count"
        );
        let first = candidates_v4().find(|a| !h.uses(IpAddr::V4(*a))).unwrap();
        assert_eq!(first, Ipv4Addr::new(203, 0, 113, 1));
        h.add_routes_v6(
            "20010db8000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n",
        );
        assert!(h.uses("2001:db8::1".parse().unwrap()));
    }

    #[test]
    fn own_addresses_include_link_local_ones() {
        let a = NsAddrs {
            v4: Ipv4Addr::new(192, 0, 2, 1),
            v6: "2001:db8::1".parse().unwrap(),
        };
        assert!(a.is_own("192.0.2.1".parse().unwrap()));
        assert!(a.is_own("::ffff:192.0.2.1".parse().unwrap()));
        assert!(a.is_own("fe80::1".parse().unwrap()));
        assert!(a.is_own("169.254.1.1".parse().unwrap()));
        assert!(!a.is_own("192.0.2.2".parse().unwrap()));
        assert!(!a.is_own("10.0.0.1".parse().unwrap()));
    }
}
