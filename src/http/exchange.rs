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
use std::ops::ControlFlow;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Marking, ModelScan};
use super::budget::{self, Flow, Lease};
use super::decide::{self, Reply};
use super::events::{self as sse_events, Block, Format, Splitter};
use super::phases::{
    self, Answering, Counted, Forwarding, Meta, OnRequest, OnUpstream, Responding,
};
use super::rewrite::{self, set_header};
use super::wire::{self, Body, Framing, MAX_HEAD, WireError};
use crate::events::{ConnInfo, Events};
use crate::fault::http_match::RequestView;
use crate::fault::http_status::After;
use crate::fault::sse::Breakage;
use crate::fault::{Chosen, Gone, Item, ItemKind, Output};

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
    on: Forwarding,
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

/// A request answered in the upstream's place, waiting for its turn.
struct Answer {
    meta: Meta,
    answering: Answering,
    /// None when the answer is no answer (`http_abort`).
    status: Option<u16>,
    reply: Bytes,
    then: After,
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

/// How the request side stops following requests, and what it does with
/// the rest of the connection ([`RequestSide::stop`]).
enum Stop {
    /// The pipeline to the upstream is gone.
    Gone,
    /// The client's end goes on: its FIN, or its reset.
    Fin,
    Reset,
    /// The rest goes on as bytes (the response side has ended).
    Raw,
    /// The rest goes on as bytes, and the response side is told so.
    GoRaw,
    /// A malformed or ambiguous request ([`RequestSide::reject`]).
    Reject(WireError),
    /// A head the budget has no room for ([`RequestSide::refuse`]).
    Refuse,
    /// A body whose framing breaks ([`RequestSide::bad_body`]): the
    /// request's token, if it was forwarded.
    BadBody(WireError, Option<CancellationToken>),
    /// Nothing more: the connection ends with an answer.
    Quiet,
}

impl From<Gone> for Stop {
    fn from(_: Gone) -> Stop {
        Stop::Gone
    }
}

/// A side's reading and writing: its source, what it has read and not
/// passed on yet, and its output.
struct Io<'a, R> {
    src: &'a mut Src<R>,
    buf: &'a mut BytesMut,
    out: &'a Out,
}

