//! The phases one request goes through, the same for both engines
//! (HTTP/1.1's [`super::exchange`], HTTP/2's [`super::h2`]), in Pingora's
//! spirit. On the request ([`on_request`]): its faults decided, its record
//! opened, the `http_delay`s that hold it counted and held; then it is
//! answered in the upstream's place ([`Answering`]) or forwarded
//! ([`Forwarding`]: its `http_rewrite` edits, the encoding asked of the
//! upstream). On the response ([`Forwarding::on_response`]): the
//! upstream's head counted, the faults that act on it chosen, its hold
//! held; then it is replaced (an [`Answering`] again) or followed
//! ([`Responding`]: rewritten, cut, its events counted).
//!
//! Each step counts its faults as the event log documents it — a hold as
//! it begins, an edit where it changed something, an answer with the
//! status the client gets — so the two engines cannot drift apart there.
//! The engines keep the framing and the I/O: they bring each message as a
//! view and apply the edits to their own form of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::attempt::{Attempt, Marking};
use super::decide::{self, Decision, OnResponse, Reply};
use super::exchange::Exchange;
use crate::events::{GrpcStatus, RequestInfo};
use crate::fault::http_match::RequestView;
use crate::fault::http_rewrite::HttpRewrite;
use crate::fault::http_status::After;
use crate::fault::{Chosen, Layer};

/// A request, as events and records name it.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) n: u64,
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) host: Option<String>,
    /// The client may send another request after it.
    pub(crate) keep_alive: bool,
    /// A fault was recorded on it (the summary counts requests faulted,
    /// however many faults each had).
    pub(crate) faulted: AtomicBool,
    /// Its record, written when every holder has let go.
    pub(crate) attempt: Option<Arc<Attempt>>,
}

impl Meta {
    /// The same request, for a line that is not a fault's (its trailers):
    /// marked faulted, so that a fault recorded with it by mistake could
    /// not count the request a second time.
    pub(crate) fn same_request(&self) -> Meta {
        Meta {
            n: self.n,
            method: self.method.clone(),
            target: self.target.clone(),
            host: self.host.clone(),
            keep_alive: self.keep_alive,
            faulted: true.into(),
            attempt: self.attempt.clone(),
        }
    }

    /// The request as the event lines name it.
    pub(crate) fn info(&self, first_fault: bool) -> RequestInfo<'_> {
        RequestInfo {
            n: self.n,
            method: &self.method,
            path: &self.target,
            host: self.host.as_deref(),
            first_fault,
        }
    }
}

/// What becomes of a request once its request-phase hold is over.
pub(crate) enum OnRequest {
    /// Answered in the upstream's place (never forwarded).
    Answer(Box<Answering>),
    Forward(Forwarding),
}

/// The request phase of request `n` (`proto` as records name it; `view`,
/// its body's JSON when it was read whole): its faults decided, its record
/// opened, its `http_delay`s counted as the hold begins (with the status of
/// an answer given in the upstream's place, the only response there is
/// yet), then held — a client that times out meanwhile was still faulted.
pub(crate) async fn on_request(
    x: &Exchange,
    faults: &Arc<Vec<Chosen>>,
    proto: &'static str,
    n: u64,
    view: &RequestView<'_>,
    keep_alive: bool,
) -> (Meta, OnRequest) {
    let mut d = decide::decide(faults, n, view, x.epoch.elapsed());
    let attempt = Attempt::begin(
        &x.events,
        &x.conn,
        proto,
        n,
        view.method,
        view.path,
        view.host,
        view.headers,
    );
    if faults.iter().any(|c| c.spec.kind.layer() != Layer::Http) {
        attempt.mark(|a| a.not_taped("a connection fault acts on it"));
    }
    if let Some(m) = view.body.and_then(|j| j.get("model")?.as_str()) {
        attempt.mark(|a| a.model(m));
    }
    let meta = Meta {
        n,
        method: view.method.to_string(),
        target: view.path.to_string(),
        host: view.host.map(str::to_string),
        keep_alive,
        faulted: Default::default(),
        attempt,
    };
    let answering = d.answer.as_ref().and_then(|(_, r)| r.status());
    for c in &d.request_delays {
        x.record(c, &meta, answering);
    }
    if !d.request_delay.is_zero() {
        crate::timer::sleep(d.request_delay).await;
    }
    let next = match d.answer.take() {
        Some((chosen, reply)) => {
            let held = d.on_answer(reply.status());
            OnRequest::Answer(Box::new(Answering {
                chosen,
                reply,
                held,
            }))
        }
        None => OnRequest::Forward(Forwarding { d }),
    };
    (meta, next)
}

