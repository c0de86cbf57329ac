//! `netchaos ctl`: a small client for the control API (netchaos's, or a
//! Toxiproxy server's for the calls both share).

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::cli::{CtlAction, CtlArgs};
use crate::error::{Error, Result};

const DEFAULT_URL: &str = "http://127.0.0.1:8474";

struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    fn new(args: &CtlArgs) -> Client {
        let base = args
            .url
            .clone()
            .or_else(|| std::env::var("NETCHAOS_URL").ok())
            .or_else(|| std::env::var("TOXIPROXY_URL").ok())
            .unwrap_or_else(|| DEFAULT_URL.into());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .user_agent(concat!("netchaos-ctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client {
            base: base.trim_end_matches('/').to_string(),
            token: args.token.clone().filter(|t| !t.is_empty()),
            agent,
        }
    }

    /// One request; returns the status and the body (JSON when there is
    /// one).
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value)> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let with_auth = |r: ureq::RequestBuilder<ureq::typestate::WithoutBody>| match &auth {
            Some(a) => r.header("Authorization", a),
            None => r,
        };
        let with_auth_body = |r: ureq::RequestBuilder<ureq::typestate::WithBody>| match &auth {
            Some(a) => r.header("Authorization", a),
            None => r,
        };
        let sent = match (method, body) {
            ("GET", _) => with_auth(self.agent.get(&url)).call(),
            ("DELETE", _) => with_auth(self.agent.delete(&url)).call(),
            ("POST", Some(b)) => with_auth_body(self.agent.post(&url))
                .header("Content-Type", "application/json")
                .send(b.to_string()),
            ("POST", None) => with_auth_body(self.agent.post(&url)).send_empty(),
            (_, b) => with_auth_body(self.agent.patch(&url))
                .header("Content-Type", "application/json")
                .send(b.unwrap_or_else(|| json!({})).to_string()),
        };
        let mut resp = sent.map_err(|e| {
            Error::runtime(format!(
                "cannot reach the control API at {}: {e}",
                self.base
            ))
        })?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            let msg = value
                .get("error")
                .and_then(Value::as_str)
                .map_or_else(|| value.to_string(), str::to_string);
            return Err(Error::runtime(format!("the API said {status}: {msg}")));
        }
        Ok((status, value))
    }
}

pub(super) fn run(args: &CtlArgs) -> Result<u8> {
    let c = Client::new(args);
    match &args.action {
        CtlAction::List => {
            let (_, v) = c.call("GET", "/proxies", None)?;
            let proxies = v.as_object().cloned().unwrap_or_default();
            if proxies.is_empty() {
                println!("no proxies");
            }
            for (_, p) in proxies {
                print_proxy(&p);
            }
        }
        CtlAction::Show { proxy } => {
            let (_, v) = c.call("GET", &format!("/proxies/{}", seg(proxy)), None)?;
            print_proxy(&v);
        }
        CtlAction::Create {
            proxy,
            listen,
            upstream,
        } => {
            let (_, v) = c.call(
                "POST",
                "/proxies",
                Some(json!({"name": proxy, "listen": listen, "upstream": upstream})),
            )?;
            print_proxy(&v);
        }
        CtlAction::Delete { proxy } => {
            c.call("DELETE", &format!("/proxies/{}", seg(proxy)), None)?;
            println!("deleted {proxy}");
        }
        CtlAction::Add { proxy, spec, name } => {
            let (kind, attrs) = split_spec(spec)?;
            let mut body = Map::new();
            body.insert("type".into(), json!(kind));
            if let Some(s) = attrs.get("stream").and_then(Value::as_str) {
                body.insert("stream".into(), json!(s));
            }
            if let Some(p) = attrs.get("probability") {
                let p = p.as_f64().ok_or_else(|| {
                    Error::Usage(format!(
                        "probability: expected a number from 0 to 1, got {p}"
                    ))
                })?;
                body.insert("toxicity".into(), json!(p));
            }
            let attrs: Map<String, Value> = attrs
                .into_iter()
                .filter(|(k, _)| k != "stream" && k != "probability")
                .collect();
            body.insert("attributes".into(), Value::Object(attrs));
            if let Some(n) = name {
                body.insert("name".into(), json!(n));
            }
            let (_, v) = c.call(
                "POST",
                &format!("/proxies/{}/toxics", seg(proxy)),
                Some(Value::Object(body)),
            )?;
            println!("added {} to {proxy}", toxic_line(&v));
        }
        CtlAction::Update {
            proxy,
            toxic,
            attributes,
        } => {
            let (_, attrs) = split_spec(&format!("x:{attributes}"))?;
            let (_, v) = c.call(
                "PATCH",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(toxic)),
                Some(json!({"attributes": attrs})),
            )?;
            println!("updated {}", toxic_line(&v));
        }
        CtlAction::Remove { proxy, toxic } => {
            c.call(
                "DELETE",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(toxic)),
                None,
            )?;
            println!("removed {toxic} from {proxy}");
        }
        CtlAction::Enable { proxy } | CtlAction::Disable { proxy } => {
            let on = matches!(args.action, CtlAction::Enable { .. });
            let (_, v) = c.call(
                "PATCH",
                &format!("/proxies/{}", seg(proxy)),
                Some(json!({"enabled": on})),
            )?;
            print_proxy(&v);
        }
        CtlAction::Reset => {
            c.call("POST", "/reset", None)?;
            println!("every proxy enabled, every fault removed");
        }
        CtlAction::Metrics => {
            let (_, v) = c.call("GET", "/metrics", None)?;
            print!("{}", v.as_str().unwrap_or_default());
        }
    }
    Ok(0)
}

/// `TYPE:key=value,...` as for `--fault`, attributes kept as text (netchaos
/// units); the API parses and validates them.
fn split_spec(spec: &str) -> Result<(String, Map<String, Value>)> {
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut attrs = Map::new();
    let pairs =
        crate::profile::split_pairs(rest).map_err(|m| Error::Usage(format!("{spec:?}: {m}")))?;
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("{spec:?}: expected key=value, got {pair:?}")))?;
        // Numbers go as numbers (Toxiproxy's attributes are), the rest as
        // text in netchaos's units (a double-quoted one unquoted).
        let v = v.trim();
        let value = match (v.parse::<i64>(), v.parse::<f64>()) {
            (Ok(i), _) => json!(i),
            (_, Ok(f)) if f.is_finite() => json!(f),
            _ => Value::String(
                crate::profile::unquote(v).map_err(|e| Error::Usage(format!("{spec:?}: {e}")))?,
            ),
        };
        attrs.insert(k.trim().to_string(), value);
    }
    Ok((kind.trim().to_string(), attrs))
}

/// A path segment, percent-encoded where a name needs it.
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn toxic_line(t: &Value) -> String {
    let attrs = t
        .get("attributes")
        .map(Value::to_string)
        .unwrap_or_default();
    format!(
        "{} ({} {}, toxicity {}) {attrs}",
        t["name"].as_str().unwrap_or("?"),
        t["type"].as_str().unwrap_or("?"),
        t["stream"].as_str().unwrap_or("?"),
        t["toxicity"]
    )
}

fn print_proxy(p: &Value) {
    println!(
        "{}  listen {}  upstream {}  {}",
        p["name"].as_str().unwrap_or("?"),
        p["listen"].as_str().unwrap_or("?"),
        p["upstream"].as_str().unwrap_or("?"),
        if p["enabled"].as_bool().unwrap_or(false) {
            "enabled"
        } else {
            "DISABLED"
        }
    );
    for t in p["toxics"].as_array().into_iter().flatten() {
        println!("  - {}", toxic_line(t));
    }
}
