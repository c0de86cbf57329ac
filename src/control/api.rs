//! The HTTP routes, as Toxiproxy 2.12 answers them: the same paths and
//! methods, status codes (proxy create 201, toxic create 200, deletes and
//! reset 204, populate 201), shapes (`"Logger":{}` in proxies, upstream
//! toxics listed first), errors (`{"error","status"}`, plus the message as
//! `title` for clients of Toxiproxy before 2.2; `text/plain` with a
//! newline, Go's messages), an `X-Toxiproxy-Request-Id` on every answer of
//! a route, `404 page not found` off the routes and 405 for a method a route
//! lacks (HEAD included). Request bodies are read as Go reads them
//! ([`super::gojson`]), whatever their content type.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use serde_json::{Map, Value, json};

use super::gojson::{self, lowercase_keys};
use super::model::{ApiError, TOXIPROXY_VERSION, Toxic};
use super::{ApiProxy, BODY_LIMIT, Control, Listener};

#[derive(Clone)]
struct ApiState {
    control: Arc<Control>,
    /// Tokens any of which a request must carry (none: no token needed):
    /// the operator's, and `run --api-for-command`'s own for the command.
    tokens: Arc<[Arc<str>]>,
    /// Where the API listens: the only origin and (on loopback) host it
    /// answers.
    bound: SocketAddr,
}

/// The API's routes, guarded (browsers, token) and with a body limit.
pub(crate) fn router(control: Arc<Control>, tokens: &[String], bound: SocketAddr) -> Router {
    let state = ApiState {
        control,
        tokens: tokens
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| Arc::from(t.as_str()))
            .collect(),
        bound,
    };
    // HEAD is not GET: Toxiproxy's router answers it 405.
    let no_head = |r: MethodRouter<ApiState>| r.head(|| async { StatusCode::METHOD_NOT_ALLOWED });
    Router::new()
        .route("/version", no_head(get(version)))
        .route("/metrics", any(metrics))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", no_head(get(proxy_index).post(proxy_create)))
        .route(
            "/proxies/{proxy}",
            no_head(
                get(proxy_show)
                    .post(proxy_update)
                    .patch(proxy_update)
                    .delete(proxy_delete),
            ),
        )
        .route(
            "/proxies/{proxy}/toxics",
            no_head(get(toxic_index).post(toxic_create)),
        )
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            no_head(
                get(toxic_show)
                    .post(toxic_update)
                    .patch(toxic_update)
                    .delete(toxic_delete),
            ),
        )
        .route_layer(middleware::from_fn(request_id))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
                "404 page not found\n",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Toxiproxy's request ids are xids: 12 bytes (seconds, machine, process,
/// counter) in base32hex, 20 characters.
fn xid() -> String {
    static MACHINE: std::sync::OnceLock<[u8; 3]> = std::sync::OnceLock::new();
    static COUNTER: std::sync::OnceLock<AtomicU32> = std::sync::OnceLock::new();
    let machine = MACHINE.get_or_init(rand::random);
    let n = COUNTER
        .get_or_init(|| AtomicU32::new(rand::random()))
        .fetch_add(1, Ordering::Relaxed);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    let pid = std::process::id() as u16;
    let mut raw = [0u8; 12];
    raw[..4].copy_from_slice(&secs.to_be_bytes());
    raw[4..7].copy_from_slice(machine);
    raw[7..9].copy_from_slice(&pid.to_be_bytes());
    raw[9..].copy_from_slice(&n.to_be_bytes()[1..]);
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let mut bits: u128 = 0;
    for b in raw {
        bits = bits << 8 | u128::from(b);
    }
    // 96 bits, padded to 100, in 20 groups of five.
    bits <<= 4;
    (0..20)
        .rev()
        .map(|i| ALPHABET[((bits >> (i * 5)) & 31) as usize] as char)
        .collect()
}

/// Every answer of a route carries a request id, as Toxiproxy's do.
async fn request_id(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&xid()) {
        r.headers_mut().insert("x-toxiproxy-request-id", v);
    }
    r
}

