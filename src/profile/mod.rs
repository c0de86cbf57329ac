//! Profiles: the TOML format, the built-in profiles, and `--fault` strings.
//!
//! A profile is read into a located tree ([`node`]) and walked table by
//! table; every key is checked, so a typo is an error with its file, line
//! and column rather than a silently ignored setting. The result feeds
//! [`crate::plan::Plan`].

pub(crate) mod builtin;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::settings::{self as node, Fields, Node, ProfileError, Value, node_text};

use crate::fault::{self, FaultSpec};
use crate::plan::{self, DstPattern, Flow, Match, Plan, ProxySpec, Rule};

/// One profile, read and validated on its own.
#[derive(Debug, Clone)]
pub(crate) struct ProfileDoc {
    /// The file path, or `builtin:NAME`.
    pub source: String,
    pub description: Option<String>,
    pub seed: Option<u64>,
    pub rules: Vec<Rule>,
    pub proxies: Vec<ProxySpec>,
    /// `[[mocks]]`: hosts the built-in mock answers for.
    pub mocks: Vec<plan::MockSpec>,
    /// `[[mocks]] from = "DIR"`: cassettes it answers from first.
    pub cassettes: Vec<(PathBuf, String)>,
    /// Host-level shaping for `netchaos netem apply -p`.
    pub netem: Option<crate::netem::Netem>,
    /// `tls = "intercept"`: HTTPS is terminated for HTTP and TLS faults (`run`).
    pub tls_intercept: bool,
}

/// Reads a profile given as a built-in name or a path.
pub(crate) fn load(arg: &str) -> Result<ProfileDoc, ProfileError> {
    let looks_like_path = arg.contains('/') || arg.ends_with(".toml") || Path::new(arg).exists();
    if !looks_like_path {
        if let Some(text) = builtin::get(arg) {
            return parse(&format!("builtin:{arg}"), text, None);
        }
        let names = builtin::names();
        let hint =
            node::closest(arg, &names).map_or(String::new(), |n| format!(" (did you mean {n:?}?)"));
        return Err(ProfileError::new(
            format!("-p {arg}"),
            format!(
                "no built-in profile named {arg:?}{hint} and no file of that name; built-ins are: {} (see `netchaos profiles`)",
                names.join(", ")
            ),
        ));
    }
    if Path::new(arg).is_dir() {
        return Err(ProfileError::new(
            format!("-p {arg}"),
            format!("{arg} is a directory; give a profile file (TOML) or a built-in name"),
        ));
    }
    let text = std::fs::read_to_string(arg).map_err(|e| {
        // `-p flaky.toml` where no such file is: the built-in is `flaky`.
        let stem = Path::new(arg).file_stem().and_then(|s| s.to_str());
        let hint = match stem.filter(|s| builtin::names().contains(s)) {
            Some(s) if e.kind() == std::io::ErrorKind::NotFound => {
                format!("; the built-in profile of that name is `-p {s}` (its text: `netchaos check {s}`)")
            }
            _ => String::new(),
        };
        ProfileError::new(
            format!("-p {arg}"),
            format!("cannot read profile {arg}: {e}{hint}"),
        )
    })?;
    let dir = Path::new(arg).parent().map(PathBuf::from);
    parse(arg, &text, dir)
}

