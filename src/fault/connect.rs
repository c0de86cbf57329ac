//! The connect phase, decided without I/O: what a new connection's SYN
//! meets, given the faults chosen for it and the moment (the caller brings
//! the clock), and what the client's `connect()` should see once the real
//! destination has answered the relay's own dial.
//!
//! The SYN gate carries the decisions out (holds the SYN, dials, answers);
//! here they are plain functions, tested on their own.

use std::time::Duration;

use super::Chosen;
use super::{Direction, FaultKind};

/// What a new connection's SYN meets, before any dial.
#[derive(Debug)]
pub(crate) struct ConnectPlan<'a> {
    /// How long to hold the SYN first (`connect_delay`s, in order), and the
    /// faults that caused it.
    pub delay: Duration,
    pub delayed_by: Vec<&'a Chosen>,
    pub verdict: Verdict<'a>,
}

/// The decision about a SYN.
#[derive(Debug)]
pub(crate) enum Verdict<'a> {
    /// Answer with RST: `refuse`, or (no fault) the connection limit.
    Refuse(Option<&'a Chosen>),
    /// Never answer: `connect_timeout`.
    BlackHole(&'a Chosen),
    /// Let the connection go ahead: dial the real destination first
    /// (unless `respond` replaces it), with the flow's `loss` fault if any
    /// and the faults its packets' path is made of ([`super::path`]).
    Proceed {
        dial: bool,
        loss: Option<&'a Chosen>,
        path: Vec<&'a Chosen>,
    },
}

/// Decides a SYN's fate from the faults chosen for its connection, in
/// order, at `elapsed` since netchaos started; `at_capacity` refuses it
/// whatever the faults (the connection limit).
pub(crate) fn plan<'a>(
    chosen: &'a [Chosen],
    elapsed: Duration,
    at_capacity: bool,
) -> ConnectPlan<'a> {
    let mut p = ConnectPlan {
        delay: Duration::ZERO,
        delayed_by: Vec::new(),
        verdict: Verdict::Proceed {
            dial: true,
            loss: None,
            path: Vec::new(),
        },
    };
    if at_capacity {
        p.verdict = Verdict::Refuse(None);
        return p;
    }
    let active = |c: &&Chosen| c.spec.active.contains(elapsed);
    for c in chosen.iter().filter(active) {
        match &c.spec.kind {
            FaultKind::Refuse(_) => {
                p.verdict = Verdict::Refuse(Some(c));
                return p;
            }
            FaultKind::ConnectTimeout(_) => {
                p.verdict = Verdict::BlackHole(c);
                return p;
            }
            FaultKind::ConnectDelay(d) => {
                p.delay += d.sample(&mut c.rng(Direction::Upstream));
                p.delayed_by.push(c);
            }
            _ => {}
        }
    }
    let respond = chosen
        .iter()
        .any(|c| matches!(c.spec.kind, FaultKind::Respond(_)));
    let loss = chosen
        .iter()
        .filter(active)
        .find(|c| matches!(&c.spec.kind, FaultKind::Loss(l) if !l.bursty()));
    let path = chosen
        .iter()
        .filter(active)
        .filter(|c| super::path::is_path_fault(&c.spec.kind))
        .collect();
    p.verdict = Verdict::Proceed {
        dial: !respond,
        loss,
        path,
    };
    p
}

/// How the relay's dial of the real destination failed, as the kernel said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DialFailure {
    /// RST (ECONNREFUSED).
    Refused,
    /// EHOSTUNREACH, EHOSTDOWN.
    HostUnreachable,
    /// ENETUNREACH, ENETDOWN.
    NetUnreachable,
    /// A firewall refused it (EACCES, EPERM).
    Prohibited,
    /// No answer within the dial timeout.
    Timeout,
    /// Anything else: an address the host cannot use, no descriptors.
    Other,
    /// One of netchaos's own listeners (the control API, a relay port):
    /// refused as a closed port would be.
    Own,
}

impl DialFailure {
    /// The errno's class.
    pub(crate) fn from_errno(errno: Option<i32>) -> DialFailure {
        match errno {
            Some(libc::ECONNREFUSED) => DialFailure::Refused,
            Some(libc::EHOSTUNREACH | libc::EHOSTDOWN) => DialFailure::HostUnreachable,
            Some(libc::ENETUNREACH | libc::ENETDOWN) => DialFailure::NetUnreachable,
            Some(libc::EACCES | libc::EPERM) => DialFailure::Prohibited,
            Some(libc::ETIMEDOUT) => DialFailure::Timeout,
            _ => DialFailure::Other,
        }
    }

    /// The relay error kind for events and counters.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            DialFailure::Refused => "dial_refused",
            DialFailure::HostUnreachable => "dial_unreachable",
            DialFailure::NetUnreachable => "dial_net_unreachable",
            DialFailure::Prohibited => "dial_prohibited",
            DialFailure::Timeout => "dial_timeout",
            DialFailure::Other => "dial_failed",
            DialFailure::Own => "dial_own_listener",
        }
    }
}

/// What the client's SYN gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SynFate {
    /// Through (the handshake completes with the relay).
    Pass,
    /// RST: ECONNREFUSED.
    Refuse,
    /// ICMP host unreachable: EHOSTUNREACH.
    HostUnreachable,
    /// ICMP network unreachable: ENETUNREACH.
    NetUnreachable,
    /// ICMP administratively prohibited.
    Prohibited,
    /// Nothing, ever (the client's own timeout ends it).
    Drop,
}