/// A reply netchaos gives in the upstream's place, to the request
/// (`http_status`, `http_abort`) or instead of its response.
pub(crate) struct Answering {
    pub(crate) chosen: Chosen,
    pub(crate) reply: Reply,
    /// The `http_delay`s that hold it (none for a replaced response: its
    /// hold was the upstream's head's).
    held: OnResponse,
}

impl Answering {
    /// How the connection goes on after it (`closing`: it must end).
    pub(crate) fn then(&self, closing: bool) -> After {
        match self.reply.then() {
            After::Keep if closing => After::Close,
            t => t,
        }
    }

    /// Its turn to go out: its head held by the `http_delay`s that act on
    /// it (counted as the hold begins), then it is counted with what the
    /// client gets (`status`; `grpc`, a call's end) and put on the record;
    /// `then`: how the connection goes on, for an answer that is none.
    pub(crate) async fn give(
        &self,
        x: &Exchange,
        meta: &Meta,
        status: Option<u16>,
        grpc: Option<GrpcStatus<'_>>,
        then: After,
    ) {
        for c in &self.held.delays {
            x.record(c, meta, status);
        }
        if !self.held.headers_delay.is_zero() {
            crate::timer::sleep(self.held.headers_delay).await;
        }
        x.record_call(&self.chosen, meta, status, grpc);
        meta.attempt.mark(|a| match (&self.reply, status) {
            (Reply::Status(s), Some(status)) => {
                let retry_after = super::attempt::retry_after_in(&s.reply(false, false));
                a.status(status, retry_after.as_deref());
            }
            (Reply::Status(_), None) => {}
            // The connection ends where the answer would be.
            (Reply::Abort(_), _) => a.no_answer(match then {
                After::Reset => "reset",
                _ => "closed",
            }),
        });
    }
}

/// A request that goes upstream, with the faults that may act on it and
/// on its response.
pub(crate) struct Forwarding {
    d: Decision,
}

impl Forwarding {
    /// Its `http_rewrite` edits include one to its body (read whole first).
    pub(crate) fn body_edits(&self) -> bool {
        edits_body(&self.d.rewrites)
    }

    /// Its `http_rewrite` edits, in rule order: `edit` applies one to the
    /// engine's request and says whether it changed it; each that did is
    /// counted.
    pub(crate) fn rewrite(
        &self,
        x: &Exchange,
        meta: &Meta,
        mut edit: impl FnMut(&HttpRewrite) -> bool,
    ) {
        let mut counted = Counted::default();
        counted.each(x, meta, &self.d.rewrites, None, |w, s| (edit(w), s));
    }

    /// Whether the upstream is asked for an uncompressed answer (see
    /// [`Decision::wants_identity`]).
    pub(crate) fn wants_identity(&self, streams: impl FnOnce() -> Option<bool>) -> bool {
        self.d.wants_identity(streams)
    }

    /// The response phase: the upstream's head (`status`, `headers`;
    /// `grpc`, a call's end in it) counted and put on the record; the
    /// faults that act on it chosen, and the `http_delay`s among them
    /// counted as their hold begins, with the status they hold back, and
    /// held.
    pub(crate) async fn on_response(
        mut self,
        x: &Exchange,
        meta: &Meta,
        status: u16,
        headers: &[(String, String)],
        grpc: Option<GrpcStatus<'_>>,
    ) -> OnUpstream {
        let retry_after = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
            .map(|(_, v)| v.as_str());
        x.record_response(meta, status, retry_after, grpc);
        meta.attempt.mark(|a| a.upstream_head(status, headers));
        let mut r = self.d.on_response(Some(status), headers);
        for c in &r.delays {
            x.record(c, meta, Some(status));
        }
        if !r.headers_delay.is_zero() {
            crate::timer::sleep(r.headers_delay).await;
        }
        match r.replace.take() {
            Some((chosen, reply)) => OnUpstream::Replace(Box::new(Answering {
                chosen,
                reply,
                held: OnResponse::default(),
            })),
            None => OnUpstream::Follow(Box::new(Responding { on: r })),
        }
    }
}

