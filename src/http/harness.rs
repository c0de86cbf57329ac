//! In-process tests of the HTTP engines on a paused clock, with faults
//! parsed from `--fault` flags — no socket, no curl, no sleep. HTTP/1.1
//! ([`super::exchange`]): its two sides driven over in-memory streams,
//! what the client and the upstream would receive read off the
//! pipelines' outputs item by item (bytes, FIN, close, RST) with the
//! virtual time each arrived at. HTTP/2 ([`super::h2`]): the engine
//! between the `h2` crate's client and server over in-memory streams.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::exchange::{self, Exchange};
use crate::events::{ConnInfo, Dst, Events};
use crate::fault::stage::{Item, ItemKind, Output};
use crate::fault::{Chosen, FaultSpec};

/// An exchange with `faults` (flags), its events, and the sender that
/// keeps its faults.
pub(super) fn exchange_with(
    faults: &[&str],
) -> (Exchange, Arc<Events>, watch::Sender<Arc<Vec<Chosen>>>) {
    crate::timer::runtime_clock_only();
    let events = Arc::new(Events::in_memory());
    let chosen: Vec<Chosen> = faults
        .iter()
        .enumerate()
        .map(|(i, f)| Chosen {
            id: i as u64,
            rule: "cli".into(),
            spec: Arc::new(spec(f)),
            seed: 7,
        })
        .collect();
    let (faults_tx, faults) = watch::channel(Arc::new(chosen));
    let client_addr: SocketAddr = "127.0.0.1:40000".parse().expect("an address");
    let conn = Arc::new(ConnInfo {
        id: 1,
        client: client_addr,
        dst: Dst::Addr("127.0.0.1:8080".parse().expect("an address")),
        host: None,
        proxy: Some("test".into()),
        counters: events.stats.proxy("test"),
        faulted: Default::default(),
        marks: Default::default(),
        mock: None,
    });
    let x = Exchange {
        faults,
        epoch: Instant::now(),
        events: events.clone(),
        conn,
        sni: None,
        rewrite_host: None,
        stopping: CancellationToken::new(),
    };
    (x, events, faults_tx)
}

/// One connection through the engine: the client's and the upstream's
/// ends, and what each receives.
struct Pair {
    client: DuplexStream,
    upstream: DuplexStream,
    to_upstream: mpsc::Receiver<Item>,
    to_client: mpsc::Receiver<Item>,
    events: Arc<Events>,
    began: Instant,
    /// The faults' sender: the engine follows it while it lives.
    _faults: watch::Sender<Arc<Vec<Chosen>>>,
}

/// What one direction delivered until it ended (or went quiet for a
/// virtual minute): its bytes, how it ended, and when its first byte came.
#[derive(Debug, Default)]
struct Got {
    bytes: BytesMut,
    end: Option<ItemKind>,
    first_at: Option<Duration>,
}

impl Got {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

fn spec(flag: &str) -> FaultSpec {
    crate::profile::parse_fault_flag(flag).unwrap_or_else(|e| panic!("{flag}: {e}"))
}

impl Pair {
    /// The engine between a client and an upstream, with `faults` (flags).
    fn new(faults: &[&str]) -> Pair {
        let (x, events, faults_tx) = exchange_with(faults);
        let (requests, responses) = exchange::sides(x);
        let (client, engine_client) = tokio::io::duplex(1 << 16);
        let (upstream, engine_upstream) = tokio::io::duplex(1 << 16);
        let (up_tx, to_upstream) = mpsc::channel(64);
        let (down_tx, to_client) = mpsc::channel(64);
        tokio::spawn(requests.run(engine_client, Output::new(up_tx)));
        tokio::spawn(responses.run(engine_upstream, Output::new(down_tx)));
        Pair {
            client,
            upstream,
            to_upstream,
            to_client,
            events,
            began: Instant::now(),
            _faults: faults_tx,
        }
    }