/// Parses profile text; `name` appears in error locations, `dir` resolves
/// relative paths inside it.
pub(crate) fn parse(
    name: &str,
    text: &str,
    dir: Option<PathBuf>,
) -> Result<ProfileDoc, ProfileError> {
    let mut top = Fields::new("profile", node::parse_toml(name, text)?)?;
    let description = top.string("description")?;
    let seed = top.integer_in("seed", 0, u64::MAX)?;
    let mut rules = Vec::new();
    for (i, node) in top.tables("rules")?.into_iter().enumerate() {
        rules.push(parse_rule(i, node, &dir)?);
    }
    let mut proxies = Vec::new();
    for (i, node) in top.tables("proxies")?.into_iter().enumerate() {
        proxies.push(parse_proxy(i, node)?);
    }
    let mut mocks = Vec::new();
    let mut cassettes = Vec::new();
    for (i, node) in top.tables("mocks")?.into_iter().enumerate() {
        match parse_mock(i, node, &dir)? {
            Mocked::Host(m) => mocks.push(m),
            Mocked::From(d, loc) => cassettes.push((d, loc)),
        }
    }
    let tls_intercept = top.choice("tls", &["intercept", "off"])? == Some("intercept");
    let netem = match top.take("netem") {
        Some(node) => {
            let mut f = Fields::new("netem", node)?;
            let n = crate::netem::Netem::from_fields(&mut f)?;
            f.finish()?;
            Some(checked_netem(&n, name)?)
        }
        None => None,
    };
    top.finish()?;
    Ok(ProfileDoc {
        source: name.to_string(),
        description,
        seed,
        rules,
        proxies,
        mocks,
        cassettes,
        netem,
        tls_intercept,
    })
}

/// A `[netem]` table is checked like the flags (the device may come later,
/// from --dev).
fn checked_netem(n: &crate::netem::Netem, name: &str) -> Result<crate::netem::Netem, ProfileError> {
    let mut probe = n.clone();
    if probe.dev.is_empty() {
        probe.dev = "dev".into();
    }
    probe
        .validate()
        .map_err(|e| ProfileError::new(name, format!("netem: {}", e.0.replace("--", ""))))?;
    Ok(n.clone())
}

fn parse_rule(i: usize, node: Node, dir: &Option<PathBuf>) -> Result<Rule, ProfileError> {
    let loc = node.loc.clone();
    let mut f = Fields::new(format!("rules[{i}]"), node)?;
    let name = f
        .string("name")?
        .unwrap_or_else(|| format!("rule-{}", i + 1));
    if name.trim().is_empty() {
        return Err(f.table_error("name must not be empty"));
    }
    let matcher = match f.take("match") {
        Some(m) => parse_match(&format!("rules[{i}].match"), m)?,
        None => Match::default(),
    };
    let mut faults = Vec::new();
    for (j, fnode) in f.tables("faults")?.into_iter().enumerate() {
        let ff = Fields::new(format!("rules[{i}].faults[{j}]"), fnode)?
            .with_files(crate::settings::files::FilePolicy::Anywhere { base: dir.clone() });
        faults.push(Arc::new(fault::parse_fault(ff)?));
    }
    f.finish()?;
    Ok(Rule {
        name: name.into(),
        matcher,
        faults,
        loc,
    })
}

fn parse_match(path: &str, node: Node) -> Result<Match, ProfileError> {
    let mut f = Fields::new(path, node)?;
    let mut m = Match::default();
    for n in f.strings("dst")?.unwrap_or_default() {
        let text = node_text(&n);
        m.dst.push(
            DstPattern::parse(&text)
                .map_err(|e| f.error("dst", &n.loc, format!("expected {e}, got {text:?}")))?,
        );
    }
    for n in f.strings("ports")?.unwrap_or_default() {
        let text = node_text(&n);
        m.ports.push(
            plan::parse_ports(&text)
                .map_err(|e| f.error("ports", &n.loc, format!("expected {e}, got {text:?}")))?,
        );
    }
    m.flow = match f.choice("direction", &["outbound", "inbound", "any"])? {
        Some("outbound") => Some(Flow::Outbound),
        Some("inbound") => Some(Flow::Inbound),
        _ => None,
    };
    for n in f.strings("proxy")?.unwrap_or_default() {
        m.proxies.push(node_text(&n));
    }
    m.protocol = match f.choice("protocol", &["http", "tcp"])? {
        Some("http") => Some(plan::Protocol::Http),
        Some(_) => Some(plan::Protocol::Tcp),
        None => None,
    };
    f.finish()?;
    Ok(m)
}

