//! Which names resolved to which addresses, learned from the DNS answers
//! the namespace's queries got (over UDP and TCP), so that rules can match
//! host names (`match.dst = ["api.example.com"]`) on connections that only
//! carry an address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use simple_dns::Packet;
use simple_dns::rdata::RData;

/// How long a learned name is kept at least, whatever the record's TTL: a
/// client may connect well after its lookup (connection pools, caches).
const KEEP_AT_LEAST: Duration = Duration::from_secs(600);
/// Most names remembered for one address.
const MAX_NAMES_PER_ADDRESS: usize = 64;
/// Most addresses remembered; beyond it, expired entries are dropped.
const MAX_ADDRESSES: usize = 65_536;

/// Which names resolved to which addresses.
#[derive(Default)]
pub(crate) struct NameTable {
    map: Mutex<HashMap<IpAddr, Vec<(String, Instant)>>>,
}

impl NameTable {
    pub(crate) fn learn(&self, name: &str, ip: IpAddr, ttl: u32) {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() {
            return;
        }
        let until = Instant::now() + KEEP_AT_LEAST.max(Duration::from_secs(u64::from(ttl)));
        let mut map = self.map.lock().expect("name table lock");
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&ip) {
            let now = Instant::now();
            map.retain(|_, names| {
                names.retain(|(_, t)| *t > now);
                !names.is_empty()
            });
            if map.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let names = map.entry(ip).or_default();
        // Most recently learned last: a connection that follows a lookup is
        // named by it, when several names share the address.
        match names.iter().position(|(n, _)| *n == name) {
            Some(i) => {
                let (n, t) = names.remove(i);
                names.push((n, t.max(until)));
            }
            None => {
                // Many names for one address (a CDN, wildcard DNS): keep
                // the ones that stay longest.
                if names.len() >= MAX_NAMES_PER_ADDRESS {
                    names.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
                    names.truncate(MAX_NAMES_PER_ADDRESS - 1);
                }
                names.push((name, until));
            }
        }
    }

    /// Names known for `ip` (IPv4-mapped IPv6 addresses count as IPv4).
    pub(crate) fn names(&self, ip: IpAddr) -> Vec<String> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.map
            .lock()
            .expect("name table lock")
            .get(&ip)
            .map(|names| names.iter().rev().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// Records every address in a DNS response under the names it answers
    /// for: the question's name and each record's owner (CNAME chains).
    pub(crate) fn learn_response(&self, response: &[u8]) {
        let Ok(packet) = Packet::parse(response) else {
            return;
        };
        let question: Option<String> = packet.questions.first().map(|q| q.qname.to_string());
        for rr in &packet.answers {
            let ip = match &rr.rdata {
                RData::A(a) => IpAddr::V4(Ipv4Addr::from(a.address)),
                RData::AAAA(a) => IpAddr::V6(Ipv6Addr::from(a.address)),
                _ => continue,
            };
            self.learn(&rr.name.to_string(), ip, rr.ttl);
            if let Some(q) = &question {
                self.learn(q, ip, rr.ttl);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::rdata::{A, CNAME};
    use simple_dns::{CLASS, Name, Question, ResourceRecord};

    #[test]
    fn learns_names_and_cname_chains() {
        let mut p = Packet::new_reply(7);
        p.questions.push(Question::new(
            Name::new_unchecked("api.example.com"),
            simple_dns::TYPE::A.into(),
            simple_dns::CLASS::IN.into(),
            false,
        ));
        p.answers.push(ResourceRecord::new(
            Name::new_unchecked("api.example.com"),
            CLASS::IN,
            60,
            RData::CNAME(CNAME(Name::new_unchecked("lb.example.net"))),
        ));
        p.answers.push(ResourceRecord::new(
            Name::new_unchecked("lb.example.net"),
            CLASS::IN,
            60,
            RData::A(A {
                address: u32::from(Ipv4Addr::new(10, 1, 2, 3)),
            }),
        ));
        let t = NameTable::default();
        t.learn_response(&p.build_bytes_vec().unwrap());
        let mut names = t.names("10.1.2.3".parse().unwrap());
        names.sort();
        assert_eq!(names, vec!["api.example.com", "lb.example.net"]);
        assert_eq!(t.names("::ffff:10.1.2.3".parse().unwrap()).len(), 2);
        assert!(t.names("10.9.9.9".parse().unwrap()).is_empty());
        t.learn_response(b"garbage");
    }
}