/// One request, as the request side reads it.
struct Req {
    n: u64,
    head: wire::Request,
    framing: Framing,
    /// The client holds its body back until it gets `100 Continue` (or
    /// the answer).
    waits: bool,
    /// Netchaos gave it that go-ahead, in the upstream's place.
    continued: bool,
    /// The body as read whole for matching, if it was (`Some(None)`: it
    /// was not whole): a rewrite takes it from here.
    peeked: Option<Option<(Vec<u8>, usize)>>,
    /// It was read whole and is JSON.
    json: bool,
    /// What it holds in the budget beyond the allowances (its head, its
    /// body read whole); let go with the request.
    _head_held: Lease,
    body_held: Lease,
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
        let mut buf = BytesMut::new();
        let mut io = Io {
            src,
            buf: &mut buf,
            out,
        };
        for n in 0u64.. {
            if let Err(stop) = self.request(n, &mut io).await {
                return self.stop(stop, &mut io).await;
            }
        }
        Ok(())
    }

    /// What the connection's rest comes to once requests are no longer
    /// followed.
    async fn stop<R: AsyncRead + Unpin>(&self, stop: Stop, io: &mut Io<'_, R>) -> Result<(), Gone> {
        match stop {
            Stop::Gone => Err(Gone),
            Stop::Fin => send(io.out, ItemKind::Fin).await,
            Stop::Reset => send(io.out, ItemKind::Reset).await,
            Stop::Raw => raw(io.src, io.buf, io.out).await,
            Stop::GoRaw => {
                let _ = self.tx.send(Pending::Raw).await;
                raw(io.src, io.buf, io.out).await
            }
            Stop::Reject(why) => self.reject(why, io).await,
            Stop::Refuse => self.refuse().await,
            Stop::BadBody(why, bad) => self.bad_body(why, bad.as_ref(), io.out).await,
            Stop::Quiet => Ok(()),
        }
    }

    /// One request: read, its faults decided ([`phases::on_request`]),
    /// answered here or forwarded.
    async fn request<R: AsyncRead + Unpin>(&self, n: u64, io: &mut Io<'_, R>) -> Result<(), Stop> {
        let x = &self.x;
        if io.buf.is_empty() {
            self.between(io).await?;
        }
        let mut req = self.head(n, io).await?;
        let faults = x.faults.borrow().clone();
        let host = req
            .head
            .header("host")
            .map(str::to_string)
            .or_else(|| x.sni.clone());
        self.peek(&faults, &mut req, host.as_deref(), io).await?;
        let json: Option<serde_json::Value> = req
            .peeked
            .as_ref()
            .and_then(Option::as_ref)
            .and_then(|(p, _)| serde_json::from_slice(p).ok());
        req.json = json.is_some();
        let view = RequestView {
            method: &req.head.method,
            path: &req.head.target,
            host: host.as_deref(),
            headers: &req.head.headers,
            body: json.as_ref(),
        };
        let keep_alive = req.head.keep_alive();
        let (meta, next) = phases::on_request(x, &faults, "http/1.1", n, &view, keep_alive).await;
        // The body's `model` (and bytes), for the record, as it passes (or
        // is dropped, under an answer made in the upstream's place).
        let attempt = meta.attempt.clone();
        let recording = attempt.is_some();
        let mut scan = ModelScan::default();
        let mut feed_model = move |b: &[u8]| {
            if let Some(a) = &attempt {
                scan.feed(b);
                a.scanned(&scan);
                a.request_bytes(b);
            }
        };
        let mut seen = match recording {
            true => Seen::Payload(&mut feed_model),
            false => Seen::Nothing,
        };
        let switch = match next {
            OnRequest::Answer(a) => return self.answer_here(*a, meta, &req, &mut seen, io).await,
            OnRequest::Forward(f) => self.forward(f, meta, &mut req, &mut seen, io).await?,
        };
        // Its record is written once the response side lets go of it too:
        // not held here while a tunnel's answer is awaited.
        drop(feed_model);
        // An upgrade or CONNECT: a tunnel from here if the upstream
        // switched; HTTP goes on if it declined (as a client waits for
        // that answer before it sends more).
        if let Some(switch) = switch {
            match switch.await {
                Ok(false) => {}
                Ok(true) | Err(_) => return Err(Stop::Raw),
            }
        }
        Ok(())
    }

    /// Waits for the next request's first bytes. Between requests,
    /// netchaos stopping closes the connection (a client's next request
    /// may cross the close, as with any server's idle timeout: clients
    /// retry it on a new one). Once the upstream has closed (or is relayed
    /// as bytes), what the client sends next goes to it as it is, and its
    /// kernel answers it as it would directly (an RST).
    async fn between<R: AsyncRead + Unpin>(&self, io: &mut Io<'_, R>) -> Result<(), Stop> {
        tokio::select! {
            biased;
            r = io.src.fill(io.buf) => match r {
                Ok(0) => Err(Stop::Fin),
                Ok(_) => Ok(()),
                Err(_) => Err(Stop::Reset),
            },
            () = self.x.stopping.cancelled() => Err(self.close_idle(io).await),
            () = self.done.cancelled() => Err(Stop::Raw),
        }
    }

    /// Netchaos is stopping with the client between requests: the
    /// connection closes once the answers before are out. Until then, or
    /// until the response side ends otherwise (an answer whose end is the
    /// upstream's close), the client's end is still passed on, as the
    /// connection's end may wait for it.
    async fn close_idle<R: AsyncRead + Unpin>(&self, io: &mut Io<'_, R>) -> Stop {
        if self.tx.send(Pending::Close).await.is_err() {
            return Stop::Quiet;
        }
        loop {
            io.buf.clear();
            match io.src.fill(io.buf).await {
                Ok(0) => return Stop::Fin,
                Ok(_) => {}
                Err(_) => return Stop::Reset,
            }
        }
    }

    /// Reads request `n`'s head and its framing.
    async fn head<R: AsyncRead + Unpin>(&self, n: u64, io: &mut Io<'_, R>) -> Result<Req, Stop> {
        let mut held = Lease::default();
        let until = Some(&self.done);
        let head = match read_head(io.src, io.buf, &mut held, wire::request, until).await {
            Head::Parsed(h) => h,
            Head::Eof => {
                send_data(io.out, io.buf.split().freeze()).await?;
                return Err(Stop::Fin);
            }
            Head::Failed => return Err(Stop::Reset),
            // The upstream closed while this head was arriving: it goes on
            // as it is, as it would have reached the upstream.
            Head::Gone => return Err(Stop::Raw),
            // Longer than netchaos parses: for the upstream to refuse; or
            // not HTTP at all (a first line that is no request line:
            // another protocol that began like HTTP).
            Head::Bad(e)
                if e.is_too_large() || (n == 0 && !wire::starts_with_request_line(io.buf)) =>
            {
                return Err(Stop::GoRaw);
            }
            Head::Bad(e) => return Err(Stop::Reject(e)),
            Head::Spent => return Err(Stop::Refuse),
        };
        self.x.events.http_request();
        let framing = head.framing().map_err(Stop::Reject)?;
        Ok(Req {
            n,
            waits: head.expects_continue(),
            head,
            framing,
            continued: false,
            peeked: None,
            json: false,
            _head_held: held,
            body_held: Lease::default(),
        })
    }

    /// A body a rule must read to decide on is read whole first, when its
    /// length lets it be. A client that waits for `100 Continue` gets it
    /// from netchaos then (else from the upstream, once the head reaches
    /// it).
    async fn peek<R: AsyncRead + Unpin>(
        &self,
        faults: &Arc<Vec<Chosen>>,
        req: &mut Req,
        host: Option<&str>,
        io: &mut Io<'_, R>,
    ) -> Result<(), Stop> {
        let view = RequestView {
            method: &req.head.method,
            path: &req.head.target,
            host,
            headers: &req.head.headers,
            body: None,
        };
        let decides = decide::body_decides(faults, req.n, &view, self.x.epoch.elapsed());
        if req.framing == Framing::Empty || !decides {
            return Ok(());
        }
        let whole = match req.framing {
            Framing::Length(l) => l <= MAX_BODY as u64,
            _ => true,
        };
        if req.waits && req.head.minor > 0 && whole && !budget::spent() {
            if self.tx.send(Pending::Continue).await.is_err() {
                return Err(Stop::Raw);
            }
            (req.waits, req.continued) = (false, true);
        }
        if !req.waits {
            req.peeked = Some(self.whole(req, io).await?);
        }
        Ok(())
    }

    /// The request's body read whole, after its head ([`whole_body`]).
    async fn whole<R: AsyncRead + Unpin>(
        &self,
        req: &mut Req,
        io: &mut Io<'_, R>,
    ) -> Result<Option<(Vec<u8>, usize)>, Stop> {
        let (len, framing) = (req.head.head_len, req.framing);
        match whole_body(io.src, io.buf, &mut req.body_held, len, framing).await {
            Ok(w) => Ok(w),
            Err(BodyEnd::Failed) => Err(Stop::Reset),
            Err(BodyEnd::Bad(e)) => Err(Stop::Reject(e)),
            Err(_) => Err(Stop::GoRaw),
        }
    }

    /// A request answered in the upstream's place: the answer is queued
    /// for its turn, and the body (which the upstream never sees) read and
    /// dropped; or the connection ends with the answer.
    async fn answer_here<R: AsyncRead + Unpin>(
        &self,
        a: Answering,
        meta: Meta,
        req: &Req,
        seen: &mut Seen<'_>,
        io: &mut Io<'_, R>,
    ) -> Result<(), Stop> {
        let (head, framing) = (&req.head, req.framing);
        let whole = framing == Framing::Empty || (req.json && !req.waits);
        // A client waiting for a go-ahead may or may not send its body
        // after the answer: the connection cannot go on.
        let closing = !head.keep_alive() || (req.waits && !whole);
        let then = a.then(closing);
        let drained = matches!(a.reply, Reply::Abort(_)) && !req.waits;
        if drained {
            // The whole request first: a client still sending its body
            // would meet the reset on a write, and some (Python's
            // http.client) then report a clean close instead.
            io.buf.advance_to(head.head_len);
            let _ = drop_body(io.src, io.buf, &mut Body::new(framing), seen).await;
        }
        let answer = Answer {
            meta,
            status: a.reply.status(),
            reply: a.reply.bytes(closing, head.method == "HEAD"),
            then,
            answering: a,
        };
        if self
            .tx
            .send(Pending::Answered(Box::new(answer)))
            .await
            .is_err()
        {
            // The upstream closed meanwhile: nothing can answer on this
            // connection; the request goes to the upstream.
            return Err(Stop::Raw);
        }
        if then != After::Keep {
            // The connection ends with the answer: what of the body has
            // come already gives the record its model.
            if let (false, Seen::Payload(f)) = (drained, &mut *seen) {
                let mut p = Vec::new();
                let early = &io.buf[head.head_len.min(io.buf.len())..];
                if Body::new(framing).scan(early, Some(&mut p)).is_ok() {
                    f(&p);
                }
            }
            return Err(Stop::Quiet);
        }
        io.buf.advance_to(head.head_len);
        match drop_body(io.src, io.buf, &mut Body::new(framing), seen).await {
            Ok(()) => Ok(()),
            Err(BodyEnd::Eof) => Err(Stop::Fin),
            Err(BodyEnd::Failed) => Err(Stop::Reset),
            Err(BodyEnd::Bad(e)) => Err(Stop::BadBody(e, None)),
            Err(_) => Err(Stop::GoRaw),
        }
    }

    /// A request forwarded: its head as the rewrites leave it, queued for
    /// its response's turn, then its body as it comes (or rewritten
    /// whole). Returns, for an upgrade or CONNECT, where the upstream's
    /// answer says whether a tunnel follows.
    async fn forward<R: AsyncRead + Unpin>(
        &self,
        f: Forwarding,
        meta: Meta,
        req: &mut Req,
        seen: &mut Seen<'_>,
        io: &mut Io<'_, R>,
    ) -> Result<Option<oneshot::Receiver<bool>>, Stop> {
        // An upgrade to HTTP/2 (h2c) is declined: the request goes on
        // without it, and the server answers in HTTP/1.1, where every
        // later request stays in reach of the faults.
        let upgrade = req.head.header("upgrade");
        let h2c = upgrade.is_some_and(|u| u.trim().eq_ignore_ascii_case("h2c"));
        let tunnel = req.head.method.eq_ignore_ascii_case("CONNECT") || (upgrade.is_some() && !h2c);
        // A body to rewrite is read whole first (not one the client sends
        // only after a go-ahead, nor a tunnel's).
        let mut whole = None;
        if f.body_edits() && !tunnel && !req.waits && rewrite::body_editable(&req.head.headers) {
            whole = match req.peeked.take() {
                Some(w) => w,
                None => self.whole(req, io).await?,
            };
        }
        let (edited, new_body) = self.edited(&f, &meta, req, h2c, whole.as_ref(), io.buf);
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
            on: f,
            continued: req.continued,
            switched,
            bad_body: bad_body.clone(),
        };
        if self
            .tx
            .send(Pending::Forwarded(Box::new(forward)))
            .await
            .is_err()
        {
            // The upstream closed meanwhile: the request goes to it as it
            // came.
            return Err(Stop::Raw);
        }
        let head_len = req.head.head_len;
        if let (Some(b), Some((payload, wire_len))) = (new_body, &whole)
            && b != *payload
        {
            let h = edited.as_deref().unwrap_or(&io.buf[..head_len]);
            let mut msg = BytesMut::from(&rewrite::reframed(h, b.len(), false)[..]);
            msg.extend_from_slice(&b);
            send_data(io.out, msg.freeze()).await?;
            io.buf.advance_to(head_len + wire_len);
            return Ok(None);
        }
        let start = match edited {
            Some(h) => {
                send_data(io.out, h).await?;
                io.buf.advance_to(head_len);
                0
            }
            None => head_len,
        };
        let mut body = Body::new(req.framing);
        match pass_body(io.src, io.buf, start, &mut body, io.out, None, seen).await? {
            BodyEnd::Done => Ok(switch),
            BodyEnd::Eof => Err(Stop::Fin),
            BodyEnd::Failed => Err(Stop::Reset),
            BodyEnd::Bad(e) => Err(Stop::BadBody(e, Some(bad_body))),
            BodyEnd::Limit => Err(Stop::GoRaw),
        }
    }

    /// The head as it goes (`None`: byte for byte, with the body): edited
    /// by `http_rewrite` faults ([`Forwarding::rewrite`]), its `h2c`
    /// upgrade declined, its Host the upstream's name when netchaos speaks
    /// TLS to it, its `Accept-Encoding` identity where a fault needs an
    /// uncompressed answer; and the body a rewrite made of `whole`.
    fn edited(
        &self,
        f: &Forwarding,
        meta: &Meta,
        req: &Req,
        h2c: bool,
        whole: Option<&(Vec<u8>, usize)>,
        buf: &[u8],
    ) -> (Option<Bytes>, Option<Vec<u8>>) {
        let head = &req.head;
        let original = &buf[..head.head_len];
        let mut edited: Option<Bytes> =
            h2c.then(|| rewrite::without_h2c(original, head.header("connection")));
        let mut new_body: Option<Vec<u8>> = None;
        let json = rewrite::is_json(&head.headers);
        f.rewrite(&self.x, meta, |w| {
            let was = edited.as_deref().unwrap_or(original);
            let next = rewrite::request(was, w.edits());
            let mut changed = next != was;
            if let (Some(e), Some((payload, _))) = (&w.edits().body, whole) {
                let cur = new_body.as_deref().unwrap_or(payload);
                if let Some(b) = rewrite::body(cur, e, json) {
                    changed |= b != cur;
                    new_body = Some(b);
                }
            }
            edited = Some(next);
            changed
        });
        if let Some(h) = &self.x.rewrite_host {
            let was = edited.as_deref().unwrap_or(original);
            edited = Some(set_header(was, "Host", Some(h)));
        }
        // A response body to rewrite, or an event stream to count, must
        // come uncompressed: the upstream is asked for it so (where the
        // client asked for an encoding at all), but not for a request seen
        // whole that asks for no stream.
        let streams = || {
            let early = &buf[head.head_len..];
            let seen_whole = match req.framing {
                Framing::Empty => true,
                Framing::Length(n) => early.len() as u64 >= n,
                _ => false,
            };
            decide::asks_for_stream(head.header("accept"), &head.target, early, seen_whole)
        };
        if head.header("accept-encoding").is_some() && f.wants_identity(streams) {
            let was = edited.as_deref().unwrap_or(original);
            edited = Some(set_header(was, "Accept-Encoding", Some("identity")));
        }
        (edited, new_body)
    }
    /// A malformed or ambiguous request head (RFC 9112: a strict server
    /// answers 400 and closes): nothing of it is forwarded; a 400 in its
    /// turn says why, then the connection closes. Logged (an `error`
    /// event, `http_malformed`). If the upstream has closed already, it
    /// gets the bytes as they came instead, as it would have directly.
    async fn reject<R: AsyncRead + Unpin>(
        &self,
        why: WireError,
        io: &mut Io<'_, R>,
    ) -> Result<(), Gone> {
        if self.tx.send(Pending::Reject(why)).await.is_err() {
            return raw(io.src, io.buf, io.out).await;
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
                Some(Pending::Forwarded(f)) => {
                    let mut io = Io {
                        src: &mut *src,
                        buf: &mut buf,
                        out,
                    };
                    self.response(&mut io, *f).await?
                }
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
        // Its hold, then the answer counted as it is sent ([`Answering::give`]).
        let Answer {
            meta,
            answering,
            status,
            reply,
            then,
        } = a;
        answering.give(&self.x, &meta, status, None, then).await;
        if status.is_some() {
            meta.attempt.mark(Attempt::head_out);
        }
        send_data(out, reply).await?;
        if status.is_some() {
            meta.attempt.mark(Attempt::done);
        }
        match then {
            After::Keep => Ok(Next::Continue),
            t => cut(out, t).await,
        }
    }

    /// The upstream's response to a forwarded request: its head read, the
    /// response phase ([`Forwarding::on_response`]), then replaced, or
    /// followed under the faults that act on it.
    async fn response<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut Io<'_, R>,
        f: Forward,
    ) -> Result<Next, Gone> {
        let Forward {
            meta,
            on,
            mut continued,
            mut switched,
            bad_body,
        } = f;
        // A long head, in the budget until the response is done with it.
        let mut held = Lease::default();
        let head = match self
            .upstream_head(io, &meta, &bad_body, &mut continued, &mut held)
            .await?
        {
            ControlFlow::Continue(h) => h,
            ControlFlow::Break(next) => return Ok(next),
        };
        let r = match on
            .on_response(&self.x, &meta, head.status, &head.headers, None)
            .await
        {
            OnUpstream::Replace(a) => {
                if let Some(s) = switched.take() {
                    let _ = s.send(false);
                }
                return self.replace(io, &meta, &head, *a).await;
            }
            OnUpstream::Follow(r) => *r,
        };
        meta.attempt.mark(Attempt::head_out);
        let mut counted = Counted::default();
        let head = match r.on.rewrites.is_empty() {
            true => head,
            false => self.rewrite(io.buf, &meta, head, &r, &mut counted),
        };
        let framing = match head.framing(&meta.method) {
            Ok(f) => f,
            Err(e) => return Ok(self.unfollowed(&meta, e)),
        };
        // A switch (a 101, a 2xx to CONNECT) tells the request side a
        // tunnel follows, once its head is on its way; anything else that
        // HTTP goes on, every later request in reach of the faults.
        if framing == Framing::Tunnel {
            // Switched: the answer is whole, what follows another protocol.
            meta.attempt.mark(Attempt::done);
            send_data(io.out, io.buf.split_to(head.head_len).freeze()).await?;
            if let Some(s) = switched.take() {
                let _ = s.send(true);
            }
            return Ok(Next::Raw);
        }
        if let Some(s) = switched.take() {
            let _ = s.send(false);
        }
        let followed = Followed {
            meta: &meta,
            head: &head,
            framing,
        };
        self.follow(io, &followed, r, counted).await
    }

    /// Reads the upstream's head for the request `meta`: interim answers
    /// passed on at once (not a second `100 Continue` where netchaos gave
    /// one, `continued`), or what ends the response first.
    async fn upstream_head<R: AsyncRead + Unpin>(
        &self,
        io: &mut Io<'_, R>,
        meta: &Meta,
        bad_body: &CancellationToken,
        continued: &mut bool,
        held: &mut Lease,
    ) -> Result<ControlFlow<Next, wire::Response>, Gone> {
        let end = |next| Ok(ControlFlow::Break(next));
        loop {
            let read = tokio::select! {
                biased;
                // The request's body was malformed and its answer has not
                // begun: a 400 (the upstream had a FIN), then the close.
                () = bad_body.cancelled() => {
                    send_data(io.out, bad_request(WireError::BAD_BODY)).await?;
                    return end(cut(io.out, After::Close).await?);
                }
                h = read_head(io.src, io.buf, held, wire::response, None) => h,
            };
            match read {
                // The client has had netchaos's go-ahead: not a second.
                Head::Parsed(h) if h.status == 100 && *continued => {
                    io.buf.advance_to(h.head_len);
                    *continued = false;
                }
                Head::Parsed(h) if h.is_interim() => {
                    // 100 Continue, 103 Early Hints: on at once.
                    send_data(io.out, io.buf.split_to(h.head_len).freeze()).await?;
                }
                Head::Parsed(h) => return Ok(ControlFlow::Continue(h)),
                Head::Eof | Head::Failed => {
                    send_data(io.out, io.buf.split().freeze()).await?;
                    let kind = match read {
                        Head::Eof => ItemKind::Fin,
                        _ => ItemKind::Reset,
                    };
                    send(io.out, kind).await?;
                    return end(Next::End);
                }
                // A head the budget has no room for passes as bytes (the
                // client reads it as it would have); so does one netchaos
                // cannot parse.
                Head::Spent | Head::Gone => {
                    meta.attempt.mark(Attempt::unfollowed);
                    return end(Next::Raw);
                }
                Head::Bad(e) => return end(self.unfollowed(meta, e)),
            }
        }
    }

    /// The body of a response that goes on: rewritten whole, or passed on
    /// as it comes — cut short by an `http_truncate`, its events counted
    /// by `sse` faults.
    async fn follow<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut Io<'_, R>,
        f: &Followed<'_>,
        mut r: Responding,
        mut counted: Counted,
    ) -> Result<Next, Gone> {
        let (meta, head, framing) = (f.meta, f.head, f.framing);
        // A response that has no body (HEAD, 204, 304, a length of 0) has
        // no events to fault; nor has a compressed one, which the
        // upstream sent although asked not to: it passes as it came.
        let format = head.stream_format();
        let sse = match format.is_some() && framing != Framing::Empty && !head.is_compressed() {
            true => std::mem::take(&mut r.on.sse),
            false => Vec::new(),
        };
        // A body to rewrite: not a stream's (it may never end), nor one
        // that a response has none of by its status or request (HEAD); an
        // empty one (a length of 0) may get one.
        let bodiless = meta.method.eq_ignore_ascii_case("HEAD")
            || matches!(head.status, 100..=199 | 204 | 304);
        if r.body_edits() && !bodiless && rewrite::body_editable(&head.headers) {
            if let Some(next) = self.rewrite_body(io, f, &r, &mut counted).await? {
                return Ok(next);
            }
        }
        // A body that passes through a fault's hands (even one that does
        // not act in the end) is not taped on its way.
        if r.on.truncate.is_some() || !sse.is_empty() {
            meta.attempt
                .mark(|a| a.not_taped("a response fault followed its body"));
        }
        // A truncation comes first: the events of a body it cuts are not
        // counted (as over HTTP/2).
        if !sse.is_empty() && r.on.truncate.is_none() {
            return self.events(io, f, &sse, format.unwrap_or_default()).await;
        }
        let truncate = r.on.truncate.as_ref();
        let mut first = |_: &[u8]| meta.attempt.mark(Attempt::body_out);
        // Under --record, its payload as it goes (de-chunked): not one a
        // fault follows.
        let mut taped = |b: &[u8]| {
            meta.attempt.mark(|a| {
                a.body_out();
                a.response_bytes(b);
            })
        };
        let mut seen = match &meta.attempt {
            Some(a) if a.taping() && truncate.is_none() => Seen::Payload(&mut taped),
            Some(_) => Seen::Bytes(&mut first),
            None => Seen::Nothing,
        };
        let limit = truncate.map(|(_, t)| t.after_bytes());
        let (start, mut body) = (head.head_len, Body::new(framing));
        let end = pass_body(io.src, io.buf, start, &mut body, io.out, limit, &mut seen).await?;
        if let (BodyEnd::Limit, Some((c, t))) = (&end, truncate) {
            self.x.record(c, meta, Some(head.status));
            return cut(io.out, t.then()).await;
        }
        self.body_end(io.out, meta, framing, end).await
    }

    /// What a response body's end means for the connection.
    async fn body_end(
        &self,
        out: &Out,
        meta: &Meta,
        framing: Framing,
        end: BodyEnd,
    ) -> Result<Next, Gone> {
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
            BodyEnd::Bad(e) => self.unfollowed(meta, e),
            BodyEnd::Limit => {
                meta.attempt.mark(Attempt::unfollowed);
                Next::Raw
            }
        })
    }

    /// A streamed response under its `sse` faults ([`Stream`]).
    async fn events<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut Io<'_, R>,
        f: &Followed<'_>,
        sse: &[(Chosen, crate::fault::sse::Sse)],
        format: Format,
    ) -> Result<Next, Gone> {
        let (meta, head, framing) = (f.meta, f.head, f.framing);
        let head_bytes = io.buf.split_to(head.head_len).freeze();
        // The error event ends the body cleanly, and netchaos then ends
        // the connection (the upstream is still streaming): the head says
        // so, or a client would pool the connection and send its next
        // request into the close. So does a patch or a new type that
        // changes events' lengths, when the head gave the body's: the
        // close delimits it instead.
        let closes = sse.iter().any(|(_, s)| {
            matches!(s.breaks(), Some((_, Breakage::Error)))
                || (s.patch().is_some() && matches!(framing, Framing::Length(_)))
        });
        let head_bytes = match closes {
            // A length would be wrong once the error event replaces the
            // rest: the close (or the chunks, beside which a length must
            // not stand) delimits the body instead.
            true => set_header(
                &set_header(&head_bytes, "Connection", Some("close")),
                "Content-Length",
                None,
            ),
            false => head_bytes,
        };
        send_data(io.out, head_bytes).await?;
        let mut stream = Stream {
            x: &self.x,
            faults: sse,
            recorded: vec![false; sse.len()],
            meta,
            status: head.status,
            format,
            chunked: framing == Framing::Chunked,
            until_close: framing == Framing::UntilClose,
            closes,
            counted: 0,
        };
        let mut body = Body::new(framing);
        stream
            .run(io.src, io.buf, &mut body, io.out, &mut self.rx)
            .await
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

/// A response that goes on to the client: its request, its head (as
/// rewritten), its body's framing.
struct Followed<'a> {
    meta: &'a Meta,
    head: &'a wire::Response,
    framing: Framing,
}