fn parse_proxy(i: usize, node: Node) -> Result<ProxySpec, ProfileError> {
    let loc = node.loc.clone();
    let mut f = Fields::new(format!("proxies[{i}]"), node)?;
    let name = f
        .string("name")?
        .unwrap_or_else(|| format!("proxy-{}", i + 1));
    let listen_node = f
        .take("listen")
        .ok_or_else(|| f.table_error("missing \"listen\" (like \"127.0.0.1:26379\")"))?;
    let listen_text = node_text(&listen_node);
    let listen = plan::parse_listen(&listen_text).map_err(|e| {
        f.error(
            "listen",
            &listen_node.loc,
            format!("expected {e}, got {listen_text:?}"),
        )
    })?;
    let up_node = f
        .take("upstream")
        .ok_or_else(|| f.table_error("missing \"upstream\" (like \"127.0.0.1:6379\")"))?;
    let up_text = node_text(&up_node);
    let upstream = plan::parse_upstream(&up_text).map_err(|e| {
        f.error(
            "upstream",
            &up_node.loc,
            format!("expected {e}, got {up_text:?}"),
        )
    })?;
    if !matches!(listen_node.value, Value::Str(_) | Value::Int(_)) {
        return Err(f.error("listen", &listen_node.loc, "expected a string"));
    }
    let upstream_tls = f.boolean("upstream_tls")?.unwrap_or(false);
    let serve_tls = f.boolean("tls")?.unwrap_or(false);
    f.finish()?;
    Ok(ProxySpec {
        name,
        listen,
        upstream,
        upstream_tls,
        serve_tls,
        loc,
    })
}

/// One `[[mocks]]` table: a host the mock makes answers up for, or a
/// cassette it answers from.
enum Mocked {
    Host(plan::MockSpec),
    From(PathBuf, String),
}

/// `[[mocks]]`: `api` (`anthropic`, `openai` or `gemini`) and `host` (the
/// API's own host by default); or `from` alone, a cassette directory
/// (relative to the profile's).
fn parse_mock(i: usize, node: Node, dir: &Option<PathBuf>) -> Result<Mocked, ProfileError> {
    let loc = node.loc.clone();
    let mut f = Fields::new(format!("mocks[{i}]"), node)?;
    if let Some(from) = f.take("from") {
        let text = node_text(&from);
        if !matches!(from.value, Value::Str(_)) || text.is_empty() {
            return Err(f.error(
                "from",
                &from.loc,
                "expected a directory of recorded answers",
            ));
        }
        if f.take("api").is_some() || f.take("host").is_some() {
            return Err(f.table_error(
                "\"from\" stands alone: its files name their hosts (a second [[mocks]] table \
                 gives made-up answers for a host)",
            ));
        }
        f.finish()?;
        let path = match dir {
            Some(d) if Path::new(&text).is_relative() => d.join(&text),
            _ => PathBuf::from(&text),
        };
        return Ok(Mocked::From(path, format!("{}: mocks[{i}].from", from.loc)));
    }
    let api_node = f.take("api").ok_or_else(|| {
        f.table_error(
            "missing \"api\" (\"anthropic\", \"openai\" or \"gemini\"), or \"from\" (a directory \
                 of recorded answers)",
        )
    })?;
    let api_text = node_text(&api_node);
    let api = match api_node.value {
        Value::Str(_) => {
            crate::mock::Api::parse(&api_text).map_err(|e| f.error("api", &api_node.loc, e))?
        }
        _ => return Err(f.error("api", &api_node.loc, "expected a string")),
    };
    let host = match f.take("host") {
        Some(n) => {
            let text = node_text(&n);
            if !matches!(n.value, Value::Str(_)) || !plan::is_mockable_host(&text) {
                return Err(f.error(
                    "host",
                    &n.loc,
                    format!("expected a host name like \"api.anthropic.com\", got {text:?}"),
                ));
            }
            text.trim_end_matches('.').to_ascii_lowercase()
        }
        None => api.host().to_string(),
    };
    f.finish()?;
    Ok(Mocked::Host(plan::MockSpec {
        host,
        api,
        loc,
        replay_only: false,
    }))
}

