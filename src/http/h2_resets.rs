//! An HTTP/2 upstream's `RST_STREAM(NO_ERROR)` before its answer's end,
//! kept a reset. hyper reads such a reset as the end of the response body
//! (RFC 9113 §8.1 lets a server that has *answered* stop a request's body
//! so), and would end the client's stream cleanly: a cut answer taken for
//! a complete one. So the frames from the upstream are watched on their
//! way to hyper, and a `NO_ERROR` reset of a stream whose answer began and
//! has not ended (HEADERS seen, no END_STREAM) is given [`MARK`] instead:
//! hyper fails the body with it, and the engine gives the client's stream
//! back its own code ([`restore`]). A reset after the answer's end (the
//! §8.1 case) passes as it is.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The code a marked reset carries between the watch and the engine: no
/// code HTTP/2 defines ("NCRS").
pub(crate) const MARK: u32 = 0x4e43_5253;

/// Streams watched at most: more than hyper opens at once (an upstream
/// that answers on streams never opened fails its connection in h2).
const MAX_OPEN: usize = 4096;

/// What a read of the upstream's bytes goes for at most.
const READ: usize = 16 * 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const END_STREAM: u8 = 0x1;

/// Where the watch is in the upstream's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// A frame's 9-byte header.
    Header,
    /// The rest of a frame's payload.
    Payload(usize),
    /// An RST_STREAM's error code, of this stream (held until whole).
    Code(u32),
}

/// The upstream's side of netchaos's HTTP/2 connection to it, its resets
/// watched (bytes written pass untouched).
pub(crate) struct Watched<IO> {
    io: IO,
    /// Read from the upstream, not yet handed to hyper.
    buf: BytesMut,
    /// `buf[..ready]` has been looked at and may go.
    ready: usize,
    at: At,
    /// Streams whose answer began and has not ended.
    open: HashSet<u32>,
    eof: bool,
}

impl<IO> Watched<IO> {
    pub(crate) fn new(io: IO) -> Watched<IO> {
        Watched {
            io,
            buf: BytesMut::new(),
            ready: 0,
            at: At::Header,
            open: HashSet::new(),
            eof: false,
        }
    }

    /// Looks at what was read, as far as whole frame headers and codes go.
    fn scan(&mut self) {
        loop {
            let left = self.buf.len() - self.ready;
            match self.at {
                At::Header if left >= 9 => {
                    let h = &self.buf[self.ready..self.ready + 9];
                    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                    let (kind, flags) = (h[3], h[4]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    self.ready += 9;
                    match kind {
                        HEADERS | DATA if flags & END_STREAM != 0 => {
                            self.open.remove(&stream);
                        }
                        HEADERS if self.open.len() < MAX_OPEN => {
                            self.open.insert(stream);
                        }
                        _ => {}
                    }
                    self.at = match kind {
                        RST_STREAM if len == 4 => At::Code(stream),
                        _ => At::Payload(len),
                    };
                }
                At::Payload(n) if left > 0 || n == 0 => {
                    let take = n.min(left);
                    self.ready += take;
                    self.at = match n - take {
                        0 => At::Header,
                        n => At::Payload(n),
                    };
                }
                At::Code(stream) if left >= 4 => {
                    let code = &mut self.buf[self.ready..self.ready + 4];
                    if self.open.remove(&stream) && code == [0, 0, 0, 0] {
                        code.copy_from_slice(&MARK.to_be_bytes());
                    }
                    self.ready += 4;
                    self.at = At::Header;
                }
                _ => return,
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        loop {
            if me.ready > 0 {
                let n = me.ready.min(out.remaining());
                out.put_slice(&me.buf[..n]);
                me.buf.advance(n);
                me.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                // A frame cut by the close: hyper says what it is.
                me.ready = me.buf.len();
                if me.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            me.buf.reserve(READ);
            match tokio_util::io::poll_read_buf(Pin::new(&mut me.io), cx, &mut me.buf) {
                Poll::Ready(Ok(0)) => me.eof = true,
                Poll::Ready(Ok(_)) => me.scan(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The reset an upstream's stream failed with (any code), if that is
/// what `e` is: the code it sent ([`MARK`] read back as `NO_ERROR`).
pub(crate) fn upstream_reset(e: &(dyn std::error::Error + 'static)) -> Option<h2::Reason> {
    std::iter::successors(Some(e), |e| e.source())
        .find_map(|e| e.downcast_ref::<h2::Error>())
        .filter(|h| h.is_reset() && h.is_remote())
        .and_then(h2::Error::reason)
        .map(|r| match u32::from(r) {
            MARK => h2::Reason::NO_ERROR,
            _ => r,
        })
}

/// `e` as the client's stream is to fail with it: a marked reset as the
/// upstream's own `NO_ERROR` (hyper resets the client's stream with the
/// code it finds under the error); anything else as it is.
pub(crate) fn restore(
    e: Box<dyn std::error::Error + Send + Sync>,
) -> Box<dyn std::error::Error + Send + Sync> {
    match is_marked(&*e) {
        true => h2::Error::from(h2::Reason::NO_ERROR).into(),
        false => e,
    }
}

fn is_marked(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source())
        .find_map(|e| e.downcast_ref::<h2::Error>())
        .and_then(h2::Error::reason)
        .is_some_and(|r| u32::from(r) == MARK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// What hyper reads of `wire`, arriving in pieces of `step` bytes.
    async fn through(wire: &[u8], step: usize) -> Vec<u8> {
        let (mut tx, rx) = tokio::io::duplex(64);
        let pieces: Vec<Vec<u8>> = wire.chunks(step).map(<[u8]>::to_vec).collect();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for p in pieces {
                tx.write_all(&p).await.unwrap();
                tx.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut got = Vec::new();
        Watched::new(rx).read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_no_error_reset_mid_answer_is_marked_and_after_its_end_is_not() {
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let mut wire = settings.clone();
        // Stream 1: an answer begun, two DATA, then RST_STREAM(NO_ERROR).
        wire.extend(frame(HEADERS, 0x4, 1, b"\x88"));
        wire.extend(frame(DATA, 0, 1, b"event one"));
        // Stream 3: a whole answer, then RST_STREAM(NO_ERROR) (§8.1).
        wire.extend(frame(HEADERS, 0x4, 3, b"\x88"));
        wire.extend(frame(DATA, END_STREAM, 3, b"all"));
        wire.extend(frame(RST_STREAM, 0, 3, &[0, 0, 0, 0]));
        wire.extend(frame(DATA, 0, 1, b"event two"));
        wire.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 0]));
        // Stream 5: another code passes as it is.
        wire.extend(frame(HEADERS, 0x4, 5, b"\x88"));
        wire.extend(frame(RST_STREAM, 0, 5, &[0, 0, 0, 8]));
        let mut want = wire.clone();
        let at = want.len() - 13 - 10 - 4;
        assert_eq!(want[at..at + 4], [0, 0, 0, 0]);
        want[at..at + 4].copy_from_slice(&MARK.to_be_bytes());
        for step in [1, 3, 7, 13, wire.len()] {
            assert_eq!(through(&wire, step).await, want, "in pieces of {step}");
        }
    }

    #[test]
    fn a_marked_reset_is_the_upstreams_no_error_again() {
        let marked: Box<dyn std::error::Error + Send + Sync> =
            h2::Error::from(h2::Reason::from(MARK)).into();
        let e = restore(marked);
        assert_eq!(
            e.downcast_ref::<h2::Error>().and_then(h2::Error::reason),
            Some(h2::Reason::NO_ERROR)
        );
    }
}
