//! Which of a connection's HTTP faults act on one request, and how: each
//! fault's `active` window, its request match (`first` and `every`
//! counted there), then its own `probability` draw for this request
//! number; what each does is its kind's hook ([`HttpAct`]), gathered
//! here into one [`Decision`]. Pure: the caller brings the request and
//! the time.

use std::sync::Arc;
use std::time::Duration;

use crate::fault::Chosen;
use crate::fault::acts::HttpAct;
pub(crate) use crate::fault::acts::Reply;
use crate::fault::http_delay::Phase;
use crate::fault::http_match::RequestView;
use crate::fault::http_reply::AnswerPhase;
use crate::fault::http_rewrite::HttpRewrite;
use crate::fault::http_truncate::HttpTruncate;
use crate::fault::sse::Sse;

/// What the HTTP layer does with one request.
#[derive(Default)]
pub(crate) struct Decision {
    /// Answered in the upstream's place (the first `http_status` or
    /// `http_abort` that applies).
    pub(crate) answer: Option<(Chosen, Reply)>,
    /// Held before it is forwarded (or answered).
    pub(crate) request_delay: Duration,
    /// The `http_delay` faults that hold the request (recorded as the
    /// hold begins, before any response exists).
    pub(crate) request_delays: Vec<Chosen>,
    /// `http_rewrite` edits to the request as it is forwarded, in rule
    /// order (each applies; moot when it is answered here).
    pub(crate) rewrites: Vec<(Chosen, HttpRewrite)>,
    /// What may act on its response, in rule order; which do depends on
    /// the response's status ([`Decision::on_response`]).
    later: Vec<Later>,
}

/// A fault drawn for a request that acts on its response.
enum Later {
    /// Holds the response's head this long.
    Delay(Chosen, Duration),
    /// Replaces (or loses) the upstream's response.
    Replace(Chosen, Reply),
    Sse(Chosen, Sse),
    Truncate(Chosen, HttpTruncate),
    Rewrite(Chosen, HttpRewrite),
}

impl Later {
    fn chosen(&self) -> &Chosen {
        match self {
            Later::Delay(c, _)
            | Later::Replace(c, _)
            | Later::Sse(c, _)
            | Later::Truncate(c, _)
            | Later::Rewrite(c, _) => c,
        }
    }
}

/// The faults that act on one response: those of its request's whose
/// `response_status` and `response_header` admit it (the first
/// replacement and the first truncation; every delay, `sse` fault and
/// rewrite).
#[derive(Default)]
pub(crate) struct OnResponse {
    /// How long its head is held, and the `http_delay` faults that hold it
    /// (recorded as the hold begins, with the status it holds back).
    pub(crate) headers_delay: Duration,
    pub(crate) delays: Vec<Chosen>,
    /// Forwarded, but the upstream's response is replaced (or lost).
    pub(crate) replace: Option<(Chosen, Reply)>,
    /// `sse` faults, in rule order: each acts (patches one after
    /// another, delays added up, breaks as their turns come).
    pub(crate) sse: Vec<(Chosen, Sse)>,
    pub(crate) truncate: Option<(Chosen, HttpTruncate)>,
    /// `http_rewrite` edits to its head, in rule order (each applies).
    pub(crate) rewrites: Vec<(Chosen, HttpRewrite)>,
}

impl Decision {
    /// An answer in the upstream's place: the first one applies. One after
    /// the upstream's waits for its response (and its status).
    fn answers(&mut self, c: &Chosen, phase: AnswerPhase, reply: Reply) {
        match phase {
            AnswerPhase::Request if self.answer.is_none() => self.answer = Some((c.clone(), reply)),
            AnswerPhase::Request => {}
            AnswerPhase::Response => self.later.push(Later::Replace(c.clone(), reply)),
        }
    }

