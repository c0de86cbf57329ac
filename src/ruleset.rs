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

use crate::fault::FaultSpec;
use crate::plan::{self, Chosen, ConnMeta, Match, Plan};

/// A fault in force, with an identity that survives parameter updates.
#[derive(Clone, Debug)]
pub struct FaultEntry {
    pub id: u64,
    pub spec: Arc<FaultSpec>,
}

/// A rule whose faults may change.
pub struct LiveRule {
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

    pub fn faults(&self) -> Arc<Vec<FaultEntry>> {
        self.faults.borrow().clone()
    }

    /// Replaces the rule's faults; open connections follow.
    pub fn set_faults(&self, faults: Vec<FaultEntry>) {
        self.faults.send_replace(Arc::new(faults));
    }

    pub fn subscribe(&self) -> FaultsRx {
        self.faults.subscribe()
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Disabling ends the rule's open connections (and, for transparent
    /// rules, new ones are refused); enabling lets them through again.
    pub fn set_enabled(&self, on: bool) {
        if self.enabled.swap(on, Ordering::Relaxed) && !on {
            let mut c = self.cancel.write().expect("rule lock");
            c.cancel();
            *c = CancellationToken::new();
        }
    }

    /// Completes when the rule is disabled or removed.
    pub fn cancelled(&self) -> CancellationToken {
        self.cancel.read().expect("rule lock").clone()
    }

    fn end(&self) {
        self.cancel.read().expect("rule lock").cancel();
    }
}

/// Every rule in force.
pub struct RuleSet {
    pub seed: u64,
    rules: RwLock<Vec<Arc<LiveRule>>>,
    next_key: AtomicU64,
    next_fault: AtomicU64,
}

/// API-made rules and faults get keys far from the plan's indices.
const DYNAMIC_KEYS: u64 = 1 << 32;

impl RuleSet {
    pub fn from_plan(plan: &Plan) -> RuleSet {
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

    pub fn rules(&self) -> Vec<Arc<LiveRule>> {
        self.rules.read().expect("rules lock").clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<LiveRule>> {
        self.rules
            .read()
            .expect("rules lock")
            .iter()
            .find(|r| &*r.name == name)
            .cloned()
    }

    /// Adds a rule; `None` if one of that name exists.
    pub fn add(&self, name: &str, matcher: Match) -> Option<Arc<LiveRule>> {
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
    pub fn remove(&self, name: &str) -> Option<Arc<LiveRule>> {
        let mut rules = self.rules.write().expect("rules lock");
        let i = rules.iter().position(|r| &*r.name == name)?;
        let rule = rules.remove(i);
        rule.end();
        Some(rule)
    }

    /// An identity for a fault added at run time.
    pub fn new_fault_id(&self) -> u64 {
        self.next_fault.fetch_add(1, Ordering::Relaxed)
    }

    /// The faults of connection `seq` as of now, and its subscriptions to
    /// the rules it matched.
    pub fn connect(&self, meta: &ConnMeta<'_>, seq: u64) -> ConnFaults {
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

/// One connection's view of the rules it matched.
pub struct ConnFaults {
    seed: u64,
    seq: u64,
    rules: Vec<(Arc<LiveRule>, FaultsRx)>,
}

/// A subscription to a rule's faults.
type FaultsRx = watch::Receiver<Arc<Vec<FaultEntry>>>;

impl ConnFaults {
    /// The connection's faults now: each matched rule's faults, in order,
    /// kept or dropped by their own seeded draw.
    pub fn chosen(&mut self, elapsed: Duration) -> Vec<Chosen> {
        let mut out = Vec::new();
        for (rule, rx) in &mut self.rules {
            let faults = rx.borrow_and_update().clone();
            for f in faults.iter() {
                let (keep, seed) =
                    plan::draw(self.seed, rule.key, f.id, self.seq, f.spec.probability);
                if keep && !f.spec.active.is_over(elapsed) {
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
    pub async fn changed(&mut self) {
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

    /// Whether any matched rule is disabled.
    pub fn disabled(&self) -> bool {
        self.rules.iter().any(|(r, _)| !r.enabled())
    }

    /// Signals that fire when one of the connection's rules is disabled or
    /// removed.
    pub fn end_signals(&self) -> Vec<CancellationToken> {
        self.rules.iter().map(|(r, _)| r.cancelled()).collect()
    }
}
