//! The control API's HTTP server. Every local user can reach a loopback
//! API, so it must shed abuse instead of succumbing to it:
//!
//! * at most [`MAX_CONNECTIONS`] connections at once; beyond that a new one
//!   is closed at once (the relay's own connection limit leaves room for
//!   these, so a flood of API connections never starves the relay);
//! * a request's headers must arrive within [`HEADER_TIMEOUT`], and an idle
//!   keep-alive connection is closed after the same time (slowloris);
//! * a whole request, body included, must be served within
//!   [`REQUEST_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// API connections open at once.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's headers, and how long
/// a keep-alive connection may sit idle between requests.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one request may take from its first byte to its answer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(25);

/// Serves `app` on `listener` until `stop` fires.
pub(crate) async fn serve(listener: TcpListener, app: Router, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !std::mem::replace(&mut refused_logged, true) {
                tracing::warn!(
                    "control API: {MAX_CONNECTIONS} connections open, the most it serves; closing new ones until some end"
                );
            }
            let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
            continue;
        };
        if slots.available_permits() > MAX_CONNECTIONS / 2 {
            refused_logged = false;
        }
        let app = app.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            serve_one(sock, peer, app, stop).await;
            drop(slot);
        });
    }
}

async fn serve_one(
    sock: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    stop: CancellationToken,
) {
    let _ = sock.set_nodelay(true);
    let svc = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024)
        .serve_connection(TokioIo::new(sock), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("control API: connection from {peer}: {e}");
            }
        }
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
        }
    }
}
