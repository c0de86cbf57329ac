//! A drill file: the hypothesis, the commands under test, the steady
//! state's checks, the scenarios (one fault or profile each, and the
//! checks expected to hold under it), the stop condition and the seeds.
//! Checked whole before anything runs: every error names its key.
//!
//! ```toml
//! hypothesis = "If the primary returns 529, the standby answers every request"
//! command = "python agent.py"        # or [clients] name = "command"
//! mock = ["anthropic"]               # the built-in upstream (run --mock)
//! group_by = "auto"
//! stop = "error_rate > 0.9 over 10s"
//! repeat = 1
//!
//! [steady_state]
//! checks = ["success_rate", "latency_p95=5s"]
//!
//! [[scenario]]
//! name = "primary-outage"
//! fault = "http_status:status=529,host=api.anthropic.com"
//! checks = ["success_rate", "max_attempts=4"]
//! ```

use std::time::Duration;

use crate::settings::{Fields, Node, ProfileError, Value, node_text};

use super::checks::Check;
use super::records::GroupBy;

/// A drill, checked.
#[derive(Debug, Clone)]
pub(crate) struct Drill {
    pub name: String,
    pub hypothesis: String,
    /// The commands under test, by name, in the file's order.
    pub clients: Vec<(String, String)>,
    pub mock: Vec<String>,
    pub group_by: GroupBy,
    pub seed: u64,
    pub repeat: u32,
    pub stop: Option<String>,
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
    pub run_args: Vec<String>,
    pub exit_zero: bool,
    pub steady: Vec<Check>,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub name: String,
    pub description: Option<String>,
    pub fault: Fault,
    pub checks: Vec<Check>,
    pub stop: Option<String>,
}

/// A scenario's one fault: a `--fault` string or a profile (a built-in
/// name or a file).
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    Flag(String),
    Profile(String),
}

/// Runs at most this long each, unless the file says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

type Bad = ProfileError;

/// Checks written as strings, parsed; at least one.
fn checks_of(f: &mut Fields, what: &str) -> Result<Vec<Check>, Bad> {
    let loc = f.loc().to_string();
    let nodes = f.strings("checks")?.unwrap_or_default();
    if nodes.is_empty() {
        return Err(ProfileError::new(
            loc,
            format!("{what}.checks: at least one check"),
        ));
    }
    nodes
        .iter()
        .map(|n| {
            Check::parse(&node_text(n))
                .map_err(|e| ProfileError::new(&n.loc, format!("{what}.checks: {e}")))
        })
        .collect()
}

/// A stop condition; `"none"` (a scenario's) turns the drill's off.
fn stop_of(f: &mut Fields, what: &str) -> Result<Option<String>, Bad> {
    let Some(node) = f.take("stop") else {
        return Ok(None);
    };
    if matches!(&node.value, Value::Str(s) if s == "none") && !what.is_empty() {
        return Ok(Some("none".into()));
    }
    let text = match &node.value {
        Value::Str(s) => s.clone(),
        _ => {
            return Err(ProfileError::new(
                &node.loc,
                format!("{what}stop: a string like \"error_rate > 0.5 over 10s\""),
            ));
        }
    };
    super::stop::StopIf::parse(&text)
        .map(|_| Some(text))
        .map_err(|e| ProfileError::new(&node.loc, format!("{what}stop: {e}")))
}

/// Parses and checks a drill (`name` for messages: its file); `command`
/// (from the command line) replaces the file's commands.
pub(crate) fn parse(name: &str, text: &str, command: Option<String>) -> Result<Drill, String> {
    parse_node(
        crate::settings::parse_toml(name, text).map_err(|e| e.to_string())?,
        command,
    )
    .map_err(|e| e.to_string())
}