/// What becomes of the upstream's response once its head is held.
pub(crate) enum OnUpstream {
    /// The client gets netchaos's reply (or none) instead.
    Replace(Box<Answering>),
    Follow(Box<Responding>),
}

/// A response that goes on to the client, with the faults that act on
/// it: its `http_rewrite` edits, an `http_truncate`, `sse` faults.
pub(crate) struct Responding {
    pub(crate) on: OnResponse,
}

impl Responding {
    /// Its `http_rewrite` edits include one to its body.
    pub(crate) fn body_edits(&self) -> bool {
        edits_body(&self.on.rewrites)
    }

    /// Its `http_rewrite` edits in rule order, from `status`: `edit`
    /// applies one to the engine's response (given the status so far) and
    /// says whether it changed it, and the status it leaves; each that did
    /// is counted once over every pass `counted` follows (a head's edits,
    /// then its body's), with that status. Returns the status left.
    pub(crate) fn rewrite(
        &self,
        x: &Exchange,
        meta: &Meta,
        status: u16,
        counted: &mut Counted,
        edit: impl FnMut(&HttpRewrite, u16) -> (bool, u16),
    ) -> u16 {
        counted
            .each(x, meta, &self.on.rewrites, Some(status), edit)
            .unwrap_or(status)
    }
}

/// Whether any of `rewrites` edits a body.
fn edits_body(rewrites: &[(Chosen, HttpRewrite)]) -> bool {
    rewrites.iter().any(|(_, w)| w.edits().body.is_some())
}

/// Which of a message's rewrites have been counted (each once, however
/// many passes change it).
#[derive(Default)]
pub(crate) struct Counted(Vec<bool>);

impl Counted {
    fn each(
        &mut self,
        x: &Exchange,
        meta: &Meta,
        rewrites: &[(Chosen, HttpRewrite)],
        mut status: Option<u16>,
        mut edit: impl FnMut(&HttpRewrite, u16) -> (bool, u16),
    ) -> Option<u16> {
        self.0.resize(rewrites.len(), false);
        for (i, (c, w)) in rewrites.iter().enumerate() {
            let (changed, now) = edit(w, status.unwrap_or(0));
            if status.is_some() {
                status = Some(now);
            }
            if changed && !std::mem::replace(&mut self.0[i], true) {
                x.record(c, meta, status);
            }
        }
        status
    }
}

impl Exchange {
    /// Fault `c` acted on request `m` (`status`: the response the client
    /// gets, if there is one yet).
    pub(super) fn record(&self, c: &Chosen, m: &Meta, status: Option<u16>) {
        self.record_call(c, m, status, None);
    }

    /// [`Exchange::record`], for a fault that ended a gRPC call with `grpc`.
    pub(super) fn record_call(
        &self,
        c: &Chosen,
        m: &Meta,
        status: Option<u16>,
        grpc: Option<GrpcStatus<'_>>,
    ) {
        let first = !m.faulted.swap(true, Ordering::Relaxed);
        m.attempt.mark(|a| {
            a.fault(c.spec.name());
            if let Some(s) = status {
                a.status(s, None);
            }
            if let Some(g) = &grpc {
                a.grpc(g.code);
            }
        });
        self.events
            .http_fault(&self.conn, &c.rule, &c.spec, &m.info(first), status, grpc);
    }

    /// The upstream's own answer to request `m` (`grpc`: a call's end in
    /// its head).
    pub(super) fn record_response(
        &self,
        m: &Meta,
        status: u16,
        retry_after: Option<&str>,
        grpc: Option<GrpcStatus<'_>>,
    ) {
        m.attempt.mark(|a| {
            a.upstream(status);
            a.status(status, retry_after);
            if let Some(g) = &grpc {
                a.grpc(g.code);
            }
        });
        self.events
            .http_response(&self.conn, &m.info(false), status, grpc);
    }

