//! One HTTP/2 connection (a client agreed h2 because its upstream chose
//! it, or h2c with prior knowledge): netchaos ends the client's HTTP/2 and speaks its own to the upstream,
//! and each stream is a request whose faults are decided as HTTP/1.1's are
//! ([`super::decide`]): held (`http_delay`), answered in the upstream's
//! place (`http_status`, with `grpc_status` a gRPC call's trailers-only
//! failure), the connection ended where the answer would begin
//! (`http_abort`) or mid-body (`http_truncate`), heads and bodies
//! rewritten (`http_rewrite`). An unfaulted stream passes as it came —
//! headers, data, trailers, and the upstream's own stream resets with
//! their codes, `NO_ERROR` too ([`h2_resets`]), after what came before. hyper does the framing, flow control and limits of both
//! connections. `sse` faults count a call's messages or an event stream's
//! events ([`h2_stream`]).
//!
//! Both connections run over in-memory pipes: the client's goes through
//! the connection's pipelines, so stream faults (latency, bandwidth …)
//! still act on what the client sends and receives, and a fault that ends
//! the connection is passed to its downstream reader ([`Ending`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, futures::OwnedNotified, watch};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::attempt::{Attempt, Marking, ModelScan};
use super::budget::{self, Lease};
use super::decide::{self, Reply};
use super::events::Format;
use super::exchange::{self, Exchange, MAX_BODY, Out, Src};
use super::h2_resets;
use super::h2_stream::{self, Units};
use super::phases::{
    self, Answering, Counted, Forwarding, Meta, OnRequest, OnUpstream, Responding,
};
use super::wire::MAX_HEAD;
use super::{grpc, rewrite, wire};
use crate::fault::Chosen;
use crate::fault::http_match::RequestView;
use crate::fault::http_rewrite::HttpRewrite;
use crate::fault::http_status::After;
use crate::fault::{ItemKind, Output};
use crate::socket::peer::Sink;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, Failed>;
type StreamFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Failed>> + Send>>;

/// Why a stream failed (hyper resets it, with the code of the upstream's
/// own reset when that is the cause). A type of its own: hyper's HTTP/2
/// futures cannot be shown to be `Send` with a boxed error as theirs.
#[derive(Debug)]
pub(crate) struct Failed(BoxError);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// What netchaos speaks HTTP/2 to the upstream over: the in-memory pipe
/// to the connection's upstream leg, or a socket (TLS on one) it dialled
/// again.
pub(crate) trait UpstreamIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> UpstreamIo for T {}

/// Dials the upstream again (see `Conn::redial`).
pub(crate) type Redial = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = std::io::Result<Box<dyn UpstreamIo>>> + Send>>
        + Send
        + Sync,
>;

/// How the engine reaches the upstream beyond its first connection.
pub(crate) struct Reach {
    /// netchaos speaks TLS to it (the scheme it names).
    pub(crate) tls: bool,
    /// Dials it again, when it sends a connection away.
    pub(crate) redial: Option<Redial>,
    /// Set once a connection dialled again has taken the first one's
    /// place: what becomes of the first (a reset, after its GOAWAY) is no
    /// longer the client's.
    pub(crate) moved_on: Arc<AtomicBool>,
}

/// A connection to the upstream being dialled again: the connection, and
/// how long the dial took.
type Dialling =
    Pin<Box<dyn Future<Output = std::io::Result<(Upstream, UpstreamConn, Duration)>> + Send>>;
type UpstreamConn =
    hyper::client::conn::http2::Connection<TokioIo<Box<dyn UpstreamIo>>, Body, TokioExecutor>;
type Upstream = hyper::client::conn::http2::SendRequest<Body>;

/// How long a stream waits for the upstream dialled again, after the
/// last one sent its connection away.
const REDIAL_WAIT: Duration = Duration::from_secs(10);
/// A connection dialled again that is sent away sooner than this (or
/// than [`REDIAL_TURNS`] times its dial took, on a machine slow enough
/// that an upstream takes longer to send it away) is not dialled again:
/// the client is sent away instead.
const REDIAL_SPACING: Duration = Duration::from_millis(100);
const REDIAL_TURNS: u32 = 4;
/// At most this, however long the dial took: an upstream far away that
/// recycles connections now and then is no upstream going away.
const REDIAL_SPACING_MAX: Duration = Duration::from_secs(1);

/// Concurrent streams a client may open (hyper's default for servers).
const MAX_STREAMS: u32 = 200;
/// What hyper buffers per stream to send (its default is 400 KiB, which
/// across [`MAX_STREAMS`] would be 80 MB per connection).
const SEND_BUF: usize = 64 * 1024;
/// What the client may send ahead (flow control: HTTP/2's windows),
/// held by hyper until its stream's request body is read: in all, and per
/// stream (hyper's defaults for servers, stated: they bound what one
/// connection holds outside the HTTP layer's budget).
const CLIENT_WINDOW: u32 = 1 << 20;
const CLIENT_STREAM_WINDOW: u32 = 1 << 20;
/// What the upstream may send ahead: hyper's client defaults are 5 MiB
/// and 2 MiB.
const UPSTREAM_WINDOW: u32 = 2 << 20;
const UPSTREAM_STREAM_WINDOW: u32 = 1 << 20;
/// The largest DATA frame (HTTP/2's default, which hyper keeps): what
/// reading a body ahead takes at once.
const FRAME: usize = 16 * 1024;
/// Bodies held whole at once per connection (each at most [`MAX_BODY`]),
/// to match or rewrite them: the rest wait their turn.
const HELD_BODIES: usize = 4;

/// How a fault ends the client's connection, once it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// [`After::Close`]: a FIN; [`After::Reset`]: an RST.
    then: After,
    /// What goes out before it.
    drain: Drain,
}

/// What the client still gets before an [`End`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drain {
    /// What the engine is writing, until it pauses: the frames before a
    /// connection that fails under a request (`http_abort`,
    /// `http_truncate`), with no GOAWAY, which the client must not take
    /// for a server going away (it would retry the call unseen).
    Pause,
    /// A GOAWAY, and the other streams' answers: a server that means to
    /// close after an answer (`then = close | reset`).
    Streams,
    /// Nothing: the upstream's connection failed, and the client's fails
    /// as it would have (not each stream reset by netchaos's HTTP/2).
    Nothing,
}

/// The end its pipelines watch for (they pass it on).
pub(crate) type Ending = watch::Receiver<Option<End>>;
type Ender = watch::Sender<Option<End>>;

/// Ends the connection (on `end`): `then`, after `drain`. The first end
/// asked for is the one (an upstream reset and the streams it fails may
/// ask each their way).
fn end_with(end: &Ender, then: After, drain: Drain) {
    end.send_if_modified(|e| {
        let first = e.is_none();
        if first {
            *e = Some(End { then, drain });
        }
        first
    });
}

