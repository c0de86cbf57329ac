//! The fate of one DNS query, decided from the faults drawn for it — pure:
//! no sockets, no clock; the caller brings the query and the draws.
//!
//! The first fault in rule order that ends the query decides it (never
//! answered, an error, an answer of ours, truncated); every `dns_delay`
//! that matches adds its hold to the answer, ours or the resolver's. What
//! each fault does is its kind's hook ([`DnsAct`]).

use std::time::Duration;

use simple_dns::{OPCODE, Packet, PacketFlag};

use crate::fault::acts::DnsAct;
use crate::fault::dns_match::QueryView;
use crate::fault::{Chosen, Direction};

/// How a query reached the forwarder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// A well-formed standard query, as the DNS layer looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    pub id: u16,
    /// Lower case, without the trailing dot.
    pub name: String,
    pub qtype: u16,
    /// The reply size it allows: its EDNS UDP size, 512 bytes without.
    pub reply_size: usize,
}

impl Query {
    /// `None` for anything but a standard query with one question (a
    /// response, another opcode, not DNS at all).
    pub(crate) fn parse(bytes: &[u8]) -> Option<Query> {
        let p = Packet::parse(bytes).ok()?;
        if p.has_flags(PacketFlag::RESPONSE)
            || p.opcode() != OPCODE::StandardQuery
            || p.questions.len() != 1
        {
            return None;
        }
        let q = &p.questions[0];
        Some(Query {
            id: p.id(),
            name: q
                .qname
                .to_string()
                .trim_end_matches('.')
                .to_ascii_lowercase(),
            qtype: u16::from(q.qtype),
            reply_size: p
                .opt()
                .map_or(512, |o| usize::from(o.udp_packet_size))
                .clamp(512, 65_535),
        })
    }

    fn view(&self) -> QueryView<'_> {
        QueryView {
            name: &self.name,
            qtype: self.qtype,
        }
    }
}

pub(crate) use crate::fault::acts::Made;

/// What happens to the query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// To the resolvers, as without netchaos.
    Forward,
    /// Never answered.
    Silence,
    /// Answered by netchaos.
    Answer(Made),
}

/// A query's fate and the faults that made it.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub action: Action,
    /// How long the answer (any answer) is held.
    pub delay: Duration,
    /// The faults that took effect, in rule order.
    pub acting: Vec<Chosen>,
}

