//! The mock's HTTP server: HTTP/1.1, and HTTP/2 in the clear with prior
//! knowledge (h2c, as netchaos's HTTP layer speaks it to an upstream for
//! an HTTP/2 client), one task per connection.
//!
//! Bounded as any listener of netchaos's: at most [`MAX_CONNECTIONS`]
//! connections (beyond, a new one is closed at once), a request head
//! within [`HEAD_TIMEOUT`], a body of at most [`MAX_BODY`] (Anthropic's
//! own limit; beyond, the API's 413), and all bodies being read at once
//! within [`BODY_BUDGET`] (beyond, a 503 and a warning). When told to
//! stop, it accepts no more, and open connections get [`DRAIN`] to
//! finish their answers.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Mock;
use super::body::Scheduled;
use super::reply::{Payload, Reply};

/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// How long a request's head may take (and a keep-alive connection sit
/// idle before the next one).
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest request body (Anthropic's limit for Messages: 32 MB).
pub(crate) const MAX_BODY: usize = 32_000_000;
/// Bytes of request bodies held at once, over every connection.
pub(crate) const BODY_BUDGET: usize = 256 << 20;
/// How long open answers may go on once the server stops.
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

/// Told the status of each answer (the relay's counters of mocked
/// answers).
pub(crate) type Observer = Arc<dyn Fn(u16) + Send + Sync>;

/// The mock serving on a listener.
pub(crate) struct Server {
    mock: Arc<Mock>,
    observer: Option<Observer>,
    connections: Arc<Semaphore>,
    bodies: Arc<Semaphore>,
}

impl Server {
    pub(crate) fn new(mock: Arc<Mock>, observer: Option<Observer>) -> Arc<Server> {
        Arc::new(Server {
            mock,
            observer,
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            bodies: Arc::new(Semaphore::new(BODY_BUDGET)),
        })
    }

    /// Serves `listener` until `stop`, then lets open connections finish
    /// (within [`DRAIN`]).
    pub(crate) async fn serve(self: Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        let tasks = TaskTracker::new();
        let mut refused_logged = false;
        loop {
            let (sock, peer) = tokio::select! {
                _ = stop.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors, or a client gone before
                        // accept: pause rather than spin.
                        tracing::debug!("mock: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = self.connections.clone().try_acquire_owned() else {
                if !std::mem::replace(&mut refused_logged, true) {
                    tracing::warn!(
                        "mock: {MAX_CONNECTIONS} connections open, the most it serves; closing new ones until some end"
                    );
                }
                continue;
            };
            if self.connections.available_permits() > MAX_CONNECTIONS / 2 {
                refused_logged = false;
            }
            let me = self.clone();
            let stop = stop.clone();
            tasks.spawn(async move {
                me.connection(sock, peer, stop).await;
                drop(slot);
            });
        }
        tasks.close();
        tasks.wait().await;
    }

    async fn connection(
        self: Arc<Self>,
        sock: tokio::net::TcpStream,
        peer: SocketAddr,
        stop: CancellationToken,
    ) {
        let _ = sock.set_nodelay(true);
        let me = self.clone();
        let svc = hyper::service::service_fn(move |req| {
            let me = me.clone();
            async move { Ok::<_, Infallible>(me.answer(req, peer).await) }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT);
        builder.http2().timer(TokioTimer::new());
        let conn = builder.serve_connection(TokioIo::new(sock), svc);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("mock: connection from {peer}: {e}");
                }
            }
            _ = stop.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(DRAIN, conn).await;
            }
        }
    }

    /// One request: its body read (bounded), the mock's reply, sent at
    /// its moments.
    async fn answer(&self, req: Request<Incoming>, client: SocketAddr) -> Response<Scheduled> {
        let (parts, body) = req.into_parts();
        let host = parts.uri.host().map(str::to_string).or_else(|| {
            parts
                .headers
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        });
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let read = self.read(body).await;
        // A provider's clock (and a recording's) starts at the request's
        // end: its time to the first token does not count the upload.
        let arrived = Instant::now();
        let reply = match read {
            Ok((bytes, _held)) => self.mock.reply(
                parts.method.as_str(),
                path,
                host.as_deref(),
                &parts.headers,
                &bytes,
            ),
            Err(Refused::TooLarge) => self.mock.refuse(
                host.as_deref(),
                path,
                413,
                &format!("Request exceeds the maximum allowed number of bytes ({MAX_BODY})."),
            ),
            Err(Refused::Busy) => {
                tracing::warn!(
                    "mock: request bodies fill its budget ({BODY_BUDGET} bytes): answering 503"
                );
                self.mock.refuse(
                    host.as_deref(),
                    path,
                    503,
                    "The mock is holding too many request bodies at once.",
                )
            }
            Err(Refused::Gone) => self.mock.refuse(host.as_deref(), path, 400, "Bad request"),
        };
        let stream = !matches!(reply.payload, Payload::Whole { .. });
        tracing::debug!(
            "mock: {} {path} from {client}: {}{}",
            parts.method,
            reply.status,
            if stream { " (stream)" } else { "" }
        );
        if let Some(observe) = &self.observer {
            observe(reply.status);
        }
        respond(reply, arrived).await
    }

    /// The request's body, within [`MAX_BODY`] and the shared budget
    /// (held until the answer is made).
    async fn read(
        &self,
        mut body: Incoming,
    ) -> Result<(Bytes, Vec<tokio::sync::OwnedSemaphorePermit>), Refused> {
        let mut out = BytesMut::new();
        let mut held = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| Refused::Gone)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if out.len() + data.len() > MAX_BODY {
                return Err(Refused::TooLarge);
            }
            let n = u32::try_from(data.len()).map_err(|_| Refused::TooLarge)?;
            held.push(
                self.bodies
                    .clone()
                    .try_acquire_many_owned(n)
                    .map_err(|_| Refused::Busy)?,
            );
            out.extend_from_slice(&data);
        }
        Ok((out.freeze(), held))
    }
}

enum Refused {
    TooLarge,
    Busy,
    /// The client went away mid-body (nobody reads the answer).
    Gone,
}

/// The reply as a response: a whole body once it is ready (the head
/// waits for it, as a provider's does), a stream's head at once.
async fn respond(reply: Reply, arrived: Instant) -> Response<Scheduled> {
    let Reply {
        status,
        headers,
        payload,
    } = reply;
    let body = match payload {
        Payload::Whole { at, bytes } => {
            // A moment already past is no wait (the timer would round it
            // up to its next millisecond).
            if arrived + at > Instant::now() {
                tokio::time::sleep_until(arrived + at).await;
            }
            Scheduled::whole(bytes)
        }
        Payload::Stream(events) => Scheduled::new(arrived, events),
        Payload::Recorded {
            head_at,
            chunks,
            length,
        } => {
            if arrived + head_at > Instant::now() {
                tokio::time::sleep_until(arrived + head_at).await;
            }
            Scheduled::new(arrived, chunks).with_length(length)
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(&value),
        ) {
            r.headers_mut().append(n, v);
        }
    }
    r
}
