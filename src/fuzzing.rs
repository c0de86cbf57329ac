//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz) and for the
//! test that replays their corpus (`tests/fuzz_corpus.rs`). Each takes
//! arbitrary bytes and must return without panicking; where an input is
//! accepted, it also checks a property that must hold for it.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::control::Control;
use crate::events::Events;
use crate::plan::Plan;
use crate::relay::{Relay, RelayOptions};
use crate::ruleset::RuleSet;

/// A profile: parsed, and on success built into a plan; errors must render.
pub fn profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::profile::parse("fuzz.toml", text, None) {
        Ok(doc) => {
            let _ = format!("{doc:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// A `--fault` string: parsed; what parses must also describe itself
/// (display, parameters) and pass the plan's checks as a rule of its own.
pub fn fault_flag(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::profile::parse_fault_flag(text) {
        Ok(spec) => {
            let _ = spec.to_string();
            let _ = spec.all_params();
            let _ = crate::profile::build_plan(&[], &[text.to_string()], Some(1));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

struct Api {
    rt: tokio::runtime::Runtime,
    control: Arc<Control>,
}

fn api() -> &'static Api {
    static API: OnceLock<Api> = OnceLock::new();
    API.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let control = rt.block_on(async {
            let relay = Relay::new(
                Arc::new(RuleSet::from_plan(&Plan::default())),
                Arc::new(Events::in_memory()),
                RelayOptions::default(),
            );
            Control::new(
                relay,
                crate::control::Reach::Proxy,
                crate::settings::files::FilePolicy::Nowhere,
                Default::default(),
                false,
            )
        });
        Api { rt, control }
    })
}

/// One HTTP request to the control API, from bytes: the first picks the
/// method, then the path up to a newline, then the body. The API must
/// answer every request (no panic, no 5xx), and proxies made are deleted
/// again so that the fuzzer's process does not fill up with listeners.
pub fn api_request(data: &[u8]) {
    let Some((&m, rest)) = data.split_first() else {
        return;
    };
    let method = ["GET", "POST", "PATCH", "DELETE", "PUT"][usize::from(m) % 5];
    let (path, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let Ok(req) = axum::http::Request::builder()
        .method(method)
        .uri(format!("/{}", path.trim_start_matches('/')))
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
    else {
        return;
    };
    let a = api();
    a.rt.block_on(async {
        let router =
            crate::control::api::router(a.control.clone(), &[], ([127, 0, 0, 1], 8474).into());
        let resp = router.oneshot(req).await.expect("the router is infallible");
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        // A 5xx only for what Toxiproxy also answers 500: a listen address
        // that cannot be bound (busy, not local, privileged).
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !status.is_server_error() || (status == 500 && text.contains("listen tcp")),
            "{method} /{path}: {status} {text}"
        );
        let names: Vec<String> = a.control.proxies.lock().await.keys().cloned().collect();
        for name in names {
            let del = axum::http::Request::builder()
                .method("DELETE")
                .uri(format!("/proxies/{}", percent_encode(&name)))
                .body(Body::empty())
                .expect("a valid request");
            let router =
                crate::control::api::router(a.control.clone(), &[], ([127, 0, 0, 1], 8474).into());
            let _ = router.oneshot(del).await;
        }
        a.control.proxies.lock().await.clear();
    });
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