/// Whether `e` is the upstream's connection closing (its FIN) under a
/// stream. Without netchaos the client's connection would close as
/// that; with it, hyper would reset each stream `INTERNAL_ERROR` (gRPC
/// clients retry neither, but a closed connection is `UNAVAILABLE`, which
/// a retry policy names). An upstream's RST never shows here: its leg
/// resets the client's connection without telling the engine. Asked only
/// of the upstream's errors, as the client's own connection closing looks
/// the same. (A response body's error keeps h2's; hyper turns a
/// request's or the connection's into the io error under it.)
fn upstream_closed(e: &(dyn std::error::Error + 'static)) -> bool {
    causes(e)
        .find_map(|e| {
            e.downcast_ref::<h2::Error>()
                .map(h2::Error::is_io)
                .or_else(|| {
                    e.downcast_ref::<std::io::Error>()
                        .map(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                })
        })
        .unwrap_or(false)
}

/// `e` and the errors under it, outermost first.
fn causes<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// A stream failed under the upstream's close ([`upstream_closed`]): the
/// client's connection closes after what the engine is writing, with no
/// GOAWAY and no reset of this stream (it waits for the end).
async fn severed(st: &State) -> Failed {
    end_with(&st.end, After::Close, Drain::Pause);
    st.gone.cancelled().await;
    Failed("the upstream's connection closed".into())
}

/// The connection's state, shared by its streams.
struct State {
    x: Exchange,
    /// The upstream connection new streams go to (replaced when the
    /// upstream sends one away and netchaos dials again; closed when it
    /// will not).
    upstream: watch::Receiver<Upstream>,
    /// The upstream's scheme (`https` when netchaos speaks TLS to it).
    scheme: &'static str,
    /// Streams seen, numbering requests for their `probability` draws.
    n: AtomicU64,
    end: Ender,
    /// Cancelled when the connection ends: its streams' held futures stop.
    gone: CancellationToken,
    /// Turns to hold a body whole ([`HELD_BODIES`]): requests' and
    /// responses' apart, so that a request still held cannot keep its own
    /// response waiting.
    holding: Arc<Semaphore>,
    holding_responses: Arc<Semaphore>,
    flush: Arc<Flush>,
}

/// How a stream's failure waits for the answer's bytes before it to go
/// out: hyper drops what it has queued for a stream when it resets it,
/// though the upstream sent those bytes before its reset.
#[derive(Default)]
struct Flush {
    /// A stream asks the client's connection for a turn.
    asked: Notify,
    /// The client's connection had a turn (it wrote what it could).
    done: Arc<Notify>,
}

impl Flush {
    /// Asks for a turn of the client's connection; done when it has had
    /// one, or after [`TURN_WAIT`] (a connection that has ended).
    fn turn(&self) -> Turn {
        let mut done = Box::pin(self.done.clone().notified_owned());
        done.as_mut().enable();
        self.asked.notify_one();
        Turn {
            done,
            bound: Box::pin(tokio::time::sleep(TURN_WAIT)),
        }
    }
}

/// A turn of the client's connection, waited for ([`Flush::turn`]).
struct Turn {
    done: Pin<Box<OwnedNotified>>,
    bound: Pin<Box<tokio::time::Sleep>>,
}

impl Turn {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.done.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => self.bound.as_mut().poll(cx),
        }
    }
}

/// The longest a stream's failure waits for its connection's turn.
const TURN_WAIT: Duration = Duration::from_millis(100);

/// Makes the channel by which a fault (or the upstream's reset) ends the
/// client's connection.
pub(crate) fn ending() -> (Ender, Ending) {
    watch::channel(None)
}

/// Runs the two HTTP/2 connections: `client` (the client's, past its
/// pipelines) and `upstream`, over which netchaos is the client; a fault
/// that ends the connection says so on `end`. Netchaos stopping sends
/// the client away as a server stopping does.
pub(crate) fn engine(
    x: Exchange,
    client: DuplexStream,
    upstream: Box<dyn UpstreamIo>,
    reach: Reach,
    end: Ender,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(run(x, client, upstream, reach, end))
}

/// netchaos's HTTP/2 client connection to the upstream, over `io`.
/// Its resets are watched ([`h2_resets`]): one before the answer's end
/// stays a reset, whatever its code.
async fn handshake(io: Box<dyn UpstreamIo>) -> hyper::Result<(Upstream, UpstreamConn)> {
    let io: Box<dyn UpstreamIo> = Box::new(h2_resets::Watched::new(io));
    hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .max_send_buf_size(SEND_BUF)
        .initial_connection_window_size(UPSTREAM_WINDOW)
        .initial_stream_window_size(UPSTREAM_STREAM_WINDOW)
        .handshake::<_, Body>(TokioIo::new(io))
        .await
}

/// The engine on one connection, until it ends. The client's connection
/// ending ends the upstream's. The upstream's going away (a GOAWAY: a
/// server's connection age, a restart) lets the client's streams in flight
/// finish, and new ones go to a connection dialled again, as a client's
/// would (should that fail, the client is sent away in turn). An answer
/// that closes the connection says GOAWAY first, as a server going away
/// does; and so does netchaos stopping: an idle connection ends at once
/// (not at the end of --drain, with no word to the client), calls in
/// flight have the drain to finish.
async fn run(
    x: Exchange,
    client: DuplexStream,
    upstream: Box<dyn UpstreamIo>,
    reach: Reach,
    end: Ender,
) {
    let (send, up_conn) = match handshake(upstream).await {
        Ok(x) => x,
        Err(e) => {
            tracing::debug!("HTTP/2 to the upstream failed: {e}");
            end_with(&end, After::Reset, Drain::Nothing);
            return;
        }
    };
    let gone = CancellationToken::new();
    let _stop = gone.clone().drop_guard();
    let mut ended = end.subscribe();
    let (up_tx, up_rx) = watch::channel(send);
    let mut ups = Upstreams::new(&x, up_tx, &reach, &end);
    let stopping = ups.stopping.clone();
    let flush = Arc::new(Flush::default());
    let scheme = if reach.tls { "https" } else { "http" };
    let st = State::new(x, up_rx, scheme, end, gone, flush.clone());
    let server = serve(st, client);
    tokio::pin!(server);
    // Dropped once it ends (the upstream's GOAWAY): its request channel
    // closes with it, so a stream opened after is refused, not queued for
    // a dispatcher that is gone.
    let mut up_conn = Some(Box::pin(up_conn));
    // The upstream dialled again, while it is being.
    let mut redialling: Option<Dialling> = None;
    loop {
        let was_closing = ups.closing;
        tokio::select! {
            r = std::future::poll_fn(|cx| {
                let r = server.as_mut().poll(cx);
                flush.done.notify_waiters();
                r
            }) => {
                if let Err(e) = r {
                    tracing::debug!("HTTP/2 client connection: {e}");
                }
                break;
            }
            r = async { up_conn.as_mut().expect("polled while there").await }, if up_conn.is_some() => {
                up_conn = None;
                redialling = ups.conn_ended(r);
            }
            // (Never while closing: a dial in progress is dropped then.)
            r = async { redialling.as_mut().expect("polled while there").await }, if redialling.is_some() => {
                redialling = None;
                up_conn = ups.redialled(r).map(Box::pin);
            }
            // Another turn of the client's connection, for a stream.
            () = flush.asked.notified() => {}
            () = stopping.cancelled(), if !ups.closing => ups.closing = true,
            Ok(()) = ended.changed(), if !ups.closing => {
                if ended.borrow_and_update().is_some_and(|e| e.drain == Drain::Streams) {
                    ups.closing = true;
                }
            }
        }
        // Closing: the client is told (GOAWAY); no connection will replace
        // one that goes, and streams waiting for one are refused (the last
        // one stays theirs).
        if ups.closing {
            if !was_closing {
                server.as_mut().graceful_shutdown();
            }
            redialling = None;
            ups.tx = None;
        }
    }
}

/// The client's side of the engine: hyper's HTTP/2 server, each stream
/// run by [`stream`] until the connection ends.
fn serve(
    st: Arc<State>,
    client: DuplexStream,
) -> hyper::server::conn::http2::Connection<
    TokioIo<DuplexStream>,
    impl hyper::service::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Failed,
        Future = StreamFuture,
    >,
    TokioExecutor,
