//! Which of a connection's HTTP faults act on one request, and how: each
//! fault's `active` window, its request match (`first` and `every`
//! counted there), then its own `probability` draw for this request
//! number. Pure: the caller brings the request and the time.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::fault::http_abort::HttpAbort;
use crate::fault::http_delay::Phase;
use crate::fault::http_match::RequestView;
use crate::fault::http_reply::AnswerPhase;
use crate::fault::http_status::{After, HttpStatus};
use crate::fault::http_truncate::HttpTruncate;
use crate::fault::sse::Sse;
use crate::fault::{Chosen, FaultKind};

/// How netchaos answers a request in the upstream's place.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// With a canned reply (`http_status`).
    Status(HttpStatus),
    /// With no reply at all, the connection ending (`http_abort`).
    Abort(HttpAbort),
}

impl Reply {
    /// The status the client gets, if it gets one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Reply::Status(s) => Some(s.status()),
            Reply::Abort(_) => None,
        }
    }

    /// The bytes the client gets (`closing`: the connection ends after
    /// them; `head_only`: they answer a HEAD).
    pub(crate) fn bytes(&self, closing: bool, head_only: bool) -> Bytes {
        match self {
            Reply::Status(s) => s.reply(closing, head_only),
            Reply::Abort(_) => Bytes::new(),
        }
    }

    pub(crate) fn then(&self) -> After {
        match self {
            Reply::Status(s) => s.then(),
            Reply::Abort(a) => a.then(),
        }
    }
}

/// What the HTTP layer does with one request.
#[derive(Default)]
pub(crate) struct Decision {
    /// Answered in the upstream's place (the first `http_status` or
    /// `http_abort` that applies).
    pub(crate) answer: Option<(Chosen, Reply)>,
    /// Forwarded, but the upstream's response is replaced (or lost): the
    /// first `phase = "response"` answer that applies. An answer in the
    /// upstream's place leaves it nothing to replace.
    pub(crate) replace: Option<(Chosen, Reply)>,
    /// Held before it is forwarded (or answered).
    pub(crate) request_delay: Duration,
    /// Its response's head held.
    pub(crate) headers_delay: Duration,
    pub(crate) sse: Option<(Chosen, Sse)>,
    pub(crate) truncate: Option<(Chosen, HttpTruncate)>,
    /// The `http_delay` faults that hold the request (recorded as the
    /// hold begins, before any response exists).
    pub(crate) request_delays: Vec<Chosen>,
    /// The `http_delay` faults that hold the response's head (recorded as
    /// that hold begins, with the status it holds back).
    pub(crate) delays: Vec<Chosen>,
}

impl Decision {
    fn answers(&mut self, c: &Chosen, phase: AnswerPhase, reply: Reply) {
        let slot = match phase {
            AnswerPhase::Request => &mut self.answer,
            AnswerPhase::Response => &mut self.replace,
        };
        if slot.is_none() {
            *slot = Some((c.clone(), reply));
        }
    }
}

/// Whether any of the faults would look at request bodies.
pub(crate) fn needs_body(faults: &[Chosen]) -> bool {
    faults
        .iter()
        .any(|c| matcher_of(&c.spec.kind).is_some_and(|m| m.needs_body()))
}

fn matcher_of(kind: &FaultKind) -> Option<&crate::fault::http_match::RequestMatch> {
    match kind {
        FaultKind::HttpStatus(k) => Some(k.matcher()),
        FaultKind::HttpDelay(k) => Some(k.matcher()),
        FaultKind::Sse(k) => Some(k.matcher()),
        FaultKind::HttpTruncate(k) => Some(k.matcher()),
        FaultKind::HttpAbort(k) => Some(k.matcher()),
        _ => None,
    }
}

