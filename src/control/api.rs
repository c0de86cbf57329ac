//! The HTTP routes, following Toxiproxy's v2 API where it defines behaviour:
//! the same paths, methods, status codes (proxy create 201, toxic create
//! 200, deletes and reset 204, errors 400/404/409 with `{"error", "status"}`
//! bodies), case-insensitive JSON keys, partial updates.

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
}

/// The API's routes, guarded (browsers, token) and with a body limit.
pub fn router(control: Arc<Control>, token: Option<String>) -> Router {
    let state = ApiState {
        control,
        token: token.filter(|t| !t.is_empty()).map(Arc::from),
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
        .fallback(|| async { fail(ApiError::new(404, "not found")) })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Refuses browsers (as Toxiproxy does: a web page must not drive the API)
/// and, when a token is set, requests without it.
async fn guard(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    let ua = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ua.starts_with("Mozilla/") {
        return (StatusCode::FORBIDDEN, "User agent not allowed\n").into_response();
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
                401,
                "missing or wrong API token (send Authorization: Bearer TOKEN)",
            ));
        }
    }
    next.run(req).await
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn reply(status: u16, v: Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut r = (code, v.to_string()).into_response();
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
    let body = body.map_err(|r| ApiError::new(r.status().as_u16(), r.body_text()))?;
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
        200,
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
    reply(200, Value::Object(all))
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
    let name =
        name.ok_or_else(|| ApiError::new(400, format!("missing required field: name{at}")))?;
    let upstream = string_field(m, "upstream")?.filter(|u| !u.is_empty());
    let upstream = upstream
        .ok_or_else(|| ApiError::new(400, format!("missing required field: upstream{at}")))?;
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
        return fail(ApiError::new(409, "proxy already exists"));
    }
    match create(&st.control, n) {
        Ok(p) => {
            let v = proxy_json(&p);
            proxies.insert(p.name.clone(), p);
            reply(201, v)
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
    reply(201, json!({"proxies": out}))
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
        Some(p) => reply(200, proxy_json(p)),
        None => fail(ApiError::new(404, "proxy not found")),
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
        return fail(ApiError::new(404, "proxy not found"));
    };
    match update(&control, p, &m).await {
        Ok(()) => reply(200, proxy_json(p)),
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
        None => fail(ApiError::new(404, "proxy not found")),
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
            200,
            Value::Array(p.toxics.iter().map(Toxic::to_json).collect()),
        ),
        None => fail(ApiError::new(404, "proxy not found")),
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
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(404, "proxy not found"));
    };
    let connect_ok = st.control.transparent && matches!(p.listener, Listener::Transparent);
    let t = match Toxic::from_request(&m, connect_ok, st.control.relay.rules.new_fault_id()) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    if p.toxics.iter().any(|x| x.name == t.name) {
        return fail(ApiError::new(409, "toxic already exists"));
    }
    let v = t.to_json();
    p.toxics.push(t);
    Control::publish(p);
    reply(200, v)
}

async fn toxic_show(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
) -> Response {
    let proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get(&name) else {
        return fail(ApiError::new(404, "proxy not found"));
    };
    match p.toxics.iter().find(|t| t.name == toxic) {
        Some(t) => reply(200, t.to_json()),
        None => fail(ApiError::new(404, "toxic not found")),
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
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(404, "proxy not found"));
    };
    let connect_ok = st.control.transparent && matches!(p.listener, Listener::Transparent);
    let Some(i) = p.toxics.iter().position(|t| t.name == toxic) else {
        return fail(ApiError::new(404, "toxic not found"));
    };
    match p.toxics[i].updated(&m, connect_ok, st.control.relay.rules.new_fault_id()) {
        Ok(t) => {
            let v = t.to_json();
            p.toxics[i] = t;
            Control::publish(p);
            reply(200, v)
        }
        Err(e) => fail(e),
    }
}

async fn toxic_delete(
    State(st): State<ApiState>,
    Path((name, toxic)): Path<(String, String)>,
) -> Response {
    let mut proxies = st.control.proxies.lock().await;
    let Some(p) = proxies.get_mut(&name) else {
        return fail(ApiError::new(404, "proxy not found"));
    };
    let Some(i) = p.toxics.iter().position(|t| t.name == toxic) else {
        return fail(ApiError::new(404, "toxic not found"));
    };
    p.toxics.remove(i);
    Control::publish(p);
    no_content()
}
