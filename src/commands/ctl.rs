//! `netchaos ctl`: a small client for the control API (netchaos's, or a
//! Toxiproxy server's for the calls both share) — and, invoked as
//! `toxiproxy-cli`, that tool: its commands, flags (Go's `-flag` forms
//! too, rewritten in [`crate::cli::toxiproxy_argv`]) and output.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::cli::{CtlAction, CtlArgs, ToxicAction};
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
        // `localhost:8474`, as toxiproxy's client takes it: HTTP.
        let base = match base.contains("://") {
            true => base,
            false => format!("http://{base}"),
        };
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
    if args.version {
        match args.toxiproxy_cli {
            true => println!(
                "toxiproxy-cli version {} (netchaos {})",
                crate::control::model::TOXIPROXY_VERSION,
                env!("CARGO_PKG_VERSION")
            ),
            false => println!("netchaos ctl {}", env!("CARGO_PKG_VERSION")),
        }
        return Ok(0);
    }
    let Some(action) = &args.action else {
        return Err(Error::Usage(
            "give a command: list, inspect, create, toggle, delete, toxic add|update|remove, \
             add, update, remove, enable, disable, reset or metrics (--help for more)"
                .into(),
        ));
    };
    let c = Client::new(args);
    if args.toxiproxy_cli
        && let Some(done) = as_toxiproxy_cli(&c, action)?
    {
        return Ok(done);
    }
    match action {
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
                body.insert("toxicity".into(), toxicity_of(p)?);
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
            let (_, mut attrs) = split_spec(&format!("x:{attributes}"))?;
            // The toxic's own fields, as `add` takes them: not attributes.
            let mut body = Map::new();
            if let Some(p) = attrs.remove("probability") {
                body.insert("toxicity".into(), toxicity_of(&p)?);
            }
            if let Some(st) = attrs.remove("stream") {
                body.insert("stream".into(), st);
            }
            body.insert("attributes".into(), Value::Object(attrs));
            let (_, v) = c.call(
                "PATCH",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(toxic)),
                Some(Value::Object(body)),
            )?;
            println!("updated {}", toxic_line(&v));
        }
        CtlAction::Toggle { proxy } => {
            let on = toggle(&c, proxy)?;
            println!("Proxy {proxy} is now {}", enabled_text(on));
        }
        CtlAction::Toxic(t) => toxic(&c, t)?,
        CtlAction::Remove { proxy, toxic } => {
            c.call(
                "DELETE",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(toxic)),
                None,
            )?;
            println!("removed {toxic} from {proxy}");
        }
        CtlAction::Enable { proxy } | CtlAction::Disable { proxy } => {
            let on = matches!(action, CtlAction::Enable { .. });
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

/// A `probability` as the API's `toxicity`: a number from 0 to 1.
fn toxicity_of(p: &Value) -> Result<Value> {
    match p.as_f64() {
        Some(f) if (0.0..=1.0).contains(&f) => Ok(json!(f)),
        _ => Err(Error::Usage(format!(
            "probability: expected a number from 0 to 1, got {p}"
        ))),
    }
}

/// toxiproxy-cli's `--toxicity`: a float from 0 to 1.
fn toxiproxy_toxicity(t: Option<&str>) -> Result<f64> {
    match t.map(|t| t.trim().parse::<f64>()) {
        None => Ok(1.0),
        Some(Ok(f)) if (0.0..=1.0).contains(&f) => Ok(f),
        Some(_) => Err(Error::runtime(
            "toxicity should be a float between 0 and 1.",
        )),
    }
}

/// toxiproxy-cli's `-a key=value` attributes: numbers as numbers (whole
/// ones as integers, which every Toxiproxy attribute is), the rest as
/// text; a pair without `=` is skipped, as it does.
fn toxiproxy_attributes(pairs: &[String]) -> Map<String, Value> {
    let mut out = Map::new();
    for raw in pairs {
        let Some((k, v)) = raw.split_once('=') else {
            continue;
        };
        let value = match v.parse::<f64>() {
            Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9e15 => json!(f as i64),
            Ok(f) if f.is_finite() => json!(f),
            _ => json!(v),
        };
        out.insert(k.to_string(), value);
    }
    out
}

/// Flips a proxy's `enabled`; what it is now.
fn toggle(c: &Client, proxy: &str) -> Result<bool> {
    let path = format!("/proxies/{}", seg(proxy));
    let (_, p) = c.call("GET", &path, None)?;
    let on = !p["enabled"].as_bool().unwrap_or(false);
    c.call("PATCH", &path, Some(json!({"enabled": on})))?;
    Ok(on)
}

fn enabled_text(on: bool) -> &'static str {
    if on { "enabled" } else { "disabled" }
}

