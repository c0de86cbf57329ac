//! The HTTP routes, following Toxiproxy's v2 API where it defines behaviour:
//! the same paths, methods, status codes (proxy create 201, toxic create
//! 200, deletes and reset 204, errors 400/404/409 with `{"error", "status"}`
//! bodies), case-insensitive JSON keys, partial updates.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use super::model::{ApiError, TOXIPROXY_VERSION, Toxic, lowercase_keys};
use super::{ApiProxy, BODY_LIMIT, Control, Listener};

#[derive(Clone)]
struct ApiState {
    control: Arc<Control>,
    token: Option<Arc<str>>,
    /// Where the API listens: the only origin and (on loopback) host it
    /// answers.
    bound: SocketAddr,
}

/// The API's routes, guarded (browsers, token) and with a body limit.
pub(crate) fn router(control: Arc<Control>, token: Option<String>, bound: SocketAddr) -> Router {
    let state = ApiState {
        control,
        token: token.filter(|t| !t.is_empty()).map(Arc::from),
        bound,
    };
    Router::new()
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", get(proxy_index).post(proxy_create))
        .route(
            "/proxies/{proxy}",
            get(proxy_show)
                .post(proxy_update)
                .patch(proxy_update)
                .delete(proxy_delete),
        )
        .route(
            "/proxies/{proxy}/toxics",
            get(toxic_index).post(toxic_create),
        )
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(toxic_show)
                .post(toxic_update)
                .patch(toxic_update)
                .delete(toxic_delete),
        )
        .fallback(|| async { fail(ApiError::new(StatusCode::NOT_FOUND, "not found")) })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Refuses browsers (as Toxiproxy does: a web page must not drive the API)
/// and, when a token is set, requests without it; bounds each request's
/// time.
async fn guard(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    if let Some(refusal) = refuse_browsers(&st, req.headers()) {
        return refusal;
    }
    if let Some(token) = &st.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same(given.as_bytes(), token.as_bytes()) {
            return fail(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong API token (send Authorization: Bearer TOKEN)",
            ));
        }
    }
    match tokio::time::timeout(super::server::REQUEST_TIMEOUT, next.run(req)).await {
        Ok(r) => r,
        Err(_) => fail(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the request took too long",
        )),
    }
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
    if st.token.is_none() && st.bound.ip().is_loopback() {
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

/// Whether `origin` (`scheme://host[:port]`) is the API's own.
fn own_origin(origin: &str, bound: SocketAddr) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|hostport| loopback_host(hostport, bound) || hostport == bound.to_string())
}

/// Whether a `Host` header names the API by a loopback name or its own
/// address, on its own port (or none).
fn loopback_host(host: &str, bound: SocketAddr) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && !p.contains(']') => (n, Some(p)),
        _ => (host, None),
    };
    if port.is_some_and(|p| p != bound.port().to_string()) {
        return false;
    }
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

fn fail(e: ApiError) -> Response {
    reply(e.status, e.to_json())
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// The body as a JSON value with lower-cased keys (Go matches keys without
/// regard to case); too big is 413, not JSON is 400.
fn parse(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let body = body.map_err(|r| ApiError::new(r.status(), r.body_text()))?;
    let v: Value = serde_json::from_slice(&body).map_err(ApiError::bad_request)?;
    Ok(lowercase_keys(v))
}

fn object(v: Value) -> Result<Map<String, Value>, ApiError> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request("expected a JSON object")),
    }
}

fn string_field(m: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::bad_request(format!("{key} must be a string"))),
    }
}

fn bool_field(m: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad_request(format!(
            "{key} must be true or false"
        ))),
    }
}

fn proxy_json(p: &ApiProxy) -> Value {
    let (listen, upstream) = match &p.listener {
        Listener::Transparent => ("transparent".to_string(), p.rule.matcher.to_string()),
        Listener::Socket {
            requested,
            bound,
            upstream,
            ..
        } => (
            bound.map_or_else(|| requested.clone(), |b| b.to_string()),
            upstream.clone(),
        ),
    };
    json!({
        "name": p.name,
        "listen": listen,
        "upstream": upstream,
        "enabled": p.enabled,
        "toxics": p.toxics.iter().map(Toxic::to_json).collect::<Vec<_>>(),
    })
}

async fn version() -> Response {
    reply(
        StatusCode::OK,
        json!({"version": TOXIPROXY_VERSION, "netchaos": env!("CARGO_PKG_VERSION")}),
    )
}