/// Parses `TYPE:key=value,key=value` (values may be double-quoted to hold
/// commas; `\n`, `\r`, `\"` and `\\` escapes work inside quotes).
pub(crate) fn parse_fault_flag(spec: &str) -> Result<FaultSpec, ProfileError> {
    let loc = format!("--fault {spec:?}");
    let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
    let mut pairs = vec![("type".to_string(), kind.trim().to_string())];
    for item in split_pairs(rest).map_err(|m| ProfileError::new(&loc, m))? {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            ProfileError::new(&loc, format!("{kind}: expected key=value, got {item:?}"))
        })?;
        pairs.push((
            k.trim().to_string(),
            unquote(v.trim()).map_err(|m| ProfileError::new(&loc, m.to_string()))?,
        ));
    }
    fault::parse_fault(Fields::from_pairs("fault", &loc, pairs))
}

/// An escape that `--fault` strings do not know (`\\n`, `\\r`, `\\t`,
/// `\\"` and `\\\\` are known).
#[derive(Debug, thiserror::Error)]
#[error("unknown escape \\{}", .0.map_or(String::new(), String::from))]
pub(crate) struct BadEscape(Option<char>);

/// Splits on commas outside double quotes and, where they pair up,
/// outside `{…}` and `[…]`: a JSON value (`patch_json={"a":1,"b":2}`)
/// needs no quoting of its own.
pub(crate) fn split_pairs(s: &str) -> Result<Vec<String>, &'static str> {
    match split_outside(s, true)? {
        Some(parts) => Ok(parts),
        None => Ok(split_outside(s, false)?.unwrap_or_default()),
    }
}

/// The split, or `None` when `nested` brackets do not pair up.
fn split_outside(s: &str, nested: bool) -> Result<Option<Vec<String>>, &'static str> {
    let mut out = Vec::new();
    let (mut cur, mut quoted, mut escaped) = (String::new(), false, false);
    let mut depth = 0i32;
    for c in s.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '{' | '[' if nested && !quoted => depth += 1,
            '}' | ']' if nested && !quoted => {
                depth -= 1;
                if depth < 0 {
                    return Ok(None);
                }
            }
            ',' if !quoted && depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if quoted {
        return Err("unterminated double quote");
    }
    if depth != 0 {
        return Ok(None);
    }
    out.push(cur);
    Ok(Some(
        out.into_iter().filter(|p| !p.trim().is_empty()).collect(),
    ))
}

pub(crate) fn unquote(v: &str) -> Result<String, BadEscape> {
    let Some(inner) = v.strip_prefix('"').and_then(|x| x.strip_suffix('"')) else {
        return Ok(v.to_string());
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some(c @ ('"' | '\\')) => out.push(c),
            other => return Err(BadEscape(other)),
        }
    }
    Ok(out)
}

/// The rule that `--fault` flags add to: it matches every connection.
pub(crate) const CLI_RULE: &str = "cli";