> {
    let service = hyper::service::service_fn(move |req| -> StreamFuture {
        let st = st.clone();
        Box::pin(async move {
            let gone = st.gone.clone();
            tokio::select! {
                r = stream(&st, req) => r.map_err(|e| Failed(h2_resets::restore(e))),
                _ = gone.cancelled() => Err(Failed("the connection ended".into())),
            }
        })
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEAD as u32)
        .max_send_buf_size(SEND_BUF)
        .initial_connection_window_size(CLIENT_WINDOW)
        .initial_stream_window_size(CLIENT_STREAM_WINDOW)
        // A direct answer has no `date` unless its server sent one.
        .auto_date_header(false)
        .serve_connection(TokioIo::new(client), service)
}

/// The engine's reach to the upstream as its connections come and go.
struct Upstreams {
    /// Hands streams the connection in use (none once closing).
    tx: Option<watch::Sender<Upstream>>,
    redial: Option<Redial>,
    moved_on: Arc<AtomicBool>,
    /// When the last dial again was made, and how long it took.
    redialled_at: Option<(tokio::time::Instant, Duration)>,
    stopping: CancellationToken,
    end: Ender,
    events: Arc<crate::events::Events>,
    conn_info: Arc<crate::events::ConnInfo>,
    /// The client's connection is closing (told GOAWAY).
    closing: bool,
}

impl Upstreams {
    fn new(x: &Exchange, tx: watch::Sender<Upstream>, reach: &Reach, end: &Ender) -> Upstreams {
        Upstreams {
            tx: Some(tx),
            redial: reach.redial.clone(),
            moved_on: reach.moved_on.clone(),
            redialled_at: None,
            stopping: x.stopping.clone(),
            end: end.clone(),
            events: x.events.clone(),
            conn_info: x.conn.clone(),
            closing: false,
        }
    }

    /// The upstream connection in use ended (`r`): closed or reset, the
    /// client's connection ends as it did; sent away, it is dialled again
    /// (returned), unless netchaos is stopping, it cannot be, or the last
    /// one was sent away as soon as it came (the upstream is going, not
    /// ageing its connections: no storm of dials).
    fn conn_ended(&mut self, r: hyper::Result<()>) -> Option<Dialling> {
        match r {
            Err(e) => {
                tracing::debug!("HTTP/2 upstream connection: {e}");
                // Closed, not sent away: the client's connection closes as
                // it did (its streams wait for that); a connection dialled
                // again and reset resets it.
                if upstream_closed(&e) {
                    end_with(&self.end, After::Close, Drain::Pause);
                } else if io_kind(&e) == Some(std::io::ErrorKind::ConnectionReset) {
                    end_with(&self.end, After::Reset, Drain::Nothing);
                }
                self.closing = true;
                None
            }
            Ok(()) if self.closing => None,
            Ok(()) => {
                let spaced = self.redialled_at.is_none_or(|(t, took)| {
                    t.elapsed() >= REDIAL_SPACING.max((took * REDIAL_TURNS).min(REDIAL_SPACING_MAX))
                });
                match &self.redial {
                    Some(dial) if !self.stopping.is_cancelled() && spaced => Some(dialling(dial)),
                    _ => {
                        let reason = match &self.redial {
                            _ if self.stopping.is_cancelled() => "stopping",
                            Some(_) => "soon",
                            None => "cannot_redial",
                        };
                        self.events.upstream_went_away(&self.conn_info, reason);
                        self.closing = true;
                        None
                    }
                }
            }
        }
    }

    /// A dial again came to `r`: the new connection takes the last one's
    /// place (returned); failed, the client is sent away in turn.
    fn redialled(
        &mut self,
        r: std::io::Result<(Upstream, UpstreamConn, Duration)>,
    ) -> Option<UpstreamConn> {
        match r {
            Ok((send, conn, took)) => {
                self.events.upstream_redialled(&self.conn_info, took);
                if let Some(tx) = &self.tx {
                    tx.send_replace(send);
                }
                self.moved_on.store(true, Ordering::Relaxed);
                self.redialled_at = Some((tokio::time::Instant::now(), took));
                Some(conn)
            }
            Err(e) => {
                self.events.relay_error(
                    &self.conn_info,
                    "redial_failed",
                    &format!("the HTTP/2 upstream sent its connection away, and dialling it again failed: {e}"),
                );
                self.closing = true;
                None
            }
        }
    }
}

/// Dials the upstream again and speaks HTTP/2 to it, bounded: an upstream
/// that takes the TCP connection and never answers its TLS.
fn dialling(dial: &Redial) -> Dialling {
    let dial = dial();
    let began = tokio::time::Instant::now();
    Box::pin(async move {
        let (send, conn) = tokio::time::timeout(REDIAL_WAIT, async {
            let io = dial.await?;
            handshake(io).await.map_err(std::io::Error::other)
        })
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        Ok((send, conn, began.elapsed()))
    })
}

/// Whether `e` is the upstream's GOAWAY failing a stream it never
/// processed (beyond the last one it names): refused, as it reached no
/// server.
fn went_away(e: &(dyn std::error::Error + 'static)) -> bool {
    causes(e)
        .find_map(|e| e.downcast_ref::<h2::Error>())
        .is_some_and(|h| h.is_go_away() && h.is_remote())
}

/// The kind of the io error under `e`, if there is one.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    causes(e)
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind)
}

/// The client's bytes, into its upstream pipeline (towards the engine),
/// until the engine has ended (`gone`): hyper said GOAWAY (a protocol
/// error of the client's, a drain that finished) or the client did, and
/// nothing reads what the client sends any more. Its end is waited for
/// then ([`linger`]), not its bytes: a client flooding on past its
/// GOAWAY (a CONTINUATION flood) was read and dropped without end, 47 GB
/// in 20 s and half a core per connection.
pub(crate) async fn requests<R: AsyncRead + Unpin>(
    client: R,
    out: Output,
    gone: CancellationToken,
) {
    let _ending = budget::Connection::new();
    let out = Out::new(out);
    let (mut src, mut buf) = (Src::new(client, &out), BytesMut::new());
    let end = tokio::select! {
        _ = exchange::raw(&mut src, &mut buf, &out) => return,
        () = gone.cancelled() => linger(&mut src).await,
    };
    let _ = exchange::send(&out, end).await;
}

/// What a client whose HTTP/2 connection has ended may still send, read
/// and dropped: in flight when it met the GOAWAY (a window update, its own
/// GOAWAY, the rest of a frame).
const LINGER_BYTES: usize = 256 * 1024;
/// How long its own end (FIN) is waited for: longer than a GOAWAY's drain
/// ([`GOAWAY_DRAIN`]), so the frames before it reach the client first
/// through a slow downstream.
const LINGER_TIME: Duration = Duration::from_secs(10);

/// Waits for the end of a client's connection whose HTTP/2 has ended:
/// its FIN (the connection ends as it would have), or an RST; or, once it
/// has sent [`LINGER_BYTES`] more (a client that ignores the GOAWAY), a
/// reset, as from a server that closed its socket with the bytes unread;
/// or after [`LINGER_TIME`], a close.
async fn linger<R: AsyncRead + Unpin>(src: &mut Src<R>) -> ItemKind {
    let deadline = tokio::time::Instant::now() + LINGER_TIME;
    let mut scratch = BytesMut::new();
    let mut dropped = 0;
    loop {
        match tokio::time::timeout_at(deadline, src.fill(&mut scratch)).await {
            Err(_) => return ItemKind::Close,
            Ok(Ok(0)) => return ItemKind::Fin,
            Ok(Ok(n)) => {
                dropped += n;
                scratch.clear();
                if dropped > LINGER_BYTES {
                    return ItemKind::Reset;
                }
            }
            Ok(Err(_)) => return ItemKind::Reset,
        }
    }
}

