//! `sse` faults on an HTTP/2 response, counted as over HTTP/1.1: a gRPC
//! response's messages (each a 5-byte prefix and its length's bytes), or
//! an event stream's events (server-sent events, NDJSON lines, AWS event
//! frames: [`super::events`]), each sent on in a DATA frame of its own.
//! Each late (`event_delay`); after N, silence (`stall_after_events`, for
//! good or for `stall_for`), the connection ended (`drop_after_events`),
//! or the stream's end: a call failed in its trailers (`grpc-status` from
//! an `error_type` that names a gRPC code, else `UNAVAILABLE`), an event
//! stream ended by the provider's error event (`error_after_events`); the
//! next one unparsable (`malformed_after_events`: a message's bytes 0xFF,
//! a protobuf wire type that does not exist; an event's JSON spoiled) or
//! cut in half, the connection ended. Events' JSON is patched and their
//! type changed as over HTTP/1.1; messages are protobuf, never patched.
//!
//! The units are relayed by a task of the stream's, through a channel of
//! [`DEPTH`] frames, so the upstream is read no faster than the client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::http::{HeaderMap, HeaderValue};
use tokio::sync::mpsc;

use super::events::{self, Format, Splitter};
use super::grpc::{self, Code};
use crate::events::GrpcStatus;
use crate::fault::Chosen;
use crate::fault::http_status::After;
use crate::fault::sse::{self, Breakage, Sse};

/// Frames in flight between the task and the client's stream.
const DEPTH: usize = 2;
/// The largest message counted (held whole while it arrives, per stream):
/// past a longer one's prefix, the rest of the response passes as it
/// comes. Streamed answers' messages are a few KiB.
const MAX_MESSAGE: usize = 256 * 1024;

/// What the task tells its stream's owner.
pub(crate) trait Host: Send + Sync + 'static {
    /// Fault `c` acted (counted once); `ended`: it ended the call so.
    fn acted(&self, c: &Chosen, ended: Option<GrpcStatus<'_>>);
    /// The connection ends (`drop_after_events`, a truncated message).
    fn end(&self, then: After);
    /// The provider's error event ended an event stream.
    fn stream_error(&self) {}
}

/// The task's frames, as the client's response body.
pub(crate) struct Channel(mpsc::Receiver<Result<Frame<Bytes>, super::h2::Failed>>);

impl hyper::body::Body for Channel {
    type Data = Bytes;
    type Error = super::h2::Failed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx)
    }
}

/// How a response's body is cut into the units `sse` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Units {
    /// A gRPC response's length-prefixed messages.
    Grpc,
    /// An event stream's events, in this format.
    Events(Format),
}

/// The body under `faults`, cut into `units`, and the task that relays it
/// (run it until the connection ends).
pub(crate) fn relay<B>(
    inner: B,
    units: Units,
    faults: Vec<(Chosen, Sse)>,
    host: impl Host,
) -> (Channel, impl Future<Output = ()> + Send + 'static)
where
    B: hyper::body::Body<Data = Bytes, Error = super::h2::Failed> + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(DEPTH);
    let task = async move {
        let mut s = Relay {
            tx,
            units,
            recorded: vec![false; faults.len()],
            faults,
            host,
            counted: 0,
        };
        s.run(inner).await;
    };
    (Channel(rx), task)
}

struct Relay<H> {
    tx: mpsc::Sender<Result<Frame<Bytes>, super::h2::Failed>>,
    units: Units,
    faults: Vec<(Chosen, Sse)>,
    recorded: Vec<bool>,
    host: H,
    counted: u64,
}

/// How a unit's turn ends.
enum Turn {
    Go,
    /// The stream is over for the client (its end, or the connection's).
    Over,
    /// Nothing more for the client, its stream left open ([`Relay::silence`]).
    Silent,
}

/// One piece of the body as it is passed on: a whole unit that counts,
/// or bytes that pass as they came (an event stream's comments, what is
/// too long to hold, what follows bytes that are no frame).
struct Unit {
    bytes: Bytes,
    counts: bool,
}

/// The units a body arriving in `pieces` is cut into, the held rest
/// last, each with whether it counts (for the fuzz targets: however it
/// is cut, no byte is lost or added).
pub(crate) fn cut(units: Units, pieces: &[&[u8]]) -> Vec<(Bytes, bool)> {
    let mut c = Cutter::new(units);
    let mut out: Vec<(Bytes, bool)> = Vec::new();
    for p in pieces {
        out.extend(
            c.push(Bytes::copy_from_slice(p))
                .into_iter()
                .map(|u| (u.bytes, u.counts)),
        );
    }
    let last = c.finish();
    out.push((last.bytes, last.counts));
    out
}

