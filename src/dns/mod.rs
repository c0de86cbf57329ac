//! The DNS layer: faults on the namespace's name resolution. Each query
//! (UDP from the forwarder, TCP from the relay) is numbered, its faults
//! drawn from the rules as of now ([`RuleSet::query`]), and its fate
//! decided ([`decide`]) — forwarded, held, answered in the resolver's
//! place ([`reply`]), or never answered. A retransmission of a query (same
//! client, id, name and type, within [`SAME_QUERY`]) keeps its number, so
//! a timed-out query stays unanswered through every retry and a
//! probability draw is not re-rolled by the client's resolver.

pub(crate) mod decide;
pub(crate) mod names;
pub(crate) mod reply;
pub(crate) mod tcp;

pub(crate) use decide::{Action, Decision, Query, Transport};
pub(crate) use names::NameTable;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::events::Events;
use crate::ruleset::RuleSet;

/// How long a query is remembered as the same query for its retries
/// (glibc retries after 5 s, twice; other stubs sooner).
pub(crate) const SAME_QUERY: Duration = Duration::from_secs(30);
/// Most queries remembered; a flood forgets the oldest first.
const MAX_REMEMBERED: usize = 4096;
/// Most DNS-over-TCP connections served at once; beyond, a new one is
/// closed (its stub falls back or retries), as a busy resolver does.
pub(crate) const MAX_TCP: usize = 256;
/// Most answers held back by `dns_delay` at once (each is one small
/// datagram); beyond, an answer is dropped and the client retries.
pub(crate) const MAX_HELD: usize = 4096;

type QueryKey = (IpAddr, Transport, u16, u16, String);

/// One query as the layer took it: its fate, and what recording its end
/// needs.
pub(crate) struct Asked {
    pub(crate) decision: Decision,
    query: Query,
    seq: u64,
    /// Not a retransmission of a query already taken.
    fresh: bool,
    at: Instant,
    client: SocketAddr,
    transport: Transport,
}

/// The DNS layer of one run: rules, numbering, and where answers go.
pub(crate) struct DnsLayer {
    rules: Arc<RuleSet>,
    pub(crate) events: Arc<Events>,
    /// When netchaos started: `active` windows count from here.
    epoch: Instant,
    next: AtomicU64,
    recent: Mutex<HashMap<QueryKey, (u64, Instant)>>,
    /// Names learned from answers, for `match.dst` host names.
    pub(crate) names: Arc<NameTable>,
    /// Where queries are forwarded.
    pub(crate) resolvers: Arc<Vec<SocketAddr>>,
    /// DNS-over-TCP connections being served ([`MAX_TCP`]).
    pub(crate) tcp_slots: Arc<tokio::sync::Semaphore>,
    /// UDP answers being held back ([`MAX_HELD`]).
    pub(crate) held: Arc<tokio::sync::Semaphore>,
    /// The hosts the built-in mock answers for: their names are answered
    /// here, in the resolvers' place, with the addresses that lead to it.
    mocks: Option<Arc<crate::mock::stands::Stands>>,
}

/// How long a mocked host's address may be cached (a resolver's typical
/// TTL for an API host).
const MOCK_TTL: u32 = 60;

impl DnsLayer {
    pub(crate) fn new(
        rules: Arc<RuleSet>,
        events: Arc<Events>,
        epoch: Instant,
        names: Arc<NameTable>,
        resolvers: Arc<Vec<SocketAddr>>,
        mocks: Option<Arc<crate::mock::stands::Stands>>,
    ) -> DnsLayer {
        DnsLayer {
            rules,
            events,
            epoch,
            next: AtomicU64::new(0),
            recent: Mutex::new(HashMap::new()),
            names,
            resolvers,
            tcp_slots: Arc::new(tokio::sync::Semaphore::new(MAX_TCP)),
            held: Arc::new(tokio::sync::Semaphore::new(MAX_HELD)),
            mocks,
        }
    }

    /// The fate of one query from `client`,
    /// with what [`DnsLayer::answered`] needs to record how it ended. The
    /// faults that act are recorded the first time a query is seen, not
    /// again for its retransmissions.
    pub(crate) fn ask(&self, client: SocketAddr, query: Query, transport: Transport) -> Asked {
        let at = Instant::now();
        let (seq, fresh) = self.number(client.ip(), transport, &query);
        let chosen = self.rules.query(&query.name, seq, self.epoch.elapsed());
        let mut d = decide::decide(&chosen, &query, transport);
        // What would go to the resolvers, for a mocked host, is answered
        // here: a fault on the name still acts first.
        if d.action == Action::Forward
            && let Some(s) = self.mocks.as_ref().and_then(|m| m.by_name(&query.name))
        {
            d.action = Action::Answer(decide::Made::Addresses {
                addrs: mocked_answer(s, query.qtype),
                ttl: MOCK_TTL,
            });
        }
        if fresh {
            self.events.dns_query();
            for c in &d.acting {
                self.events.dns_fault(
                    client,
                    &c.rule,
                    &c.spec,
                    (&query.name, query.qtype),
                    seq,
                    transport.as_str(),
                );
            }
        }
        Asked {
            decision: d,
            query,
            seq,
            fresh,
            at,
            client,
            transport,
        }
    }