/// What the engine sends the client, into its downstream pipeline; when a
/// fault ends the connection, what the engine has written by then, and
/// the end (a FIN or an RST) after it.
pub(crate) async fn responses(engine: ReadHalf<DuplexStream>, mut ending: Ending, out: Output) {
    let out = Out::new(out);
    let mut src = Src::new(engine, &out);
    let mut buf = BytesMut::new();
    let mut watching = true;
    // Unbiased: an end is not held back by a busy stream's bytes.
    let then = loop {
        tokio::select! {
            r = src.fill(&mut buf) => match r {
                Ok(0) => {
                    let _ = exchange::send(&out, ItemKind::Fin).await;
                    return;
                }
                Ok(_) => {
                    if exchange::send_data(&out, buf.split().freeze()).await.is_err() {
                        return;
                    }
                }
                Err(_) => {
                    let _ = exchange::send(&out, ItemKind::Reset).await;
                    return;
                }
            },
            r = ending.changed(), if watching => match r {
                Ok(()) => if let Some(end) = *ending.borrow_and_update() {
                    break end;
                },
                Err(_) => watching = false,
            },
        }
    };
    // What the engine is still writing goes first: until it pauses (an
    // answer's last frames), or until it has finished its streams after
    // its GOAWAY; each bounded.
    let (pause, most) = match then.drain {
        Drain::Nothing => (Duration::ZERO, Duration::ZERO),
        Drain::Pause => (END_PAUSE, END_DRAIN),
        Drain::Streams => (GOAWAY_DRAIN, GOAWAY_DRAIN),
    };
    let deadline = tokio::time::Instant::now() + most;
    while let Ok(Ok(n)) = tokio::time::timeout_at(
        deadline.min(tokio::time::Instant::now() + pause),
        src.fill(&mut buf),
    )
    .await
    {
        if n == 0
            || exchange::send_data(&out, buf.split().freeze())
                .await
                .is_err()
        {
            break;
        }
    }
    let _ = exchange::send(
        &out,
        match then.then {
            After::Reset => ItemKind::Reset,
            _ => ItemKind::Close,
        },
    )
    .await;
}

/// A fault's end waits for what the engine writes until it pauses this
/// long, at most [`END_DRAIN`] in all; after a GOAWAY, for its streams to
/// finish, at most [`GOAWAY_DRAIN`].
const END_PAUSE: Duration = Duration::from_millis(50);
const END_DRAIN: Duration = Duration::from_secs(1);
const GOAWAY_DRAIN: Duration = Duration::from_secs(10);

/// The upstream's side: the engine's bytes to the upstream and back. An
/// upstream that resets ends the client's connection with an RST too.
pub(crate) async fn upstream_leg<R: AsyncRead + Unpin>(
    engine: DuplexStream,
    mut read: R,
    sink: &mut Sink<'_>,
    end: Ender,
    moved_on: Arc<AtomicBool>,
) {
    let (mut from_engine, mut to_engine) = tokio::io::split(engine);
    let out = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_engine.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
        sink.finish().await;
    };
    let back = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // (A TLS upstream that closes without close_notify has closed
            // all the same: its reader says so as the end of its bytes.)
            let n = match read.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    // The client's connection is reset as the upstream's
                    // was; the engine, never told, resets no stream of its
                    // own before it. (Unless a connection dialled again
                    // has taken this one's place: then it just ends.)
                    tracing::debug!("HTTP/2 upstream: {e}");
                    if !moved_on.load(Ordering::Relaxed) {
                        end_with(&end, After::Reset, Drain::Nothing);
                        std::future::pending::<()>().await;
                    }
                    break;
                }
            };
            // The engine has let go of this connection (it went away and
            // its streams are done) before the upstream's last bytes came:
            // they are for nobody, and no reason to reset the client — as
            // `tokio::io::copy` made of the write's error (a gRPC client
            // lost its calls in flight, now and then, under a server's
            // connection ageing).
            if to_engine.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_engine.shutdown().await;
    };
    tokio::join!(out, back);
}

/// One stream: its request's phases ([`phases`]), its forwarding, its
/// response's.
async fn stream(st: &Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, BoxError> {
    let x = &st.x;
    let n = st.n.fetch_add(1, Ordering::Relaxed);
    x.events.http_request();
    let faults = x.faults.borrow().clone();
    let (parts, incoming) = req.into_parts();
    let headers = pairs(&parts.headers);
    let mut body = Held::new(incoming);
    // A body is read ahead (to match its JSON fields, or rewrite it) only
    // when it may be held whole: not a gRPC call's or another stream's.
    // Whatever its content type says, as over HTTP/1.1: a JSON body sent
    // as `text/plain`, or with none, is matched all the same.
    let may_hold = holdable(&headers);
    if decide::needs_body(&faults) && may_hold {
        body.read_ahead(&st.holding).await?;
    }
    let json: Option<serde_json::Value> = body.whole().and_then(|b| serde_json::from_slice(b).ok());
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| header(&headers, "host").map(str::to_string))
        .or_else(|| x.sni.clone());
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let view = RequestView {
        method: parts.method.as_str(),
        path: target,
        host: host.as_deref(),
        headers: &headers,
        body: json.as_ref(),
    };
    let (meta, next) = phases::on_request(x, &faults, "h2", n, &view, true).await;
    record_body(&meta, &mut body, may_hold);
    let call = grpc::is_call(&headers);
    let head_only = parts.method == Method::HEAD;
    match next {
        OnRequest::Answer(a) => {
            let r = answer(st, &meta, &a, (call, head_only), Some(body)).await;
            watched(r, meta.attempt.clone())
        }
        OnRequest::Forward(f) => {
            let sent = Sent {
                call,
                head_only,
                may_hold,
            };
            forward(st, meta, f, parts, body, sent).await
        }
    }
}

/// The request body's `model` and hash, on its record: of the body read
/// ahead, or as it passes.
fn record_body(meta: &Meta, body: &mut Held, may_hold: bool) {
    let Some(a) = &meta.attempt else { return };
    if !may_hold {
        return a.request_unseen();
    }
    let mut scan = ModelScan::default();
    match body.whole() {
        Some(w) => {
            scan.feed(w);
            a.scanned(&scan);
            a.request_bytes(w);
        }
        None => body.scan = Some((scan, meta.attempt.clone())),
    }
}

/// Netchaos's reply in the upstream's place (to the request, or instead
/// of its response), given in its turn ([`Answering::give`]): a gRPC call
/// (`call`) answered with `grpc_status` gets `:status 200` and the failure
/// in its trailers; a HEAD (`head_only`) no body. The request's `body`,
/// if it was never sent on, is drained beside it ([`drain_request`]).
async fn answer(
    st: &Arc<State>,
    meta: &Meta,
    a: &Answering,
    (call, head_only): (bool, bool),
    body: Option<Held>,
) -> Result<Response<Body>, BoxError> {
    let said = answered_call(&a.reply, call);
    let status = answered_status(&a.reply, &said);
    let grpc = said.as_ref().map(grpc_status);
    a.give(&st.x, meta, status, grpc, a.reply.then()).await;
    if let Some(body) = body {
        drain_request(body, st.gone.clone());
    }
    st.answer(&a.reply, call, head_only).await
}

/// What the engine keeps of a forwarded request to follow its response.
struct Sent {
    /// A gRPC call.
    call: bool,
    /// A HEAD: its answer has no body.
    head_only: bool,
    /// Its body may be held whole (not a call's or a stream's).
    may_hold: bool,
}

/// A request forwarded: edited as its faults say, sent upstream, and its
/// response followed.
async fn forward(
    st: &Arc<State>,
    meta: Meta,
    f: Forwarding,
    mut parts: hyper::http::request::Parts,
    mut body: Held,
    sent: Sent,
) -> Result<Response<Body>, BoxError> {
    if f.body_edits() && sent.may_hold {
        body.read_ahead(&st.holding).await?;
    }
    edit_forwarded(st, &meta, &f, &mut parts, &mut body)?;
    let response = send_upstream(st, &meta, parts, body).await?;
    let (rparts, rbody) = response.into_parts();
    let status = rparts.status.as_u16();
    let rheaders = pairs(&rparts.headers);
    // A call by the request's type or the answer's (a proxy's own reply
    // may not say it).
    let grpc_answer = sent.call || grpc::is_call(&rheaders);
    let call_end = grpc_answer.then(|| grpc::ended(&rparts.headers)).flatten();
    let grpc = call_end.as_ref().map(grpc_status);
    let r = match f.on_response(&st.x, &meta, status, &rheaders, grpc).await {
        OnUpstream::Replace(a) => {
            drop(rbody);
            let r = answer(st, &meta, &a, (sent.call, sent.head_only), None).await;
            return watched(r, meta.attempt.clone());
        }
        OnUpstream::Follow(r) => *r,
    };
    let up = UpstreamHead {
        parts: rparts,
        headers: rheaders,
        grpc: grpc_answer,
    };
    respond(st, meta, r, up, rbody, sent.head_only).await
}

