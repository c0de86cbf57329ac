//! The rules in force while netchaos runs: the plan's rules, whose faults
//! the control API can change, and rules the API adds (one per proxy it
//! creates).
//!
//! Each rule publishes its fault list on a `watch` channel. A connection
//! keeps the rules it matched when it opened ([`ConnFaults`]); whenever one
//! of them changes, the connection recomputes its faults — each fault's
//! `probability` draw depends only on (seed, rule, fault, connection), so a
//! fault that stays keeps its decision — and its pipelines relink.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::fault::{Chosen, FaultSpec};
use crate::plan::{self, ConnMeta, Match, Plan};

/// A fault in force, with an identity that survives parameter updates.
#[derive(Clone, Debug)]
pub(crate) struct FaultEntry {
    pub id: u64,
    pub spec: Arc<FaultSpec>,
}

/// A rule whose faults may change.
pub(crate) struct LiveRule {
    pub name: Arc<str>,
    pub matcher: Match,
    /// The rule's key in probability draws (its index in the plan).
    pub key: u64,
    faults: watch::Sender<Arc<Vec<FaultEntry>>>,
    enabled: AtomicBool,
    /// Cancelled when the rule is disabled or removed: its connections end.
    cancel: RwLock<CancellationToken>,
}

impl LiveRule {
    fn new(name: Arc<str>, matcher: Match, key: u64, faults: Vec<FaultEntry>) -> LiveRule {
        LiveRule {
            name,
            matcher,
            key,
            faults: watch::Sender::new(Arc::new(faults)),
            enabled: AtomicBool::new(true),
            cancel: RwLock::new(CancellationToken::new()),
        }
    }

    pub(crate) fn faults(&self) -> Arc<Vec<FaultEntry>> {
        self.faults.borrow().clone()
    }

    /// Replaces the rule's faults; open connections follow.
    pub(crate) fn set_faults(&self, faults: Vec<FaultEntry>) {
        self.faults.send_replace(Arc::new(faults));
    }

    pub(crate) fn subscribe(&self) -> FaultsRx {
        self.faults.subscribe()
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Disabling ends the rule's open connections (and, for transparent
    /// rules, new ones are refused); enabling lets them through again.
    pub(crate) fn set_enabled(&self, on: bool) {
        if self.enabled.swap(on, Ordering::Relaxed) && !on {
            let mut c = self.cancel.write().expect("rule lock");
            c.cancel();
            *c = CancellationToken::new();
        }
    }

    /// Completes when the rule is disabled or removed.
    pub(crate) fn cancelled(&self) -> CancellationToken {
        self.cancel.read().expect("rule lock").clone()
    }

    fn end(&self) {
        self.cancel.read().expect("rule lock").cancel();
    }
}

/// Every rule in force.
pub(crate) struct RuleSet {
    pub seed: u64,
    rules: RwLock<Vec<Arc<LiveRule>>>,
    next_key: AtomicU64,
    next_fault: AtomicU64,
}

/// API-made rules and faults get keys far from the plan's indices.
const DYNAMIC_KEYS: u64 = 1 << 32;

impl RuleSet {
    pub(crate) fn from_plan(plan: &Plan) -> RuleSet {
        let rules = plan
            .rules
            .iter()
            .enumerate()
            .map(|(ri, r)| {
                let faults = r
                    .faults
                    .iter()
                    .enumerate()
                    .map(|(fi, f)| FaultEntry {
                        id: fi as u64,
                        spec: f.clone(),
                    })
                    .collect();
                Arc::new(LiveRule::new(
                    r.name.clone(),
                    r.matcher.clone(),
                    ri as u64,
                    faults,
                ))
            })
            .collect();
        RuleSet {
            seed: plan.seed,
            rules: RwLock::new(rules),
            next_key: AtomicU64::new(DYNAMIC_KEYS),
            next_fault: AtomicU64::new(DYNAMIC_KEYS),
        }
    }