/// `toxic add|update|remove`, with toxiproxy-cli's flags and messages.
fn toxic(c: &Client, t: &ToxicAction) -> Result<()> {
    match t {
        ToxicAction::Add {
            proxy,
            name,
            kind,
            toxicity,
            attributes,
            upstream,
            downstream,
        } => {
            if *upstream && *downstream {
                return Err(Error::runtime(
                    "Only one should be specified: upstream or downstream.",
                ));
            }
            let stream = if *upstream { "upstream" } else { "downstream" };
            let mut body = json!({
                "type": kind,
                "stream": stream,
                "toxicity": toxiproxy_toxicity(toxicity.as_deref())?,
                "attributes": toxiproxy_attributes(attributes),
            });
            if let Some(n) = name.as_ref().filter(|n| !n.is_empty()) {
                body["name"] = json!(n);
            }
            let (_, v) = c.call(
                "POST",
                &format!("/proxies/{}/toxics", seg(proxy)),
                Some(body),
            )?;
            println!(
                "Added {} {} toxic '{}' on proxy '{proxy}'",
                v["stream"].as_str().unwrap_or(stream),
                v["type"].as_str().unwrap_or(kind),
                v["name"].as_str().unwrap_or_default()
            );
        }
        ToxicAction::Update {
            proxy,
            name,
            toxicity,
            attributes,
        } => {
            let (_, v) = c.call(
                "PATCH",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(name)),
                Some(json!({
                    "toxicity": toxiproxy_toxicity(toxicity.as_deref())?,
                    "attributes": toxiproxy_attributes(attributes),
                })),
            )?;
            println!(
                "Updated toxic '{}' on proxy '{proxy}'",
                v["name"].as_str().unwrap_or(name)
            );
        }
        ToxicAction::Remove { proxy, name } => {
            c.call(
                "DELETE",
                &format!("/proxies/{}/toxics/{}", seg(proxy), seg(name)),
                None,
            )?;
            println!("Removed toxic '{name}' on proxy '{proxy}'");
        }
    }
    Ok(())
}