    /// Whether the upstream is asked for an uncompressed answer (the
    /// request's `Accept-Encoding` set to `identity`, where it had one):
    /// a body to rewrite needs it; an `sse` fault's event counting only
    /// for a request that may be answered with a stream (`streams`, from
    /// [`asks_for_stream`], asked only then: a request seen whole without
    /// a stream flag is left as the client sent it).
    pub(crate) fn wants_identity(&self, streams: impl FnOnce() -> Option<bool>) -> bool {
        let rewrites = self.later.iter().any(|l| match l {
            Later::Rewrite(_, w) => w.edits().body.is_some(),
            _ => false,
        });
        rewrites
            || (self.later.iter().any(|l| matches!(l, Later::Sse(..))) && streams() != Some(false))
    }

    /// The `http_delay` faults that hold an answer given in the upstream's
    /// place (`status`, or `None` for an abort): nothing else acts on it,
    /// and only the delays are looked at (and counted, for `first`).
    pub(crate) fn on_answer(&mut self, status: Option<u16>) -> OnResponse {
        self.later.retain(|l| matches!(l, Later::Delay(..)));
        self.on_response(status, &[])
    }

    /// The faults that act on the response the client would get: one
    /// with `status` and `headers` (none for netchaos's own answers), or
    /// (`None`) none at all — an abort in the upstream's place, which only
    /// faults that do not look at responses follow.
    pub(crate) fn on_response(
        &mut self,
        status: Option<u16>,
        headers: &[(String, String)],
    ) -> OnResponse {
        let mut r = OnResponse::default();
        for l in std::mem::take(&mut self.later) {
            let m = l.chosen().spec.kind.request_match();
            let admitted = match status {
                Some(s) => m.is_none_or(|m| m.admits_response(s, headers)),
                None => m.is_none_or(|m| !m.looks_at_response()),
            };
            if !admitted {
                continue;
            }
            match l {
                Later::Delay(c, t) => {
                    r.headers_delay += t;
                    r.delays.push(c);
                }
                Later::Replace(c, reply) if r.replace.is_none() => r.replace = Some((c, reply)),
                Later::Sse(c, s) => r.sse.push((c, s)),
                Later::Truncate(c, t) if r.truncate.is_none() => r.truncate = Some((c, t)),
                Later::Rewrite(c, w) => r.rewrites.push((c, w)),
                _ => {}
            }
        }
        r
    }
}

/// Whether any of the faults would look at request bodies.
pub(crate) fn needs_body(faults: &[Chosen]) -> bool {
    faults
        .iter()
        .any(|c| c.spec.kind.request_match().is_some_and(|m| m.needs_body()))
}

/// Whether the body of request `n` (`view`, its body not read) decides
/// whether a fault acts on it: a fault that matches body fields is active,
/// its `probability` picks this request, and everything else it matches
/// on does (its `first` and `every` are not counted here).
pub(crate) fn body_decides(
    faults: &[Chosen],
    n: u64,
    view: &RequestView<'_>,
    elapsed: Duration,
) -> bool {
    faults.iter().any(|c| {
        c.spec.kind.request_match().is_some_and(|m| {
            m.needs_body()
                && c.spec.active.contains(elapsed)
                && m.may_match(view)
                && c.request_draw(n).0
        })
    })
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
        let Some(m) = c.spec.kind.request_match() else {
            continue;
        };
        if !c.spec.active.contains(elapsed) || !m.admits(view) {
            continue;
        }
        let (picked, mut rng) = c.request_draw(n);
        if !picked {
            continue;
        }
        // The kind's own hook says what it does (no kind is named here).
        match c.spec.kind.on_request(&mut rng, view.host, view.path) {
            Some(HttpAct::Answer(phase, reply)) => d.answers(c, phase, reply),
            Some(HttpAct::Hold(Phase::Request, t)) => {
                d.request_delay += t;
                d.request_delays.push(c.clone());
            }
            Some(HttpAct::Hold(Phase::Headers, t)) => d.later.push(Later::Delay(c.clone(), t)),
            Some(HttpAct::Events(s)) => d.later.push(Later::Sse(c.clone(), s)),
            Some(HttpAct::Truncate(t)) => d.later.push(Later::Truncate(c.clone(), t)),
            Some(HttpAct::Rewrite(AnswerPhase::Request, w)) => d.rewrites.push((c.clone(), w)),
            Some(HttpAct::Rewrite(AnswerPhase::Response, w)) => {
                d.later.push(Later::Rewrite(c.clone(), w))
            }
            None => {}
        }
    }
    d
}