    /// Reads one direction until it ends, or until nothing has come for a
    /// virtual minute (a keep-alive connection waiting for more).
    async fn drain(rx: &mut mpsc::Receiver<Item>, began: Instant) -> Got {
        let mut got = Got::default();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
                Ok(Some(Item {
                    kind: ItemKind::Data(b),
                    at,
                })) => {
                    got.first_at.get_or_insert(at - began);
                    got.bytes.extend_from_slice(&b);
                }
                Ok(Some(Item { kind, .. })) => {
                    got.end = Some(kind);
                    return got;
                }
                Ok(None) | Err(_) => return got,
            }
        }
    }

    async fn upstream_gets(&mut self) -> Got {
        Self::drain(&mut self.to_upstream, self.began).await
    }

    async fn client_gets(&mut self) -> Got {
        Self::drain(&mut self.to_client, self.began).await
    }
}

const GET: &[u8] = b"GET /v1/messages HTTP/1.1\r\nHost: api.test\r\n\r\n";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

#[tokio::test(start_paused = true)]
async fn without_a_fault_both_ways_pass_byte_exact() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_status:status=529,path=/other"]);
    p.client.write_all(GET).await.unwrap();
    p.client.shutdown().await.unwrap();
    let up = p.upstream_gets().await;
    assert_eq!(&up.bytes[..], GET);
    assert_eq!(up.end, Some(ItemKind::Fin));
    p.upstream.write_all(OK).await.unwrap();
    p.upstream.shutdown().await.unwrap();
    let down = p.client_gets().await;
    assert_eq!(&down.bytes[..], OK);
    assert_eq!(down.end, Some(ItemKind::Fin));
    let s = &p.events.stats;
    assert_eq!(
        s.http_requests.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(s.http_faulted.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_status_fault_answers_in_the_upstreams_place() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_status:status=529,retry_after=2s"]);
    p.client.write_all(GET).await.unwrap();
    let down = Pair::drain(&mut p.to_client, p.began).await;
    let text = down.text();
    assert!(text.starts_with("HTTP/1.1 529 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 2\r\n"),
        "{text}"
    );
    // The connection is kept for the next request; the upstream saw none.
    p.client.shutdown().await.unwrap();
    let up = p.upstream_gets().await;
    assert!(up.bytes.is_empty(), "{:?}", up.text());
    let faulted = p.events.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_status", 529, None)), Some(&1));
}

#[tokio::test(start_paused = true)]
async fn a_request_delay_holds_the_request_on_the_virtual_clock() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_delay:delay=1500ms,phase=request"]);
    p.client.write_all(GET).await.unwrap();
    p.client.shutdown().await.unwrap();
    let up = p.upstream_gets().await;
    assert_eq!(&up.bytes[..], GET);
    let at = up.first_at.expect("the request went up");
    assert!(
        at >= Duration::from_millis(1500) && at < Duration::from_millis(1510),
        "{at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_truncated_body_ends_the_connection_after_its_bytes() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_truncate:after_bytes=2"]);
    p.client.write_all(GET).await.unwrap();
    let _ = within_a_minute(p.to_upstream.recv()).await;
    p.upstream.write_all(OK).await.unwrap();
    let down = p.client_gets().await;
    let text = down.text();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.ends_with("\r\n\r\nhe"), "{text}");
    assert_eq!(down.end, Some(ItemKind::Close));
}

#[tokio::test(start_paused = true)]
async fn an_abort_resets_before_the_upstream_sees_the_request() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_abort"]);
    p.client.write_all(GET).await.unwrap();
    let down = p.client_gets().await;
    assert!(down.bytes.is_empty(), "{:?}", down.text());
    assert_eq!(down.end, Some(ItemKind::Reset));
    let up = p.upstream_gets().await;
    assert!(up.bytes.is_empty(), "{:?}", up.text());
}