/// Decides request `n` of a connection, `elapsed` after netchaos started.
pub(crate) fn decide(
    faults: &Arc<Vec<Chosen>>,
    n: u64,
    view: &RequestView<'_>,
    elapsed: Duration,
) -> Decision {
    let mut d = Decision::default();
    for c in faults.iter() {
        let Some(m) = matcher_of(&c.spec.kind) else {
            continue;
        };
        if !c.spec.active.contains(elapsed) || !m.admits(view) {
            continue;
        }
        let (picked, mut rng) = c.request_draw(n);
        if !picked {
            continue;
        }
        match &c.spec.kind {
            FaultKind::HttpStatus(s) => d.answers(c, s.phase(), Reply::Status(s.clone())),
            FaultKind::HttpAbort(a) => d.answers(c, a.phase(), Reply::Abort(a.clone())),
            FaultKind::HttpDelay(h) => {
                let t = h.sample(&mut rng);
                match h.phase() {
                    Phase::Request => {
                        d.request_delay += t;
                        d.request_delays.push(c.clone());
                    }
                    Phase::Headers => {
                        d.headers_delay += t;
                        d.delays.push(c.clone());
                    }
                }
            }
            FaultKind::Sse(s) if d.sse.is_none() => d.sse = Some((c.clone(), s.clone())),
            FaultKind::HttpTruncate(t) if d.truncate.is_none() => {
                d.truncate = Some((c.clone(), t.clone()));
            }
            _ => {}
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::testing::spec;

    fn chosen(kind: &str, pairs: &[(&str, &str)], seed: u64) -> Chosen {
        Chosen {
            id: 1,
            rule: "r".into(),
            spec: Arc::new(spec(kind, pairs).unwrap()),
            seed,
        }
    }

    fn get(path: &str) -> RequestView<'_> {
        RequestView {
            method: "GET",
            path,
            host: None,
            headers: &[],
            body: None,
        }
    }

    /// The first rule that answers wins: an abort in front of a status
    /// leaves no reply, one behind it is not reached.
    #[test]
    fn an_abort_answers_with_nothing_in_its_turn() {
        let abort = chosen("http_abort", &[("path", "/a*")], 1);
        let status = chosen("http_status", &[("status", "503")], 1);
        let faults = Arc::new(vec![abort, status]);
        let d = decide(&faults, 0, &get("/abc"), Duration::ZERO);
        let (_, reply) = d.answer.unwrap();
        assert_eq!(reply.status(), None);
        assert!(reply.bytes(false, false).is_empty());
        assert_eq!(reply.then(), After::Reset);
        let d = decide(&faults, 1, &get("/other"), Duration::ZERO);
        assert_eq!(d.answer.unwrap().1.status(), Some(503));
    }

    #[test]
    fn probability_is_per_request_and_replays() {
        let faults = Arc::new(vec![chosen(
            "http_status",
            &[("status", "429"), ("probability", "0.3")],
            77,
        )]);
        let run = || {
            (0..1000)
                .map(|n| {
                    decide(&faults, n, &get("/"), Duration::ZERO)
                        .answer
                        .is_some()
                })
                .collect::<Vec<bool>>()
        };
        let a = run();
        let hits = a.iter().filter(|x| **x).count();
        assert!((240..360).contains(&hits), "{hits} of 1000 at 0.3");
        assert_eq!(a, run(), "the same requests, the same draws");
        let other = Arc::new(vec![chosen(
            "http_status",
            &[("status", "429"), ("probability", "0.3")],
            78,
        )]);
        let b: Vec<bool> = (0..1000)
            .map(|n| {
                decide(&other, n, &get("/"), Duration::ZERO)
                    .answer
                    .is_some()
            })
            .collect();
        assert_ne!(a, b, "another connection or seed, other draws");
    }

    #[test]
    fn faults_combine_and_windows_apply() {
        let faults = Arc::new(vec![
            chosen("http_delay", &[("delay", "2s"), ("phase", "request")], 1),
            chosen("http_delay", &[("delay", "1s")], 2),
            chosen("http_status", &[("status", "503"), ("path", "/x")], 3),
            chosen(
                "http_truncate",
                &[("after_bytes", "10"), ("active", "5s..")],
                4,
            ),
        ]);
        let d = decide(&faults, 0, &get("/x"), Duration::ZERO);
        assert_eq!(d.request_delay, Duration::from_secs(2));
        assert_eq!(d.headers_delay, Duration::from_secs(1));
        // Each phase's faults apart: each is recorded as its hold begins.
        assert_eq!((d.request_delays.len(), d.delays.len()), (1, 1));
        assert!(d.answer.is_some() && d.truncate.is_none());
        let d = decide(&faults, 1, &get("/y"), Duration::from_secs(6));
        assert!(d.answer.is_none() && d.truncate.is_some());
    }

    /// A response-phase answer lets the request through; one in the
    /// upstream's place still answers, and the first of each phase wins.
    #[test]
    fn response_phase_answers_replace_what_the_upstream_says() {
        let late = chosen(
            "http_status",
            &[("status", "502"), ("phase", "response")],
            1,
        );
        let lost = chosen("http_abort", &[("phase", "response"), ("path", "/pay")], 2);
        let faults = Arc::new(vec![lost, late]);
        let d = decide(&faults, 0, &get("/pay"), Duration::ZERO);
        assert!(d.answer.is_none(), "forwarded");
        assert_eq!(d.replace.unwrap().1.status(), None, "the abort comes first");
        let d = decide(&faults, 1, &get("/other"), Duration::ZERO);
        assert_eq!(d.replace.unwrap().1.status(), Some(502));
        let now = chosen("http_status", &[("status", "429")], 3);
        let faults = Arc::new(vec![faults[1].clone(), now]);
        let d = decide(&faults, 2, &get("/x"), Duration::ZERO);
        assert_eq!(d.answer.unwrap().1.status(), Some(429));
        assert!(
            d.replace.is_some(),
            "decided, and moot: the request never goes"
        );
    }
}