/// Refuses browsers (as Toxiproxy does: a web page must not drive the API)
/// and, when a token is set, requests without it; bounds each request's
/// time (Toxiproxy's 25 s, answered as Go's timeout handler answers).
async fn guard(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    if let Some(refusal) = refuse_browsers(&st, req.headers()) {
        return refusal;
    }
    if !st.tokens.is_empty() {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Every token compared, in constant time each.
        let known = st
            .tokens
            .iter()
            .fold(false, |hit, t| same(given.as_bytes(), t.as_bytes()) | hit);
        if !known {
            return fail(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong API token (send Authorization: Bearer TOKEN)",
            ));
        }
    }
    let deadline = tokio::time::Instant::now() + super::server::REQUEST_TIMEOUT;
    // The body is read before the connection counts as busy (a client
    // trickling its body is as evictable as one trickling its head), and
    // takes its share of the bodies' budget as its bytes arrive.
    let (req, _body) = match read_body(req, deadline).await {
        Ok(x) => x,
        Err(refusal) => return refusal,
    };
    // Busy until answered: an evicted connection is always an idle one.
    let _busy = req
        .extensions()
        .get::<super::server::ConnState>()
        .map(|s| s.activity.busy(s.epoch));
    let client = req.extensions().get::<super::listen::ApiClient>().copied();
    let served = tokio::time::timeout_at(deadline, next.run(req));
    let served = match client {
        Some(c) => super::listen::CLIENT.scope(c, served).await,
        None => served.await,
    };
    match served {
        Ok(r) => r,
        Err(_) => timed_out(),
    }
}

/// Reads a request's whole body (at most [`BODY_LIMIT`], by `deadline`),
/// holding a share of the bodies' budget for each byte; the request with
/// its body in memory, and the share (held until it is answered).
async fn read_body(
    req: Request,
    deadline: tokio::time::Instant,
) -> Result<(Request, Option<tokio::sync::OwnedSemaphorePermit>), Response> {
    use futures_util::StreamExt;
    let too_large = || {
        fail(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {} bytes", BODY_LIMIT),
        ))
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    let mut data = bytes::BytesMut::new();
    let mut held: Option<tokio::sync::OwnedSemaphorePermit> = None;
    let mut stream = body.into_data_stream();
    loop {
        let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Err(timed_out()),
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(fail(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )));
            }
            Ok(Some(Ok(c))) => c,
        };
        if data.len() + chunk.len() > BODY_LIMIT {
            return Err(too_large());
        }
        let Ok(share) = super::server::body_budget()
            .clone()
            .try_acquire_many_owned(chunk.len() as u32)
        else {
            return Err(fail(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the API is reading too many request bodies at once; try again",
            )));
        };
        match &mut held {
            Some(h) => h.merge(share),
            None => held = Some(share),
        }
        data.extend_from_slice(&chunk);
    }
    Ok((
        Request::from_parts(parts, axum::body::Body::from(data.freeze())),
        held,
    ))
}

/// Go's timeout handler's answer (Toxiproxy's, past 25 s).
fn timed_out() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "<html><head><title>Timeout</title></head><body><h1>Timeout</h1></body></html>",
    )
        .into_response()
}

/// Refuses what a web page (or a rebound DNS name) calling the API looks
/// like: a browser's user agent, a foreign `Origin`, and on a loopback API
/// without a token, a `Host` that is not a loopback name.
fn refuse_browsers(st: &ApiState, headers: &axum::http::HeaderMap) -> Option<Response> {
    let header = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if header(header::USER_AGENT).is_some_and(|ua| ua.starts_with("Mozilla/")) {
        return Some((StatusCode::FORBIDDEN, "User agent not allowed\n").into_response());
    }
    if let Some(origin) = header(header::ORIGIN) {
        if !own_origin(origin, st.bound) {
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    format!("Origin {origin:?} not allowed: the API answers only its own origin\n"),
                )
                    .into_response(),
            );
        }
    }
    if st.tokens.is_empty() && st.bound.ip().is_loopback() {
        // (No Host at all is no browser: HTTP/1.0 tools.)
        let host = header(header::HOST).unwrap_or("localhost");
        if !loopback_host(host, st.bound) {
            return Some(
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "Host {host:?} not allowed: without a token the API answers only loopback names \
                         (localhost, 127.0.0.1, [::1])\n"
                    ),
                )
                    .into_response(),
            );
        }
    }
    None
}