/// The request as it goes upstream: edited by its `http_rewrite` faults
/// (each counted where it changed something), its authority the
/// upstream's, its `Accept-Encoding` identity where a fault needs an
/// uncompressed answer.
fn edit_forwarded(
    st: &State,
    meta: &Meta,
    f: &Forwarding,
    parts: &mut hyper::http::request::Parts,
    body: &mut Held,
) -> Result<(), BoxError> {
    let x = &st.x;
    let headers = pairs(&parts.headers);
    let json_body = rewrite::is_json(&headers);
    f.rewrite(x, meta, |w| {
        let mut changed = false;
        if let Some(head) = edit_request(parts, &headers, w) {
            changed |= head.method != parts.method
                || head.uri != parts.uri
                || head.headers != parts.headers;
            parts.method = head.method;
            parts.uri = head.uri;
            parts.headers = head.headers;
        }
        if let Some(e) = &w.edits().body {
            changed |= body.edit(|b| rewrite::body(b, e, json_body));
        }
        changed
    });
    if body.edited {
        set(
            &mut parts.headers,
            "content-length",
            Some(&body.len().to_string()),
        );
    }
    let headers = pairs(&parts.headers);
    let mut uri = parts.uri.clone().into_parts();
    uri.scheme = Some(st.scheme.parse()?);
    // The authority: the proxy's upstream name; else a Host the request
    // carries (one a rewrite set, too); else its own, or the TLS name.
    let host_header = header(&headers, "host").and_then(|h| h.parse().ok());
    uri.authority = match &x.rewrite_host {
        Some(h) => Some(h.parse()?),
        None => host_header
            .or(uri.authority)
            .or_else(|| x.sni.as_deref().and_then(|h| h.parse().ok())),
    };
    if uri.authority.is_none() {
        uri.authority = Some(x.conn.dst.to_string().parse()?);
    }
    parts.uri = Uri::from_parts(uri)?;
    // Over HTTP/2 the authority says it; a Host beside it must agree.
    parts.headers.remove(hyper::http::header::HOST);
    // As over HTTP/1.1: identity only where the client asked for an
    // encoding, and not for a request seen whole that asks for no stream.
    let streams = || {
        decide::asks_for_stream(
            parts
                .headers
                .get(hyper::http::header::ACCEPT)
                .and_then(|v| v.to_str().ok()),
            parts.uri.path(),
            body.whole().unwrap_or_default(),
            body.whole().is_some(),
        )
    };
    if parts.headers.contains_key("accept-encoding") && f.wants_identity(streams) {
        set(&mut parts.headers, "accept-encoding", Some("identity"));
    }
    Ok(())
}

/// Sends the request upstream: its response, or the error the client's
/// stream gets — refused when the upstream is gone with none
/// in its place (a client retries that elsewhere: the stream reached no
/// server); else the upstream's failure (its stream reset, its connection
/// gone), which hyper passes on with its code.
async fn send_upstream(
    st: &Arc<State>,
    meta: &Meta,
    parts: hyper::http::request::Parts,
    body: Held,
) -> Result<Response<Incoming>, BoxError> {
    let refused = || -> BoxError { h2::Error::from(h2::Reason::REFUSED_STREAM).into() };
    let Some(mut up) = st.ready_upstream().await else {
        return Err(refused());
    };
    let sent = match up
        .try_send_request(Request::from_parts(parts, body.boxed()))
        .await
    {
        Ok(r) => Ok(r),
        // Not sent: the upstream went away as it was asked. Once more, on
        // the connection dialled in its place.
        Err(mut e) => match e.take_message() {
            Some(req) => match st.ready_upstream().await {
                Some(mut next) => next.send_request(req).await,
                None => return Err(refused()),
            },
            None => Err(e.into_error()),
        },
    };
    match sent {
        Ok(r) => Ok(r),
        Err(e) if e.is_canceled() || went_away(&e) => Err(refused()),
        Err(e) if upstream_closed(&e) => Err(severed(st).await.into()),
        Err(e) => {
            if let Some(code) = h2_resets::upstream_reset(&e) {
                st.x.record_reset(meta, None, code);
            }
            Err(e.into())
        }
    }
}

/// The upstream's response head, as the engine follows it.
struct UpstreamHead {
    parts: hyper::http::response::Parts,
    headers: Vec<(String, String)>,
    /// A gRPC call's answer.
    grpc: bool,
}

/// The upstream's response on its way to the client, under the faults
/// that act on it: its resets and a call's trailers recorded, its head
/// and body rewritten, cut short (`http_truncate`), its messages or events
/// counted (`sse`).
async fn respond(
    st: &Arc<State>,
    meta: Meta,
    mut r: Responding,
    mut up: UpstreamHead,
    rbody: Incoming,
    head_only: bool,
) -> Result<Response<Body>, BoxError> {
    let status = up.parts.status.as_u16();
    // A response that ended with its head (gRPC's trailers-only failure)
    // has no body to cut or count: wrapped, it would lose its END_STREAM
    // on the HEADERS, and the client its status.
    let ended = hyper::body::Body::is_end_stream(&rbody);
    if ended {
        r.on.truncate = None;
    }
    let mut rbody = Held::new(rbody);
    watch_upstream(st, &meta, &mut rbody, status, up.grpc && !ended);
    let bodiless = head_only || matches!(status, 204 | 304);
    if r.body_edits() && !bodiless && holdable(&up.headers) {
        if let Err(e) = rbody.read_ahead(&st.holding_responses).await {
            return Err(match upstream_closed(&*e) {
                true => severed(st).await.into(),
                false => e,
            });
        }
    }
    let json_body = rewrite::is_json(&up.headers);
    let mut counted = Counted::default();
    let status_now = r.rewrite(&st.x, &meta, status, &mut counted, |w, status| {
        let mut changed = false;
        let mut now = status;
        if let Some((s, h)) = edit_response(status, &up.parts.headers, w) {
            changed |= s != status || h != up.parts.headers;
            now = s;
            up.parts.headers = h;
        }
        if let Some(e) = &w.edits().body {
            changed |= !bodiless && rbody.edit(|b| rewrite::body(b, e, json_body));
        }
        (changed, now)
    });
    up.parts.status = StatusCode::from_u16(status_now)?;
    if rbody.edited {
        let len = rbody.len().to_string();
        set(&mut up.parts.headers, "content-length", Some(&len));
    }
    let attempt = meta.attempt.clone();
    let out = faulted_body(st, meta, r, &mut up, rbody, ended, status_now);
    let out = Severed {
        inner: out,
        st: st.clone(),
        gone: None,
        failing: None,
    }
    .boxed();
    watched(Ok(Response::from_parts(up.parts, out)), attempt)
}

/// The upstream's reset of the stream before its end is the client's,
/// with its code (a `NO_ERROR` one too: [`h2_resets`]); and a call's own
/// end (`call`), as the upstream's trailers say it, is recorded before any
/// fault of netchaos's ends it otherwise.
fn watch_upstream(st: &Arc<State>, meta: &Meta, rbody: &mut Held, status: u16, call: bool) {
    let (st2, m) = (st.clone(), meta.same_request());
    rbody.reset = Some(Box::new(move |code| {
        st2.x.record_reset(&m, Some(status), code);
    }));
    if call {
        let (st, meta) = (st.clone(), meta.same_request());
        rbody.trailers = Some(Box::new(move |t: &HeaderMap| {
            if let Some(end) = grpc::ended(t) {
                st.x.record_trailers(&meta, grpc_status(&end));
            }
        }));
    }
}