async fn metrics(State(st): State<ApiState>) -> Response {
    let text = super::metrics::render(&st.control.relay.events.stats);
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
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

/// Validated fields of a new proxy.
struct NewProxy {
    name: String,
    listen: String,
    upstream: String,
    enabled: bool,
}

fn new_proxy(m: &Map<String, Value>, at: &str) -> Result<NewProxy, ApiError> {
    let name = string_field(m, "name")?.filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("missing required field: name{at}"),
        )
    })?;
    let upstream = string_field(m, "upstream")?.filter(|u| !u.is_empty());
    let upstream = upstream.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("missing required field: upstream{at}"),
        )
    })?;
    let upstream = crate::plan::parse_upstream(&upstream)
        .map_err(|e| ApiError::bad_request(format!("upstream: expected {e}, got {upstream:?}")))?;
    let listen = string_field(m, "listen")?
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "127.0.0.1:0".into());
    crate::plan::parse_listen(&listen)
        .map_err(|e| ApiError::bad_request(format!("listen: expected {e}, got {listen:?}")))?;
    let enabled = bool_field(m, "enabled")?.unwrap_or(true);
    Ok(NewProxy {
        name,
        listen,
        upstream,
        enabled,
    })
}

/// Creates a listener proxy (binding it when enabled).
fn create(control: &Control, n: NewProxy) -> Result<ApiProxy, ApiError> {
    let (bound, endpoint) = if n.enabled {
        let (b, e) = control.start(&n.name, &n.listen, &n.upstream)?;
        (Some(b), Some(e))
    } else {
        (None, None)
    };
    let rule = control.proxy_rule(&n.name);
    let p = ApiProxy {
        name: n.name,
        listener: Listener::Socket {
            requested: n.listen,
            bound,
            upstream: n.upstream,
            endpoint,
        },
        enabled: n.enabled,
        rule,
        toxics: Vec::new(),
    };
    Control::publish(&p);
    Ok(p)
}

async fn proxy_create(State(st): State<ApiState>, body: Result<Bytes, BytesRejection>) -> Response {
    let n = match parse(body).and_then(object).and_then(|m| new_proxy(&m, "")) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    if proxies.contains_key(&n.name) {
        return fail(ApiError::new(StatusCode::CONFLICT, "proxy already exists"));
    }
    match create(&st.control, n) {
        Ok(p) => {
            let v = proxy_json(&p);
            proxies.insert(p.name.clone(), p);
            reply(StatusCode::CREATED, v)
        }
        Err(e) => fail(e),
    }
}

async fn populate(State(st): State<ApiState>, body: Result<Bytes, BytesRejection>) -> Response {
    // Check every proxy before changing anything.
    let wanted = (|| {
        let Value::Array(items) = parse(body)? else {
            return Err(ApiError::bad_request("expected a JSON array of proxies"));
        };
        let mut wanted: Vec<NewProxy> = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            let n = new_proxy(&object(item)?, &format!(" at proxy {}", i + 1))?;
            if wanted.iter().any(|w| w.name == n.name) {
                return Err(ApiError::bad_request(format!(
                    "duplicate proxy name {:?}",
                    n.name
                )));
            }
            wanted.push(n);
        }
        Ok(wanted)
    })();
    let wanted = match wanted {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    let names: Vec<String> = wanted.iter().map(|n| n.name.clone()).collect();
    for n in wanted {
        // The same listen and upstream: kept as it is, toxics and all.
        let same = proxies.get(&n.name).is_some_and(|p| match &p.listener {
            Listener::Socket {
                requested,
                upstream,
                ..
            } => *requested == n.listen && *upstream == n.upstream,
            Listener::Transparent => false,
        });
        if same {
            continue;
        }
        if let Some(old) = proxies.remove(&n.name) {
            stop(&old).await;
        }
        match create(&st.control, n) {
            Ok(p) => {
                proxies.insert(p.name.clone(), p);
            }
            Err(e) => return fail(e),
        }
    }
    // As Toxiproxy answers: the proxies of the request.
    let out: Vec<Value> = names
        .iter()
        .filter_map(|n| proxies.get(n))
        .map(proxy_json)
        .collect();
    reply(StatusCode::CREATED, json!({"proxies": out}))
}

/// Closes a listener proxy's socket and ends its connections; returns once
/// the port is free.
async fn stop(p: &ApiProxy) {
    if let Listener::Socket {
        endpoint: Some(ep), ..
    } = &p.listener
    {
        ep.close().await;
    }
}

async fn proxy_show(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    match st.control.proxies.lock().await.get(&name) {
        Some(p) => reply(StatusCode::OK, proxy_json(p)),
        None => fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found")),
    }
}

async fn proxy_update(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse(body).and_then(object) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let control = st.control.clone();
    let mut proxies = control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    match update(&control, p, &m).await {
        Ok(()) => reply(StatusCode::OK, proxy_json(p)),
        Err(e) => fail(e),
    }
}