/// Cuts a body arriving in DATA frames into [`Unit`]s.
enum Cutter {
    Grpc {
        buf: BytesMut,
        /// A message too long to hold came: the rest passes uncounted.
        spilled: bool,
    },
    Events(Splitter),
}

impl Cutter {
    fn new(units: Units) -> Cutter {
        match units {
            Units::Grpc => Cutter::Grpc {
                buf: BytesMut::new(),
                spilled: false,
            },
            Units::Events(format) => Cutter::Events(Splitter::new(format)),
        }
    }

    /// The units that `data` completes.
    fn push(&mut self, data: Bytes) -> Vec<Unit> {
        match self {
            Cutter::Events(split) => split
                .push(&data)
                .into_iter()
                .map(|b| Unit {
                    bytes: b.bytes.into(),
                    counts: b.counts,
                })
                .collect(),
            Cutter::Grpc { spilled: true, .. } => vec![Unit {
                bytes: data,
                counts: false,
            }],
            Cutter::Grpc { buf, spilled } => {
                buf.extend_from_slice(&data);
                let mut out = Vec::new();
                while let Some(len) = whole(buf) {
                    out.push(Unit {
                        bytes: buf.split_to(len).freeze(),
                        counts: true,
                    });
                }
                if prefix_len(buf).is_some_and(|n| n > MAX_MESSAGE) {
                    // Too long to hold: the rest passes as it comes.
                    *spilled = true;
                    out.push(Unit {
                        bytes: buf.split().freeze(),
                        counts: false,
                    });
                }
                out
            }
        }
    }

    /// What is held when the body ends: an unfinished message, or what
    /// the splitter makes of its rest (a last NDJSON line counts).
    fn finish(&mut self) -> Unit {
        match self {
            Cutter::Events(split) => {
                let b = split.finish();
                Unit {
                    bytes: b.bytes.into(),
                    counts: b.counts,
                }
            }
            Cutter::Grpc { buf, .. } => Unit {
                bytes: buf.split().freeze(),
                counts: false,
            },
        }
    }
}

impl<H: Host> Relay<H> {
    fn record(&mut self, i: usize) {
        self.record_end(i, None);
    }

    fn record_end(&mut self, i: usize, ended: Option<GrpcStatus<'_>>) {
        if !self.recorded[i] {
            self.recorded[i] = true;
            self.host.acted(&self.faults[i].0, ended);
        }
    }

    async fn send(&self, f: Frame<Bytes>) -> bool {
        self.tx.send(Ok(f)).await.is_ok()
    }