fn parse_node(root: Node, command: Option<String>) -> Result<Drill, Bad> {
    let mut f = Fields::new("drill", root)?;
    let loc = f.loc().to_string();
    let hypothesis = f.string("hypothesis")?.unwrap_or_default();
    if hypothesis.trim().is_empty() {
        return Err(ProfileError::new(
            &loc,
            "hypothesis: say what you expect to hold, before injecting (hypothesis = \"…\")",
        ));
    }
    let name = f.string("name")?.unwrap_or_else(|| "drill".into());
    let file_command = f.string("command")?;
    let clients_node = f.take("clients");
    let mut clients = Vec::new();
    match (command, file_command, clients_node) {
        (Some(c), _, _) => clients.push(("client".to_string(), c)),
        (None, Some(_), Some(n)) => {
            return Err(ProfileError::new(
                &n.loc,
                "command and [clients]: one or the other",
            ));
        }
        (None, Some(c), None) => clients.push(("client".to_string(), c)),
        (None, None, Some(n)) => {
            let Value::Table(entries) = n.value else {
                return Err(ProfileError::new(
                    &n.loc,
                    "clients: a table of name = \"command\"",
                ));
            };
            for (k, kloc, v) in entries {
                match v.value {
                    Value::Str(c) if !c.trim().is_empty() => clients.push((k, c)),
                    _ => {
                        return Err(ProfileError::new(
                            kloc,
                            format!("clients.{k}: a command line (a string)"),
                        ));
                    }
                }
            }
            if clients.is_empty() {
                return Err(ProfileError::new(&n.loc, "[clients]: at least one"));
            }
        }
        (None, None, None) => {
            return Err(ProfileError::new(
                &loc,
                "no command under test: `command = \"…\"`, [clients], or one after -- on the command line",
            ));
        }
    }
    let mut mock = Vec::new();
    for n in f.strings("mock")?.unwrap_or_default() {
        let m = node_text(&n);
        if crate::mock::Api::parse(&m).is_err() {
            return Err(ProfileError::new(
                &n.loc,
                format!("mock: {m:?} is not anthropic, openai or gemini"),
            ));
        }
        mock.push(m);
    }
    let group_by = match f.take("group_by") {
        Some(n) => GroupBy::parse(&node_text(&n)).map_err(|e| ProfileError::new(&n.loc, e))?,
        None => GroupBy::Auto,
    };
    let seed = f.integer_in("seed", 0, u64::MAX / 2)?.unwrap_or(1);
    let repeat = f.integer_in("repeat", 1, 100)?.unwrap_or(1) as u32;
    let timeout = f.duration("timeout")?.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() {
        return Err(ProfileError::new(&loc, "timeout: more than 0"));
    }
    let stop = stop_of(&mut f, "")?;
    let exit_zero = f.boolean("exit_zero")?.unwrap_or(false);
    let mut env = Vec::new();
    if let Some(n) = f.take("env") {
        let Value::Table(entries) = n.value else {
            return Err(ProfileError::new(
                &n.loc,
                "env: a table of NAME = \"value\"",
            ));
        };
        for (k, kloc, v) in entries {
            match v.value {
                Value::Str(s) => env.push((k, s)),
                _ => return Err(ProfileError::new(kloc, format!("env.{k}: a string"))),
            }
        }
    }
    let run_args = f
        .strings("run_args")?
        .unwrap_or_default()
        .iter()
        .map(node_text)
        .collect();
    let steady = match f.take("steady_state") {
        Some(n) => {
            let mut p = Fields::new("steady_state", n)?;
            let c = checks_of(&mut p, "steady_state")?;
            p.finish()?;
            c
        }
        None => {
            return Err(ProfileError::new(
                &loc,
                "[steady_state]: its checks (they must hold without faults first)",
            ));
        }
    };
    let raw = f.tables("scenario")?;
    f.finish()?;
    if raw.is_empty() {
        return Err(ProfileError::new(
            &loc,
            "[[scenario]]: at least one (a fault and the checks under it)",
        ));
    }
    let mut scenarios: Vec<Scenario> = Vec::new();
    for (i, n) in raw.into_iter().enumerate() {
        let what = format!("scenario[{i}]");
        let mut s = Fields::new(what.clone(), n)?;
        let sloc = s.loc().to_string();
        let name = s.string("name")?.unwrap_or_default();
        let what = format!("{what} ({name:?})");
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(ProfileError::new(
                &sloc,
                format!("{what}.name: letters, digits, - _ . only"),
            ));
        }
        if name == super::run::STEADY || scenarios.iter().any(|o| o.name == name) {
            return Err(ProfileError::new(
                &sloc,
                format!("{what}.name: named twice"),
            ));
        }
        let description = s.string("description")?;
        let fault_loc = sloc.clone();
        let fault = match (s.string("fault")?, s.string("profile")?) {
            (Some(f), None) => {
                crate::profile::parse_fault_flag(&f).map_err(|e| {
                    ProfileError::new(&fault_loc, format!("{what}.fault: {}", e.message))
                })?;
                Fault::Flag(f)
            }
            (None, Some(p)) => {
                crate::profile::load(&p)
                    .map_err(|e| ProfileError::new(&fault_loc, format!("{what}.profile: {e}")))?;
                Fault::Profile(p)
            }
            _ => {
                return Err(ProfileError::new(
                    &sloc,
                    format!("{what}: one fault: `fault = \"…\"` or `profile = \"…\"`"),
                ));
            }
        };
        let checks = checks_of(&mut s, &what)?;
        let stop = stop_of(&mut s, &format!("{what}."))?;
        s.finish()?;
        scenarios.push(Scenario {
            name,
            description,
            fault,
            checks,
            stop,
        });
    }
    Ok(Drill {
        name,
        hypothesis,
        clients,
        mock,
        group_by,
        seed,
        repeat,
        stop,
        timeout,
        env,
        run_args,
        exit_zero,
        steady,
        scenarios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
hypothesis = "the standby answers"
[clients]
naive = "python naive.py"
resilient = "python resilient.py"
[steady_state]
checks = ["success_rate"]
[[scenario]]
name = "outage"
fault = "http_status:status=529"
checks = ["success_rate", "max_attempts=4"]
"#;

    #[test]
    fn a_drill_keeps_its_clients_in_order() {
        let d = parse("t.toml", GOOD, None).unwrap();
        let names: Vec<_> = d.clients.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, ["naive", "resilient"]);
        assert_eq!(d.scenarios[0].checks.len(), 2);
        assert_eq!(d.repeat, 1);
        // A command given on the command line replaces them.
        assert_eq!(
            parse("t.toml", GOOD, Some("x".into()))
                .unwrap()
                .clients
                .len(),
            1
        );
    }

    #[test]
    fn a_scenario_may_turn_the_guard_rail_off_the_drill_may_not() {
        let with = GOOD.replace(
            "checks = [\"success_rate\", \"max",
            "stop = \"none\"\nchecks = [\"success_rate\", \"max",
        );
        let d = parse("t.toml", &with, None).unwrap();
        assert_eq!(d.scenarios[0].stop.as_deref(), Some("none"));
        let top = GOOD.replace("[clients]", "stop = \"none\"\n[clients]");
        assert!(
            parse("t.toml", &top, None)
                .unwrap_err()
                .contains("five words")
        );
    }

    #[test]
    fn each_mistake_names_its_key() {
        for (edit, why) in [
            (
                GOOD.replace("success_rate\", \"max", "succes_rate\", \"max"),
                "scenario[0] (\"outage\").checks: unknown check",
            ),
            (
                GOOD.replace("fault = ", "profile = \"x\"\nfault = "),
                "one fault",
            ),
            (GOOD.replace("the standby answers", " "), "hypothesis"),
            (
                GOOD.replace("name = \"outage\"", "name = \"out age\""),
                "letters, digits",
            ),
            (GOOD.replace("[clients]", "repeat = 0\n[clients]"), "repeat"),
            (
                GOOD.replace("[clients]", "stop = \"error_rate > 2 over 1s\"\n[clients]"),
                "stop:",
            ),
            (
                GOOD.replace("[clients]", "mock = [\"mistral\"]\n[clients]"),
                "mock",
            ),
            (
                GOOD.replace("[clients]", "colour = 1\n[clients]"),
                "unknown key \"colour\"",
            ),
        ] {
            let e = parse("t.toml", &edit, None).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
