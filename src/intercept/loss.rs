//! The plan's `loss` faults as nftables rules: each gets a number, carried
//! in the mark the SYN gate gives an accepted SYN (and so, through
//! conntrack, every packet of its flow), and a rule of the namespace's
//! table that drops that share of the marked flows' packets.

use std::sync::Arc;

use super::nft::LossRule;
use crate::fault::{FaultKind, FaultSpec, Stream};
use crate::plan::Plan;

/// The numbered `loss` faults (at most 255: the mark's low byte).
#[derive(Default)]
pub(crate) struct LossTable {
    entries: Vec<(Arc<FaultSpec>, LossRule)>,
}

/// More `loss` faults than a mark can number.
#[derive(Debug, thiserror::Error)]
#[error("at most 255 loss faults are supported (the profiles have {0})")]
pub(crate) struct TooManyLosses(pub usize);

impl LossTable {
    pub(crate) fn from_plan(plan: &Plan) -> Result<LossTable, TooManyLosses> {
        let losses: Vec<_> = plan
            .rules
            .iter()
            .flat_map(|r| r.faults.iter())
            .filter_map(|spec| match &spec.kind {
                // Bursty ones are the packet delay line's.
                FaultKind::Loss(l) if !l.bursty() => Some((spec, l)),
                _ => None,
            })
            .collect();
        if losses.len() > 255 {
            return Err(TooManyLosses(losses.len()));
        }
        let entries = losses
            .into_iter()
            .enumerate()
            .map(|(i, (spec, l))| {
                let direction = match spec.stream {
                    Stream::Upstream => Some("original"),
                    Stream::Downstream => Some("reply"),
                    Stream::Both => None,
                };
                let rule = LossRule {
                    index: (i + 1) as u8,
                    ppm: l.ppm(),
                    direction,
                };
                (spec.clone(), rule)
            })
            .collect();
        Ok(LossTable { entries })
    }

    pub(crate) fn rules(&self) -> Vec<LossRule> {
        self.entries.iter().map(|(_, r)| *r).collect()
    }

    /// The number of this `loss` fault (the very one of the plan).
    pub(crate) fn index_of(&self, spec: &Arc<FaultSpec>) -> Option<u8> {
        self.entries
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, spec))
            .map(|(_, r)| r.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_faults_are_numbered_by_identity() {
        let spec = |p| Arc::new(crate::fault::testing::spec("loss", p).unwrap());
        let a = spec(&[("percent", "10"), ("stream", "upstream")]);
        let b = spec(&[("percent", "1")]);
        let plan = Plan {
            rules: vec![Arc::new(crate::plan::Rule {
                name: "r".into(),
                matcher: Default::default(),
                faults: vec![a.clone(), b.clone()],
                loc: String::new(),
            })],
            ..Plan::default()
        };
        let t = LossTable::from_plan(&plan).unwrap();
        assert_eq!(t.index_of(&a), Some(1));
        assert_eq!(t.index_of(&b), Some(2));
        let rules = t.rules();
        assert_eq!(
            (rules[0].ppm, rules[0].direction),
            (100_000, Some("original"))
        );
        assert_eq!((rules[1].ppm, rules[1].direction), (10_000, None));
        let other = spec(&[("percent", "10"), ("stream", "upstream")]);
        assert_eq!(
            t.index_of(&other),
            None,
            "an equal fault is not the same one"
        );
    }
}
