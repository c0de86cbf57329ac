//! One HTTP/1.1 connection, request by request: the request side reads
//! what the client sends, decides each request's faults and forwards it
//! (or not); the response side follows the upstream's responses in the
//! same order and applies the faults that act on them. The two sides are
//! joined by a queue of what each request needs ([`Pending`]) — so an
//! answer given in the upstream's place goes out in its turn, after the
//! responses to the requests before it (pipelining).
//!
//! Both sides send into the connection's pipelines, so stream faults
//! (latency, bandwidth …) still apply after the HTTP layer. Bytes netchaos
//! does not change go through as they came: an unfaulted request and its
//! response are relayed byte for byte. A head goes on as soon as it is
//! whole and decided, never held for its body. An upgrade or CONNECT that
//! the upstream accepts turns the rest of the connection into a plain byte
//! relay; one it declines does not. A malformed or ambiguous request is
//! answered 400 and its connection closed (see [`wire::WireError`]); a
//! response netchaos cannot follow is relayed as bytes, and so is all that
//! follows it. Once the upstream has closed (or its responses are relayed
//! as bytes), what the client sends goes to it as bytes: its kernel
//! answers as it would directly.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Marking, ModelScan};
use super::budget::{self, Flow, Lease};
use super::decide::{self, Decision};
use super::events::{self as sse_events, Block, Format, Splitter};
use super::rewrite::{self, set_header};
use super::wire::{self, Body, Framing, MAX_HEAD, WireError};
use crate::events::{ConnInfo, Events, GrpcStatus, RequestInfo};
use crate::fault::http_match::RequestView;
use crate::fault::http_status::After;
use crate::fault::sse::Breakage;
use crate::fault::{Chosen, Gone, Item, ItemKind, Layer, Output};

/// Requests read ahead of their responses, at most (pipelining).
const QUEUE: usize = 32;
/// The largest body read whole to match its JSON fields.
pub(super) const MAX_BODY: usize = 1024 * 1024;
/// Bytes asked for per read: at first, and at most.
const READ: usize = 16 * 1024;
const MAX_READ: usize = 512 * 1024;

/// What one connection's HTTP layer works with.
pub(crate) struct Exchange {
    /// The connection's faults (the HTTP ones act here), as they change.
    pub(crate) faults: watch::Receiver<Arc<Vec<Chosen>>>,
    /// When netchaos started: `active` windows count from here.
    pub(crate) epoch: Instant,
    pub(crate) events: Arc<Events>,
    pub(crate) conn: Arc<ConnInfo>,
    /// The TLS server name the client asked for, if it came through TLS.
    pub(crate) sni: Option<String>,
    /// A Host header to put in every request (a proxy to an HTTPS
    /// upstream, whose clients name the proxy).
    pub(crate) rewrite_host: Option<String>,
    /// Cancelled when netchaos begins to stop: an idle connection ends
    /// then, as a server stopping ends its idle keep-alive connections.
    pub(crate) stopping: CancellationToken,
}

/// A request, as events name it.
#[derive(Debug)]
pub(super) struct Meta {
    pub(super) n: u64,
    pub(super) method: String,
    pub(super) target: String,
    pub(super) host: Option<String>,
    /// The client may send another request after it.
    pub(super) keep_alive: bool,
    /// A fault was recorded on it (the summary counts requests faulted,
    /// however many faults each had).
    pub(super) faulted: std::sync::atomic::AtomicBool,
    /// Its record, written when every holder has let go.
    pub(super) attempt: Option<Arc<Attempt>>,
}

impl Meta {
    /// The same request, for a line that is not a fault's (its trailers):
    /// marked faulted, so that a fault recorded with it by mistake could
    /// not count the request a second time.
    pub(super) fn same_request(&self) -> Meta {
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
    fn info(&self, first_fault: bool) -> RequestInfo<'_> {
        RequestInfo {
            n: self.n,
            method: &self.method,
            path: &self.target,
            host: self.host.as_deref(),
            first_fault,
        }
    }
}

/// What the response side must do next, in request order.
enum Pending {
    /// The request went upstream: follow its response, with these faults.
    Forwarded(Box<Forward>),
    /// The request was answered here.
    Answered(Box<Answer>),
    /// Netchaos answers `100 Continue` in the upstream's place: the client
    /// waits for it before it sends the body a rule must read to decide.
    Continue,
    /// A malformed or ambiguous request, not forwarded: a 400 that says
    /// why once the answers before are out, then the connection closes.
    Reject(WireError),
    /// What follows is not HTTP netchaos follows: relay it as bytes.
    Raw,
    /// Netchaos is stopping and the client between requests: close the
    /// connection once the answers before are out.
    Close,
    /// The request's head found the budget spent: a 431 once the answers
    /// before are out, then the connection closes.
    Refuse,
}

/// Netchaos's go-ahead to a client waiting on `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The answer to a request whose head found the budget spent.
const TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\ncontent-length: 50\r\nconnection: close\r\n\r\nnetchaos: the HTTP layer's memory budget is spent\n";

/// A forwarded request, as its response is followed.
struct Forward {
    meta: Meta,
    d: Decision,
    /// Netchaos answered `100 Continue` for it: the upstream's own is not
    /// passed on (the client has had one).
    continued: bool,
    /// An upgrade or CONNECT: told whether the upstream switched (a 101,
    /// a 2xx to CONNECT), and so the rest is a tunnel.
    switched: Option<oneshot::Sender<bool>>,
    /// Cancelled when its body turns out malformed: the client gets a 400
    /// unless the upstream's answer has begun.
    bad_body: CancellationToken,
}