/// Whether a request asks for a streamed answer (an event stream, NDJSON,
/// AWS's event stream), as far as what has arrived of it tells: `Some(true)`
/// for an `Accept` of a stream type, a streaming path
/// (`:streamGenerateContent`, `converse-stream`,
/// `invoke-with-response-stream`, Ollama's `/api/chat` and `/api/generate`
/// unless `"stream": false`) or a JSON body saying `"stream": true`;
/// `Some(false)` when its JSON `body` was seen `whole` without any of
/// these; `None` when nothing says (a bodiless GET may be an event
/// stream's).
pub(crate) fn asks_for_stream(
    accept: Option<&str>,
    path: &str,
    body: &[u8],
    whole: bool,
) -> Option<bool> {
    let accept = accept.unwrap_or("").to_ascii_lowercase();
    if [
        "text/event-stream",
        "application/x-ndjson",
        "application/vnd.amazon.eventstream",
    ]
    .iter()
    .any(|t| accept.contains(t))
    {
        return Some(true);
    }
    let path = path.split('?').next().unwrap_or(path);
    let last = path.rsplit('/').next().unwrap_or(path);
    if last.contains(":streamGenerateContent")
        || last == "converse-stream"
        || last == "invoke-with-response-stream"
    {
        return Some(true);
    }
    let flag = stream_flag(body);
    if flag == Some(true) {
        return Some(true);
    }
    // Ollama streams unless told not to.
    if (path.ends_with("/api/chat") || path.ends_with("/api/generate")) && flag != Some(false) {
        return Some(true);
    }
    // A JSON body seen whole with no stream flag is an API call for one
    // answer; a bodiless request (a GET of an event stream) says nothing.
    let json = body.trim_ascii_start().starts_with(b"{");
    (whole && json).then_some(false)
}

