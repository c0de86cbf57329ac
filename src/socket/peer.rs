//! A peer as a direction writes to it: its TCP socket, or a TLS session
//! over that socket (HTTPS terminated or originated for the HTTP layer).
//! The socket stays at hand either way, for what TLS cannot say itself: a
//! half-close, a reset, a readiness error.
//!
//! A TLS peer may end its stream two ways: with `close_notify` then a
//! FIN, or with a bare FIN (Python, Go, Node and Java close kept
//! connections so). Either is a clean close of the TCP connection, and is
//! passed on as it came ([`TlsRead`], [`TlsEnd`]): a FIN, with
//! `close_notify` before it only when the source sent one.
//!
//! [`TcpRef`] lets TLS (and the HTTP layer's readers) use a socket the
//! connection shares by reference: the socket is owned by the connection's
//! task, which also needs it for lingers and RSTs.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::sockopt;

/// A shared socket as an async byte stream.
#[derive(Clone, Copy)]
pub(crate) struct TcpRef<'a>(pub(crate) &'a TcpStream);

impl AsyncRead for TcpRef<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Read straight into the unfilled part, as tokio's own TcpStream
        // does: zeroing it first (`initialize_unfilled`) cost the HTTP
        // layer a tenth of its CPU on a download (its reads are up to
        // 512 KiB).
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            let read = self.0.try_io(Interest::READABLE, || {
                // SAFETY: recv writes at most `unfilled.len()` bytes into
                // it (uninitialised memory the kernel only writes) and
                // says how many; nothing reads them before that.
                let unfilled = unsafe { buf.unfilled_mut() };
                let n = unsafe {
                    libc::recv(
                        self.0.as_raw_fd(),
                        unfilled.as_mut_ptr().cast(),
                        unfilled.len(),
                        0,
                    )
                };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            });
            match read {
                Ok(n) => {
                    // SAFETY: recv initialised the first `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for TcpRef<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Tried before waiting for readiness (see sockopt::send_now).
        loop {
            match sockopt::send_now(self.0, buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(self.0.poll_write_ready(cx))?
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        sockopt::shutdown_write(self.0);
        Poll::Ready(Ok(()))
    }
}

/// How a peer's TLS stream ended, shared by its reader ([`TlsRead`]) and
/// the sink its bytes go to, which ends the same way.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsEnd(Arc<AtomicU8>);

impl TlsEnd {
    const OPEN: u8 = 0;
    const NOTIFIED: u8 = 1;
    const BARE: u8 = 2;

    /// Whether the peer closed its socket without `close_notify`.
    pub(crate) fn bare(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::BARE
    }

    fn set(&self, how: u8) {
        let _ = self
            .0
            .compare_exchange(Self::OPEN, how, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The read side of a TLS session, where a peer that closed its socket
/// without `close_notify` (rustls: `UnexpectedEof`) has simply ended its
/// stream: the end of the bytes, as the server would have read it
/// directly (a FIN), not a failure that resets the connection. So has a
/// peer that sent a fatal alert, which it follows with its FIN (OpenSSL
/// answers a bare FIN with `decode_error`): the alert cannot be passed on
/// (nor made: rustls sends none of its own), the FIN is, bare. (Should an
/// RST follow, the connection's watch on the socket passes that on.)
pub(crate) struct TlsRead<R> {
    inner: R,
    end: TlsEnd,
}

impl<R> TlsRead<R> {
    pub(crate) fn new(inner: R, end: TlsEnd) -> Self {
        TlsRead { inner, end }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for TlsRead<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match ready!(Pin::new(&mut self.inner).poll_read(cx, buf)) {
            Ok(()) => {
                if buf.filled().len() == before && buf.remaining() > 0 {
                    self.end.set(TlsEnd::NOTIFIED);
                }
                Poll::Ready(Ok(()))
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof || crate::tls::is_alert(&e) => {
                self.end.set(TlsEnd::BARE);
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// The write side of a TLS session.
pub(crate) type TlsWrite<'a> = Box<dyn AsyncWrite + Send + Unpin + 'a>;

/// Where a direction writes.
pub(crate) enum Sink<'a> {
    Tcp(&'a TcpStream),
    Tls {
        session: TlsWrite<'a>,
        socket: &'a TcpStream,
        /// How the direction's source ended: a bare FIN is passed on bare.
        source: TlsEnd,
    },
    /// A peer inside netchaos (the HTTP/2 layer's end of an in-memory
    /// pipe). Once it has gone, what is written is dropped: the
    /// connection is ending, and its sockets say how.
    Local(TlsWrite<'a>),
}

/// How long a TLS close (its close_notify) may take before the socket is
/// half-closed anyway.
const TLS_CLOSE: std::time::Duration = std::time::Duration::from_secs(2);

impl Sink<'_> {
    /// The socket under the sink (none under a local one).
    pub(crate) fn socket(&self) -> Option<&TcpStream> {
        match self {
            Sink::Tcp(s) => Some(s),
            Sink::Tls { socket, .. } => Some(socket),
            Sink::Local(_) => None,
        }
    }

    /// Writes all of `buf` (through TLS: and flushes it to the socket).
    pub(crate) async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Tcp(s) => super::sockopt::write_all(s, buf).await,
            Sink::Tls { session, .. } => {
                session.write_all(buf).await?;
                session.flush().await
            }
            Sink::Local(w) => {
                let _ = w.write_all(buf).await;
                Ok(())
            }
        }
    }

    /// Writes the last bytes before a FIN ([`Sink::finish`], called next):
    /// on a plain socket they wait for it, and the last segment carries
    /// both (a client that reads them finds the FIN there, as when the
    /// server's answer and its close reach it directly). Through TLS, as
    /// [`Sink::write_all`].
    pub(crate) async fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Tcp(s) => super::sockopt::write_all_flagged(s, buf, super::sockopt::MORE).await,
            _ => self.write_all(buf).await,
        }
    }

    /// Ends as the direction's source ended: a TLS sink sends its
    /// `close_notify` only when the source's TLS did not end bare.
    pub(crate) fn follow(&mut self, end: &TlsEnd) {
        if let Sink::Tls { source, .. } = self {
            *source = end.clone();
        }
    }

    /// Half-closes: a FIN (after TLS's close_notify, unless the source
    /// closed without one).
    pub(crate) async fn finish(&mut self) {
        match self {
            Sink::Tcp(s) => sockopt::shutdown_write(s),
            Sink::Tls {
                session,
                socket,
                source,
            } => {
                if !source.bare() {
                    let _ = tokio::time::timeout(TLS_CLOSE, session.shutdown()).await;
                }
                sockopt::shutdown_write(socket);
            }
            Sink::Local(w) => {
                let _ = w.shutdown().await;
            }
        }
    }
}