    /// Records how a query ended — the answer its client got (`None`: none)
    /// and when — once per query, not per retransmission: the resolve
    /// phase of the run's report.
    pub(crate) fn answered(&self, a: &Asked, reply: Option<&[u8]>) {
        if !a.fresh {
            return;
        }
        let (answer, records) = match (reply, &a.decision.action) {
            (None, Action::Silence) => ("never".to_string(), 0),
            (None, _) => ("no answer".to_string(), 0),
            (Some(r), _) if r.len() >= 12 => {
                let records = u16::from_be_bytes([r[6], r[7]]);
                let answer = match (r[2] & 0x02 != 0, r[3] & 0x0f) {
                    (true, _) => "truncated".to_string(),
                    (_, 0) => "NOERROR".to_string(),
                    (_, 2) => "SERVFAIL".to_string(),
                    (_, 3) => "NXDOMAIN".to_string(),
                    (_, 5) => "REFUSED".to_string(),
                    (_, n) => format!("rcode {n}"),
                };
                (answer, records)
            }
            (Some(_), _) => ("malformed".to_string(), 0),
        };
        let ms = reply.map(|_| a.at.elapsed().as_secs_f64() * 1000.0);
        self.events.dns_answered(
            a.client,
            (&a.query.name, a.query.qtype),
            a.seq,
            a.transport.as_str(),
            ms,
            (&answer, records),
        );
    }

    /// The query's number, and whether it is new (not a retransmission).
    fn number(&self, ip: IpAddr, transport: Transport, q: &Query) -> (u64, bool) {
        let now = Instant::now();
        let key = (ip, transport, q.id, q.qtype, q.name.clone());
        let mut recent = self.recent.lock().expect("dns lock");
        if let Some((seq, at)) = recent.get_mut(&key)
            && now.duration_since(*at) < SAME_QUERY
        {
            // Each retry keeps the query alive for the next one.
            *at = now;
            return (*seq, false);
        }
        if recent.len() >= MAX_REMEMBERED {
            recent.retain(|_, (_, at)| now.duration_since(*at) < SAME_QUERY);
            if recent.len() >= MAX_REMEMBERED {
                // A flood: forget the older half (one sort per 2,048 queries).
                let mut times: Vec<Instant> = recent.values().map(|(_, t)| *t).collect();
                let mid = times.len() / 2;
                let (_, cut, _) = times.select_nth_unstable(mid);
                let cut = *cut;
                recent.retain(|_, (_, t)| *t > cut);
            }
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        recent.insert(key, (seq, now));
        (seq, true)
    }
}

/// A mocked host's records of type `qtype`: its address for A and AAAA,
/// none (NOERROR, no data) for any other type.
fn mocked_answer(s: &crate::mock::stands::Stand, qtype: u16) -> Vec<IpAddr> {
    match qtype {
        1 => vec![IpAddr::V4(s.v4)],
        28 => vec![IpAddr::V6(s.v6)],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::testing::spec;
    use crate::plan::{Match, Plan, Rule};
    use simple_dns::{CLASS, Name, Packet, Question, TYPE};

    fn query(id: u16, name: &str) -> Vec<u8> {
        let mut q = Packet::new_query(id);
        q.questions.push(Question::new(
            Name::new_unchecked(name),
            TYPE::A.into(),
            CLASS::IN.into(),
            false,
        ));
        q.build_bytes_vec().unwrap()
    }

    fn layer(seed: u64, p: &str) -> DnsLayer {
        let plan = Plan {
            seed,
            rules: vec![Arc::new(Rule {
                name: "r".into(),
                matcher: Match::default(),
                faults: vec![Arc::new(
                    spec("dns_timeout", &[("probability", p)]).unwrap(),
                )],
                loc: "t".into(),
            })],
            ..Plan::default()
        };
        DnsLayer::new(
            Arc::new(RuleSet::from_plan(&plan)),
            Arc::new(Events::in_memory()),
            Instant::now(),
            Default::default(),
            Arc::new(Vec::new()),
            None,
        )
    }

    fn fates(l: &DnsLayer, n: u16) -> Vec<bool> {
        let client: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        (0..n)
            .map(|i| {
                let q = Query::parse(&query(i, "a.test")).unwrap();
                l.ask(client, q, Transport::Udp).decision.action == Action::Silence
            })
            .collect()
    }

    #[tokio::test]
    async fn same_seed_same_queries_and_retries_keep_their_fate() {
        let a = fates(&layer(42, "0.5"), 40);
        assert_eq!(
            a,
            fates(&layer(42, "0.5"), 40),
            "a replay faults the same queries"
        );
        assert_ne!(a, fates(&layer(43, "0.5"), 40), "another seed, others");
        let hit = a.iter().filter(|x| **x).count();
        assert!((8..=32).contains(&hit), "{hit} of 40");
        // Retransmissions (same id from the same client) keep the query's
        // number, so its fate: every retry of a timed-out query is silent.
        let l = layer(42, "0.5");
        let first = fates(&l, 40);
        assert_eq!(first, fates(&l, 40));
        assert_eq!(
            l.next.load(Ordering::Relaxed),
            40,
            "retries are not new queries"
        );
    }
}