/// Whether `origin` (`scheme://host[:port]`) is the API's own: a page
/// served from another port of this host is another origin.
fn own_origin(origin: &str, bound: SocketAddr) -> bool {
    origin.strip_prefix("http://").is_some_and(|hostport| {
        let (name, port) = split_port(hostport);
        (loopback_name(name, bound) && port.is_none_or(|p| p == bound.port().to_string()))
            || hostport == bound.to_string()
    })
}

/// Whether a `Host` header names the API by a loopback name or its own
/// address. Any port: what DNS rebinding sends is a foreign name, while a
/// client through a port forward (`kubectl port-forward`, `ssh -L`) sends
/// a loopback name with the forwarded port.
fn loopback_host(host: &str, bound: SocketAddr) -> bool {
    loopback_name(split_port(host).0, bound)
}

/// `host[:port]` (`[v6]:port` too) as the name and the port, if any.
fn split_port(host: &str) -> (&str, Option<&str>) {
    match host.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && !p.contains(']') => (n, Some(p)),
        _ => (host, None),
    }
}

/// Whether `name` is a loopback name or address, or the API's own address.
fn loopback_name(name: &str, bound: SocketAddr) -> bool {
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip == bound.ip())
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn reply(status: StatusCode, v: Value) -> Response {
    let mut r = (status, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An error as Toxiproxy sends it (through Go's `http.Error`): the JSON as
/// plain text, with a newline.
fn fail(e: ApiError) -> Response {
    (
        e.status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{}\n", e.to_json()),
    )
        .into_response()
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn not_found(what: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("{what} not found"))
}

/// The body's first JSON value with lower-cased keys (Go matches keys
/// without regard to case, and its decoder reads one value and leaves what
/// follows); too big is 413, not JSON is 400 (`bad request body: EOF` for
/// none, as Go says).
fn parse(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body.map_err(|r| ApiError::new(r.status(), r.body_text()))?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("EOF"));
    }
    let v = serde_json::Deserializer::from_slice(&body)
        .into_iter::<Value>()
        .next()
        .unwrap_or_else(|| Ok(Value::Null))
        .map_err(ApiError::bad_request)?;
    Ok(lowercase_keys(v))
}

fn object(v: Value, go: &str) -> Result<Map<String, Value>, ApiError> {
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type {go}",
            go_kind(&other)
        ))),
    }
}

/// How Go's `encoding/json` names a JSON value's kind in its errors.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::Null => "null",
    }
}

/// The Go type Toxiproxy's `/populate` decodes each item into (an
/// anonymous struct that makes `enabled` nullable), as its errors name it.
const POPULATE_ITEM: &str = r#"struct { toxiproxy.Proxy; Enabled *bool "json:\"enabled\"" }"#;

fn proxy_json(p: &ApiProxy) -> Value {
    let (listen, upstream) = match &p.listener {
        Listener::Transparent => ("transparent".to_string(), p.rule.matcher.to_string()),
        Listener::Socket {
            listen, upstream, ..
        } => (listen.clone(), upstream.clone()),
    };
    json!({
        "name": p.name,
        "listen": listen,
        "upstream": upstream,
        "enabled": p.enabled,
        // Toxiproxy serialises its proxies' logger, which shows as this.
        "Logger": {},
        "toxics": toxics_json(p),
    })
}

