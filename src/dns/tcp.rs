//! DNS over TCP (port 53) from the namespace: length-prefixed queries read
//! one at a time, each given its fate by the DNS layer like a UDP query,
//! forwarded over TCP to the run's resolvers, with names learned from the
//! answers. A client that a truncated UDP answer sent here meets the
//! layer's other faults again.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Action, DnsLayer, Transport};

/// How long a client's connection may sit without a query.
const IDLE: Duration = Duration::from_secs(30);
/// How long a resolver gets to answer one query, and a client to take
/// an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Most queries on one connection: a stub sends one or two; a client that
/// keeps one open forever does not keep its slot forever.
const MAX_QUERIES: usize = 256;

/// Serves one client connection until it closes or idles out; `dial`
/// opens a connection to a resolver (from the host, or inside).
pub(crate) async fn serve<D, F>(
    layer: Arc<DnsLayer>,
    mut client: TcpStream,
    peer: SocketAddr,
    dial: D,
) where
    D: Fn(SocketAddr) -> F,
    F: Future<Output = io::Result<TcpStream>>,
{
    // At most MAX_TCP at once (a flood closes the rest).
    let Ok(_slot) = layer.tcp_slots.clone().try_acquire_owned() else {
        layer.events.dns_refused(crate::events::DnsRefusal::Busy);
        return;
    };
    let mut upstream: Option<TcpStream> = None;
    for _ in 0..MAX_QUERIES {
        let query = match tokio::time::timeout(IDLE, read_message(&mut client)).await {
            Ok(Ok(q)) => q,
            _ => return,
        };
        let Some(parsed) = super::Query::parse(&query) else {
            // Not a query: a resolver closes such a connection.
            return;
        };
        let asked = layer.ask(peer, parsed, Transport::Tcp);
        let decision = &asked.decision;
        let answer = match &decision.action {
            // Never answered; the client's own timeout ends it.
            Action::Silence => {
                layer.answered(&asked, None);
                continue;
            }
            Action::Answer(made) => {
                let a = super::reply::build(&query, made);
                if let Some(a) = &a {
                    layer.names.learn_response(a);
                }
                a
            }
            Action::Forward => {
                match forward(&mut upstream, &layer.resolvers, &dial, &query).await {
                    Some(a) => {
                        layer.names.learn_response(&a);
                        Some(a)
                    }
                    // No resolver answered: as a failing resolver does, close.
                    None => {
                        layer.answered(&asked, None);
                        return;
                    }
                }
            }
        };
        let Some(answer) = answer else { return };
        if !decision.delay.is_zero() {
            crate::timer::sleep(decision.delay).await;
        }
        let sent = tokio::time::timeout(ANSWER_TIMEOUT, write_message(&mut client, &answer))
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
        layer.answered(&asked, Some(&answer));
        if sent.is_err() {
            return;
        }
    }
}

/// Asks over the open resolver connection, or a new one to each resolver
/// in turn.
async fn forward<D, F>(
    upstream: &mut Option<TcpStream>,
    resolvers: &[SocketAddr],
    dial: &D,
    query: &[u8],
) -> Option<Vec<u8>>
where
    D: Fn(SocketAddr) -> F,
    F: Future<Output = io::Result<TcpStream>>,
{
    if let Some(s) = upstream.as_mut()
        && let Some(a) = exchange(s, query).await
    {
        return Some(a);
    }
    *upstream = None;
    for r in resolvers {
        let Ok(Ok(mut s)) = tokio::time::timeout(ANSWER_TIMEOUT, dial(*r)).await else {
            continue;
        };
        if let Some(a) = exchange(&mut s, query).await {
            *upstream = Some(s);
            return Some(a);
        }
    }
    tracing::debug!("no resolver answered a DNS query over TCP ({resolvers:?})");
    None
}

/// One query and its answer (same id, a response).
async fn exchange(s: &mut TcpStream, query: &[u8]) -> Option<Vec<u8>> {
    write_message(s, query).await.ok()?;
    tokio::time::timeout(ANSWER_TIMEOUT, async {
        loop {
            let a = read_message(s).await.ok()?;
            if a.len() >= 12 && a[..2] == query[..2] && a[2] & 0x80 != 0 {
                return Some(a);
            }
        }
    })
    .await
    .ok()?
}

async fn read_message(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let n = s.read_u16().await? as usize;
    if n < 12 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short DNS message",
        ));
    }
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).await?;
    Ok(buf)
}

async fn write_message(s: &mut TcpStream, m: &[u8]) -> io::Result<()> {
    let n = u16::try_from(m.len()).map_err(|_| io::Error::other("DNS message over 64 KiB"))?;
    let mut out = Vec::with_capacity(2 + m.len());
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(m);
    s.write_all(&out).await
}