/// What the client gets for a request netchaos refuses as malformed.
fn bad_request(why: WireError) -> Bytes {
    let body = format!("netchaos: {why}\n");
    Bytes::from(format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

struct Answer {
    meta: Meta,
    chosen: Chosen,
    /// None when the answer is no answer (`http_abort`).
    status: Option<u16>,
    reply: Bytes,
    then: After,
    /// The headers' delay, and the `http_delay` faults behind it.
    delay: Duration,
    delays: Vec<Chosen>,
}

/// Builds the two sides; each is run as the reader of its pipeline.
pub(crate) fn sides(x: Exchange) -> (RequestSide, ResponseSide) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let x = Arc::new(x);
    let done = CancellationToken::new();
    (
        RequestSide {
            x: x.clone(),
            tx,
            done: done.clone(),
        },
        ResponseSide { x, rx, done },
    )
}

pub(crate) struct RequestSide {
    x: Arc<Exchange>,
    tx: mpsc::Sender<Pending>,
    /// Cancelled once the response side follows no more responses: the
    /// upstream closed, or its bytes are relayed as they come.
    done: CancellationToken,
}

pub(crate) struct ResponseSide {
    x: Arc<Exchange>,
    rx: mpsc::Receiver<Pending>,
    done: CancellationToken,
}

impl Exchange {
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
        let first = !m.faulted.swap(true, std::sync::atomic::Ordering::Relaxed);
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

/// A side's output: its pipeline's input, and the direction's bytes
/// passed on and not yet written, in the HTTP layer's budget.
pub(crate) struct Out {
    output: Output,
    flow: Flow,
}

impl Out {
    pub(crate) fn new(output: Output) -> Out {
        Out {
            output,
            flow: Flow::default(),
        }
    }
}

pub(super) async fn send(out: &Out, kind: ItemKind) -> Result<(), Gone> {
    out.output
        .send(Item {
            at: Instant::now(),
            kind,
        })
        .await
}

pub(super) async fn send_data(out: &Out, bytes: Bytes) -> Result<(), Gone> {
    if bytes.is_empty() {
        return Ok(());
    }
    send(out, ItemKind::Data(out.flow.tag(bytes))).await
}

/// A side's source, read in sizes that follow the traffic: small while
/// requests and responses are small (an idle keep-alive connection holds
/// little), growing while reads fill the buffer (a large body).
pub(crate) struct Src<R> {
    inner: R,
    want: usize,
    /// An error met by a read that followed one with bytes: returned by
    /// the next fill (a reset is reported once; read again, it would look
    /// like a clean end).
    failed: Option<io::Error>,
    /// The direction's bytes passed on: while the budget is spent, it
    /// reads again only once they are written.
    flow: Flow,
}

impl<R: AsyncRead + Unpin> Src<R> {
    /// A source whose bytes go to `out`.
    pub(super) fn new(inner: R, out: &Out) -> Src<R> {
        Src {
            inner,
            want: READ,
            failed: None,
            flow: out.flow.clone(),
        }
    }

    /// Reads what the source has: waits for it with at most [`READ`] of
    /// room (an idle connection holds no large buffer while it waits: 500
    /// of them, after a large read each, held 120 MiB more), then reads
    /// on without waiting, up to the grown size — unless the budget is
    /// spent: then [`READ`] at a time, each once the last has gone on.
    pub(super) async fn fill(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        use futures_util::FutureExt;
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.flow.room().await;
        if budget::spent() {
            self.want = READ;
        }
        // The rest of a large read's room (its allocation pinned by it,
        // after the bytes read went on) is let go before the wait; not a
        // buffer that is filling (a body read whole), which would be
        // copied at every read.
        let spare = buf.capacity() - buf.len();
        if spare > READ && spare > buf.len() {
            *buf = BytesMut::from(&buf[..]);
        }
        buf.reserve(READ);
        let room = buf.capacity() - buf.len();
        let mut n = self.inner.read_buf(buf).await?;
        // Whether the source had no more to give (else the reads filled
        // all the room they were given: the size grows).
        let mut drained = n < room;
        while !drained && n < self.want {
            buf.reserve(self.want - n);
            let more = buf.capacity() - buf.len();
            match self.inner.read_buf(buf).now_or_never() {
                Some(Ok(k)) if k > 0 => {
                    n += k;
                    drained = k < more;
                }
                // Nothing now; or the end, which the next fill reads.
                None | Some(Ok(_)) => drained = true,
                Some(Err(e)) => {
                    self.failed = Some(e);
                    drained = true;
                }
            }
        }
        if !drained && !budget::spent() {
            self.want = (self.want * 2).min(MAX_READ);
        } else if n < self.want / 4 {
            self.want = (self.want / 2).max(READ);
        }
        Ok(n)
    }
}

/// Relays the rest as bytes: what is buffered, then all the source sends.
pub(super) async fn raw<R: AsyncRead + Unpin>(
    src: &mut Src<R>,
    buf: &mut BytesMut,
    out: &Out,
) -> Result<(), Gone> {
    send_data(out, buf.split().freeze()).await?;
    loop {
        match src.fill(buf).await {
            Ok(0) => return send(out, ItemKind::Fin).await,
            Ok(_) => send_data(out, buf.split().freeze()).await?,
            Err(_) => return send(out, ItemKind::Reset).await,
        }
    }
}

/// What reading a head came to.
enum Head<T> {
    Parsed(T),
    /// The source closed (with or without part of a head).
    Eof,
    Failed,
    /// Not HTTP/1.1 netchaos can follow, for this reason.
    Bad(WireError),
    /// The other side follows no more messages (a request head, when the
    /// response side has ended): what was read is still in the buffer.
    Gone,
    /// The head is longer than [`HEAD_ALLOWANCE`], and the budget has no
    /// room for the rest.
    Spent,
}

/// What a head may hold outside the budget (most are far shorter: nginx
/// reads them into 1 KiB, then up to four 8 KiB buffers).
const HEAD_ALLOWANCE: usize = 16 * 1024;

/// Reads a head into `buf`; past [`HEAD_ALLOWANCE`], `held` holds it in
/// the budget (until the caller lets it go, with the head). Stops early
/// ([`Head::Gone`]) when `until` is cancelled.
async fn read_head<R: AsyncRead + Unpin, T>(
    src: &mut Src<R>,
    buf: &mut BytesMut,
    held: &mut Lease,
    parse: impl Fn(&[u8]) -> Result<Option<T>, WireError>,
    until: Option<&CancellationToken>,
) -> Head<T> {
    loop {
        if !buf.is_empty() {
            match parse(buf) {
                Ok(Some(h)) => return Head::Parsed(h),
                Ok(None) => {}
                Err(e) => return Head::Bad(e),
            }
        }
        if buf.len() >= HEAD_ALLOWANCE && !held.hold(buf.len() + READ) {
            return Head::Spent;
        }
        let filled = match until {
            Some(until) => tokio::select! {
                r = src.fill(buf) => r,
                () = until.cancelled() => return Head::Gone,
            },
            None => src.fill(buf).await,
        };
        match filled {
            Ok(0) => return Head::Eof,
            Ok(_) => {}
            Err(_) => return Head::Failed,
        }
    }
}

/// How passing a body on ended.
#[derive(Debug, PartialEq, Eq)]
enum BodyEnd {
    /// The body is complete; what follows it stays in the buffer.
    Done,
    /// The source closed (the end of an until-close body, or a cut).
    Eof,
    Failed,
    /// `limit` bytes of it were passed.
    Limit,
    /// Its framing is not what the head said (nothing of it from there
    /// on was passed).
    Bad(WireError),
}

/// What is shown a body as it passes: nothing, its bytes as they came,
/// or its payload (de-chunked: a request body's `model`, for the record).
pub(super) enum Seen<'a> {
    Nothing,
    Bytes(&'a mut (dyn FnMut(&[u8]) + Send)),
    Payload(&'a mut (dyn FnMut(&[u8]) + Send)),
}

/// Passes a body on as it arrives: `buf[..start]` (its head) goes with the
/// body bytes already read, or alone at once when there are none (a head
/// is never held for its body: a client may wait for an answer to it, a
/// server may send its body long after); at most `limit` body bytes when
/// given.
async fn pass_body<R: AsyncRead + Unpin>(
    src: &mut Src<R>,
    buf: &mut BytesMut,
    mut start: usize,
    body: &mut Body,
    out: &Out,
    limit: Option<u64>,
    seen: &mut Seen<'_>,
) -> Result<BodyEnd, Gone> {
    let mut passed = 0u64;
    let mut payload = Vec::new();
    loop {
        if buf.len() > start || body.is_done() || start > 0 {
            payload.clear();
            let decoded = matches!(seen, Seen::Payload(_)).then_some(&mut payload);
            let scan = match body.scan(&buf[start..], decoded) {
                Ok(s) => s,
                Err(e) => {
                    send_data(out, buf.split_to(start).freeze()).await?;
                    return Ok(BodyEnd::Bad(e));
                }
            };
            let used = scan.used as u64;
            // A body that ends by the limit is whole: no cut.
            let (take, cut) = match limit {
                Some(l) if passed + used >= l && !(scan.done && passed + used <= l) => {
                    (l - passed, true)
                }
                _ => (used, false),
            };
            passed += take;
            match seen {
                Seen::Bytes(f) if take > 0 => f(&buf[start..start + take as usize]),
                Seen::Payload(f) if !payload.is_empty() => f(&payload),
                _ => {}
            }
            send_data(out, buf.split_to(start + take as usize).freeze()).await?;
            start = 0;
            if cut {
                return Ok(BodyEnd::Limit);
            }
            if scan.done {
                return Ok(BodyEnd::Done);
            }
        }
        match src.fill(buf).await {
            Ok(0) => {
                send_data(out, buf.split().freeze()).await?;
                return Ok(BodyEnd::Eof);
            }
            Ok(_) => {}
            Err(_) => return Ok(BodyEnd::Failed),
        }
    }
}

/// Reads (and drops) a body the upstream will never see.
async fn drop_body<R: AsyncRead + Unpin>(
    src: &mut Src<R>,
    buf: &mut BytesMut,
    body: &mut Body,
    seen: &mut Seen<'_>,
) -> Result<(), BodyEnd> {
    let mut payload = Vec::new();
    loop {
        payload.clear();
        let decoded = matches!(seen, Seen::Payload(_)).then_some(&mut payload);
        let scan = body.scan(buf, decoded).map_err(BodyEnd::Bad)?;
        if let Seen::Payload(f) = seen
            && !payload.is_empty()
        {
            f(&payload);
        }
        let _ = buf.split_to(scan.used);
        if scan.done {
            return Ok(());
        }
        match src.fill(buf).await {
            Ok(0) => return Err(BodyEnd::Eof),
            Ok(_) => {}
            Err(_) => return Err(BodyEnd::Failed),
        }
    }
}

/// Reads a whole body (at most [`MAX_BODY`]) into the buffer, after its
/// head, and returns its payload (de-chunked) and how many bytes of the
/// buffer it takes: to match its JSON fields, or to rewrite it. `None`
/// when it is larger, ends early, or the budget has no room for it (`held`
/// holds it there, its payload and its bytes in the buffer, until the
/// caller lets it go); the buffer keeps what was read either way. (Not a
/// body the client sends only after a go-ahead that it has not had.)
async fn whole_body<R: AsyncRead + Unpin>(
    src: &mut Src<R>,
    buf: &mut BytesMut,
    held: &mut Lease,
    head_len: usize,
    framing: Framing,
) -> Result<Option<(Vec<u8>, usize)>, BodyEnd> {
    let mut body = Body::new(framing);
    let mut payload = Vec::new();
    let mut at = head_len;
    loop {
        let scan = body
            .scan(&buf[at..], Some(&mut payload))
            .map_err(BodyEnd::Bad)?;
        at += scan.used;
        if scan.done {
            return Ok(Some((payload, at - head_len)));
        }
        if at - head_len > MAX_BODY {
            return Ok(None);
        }
        if !held.hold(buf.len() - head_len + payload.capacity() + READ) {
            budget::refused("a body passes on as it comes, not held whole to match or rewrite it");
            return Ok(None);
        }
        match src.fill(buf).await {
            // A body that runs until the close is whole at the close.
            Ok(0) if framing == Framing::UntilClose => {
                return Ok(Some((payload, at - head_len)));
            }
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(_) => return Err(BodyEnd::Failed),
        }
    }
}

impl RequestSide {
    /// Reads requests from the client until it closes, sending what goes
    /// upstream to `out`.
    pub(crate) async fn run<R: AsyncRead + Unpin>(self, src: R, out: Output) {
        let _ending = budget::Connection::new();
        let out = Out::new(out);
        let _ = self.requests(&mut Src::new(src, &out), &out).await;
    }

    async fn requests<R: AsyncRead + Unpin>(
        &self,
        src: &mut Src<R>,
        out: &Out,
    ) -> Result<(), Gone> {
        let x = &self.x;
        let mut buf = BytesMut::new();
        for n in 0u64.. {
            // Between requests, netchaos stopping closes the connection (a
            // client's next request may cross the close, as with any
            // server's idle timeout: clients retry it on a new one).
            if buf.is_empty() {
                tokio::select! {
                    biased;
                    r = src.fill(&mut buf) => match r {
                        Ok(0) => return send(out, ItemKind::Fin).await,
                        Ok(_) => {}
                        Err(_) => return send(out, ItemKind::Reset).await,
                    },
                    () = x.stopping.cancelled() => {
                        if self.tx.send(Pending::Close).await.is_err() {
                            return Ok(());
                        }
                        // Until the close, or until the response side ends
                        // otherwise (an answer whose end is the upstream's
                        // close): the client's end is still passed on, as
                        // the connection's end may wait for it.
                        loop {
                            buf.clear();
                            match src.fill(&mut buf).await {
                                Ok(0) => return send(out, ItemKind::Fin).await,
                                Ok(_) => {}
                                Err(_) => return send(out, ItemKind::Reset).await,
                            }
                        }
                    }
                    // The upstream closed (or is relayed as bytes): what
                    // the client sends next goes to it as it is, and its
                    // kernel answers it as it would directly (an RST).
                    () = self.done.cancelled() => return raw(src, &mut buf, out).await,
                }
            }
            // What this request holds in the budget beyond the allowances:
            // its head, its body read whole; let go with the request.
            let (mut head_held, mut body_held) = (Lease::default(), Lease::default());
            let until = Some(&self.done);
            let head = match read_head(src, &mut buf, &mut head_held, wire::request, until).await {
                Head::Parsed(h) => h,
                Head::Eof => {
                    send_data(out, buf.split().freeze()).await?;
                    return send(out, ItemKind::Fin).await;
                }
                Head::Failed => return send(out, ItemKind::Reset).await,
                // The upstream closed while this head was arriving: it goes
                // on as it is, as it would have reached the upstream.
                Head::Gone => return raw(src, &mut buf, out).await,
                // Longer than netchaos parses: for the upstream to refuse;
                // or not HTTP at all (a first line that is no request
                // line: another protocol that began like HTTP).
                Head::Bad(e)
                    if e.is_too_large() || (n == 0 && !wire::starts_with_request_line(&buf)) =>
                {
                    return self.go_raw(src, &mut buf, out).await;
                }
                Head::Bad(e) => return self.reject(e, src, &mut buf, out).await,
                Head::Spent => return self.refuse().await,
            };
            x.events.http_request();
            let framing = match head.framing() {
                Ok(f) => f,
                Err(e) => return self.reject(e, src, &mut buf, out).await,
            };
            let faults = x.faults.borrow().clone();
            let host = head
                .header("host")
                .map(str::to_string)
                .or_else(|| x.sni.clone());
            let view = |body| RequestView {
                method: &head.method,
                path: &head.target,
                host: host.as_deref(),
                headers: &head.headers,
                body,
            };
            // The client holds its body back until it gets `100 Continue`
            // (or the answer): from the upstream, once the head reaches it;
            // from netchaos when a rule must read the body to decide
            // (and its length lets it be read whole).
            let mut waits = head.expects_continue();
            let mut continued = false;
            // The body as read whole for matching, if it was: a rewrite
            // below takes it from here rather than reading it again.
            let mut peeked = None;
            if framing != Framing::Empty
                && decide::body_decides(&faults, n, &view(None), x.epoch.elapsed())
            {
                let whole = match framing {
                    Framing::Length(l) => l <= MAX_BODY as u64,
                    _ => true,
                };
                if waits && head.minor > 0 && whole && !budget::spent() {
                    if self.tx.send(Pending::Continue).await.is_err() {
                        return raw(src, &mut buf, out).await;
                    }
                    (waits, continued) = (false, true);
                }
                if !waits {
                    match whole_body(src, &mut buf, &mut body_held, head.head_len, framing).await {
                        Ok(w) => peeked = Some(w),
                        Err(BodyEnd::Failed) => return send(out, ItemKind::Reset).await,
                        Err(BodyEnd::Bad(e)) => return self.reject(e, src, &mut buf, out).await,
                        Err(_) => return self.go_raw(src, &mut buf, out).await,
                    }
                }
            }
            let json: Option<serde_json::Value> = peeked
                .as_ref()
                .and_then(Option::as_ref)
                .and_then(|(p, _)| serde_json::from_slice(p).ok());
            let mut d = decide::decide(&faults, n, &view(json.as_ref()), x.epoch.elapsed());
            let meta = Meta {
                n,
                method: head.method.clone(),
                target: head.target.clone(),
                host: host.clone(),
                keep_alive: head.keep_alive(),
                faulted: Default::default(),
                attempt: Attempt::begin(
                    &x.events,
                    &x.conn,
                    "http/1.1",
                    n,
                    &head.method,
                    &head.target,
                    host.as_deref(),
                    &head.headers,
                ),
            };
            let attempt = meta.attempt.clone();
            if faults.iter().any(|c| c.spec.kind.layer() != Layer::Http) {
                attempt.mark(|a| a.not_taped("a connection fault acts on it"));
            }
            if let Some(m) = json.as_ref().and_then(|j| j.get("model")?.as_str()) {
                attempt.mark(|a| a.model(m));
            }
            // The body's `model`, for the record, as it passes (or is
            // dropped, under an answer made in the upstream's place).
            let mut scan = ModelScan::default();
            let mut feed_model = |b: &[u8]| {
                if let Some(a) = &attempt {
                    scan.feed(b);
                    a.scanned(&scan);
                    a.request_bytes(b);
                }
            };
            let mut seen_model = match attempt {
                Some(_) => Seen::Payload(&mut feed_model),
                None => Seen::Nothing,
            };
            // Counted as the hold begins: a client that times out during it
            // (what the fault is for) was still faulted. No response exists
            // yet, unless netchaos answers in the upstream's place.
            let answering = d.answer.as_ref().and_then(|(_, s)| s.status());
            for c in &d.request_delays {
                x.record(c, &meta, answering);
            }
            if !d.request_delay.is_zero() {
                crate::timer::sleep(d.request_delay).await;
            }
            if let Some((chosen, status)) = d.answer.take() {
                let whole = matches!(framing, Framing::Empty) || (json.is_some() && !waits);
                // A client waiting for a go-ahead may or may not send its
                // body after the answer: the connection cannot go on.
                let closing = !head.keep_alive() || (waits && !whole);
                let then = match status.then() {
                    After::Keep if closing => After::Close,
                    t => t,
                };
                let drained = matches!(status, decide::Reply::Abort(_)) && !waits;
                if drained {
                    // The whole request first: a client still sending its
                    // body would meet the reset on a write, and some (Python's
                    // http.client) then report a clean close instead.
                    buf.advance_to(head.head_len);
                    let _ =
                        drop_body(src, &mut buf, &mut Body::new(framing), &mut seen_model).await;
                }
                let held = d.on_answer(status.status());
                let answer = Answer {
                    meta,
                    status: status.status(),
                    reply: status.bytes(closing, head.method == "HEAD"),
                    then,
                    chosen,
                    delay: held.headers_delay,
                    delays: held.delays,
                };
                if self
                    .tx
                    .send(Pending::Answered(Box::new(answer)))
                    .await
                    .is_err()
                {
                    // The upstream closed meanwhile: nothing can answer on
                    // this connection; the request goes to the upstream.
                    return raw(src, &mut buf, out).await;
                }
                if then != After::Keep {
                    // The connection ends with the answer: what of the body
                    // has come already gives the record its model.
                    if let (false, Seen::Payload(f)) = (drained, &mut seen_model) {
                        let mut p = Vec::new();
                        let early = &buf[head.head_len.min(buf.len())..];
                        if Body::new(framing).scan(early, Some(&mut p)).is_ok() {
                            f(&p);
                        }
                    }
                    return Ok(());
                }
                buf.advance_to(head.head_len);
                let mut body = Body::new(framing);
                match drop_body(src, &mut buf, &mut body, &mut seen_model).await {
                    Ok(()) => continue,
                    Err(BodyEnd::Eof) => return send(out, ItemKind::Fin).await,
                    Err(BodyEnd::Failed) => return send(out, ItemKind::Reset).await,
                    Err(BodyEnd::Bad(e)) => return self.bad_body(e, None, out).await,
                    Err(_) => return self.go_raw(src, &mut buf, out).await,
                }
            }
            // An upgrade to HTTP/2 (h2c) is declined: the request goes on
            // without it, and the server answers in HTTP/1.1, where every
            // later request stays in reach of the faults.
            let h2c = head
                .header("upgrade")
                .is_some_and(|u| u.trim().eq_ignore_ascii_case("h2c"));
            let tunnel = head.method.eq_ignore_ascii_case("CONNECT")
                || (head.header("upgrade").is_some() && !h2c);
            // A body to rewrite is read whole first (not one the client
            // sends only after a go-ahead, nor a tunnel's).
            let body_edits = d.rewrites.iter().any(|(_, w)| w.edits().body.is_some());
            let mut whole = None;
            if body_edits && !tunnel && !waits && rewrite::body_editable(&head.headers) {
                whole = match peeked.take() {
                    Some(w) => w,
                    None => match whole_body(src, &mut buf, &mut body_held, head.head_len, framing)
                        .await
                    {
                        Ok(w) => w,
                        Err(BodyEnd::Failed) => return send(out, ItemKind::Reset).await,
                        Err(BodyEnd::Bad(e)) => return self.reject(e, src, &mut buf, out).await,
                        Err(_) => return self.go_raw(src, &mut buf, out).await,
                    },
                };
            }
            // The head as it goes: edited by `http_rewrite` faults, its Host the upstream's name when
            // netchaos speaks TLS to it; else byte for byte, with the body.
            let mut edited: Option<Bytes> =
                h2c.then(|| rewrite::without_h2c(&buf[..head.head_len], head.header("connection")));
            let mut new_body: Option<Vec<u8>> = None;
            for (c, w) in &d.rewrites {
                let was = edited.as_deref().unwrap_or(&buf[..head.head_len]);
                let next = rewrite::request(was, w.edits());
                let mut changed = next != was;
                if let (Some(e), Some((payload, _))) = (&w.edits().body, &whole) {
                    let cur = new_body.as_deref().unwrap_or(payload);
                    if let Some(b) = rewrite::body(cur, e, rewrite::is_json(&head.headers)) {
                        changed |= b != cur;
                        new_body = Some(b);
                    }
                }
                // Counted where it changed something.
                if changed {
                    x.record(c, &meta, None);
                }
                edited = Some(next);
            }
            if let Some(h) = &x.rewrite_host {
                let was = edited.as_deref().unwrap_or(&buf[..head.head_len]);
                edited = Some(set_header(was, "Host", Some(h)));
            }
            // A response body to rewrite, or an event stream to count,
            // must come uncompressed: the upstream is asked for it so
            // (where the client asked for an encoding at all), but not for
            // a request seen whole that asks for no stream.
            let streams = || {
                let early = &buf[head.head_len..];
                let seen_whole = match framing {
                    Framing::Empty => true,
                    Framing::Length(n) => early.len() as u64 >= n,
                    _ => false,
                };
                decide::asks_for_stream(head.header("accept"), &head.target, early, seen_whole)
            };
            if head.header("accept-encoding").is_some() && d.wants_identity(streams) {
                let was = edited.as_deref().unwrap_or(&buf[..head.head_len]);
                edited = Some(set_header(was, "Accept-Encoding", Some("identity")));
            }
            let (switched, switch) = match tunnel {
                true => {
                    let (tx, rx) = oneshot::channel();
                    (Some(tx), Some(rx))
                }
                false => (None, None),
            };
            let bad_body = CancellationToken::new();
            let forward = Forward {
                meta,
                d,
                continued,
                switched,
                bad_body: bad_body.clone(),
            };
            if self
                .tx
                .send(Pending::Forwarded(Box::new(forward)))
                .await
                .is_err()
            {
                // The upstream closed meanwhile: the request goes to it as
                // it came.
                return raw(src, &mut buf, out).await;
            }
            if let (Some(b), Some((payload, wire_len))) = (new_body, &whole) {
                if b != *payload {
                    let h = edited.as_deref().unwrap_or(&buf[..head.head_len]);
                    let mut msg = BytesMut::from(&rewrite::reframed(h, b.len(), false)[..]);
                    msg.extend_from_slice(&b);
                    send_data(out, msg.freeze()).await?;
                    buf.advance_to(head.head_len + wire_len);
                    continue;
                }
            }
            let start = match edited {
                Some(h) => {
                    send_data(out, h).await?;
                    buf.advance_to(head.head_len);
                    0
                }
                None => head.head_len,
            };
            let mut body = Body::new(framing);
            let passed =
                pass_body(src, &mut buf, start, &mut body, out, None, &mut seen_model).await?;
            drop(attempt);
            match passed {
                BodyEnd::Done => {}
                BodyEnd::Eof => return send(out, ItemKind::Fin).await,
                BodyEnd::Failed => return send(out, ItemKind::Reset).await,
                BodyEnd::Bad(e) => return self.bad_body(e, Some(&bad_body), out).await,
                BodyEnd::Limit => return self.go_raw(src, &mut buf, out).await,
            }
            // An upgrade or CONNECT: a tunnel from here if the upstream
            // switched; HTTP goes on if it declined (as a client waits for
            // that answer before it sends more).
            if let Some(switch) = switch {
                match switch.await {
                    Ok(false) => {}
                    Ok(true) | Err(_) => return raw(src, &mut buf, out).await,
                }
            }
        }
        Ok(())
    }

    async fn go_raw<R: AsyncRead + Unpin>(
        &self,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        out: &Out,
    ) -> Result<(), Gone> {
        let _ = self.tx.send(Pending::Raw).await;
        raw(src, buf, out).await
    }

    /// A malformed or ambiguous request head (RFC 9112: a strict server
    /// answers 400 and closes): nothing of it is forwarded; a 400 in its
    /// turn says why, then the connection closes. Logged (an `error`
    /// event, `http_malformed`). If the upstream has closed already, it
    /// gets the bytes as they came instead, as it would have directly.
    async fn reject<R: AsyncRead + Unpin>(
        &self,
        why: WireError,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        out: &Out,
    ) -> Result<(), Gone> {
        if self.tx.send(Pending::Reject(why)).await.is_err() {
            return raw(src, buf, out).await;
        }
        self.x.events.relay_error(
            &self.x.conn,
            "http_malformed",
            &format!(
                "a request with {why}: not forwarded, answered 400, connection closed (RFC 9112)"
            ),
        );
        Ok(())
    }

    /// A request body whose framing breaks (a chunk size that is not hex
    /// or overflows, a chunk without its CRLF): nothing from the bad bytes
    /// on is forwarded (where it ends is what a server behind could read
    /// differently), and the upstream gets a FIN, as the request can never
    /// be whole. The client gets a 400 unless the upstream's answer had
    /// begun (`bad`, the request's; `None`: it was answered here); the
    /// connection closes after it.
    async fn bad_body(
        &self,
        why: WireError,
        bad: Option<&CancellationToken>,
        out: &Out,
    ) -> Result<(), Gone> {
        self.x.events.relay_error(
            &self.x.conn,
            "http_malformed",
            &format!(
                "a request body with {why}: cut there, answered 400 unless its answer had begun, connection closed"
            ),
        );
        let _ = self.tx.send(Pending::Close).await;
        match bad {
            Some(bad) => {
                bad.cancel();
                send(out, ItemKind::Fin).await
            }
            None => Ok(()),
        }
    }

    /// A head the budget has no room for: answered 431 in its turn, then
    /// the connection closes (the rest of the head unread). A server
    /// short of memory refuses so; waiting for room could hold every
    /// connection's head while others hold the budget.
    async fn refuse(&self) -> Result<(), Gone> {
        budget::refused("a request head was answered 431 and its connection closed");
        self.x.events.relay_error(
            &self.x.conn,
            "http_memory_spent",
            "a request head longer than 16 KiB found the HTTP layer's memory budget spent: answered 431, connection closed",
        );
        let _ = self.tx.send(Pending::Refuse).await;
        Ok(())
    }
}

trait AdvanceTo {
    /// Drops the first `n` bytes.
    fn advance_to(&mut self, n: usize);
}

impl AdvanceTo for BytesMut {
    fn advance_to(&mut self, n: usize) {
        let _ = self.split_to(n);
    }
}

/// How the response side goes on after one response.
enum Next {
    Continue,
    /// The connection is over (its last item sent).
    End,
    Raw,
}

impl ResponseSide {
    /// Follows the upstream's responses, sending what reaches the client
    /// to `out`.
    pub(crate) async fn run<R: AsyncRead + Unpin>(mut self, src: R, out: Output) {
        let out = Out::new(out);
        let _done = self.done.clone().drop_guard();
        let _ = self.responses(&mut Src::new(src, &out), &out).await;
    }

    async fn responses<R: AsyncRead + Unpin>(
        &mut self,
        src: &mut Src<R>,
        out: &Out,
    ) -> Result<(), Gone> {
        let mut buf = BytesMut::new();
        loop {
            // The upstream may speak with nothing asked of it (closing an
            // idle connection, a 408): held until a request claims it.
            let pending = loop {
                tokio::select! {
                    biased;
                    p = self.rx.recv() => break p,
                    r = src.fill(&mut buf), if buf.len() <= MAX_HEAD => match r {
                        Ok(0) => {
                            send_data(out, buf.split().freeze()).await?;
                            return send(out, ItemKind::Fin).await;
                        }
                        Ok(_) => {}
                        Err(_) => {
                            send_data(out, buf.split().freeze()).await?;
                            return send(out, ItemKind::Reset).await;
                        }
                    },
                }
            };
            let next = match pending {
                None | Some(Pending::Raw) => Next::Raw,
                Some(Pending::Close) => {
                    send_data(out, buf.split().freeze()).await?;
                    return send(out, ItemKind::Close).await;
                }
                Some(Pending::Refuse) => {
                    send_data(out, buf.split().freeze()).await?;
                    send_data(out, Bytes::from_static(TOO_LARGE)).await?;
                    return send(out, ItemKind::Close).await;
                }
                Some(Pending::Reject(why)) => {
                    send_data(out, buf.split().freeze()).await?;
                    send_data(out, bad_request(why)).await?;
                    return send(out, ItemKind::Close).await;
                }
                Some(Pending::Continue) => {
                    send_data(out, Bytes::from_static(CONTINUE)).await?;
                    Next::Continue
                }
                Some(Pending::Answered(a)) => self.answer(*a, out).await?,
                Some(Pending::Forwarded(f)) => self.response(src, &mut buf, out, *f).await?,
            };
            match next {
                Next::Continue => {}
                Next::End => return Ok(()),
                Next::Raw => {
                    // The request side relays the client's bytes too.
                    self.done.cancel();
                    return raw(src, &mut buf, out).await;
                }
            }
        }
    }

    async fn answer(&self, a: Answer, out: &Out) -> Result<Next, Gone> {
        // Delays are counted as their hold begins (request-phase ones
        // already were); the answer once it is sent.
        for c in &a.delays {
            self.x.record(c, &a.meta, a.status);
        }
        if !a.delay.is_zero() {
            crate::timer::sleep(a.delay).await;
        }
        self.x.record(&a.chosen, &a.meta, a.status);
        a.meta.attempt.mark(|at| match a.status {
            Some(s) => {
                at.status(s, super::attempt::retry_after_in(&a.reply).as_deref());
                at.head_out();
            }
            // `http_abort`: the connection ends where the answer would be.
            None => at.no_answer(match a.then {
                After::Reset => "reset",
                _ => "closed",
            }),
        });
        send_data(out, a.reply).await?;
        if a.status.is_some() {
            a.meta.attempt.mark(Attempt::done);
        }
        match a.then {
            After::Keep => Ok(Next::Continue),
            After::Close => send(out, ItemKind::Close).await.map(|()| Next::End),
            After::Reset => send(out, ItemKind::Reset).await.map(|()| Next::End),
        }
    }

    async fn response<R: AsyncRead + Unpin>(
        &mut self,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        out: &Out,
        f: Forward,
    ) -> Result<Next, Gone> {
        let Forward {
            meta,
            mut d,
            mut continued,
            mut switched,
            bad_body,
        } = f;
        // A long head, in the budget until the response is done with it.
        let mut head_held = Lease::default();
        let mut head = loop {
            let read = tokio::select! {
                biased;
                // The request's body was malformed and its answer has not
                // begun: a 400 (the upstream had a FIN), then the close.
                () = bad_body.cancelled() => {
                    let why = WireError::BAD_BODY;
                    send_data(out, bad_request(why)).await?;
                    return send(out, ItemKind::Close).await.map(|()| Next::End);
                }
                h = read_head(src, buf, &mut head_held, wire::response, None) => h,
            };
            match read {
                // The client has had netchaos's go-ahead: not a second.
                Head::Parsed(h) if h.status == 100 && continued => {
                    buf.advance_to(h.head_len);
                    continued = false;
                }
                Head::Parsed(h) if h.is_interim() => {
                    // 100 Continue, 103 Early Hints: on at once.
                    send_data(out, buf.split_to(h.head_len).freeze()).await?;
                }
                Head::Parsed(h) => break h,
                Head::Eof => {
                    send_data(out, buf.split().freeze()).await?;
                    return send(out, ItemKind::Fin).await.map(|()| Next::End);
                }
                Head::Failed => {
                    send_data(out, buf.split().freeze()).await?;
                    return send(out, ItemKind::Reset).await.map(|()| Next::End);
                }
                // A head the budget has no room for passes as bytes (the
                // client reads it as it would have); so does one netchaos
                // cannot parse.
                Head::Spent | Head::Gone => {
                    meta.attempt.mark(Attempt::unfollowed);
                    return Ok(Next::Raw);
                }
                Head::Bad(e) => return Ok(self.unfollowed(&meta, e)),
            }
        };
        self.x
            .record_response(&meta, head.status, head.header("retry-after"), None);
        meta.attempt
            .mark(|a| a.upstream_head(head.status, &head.headers));
        let mut d = d.on_response(Some(head.status), &head.headers);
        // Counted as the hold begins, with the status it holds back.
        for c in &d.delays {
            self.x.record(c, &meta, Some(head.status));
        }
        if !d.headers_delay.is_zero() {
            crate::timer::sleep(d.headers_delay).await;
        }
        if let Some((c, reply)) = d.replace.take() {
            if let Some(s) = switched.take() {
                let _ = s.send(false);
            }
            return self.replace(src, buf, out, &meta, &head, c, reply).await;
        }
        meta.attempt.mark(Attempt::head_out);
        let mut head_changed = Vec::new();
        if !d.rewrites.is_empty() {
            (head, head_changed) = self.rewrite(buf, &meta, head, &d.rewrites);
        }
        let framing = match head.framing(&meta.method) {
            Ok(f) => f,
            Err(e) => return Ok(self.unfollowed(&meta, e)),
        };
        if framing == Framing::Tunnel {
            // Switched: the answer is whole, what follows another protocol.
            meta.attempt.mark(Attempt::done);
            send_data(out, buf.split_to(head.head_len).freeze()).await?;
            if let Some(s) = switched.take() {
                let _ = s.send(true);
            }
            return Ok(Next::Raw);
        }
        // An upgrade the upstream declined (a 200 to `Upgrade:`): HTTP
        // goes on, every later request in reach of the faults.
        if let Some(s) = switched.take() {
            let _ = s.send(false);
        }
        let mut body = Body::new(framing);
        // A response that has no body (HEAD, 204, 304, a length of 0) has
        // no events to fault.
        // (A compressed one, which the upstream sent although asked not
        // to, has no events netchaos can see: it passes as it came.)
        let format = head.stream_format();
        let sse = match format.is_some() && framing != Framing::Empty && !head.is_compressed() {
            true => std::mem::take(&mut d.sse),
            false => Vec::new(),
        };
        // A body to rewrite: not a stream's (it may never end), nor one
        // that a response has none of by its status or request (HEAD); an
        // empty one (a length of 0) may get one.
        let bodiless = meta.method.eq_ignore_ascii_case("HEAD")
            || matches!(head.status, 100..=199 | 204 | 304);
        let body_edits = d.rewrites.iter().any(|(_, w)| w.edits().body.is_some());
        if body_edits && !bodiless && rewrite::body_editable(&head.headers) {
            let rewritten = self
                .rewrite_body(src, buf, out, &meta, &head, framing, &d, &head_changed)
                .await?;
            if let Some(next) = rewritten {
                return Ok(next);
            }
        }
        // A body that passes through a fault's hands (even one that does
        // not act in the end) is not taped on its way.
        if d.truncate.is_some() || !sse.is_empty() {
            meta.attempt
                .mark(|a| a.not_taped("a response fault followed its body"));
        }
        let end = if let Some((c, t)) = &d.truncate {
            let end = pass_body(
                src,
                buf,
                head.head_len,
                &mut body,
                out,
                Some(t.after_bytes()),
                &mut Seen::Bytes(&mut |_| meta.attempt.mark(Attempt::body_out)),
            )
            .await?;
            if end == BodyEnd::Limit {
                self.x.record(c, &meta, Some(head.status));
                return cut(out, t.then()).await;
            }
            end
        } else if !sse.is_empty() {
            let head_bytes = buf.split_to(head.head_len).freeze();
            // The error event ends the body cleanly, and netchaos then
            // ends the connection (the upstream is still streaming): the
            // head says so, or a client would pool the connection and
            // send its next request into the close.
            // So does a patch or a new type that changes events' lengths,
            // when the head gave the body's: the close delimits it instead.
            let closes = sse.iter().any(|(_, s)| {
                matches!(s.breaks(), Some((_, Breakage::Error)))
                    || (s.patch().is_some() && matches!(framing, Framing::Length(_)))
            });
            let head_bytes = match closes {
                // A length would be wrong once the error event replaces
                // the rest: the close (or the chunks, beside which a
                // length must not stand) delimits the body instead.
                true => set_header(
                    &set_header(&head_bytes, "Connection", Some("close")),
                    "Content-Length",
                    None,
                ),
                false => head_bytes,
            };
            send_data(out, head_bytes).await?;
            let mut stream = Stream {
                x: &self.x,
                faults: &sse,
                recorded: vec![false; sse.len()],
                meta: &meta,
                status: head.status,
                format: format.unwrap_or_default(),
                chunked: framing == Framing::Chunked,
                until_close: framing == Framing::UntilClose,
                closes,
                counted: 0,
            };
            return stream.run(src, buf, &mut body, out, &mut self.rx).await;
        } else {
            let mut first = |_: &[u8]| meta.attempt.mark(Attempt::body_out);
            // Under --record, its payload as it goes (de-chunked).
            let mut taped = |b: &[u8]| {
                meta.attempt.mark(|a| {
                    a.body_out();
                    a.response_bytes(b);
                })
            };
            let mut seen = match &meta.attempt {
                Some(a) if a.taping() => Seen::Payload(&mut taped),
                Some(_) => Seen::Bytes(&mut first),
                None => Seen::Nothing,
            };
            pass_body(src, buf, head.head_len, &mut body, out, None, &mut seen).await?
        };
        Ok(match end {
            BodyEnd::Done => {
                meta.attempt.mark(Attempt::done);
                Next::Continue
            }
            BodyEnd::Eof => {
                // A body that ends with the connection is whole then.
                match framing {
                    Framing::UntilClose => meta.attempt.mark(Attempt::done),
                    _ => meta.attempt.mark(|a| a.failed("truncated")),
                }
                send(out, ItemKind::Fin).await?;
                Next::End
            }
            BodyEnd::Failed => {
                meta.attempt.mark(|a| a.failed("reset"));
                send(out, ItemKind::Reset).await?;
                Next::End
            }
            BodyEnd::Bad(e) => self.unfollowed(&meta, e),
            BodyEnd::Limit => {
                meta.attempt.mark(Attempt::unfollowed);
                Next::Raw
            }
        })
    }

    /// A response netchaos cannot follow (malformed, or framed in a way it
    /// does not read): relayed as bytes from here — the client reads what
    /// it would have read directly — and so is the rest of the connection
    /// (its later requests are not faulted). Logged (`http_malformed`).
    fn unfollowed(&self, meta: &Meta, why: WireError) -> Next {
        meta.attempt.mark(Attempt::unfollowed);
        self.x.events.relay_error(
            &self.x.conn,
            "http_malformed",
            &format!(
                "the response to {} {} has {why}: relayed as bytes from there, with the rest of the connection",
                meta.method, meta.target
            ),
        );
        Next::Raw
    }
}

impl ResponseSide {
    /// `http_rewrite` edits to the response `head` at the front of `buf`
    /// (each counted where it changes the head, with the status it
    /// leaves): the head
    /// is replaced there and read again, so what follows sees the edited
    /// one. Its framing was left alone.
    /// Also says which of them changed it.
    fn rewrite(
        &self,
        buf: &mut BytesMut,
        meta: &Meta,
        head: wire::Response,
        rewrites: &[(Chosen, crate::fault::http_rewrite::HttpRewrite)],
    ) -> (wire::Response, Vec<bool>) {
        let mut changed = Vec::with_capacity(rewrites.len());
        let mut edited = Bytes::copy_from_slice(&buf[..head.head_len]);
        let mut status = head.status;
        // A 101's status, or a CONNECT's answer's, says whether a tunnel
        // follows: it is kept.
        let framed = status == 101 || meta.method.eq_ignore_ascii_case("CONNECT");
        for (c, w) in rewrites {
            let next = rewrite::response(&edited, w.edits(), status, framed);
            if !framed {
                status = w.edits().status.unwrap_or(status);
            }
            // Counted where it changed something.
            changed.push(next != edited);
            if next != edited {
                self.x.record(c, meta, Some(status));
            }
            edited = next;
        }
        let mut next = BytesMut::with_capacity(edited.len() + buf.len() - head.head_len);
        next.extend_from_slice(&edited);
        next.extend_from_slice(&buf[head.head_len..]);
        match wire::response(&next) {
            Ok(Some(h)) => {
                *buf = next;
                (h, changed)
            }
            // Not expected: the edits keep a head's form. The original
            // goes on unedited rather than broken.
            _ => (head, vec![false; rewrites.len()]),
        }
    }

    /// `http_rewrite` edits to the body of the response `head` (at the
    /// front of `buf`): read whole, rewritten and sent with its new
    /// length — cut short after it by an `http_truncate` that applies.
    /// `None` (nothing sent) when it stays as it came: larger than
    /// [`MAX_BODY`], ended early, not JSON for a patch, or unchanged. A
    /// fault is counted once, here only if its head edits changed nothing.
    #[allow(clippy::too_many_arguments)]
    async fn rewrite_body<R: AsyncRead + Unpin>(
        &self,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        out: &Out,
        meta: &Meta,
        head: &wire::Response,
        framing: Framing,
        d: &decide::OnResponse,
        head_changed: &[bool],
    ) -> Result<Option<Next>, Gone> {
        let mut held = Lease::default();
        let whole = whole_body(src, buf, &mut held, head.head_len, framing).await;
        let (payload, wire_len) = match whole {
            Ok(Some(w)) => w,
            Err(BodyEnd::Failed) => {
                meta.attempt.mark(|a| a.failed("reset"));
                send_data(out, buf.split().freeze()).await?;
                return send(out, ItemKind::Reset).await.map(|()| Some(Next::End));
            }
            // What was read stays in the buffer, passed on as it came.
            _ => return Ok(None),
        };
        let mut now = payload;
        let mut any = false;
        for (i, (c, w)) in d.rewrites.iter().enumerate() {
            let Some(e) = &w.edits().body else { continue };
            match rewrite::body(&now, e, rewrite::is_json(&head.headers)) {
                Some(b) if b != now => {
                    if !head_changed.get(i).copied().unwrap_or(false) {
                        self.x.record(c, meta, Some(head.status));
                    }
                    now = b;
                    any = true;
                }
                _ => {}
            }
        }
        if !any {
            return Ok(None);
        }
        let closes = framing == Framing::UntilClose;
        let head_bytes = rewrite::reframed(&buf[..head.head_len], now.len(), closes);
        let mut msg = BytesMut::from(&head_bytes[..]);
        buf.advance_to(head.head_len + wire_len);
        if let Some((c, t)) = d
            .truncate
            .as_ref()
            .filter(|(_, t)| (now.len() as u64) > t.after_bytes())
        {
            msg.extend_from_slice(&now[..t.after_bytes() as usize]);
            send_data(out, msg.freeze()).await?;
            self.x.record(c, meta, Some(head.status));
            return cut(out, t.then()).await.map(Some);
        }
        msg.extend_from_slice(&now);
        send_data(out, msg.freeze()).await?;
        meta.attempt.mark(Attempt::done);
        Ok(Some(match framing {
            // The upstream's close ended the body: the connection ends.
            Framing::UntilClose => {
                send(out, ItemKind::Fin).await?;
                Next::End
            }
            _ => Next::Continue,
        }))
    }

    /// A response-phase `http_status` or `http_abort`: the client gets the
    /// canned reply (or nothing) instead of the upstream's `head` — the
    /// upstream did the work. To keep the connection, the upstream's body
    /// is read and dropped before the next response; only a body of known,
    /// modest length is waited for. A chunked one may stream for minutes
    /// (events, NDJSON, a long poll) and the client's next request would
    /// wait behind it: such a reply closes the connection, and says so.
    #[allow(clippy::too_many_arguments)]
    async fn replace<R: AsyncRead + Unpin>(
        &mut self,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        out: &Out,
        meta: &Meta,
        head: &wire::Response,
        c: Chosen,
        reply: decide::Reply,
    ) -> Result<Next, Gone> {
        self.x.record(&c, meta, reply.status());
        let framing = head.framing(&meta.method).ok();
        let drains = match framing {
            Some(Framing::Empty) => true,
            Some(Framing::Length(n)) => n <= MAX_BODY as u64 && head.stream_format().is_none(),
            _ => false,
        };
        let then = match reply.then() {
            After::Keep if !meta.keep_alive || head.closes() || !drains => After::Close,
            t => t,
        };
        let bytes = reply.bytes(then != After::Keep, meta.method == "HEAD");
        meta.attempt.mark(|a| match reply.status() {
            Some(s) => a.status(s, super::attempt::retry_after_in(&bytes).as_deref()),
            None => a.no_answer(match then {
                After::Reset => "reset",
                _ => "closed",
            }),
        });
        send_data(out, bytes).await?;
        if reply.status().is_some() {
            meta.attempt.mark(Attempt::done);
        }
        match (then, framing) {
            (After::Keep, Some(framing)) => {
                buf.advance_to(head.head_len);
                match drop_body(src, buf, &mut Body::new(framing), &mut Seen::Nothing).await {
                    Ok(()) => Ok(Next::Continue),
                    Err(BodyEnd::Failed) => cut(out, After::Reset).await,
                    // The upstream's body ended early or was not HTTP: the
                    // client has had its reply, and nothing else can follow.
                    Err(_) => cut(out, After::Close).await,
                }
            }
            (t, _) => cut(out, t).await,
        }
    }
}

async fn cut(out: &Out, then: After) -> Result<Next, Gone> {
    let kind = match then {
        After::Reset => ItemKind::Reset,
        _ => ItemKind::Close,
    };
    send(out, kind).await.map(|()| Next::End)
}

/// One streamed response (an event stream, JSON lines or AWS frames)
/// under its `sse` faults, which all act, in rule order: each event waits
/// the sum of their delays and gets their patches one after another;
/// breaks act as their turns come, and one that ends the stream ends the
/// others' turns (of two malformed events due at once, the first rule's).
struct Stream<'a> {
    x: &'a Exchange,
    faults: &'a [(Chosen, crate::fault::sse::Sse)],
    /// Which faults have been counted (once each) for this response.
    recorded: Vec<bool>,
    meta: &'a Meta,
    status: u16,
    format: Format,
    /// Chunked: each event goes out as a chunk of its own (a cut then
    /// falls between events for clients that read whole chunks).
    chunked: bool,
    /// The head said `Connection: close`: the connection ends with the
    /// stream, even one that ends before its fault.
    closes: bool,
    /// The body ends with the connection (no length, not chunked).
    until_close: bool,
    /// Counted events sent so far.
    counted: u64,
}

impl Stream<'_> {
    /// Fault `i` acted on this response.
    fn record(&mut self, i: usize) {
        if !std::mem::replace(&mut self.recorded[i], true) {
            self.x
                .record(&self.faults[i].0, self.meta, Some(self.status));
        }
    }

    async fn emit(&self, out: &Out, bytes: &[u8]) -> Result<(), Gone> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.meta.attempt.mark(Attempt::body_out);
        if !self.chunked {
            return send_data(out, Bytes::copy_from_slice(bytes)).await;
        }
        let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
        chunk.extend_from_slice(bytes);
        chunk.extend_from_slice(b"\r\n");
        send_data(out, Bytes::from(chunk)).await
    }

    /// What happens once `counted` events are out, before any more: the
    /// faults' breaks due now, in rule order (a timed stall pauses, and
    /// the next may still act; any other ends the stream).
    async fn after_events<R: AsyncRead + Unpin>(
        &mut self,
        src: &mut Src<R>,
        out: &Out,
        rx: &mut mpsc::Receiver<Pending>,
    ) -> Result<Option<Next>, Gone> {
        for i in 0..self.faults.len() {
            let sse = &self.faults[i].1;
            let Some((_, breakage)) = sse.breaks().filter(|(n, _)| *n == self.counted) else {
                continue;
            };
            match breakage {
                Breakage::Stall(None) => {
                    self.record(i);
                    return Ok(Some(stall(src, out, rx).await?));
                }
                Breakage::Stall(Some(d)) => {
                    // A pause, then the rest: nothing more is read
                    // meanwhile, so the upstream's events wait in its
                    // socket (TCP pushes back) and none is lost.
                    self.record(i);
                    crate::timer::sleep(d).await;
                }
                Breakage::Drop(then) => {
                    self.record(i);
                    return Ok(Some(cut(out, then).await?));
                }
                Breakage::Error => {
                    // The error event ends the stream as the provider ends
                    // it: the body's end, then (the upstream still
                    // streaming) the connection's.
                    self.record(i);
                    self.meta.attempt.mark(|a| a.failed("stream_error"));
                    if let Some((event, data)) = sse.error_event(self.format) {
                        let error = sse_events::error_event(self.format, event, data);
                        self.emit(out, &error).await?;
                    }
                    if self.chunked {
                        send_data(out, Bytes::from_static(b"0\r\n\r\n")).await?;
                    }
                    return Ok(Some(cut(out, After::Close).await?));
                }
                // Those act on the next event ([`Stream::block`]).
                Breakage::BadJson | Breakage::Truncate => {}
            }
        }
        Ok(None)
    }

    /// One block of the stream: passed on as it came if it does not
    /// count, else delayed by every fault that delays, then spoiled or cut
    /// by the first fault whose turn it is, or else patched by every fault
    /// that patches; then what happens once it is out
    /// ([`Stream::after_events`]).
    async fn block<R: AsyncRead + Unpin>(
        &mut self,
        block: Block,
        src: &mut Src<R>,
        out: &Out,
        rx: &mut mpsc::Receiver<Pending>,
    ) -> Result<Option<Next>, Gone> {
        if !block.counts {
            self.emit(out, &block.bytes).await?;
            return Ok(None);
        }
        let nth = self.counted + 1;
        // Every event is late by the faults' delays, a spoiled one too.
        let (delay, delaying) = crate::fault::sse::event_delays(self.faults);
        for i in delaying {
            self.record(i);
        }
        if !delay.is_zero() {
            crate::timer::sleep(delay).await;
        }
        let spoils = crate::fault::sse::spoiling(self.faults, nth);
        match spoils.map(|i| (i, self.faults[i].1.breaks())) {
            Some((i, Some((_, Breakage::Truncate)))) => {
                self.record(i);
                self.emit(out, sse_events::half(&block.bytes)).await?;
                return Ok(Some(cut(out, After::Close).await?));
            }
            Some((i, _)) => {
                let spoiled = sse_events::spoil(&block.bytes, self.format);
                // Counted where it spoiled something (an AWS frame whose
                // event is not JSON is left as it came).
                if spoiled != block.bytes {
                    self.record(i);
                }
                self.emit(out, &spoiled).await?;
            }
            None => {
                let mut bytes = block.bytes;
                for i in 0..self.faults.len() {
                    let patched = self.faults[i]
                        .1
                        .patch()
                        .and_then(|p| sse_events::patch(&bytes, p, self.format));
                    if let Some(p) = patched {
                        self.record(i);
                        bytes = p;
                    }
                }
                self.emit(out, &bytes).await?;
            }
        }
        self.counted = nth;
        self.after_events(src, out, rx).await
    }

    async fn run<R: AsyncRead + Unpin>(
        &mut self,
        src: &mut Src<R>,
        buf: &mut BytesMut,
        body: &mut Body,
        out: &Out,
        rx: &mut mpsc::Receiver<Pending>,
    ) -> Result<Next, Gone> {
        let mut split = Splitter::new(self.format);
        if let Some(next) = self.after_events(src, out, rx).await? {
            return Ok(next);
        }
        loop {
            if buf.is_empty() && !body.is_done() {
                match src.fill(buf).await {
                    Ok(0) => {
                        if let Some(next) = self.block(split.finish(), src, out, rx).await? {
                            return Ok(next);
                        }
                        if self.until_close {
                            self.meta.attempt.mark(Attempt::done);
                        }
                        send(out, ItemKind::Fin).await?;
                        return Ok(Next::End);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        self.meta.attempt.mark(|a| a.failed("reset"));
                        send(out, ItemKind::Reset).await?;
                        return Ok(Next::End);
                    }
                }
            }
            let mut payload = Vec::new();
            let scan = match body.scan(buf, Some(&mut payload)) {
                Ok(s) => s,
                Err(_) => {
                    // Re-chunked already: there is no going back to bytes.
                    send(out, ItemKind::Reset).await?;
                    return Ok(Next::End);
                }
            };
            let _ = buf.split_to(scan.used);
            for block in split.push(&payload) {
                if let Some(next) = self.block(block, src, out, rx).await? {
                    return Ok(next);
                }
            }
            if scan.done {
                if let Some(next) = self.block(split.finish(), src, out, rx).await? {
                    return Ok(next);
                }
                if self.chunked {
                    send_data(out, Bytes::from_static(b"0\r\n\r\n")).await?;
                }
                self.meta.attempt.mark(Attempt::done);
                if self.closes {
                    return cut(out, After::Close).await;
                }
                return Ok(Next::Continue);
            }
        }
    }
}

/// Silence, the connection open: what the upstream still sends is read and
/// dropped, until the client ends the connection (or netchaos stops). The upstream's own end
/// (a FIN after the rest of the stream, as when the request said
/// `Connection: close`; or its RST) stays hidden: a stream that hangs
/// does not end, and the client's read timeout is what must fire.
async fn stall<R: AsyncRead + Unpin>(
    src: &mut Src<R>,
    out: &Out,
    rx: &mut mpsc::Receiver<Pending>,
) -> Result<Next, Gone> {
    let mut scratch = BytesMut::new();
    let mut upstream_open = true;
    loop {
        tokio::select! {
            r = src.fill(&mut scratch), if upstream_open => match r {
                Ok(n) if n > 0 => scratch.clear(),
                _ => upstream_open = false,
            },
            p = rx.recv() => if matches!(p, None | Some(Pending::Close)) {
                // The client is done with the connection, or netchaos is
                // stopping (the request side saw nothing more coming).
                send(out, ItemKind::Fin).await?;
                return Ok(Next::End);
            },
        }
    }
}
