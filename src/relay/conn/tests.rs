//! One connection through [`super::serve`] in-process: a relay with its
//! rules, an endpoint to an upstream on loopback, a client — no netchaos
//! process, no client program. What the client and the upstream see, and
//! what the relay counted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::events::Events;
use crate::plan::{Flow, Match, Plan, Rule};
use crate::relay::{Endpoint, Relay, RelayOptions, Target};
use crate::ruleset::RuleSet;

/// A relay with one rule of `faults` (flags), and its events.
fn relay(faults: &[&str]) -> (Arc<Relay>, Arc<Events>) {
    let rule = Rule {
        name: "test".into(),
        matcher: Match::default(),
        faults: faults
            .iter()
            .map(|f| Arc::new(crate::profile::parse_fault_flag(f).expect("a fault")))
            .collect(),
        loc: "test".into(),
    };
    let plan = Plan {
        seed: 5,
        rules: vec![Arc::new(rule)],
        ..Plan::default()
    };
    let events = Arc::new(Events::in_memory());
    let relay = Relay::new(
        Arc::new(RuleSet::from_plan(&plan)),
        events.clone(),
        RelayOptions::default(),
    );
    (relay, events)
}

/// The client's end of one connection the relay serves to `upstream`.
async fn through(relay: &Arc<Relay>, upstream: SocketAddr) -> TcpStream {
    let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(front.local_addr().unwrap());
    let (client, accepted) = tokio::join!(client, front.accept());
    let (sock, peer) = accepted.unwrap();
    let ep = Arc::new(Endpoint::new(
        "test",
        Target::Fixed(upstream.to_string()),
        Flow::Inbound,
    ));
    tokio::spawn(super::serve(relay.clone(), sock, peer, ep, false));
    client.unwrap()
}

/// Bounded: every wait here ends within a minute.
async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("within a minute")
}

#[tokio::test]
async fn bytes_pass_both_ways_and_the_connection_is_counted() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = up.local_addr().unwrap();
    // An echo server that closes once the client has.
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let (mut r, mut w) = s.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let (relay, events) = relay(&[]);
    let mut c = through(&relay, addr).await;
    c.write_all(b"hello, relay").await.unwrap();
    c.shutdown().await.unwrap();
    let mut back = Vec::new();
    within(c.read_to_end(&mut back)).await.unwrap();
    assert_eq!(&back[..], b"hello, relay");
    let stats = &events.stats;
    within(async {
        while stats.conns_open.load(Ordering::Relaxed) != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(stats.conns_total.load(Ordering::Relaxed), 1);
    let proxy = stats.proxy("test");
    assert_eq!(proxy.bytes[0].load(Ordering::Relaxed), 12);
    assert_eq!(proxy.bytes[1].load(Ordering::Relaxed), 12);
}

/// The HTTP layer in the connection's path: a status fault answers in the
/// upstream's place (which never sees the request), and a request it does
/// not match goes through to the upstream on the same connection.
#[tokio::test]
async fn an_http_fault_answers_through_the_relay() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = up.local_addr().unwrap();
    let (seen_tx, mut seen) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = seen_tx.send(got).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await;
        let _ = s.read(&mut buf).await;
    });
    let (relay, events) = relay(&["http_status:status=529,path=/v1/messages"]);
    let mut c = through(&relay, addr).await;
    c.write_all(b"POST /v1/messages HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let head = read_response(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 529 "), "{head}");
    c.write_all(b"GET /v1/models HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .await
        .unwrap();
    let head = read_response(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let up_saw = within(seen.recv()).await.unwrap();
    let up_saw = String::from_utf8_lossy(&up_saw);
    assert!(up_saw.starts_with("GET /v1/models "), "{up_saw}");
    let faulted = events.stats.http_faulted.lock().unwrap().clone();
    assert_eq!(faulted.get(&("http_status", 529, None)), Some(&1));
}

/// Reads one response (its head, and a body of the length it gives).
async fn read_response(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    within(async {
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(c.read(&mut b).await.unwrap(), 1, "closed mid-head");
            got.push(b[0]);
        }
    })
    .await;
    let head = String::from_utf8_lossy(&got).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    within(c.read_exact(&mut body)).await.unwrap();
    head
}

/// A stream fault on the connection: `reset` after some bytes ends it for
/// the client with an RST, after the bytes before it.
#[tokio::test]
async fn a_reset_fault_reaches_the_client_after_its_bytes() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = up.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = up.accept().await.unwrap();
        let _ = s.write_all(&[b'x'; 1000]).await;
        let mut b = [0u8; 16];
        let _ = s.read(&mut b).await;
    });
    let (relay, _events) = relay(&["reset:after_bytes=300"]);
    let mut c = through(&relay, addr).await;
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let end = within(async {
        loop {
            match c.read(&mut b).await {
                Ok(0) => return "fin",
                Ok(n) => got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return "reset",
                Err(_) => return "error",
            }
        }
    })
    .await;
    assert_eq!(end, "reset");
    assert_eq!(got.len(), 300);
}