/// A proxy's toxics, upstream first, each stream in the order added.
fn toxics_json(p: &ApiProxy) -> Vec<Value> {
    let mut list: Vec<&Toxic> = p.toxics.iter().collect();
    list.sort_by_key(|t| t.stream.rank());
    list.into_iter().map(Toxic::to_json).collect()
}

async fn version() -> Response {
    let mut r = (
        StatusCode::OK,
        format!("{{\"version\": \"{TOXIPROXY_VERSION}\"}}\n"),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-netchaos-version",
        HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    r
}

async fn metrics(State(st): State<ApiState>, headers: axum::http::HeaderMap) -> Response {
    use super::metrics::{OPENMETRICS, PROMETHEUS_TEXT, render, wants_openmetrics};
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let om = wants_openmetrics(accept);
    let text = render(st.control.relay.events.clone(), &st.control.metrics, om);
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if om { OPENMETRICS } else { PROMETHEUS_TEXT }),
    );
    r
}

async fn proxy_index(State(st): State<ApiState>) -> Response {
    let proxies = st.control.proxies.lock().await;
    let all: Map<String, Value> = proxies
        .values()
        .map(|p| (p.name.clone(), proxy_json(p)))
        .collect();
    reply(StatusCode::OK, Value::Object(all))
}

/// A proxy as a request describes it.
struct NewProxy {
    name: String,
    listen: String,
    upstream: String,
    enabled: bool,
}

/// Reads a proxy: `enabled` missing or null means enabled; `at` names its
/// place in a populate request.
fn new_proxy(m: &Map<String, Value>, at: &str) -> Result<NewProxy, ApiError> {
    let name = gojson::string(m, "name", "Proxy.name")?.unwrap_or_default();
    let listen = gojson::string(m, "listen", "Proxy.listen")?.unwrap_or_default();
    let upstream = gojson::string(m, "upstream", "Proxy.upstream")?.unwrap_or_default();
    let enabled = gojson::boolean(m, "enabled", "Proxy.enabled")?.unwrap_or(true);
    for (field, v) in [("name", &name), ("upstream", &upstream)] {
        if v.is_empty() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("missing required field: {field}{at}"),
            ));
        }
    }
    Ok(NewProxy {
        name,
        listen,
        upstream,
        enabled,
    })
}

/// Makes a listener proxy, listening when it is enabled.
async fn create(control: &Control, n: NewProxy) -> Result<ApiProxy, ApiError> {
    let mut p = ApiProxy {
        rule: control.proxy_rule(&n.name),
        name: n.name,
        listener: Listener::Socket {
            listen: n.listen,
            upstream: n.upstream,
            endpoint: None,
        },
        enabled: false,
        toxics: Vec::new(),
    };
    Control::publish(&p);
    if n.enabled {
        if let Err(e) = start(control, &mut p).await {
            control.relay.rules.remove(&p.name);
            return Err(e);
        }
    }
    Ok(p)
}

/// Starts a listener proxy that is not listening; `listen` becomes the
/// address it listens on.
async fn start(control: &Control, p: &mut ApiProxy) -> Result<(), ApiError> {
    if let Listener::Socket {
        listen,
        upstream,
        endpoint,
    } = &mut p.listener
    {
        if endpoint.is_none() {
            let (shown, ep) = control.start(&p.name, listen, upstream).await?;
            *listen = shown;
            *endpoint = Some(ep);
        }
    } else {
        p.rule.set_enabled(true);
    }
    p.enabled = true;
    Ok(())
}

/// Stops a proxy: its listener closes and its connections end.
async fn stop(p: &mut ApiProxy) {
    match &mut p.listener {
        Listener::Socket { endpoint, .. } => {
            if let Some(ep) = endpoint.take() {
                ep.close().await;
            }
        }
        Listener::Transparent => p.rule.set_enabled(false),
    }
    p.enabled = false;
}