/// Builds the plan from profiles (in order), `--fault` flags and `--seed`.
/// Without a seed anywhere, one is drawn and reported, so any run can be
/// replayed.
pub(crate) fn build_plan(
    profiles: &[String],
    faults: &[String],
    seed: Option<u64>,
) -> Result<Plan, ProfileError> {
    let mut plan = Plan::default();
    let mut profile_seed = None;
    for p in profiles {
        let doc = load(p)?;
        profile_seed = profile_seed.or(doc.seed);
        if let Some(d) = doc.description {
            plan.descriptions.push((doc.source.clone(), d));
        }
        plan.rules.extend(doc.rules.into_iter().map(Arc::new));
        plan.proxies.extend(doc.proxies);
        plan.mocks.extend(doc.mocks);
        plan.cassette_dirs.extend(doc.cassettes);
        plan.tls_intercept |= doc.tls_intercept;
    }
    if !faults.is_empty() {
        let specs = faults
            .iter()
            .map(|f| parse_fault_flag(f).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        plan.rules.push(Arc::new(Rule {
            name: CLI_RULE.into(),
            matcher: Match::default(),
            faults: specs,
            loc: "--fault".into(),
        }));
    }
    plan.seed = seed.or(profile_seed).unwrap_or_else(rand::random);
    plan.validate()?;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `netchaos check` prints for a fault can be given back as a
    /// `--fault` flag, and means the same: every built-in profile's
    /// faults, and flags with repeated named keys, commas, quotes and
    /// JSON in their values.
    #[test]
    fn a_fault_as_shown_is_a_flag_that_gives_it_back() {
        let mut shown: Vec<String> = Vec::new();
        for name in builtin::names() {
            let plan = build_plan(&[name.to_string()], &[], Some(1)).unwrap();
            shown.extend(
                plan.rules
                    .iter()
                    .flat_map(|r| &r.faults)
                    .map(|f| f.to_string()),
            );
        }
        for flag in [
            r#"http_rewrite:set_header.X-A=1,set_header.X-B="2, 3",set_query.a=1,set_query.b=x,remove_header=A|B,header.x-c="a,b",body.model=claude-*"#,
            r#"http_rewrite:phase=response,patch_json={"a":[1,2],"b":{"c":null}},response_header.content-type=application/json,response_status=5xx|429"#,
            r#"http_rewrite:phase=response,set_body=" padded, "quoted"
",first=2"#,
            r#"http_status:status=429,retry_after=2s,envelope=anthropic,headers.X-A=1,headers.X-B="b, c",method=GET|POST,probability=0.5,active=1s..5s"#,
            r#"http_status:status=503,body="{"error": "down"}",then=close,every=3"#,
            r#"respond:status=200,body=ok,headers.X-Y=z,then=reset"#,
            r#"respond:data="a,b",wait_request=false"#,
            r#"respond:data="{\"a\": 1}\n",then=close"#,
            r#"http_status:status=200,body="x [y",header.x-a=a]b,path=/v1/{a}"#,
            r#"http_rewrite:set_body="[1, 2]""#,
            r#"http_rewrite:patch_json={"a":"]"},path=/x"#,
            r#"sse:patch_json={"delta":{"stop_reason":"max_tokens"}},event=message_*,event_delay=5ms"#,
            r#"sse:patch_ops=[{"op":"test","path":"/choices/0/finish_reason","value":"stop"},{"op":"replace","path":"/choices/0/finish_reason","value":"length"}]"#,
            r#"http_rewrite:phase=response,patch_ops=[{"op":"remove","path":"/a~1b"},{"op":"move","from":"/x","path":"/y/-"}],path=/v1/*"#,
            "sse:stall_after_events=1,stall_for=10s,path=/v1/*",
            "latency:delay=150ms,jitter=20ms,stream=both",
            "tls_error:error=wrong_host,host=*.example.com",
            "dns_error:rcode=SERVFAIL,name=api.example.com",
        ] {
            shown.push(parse_fault_flag(flag).unwrap().to_string());
        }
        assert!(shown.len() > 20, "{shown:?}");
        let wrong: Vec<String> = shown
            .iter()
            .filter_map(|s| match parse_fault_flag(s) {
                Ok(again) if again.to_string() == *s => None,
                Ok(again) => Some(format!("{s}\n  came back as {again}")),
                Err(e) => Some(format!("{s}\n  {e}")),
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        let f = parse_fault_flag(r#"http_rewrite:set_header.X-A=1,set_header.X-B="2, 3""#).unwrap();
        assert_eq!(
            f.to_string(),
            r#"http_rewrite:set_header.X-A=1,set_header.X-B="2, 3""#
        );
        // The event log writes them as an object: no key may hide another.
        let keys: Vec<String> = f.all_params().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["set_header.X-A", "set_header.X-B"]);
    }

    const SKETCH: &str = r#"
description = "Replies stop after the headers: a read timeout"
seed = 7

[[rules]]
name = "api"
match = { dst = ["10.0.0.0/8", "api.internal"], ports = ["443", "8000-8100"], direction = "outbound" }

  [[rules.faults]]
  type = "stall"
  stream = "downstream"
  after_bytes = 512
  duration = "forever"
  probability = 0.5

[[proxies]]
name = "redis"
listen = "127.0.0.1:26379"
upstream = "127.0.0.1:6379"
"#;

    #[test]
    fn the_design_sketch_parses() {
        let doc = parse("sketch.toml", SKETCH, None).unwrap();
        assert_eq!(doc.seed, Some(7));
        assert_eq!(doc.rules.len(), 1);
        assert_eq!(&*doc.rules[0].name, "api");
        assert_eq!(doc.rules[0].matcher.dst.len(), 2);
        assert_eq!(doc.rules[0].faults[0].probability, 0.5);
        assert_eq!(doc.proxies[0].listen, "127.0.0.1:26379".parse().unwrap());
    }

    #[test]
    fn errors_name_file_line_column_and_form() {
        let text = "[[rules]]\n[[rules.faults]]\ntype = \"bandwidth\"\nrate = \"fast\"\n";
        let e = parse("p.toml", text, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.toml:4:8: bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\""
        );
        let e = parse("p.toml", "sed = 1\n", None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("p.toml:1:1: profile: unknown key \"sed\" (did you mean \"seed\"?)"),
            "{e}"
        );
        let e = parse(
            "p.toml",
            "[[rules]]\nmatch = { ports = [\"http\"] }\n",
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("rules[0].match.ports: expected a port like"),
            "{e}"
        );
        let e = parse(
            "p.toml",
            "[[proxies]]\nlisten = \"x\"\nupstream = \"a:1\"\n",
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("p.toml:2:10: proxies[0].listen:"),
            "{e}"
        );
    }

    #[test]
    fn fault_flags() {
        let f = parse_fault_flag("reset:after_bytes=4096").unwrap();
        assert_eq!(f.to_string(), "reset:after_bytes=4096,stream=downstream");
        let f = parse_fault_flag("respond:data=\"a,b\\r\\n\",then=reset").unwrap();
        assert!(f.to_string().contains(r#"data="a,b\r\n""#), "{f}");
        let e = parse_fault_flag("latency:delay").unwrap_err();
        assert!(e.to_string().contains("expected key=value"), "{e}");
        let e = parse_fault_flag("bandwidth:rate=fast").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--fault \"bandwidth:rate=fast\": bandwidth.rate: expected a rate like \"1mbit\" or \"500KB/s\", got \"fast\""
        );
        assert!(
            parse_fault_flag("latency:delay=1s,bogus=2")
                .unwrap_err()
                .message
                .contains("unknown key \"bogus\"")
        );
    }

    #[test]
    fn unknown_builtin_suggests() {
        let e = load("flakey").unwrap_err();
        assert!(e.message.contains("did you mean \"flaky\""), "{e}");
    }

    #[test]
    fn duplicate_rule_names_are_rejected() {
        let doc = "[[rules]]\nname = \"a\"\n[[rules]]\nname = \"a\"\n";
        let d = parse("d.toml", doc, None).unwrap();
        let plan = Plan {
            rules: d.rules.into_iter().map(Arc::new).collect(),
            ..Plan::default()
        };
        assert!(
            plan.validate()
                .unwrap_err()
                .message
                .contains("already used")
        );
    }
}