impl ResponseSide {
    /// `http_rewrite` edits to the response `head` at the front of `buf`
    /// (each counted where it changes the head, with the status it
    /// leaves): the head is replaced there and read again, so what
    /// follows sees the edited one. Its framing was left alone.
    fn rewrite(
        &self,
        buf: &mut BytesMut,
        meta: &Meta,
        head: wire::Response,
        r: &Responding,
        counted: &mut Counted,
    ) -> wire::Response {
        let mut edited = Bytes::copy_from_slice(&buf[..head.head_len]);
        // A 101's status, or a CONNECT's answer's, says whether a tunnel
        // follows: it is kept.
        let framed = head.status == 101 || meta.method.eq_ignore_ascii_case("CONNECT");
        r.rewrite(&self.x, meta, head.status, counted, |w, status| {
            let next = rewrite::response(&edited, w.edits(), status, framed);
            let status = match framed {
                true => status,
                false => w.edits().status.unwrap_or(status),
            };
            let changed = next != edited;
            edited = next;
            (changed, status)
        });
        let mut next = BytesMut::with_capacity(edited.len() + buf.len() - head.head_len);
        next.extend_from_slice(&edited);
        next.extend_from_slice(&buf[head.head_len..]);
        match wire::response(&next) {
            Ok(Some(h)) => {
                *buf = next;
                h
            }
            // Not expected: the edits keep a head's form. The original
            // goes on unedited rather than broken.
            _ => head,
        }
    }