    pub(crate) fn rules(&self) -> Vec<Arc<LiveRule>> {
        self.rules.read().expect("rules lock").clone()
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<LiveRule>> {
        self.rules
            .read()
            .expect("rules lock")
            .iter()
            .find(|r| &*r.name == name)
            .cloned()
    }

    /// Adds a rule; `None` if one of that name exists.
    pub(crate) fn add(&self, name: &str, matcher: Match) -> Option<Arc<LiveRule>> {
        let mut rules = self.rules.write().expect("rules lock");
        if rules.iter().any(|r| &*r.name == name) {
            return None;
        }
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let rule = Arc::new(LiveRule::new(name.into(), matcher, key, Vec::new()));
        rules.push(rule.clone());
        Some(rule)
    }

    /// Removes a rule; its open connections end.
    pub(crate) fn remove(&self, name: &str) -> Option<Arc<LiveRule>> {
        let mut rules = self.rules.write().expect("rules lock");
        let i = rules.iter().position(|r| &*r.name == name)?;
        let rule = rules.remove(i);
        rule.end();
        Some(rule)
    }

    /// An identity for a fault added at run time.
    pub(crate) fn new_fault_id(&self) -> u64 {
        self.next_fault.fetch_add(1, Ordering::Relaxed)
    }

    /// The faults of connection `seq` as of now, and its subscriptions to
    /// the rules it matched.
    pub(crate) fn connect(&self, meta: &ConnMeta<'_>, seq: u64) -> ConnFaults {
        let rules: Vec<_> = self
            .rules
            .read()
            .expect("rules lock")
            .iter()
            .filter(|r| r.matcher.matches(meta))
            .map(|r| (r.clone(), r.subscribe()))
            .collect();
        ConnFaults {
            seed: self.seed,
            seq,
            rules,
        }
    }
}

impl RuleSet {
    /// The DNS-layer faults for query `seq` (for `name`) at `elapsed`:
    /// each enabled matching rule's, kept by its own seeded draw — a pure
    /// function of (seed, rule, fault, query number), so a retransmission
    /// numbered as its query gets its fate.
    pub(crate) fn query(&self, name: &str, seq: u64, elapsed: Duration) -> Vec<Chosen> {
        let mut out = Vec::new();
        for rule in self.rules.read().expect("rules lock").iter() {
            if !rule.enabled() || !rule.matcher.matches_query(name) {
                continue;
            }
            for f in rule.faults().iter() {
                if f.spec.kind.layer() != crate::fault::Layer::Dns
                    || !f.spec.active.contains(elapsed)
                {
                    continue;
                }
                let (keep, seed) = plan::draw(self.seed, rule.key, f.id, seq, f.spec.probability);
                if keep {
                    out.push(Chosen {
                        id: plan::mix(0, rule.key, f.id),
                        rule: rule.name.clone(),
                        spec: f.spec.clone(),
                        seed,
                    });
                }
            }
        }
        out
    }
}

/// One connection's view of the rules it matched.
pub(crate) struct ConnFaults {
    seed: u64,
    seq: u64,
    rules: Vec<(Arc<LiveRule>, FaultsRx)>,
}

/// A subscription to a rule's faults.
type FaultsRx = watch::Receiver<Arc<Vec<FaultEntry>>>;

impl ConnFaults {
    /// The connection's faults now: each matched rule's faults, in order,
    /// kept or dropped by their own seeded draw (HTTP faults are all kept:
    /// they draw per request).
    pub(crate) fn chosen(&mut self, elapsed: Duration) -> Vec<Chosen> {
        let mut out = Vec::new();
        for (rule, rx) in &mut self.rules {
            let faults = rx.borrow_and_update().clone();
            for f in faults.iter() {
                let (keep, seed) =
                    plan::draw(self.seed, rule.key, f.id, self.seq, f.spec.probability);
                // HTTP faults draw per request (the HTTP layer's), not here.
                let per_request = f.spec.kind.info().per_request();
                if (keep || per_request) && !f.spec.active.is_over(elapsed) {
                    out.push(Chosen {
                        id: plan::mix(0, rule.key, f.id),
                        rule: rule.name.clone(),
                        spec: f.spec.clone(),
                        seed,
                    });
                }
            }
        }
        out
    }

    /// Completes when one of the connection's rules changes its faults.
    pub(crate) async fn changed(&mut self) {
        if self.rules.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.rules.iter_mut().map(|(_, rx)| Box::pin(rx.changed()));
        let (r, _, _) = futures_util::future::select_all(waits).await;
        if r.is_err() {
            // The rule was dropped: nothing more will change.
            std::future::pending::<()>().await;
        }
    }

    /// How the HTTP layer treats the connection (`match.protocol` of its
    /// rules: `tcp` wins over `http`).
    pub(crate) fn protocol(&self) -> Option<crate::plan::Protocol> {
        use crate::plan::Protocol;
        let mut out = None;
        for (r, _) in &self.rules {
            match r.matcher.protocol {
                Some(Protocol::Tcp) => return Some(Protocol::Tcp),
                Some(Protocol::Http) => out = Some(Protocol::Http),
                None => {}
            }
        }
        out
    }

    /// Whether any matched rule is disabled.
    pub(crate) fn disabled(&self) -> bool {
        self.rules.iter().any(|(r, _)| !r.enabled())
    }

    /// Signals that fire when one of the connection's rules is disabled or
    /// removed.
    pub(crate) fn end_signals(&self) -> Vec<CancellationToken> {
        self.rules.iter().map(|(r, _)| r.cancelled()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::testing::spec;
    use crate::plan::{DstPattern, Flow, Rule, parse_ports};

    fn rule(name: &str, matcher: Match, faults: &[(&str, &[(&str, &str)])]) -> Arc<Rule> {
        Arc::new(Rule {
            name: name.into(),
            matcher,
            faults: faults
                .iter()
                .map(|(k, p)| Arc::new(spec(k, p).unwrap()))
                .collect(),
            loc: "test".into(),
        })
    }

    fn meta<'a>(ip: &str, port: u16, names: &'a [String]) -> ConnMeta<'a> {
        ConnMeta {
            flow: Flow::Outbound,
            proxy: None,
            ip: Some(ip.parse().unwrap()),
            names,
            port,
        }
    }