#[tokio::test(start_paused = true)]
async fn only_the_matching_request_of_a_keep_alive_connection_is_faulted() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_status:status=429,path=/v1/b"]);
    let a = b"GET /v1/a HTTP/1.1\r\nHost: api.test\r\n\r\n";
    let b = b"GET /v1/b HTTP/1.1\r\nHost: api.test\r\n\r\n";
    p.client.write_all(a).await.unwrap();
    let mut up = BytesMut::new();
    while up.len() < a.len() {
        match within_a_minute(p.to_upstream.recv()).await.map(|i| i.kind) {
            Some(ItemKind::Data(d)) => up.extend_from_slice(&d),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(&up[..], a);
    p.upstream.write_all(OK).await.unwrap();
    let mut down = BytesMut::new();
    while down.len() < OK.len() {
        match within_a_minute(p.to_client.recv()).await.map(|i| i.kind) {
            Some(ItemKind::Data(d)) => down.extend_from_slice(&d),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(&down[..], OK);
    p.client.write_all(b).await.unwrap();
    p.client.shutdown().await.unwrap();
    let down = p.client_gets().await;
    assert!(down.text().starts_with("HTTP/1.1 429 "), "{}", down.text());
    let up = p.upstream_gets().await;
    assert!(up.bytes.is_empty(), "{:?}", up.text());
}

/// An event stream of `n` events, chunked, as an LLM API streams.
fn sse_answer(n: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for i in 0..n {
        let ev = format!("event: message_delta\ndata: {{\"i\":{i}}}\n\n");
        body.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let mut out =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    out.extend_from_slice(&body);
    out
}

#[tokio::test(start_paused = true)]
async fn a_stream_drops_after_its_nth_event() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["sse:drop_after_events=2"]);
    p.client.write_all(GET).await.unwrap();
    let _ = within_a_minute(p.to_upstream.recv()).await;
    p.upstream.write_all(&sse_answer(5)).await.unwrap();
    let down = p.client_gets().await;
    let text = down.text();
    assert!(text.contains("\"i\":1"), "{text}");
    assert!(!text.contains("\"i\":2"), "{text}");
    assert_eq!(down.end, Some(ItemKind::Close), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_rewrite_changes_the_request_that_goes_up() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_rewrite:set_path=/v2/messages,set_header.X-Test=1"]);
    p.client.write_all(GET).await.unwrap();
    p.client.shutdown().await.unwrap();
    let up = p.upstream_gets().await;
    let text = up.text();
    assert!(text.starts_with("GET /v2/messages HTTP/1.1\r\n"), "{text}");
    assert!(text.contains("X-Test: 1\r\n"), "{text}");
}

/// `Expect: 100-continue`: the upstream's interim answer reaches the
/// client before the body goes up, and the final answer after it; with
/// a fault answering in the upstream's place, the client gets that
/// answer at once, never a 100 that would have it send its body.
#[tokio::test(start_paused = true)]
async fn expect_100_continue_is_neither_stalled_nor_invented() {
    crate::timer::runtime_clock_only();
    let head = b"POST /v1/messages HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n";
    let mut p = Pair::new(&["http_delay:delay=1ms,path=/none"]);
    p.client.write_all(head).await.unwrap();
    let mut up = BytesMut::new();
    while up.len() < head.len() {
        match within_a_minute(p.to_upstream.recv()).await.map(|i| i.kind) {
            Some(ItemKind::Data(d)) => up.extend_from_slice(&d),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(&up[..], head);
    p.upstream
        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
        .await
        .unwrap();
    let interim = within_a_minute(p.to_client.recv()).await.map(|i| i.kind);
    assert_eq!(
        interim,
        Some(ItemKind::Data(bytes::Bytes::from_static(
            b"HTTP/1.1 100 Continue\r\n\r\n"
        )))
    );
    p.client.write_all(b"body").await.unwrap();
    p.client.shutdown().await.unwrap();
    let rest = p.upstream_gets().await;
    assert_eq!(&rest.bytes[..], b"body");
    p.upstream.write_all(OK).await.unwrap();
    p.upstream.shutdown().await.unwrap();
    assert_eq!(&p.client_gets().await.bytes[..], OK);

    let mut p = Pair::new(&["http_status:status=503"]);
    p.client.write_all(head).await.unwrap();
    let down = within_a_minute(p.to_client.recv()).await.map(|i| i.kind);
    let Some(ItemKind::Data(d)) = down else {
        panic!("{down:?}")
    };
    let text = String::from_utf8_lossy(&d);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
}

/// The HTTP/2 engine between an HTTP/2 client and an HTTP/2 upstream,
/// both the `h2` crate's, over in-memory streams.
struct H2 {
    client: ::h2::client::SendRequest<bytes::Bytes>,
    upstream: ::h2::server::Connection<DuplexStream, bytes::Bytes>,
    events: Arc<Events>,
    _faults: watch::Sender<Arc<Vec<Chosen>>>,
}

impl H2 {
    async fn new(faults: &[&str]) -> H2 {
        let (x, events, faults_tx) = exchange_with(faults);
        let (client, engine_client, wire) = wire_to_engine();
        let (upstream, engine_upstream) = tokio::io::duplex(1 << 16);
        let (end, ending) = super::h2::ending();
        let reach = super::h2::Reach {
            tls: false,
            redial: None,
            moved_on: Default::default(),
        };
        tokio::spawn(super::h2::engine(
            x,
            engine_client,
            Box::new(engine_upstream),
            reach,
            end,
        ));
        wire.run(ending);
        let (upstream, client) = within_a_minute(async {
            tokio::join!(
                async { ::h2::server::handshake(upstream).await.expect("upstream") },
                async {
                    let (send, conn) = ::h2::client::handshake(client).await.expect("client");
                    tokio::spawn(conn);
                    send
                }
            )
        })
        .await;
        H2 {
            client,
            upstream,
            events,
            _faults: faults_tx,
        }
    }

    /// Sends a GET for `path`; its response future.
    async fn get(&mut self, path: &str) -> ::h2::client::ResponseFuture {
        let req = hyper::http::Request::get(format!("http://api.test{path}"))
            .body(())
            .expect("a request");
        let mut ready = self.client.clone().ready().await.expect("ready");
        ready.send_request(req, true).expect("sent").0
    }

    /// The next request the upstream gets, within a virtual minute (none
    /// if its connection ends first).
    async fn upstream_request(
        &mut self,
    ) -> Option<(
        hyper::http::Request<::h2::RecvStream>,
        ::h2::server::SendResponse<bytes::Bytes>,
    )> {
        tokio::time::timeout(Duration::from_secs(60), self.upstream.accept())
            .await
            .ok()
            .flatten()
            // The engine let the upstream's connection go: no request.
            .and_then(Result::ok)
    }

    /// Serves the upstream's side in the background from now on.
    fn serve_upstream(mut self) -> (::h2::client::SendRequest<bytes::Bytes>, Arc<Events>) {
        tokio::spawn(async move { while let Some(Ok(_)) = self.upstream.accept().await {} });
        (self.client, self.events)
    }
}

/// The client's wire to the HTTP/2 engine, as the relay lays it: the
/// engine's duplex, and between it and the client the downstream's
/// reader ([`super::h2::responses`]) that watches for the engine's end
/// and closes the client's connection (FIN, or RST: the wire dropped).
struct ClientWire {
    ours: DuplexStream,
    wire: DuplexStream,
}

/// The client's end of the wire, the engine's, and the rest to run.
fn wire_to_engine() -> (DuplexStream, DuplexStream, ClientWire) {
    let (engine, ours) = tokio::io::duplex(1 << 16);
    let (client, wire) = tokio::io::duplex(1 << 16);
    (client, engine, ClientWire { ours, wire })
}

impl ClientWire {
    fn run(self, ending: super::h2::Ending) {
        use tokio::io::AsyncReadExt;
        let (from_engine, mut to_engine) = tokio::io::split(self.ours);
        let (mut from_client, mut to_client) = tokio::io::split(self.wire);
        let (down_tx, mut down) = mpsc::channel(64);
        tokio::spawn(super::h2::responses(
            from_engine,
            ending,
            Output::new(down_tx),
        ));
        let cut = CancellationToken::new();
        let up_cut = cut.clone();
        tokio::spawn(async move {
            let mut b = vec![0u8; 16 * 1024];
            loop {
                tokio::select! {
                    () = up_cut.cancelled() => return,
                    r = from_client.read(&mut b) => match r {
                        Ok(0) | Err(_) => {
                            let _ = to_engine.shutdown().await;
                            return;
                        }
                        Ok(n) => {
                            if to_engine.write_all(&b[..n]).await.is_err() {
                                return;
                            }
                        }
                    },
                }
            }
        });
        tokio::spawn(async move {
            while let Some(item) = down.recv().await {
                match item.kind {
                    ItemKind::Data(d) => {
                        if to_client.write_all(&d).await.is_err() {
                            break;
                        }
                    }
                    ItemKind::Fin => {
                        let _ = to_client.shutdown().await;
                    }
                    // The connection ends: the client's wire is dropped.
                    ItemKind::Close | ItemKind::Reset => break,
                }
            }
            cut.cancel();
        });
    }
}

/// A response's status and body, read whole.
async fn read_answer(r: ::h2::client::ResponseFuture) -> Result<(u16, Vec<u8>), ::h2::Error> {
    within_a_minute(read_answer_whole(r)).await
}

/// `f`, or a failure after a virtual minute (a hang is a failure, not a
/// test that never ends).
async fn within_a_minute<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("no end within a virtual minute")
}

async fn read_answer_whole(r: ::h2::client::ResponseFuture) -> Result<(u16, Vec<u8>), ::h2::Error> {
    let r = r.await?;
    let status = r.status().as_u16();
    let mut body = r.into_body();
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    Ok((status, all))
}

#[tokio::test(start_paused = true)]
async fn http2_without_a_fault_passes_the_answer() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_status:status=529,path=/other"]).await;
    let answer = h.get("/v1/messages").await;
    let (req, mut respond) = h.upstream_request().await.expect("the request went up");
    assert_eq!(req.uri().path(), "/v1/messages");
    let mut send = respond
        .send_response(hyper::http::Response::new(()), false)
        .expect("head");
    send.send_data(bytes::Bytes::from_static(b"hello"), true)
        .expect("body");
    let (client, _) = h.serve_upstream();
    assert_eq!(read_answer(answer).await.unwrap(), (200, b"hello".to_vec()));
    drop(client);
}

#[tokio::test(start_paused = true)]
async fn http2_status_fault_answers_in_the_upstreams_place() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_status:status=429,retry_after=3s"]).await;
    let answer = h.get("/v1/messages").await;
    let r = within_a_minute(answer).await.expect("an answer");
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
        Some("3")
    );
    // The upstream saw no stream.
    assert!(h.upstream_request().await.is_none());
    let faulted = h.events.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_status", 429, None)), Some(&1));
}

/// An upstream's RST_STREAM before its answer's end reaches the client as
/// a reset of its stream, with the same code — never as an answer that
/// ended well.
#[tokio::test(start_paused = true)]
async fn http2_an_upstream_reset_stays_a_reset_with_its_code() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_delay:delay=1ms,path=/none"]).await;
    let answer = h.get("/v1/messages").await;
    let (_req, mut respond) = h.upstream_request().await.expect("the request went up");
    let mut send = respond
        .send_response(hyper::http::Response::new(()), false)
        .expect("head");
    send.send_data(bytes::Bytes::from_static(b"half"), false)
        .expect("body");
    send.send_reset(::h2::Reason::INTERNAL_ERROR);
    let _ = h.serve_upstream();
    let e = read_answer(answer).await.expect_err("a reset");
    assert_eq!(e.reason(), Some(::h2::Reason::INTERNAL_ERROR), "{e}");
}