    /// `http_rewrite` edits to the body of the response (its head at the
    /// front of the buffer): read whole, rewritten and sent with its new
    /// length — cut short after it by an `http_truncate` that applies.
    /// `None` (nothing sent) when it stays as it came: larger than
    /// [`MAX_BODY`], ended early, not JSON for a patch, or unchanged. A
    /// fault is counted once, here only if its head edits changed nothing.
    async fn rewrite_body<R: AsyncRead + Unpin>(
        &self,
        io: &mut Io<'_, R>,
        f: &Followed<'_>,
        r: &Responding,
        counted: &mut Counted,
    ) -> Result<Option<Next>, Gone> {
        let (meta, head, framing) = (f.meta, f.head, f.framing);
        let mut held = Lease::default();
        let whole = whole_body(io.src, io.buf, &mut held, head.head_len, framing).await;
        let (payload, wire_len) = match whole {
            Ok(Some(w)) => w,
            Err(BodyEnd::Failed) => {
                meta.attempt.mark(|a| a.failed("reset"));
                send_data(io.out, io.buf.split().freeze()).await?;
                return cut(io.out, After::Reset).await.map(Some);
            }
            // What was read stays in the buffer, passed on as it came.
            _ => return Ok(None),
        };
        let mut now = payload;
        let mut any = false;
        let json = rewrite::is_json(&head.headers);
        r.rewrite(&self.x, meta, head.status, counted, |w, status| {
            let Some(e) = &w.edits().body else {
                return (false, status);
            };
            match rewrite::body(&now, e, json) {
                Some(b) if b != now => {
                    now = b;
                    any = true;
                    (true, status)
                }
                _ => (false, status),
            }
        });
        if !any {
            return Ok(None);
        }
        let closes = framing == Framing::UntilClose;
        let head_bytes = rewrite::reframed(&io.buf[..head.head_len], now.len(), closes);
        let mut msg = BytesMut::from(&head_bytes[..]);
        io.buf.advance_to(head.head_len + wire_len);
        if let Some((c, t)) =
            r.on.truncate
                .as_ref()
                .filter(|(_, t)| (now.len() as u64) > t.after_bytes())
        {
            msg.extend_from_slice(&now[..t.after_bytes() as usize]);
            send_data(io.out, msg.freeze()).await?;
            self.x.record(c, meta, Some(head.status));
            return cut(io.out, t.then()).await.map(Some);
        }
        msg.extend_from_slice(&now);
        send_data(io.out, msg.freeze()).await?;
        meta.attempt.mark(Attempt::done);
        Ok(Some(match framing {
            // The upstream's close ended the body: the connection ends.
            Framing::UntilClose => {
                send(io.out, ItemKind::Fin).await?;
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
    async fn replace<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut Io<'_, R>,
        meta: &Meta,
        head: &wire::Response,
        a: Answering,
    ) -> Result<Next, Gone> {
        let framing = head.framing(&meta.method).ok();
        let drains = match framing {
            Some(Framing::Empty) => true,
            Some(Framing::Length(n)) => n <= MAX_BODY as u64 && head.stream_format().is_none(),
            _ => false,
        };
        let then = a.then(!meta.keep_alive || head.closes() || !drains);
        let status = a.reply.status();
        a.give(&self.x, meta, status, None, then).await;
        send_data(
            io.out,
            a.reply.bytes(then != After::Keep, meta.method == "HEAD"),
        )
        .await?;
        if status.is_some() {
            meta.attempt.mark(Attempt::done);
        }
        match (then, framing) {
            (After::Keep, Some(framing)) => {
                io.buf.advance_to(head.head_len);
                match drop_body(io.src, io.buf, &mut Body::new(framing), &mut Seen::Nothing).await {
                    Ok(()) => Ok(Next::Continue),
                    Err(BodyEnd::Failed) => cut(io.out, After::Reset).await,
                    // The upstream's body ended early or was not HTTP: the
                    // client has had its reply, and nothing else can follow.
                    Err(_) => cut(io.out, After::Close).await,
                }
            }
            (t, _) => cut(io.out, t).await,
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