/// The response body as the client gets it: cut after `http_truncate`'s
/// bytes, or its gRPC messages or events under `sse` faults (one that
/// came compressed, although asked not to, has none netchaos can see),
/// or as it came.
fn faulted_body(
    st: &Arc<State>,
    meta: Meta,
    mut r: Responding,
    up: &mut UpstreamHead,
    rbody: Held,
    ended: bool,
    status: u16,
) -> Body {
    if let Some((c, t)) = r.on.truncate.take() {
        let st2 = st.clone();
        let (limit, then) = (t.after_bytes(), t.then());
        let recorded = move || {
            st2.x.record(&c, &meta, Some(status));
            end_with(&st2.end, then, Drain::Pause);
        };
        return Cut {
            inner: rbody.boxed(),
            left: limit,
            cut: false,
            at_limit: Some(Box::new(recorded)),
            gone: Box::pin(st.gone.clone().cancelled_owned()),
        }
        .boxed();
    }
    let units = match grpc::is_call(&up.headers) {
        true => Some(Units::Grpc),
        false => header(&up.headers, "content-type")
            .and_then(Format::of_media_type)
            .filter(|_| !header(&up.headers, "content-encoding").is_some_and(wire::compressed))
            .map(Units::Events),
    };
    let Some(units) = units.filter(|_| !ended && !r.on.sse.is_empty()) else {
        return rbody.boxed();
    };
    let faults = std::mem::take(&mut r.on.sse);
    let host = Recorder {
        st: st.clone(),
        meta,
        status,
    };
    // Patched or ended early, events no longer add up to a length.
    up.parts.headers.remove("content-length");
    let (body, task) = h2_stream::relay(rbody, units, faults, host);
    let gone = st.gone.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = task => {}
            () = gone.cancelled() => {}
        }
    });
    body.boxed()
}

/// A request answered in the upstream's place, its body never sent on:
/// read (at most [`MAX_BODY`]) and dropped beside the answer, as a server
/// that answers reads what it was sent. Its record still gets the body's
/// `model` and hash. Dropped at once instead, the body would make hyper
/// reset the stream (CANCEL) while the answer may still sit unsent in
/// its queue, which a reset discards: the client (curl, still uploading)
/// got a bare stream error instead of the status, 4 times in 6. A client
/// that stops sending mid-body is waited for [`DRAIN_WAIT`] at most (the
/// answer has long gone out by then; the reset that follows says
/// `NO_ERROR`), and not past the connection's end: a stopping netchaos is
/// not held up by it.
fn drain_request(mut body: Held, gone: CancellationToken) {
    if body.rest.is_none() {
        return;
    }
    // Its turn to be held whole is another stream's now.
    body._turn = None;
    tokio::spawn(async move {
        let mut body = body;
        let drain = async {
            let mut read = 0usize;
            while read <= MAX_BODY {
                match BodyExt::frame(&mut body).await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, Bytes::len),
                    _ => break,
                }
            }
        };
        tokio::select! {
            () = drain => {}
            () = gone.cancelled() => {}
            () = crate::timer::sleep(DRAIN_WAIT) => {}
        }
    });
}

/// How long an answered request's body is read for, at most.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// A response whose going out is marked on its attempt's record: its
/// head now, its first data, its end.
fn watched(
    r: Result<Response<Body>, BoxError>,
    attempt: Option<Arc<Attempt>>,
) -> Result<Response<Body>, BoxError> {
    let Some(attempt) = attempt else {
        return r;
    };
    let (parts, body) = r?.into_parts();
    attempt.head_out();
    if hyper::body::Body::is_end_stream(&body) {
        attempt.done();
    }
    let body = Watched {
        inner: body,
        attempt,
    };
    Ok(Response::from_parts(parts, body.boxed()))
}

/// A response body that marks its attempt as it goes out ([`watched`]).
struct Watched {
    inner: Body,
    attempt: Arc<Attempt>,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = Failed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failed>>> {
        let next = Pin::new(&mut self.inner).poll_frame(cx);
        match &next {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref().filter(|d| !d.is_empty()) {
                    self.attempt.body_out();
                    self.attempt.response_bytes(d);
                }
                if self.inner.is_end_stream() {
                    self.attempt.done();
                }
            }
            Poll::Ready(None) => self.attempt.done(),
            Poll::Ready(Some(Err(_))) => self.attempt.failed("reset"),
            Poll::Pending => {}
        }
        next
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body whose upstream connection closes before its end: the
/// client's connection closes in turn ([`severed`]), the stream not reset.
struct Severed {
    inner: Body,
    st: Arc<State>,
    /// Once severed: the connection's end, which the body waits for.
    gone: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// Once failed otherwise (the upstream's reset of the stream): the
    /// failure, once what came before it has gone out ([`Flush`]).
    failing: Option<(Turn, Option<Failed>)>,
}

impl hyper::body::Body for Severed {
    type Data = Bytes;
    type Error = Failed;