#[tokio::test(start_paused = true)]
async fn http2_a_request_delay_holds_the_stream_on_the_virtual_clock() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_delay:delay=2s,phase=request"]).await;
    let began = Instant::now();
    let _answer = h.get("/v1/messages").await;
    let (req, _respond) = h.upstream_request().await.expect("the request went up");
    assert_eq!(req.uri().path(), "/v1/messages");
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_millis(2010),
        "{took:?}"
    );
}

/// A response's body as far as it came, and whether it ended well.
async fn read_partial(r: ::h2::client::ResponseFuture) -> (Option<u16>, Vec<u8>, bool) {
    within_a_minute(read_partial_body(r)).await
}

async fn read_partial_body(r: ::h2::client::ResponseFuture) -> (Option<u16>, Vec<u8>, bool) {
    let Ok(r) = r.await else {
        return (None, Vec::new(), false);
    };
    let status = r.status().as_u16();
    let mut body = r.into_body();
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else {
            return (Some(status), all, false);
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        all.extend_from_slice(&chunk);
    }
    (Some(status), all, true)
}

/// The upstream answers the next request with `status`, `body`, in one
/// DATA frame per piece, ending the stream after the last.
async fn answer(h: &mut H2, content_type: &str, pieces: &[&[u8]]) -> String {
    let (req, mut respond) = h.upstream_request().await.expect("the request went up");
    let head = hyper::http::Response::builder()
        .header("content-type", content_type)
        .body(())
        .expect("a head");
    let mut send = respond.send_response(head, false).expect("head");
    for (i, p) in pieces.iter().enumerate() {
        send.send_data(bytes::Bytes::copy_from_slice(p), i + 1 == pieces.len())
            .expect("body");
    }
    req.uri().path().to_string()
}

