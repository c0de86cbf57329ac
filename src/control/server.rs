//! The control API's HTTP server. Every local user can reach a loopback
//! API, so it must shed abuse instead of succumbing to it, without making
//! legitimate clients (a test suite's hundred parallel workers, a
//! `/populate` of hundreds of proxies, a pooled client idle between tests)
//! pay for it. It is bounded by memory and time per connection, not by a
//! small count:
//!
//! * at most [`MAX_CONNECTIONS`] connections at once; when all are taken, a
//!   new one closes an idle one — first those never answered (a
//!   slowloris's half-sent head or trickled body), then the one idle
//!   longest — and is refused only when every connection is being
//!   answered;
//! * a connection's buffers hold at most [`MAX_BUF`]; an idle keep-alive
//!   connection is closed after [`IDLE_TIMEOUT`] (Toxiproxy's 60 s);
//! * a request body may be [`BODY_LIMIT`](super::BODY_LIMIT) long, and all
//!   bodies being read at once share [`BODY_BUDGET`] (beyond it: 503);
//! * a whole request, body included, must be served within
//!   [`REQUEST_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// API connections open at once (the relay's own connection limit leaves
/// room for these, so a flood of API connections never starves it).
pub(crate) const MAX_CONNECTIONS: usize = 512;
/// How long a keep-alive connection may sit idle between requests, and a
/// new one before its first request's head is in.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one request may take from its first byte to its answer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(25);
/// One connection's read and write buffers, at most.
pub(crate) const MAX_BUF: usize = 64 * 1024;
/// Bytes of request bodies read at once, over every connection.
pub(crate) const BODY_BUDGET: usize = 64 << 20;

/// One connection, as the eviction policy sees it.
pub(crate) struct Activity {
    /// In a request (its head is in, its answer not yet sent).
    busy: AtomicBool,
    /// When it was last busy, in milliseconds since the server started.
    last: AtomicU64,
    /// It has been answered at least once: evicted after the ones never
    /// answered (a slowloris), which a pooled client's idle connection is
    /// not.
    served: AtomicBool,
    /// Ends it gracefully (netchaos stops).
    close: CancellationToken,
    /// Ends it at once: it was the idlest when a newcomer needed its slot.
    evict: CancellationToken,
}

impl Activity {
    /// Marks the connection busy until the returned guard drops.
    pub(crate) fn busy(self: &Arc<Self>, epoch: Instant) -> impl Drop + Send + use<> {
        self.busy.store(true, Ordering::Release);
        Busy(self.clone(), epoch)
    }
}

struct Busy(Arc<Activity>, Instant);

impl Drop for Busy {
    fn drop(&mut self) {
        let ms = self.1.elapsed().as_millis() as u64;
        self.0.last.store(ms, Ordering::Release);
        self.0.served.store(true, Ordering::Release);
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Per connection, in each request's extensions: its activity, and when
/// the server started (the clock `last` counts from).
#[derive(Clone)]
pub(crate) struct ConnState {
    pub activity: Arc<Activity>,
    pub epoch: Instant,
}

/// The bytes request bodies may hold at once.
pub(crate) fn body_budget() -> &'static Arc<Semaphore> {
    static BUDGET: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    BUDGET.get_or_init(|| Arc::new(Semaphore::new(BODY_BUDGET)))
}

/// Serves `app` on `listener` until `stop` fires.
pub(crate) async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let epoch = Instant::now();
    let open: Arc<Mutex<Vec<Arc<Activity>>>> = Arc::default();
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors or a client gone before accept: pause
                // briefly rather than spin.
                tracing::debug!("control API: accept: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let activity = Arc::new(Activity {
            busy: AtomicBool::new(false),
            last: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            served: AtomicBool::new(false),
            close: stop.child_token(),
            evict: CancellationToken::new(),
        });
        {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            open.retain(|a| !a.close.is_cancelled() && !a.evict.is_cancelled());
            if open.len() >= MAX_CONNECTIONS {
                let idlest = open
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| !a.busy.load(Ordering::Acquire))
                    .min_by_key(|(_, a)| {
                        (
                            a.served.load(Ordering::Acquire),
                            a.last.load(Ordering::Acquire),
                        )
                    })
                    .map(|(i, _)| i);
                match idlest {
                    Some(i) => open.swap_remove(i).evict.cancel(),
                    None => {
                        if !std::mem::replace(&mut refused_logged, true) {
                            tracing::warn!(
                                "control API: {MAX_CONNECTIONS} connections in the middle of a request, \
                                 the most it serves; closing new ones until some end"
                            );
                        }
                        let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
                        continue;
                    }
                }
            }
            if open.len() < MAX_CONNECTIONS / 2 {
                refused_logged = false;
            }
            open.push(activity.clone());
        }
        let app = app.clone();
        tokio::spawn(async move {
            let close = activity.close.clone();
            serve_one(sock, peer, app, ConnState { activity, epoch }).await;
            // Done: no longer counted.
            close.cancel();
        });
    }
}

async fn serve_one(sock: tokio::net::TcpStream, peer: SocketAddr, app: Router, state: ConnState) {
    let _ = sock.set_nodelay(true);
    let local = sock.local_addr().unwrap_or(peer);
    let close = state.activity.close.clone();
    let evict = state.activity.evict.clone();
    // Who asks, for the listen policy (`listen::refusal`), and the
    // connection's activity, for eviction.
    let app = app
        .layer(axum::Extension(super::listen::ApiClient { peer, local }))
        .layer(axum::Extension(state));
    let svc = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(IDLE_TIMEOUT)
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(sock), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("control API: connection from {peer}: {e}");
            }
        }
        _ = close.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
        // Idle (or a head still coming): nothing to finish.
        _ = evict.cancelled() => {}
    }
}