    fn is_end_stream(&self) -> bool {
        self.gone.is_none() && self.failing.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failed>>> {
        if let Some((turn, failed)) = self.failing.as_mut() {
            return match turn.poll(cx) {
                Poll::Ready(()) => Poll::Ready(failed.take().map(Err)),
                Poll::Pending => Poll::Pending,
            };
        }
        if self.gone.is_none() {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Err(e))) if upstream_closed(&e) => {
                    end_with(&self.st.end, After::Close, Drain::Pause);
                    self.gone = Some(Box::pin(self.st.gone.clone().cancelled_owned()));
                }
                Poll::Ready(Some(Err(e))) => {
                    let turn = self.st.flush.turn();
                    self.failing = Some((turn, Some(e)));
                    return self.poll_frame(cx);
                }
                other => return other,
            }
        }
        let gone = self.gone.as_mut().expect("severed");
        match gone.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Some(Err(Failed("the upstream's connection closed".into()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// How `reply` ends a gRPC call (`call`), when it gives `grpc_status`.
fn answered_call(reply: &Reply, call: bool) -> Option<(u32, String)> {
    match reply {
        Reply::Status(s) if call => s
            .grpc()
            .map(|g| (u32::from(g.code.number()), g.message.clone())),
        _ => None,
    }
}

/// The HTTP status the client got: a gRPC call answered with
/// `grpc_status` gets `:status 200` and the failure in its trailers, not
/// the HTTP status the code maps to.
fn answered_status(reply: &Reply, said: &Option<(u32, String)>) -> Option<u16> {
    match said {
        Some(_) => Some(200),
        None => reply.status(),
    }
}

/// A call's end as the event log takes it.
fn grpc_status((code, message): &(u32, String)) -> crate::events::GrpcStatus<'_> {
    crate::events::GrpcStatus {
        code: *code,
        message,
    }
}

/// Where a response's `sse` faults (a gRPC call's or an event stream's)
/// are recorded, and end the connection.
struct Recorder {
    st: Arc<State>,
    meta: Meta,
    status: u16,
}

impl h2_stream::Host for Recorder {
    fn acted(&self, c: &Chosen, ended: Option<crate::events::GrpcStatus<'_>>) {
        self.st
            .x
            .record_call(c, &self.meta, Some(self.status), ended);
    }

    fn end(&self, then: After) {
        end_with(&self.st.end, then, Drain::Pause);
    }

    fn stream_error(&self) {
        self.meta.attempt.mark(|a| a.failed("stream_error"));
    }
}

impl State {
    fn new(
        x: Exchange,
        upstream: watch::Receiver<Upstream>,
        scheme: &'static str,
        end: Ender,
        gone: CancellationToken,
        flush: Arc<Flush>,
    ) -> Arc<State> {
        Arc::new(State {
            x,
            upstream,
            scheme,
            n: AtomicU64::new(0),
            end,
            gone,
            holding: Arc::new(Semaphore::new(HELD_BODIES)),
            holding_responses: Arc::new(Semaphore::new(HELD_BODIES)),
            flush,
        })
    }

    /// The upstream connection to send a stream on, once it is ready: after
    /// the upstream sent one away, the one dialled in its place (waited for
    /// at most [`REDIAL_WAIT`]); `None` when there is none.
    async fn ready_upstream(&self) -> Option<Upstream> {
        let mut rx = self.upstream.clone();
        let deadline = tokio::time::Instant::now() + REDIAL_WAIT;
        loop {
            let mut up = rx.borrow_and_update().clone();
            if up.ready().await.is_ok() {
                return Some(up);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Answers in the upstream's place: a status (a gRPC call's
    /// trailers-only failure when the fault gives `grpc_status`), or none,
    /// the connection ending where the answer would begin.
    async fn answer(
        &self,
        reply: &Reply,
        call: bool,
        head_only: bool,
    ) -> Result<Response<Body>, BoxError> {
        let s = match reply {
            Reply::Abort(a) => {
                end_with(&self.end, a.then(), Drain::Pause);
                // The connection ends under this stream: nothing to send.
                self.gone.cancelled().await;
                return Err(BoxError::from("aborted"));
            }
            Reply::Status(s) => s,
        };
        let mut response = match s.grpc().filter(|_| call) {
            Some(g) => {
                let mut r = Response::new(Empty::new().map_err(|e| match e {}).boxed());
                for (k, v) in s.extra_headers() {
                    r.headers_mut().append(
                        HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())?,
                        HeaderValue::from_str(v)?,
                    );
                }
                for (k, v) in g.headers() {
                    r.headers_mut().insert(k, HeaderValue::from_str(&v)?);
                }
                r
            }
            None => from_http1(&s.reply(false, head_only))?,
        };
        // `then = close | reset`: the connection ends once the answer has
        // gone out (its body's end).
        if s.then() != After::Keep {
            let end = self.end.clone();
            let then = s.then();
            let (parts, body) = response.into_parts();
            response = Response::from_parts(
                parts,
                Then {
                    inner: body,
                    at_end: Some(Box::new(move || {
                        end_with(&end, then, Drain::Streams);
                    })),
                }
                .boxed(),
            );
        }
        Ok(response)
    }
}

/// A canned HTTP/1.1 reply (as `http_status` makes it) as an HTTP/2
/// response: its status, headers (not those of HTTP/1.1's connection
/// management, which HTTP/2 forbids) and body.
fn from_http1(bytes: &Bytes) -> Result<Response<Body>, BoxError> {
    let mut hs = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut hs);
    let len = match r.parse(bytes)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            return Err(BoxError::from("a canned reply without its head's end"));
        }
    };
    let mut out = Response::new(
        Full::new(bytes.slice(len..))
            .map_err(|e| match e {})
            .boxed(),
    );
    *out.status_mut() = StatusCode::from_u16(r.code.unwrap_or(502))?;
    for h in r.headers.iter() {
        if !HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            out.headers_mut().append(
                HeaderName::from_bytes(h.name.as_bytes())?,
                HeaderValue::from_bytes(h.value)?,
            );
        }
    }
    Ok(out)
}

/// Whether a message's body may be read whole before it goes on (to match
/// or rewrite it): one HTTP/1.1 would hold ([`rewrite::body_editable`]),
/// and not a gRPC message stream, which may never end.
fn holdable(headers: &[(String, String)]) -> bool {
    rewrite::body_editable(headers)
        && !headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("content-type")
                && v.trim()
                    .to_ascii_lowercase()
                    .starts_with("application/grpc")
        })
}

/// HTTP/1.1's connection-specific headers, which HTTP/2 forbids (RFC 9113
/// §8.2.2).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// The request head as `w` edits it (rendered as HTTP/1.1's, so edits mean
/// what they mean there), or `None` if it leaves it as it was.
fn edit_request(
    parts: &hyper::http::request::Parts,
    headers: &[(String, String)],
    w: &HttpRewrite,
) -> Option<Head> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut was = format!("{} {target} HTTP/1.1\r\n", parts.method).into_bytes();
    render(&mut was, headers);
    let next = rewrite::request(&was, w.edits());
    if next[..] == was[..] {
        return None;
    }
    let mut hs = [httparse::EMPTY_HEADER; 128];
    let mut r = httparse::Request::new(&mut hs);
    r.parse(&next).ok()?;
    let mut uri = parts.uri.clone().into_parts();
    uri.path_and_query = Some(r.path?.parse().ok()?);
    Some(Head {
        method: Method::from_bytes(r.method?.as_bytes()).ok()?,
        uri: Uri::from_parts(uri).ok()?,
        headers: header_map(r.headers)?,
    })
}

/// The response's status and headers as `w` edits them, or `None` if it
/// leaves them as they were.
fn edit_response(status: u16, headers: &HeaderMap, w: &HttpRewrite) -> Option<(u16, HeaderMap)> {
    let mut was = format!(
        "HTTP/1.1 {status} {}\r\n",
        super::super::fault::http_reply::reason(status)
    )
    .into_bytes();
    render(&mut was, &pairs(headers));
    let next = rewrite::response(&was, w.edits(), status, false);
    if next[..] == was[..] {
        return None;
    }
    let mut hs = [httparse::EMPTY_HEADER; 128];
    let mut r = httparse::Response::new(&mut hs);
    r.parse(&next).ok()?;
    Some((r.code?, header_map(r.headers)?))
}