#[tokio::test(start_paused = true)]
async fn http2_a_truncated_body_fails_after_its_bytes() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_truncate:after_bytes=2"]).await;
    let r = h.get("/v1/messages").await;
    answer(&mut h, "text/plain", &[b"hello"]).await;
    let _ = h.serve_upstream();
    let (status, body, whole) = read_partial(r).await;
    assert_eq!(status, Some(200));
    assert_eq!(body, b"he");
    assert!(!whole, "a truncated answer ended well");
}

#[tokio::test(start_paused = true)]
async fn http2_an_abort_fails_the_call_before_the_upstream_sees_it() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_abort"]).await;
    let r = h.get("/v1/messages").await;
    // The connection fails under the call (an RST, as `then = reset`
    // says): no GOAWAY and no refused stream, which a client would take
    // for a call never seen and retry unseen.
    let e = within_a_minute(r).await.expect_err("an abort answered");
    assert!(!e.is_go_away(), "{e}");
    assert_ne!(e.reason(), Some(::h2::Reason::REFUSED_STREAM), "{e}");
    assert!(e.is_io(), "not the connection's failure: {e}");
    assert!(h.upstream_request().await.is_none());
    let faulted = h.events.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_abort", 0, None)), Some(&1));
}

#[tokio::test(start_paused = true)]
async fn http2_a_rewrite_changes_the_request_that_goes_up() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_rewrite:set_path=/v2/messages"]).await;
    let r = h.get("/v1/messages").await;
    let path = answer(&mut h, "text/plain", &[b"ok"]).await;
    assert_eq!(path, "/v2/messages");
    let _ = h.serve_upstream();
    assert_eq!(read_answer(r).await.unwrap(), (200, b"ok".to_vec()));
}