    /// The faults connection `seq` gets, through the one decision engine.
    fn decide(plan: &Plan, m: &ConnMeta<'_>, seq: u64, elapsed: Duration) -> Vec<Chosen> {
        RuleSet::from_plan(plan).connect(m, seq).chosen(elapsed)
    }

    #[test]
    fn probability_splits_and_replays() {
        let plan = Plan {
            seed: 42,
            rules: vec![rule(
                "r",
                Match::default(),
                &[("reset", &[("probability", "0.3")])],
            )],
            ..Plan::default()
        };
        let pick = |p: &Plan| -> Vec<bool> {
            (0..2000)
                .map(|seq| !decide(p, &meta("1.1.1.1", 1, &[]), seq, Duration::ZERO).is_empty())
                .collect()
        };
        let a = pick(&plan);
        let hits = a.iter().filter(|x| **x).count();
        assert!((500..700).contains(&hits), "{hits} of 2000 at p=0.3");
        assert_eq!(a, pick(&plan), "same seed, same decisions");
        let other = Plan {
            seed: 43,
            ..plan.clone()
        };
        assert_ne!(a, pick(&other), "another seed, other decisions");
    }

    #[test]
    fn decisions_of_one_rule_ignore_other_rules() {
        let one = rule(
            "a",
            Match::default(),
            &[("reset", &[("probability", "0.5")])],
        );
        let plan1 = Plan {
            seed: 7,
            rules: vec![one.clone()],
            ..Plan::default()
        };
        let decide = |p: &Plan, seq| {
            decide(p, &meta("1.1.1.1", 1, &[]), seq, Duration::ZERO)
                .iter()
                .any(|c| &*c.rule == "a")
        };
        let ports = Match {
            ports: vec![parse_ports("9").unwrap()],
            ..Match::default()
        };
        let plan2 = Plan {
            seed: 7,
            rules: vec![
                one,
                rule(
                    "b",
                    ports,
                    &[("latency", &[("delay", "1ms"), ("probability", "0.5")])],
                ),
            ],
            ..Plan::default()
        };
        for seq in 0..200 {
            assert_eq!(decide(&plan1, seq), decide(&plan2, seq));
        }
    }

    #[test]
    fn expired_windows_are_skipped() {
        let plan = Plan {
            rules: vec![rule(
                "r",
                Match::default(),
                &[("latency", &[("delay", "1ms"), ("active", "..10s")])],
            )],
            ..Plan::default()
        };
        assert_eq!(
            decide(&plan, &meta("1.1.1.1", 1, &[]), 0, Duration::from_secs(5)).len(),
            1
        );
        assert!(decide(&plan, &meta("1.1.1.1", 1, &[]), 0, Duration::from_secs(10)).is_empty());
    }

    #[test]
    fn only_matching_rules_apply_in_order() {
        let plan = Plan {
            seed: 1,
            rules: vec![
                rule(
                    "https",
                    Match {
                        ports: vec![parse_ports("443").unwrap()],
                        ..Match::default()
                    },
                    &[("latency", &[("delay", "1ms")])],
                ),
                rule(
                    "api",
                    Match {
                        dst: vec![DstPattern::parse("api.example.com").unwrap()],
                        ..Match::default()
                    },
                    &[("reset", &[]), ("close", &[])],
                ),
            ],
            ..Plan::default()
        };
        let names = vec!["api.example.com".to_string()];
        let got: Vec<&str> = decide(&plan, &meta("10.0.0.1", 443, &names), 1, Duration::ZERO)
            .iter()
            .map(|c| c.spec.name())
            .collect();
        assert_eq!(got, ["latency", "reset", "close"]);
        assert!(decide(&plan, &meta("10.0.0.1", 80, &[]), 1, Duration::ZERO).is_empty());
    }

    #[test]
    fn a_changed_rule_keeps_its_other_faults_decisions() {
        let plan = Plan {
            seed: 9,
            rules: vec![rule(
                "r",
                Match::default(),
                &[("reset", &[("probability", "0.5")])],
            )],
            ..Plan::default()
        };
        let set = RuleSet::from_plan(&plan);
        let m = meta("1.1.1.1", 1, &[]);
        let before: Vec<bool> = (0..100)
            .map(|seq| !set.connect(&m, seq).chosen(Duration::ZERO).is_empty())
            .collect();
        // The API adds a fault to the rule: the first one's draws stay.
        let r = set.get("r").unwrap();
        let mut faults = (*r.faults()).clone();
        faults.push(FaultEntry {
            id: set.new_fault_id(),
            spec: Arc::new(spec("latency", &[("delay", "1ms")]).unwrap()),
        });
        r.set_faults(faults);
        let after: Vec<bool> = (0..100)
            .map(|seq| {
                set.connect(&m, seq)
                    .chosen(Duration::ZERO)
                    .iter()
                    .any(|c| c.spec.name() == "reset")
            })
            .collect();
        assert_eq!(before, after);
    }
}