async fn proxy_create(State(st): State<ApiState>, body: Result<Bytes, BytesRejection>) -> Response {
    let n = match parse(body)
        .and_then(|v| object(v, "toxiproxy.Proxy"))
        .and_then(|m| new_proxy(&m, ""))
    {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    if proxies.contains_key(&n.name) {
        return fail(ApiError::new(StatusCode::CONFLICT, "proxy already exists"));
    }
    match create(&st.control, n).await {
        Ok(p) => {
            let v = proxy_json(&p);
            proxies.insert(p.name.clone(), p);
            reply(StatusCode::CREATED, v)
        }
        Err(e) => fail(e),
    }
}

/// Creates or replaces the proxies of the request, in order: one whose
/// listen and upstream are unchanged is kept as it is (toxics and all);
/// the first that fails stops the rest, and those made before it stay.
async fn populate(State(st): State<ApiState>, body: Result<Bytes, BytesRejection>) -> Response {
    match parse(body) {
        Ok(v) => {
            let (e, done) = populate_with(&st.control, v).await;
            populated(e, done)
        }
        Err(e) => populated(Some(e), Vec::new()),
    }
}

/// toxiproxy-server's `-config`: the proxies of a JSON file in populate's
/// form, made before the API starts; what fails is reported, and the
/// server starts anyway, as Toxiproxy's does.
pub(crate) async fn load_config(control: &Arc<Control>, text: &str) {
    let v = match serde_json::from_str::<Value>(text) {
        Ok(v) => lowercase_keys(v),
        Err(e) => {
            tracing::error!("Failed to populate proxies from file: {e}");
            return;
        }
    };
    let (e, done) = populate_with(control, v).await;
    if let Some(e) = e {
        tracing::error!("Failed to populate proxies from file: {}", e.message);
    }
    for p in done {
        let field = |k: &str| p[k].as_str().unwrap_or("").to_string();
        eprintln!(
            "netchaos: proxy {:?} listening on {} -> {}",
            field("name"),
            field("listen"),
            field("upstream")
        );
    }
}

async fn populate_with(control: &Control, v: Value) -> (Option<ApiError>, Vec<Value>) {
    let wanted = (|| {
        // Go decodes `null` into an empty list, and a `null` item into an
        // empty proxy (which then lacks its name).
        let items = match v {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            other => {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type []{POPULATE_ITEM}",
                    go_kind(&other)
                )));
            }
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let item = match item {
                    Value::Null => Map::new(),
                    other => object(other, POPULATE_ITEM)?,
                };
                new_proxy(&item, &format!(" at proxy {}", i + 1))
            })
            .collect::<Result<Vec<NewProxy>, ApiError>>()
    })();
    let wanted = match wanted {
        Ok(w) => w,
        Err(e) => return (Some(e), Vec::new()),
    };
    let mut proxies = control.proxies.lock().await;
    let mut done = Vec::new();
    for n in wanted {
        // Unchanged (as Toxiproxy judges it, a host name resolved: its
        // toxics and connections are kept). Resolved only for a proxy of
        // that name shown at another address.
        let shown = proxies.get(&n.name).and_then(|p| match &p.listener {
            Listener::Socket {
                listen, upstream, ..
            } if *upstream == n.upstream => Some(listen.clone()),
            _ => None,
        });
        let same = match shown {
            Some(listen) if listen == n.listen => true,
            Some(listen) => {
                super::listen::as_shown(&n.listen).await.as_deref() == Some(listen.as_str())
            }
            None => false,
        };
        if same {
            done.push(proxy_json(&proxies[&n.name]));
            continue;
        }
        if let Some(mut old) = proxies.remove(&n.name) {
            stop(&mut old).await;
        }
        match create(control, n).await {
            Ok(p) => {
                done.push(proxy_json(&p));
                proxies.insert(p.name.clone(), p);
            }
            Err(e) => return (Some(e), done),
        }
    }
    (None, done)
}