struct Head {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

fn render(out: &mut Vec<u8>, headers: &[(String, String)]) {
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

fn header_map(hs: &[httparse::Header<'_>]) -> Option<HeaderMap> {
    let mut m = HeaderMap::new();
    for h in hs {
        if HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        m.append(
            HeaderName::from_bytes(h.name.as_bytes()).ok()?,
            HeaderValue::from_bytes(h.value).ok()?,
        );
    }
    Some(m)
}

/// Headers as the fault matchers see them (name, value).
fn pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn set(h: &mut HeaderMap, name: &'static str, value: Option<&str>) {
    match value.and_then(|v| HeaderValue::from_str(v).ok()) {
        Some(v) => {
            h.insert(name, v);
        }
        None => {
            h.remove(name);
        }
    }
}

/// What a body's trailers are shown to.
type TrailersSeen = Box<dyn FnOnce(&HeaderMap) + Send + Sync>;
/// What is told of a body's stream reset by its sender, with its code.
type ResetSeen = Box<dyn FnOnce(h2::Reason) + Send + Sync>;

/// A body as far as it was read ahead (its frames, in order), then the
/// rest as it comes.
struct Held {
    /// Told of the trailers as they pass.
    trailers: Option<TrailersSeen>,
    /// Told of the sender's reset of the stream, if it comes.
    reset: Option<ResetSeen>,
    frames: VecDeque<Frame<Bytes>>,
    rest: Option<Incoming>,
    /// Its data, when it was read to its end (within [`MAX_BODY`]).
    whole: Option<Bytes>,
    /// Its data was replaced (by `http_rewrite`).
    edited: bool,
    /// Its turn to be held whole, given back when it has gone.
    _turn: Option<OwnedSemaphorePermit>,
    /// What it holds read ahead, in the HTTP layer's budget.
    held: Lease,
    /// A request body's `model`, looked for as it passes, for its record.
    scan: Option<(ModelScan, Option<Arc<Attempt>>)>,
}

impl Held {
    fn new(body: Incoming) -> Held {
        Held {
            trailers: None,
            reset: None,
            frames: VecDeque::new(),
            rest: Some(body),
            whole: None,
            edited: false,
            _turn: None,
            held: Lease::default(),
            scan: None,
        }
    }

    /// Reads on until the body ends or passes [`MAX_BODY`], in its turn,
    /// or until the budget has no room for more (what was read is held
    /// until it has gone on; the rest passes as it comes).
    async fn read_ahead(&mut self, holding: &Arc<Semaphore>) -> Result<(), BoxError> {
        if self._turn.is_none() {
            self._turn = Some(holding.clone().acquire_owned().await?);
        }
        let mut data = BytesMut::new();
        for f in &self.frames {
            if let Some(d) = f.data_ref() {
                data.extend_from_slice(d);
            }
        }
        while let Some(rest) = self.rest.as_mut() {
            if data.len() > MAX_BODY {
                return Ok(());
            }
            // Its frames and their data's copy, and the next frame.
            if !self.held.hold(2 * data.len() + FRAME) {
                budget::refused(
                    "a body passes on as it comes, not held whole to match or rewrite it",
                );
                return Ok(());
            }
            match rest.frame().await {
                None => self.rest = None,
                Some(f) => {
                    let f = f.map_err(|e| self.failed(e))?;
                    if let Some(d) = f.data_ref() {
                        data.extend_from_slice(d);
                    }
                    self.frames.push_back(f);
                }
            }
        }
        self.whole = Some(data.freeze());
        Ok(())
    }

    fn whole(&self) -> Option<&[u8]> {
        self.whole.as_deref()
    }

    /// The body's failure, as its stream is to fail with it: the sender's
    /// reset told ([`Held::reset`]) and given back its own code.
    fn failed(&mut self, e: hyper::Error) -> BoxError {
        if let Some(code) = h2_resets::upstream_reset(&e)
            && let Some(told) = self.reset.take()
        {
            told(code);
        }
        h2_resets::restore(e.into())
    }

    /// Replaces the whole body's data by what `edit` makes of it (its
    /// trailers kept); whether it changed.
    fn edit(&mut self, edit: impl FnOnce(&[u8]) -> Option<Vec<u8>>) -> bool {
        let Some(was) = &self.whole else {
            return false;
        };
        let Some(next) = edit(was).filter(|n| n[..] != was[..]) else {
            return false;
        };
        let next = Bytes::from(next);
        let trailers: Vec<_> = self.frames.drain(..).filter(Frame::is_trailers).collect();
        self.frames.push_back(Frame::data(next.clone()));
        self.frames.extend(trailers);
        self.whole = Some(next);
        self.edited = true;
        true
    }

    fn len(&self) -> usize {
        self.whole.as_ref().map_or(0, Bytes::len)
    }

    fn boxed(self) -> Body {
        BodyExt::boxed(self)
    }
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = Failed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failed>>> {
        let next = match self.frames.pop_front() {
            Some(f) => Poll::Ready(Some(Ok(f))),
            None => {
                // What was held has gone: the next body may be held.
                self._turn = None;
                self.held = Lease::default();
                match self.rest.as_mut() {
                    Some(r) => {
                        let next = Pin::new(r).poll_frame(cx);
                        next.map_err(|e| Failed(self.failed(e)))
                    }
                    None => Poll::Ready(None),
                }
            }
        };
        if let Poll::Ready(Some(Ok(f))) = &next
            && let Some(t) = f.trailers_ref()
            && let Some(told) = self.trailers.take()
        {
            told(t);
        }
        if let Poll::Ready(Some(Ok(f))) = &next
            && let Some(d) = f.data_ref()
            && let Some((scan, attempt)) = self.scan.as_mut()
        {
            scan.feed(d);
            attempt.mark(|a| {
                a.scanned(scan);
                a.request_bytes(d);
            });
        }
        next
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.rest, &self.whole) {
            (None, Some(w)) => SizeHint::with_exact(w.len() as u64),
            (Some(r), _) if self.frames.is_empty() => r.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

/// A response body cut after `left` bytes (`http_truncate`), when it is
/// longer: what came before goes out, then the connection ends; the
/// stream waits for that.
struct Cut {
    inner: Body,
    left: u64,
    /// The cut is made: the next poll ends the connection.
    cut: bool,
    at_limit: Option<Box<dyn FnOnce() + Send + Sync>>,
    gone: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl hyper::body::Body for Cut {
    type Data = Bytes;
    type Error = Failed;

    fn is_end_stream(&self) -> bool {
        !self.cut && self.inner.is_end_stream()
    }

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failed>>> {
        if !self.cut {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) if d.len() as u64 > self.left => {
                        self.cut = true;
                        let keep = d.slice(..self.left as usize);
                        self.left = 0;
                        if !keep.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(keep))));
                        }
                    }
                    Ok(d) => {
                        self.left -= d.len() as u64;
                        return Poll::Ready(Some(Ok(Frame::data(d))));
                    }
                    // Trailers: the body ended within the limit.
                    Err(f) => return Poll::Ready(Some(Ok(f))),
                },
                other => return other,
            }
        }
        if let Some(f) = self.at_limit.take() {
            f();
        }
        match self.gone.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Failed("the connection ended".into())))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A body that, once sent whole (hyper lets go of it), does something:
/// ends the connection. A body that is empty stays so, so a gRPC
/// trailers-only answer still ends its stream in its one HEADERS frame.
struct Then {
    inner: Body,
    at_end: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl hyper::body::Body for Then {
    type Data = Bytes;
    type Error = Failed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Failed>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Then {
    fn drop(&mut self) {
        if let Some(f) = self.at_end.take() {
            f();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKind;
    use crate::fault::testing::spec;

    fn rewrite(pairs: &[(&str, &str)]) -> HttpRewrite {
        match spec("http_rewrite", pairs).unwrap().kind {
            FaultKind::HttpRewrite(w) => w,
            _ => unreachable!(),
        }
    }

    /// A canned reply keeps its status, headers and body, without the
    /// headers HTTP/2 forbids.
    #[test]
    fn a_canned_reply_as_http2() {
        let bytes = Bytes::from_static(
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\nconnection: close\r\ncontent-length: 2\r\n\r\nno",
        );
        let r = from_http1(&bytes).unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "2");
        assert!(r.headers().get("connection").is_none());
        assert_eq!(hyper::body::Body::size_hint(r.body()).exact(), Some(2));
    }

    /// Rewrites mean what they mean over HTTP/1.1: the path (its query
    /// kept) and headers of a request, the status and headers of a
    /// response; none that changes nothing.
    #[test]
    fn heads_are_edited_as_http11_heads_are() {
        let req = Request::builder()
            .method("POST")
            .uri("http://h:1/v1/a?x=1")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let headers = pairs(&parts.headers);
        let w = rewrite(&[
            ("path", "/v1/a"),
            ("set_path", "/v2/b"),
            ("set_header.x-n", "1"),
        ]);
        let head = edit_request(&parts, &headers, &w).unwrap();
        assert_eq!(head.uri.to_string(), "http://h:1/v2/b?x=1");
        assert_eq!(head.headers["x-n"], "1");
        assert_eq!(head.headers["content-type"], "application/json");
        let same = rewrite(&[("remove_header", "x-absent")]);
        assert!(edit_request(&parts, &headers, &same).is_none());
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        let w = rewrite(&[
            ("phase", "response"),
            ("set_status", "503"),
            ("set_header.retry-after", "1"),
        ]);
        let (status, h) = edit_response(200, &h, &w).unwrap();
        assert_eq!(
            (status, &h["retry-after"]),
            (503, &HeaderValue::from_static("1"))
        );
    }

    #[test]
    fn grpc_and_event_streams_are_never_held() {
        let h = |ct: &str| vec![("content-type".to_string(), ct.to_string())];
        assert!(holdable(&h("application/json")));
        assert!(!holdable(&h("application/grpc")));
        assert!(!holdable(&h("application/grpc+proto")));
        assert!(!holdable(&h("text/event-stream")));
    }
}