/// Applies a proxy update: `enabled`, `listen`, `upstream`, each optional.
async fn update(
    control: &Control,
    p: &mut ApiProxy,
    m: &Map<String, Value>,
) -> Result<(), ApiError> {
    let enabled = bool_field(m, "enabled")?.unwrap_or(p.enabled);
    let listen = string_field(m, "listen")?.filter(|l| !l.is_empty());
    let new_upstream = string_field(m, "upstream")?.filter(|u| !u.is_empty());
    match &mut p.listener {
        Listener::Transparent => {
            if listen.is_some() || new_upstream.is_some() {
                return Err(ApiError::bad_request(
                    "a transparent rule has no listen address or upstream to change",
                ));
            }
            p.rule.set_enabled(enabled);
        }
        Listener::Socket {
            requested,
            bound,
            upstream,
            endpoint,
        } => {
            let changed = listen.as_ref().is_some_and(|l| l != requested)
                || new_upstream.as_ref().is_some_and(|u| u != upstream);
            if let Some(u) = &new_upstream {
                *upstream = crate::plan::parse_upstream(u).map_err(|e| {
                    ApiError::bad_request(format!("upstream: expected {e}, got {u:?}"))
                })?;
            }
            if let Some(l) = &listen {
                crate::plan::parse_listen(l).map_err(|e| {
                    ApiError::bad_request(format!("listen: expected {e}, got {l:?}"))
                })?;
                *requested = l.clone();
                *bound = None;
            }
            if changed || !enabled {
                if let Some(ep) = endpoint.take() {
                    ep.close().await;
                }
            }
            if enabled && endpoint.is_none() {
                // Re-opening keeps the port it had.
                let at = bound.map_or_else(|| requested.clone(), |b| b.to_string());
                let (b, ep) = control.start(&p.name, &at, upstream)?;
                *bound = Some(b);
                *endpoint = Some(ep);
            }
        }
    }
    p.enabled = enabled;
    Ok(())
}

async fn proxy_delete(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    let removed = st.control.proxies.lock().await.remove(&name);
    match removed {
        Some(p) => {
            stop(&p).await;
            st.control.relay.rules.remove(&p.name);
            no_content()
        }
        None => fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found")),
    }
}

async fn reset(State(st): State<ApiState>) -> Response {
    let control = st.control.clone();
    let mut proxies = control.proxies.lock().await;
    let on = Map::from_iter([("enabled".to_string(), Value::Bool(true))]);
    for p in proxies.values_mut() {
        p.toxics.clear();
        Control::publish(p);
        if let Err(e) = update(&control, p, &on).await {
            return fail(e);
        }
    }
    no_content()
}

async fn toxic_index(State(st): State<ApiState>, Path(name): Path<String>) -> Response {
    match st.control.proxies.lock().await.get(&name) {
        Some(p) => reply(
            StatusCode::OK,
            Value::Array(p.toxics.iter().map(Toxic::to_json).collect()),
        ),
        None => fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found")),
    }
}

async fn toxic_create(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse(body).and_then(object) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let Some(scope) = st.control.scope(&name).await else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    let id = st.control.relay.rules.new_fault_id();
    let t = match off_runtime(move || Toxic::from_request(&m, &scope, id)).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
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
        Err(_) => Err(ApiError::bad_request(
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
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    match p.toxics.iter().find(|t| t.name == toxic) {
        Some(t) => reply(StatusCode::OK, t.to_json()),
        None => fail(ApiError::new(StatusCode::NOT_FOUND, "toxic not found")),
    }
}

async fn toxic_update(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse(body).and_then(object) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let current = {
        let proxies = st.control.proxies.lock().await;
        let Some(p) = proxies.get(&name) else {
            return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
        };
        let Some(t) = p.toxics.iter().find(|t| t.name == toxic) else {
            return fail(ApiError::new(StatusCode::NOT_FOUND, "toxic not found"));
        };
        t.clone()
    };
    let Some(scope) = st.control.scope(&name).await else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    let fresh = st.control.relay.rules.new_fault_id();
    let t = match off_runtime(move || current.updated(&m, &scope, fresh)).await {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    let Some(i) = p.toxics.iter().position(|x| x.name == toxic) else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "toxic not found"));
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
        return fail(ApiError::new(StatusCode::NOT_FOUND, "proxy not found"));
    };
    let Some(i) = p.toxics.iter().position(|t| t.name == toxic) else {
        return fail(ApiError::new(StatusCode::NOT_FOUND, "toxic not found"));
    };
    p.toxics.remove(i);
    Control::publish(p);
    no_content()
}