/// Populate's answer: `{"proxies": […]}` (`null` when none), with the error
/// beside it when one stopped it.
fn populated(e: Option<ApiError>, done: Vec<Value>) -> Response {
    let list = if done.is_empty() {
        Value::Null
    } else {
        Value::Array(done)
    };
    match e {
        None => reply(StatusCode::CREATED, json!({"proxies": list})),
        Some(e) => {
            let mut v = e.to_json();
            v["proxies"] = list;
            reply(e.status, v)
        }
    }
}

async fn proxy_show(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    match st.control.proxies.lock().await.get(&name) {
        Some(p) => reply(StatusCode::OK, proxy_json(p)),
        None => fail(not_found("proxy")),
    }
}

async fn proxy_update(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let control = st.control.clone();
    let mut proxies = control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(not_found("proxy"));
    };
    let m = match parse(body).and_then(|v| object(v, "toxiproxy.Proxy")) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    match update(&control, p, &m).await {
        Ok(()) => reply(StatusCode::OK, proxy_json(p)),
        Err(e) => fail(e),
    }
}

/// Applies a proxy update as Toxiproxy does: the body over the proxy's
/// listen, upstream and enabled; a changed address stops the proxy (its
/// connections end) and keeps the new one; then it is started or stopped
/// as `enabled` says. A start that fails leaves it disabled (a 500).
async fn update(
    control: &Control,
    p: &mut ApiProxy,
    m: &Map<String, Value>,
) -> Result<(), ApiError> {
    let enabled = gojson::boolean(m, "enabled", "Proxy.enabled")?.unwrap_or(p.enabled);
    let new_listen = gojson::string(m, "listen", "Proxy.listen")?;
    let new_upstream = gojson::string(m, "upstream", "Proxy.upstream")?;
    let changed = match &p.listener {
        Listener::Socket {
            listen, upstream, ..
        } => Some(
            new_listen.as_ref().is_some_and(|l| l != listen)
                || new_upstream.as_ref().is_some_and(|u| u != upstream),
        ),
        Listener::Transparent => None,
    };
    if changed == Some(true) {
        stop(p).await;
        if let Listener::Socket {
            listen, upstream, ..
        } = &mut p.listener
        {
            if let Some(l) = new_listen {
                *listen = l;
            }
            if let Some(u) = new_upstream {
                *upstream = u;
            }
        }
    } else if changed.is_none()
        && (new_listen.is_some_and(|l| l != "transparent") || new_upstream.is_some())
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "a transparent rule has no listen address or upstream to change",
        ));
    }
    match (enabled, p.enabled) {
        (true, false) => start(control, p).await,
        (false, true) => {
            stop(p).await;
            Ok(())
        }
        _ => Ok(()),
    }
}

async fn proxy_delete(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    let removed = st.control.proxies.lock().await.remove(&name);
    match removed {
        Some(mut p) => {
            stop(&mut p).await;
            st.control.relay.rules.remove(&p.name);
            st.control.relay.events.stats.forget_proxy(&p.name);
            no_content()
        }
        None => fail(not_found("proxy")),
    }
}

/// Every proxy listening again, and without toxics.
async fn reset(State(st): State<ApiState>) -> Response {
    let control = st.control.clone();
    let mut proxies = control.proxies.lock().await;
    for p in proxies.values_mut() {
        if let Err(e) = start(&control, p).await {
            return fail(e);
        }
        p.toxics.clear();
        Control::publish(p);
    }
    no_content()
}

async fn toxic_index(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    match st.control.proxies.lock().await.get(&name) {
        Some(p) => reply(StatusCode::OK, Value::Array(toxics_json(p))),
        None => fail(not_found("proxy")),
    }
}