    /// `f`, unless the client's stream goes first (the call cancelled,
    /// the connection gone): then the upstream's stream is let go at once,
    /// as it would be without netchaos.
    async fn or_gone<T>(&self, f: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = f => Some(r),
            () = self.tx.closed() => None,
        }
    }

    async fn run<B>(&mut self, mut inner: B)
    where
        B: hyper::body::Body<Data = Bytes, Error = super::h2::Failed> + Unpin,
    {
        if let Turn::Silent = self.relay_body(&mut inner).await {
            self.silence(&mut inner).await;
        }
    }

    /// The body, unit by unit, until its end, the client's, or a fault's.
    async fn relay_body<B>(&mut self, inner: &mut B) -> Turn
    where
        B: hyper::body::Body<Data = Bytes, Error = super::h2::Failed> + Unpin,
    {
        // A break after 0 units acts before the first.
        let turn = self.after(0).await;
        if !matches!(turn, Turn::Go) {
            return turn;
        }
        let mut cutter = Cutter::new(self.units);
        loop {
            let Some(next) = self.or_gone(inner.frame()).await else {
                return Turn::Over;
            };
            match next {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
                        for unit in cutter.push(d) {
                            let turn = self.unit(unit).await;
                            if !matches!(turn, Turn::Go) {
                                return turn;
                            }
                        }
                    }
                    // Trailers: the stream's end, after what is held.
                    Err(f) => {
                        return match self.unit(cutter.finish()).await {
                            Turn::Go => {
                                let _ = self.send(f).await;
                                Turn::Over
                            }
                            turn => turn,
                        };
                    }
                },
                None => return self.unit(cutter.finish()).await,
                Some(Err(e)) => {
                    let _ = self.tx.send(Err(e)).await;
                    return Turn::Over;
                }
            }
        }
    }

    /// One unit: passed on as it came if it does not count; else late by
    /// every fault's delay, then spoiled or cut in half by the first fault
    /// whose malformed unit it is, or else patched by every fault that
    /// patches (events only), and sent; then the breaks due after it.
    async fn unit(&mut self, unit: Unit) -> Turn {
        if !unit.counts {
            if unit.bytes.is_empty() || self.send(Frame::data(unit.bytes)).await {
                return Turn::Go;
            }
            return Turn::Over;
        }
        let mut bytes = unit.bytes;
        let nth = self.counted + 1;
        let (delay, delaying) = sse::event_delays(&self.faults);
        for i in delaying {
            self.record(i);
        }
        if !delay.is_zero() && self.or_gone(crate::timer::sleep(delay)).await.is_none() {
            return Turn::Over;
        }
        if let Some(i) = sse::spoiling(&self.faults, nth) {
            if let Some((_, Breakage::Truncate)) = self.faults[i].1.breaks() {
                self.record(i);
                let half = bytes.slice(..events::half(&bytes).len());
                let _ = self.send(Frame::data(half)).await;
                self.host.end(After::Close);
                return Turn::Silent;
            }
            // Counted where it spoiled something (not an empty message, an
            // AWS frame whose event is not JSON).
            if let Some(spoiled) = self.spoiled(&bytes) {
                self.record(i);
                bytes = spoiled;
            }
        } else if let Units::Events(format) = self.units {
            for i in 0..self.faults.len() {
                let patched = self.faults[i]
                    .1
                    .patch()
                    .and_then(|p| events::patch(&bytes, p, format));
                if let Some(p) = patched {
                    self.record(i);
                    bytes = p.into();
                }
            }
        }
        self.counted = nth;
        if !self.send(Frame::data(bytes)).await {
            return Turn::Over;
        }
        self.after(nth).await
    }

    /// The unit made unparsable at the same length, if that changes it.
    fn spoiled(&self, bytes: &[u8]) -> Option<Bytes> {
        match self.units {
            Units::Grpc => (bytes.len() > 5).then(|| {
                let mut msg = bytes.to_vec();
                msg[5..].fill(0xff);
                msg.into()
            }),
            Units::Events(format) => {
                let spoiled = events::spoil(bytes, format);
                (spoiled != bytes).then(|| spoiled.into())
            }
        }
    }

    /// The breaks due after `n` units, in rule order, as over HTTP/1.1:
    /// a timed stall lets the next act after it; silence, a dropped
    /// connection or an error ends their turns.
    async fn after(&mut self, n: u64) -> Turn {
        for i in 0..self.faults.len() {
            let Some((at, b)) = self.faults[i].1.breaks() else {
                continue;
            };
            if at != n {
                continue;
            }
            match b {
                Breakage::Stall(Some(d)) => {
                    self.record(i);
                    if self.or_gone(crate::timer::sleep(d)).await.is_none() {
                        return Turn::Over;
                    }
                }
                Breakage::Stall(None) => {
                    self.record(i);
                    return Turn::Silent;
                }
                Breakage::Drop(then) => {
                    self.record(i);
                    self.host.end(then);
                    return Turn::Silent;
                }
                Breakage::Error => {
                    self.error(i).await;
                    return Turn::Over;
                }
                Breakage::BadJson | Breakage::Truncate => {}
            }
        }
        Turn::Go
    }

    /// `error_after_events`: a call fails in its trailers; an event stream
    /// gets the provider's error event, and its end (the upstream's
    /// stream is let go, still streaming).
    async fn error(&mut self, i: usize) {
        match self.units {
            Units::Grpc => {
                let (code, message) = error_of(&self.faults[i].1);
                self.record_end(
                    i,
                    Some(GrpcStatus {
                        code: code.number().into(),
                        message: &message,
                    }),
                );
                let answer = grpc::Answer {
                    code,
                    message,
                    pushback: None,
                };
                let mut trailers = HeaderMap::new();
                for (k, v) in answer.headers() {
                    if k != "content-type" {
                        if let Ok(v) = HeaderValue::from_str(&v) {
                            trailers.insert(k, v);
                        }
                    }
                }
                let _ = self.send(Frame::trailers(trailers)).await;
            }
            Units::Events(format) => {
                self.record(i);
                self.host.stream_error();
                if let Some((event, data)) = self.faults[i].1.error_event(format) {
                    let error = events::error_event(format, event, data);
                    let _ = self.send(Frame::data(error.into())).await;
                }
            }
        }
    }

    /// Nothing more: the stream stays open until the client or the
    /// connection ends it. What the upstream still sends is read and
    /// dropped, as over HTTP/1.1, so that its flow-control windows are
    /// given back and the connection's other streams keep moving; its end
    /// is not passed on.
    async fn silence<B>(&self, inner: &mut B)
    where
        B: hyper::body::Body<Data = Bytes, Error = super::h2::Failed> + Unpin,
    {
        while let Some(Some(Ok(_))) = self.or_gone(inner.frame()).await {}
        self.tx.closed().await;
    }
}