/// Decides `query`'s fate from the faults drawn for it.
pub(crate) fn decide(chosen: &[Chosen], query: &Query, transport: Transport) -> Decision {
    let view = query.view();
    let mut d = Decision {
        action: Action::Forward,
        delay: Duration::ZERO,
        acting: Vec::new(),
    };
    // The faults acting, in rule order, and whether each is a hold.
    let mut acting: Vec<(Chosen, bool)> = Vec::new();
    let udp = transport == Transport::Udp;
    for c in chosen {
        // The kind's own hook says what it does (no kind is named here).
        let act = c
            .spec
            .kind
            .on_query(&view, udp, &mut c.rng(Direction::Downstream));
        let ends = match act {
            Some(DnsAct::Hold(t)) => {
                if d.action != Action::Silence {
                    d.delay += t;
                    acting.push((c.clone(), true));
                }
                continue;
            }
            Some(DnsAct::Silence) => Action::Silence,
            Some(DnsAct::Answer(made)) => Action::Answer(made),
            None => continue,
        };
        if d.action == Action::Forward {
            d.action = ends;
            acting.push((c.clone(), false));
        }
    }
    // Nothing is held that is never sent.
    let silent = d.action == Action::Silence;
    if silent {
        d.delay = Duration::ZERO;
    }
    d.acting = acting
        .into_iter()
        .filter(|(_, hold)| !(silent && *hold))
        .map(|(c, _)| c)
        .collect();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::dns_error::Rcode;
    use crate::fault::testing::spec;
    use std::net::IpAddr;
    use std::sync::Arc;

    fn chosen(list: &[(&str, &[(&str, &str)])]) -> Vec<Chosen> {
        list.iter()
            .enumerate()
            .map(|(i, (k, p))| Chosen {
                id: i as u64,
                rule: "r".into(),
                spec: Arc::new(spec(k, p).unwrap()),
                seed: 7,
            })
            .collect()
    }

    fn q(name: &str, qtype: u16) -> Query {
        Query {
            id: 1,
            name: name.into(),
            qtype,
            reply_size: 512,
        }
    }

    #[test]
    fn first_ending_fault_wins_and_delays_add() {
        let c = chosen(&[
            ("dns_delay", &[("delay", "300ms")]),
            ("dns_error", &[("rcode", "SERVFAIL"), ("name", "a.test")]),
            ("dns_timeout", &[]),
            ("dns_delay", &[("delay", "100ms")]),
        ]);
        let d = decide(&c, &q("a.test", 1), Transport::Udp);
        assert_eq!(d.action, Action::Answer(Made::Error(Rcode::ServFail)));
        assert_eq!(d.delay, Duration::from_millis(400));
        assert_eq!(d.acting.len(), 3, "both delays and the error");
        let d = decide(&c, &q("b.test", 1), Transport::Udp);
        assert_eq!(d.action, Action::Silence, "the error is for a.test only");
        assert_eq!(d.delay, Duration::ZERO);
        assert_eq!(d.acting.len(), 1);
    }

    #[test]
    fn answers_by_family_and_truncation_only_over_udp() {
        let c = chosen(&[("dns_answer", &[("addresses", "10.0.0.9|::9")])]);
        let a = decide(&c, &q("x", 1), Transport::Udp);
        assert_eq!(
            a.action,
            Action::Answer(Made::Addresses {
                addrs: vec!["10.0.0.9".parse().unwrap()],
                ttl: 60
            })
        );
        let aaaa = decide(&c, &q("x", 28), Transport::Udp);
        assert!(
            matches!(aaaa.action, Action::Answer(Made::Addresses { ref addrs, .. }) if addrs == &["::9".parse::<IpAddr>().unwrap()])
        );
        assert_eq!(
            decide(&c, &q("x", 15), Transport::Udp).action,
            Action::Forward,
            "MX is not answered"
        );
        let t = chosen(&[("dns_truncate", &[])]);
        assert_eq!(
            decide(&t, &q("x", 1), Transport::Udp).action,
            Action::Answer(Made::Truncated)
        );
        assert_eq!(
            decide(&t, &q("x", 1), Transport::Tcp).action,
            Action::Forward
        );
    }

    fn addrs(c: &[Chosen], qtype: u16) -> Vec<IpAddr> {
        match decide(c, &q("x", qtype), Transport::Udp).action {
            Action::Answer(Made::Addresses { addrs, .. }) => addrs,
            other => panic!("expected addresses, got {other:?}"),
        }
    }

    fn reseeded(mut c: Vec<Chosen>, seed: u64) -> Vec<Chosen> {
        c.iter_mut().for_each(|c| c.seed = seed);
        c
    }

    #[test]
    fn a_prefix_answers_one_address_of_it_drawn_from_the_seed() {
        let c = chosen(&[(
            "dns_answer",
            &[("addresses", "10.9.0.0/16|10.0.0.1|fd00::/120")],
        )]);
        let net: ipnet::IpNet = "10.9.0.0/16".parse().unwrap();
        let mut seen = std::collections::HashSet::new();
        for seed in 0..50 {
            let a = addrs(&reseeded(c.clone(), seed), 1);
            assert_eq!(a.len(), 2, "one per entry of the family: {a:?}");
            assert!(net.contains(&a[0]), "{} is not in {net}", a[0]);
            assert_eq!(
                a[1],
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "an address stays itself"
            );
            seen.insert(a[0]);
            let six = addrs(&reseeded(c.clone(), seed), 28);
            assert_eq!(six.len(), 1);
            assert!(
                "fd00::/120"
                    .parse::<ipnet::IpNet>()
                    .unwrap()
                    .contains(&six[0])
            );
        }
        assert!(
            seen.len() > 40,
            "draws spread over the prefix: {} distinct",
            seen.len()
        );
        assert_eq!(
            addrs(&reseeded(c.clone(), 3), 1),
            addrs(&reseeded(c, 3), 1),
            "a seed replays"
        );
    }

    #[test]
    fn random_answers_one_documentation_address_per_query() {
        let c = chosen(&[("dns_answer", &[("random", "true")])]);
        let doc: Vec<ipnet::IpNet> = [
            "192.0.2.0/24",
            "198.51.100.0/24",
            "203.0.113.0/24",
            "2001:db8::/32",
        ]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
        let mut ranges = std::collections::HashSet::new();
        for seed in 0..60 {
            for qtype in [1, 28] {
                let a = addrs(&reseeded(c.clone(), seed), qtype);
                assert_eq!(a.len(), 1, "{a:?}");
                let range = doc.iter().position(|n| n.contains(&a[0]));
                assert!(
                    range.is_some(),
                    "{} is outside the documentation ranges",
                    a[0]
                );
                assert_eq!(a[0].is_ipv6(), qtype == 28, "the query's family");
                ranges.insert(range);
            }
        }
        assert_eq!(ranges.len(), 4, "every range is drawn from");
        assert!(
            spec(
                "dns_answer",
                &[("random", "true"), ("addresses", "10.0.0.1")]
            )
            .is_err()
        );
        let e = spec("dns_answer", &[("addresses", "10.9.0.0/33")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("IP address or prefix"), "{e}");
    }
}
