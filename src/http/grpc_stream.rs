//! `sse` faults on a gRPC response over HTTP/2, counted in messages (each
//! a 5-byte prefix and its length's bytes) as event streams count events:
//! each message late (`event_delay`); after N, silence (`stall_after_events`,
//! for good or for `stall_for`), the connection ended (`drop_after_events`),
//! the call failed in its trailers (`error_after_events`: `grpc-status`
//! from an `error_type` that names a gRPC code, else `UNAVAILABLE`), the
//! next message unparsable (`malformed_after_events`: its bytes 0xFF, a
//! protobuf wire type that does not exist) or cut in half, the connection
//! ended. JSON patches do not apply (the messages are protobuf).
//!
//! The messages are relayed by a task of the stream's, through a channel
//! of [`DEPTH`] frames, so the upstream is read no faster than the client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::http::{HeaderMap, HeaderValue};
use tokio::sync::mpsc;

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

/// The body under `faults`, and the task that relays it (run it until the
/// connection ends).
pub(crate) fn relay<B>(
    inner: B,
    faults: Vec<(Chosen, Sse)>,
    host: impl Host,
) -> (Channel, impl Future<Output = ()> + Send + 'static)
where
    B: hyper::body::Body<Data = Bytes, Error = super::h2::Failed> + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(DEPTH);
    let task = async move {
        let mut s = Messages {
            tx,
            recorded: vec![false; faults.len()],
            faults,
            host,
            counted: 0,
        };
        s.run(inner).await;
    };
    (Channel(rx), task)
}

struct Messages<H> {
    tx: mpsc::Sender<Result<Frame<Bytes>, super::h2::Failed>>,
    faults: Vec<(Chosen, Sse)>,
    recorded: Vec<bool>,
    host: H,
    counted: u64,
}

/// How a message's turn ends.
enum Turn {
    Go,
    /// The stream is over for the client (its end, or the connection's).
    Over,
}

impl<H: Host> Messages<H> {
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
        // A break after 0 messages acts before the first.
        if let Turn::Over = self.after(0).await {
            return;
        }
        let mut buf = BytesMut::new();
        loop {
            while let Some(len) = whole(&buf) {
                let msg = buf.split_to(len);
                if let Turn::Over = self.message(msg).await {
                    return;
                }
            }
            if prefix_len(&buf).is_some_and(|n| n > MAX_MESSAGE) {
                // Too long to hold: the rest passes as it comes.
                if !self.send(Frame::data(buf.split().freeze())).await {
                    return;
                }
                while let Some(Some(f)) = self.or_gone(inner.frame()).await {
                    if self.tx.send(f).await.is_err() {
                        return;
                    }
                }
                return;
            }
            let Some(next) = self.or_gone(inner.frame()).await else {
                return;
            };
            match next {
                None => {
                    if !buf.is_empty() {
                        let _ = self.send(Frame::data(buf.split().freeze())).await;
                    }
                    return;
                }
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => buf.extend_from_slice(&d),
                    // Trailers: the call's end, after what is held.
                    Err(f) => {
                        if !buf.is_empty() && !self.send(Frame::data(buf.split().freeze())).await {
                            return;
                        }
                        let _ = self.send(f).await;
                        return;
                    }
                },
                Some(Err(e)) => {
                    let _ = self.tx.send(Err(e)).await;
                    return;
                }
            }
        }
    }

    /// One whole message: late by every fault's delay, spoiled by the
    /// first fault whose malformed message it is, then sent; then the
    /// breaks due after it.
    async fn message(&mut self, mut msg: BytesMut) -> Turn {
        let nth = self.counted + 1;
        let (delay, delaying) = sse::event_delays(&self.faults);
        for i in delaying {
            self.record(i);
        }
        if !delay.is_zero() && self.or_gone(crate::timer::sleep(delay)).await.is_none() {
            return Turn::Over;
        }
        if let Some(i) = sse::spoiling(&self.faults, nth) {
            match self.faults[i].1.breaks() {
                Some((_, Breakage::Truncate)) => {
                    self.record(i);
                    let half = msg.len() / 2;
                    let _ = self.send(Frame::data(msg.split_to(half).freeze())).await;
                    self.host.end(After::Close);
                    return self.silence().await;
                }
                // Counted where it spoiled something (not an empty message).
                _ if msg.len() > 5 => {
                    self.record(i);
                    for b in &mut msg[5..] {
                        *b = 0xff;
                    }
                }
                _ => {}
            }
        }
        self.counted = nth;
        if !self.send(Frame::data(msg.freeze())).await {
            return Turn::Over;
        }
        self.after(nth).await
    }

    /// The breaks due after `n` messages, in rule order, as over HTTP/1.1:
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
                    return self.silence().await;
                }
                Breakage::Drop(then) => {
                    self.record(i);
                    self.host.end(then);
                    return self.silence().await;
                }
                Breakage::Error => {
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
                    return Turn::Over;
                }
                Breakage::BadJson | Breakage::Truncate => {}
            }
        }
        Turn::Go
    }

    /// Nothing more: the stream stays open until the client or the
    /// connection ends it.
    async fn silence(&self) -> Turn {
        self.tx.closed().await;
        Turn::Over
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
}