async fn toxic_create(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(scope) = st.control.scope(&name).await else {
        return fail(not_found("proxy"));
    };
    let mut t = match parse(body)
        .and_then(|v| object(v, "toxics.ToxicWrapper"))
        .and_then(|m| Toxic::from_request(&m))
    {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    {
        let proxies = st.control.proxies.lock().await;
        if proxies
            .get(&name)
            .is_some_and(|p| p.toxics.iter().any(|x| x.name == t.name))
        {
            return fail(ApiError::new(StatusCode::CONFLICT, "toxic already exists"));
        }
    }
    let id = st.control.relay.rules.new_fault_id();
    let t = match off_runtime(move || t.build(&scope, id).map(|()| t)).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(not_found("proxy"));
    };
    if p.toxics.iter().any(|x| x.name == t.name) {
        return fail(ApiError::new(StatusCode::CONFLICT, "toxic already exists"));
    }
    let v = t.to_json();
    p.toxics.push(t);
    Control::publish(p);
    reply(StatusCode::OK, v)
}

/// Builds a toxic on a blocking thread: reading a file it names (under
/// `--api-files`) must never stall the API, even on a hung file system.
async fn off_runtime(
    build: impl FnOnce() -> Result<Toxic, ApiError> + Send + 'static,
) -> Result<Toxic, ApiError> {
    match tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::task::spawn_blocking(build),
    )
    .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("building the toxic failed: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "reading the toxic's file took longer than 5s; giving up",
        )),
    }
}

async fn toxic_show(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
) -> Response {
    let proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get(&name) else {
        return fail(not_found("proxy"));
    };
    match p.toxics.iter().find(|t| t.name == toxic) {
        Some(t) => reply(StatusCode::OK, t.to_json()),
        None => fail(not_found("toxic")),
    }
}

async fn toxic_update(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let current = {
        let proxies = st.control.proxies.lock().await;
        let Some(p) = proxies.get(&name) else {
            return fail(not_found("proxy"));
        };
        let Some(t) = p.toxics.iter().find(|t| t.name == toxic) else {
            return fail(not_found("toxic"));
        };
        t.clone()
    };
    let m = match parse(body).and_then(|v| object(v, "toxics.ToxicWrapper")) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let Some(scope) = st.control.scope(&name).await else {
        return fail(not_found("proxy"));
    };
    let fresh = st.control.relay.rules.new_fault_id();
    let t = match off_runtime(move || current.updated(&m, &scope, fresh)).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(not_found("proxy"));
    };
    let Some(i) = p.toxics.iter().position(|x| x.name == toxic) else {
        return fail(not_found("toxic"));
    };
    let v = t.to_json();
    p.toxics[i] = t;
    Control::publish(p);
    reply(StatusCode::OK, v)
}

async fn toxic_delete(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
) -> Response {
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(not_found("proxy"));
    };
    let Some(i) = p.toxics.iter().position(|t| t.name == toxic) else {
        return fail(not_found("toxic"));
    };
    p.toxics.remove(i);
    Control::publish(p);
    no_content()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_loopback_names_on_any_port_and_origins_the_apis_own() {
        let bound: SocketAddr = "127.0.0.1:8474".parse().unwrap();
        for ok in [
            "localhost",
            "localhost:9999",
            "LOCALHOST:8474",
            "a.localhost",
            "127.0.0.2:1",
        ] {
            assert!(loopback_host(ok, bound), "{ok}");
        }
        for ok in ["[::1]", "[::1]:9999"] {
            assert!(loopback_host(ok, bound), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8474",
            "localhost.evil:8474",
            "10.0.0.1:8474",
        ] {
            assert!(!loopback_host(bad, bound), "{bad}");
        }
        assert!(own_origin("http://localhost:8474", bound));
        assert!(own_origin("http://[::1]:8474", bound));
        assert!(!own_origin("http://localhost:3000", bound));
        assert!(!own_origin("https://localhost:8474", bound));
        assert!(!own_origin("null", bound));
        let any: SocketAddr = "0.0.0.0:8474".parse().unwrap();
        assert!(own_origin("http://0.0.0.0:8474", any));
    }

    #[test]
    fn request_ids_look_like_xids() {
        let a = xid();
        let b = xid();
        assert_eq!(a.len(), 20);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'v').contains(&c)),
            "{a}"
        );
        assert_ne!(a, b);
    }
}