/// The commands whose output toxiproxy-cli words its own way (`None`:
/// the rest, which print the same either way).
fn as_toxiproxy_cli(c: &Client, action: &CtlAction) -> Result<Option<u8>> {
    use std::io::IsTerminal;
    let tty = std::io::stdout().is_terminal();
    let paint = |code: &'static str| if tty { code } else { "" };
    let (green, red, blue, yellow, purple, none) = (
        paint("\x1b[32m"),
        paint("\x1b[31m"),
        paint("\x1b[34m"),
        paint("\x1b[33m"),
        paint("\x1b[35m"),
        paint("\x1b[0m"),
    );
    // A column padded with tabs to `tabs` tab stops on a terminal.
    let column = |text: &str, tabs: usize| {
        let pad = if tty {
            tabs.saturating_sub(text.len() / 8 + 1)
        } else {
            0
        };
        format!("{text}\t{}", "\t".repeat(pad))
    };
    let hint = |m: &str| {
        if tty {
            println!("\n{none}Hint: {m}");
        }
    };
    match action {
        CtlAction::List => {
            let (_, v) = c.call("GET", "/proxies", None)?;
            let mut proxies: Vec<Value> = v
                .as_object()
                .map_or_else(Vec::new, |m| m.values().cloned().collect());
            proxies.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            if tty {
                println!(
                    "{green}Name\t\t\t{blue}Listen\t\t{yellow}Upstream\t\t{purple}Enabled\t\t{red}Toxics\n{none}======================================================================================"
                );
                if proxies.is_empty() {
                    print!("{red}no proxies\n{none}");
                    hint("create a proxy with `toxiproxy-cli create`");
                    return Ok(Some(0));
                }
            }
            for p in &proxies {
                let on = p["enabled"].as_bool().unwrap_or(false);
                let n = p["toxics"].as_array().map_or(0, Vec::len);
                let toxics = if n == 0 && tty {
                    "None".to_string()
                } else {
                    n.to_string()
                };
                print!(
                    "{}{}{none}",
                    if on { green } else { red },
                    column(p["name"].as_str().unwrap_or(""), 3)
                );
                print!(
                    "{blue}{}{none}",
                    column(p["listen"].as_str().unwrap_or(""), 2)
                );
                print!(
                    "{yellow}{}{none}",
                    column(p["upstream"].as_str().unwrap_or(""), 3)
                );
                print!("{purple}{}{none}", column(enabled_text(on), 2));
                println!("{red}{toxics}{none}");
            }
            hint("inspect toxics with `toxiproxy-cli inspect <proxyName>`");
        }
        CtlAction::Show { proxy } => {
            let (_, p) = c.call("GET", &format!("/proxies/{}", seg(proxy)), None)?;
            let toxics: Vec<Value> = p["toxics"].as_array().cloned().unwrap_or_default();
            let line = |t: &Value| {
                let mut attrs: Vec<(String, String)> = t["attributes"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), str::to_string),
                        )
                    })
                    .collect();
                attrs.sort();
                let attrs: String = attrs.iter().map(|(k, v)| format!("\t{k}={v}")).collect();
                let name = t["name"].as_str().unwrap_or("");
                let name = if tty {
                    format!("{blue}{name}:{none}")
                } else {
                    name.to_string()
                };
                println!(
                    "{name}\ttype={}\tstream={}\ttoxicity={:.2}\tattributes=[{attrs}\t]",
                    t["type"].as_str().unwrap_or(""),
                    t["stream"].as_str().unwrap_or(""),
                    t["toxicity"].as_f64().unwrap_or(1.0)
                );
            };
            if !tty {
                toxics.iter().for_each(line);
                return Ok(Some(0));
            }
            println!(
                "{purple}Name: {none}{}\t{blue}Listen: {none}{}\t{yellow}Upstream: {none}{}",
                p["name"].as_str().unwrap_or(""),
                p["listen"].as_str().unwrap_or(""),
                p["upstream"].as_str().unwrap_or("")
            );
            println!(
                "{none}======================================================================"
            );
            if toxics.is_empty() {
                println!("{red}Proxy has no toxics enabled.{none}");
            } else {
                for (i, stream) in ["Upstream", "Downstream"].into_iter().enumerate() {
                    if i == 1 {
                        println!();
                    }
                    let of: Vec<&Value> = toxics
                        .iter()
                        .filter(|t| (t["stream"] == "upstream") == (stream == "Upstream"))
                        .collect();
                    println!("{green}{stream} toxics:{none}");
                    if of.is_empty() {
                        println!("{red}Proxy has no {stream} toxics enabled.{none}");
                    }
                    of.into_iter().for_each(line);
                }
            }
            hint("add a toxic with `toxiproxy-cli toxic add`");
        }
        CtlAction::Create {
            proxy,
            listen,
            upstream,
        } => {
            c.call(
                "POST",
                "/proxies",
                Some(json!({"name": proxy, "listen": listen, "upstream": upstream})),
            )?;
            println!("Created new proxy {proxy}");
        }
        CtlAction::Delete { proxy } => {
            c.call("DELETE", &format!("/proxies/{}", seg(proxy)), None)?;
            println!("Deleted proxy {proxy}");
        }
        _ => return Ok(None),
    }
    Ok(Some(0))
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