    /// The upstream reset request `m`'s HTTP/2 stream with `code`, before
    /// its answer's end (`status`: the answer, if it had begun).
    pub(super) fn record_reset(&self, m: &Meta, status: Option<u16>, code: ::h2::Reason) {
        let name = format!("{code:?}");
        m.attempt.mark(|a| a.failed("reset"));
        self.events
            .http_stream_reset(&self.conn, &m.info(false), status, code.into(), &name);
    }

    /// The upstream's trailers ended call `m` with `grpc`.
    pub(super) fn record_trailers(&self, m: &Meta, grpc: GrpcStatus<'_>) {
        m.attempt.mark(|a| a.grpc(grpc.code));
        self.events.http_trailers(&self.conn, &m.info(false), grpc);
    }
}

/// The phases alone, on a paused clock: no engine, no socket. What is
/// counted, when, and with which status is what the event log and the
/// summary say of every request, on both engines.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::http::harness::exchange_with;

    const JSON: &[(&str, &str)] = &[("content-type", "application/json")];

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn view<'a>(
        headers: &'a [(String, String)],
        body: Option<&'a serde_json::Value>,
    ) -> RequestView<'a> {
        RequestView {
            method: "POST",
            path: "/v1/messages",
            host: Some("api.example"),
            headers,
            body,
        }
    }

    /// The faults counted so far, by name and status.
    fn counted(x: &Exchange) -> Vec<(&'static str, u16)> {
        let faulted = x.events.stats.http_faulted.lock().unwrap().clone();
        let mut all = Vec::new();
        for ((name, status, _), n) in faulted {
            all.extend(std::iter::repeat_n((name, status), n as usize));
        }
        all
    }

    fn faults(x: &Exchange) -> Arc<Vec<Chosen>> {
        x.faults.borrow().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_hold_is_counted_as_it_begins_then_held() {
        let (x, _events, _keep) = exchange_with(&["http_delay:delay=2s,phase=request"]);
        let hs = headers(JSON);
        let began = Instant::now();
        let (f, v) = (faults(&x), view(&hs, None));
        let phase = on_request(&x, &f, "h2", 0, &v, true);
        tokio::pin!(phase);
        // Counted before the hold ends: a client that times out during it
        // was still faulted.
        assert!(
            tokio::time::timeout(Duration::from_millis(1900), &mut phase)
                .await
                .is_err()
        );
        assert_eq!(counted(&x), [("http_delay", 0)]);
        let (meta, next) = phase.await;
        assert_eq!(began.elapsed(), Duration::from_secs(2));
        assert!(matches!(next, OnRequest::Forward(_)));
        assert!(meta.faulted.load(Ordering::Relaxed));
        assert_eq!((meta.n, meta.method.as_str()), (0, "POST"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_held_by_its_headers_delay_and_counted_with_its_status() {
        let (x, _events, _keep) = exchange_with(&[
            "http_status:status=529",
            "http_delay:delay=1s,phase=request",
            "http_delay:delay=3s",
        ]);
        let hs = headers(JSON);
        let began = Instant::now();
        let (meta, next) = on_request(&x, &faults(&x), "http/1.1", 0, &view(&hs, None), true).await;
        assert_eq!(began.elapsed(), Duration::from_secs(1));
        // The request's hold is counted with the status of the answer
        // given in the upstream's place: the only response there is yet.
        assert_eq!(counted(&x), [("http_delay", 529)]);
        let OnRequest::Answer(a) = next else {
            panic!("answered in the upstream's place")
        };
        assert_eq!(a.reply.status(), Some(529));
        assert_eq!(a.then(true), After::Close);
        a.give(&x, &meta, Some(529), None, After::Keep).await;
        assert_eq!(began.elapsed(), Duration::from_secs(4));
        assert_eq!(
            counted(&x),
            [
                ("http_delay", 529),
                ("http_delay", 529),
                ("http_status", 529)
            ]
        );
        // One request faulted, however many faults it had.
        let requests = &x.events.stats.http_faulted_requests;
        assert_eq!(requests.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn body_fields_decide_and_only_the_first_answer_applies() {
        let (x, _events, _keep) = exchange_with(&[
            "http_status:status=429,body.model=claude-*",
            "http_status:status=503",
        ]);
        let hs = headers(JSON);
        let opus = serde_json::json!({"model": "claude-opus-4"});
        let other = serde_json::json!({"model": "gpt-5"});
        let f = faults(&x);
        let (_, next) = on_request(&x, &f, "h2", 0, &view(&hs, Some(&opus)), true).await;
        let OnRequest::Answer(a) = next else { panic!() };
        assert_eq!(a.reply.status(), Some(429));
        let (_, next) = on_request(&x, &f, "h2", 1, &view(&hs, Some(&other)), true).await;
        let OnRequest::Answer(a) = next else { panic!() };
        assert_eq!(a.reply.status(), Some(503));
        // Decided, not given: nothing counted yet.
        assert_eq!(counted(&x), []);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rewrite_is_counted_where_it_changes_something_once() {
        let (x, _events, _keep) = exchange_with(&[
            "http_rewrite:set_header=X-A: 1",
            "http_rewrite:set_header=X-B: 2",
        ]);
        let hs = headers(JSON);
        let (meta, next) = on_request(&x, &faults(&x), "h2", 0, &view(&hs, None), true).await;
        let OnRequest::Forward(f) = next else {
            panic!()
        };
        assert!(!f.body_edits());
        // The engine says the second changed nothing (its header was
        // there already): only the first is counted.
        let mut seen = 0;
        f.rewrite(&x, &meta, |_| {
            seen += 1;
            seen == 1
        });
        assert_eq!(seen, 2);
        assert_eq!(counted(&x), [("http_rewrite", 0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_response_phase_holds_then_replaces_only_what_it_matches() {
        let (x, _events, _keep) = exchange_with(&[
            "http_delay:delay=2s,response_status=5xx",
            "http_status:status=529,phase=response,response_status=503",
        ]);
        let hs = headers(JSON);
        let f = faults(&x);
        // A 200: neither acts; the upstream's answer is followed.
        let (meta, next) = on_request(&x, &f, "h2", 0, &view(&hs, None), true).await;
        let OnRequest::Forward(fw) = next else {
            panic!()
        };
        let began = Instant::now();
        let up = fw.on_response(&x, &meta, 200, &hs, None).await;
        assert!(matches!(up, OnUpstream::Follow(_)));
        assert_eq!(began.elapsed(), Duration::ZERO);
        assert_eq!(counted(&x), []);
        // A 503: held (counted with the status it holds back), then
        // replaced — counted as it is given, with the client's status.
        let (meta, next) = on_request(&x, &f, "h2", 1, &view(&hs, None), true).await;
        let OnRequest::Forward(fw) = next else {
            panic!()
        };
        let up = fw.on_response(&x, &meta, 503, &hs, None).await;
        assert_eq!(began.elapsed(), Duration::from_secs(2));
        assert_eq!(counted(&x), [("http_delay", 503)]);
        let OnUpstream::Replace(a) = up else { panic!() };
        a.give(&x, &meta, a.reply.status(), None, After::Keep).await;
        assert_eq!(began.elapsed(), Duration::from_secs(2));
        assert_eq!(counted(&x), [("http_delay", 503), ("http_status", 529)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_rewrite_counts_once_over_head_and_body() {
        let (x, _events, _keep) =
            exchange_with(&["http_rewrite:phase=response,set_status=500,set_body=oops"]);
        let hs = headers(JSON);
        let (meta, next) = on_request(&x, &faults(&x), "h2", 0, &view(&hs, None), true).await;
        let OnRequest::Forward(fw) = next else {
            panic!()
        };
        let OnUpstream::Follow(r) = fw.on_response(&x, &meta, 200, &hs, None).await else {
            panic!()
        };
        assert!(r.body_edits());
        let mut c = Counted::default();
        // The head's pass changes the status; the body's changes the body.
        let now = r.rewrite(&x, &meta, 200, &mut c, |w, s| {
            (true, w.edits().status.unwrap_or(s))
        });
        assert_eq!(now, 500);
        let now = r.rewrite(&x, &meta, now, &mut c, |_, s| (true, s));
        assert_eq!(now, 500);
        assert_eq!(counted(&x), [("http_rewrite", 500)]);
    }
}