/// The length of the message whose prefix starts `buf`, if it is there.
fn prefix_len(buf: &[u8]) -> Option<usize> {
    let p = buf.get(..5)?;
    Some(5 + u32::from_be_bytes([p[1], p[2], p[3], p[4]]) as usize)
}

/// The length of the whole message at the front of `buf`, if it is all
/// there (and not over [`MAX_MESSAGE`]).
fn whole(buf: &[u8]) -> Option<usize> {
    prefix_len(buf).filter(|n| *n <= MAX_MESSAGE && *n <= buf.len())
}

/// The status and message `error_after_events` ends a call with: its
/// `error_type` when that names a gRPC code (Gemini's names are
/// `google.rpc` codes, the same), else `UNAVAILABLE`; the error's message.
fn error_of(s: &Sse) -> (Code, String) {
    let code = s
        .error_type()
        .and_then(|t| Code::parse(t).ok())
        .unwrap_or_else(|| Code::parse("UNAVAILABLE").expect("a code"));
    (code, format!("{} (injected by netchaos)", code.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_by_their_prefix() {
        let mut b = vec![0, 0, 0, 0, 3, b'a', b'b'];
        assert_eq!((prefix_len(&b), whole(&b)), (Some(8), None));
        b.push(b'c');
        assert_eq!(whole(&b), Some(8));
        assert_eq!(whole(&b[..4]), None);
        let huge = [0u8, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(whole(&huge), None);
        assert!(prefix_len(&huge).unwrap() > MAX_MESSAGE);
    }

    fn cut(c: &mut Cutter, data: &[u8]) -> Vec<(Vec<u8>, bool)> {
        c.push(Bytes::copy_from_slice(data))
            .into_iter()
            .map(|u| (u.bytes.to_vec(), u.counts))
            .collect()
    }

    #[test]
    fn messages_are_cut_across_frames_until_one_is_too_long() {
        let msg = |s: &[u8]| [&[0, 0, 0, 0, s.len() as u8][..], s].concat();
        let mut c = Cutter::new(Units::Grpc);
        let two = [msg(b"ab"), msg(b"cde")].concat();
        assert!(cut(&mut c, &two[..4]).is_empty());
        assert_eq!(
            cut(&mut c, &two[4..]),
            [(msg(b"ab"), true), (msg(b"cde"), true)]
        );
        // A message over MAX_MESSAGE: it and all after it pass uncounted.
        assert_eq!(
            cut(&mut c, &[0, 0, 0x10, 0, 0]),
            [(vec![0, 0, 0x10, 0, 0], false)]
        );
        assert_eq!(cut(&mut c, &msg(b"x")), [(msg(b"x"), false)]);
        assert!(c.finish().bytes.is_empty());
    }

    #[test]
    fn events_are_cut_as_over_http1() {
        let mut c = Cutter::new(Units::Events(Format::EventStream));
        assert_eq!(
            cut(&mut c, b": ping\n\ndata: 1\n\ndata: 2"),
            [
                (b": ping\n\n".to_vec(), false),
                (b"data: 1\n\n".to_vec(), true)
            ]
        );
        // An unfinished event at the end is no event.
        let last = c.finish();
        assert_eq!((&last.bytes[..], last.counts), (&b"data: 2"[..], false));
        let mut c = Cutter::new(Units::Events(Format::JsonLines));
        assert!(cut(&mut c, b"{\"a\":1}").is_empty());
        assert!(c.finish().counts);
    }
}