#[tokio::test(start_paused = true)]
async fn http2_a_stream_drops_after_its_nth_event() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["sse:drop_after_events=2"]).await;
    let r = h.get("/v1/messages").await;
    let events: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("event: message_delta\ndata: {{\"i\":{i}}}\n\n").into_bytes())
        .collect();
    let pieces: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
    answer(&mut h, "text/event-stream", &pieces).await;
    let _ = h.serve_upstream();
    let (status, body, whole) = read_partial(r).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, Some(200));
    assert!(text.contains("\"i\":1"), "{text}");
    assert!(!text.contains("\"i\":2"), "{text}");
    assert!(!whole, "a dropped stream ended well: {text}");
}

/// Closes as they come: the upstream's end mid-body reaches the client
/// after the bytes before it, an end the body's framing did not expect
/// included — the client's parser, not netchaos, judges it.
#[tokio::test(start_paused = true)]
async fn an_upstream_close_mid_body_reaches_the_client_after_its_bytes() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_status:status=529,path=/other"]);
    p.client.write_all(GET).await.unwrap();
    let _ = within_a_minute(p.to_upstream.recv()).await;
    let cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhell";
    p.upstream.write_all(cut).await.unwrap();
    p.upstream.shutdown().await.unwrap();
    let down = p.client_gets().await;
    assert_eq!(&down.bytes[..], cut);
    assert_eq!(down.end, Some(ItemKind::Fin));
}