/// A JSON body's `"stream": true` or `false` (its first, at any depth:
/// a plain scan, the body may be cut short).
fn stream_flag(body: &[u8]) -> Option<bool> {
    let key = b"\"stream\"";
    let at = body.windows(key.len()).position(|w| w == key)?;
    let rest = &body[at + key.len()..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    if rest.starts_with(b"true") {
        Some(true)
    } else if rest.starts_with(b"false") {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::http_status::After;

    #[test]
    fn a_request_says_whether_it_asks_for_a_stream() {
        let chat = br#"{"model":"m","messages":[],"stream": true}"#;
        let plain = br#"{"model":"m","messages":[]}"#;
        assert_eq!(
            asks_for_stream(None, "/v1/chat/completions", chat, true),
            Some(true)
        );
        assert_eq!(
            asks_for_stream(None, "/v1/chat/completions", plain, true),
            Some(false)
        );
        // Cut short: nothing says yet.
        assert_eq!(
            asks_for_stream(None, "/v1/messages", &plain[..10], false),
            None
        );
        assert_eq!(
            asks_for_stream(Some("text/event-stream"), "/x", b"", false),
            Some(true)
        );
        assert_eq!(
            asks_for_stream(
                None,
                "/v1beta/models/g:streamGenerateContent?alt=sse",
                b"",
                true
            ),
            Some(true)
        );
        assert_eq!(
            asks_for_stream(None, "/model/m/converse-stream", b"", true),
            Some(true)
        );
        // Ollama streams unless told not to.
        assert_eq!(asks_for_stream(None, "/api/chat", b"{}", true), Some(true));
        assert_eq!(
            asks_for_stream(None, "/api/chat", br#"{"stream":false}"#, true),
            Some(false)
        );
        assert_eq!(asks_for_stream(None, "/sse", b"", true), None);
    }
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

    /// A body is read to decide only for a rule whose other criteria (and
    /// window and draw) the request meets: any other request's head goes
    /// on at once.
    #[test]
    fn only_a_rule_the_head_matches_waits_for_the_body() {
        let by_body = |pairs: &[(&str, &str)]| {
            let mut all = vec![("status", "529"), ("body.model", "opus*")];
            all.extend_from_slice(pairs);
            Arc::new(vec![chosen("http_status", &all, 1)])
        };
        let any = by_body(&[]);
        assert!(body_decides(&any, 0, &get("/v1"), Duration::ZERO));
        let posts = by_body(&[("method", "POST")]);
        assert!(!body_decides(&posts, 0, &get("/v1"), Duration::ZERO));
        let later = by_body(&[("active", "5s..")]);
        assert!(!body_decides(&later, 0, &get("/v1"), Duration::ZERO));
        assert!(body_decides(&later, 0, &get("/v1"), Duration::from_secs(6)));
        let never = by_body(&[("probability", "0")]);
        assert!(!body_decides(&never, 0, &get("/v1"), Duration::ZERO));
        let by_path = Arc::new(vec![chosen("http_status", &[("status", "503")], 1)]);
        assert!(!body_decides(&by_path, 0, &get("/v1"), Duration::ZERO));
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
        let mut d = decide(&faults, 0, &get("/x"), Duration::ZERO);
        assert_eq!(d.request_delay, Duration::from_secs(2));
        assert!(d.answer.is_some());
        let r = d.on_response(Some(503), &[]);
        assert_eq!(r.headers_delay, Duration::from_secs(1));
        // Each phase's faults apart: each is recorded as its hold begins.
        assert_eq!((d.request_delays.len(), r.delays.len()), (1, 1));
        assert!(r.truncate.is_none());
        let mut d = decide(&faults, 1, &get("/y"), Duration::from_secs(6));
        assert!(d.answer.is_none() && d.on_response(Some(200), &[]).truncate.is_some());
    }

    /// `response_header` looks at the upstream's response: a glob on a
    /// header's value, any name case; `first` counts the responses that
    /// match; netchaos's own answers have no headers to match.
    #[test]
    fn response_headers_pick_the_responses_a_fault_acts_on() {
        let json = chosen(
            "http_truncate",
            &[
                ("response_header", "Content-Type: application/json*"),
                ("first", "2"),
            ],
            1,
        );
        let faults = Arc::new(vec![json]);
        let h = |v: &str| vec![("content-type".to_string(), v.to_string())];
        let acts = |n: u64, headers: &[(String, String)]| {
            decide(&faults, n, &get("/"), Duration::ZERO)
                .on_response(Some(200), headers)
                .truncate
                .is_some()
        };
        assert!(!acts(0, &h("text/html")));
        assert!(!acts(1, &[]));
        assert!(acts(2, &h("application/json; charset=utf-8")));
        assert!(acts(3, &h("application/json")));
        assert!(!acts(4, &h("application/json")), "first = 2: done");
        let mut d = decide(&faults, 5, &get("/"), Duration::ZERO);
        assert!(d.on_answer(Some(200)).truncate.is_none());
        // Where no response exists yet, it is refused.
        let e = spec(
            "http_status",
            &[("status", "429"), ("response_header", "X-A: b")],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("response_header needs a response"),
            "{e}"
        );
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
        let mut d = decide(&faults, 0, &get("/pay"), Duration::ZERO);
        assert!(d.answer.is_none(), "forwarded");
        let r = d.on_response(Some(200), &[]).replace;
        assert_eq!(r.unwrap().1.status(), None, "the abort comes first");
        let mut d = decide(&faults, 1, &get("/other"), Duration::ZERO);
        assert_eq!(
            d.on_response(Some(200), &[]).replace.unwrap().1.status(),
            Some(502)
        );
        let now = chosen("http_status", &[("status", "429")], 3);
        let faults = Arc::new(vec![faults[1].clone(), now]);
        let mut d = decide(&faults, 2, &get("/x"), Duration::ZERO);
        assert_eq!(d.answer.take().unwrap().1.status(), Some(429));
        assert!(
            d.on_answer(Some(429)).replace.is_none(),
            "moot: the request never goes"
        );
    }

    /// An answer in the upstream's place uses up no response-side count:
    /// the first 429 *from the upstream* is still to come.
    #[test]
    fn an_answer_in_place_counts_for_no_response_fault() {
        let now = chosen("http_status", &[("status", "429"), ("path", "/now")], 1);
        let later = chosen(
            "http_status",
            &[
                ("status", "503"),
                ("phase", "response"),
                ("response_status", "429"),
                ("first", "1"),
            ],
            2,
        );
        let faults = Arc::new(vec![now, later]);
        let mut d = decide(&faults, 0, &get("/now"), Duration::ZERO);
        assert!(d.answer.take().is_some());
        assert!(d.on_answer(Some(429)).replace.is_none());
        let mut d = decide(&faults, 1, &get("/up"), Duration::ZERO);
        let r = d.on_response(Some(429), &[]).replace;
        assert_eq!(
            r.unwrap().1.status(),
            Some(503),
            "still the first upstream 429"
        );
    }

    /// `response_status` picks by the response's status; the first fault
    /// of a kind that admits it acts, and with no response (an abort in the
    /// upstream's place) only faults without it do.
    #[test]
    fn response_status_picks_the_responses() {
        let slow5 = chosen(
            "http_delay",
            &[("delay", "2s"), ("response_status", "5xx")],
            1,
        );
        let slow = chosen("http_delay", &[("delay", "1s")], 2);
        let cut429 = chosen("http_truncate", &[("response_status", "429|503")], 3);
        let cut = chosen("http_truncate", &[("after_bytes", "7")], 4);
        let swap = chosen(
            "http_status",
            &[
                ("status", "500"),
                ("phase", "response"),
                ("response_status", "200"),
            ],
            5,
        );
        let faults = Arc::new(vec![slow5, slow, cut429, cut, swap]);
        let on = |status| decide(&faults, 0, &get("/"), Duration::ZERO).on_response(status, &[]);
        let r = on(Some(503));
        assert_eq!(r.headers_delay, Duration::from_secs(3));
        assert_eq!(r.truncate.unwrap().0.seed, 3);
        assert!(r.replace.is_none());
        let r = on(Some(200));
        assert_eq!(r.headers_delay, Duration::from_secs(1));
        assert_eq!(r.truncate.unwrap().0.seed, 4, "the first that admits 200");
        assert_eq!(r.replace.unwrap().1.status(), Some(500));
        let r = on(None);
        assert_eq!(
            (r.headers_delay, r.delays.len()),
            (Duration::from_secs(1), 1)
        );
        for (kind, pairs) in [
            (
                "http_status",
                &[("status", "503"), ("response_status", "200")][..],
            ),
            ("http_abort", &[("response_status", "5xx")][..]),
            (
                "http_delay",
                &[
                    ("delay", "1s"),
                    ("phase", "request"),
                    ("response_status", "500"),
                ][..],
            ),
            ("http_truncate", &[("response_status", "6xx")][..]),
            ("http_truncate", &[("response_status", "99")][..]),
            ("http_truncate", &[("response_status", "1xx")][..]),
            ("http_truncate", &[("response_status", "100")][..]),
            ("http_truncate", &[("response_status", "")][..]),
        ] {
            assert!(spec(kind, pairs).is_err(), "{kind} {pairs:?}");
        }
    }

    /// With `response_status`, `first` and `every` count the responses
    /// that have those statuses, not the requests: "the first 500".
    #[test]
    fn first_counts_the_responses_with_the_status() {
        let faults = Arc::new(vec![chosen(
            "http_status",
            &[
                ("status", "418"),
                ("phase", "response"),
                ("response_status", "500"),
                ("first", "1"),
            ],
            1,
        )]);
        let got: Vec<Option<u16>> = [200, 500, 500, 200]
            .iter()
            .enumerate()
            .map(|(n, st)| {
                decide(&faults, n as u64, &get("/"), Duration::ZERO)
                    .on_response(Some(*st), &[])
                    .replace
                    .and_then(|(_, r)| r.status())
            })
            .collect();
        assert_eq!(got, [None, Some(418), None, None]);
    }
}