/// What the client would have seen without netchaos, given how the dial
/// went: only a silent destination leaves it waiting; any other failure
/// fails its `connect()` at once.
pub(crate) fn fate_of_dial(dial: Result<(), DialFailure>) -> SynFate {
    match dial {
        Ok(()) => SynFate::Pass,
        Err(DialFailure::Refused | DialFailure::Own) => SynFate::Refuse,
        Err(DialFailure::HostUnreachable | DialFailure::Other) => SynFate::HostUnreachable,
        Err(DialFailure::NetUnreachable) => SynFate::NetUnreachable,
        Err(DialFailure::Prohibited) => SynFate::Prohibited,
        Err(DialFailure::Timeout) => SynFate::Drop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::testing::spec;
    use std::sync::Arc;

    fn chosen(kind: &str, pairs: &[(&str, &str)]) -> Chosen {
        Chosen {
            id: 0,
            rule: "r".into(),
            spec: Arc::new(spec(kind, pairs).unwrap()),
            seed: 7,
        }
    }

    #[test]
    fn no_fault_dials_and_passes() {
        let p = plan(&[], Duration::ZERO, false);
        assert_eq!(p.delay, Duration::ZERO);
        assert!(matches!(
            p.verdict,
            Verdict::Proceed {
                dial: true,
                loss: None,
                ref path,
            } if path.is_empty()
        ));
    }

    #[test]
    fn the_limit_refuses_whatever_the_faults() {
        let c = [chosen("connect_delay", &[("delay", "1s")])];
        let p = plan(&c, Duration::ZERO, true);
        assert!(matches!(p.verdict, Verdict::Refuse(None)));
        assert_eq!(p.delay, Duration::ZERO);
    }

    #[test]
    fn delays_add_up_before_the_verdict_and_refuse_wins_in_order() {
        let c = [
            chosen("connect_delay", &[("delay", "200ms")]),
            chosen("connect_delay", &[("delay", "300ms")]),
            chosen("refuse", &[]),
            chosen("connect_timeout", &[]),
        ];
        let p = plan(&c, Duration::ZERO, false);
        assert_eq!(p.delay, Duration::from_millis(500));
        assert_eq!(p.delayed_by.len(), 2);
        assert!(matches!(p.verdict, Verdict::Refuse(Some(f)) if f.spec.name() == "refuse"));
        let p = plan(&c[3..], Duration::ZERO, false);
        assert!(matches!(p.verdict, Verdict::BlackHole(_)));
    }

    #[test]
    fn windows_decide_by_when_the_connection_opens() {
        let c = [chosen("refuse", &[("active", "10s..20s")])];
        assert!(matches!(
            plan(&c, Duration::from_secs(5), false).verdict,
            Verdict::Proceed { .. }
        ));
        assert!(matches!(
            plan(&c, Duration::from_secs(15), false).verdict,
            Verdict::Refuse(Some(_))
        ));
        assert!(matches!(
            plan(&c, Duration::from_secs(20), false).verdict,
            Verdict::Proceed { .. }
        ));
    }

    #[test]
    fn respond_skips_the_dial_and_loss_rides_along() {
        let c = [
            chosen("respond", &[("status", "503")]),
            chosen("loss", &[("percent", "5")]),
            chosen("packet_latency", &[("delay", "50ms")]),
            chosen("packet_rate", &[("rate", "1mbit"), ("active", "10s..")]),
        ];
        let Verdict::Proceed { dial, loss, path } = plan(&c, Duration::ZERO, false).verdict else {
            panic!()
        };
        assert!(!dial);
        assert_eq!(loss.unwrap().spec.name(), "loss");
        let names: Vec<_> = path.iter().map(|c| c.spec.name()).collect();
        assert_eq!(
            names,
            ["packet_latency"],
            "the rate's window has not opened"
        );
    }

    #[test]
    fn jitter_is_seeded_per_connection() {
        let c = [chosen(
            "connect_delay",
            &[("delay", "100ms"), ("jitter", "50ms")],
        )];
        let a = plan(&c, Duration::ZERO, false).delay;
        assert_eq!(a, plan(&c, Duration::ZERO, false).delay, "same seed");
        assert!((Duration::from_millis(50)..=Duration::from_millis(150)).contains(&a));
    }

    #[test]
    fn every_dial_failure_has_the_clients_answer() {
        use DialFailure::*;
        let cases = [
            (Ok(()), SynFate::Pass),
            (Err(Refused), SynFate::Refuse),
            (Err(HostUnreachable), SynFate::HostUnreachable),
            (Err(NetUnreachable), SynFate::NetUnreachable),
            (Err(Prohibited), SynFate::Prohibited),
            (Err(Timeout), SynFate::Drop),
            (Err(Other), SynFate::HostUnreachable),
        ];
        for (dial, fate) in cases {
            assert_eq!(fate_of_dial(dial), fate, "{dial:?}");
        }
        assert_eq!(DialFailure::from_errno(Some(libc::EINVAL)), Other);
        assert_eq!(
            DialFailure::from_errno(Some(libc::ENETDOWN)),
            NetUnreachable
        );
        assert_eq!(DialFailure::from_errno(None), Other);
    }
}