/// An upstream that closes an idle keep-alive connection: the client gets
/// the FIN; what it sends after goes to the upstream as bytes, for its
/// kernel to answer as it would directly.
#[tokio::test(start_paused = true)]
async fn an_upstream_close_between_responses_is_the_clients_too() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["http_status:status=529,path=/other"]);
    p.client.write_all(GET).await.unwrap();
    let first = within_a_minute(p.to_upstream.recv()).await;
    assert!(matches!(first.map(|i| i.kind), Some(ItemKind::Data(_))));
    p.upstream.write_all(OK).await.unwrap();
    p.upstream.shutdown().await.unwrap();
    let down = p.client_gets().await;
    assert_eq!(&down.bytes[..], OK);
    assert_eq!(down.end, Some(ItemKind::Fin));
    p.client.write_all(b"late").await.unwrap();
    p.client.shutdown().await.unwrap();
    let up = p.upstream_gets().await;
    assert_eq!(&up.bytes[..], b"late");
    assert_eq!(up.end, Some(ItemKind::Fin));
}

/// The upstream's HTTP/2 connection gone mid-body: the client's stream
/// fails after the bytes that came — never an answer that ended well.
#[tokio::test(start_paused = true)]
async fn http2_an_upstream_gone_mid_body_fails_the_stream() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["http_delay:delay=1ms,path=/none"]).await;
    let answer = h.get("/v1/messages").await;
    let (_req, mut respond) = h.upstream_request().await.expect("the request went up");
    let mut send = respond
        .send_response(hyper::http::Response::new(()), false)
        .expect("head");
    send.send_data(bytes::Bytes::from_static(b"half"), false)
        .expect("body");
    // Its frames out, then the connection gone.
    let H2 { upstream, .. } = h;
    let mut upstream = upstream;
    let _ = within_a_minute(std::future::poll_fn(|cx| {
        let _ = upstream.poll_closed(cx);
        std::task::Poll::Ready(())
    }))
    .await;
    drop((send, respond, upstream));
    let (status, body, whole) = read_partial(answer).await;
    assert_eq!(status, Some(200));
    assert_eq!(&body[..], b"half");
    assert!(!whole, "the stream ended well");
}

/// An event stream both truncated and faulted by `sse`: the truncation
/// acts (the bytes as they came, cut after its count) and the `sse` fault
/// is not counted — the same on both engines.
#[tokio::test(start_paused = true)]
async fn a_truncation_comes_before_an_sse_fault() {
    crate::timer::runtime_clock_only();
    let mut p = Pair::new(&["sse:drop_after_events=4", "http_truncate:after_bytes=40"]);
    p.client.write_all(GET).await.unwrap();
    let _ = within_a_minute(p.to_upstream.recv()).await;
    let answer = sse_answer(5);
    p.upstream.write_all(&answer).await.unwrap();
    let down = p.client_gets().await;
    let head_len = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(&down.bytes[..], &answer[..head_len + 40]);
    assert_eq!(down.end, Some(ItemKind::Close));
    let faulted = p.events.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_truncate", 200, None)), Some(&1));
    assert_eq!(faulted.len(), 1, "{faulted:?}");
}

#[tokio::test(start_paused = true)]
async fn http2_a_truncation_comes_before_an_sse_fault() {
    crate::timer::runtime_clock_only();
    let mut h = H2::new(&["sse:drop_after_events=4", "http_truncate:after_bytes=40"]).await;
    let r = h.get("/v1/messages").await;
    let events: Vec<Vec<u8>> = (0..5)
        .map(|i| format!("event: message_delta\ndata: {{\"i\":{i}}}\n\n").into_bytes())
        .collect();
    let pieces: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
    answer(&mut h, "text/event-stream", &pieces).await;
    let (_, events_out) = h.serve_upstream();
    let (status, body, whole) = read_partial(r).await;
    assert_eq!(status, Some(200));
    assert_eq!(&body[..], &events.concat()[..40]);
    assert!(!whole, "a truncated answer ended well");
    let faulted = events_out.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_truncate", 200, None)), Some(&1));
    assert_eq!(faulted.len(), 1, "{faulted:?}");
}
