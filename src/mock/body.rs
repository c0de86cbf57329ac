//! A response body whose chunks leave at their moments (offsets from the
//! request's arrival): the events of a mocked stream, token by token. No
//! task and no channel: the body itself sleeps until its next chunk is
//! due, so a client that goes away simply drops it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

pub(crate) struct Scheduled {
    start: Instant,
    chunks: VecDeque<(Duration, Bytes)>,
    /// The whole body's length, when it was given whole (its framing then
    /// says so: a `content-length`).
    whole: Option<u64>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Scheduled {
    /// Chunks due at their offsets from `start`.
    pub(crate) fn new(start: Instant, chunks: Vec<(Duration, Bytes)>) -> Scheduled {
        Scheduled {
            start,
            chunks: chunks.into(),
            whole: None,
            sleep: None,
        }
    }

    /// The same, framed by its length when it is known (a recorded
    /// answer that had one).
    pub(crate) fn with_length(mut self, length: Option<u64>) -> Scheduled {
        self.whole = length;
        self
    }

    /// A body sent at once, with its length known.
    pub(crate) fn whole(bytes: Bytes) -> Scheduled {
        let len = bytes.len() as u64;
        let mut s = Scheduled::new(Instant::now(), vec![(Duration::ZERO, bytes)]);
        s.whole = Some(len);
        s
    }
}

impl Body for Scheduled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(&(at, _)) = self.chunks.front() else {
            return Poll::Ready(None);
        };
        let due = self.start + at;
        if Instant::now() < due {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        // Everything due by now leaves in one frame.
        let now = Instant::now();
        let (_, first) = self.chunks.pop_front().expect("a chunk is due");
        if self
            .chunks
            .front()
            .is_none_or(|(at, _)| self.start + *at > now)
        {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        let mut out = BytesMut::from(&first[..]);
        while let Some((at, _)) = self.chunks.front() {
            if self.start + *at > now {
                break;
            }
            let (_, b) = self.chunks.pop_front().expect("just seen");
            out.extend_from_slice(&b);
        }
        Poll::Ready(Some(Ok(Frame::data(out.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match self.whole {
            Some(n) if !self.chunks.is_empty() => SizeHint::with_exact(n),
            _ if self.chunks.is_empty() => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn chunks_leave_at_their_moments() {
        crate::timer::runtime_clock_only();
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Scheduled::new(
            start,
            vec![
                (ms(0), Bytes::from_static(b"a")),
                (ms(10), Bytes::from_static(b"b")),
                (ms(10), Bytes::from_static(b"c")),
                (ms(25), Bytes::from_static(b"d")),
            ],
        );
        let mut got = Vec::new();
        while let Some(f) = b.frame().await {
            let data = f.unwrap().into_data().unwrap();
            got.push((start.elapsed(), data));
        }
        assert_eq!(
            got,
            [
                (ms(0), Bytes::from_static(b"a")),
                (ms(10), Bytes::from_static(b"bc")),
                (ms(25), Bytes::from_static(b"d")),
            ]
        );
        assert!(b.is_end_stream());
        let w = Scheduled::whole(Bytes::from_static(b"{}"));
        assert_eq!(w.size_hint().exact(), Some(2));
    }
}
