//! Running the tc plan: what the device already has, applying with
//! roll-back, clearing exactly netchaos's own, and saying plainly which
//! kernel module is missing and what to do instead.

use serde_json::Value;

use super::{CHILD_HANDLE, Cmd, HANDLE, Netem, ifb_name, plan, unplan};
use crate::tool::ToolError;

/// Why shaping could not be done, by kind.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetemError {
    #[error("there is no network device {0:?} (see `ip link`)")]
    NoDevice(String),
    /// Something of someone else's is where netchaos would go.
    #[error("{0}")]
    InTheWay(String),
    #[error(
        "the kernel has no {thing} (module {module}): load it with `modprobe {module}` (on Debian and Ubuntu some \
         kernels ship it in the linux-modules-extra-$(uname -r) package; in a container the host must load it){instead}"
    )]
    MissingModule {
        module: &'static str,
        thing: &'static str,
        /// Other ways to the same end, or nothing.
        instead: String,
    },
    #[error("{what}: operation not permitted: shaping {dev} needs root or CAP_NET_ADMIN")]
    NotPermitted { what: String, dev: String },
    /// The `tc` on this machine does not know an option asked for.
    #[error("{0}")]
    TcTooOld(String),
    #[error(transparent)]
    Tool(ToolError),
}

/// Runs one command; its stdout.
fn run(c: &Cmd) -> Result<String, ToolError> {
    let args: Vec<&str> = c[1..].iter().map(String::as_str).collect();
    crate::tool::run(&c[0], &args, None)
}

fn argv(s: &str) -> Cmd {
    s.split_whitespace().map(str::to_string).collect()
}

/// The qdiscs of a device, from `tc -j qdisc show`.
fn qdiscs(dev: &str) -> Result<Vec<Value>, NetemError> {
    let text = run(&argv(&format!("tc -j qdisc show dev {dev}")))
        .map_err(|e| explain(e, dev, "show", None))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(a)) => Ok(a),
        _ => Ok(Vec::new()),
    }
}

fn root_handle(q: &[Value]) -> Option<String> {
    q.iter()
        .find(|x| x.get("root").and_then(Value::as_bool).unwrap_or(false))
        .and_then(|x| x.get("handle").and_then(Value::as_str))
        .map(str::to_string)
}

fn has_ingress(q: &[Value]) -> bool {
    q.iter().any(|x| {
        matches!(
            x.get("kind").and_then(Value::as_str),
            Some("ingress" | "clsact")
        )
    })
}

fn link_exists(dev: &str) -> bool {
    run(&argv(&format!("ip link show dev {dev}"))).is_ok()
}

/// Applies `n`, replacing a previous netchaos setup on the device; never
/// touches a root (or ingress) qdisc netchaos did not create. On failure,
/// what was added is removed again.
pub(crate) fn apply(n: &Netem) -> Result<(), NetemError> {
    if !link_exists(&n.dev) {
        return Err(NetemError::NoDevice(n.dev.clone()));
    }
    let q = qdiscs(&n.dev)?;
    let ifb = ifb_name(&n.dev);
    let ours_ingress = link_exists(&ifb);
    if let Some(h) = root_handle(&q).filter(|h| h != "0:" && h != HANDLE) {
        if !n.ingress {
            let kind = q
                .iter()
                .find(|x| x["root"] == true)
                .and_then(|x| x["kind"].as_str())
                .unwrap_or("?");
            return Err(NetemError::InTheWay(format!(
                "{} already has a root qdisc ({kind} {h}) that netchaos did not create; netchaos will not replace it. \
                 Remove it yourself (tc qdisc del dev {} root) if you mean to, then apply again",
                n.dev, n.dev
            )));
        }
    }
    if n.ingress && has_ingress(&q) && !ours_ingress {
        return Err(NetemError::InTheWay(format!(
            "{} already has an ingress qdisc that netchaos did not create; netchaos will not replace it",
            n.dev
        )));
    }
    // A previous netchaos setup on this device is replaced.
    clear(&n.dev)?;
    for c in plan(n) {
        if let Err(e) = run(&c) {
            // Never half-applied: take back whatever went in.
            for u in unplan(n) {
                let _ = run(&u);
            }
            return Err(explain(e, &n.dev, &c.join(" "), Some(n)));
        }
    }
    Ok(())
}

/// Removes netchaos's qdiscs (and ifb) from `dev`; a no-op when there are
/// none. Returns the commands it ran.
pub(crate) fn clear(dev: &str) -> Result<Vec<String>, NetemError> {
    let cmds = clear_plan(dev)?;
    for c in &cmds {
        run(c).map_err(|e| explain(e, dev, &c.join(" "), None))?;
    }
    Ok(cmds.iter().map(|c| c.join(" ")).collect())
}

/// What `clear` would run, given the device's current state.
pub(crate) fn clear_plan(dev: &str) -> Result<Vec<Cmd>, NetemError> {
    if !link_exists(dev) {
        return Err(NetemError::NoDevice(dev.to_string()));
    }
    let mut cmds = Vec::new();
    if root_handle(&qdiscs(dev)?).as_deref() == Some(HANDLE) {
        cmds.push(argv(&format!(
            "tc qdisc del dev {dev} root handle {HANDLE}"
        )));
    }
    let ifb = ifb_name(dev);
    if link_exists(&ifb) {
        if has_ingress(&qdiscs(dev)?) {
            cmds.push(argv(&format!(
                "tc qdisc del dev {dev} handle ffff: ingress"
            )));
        }
        cmds.push(argv(&format!("ip link del {ifb}")));
    }
    Ok(cmds)
}

/// Deletes a device (an ifb netchaos made); returns the command it ran.
pub(crate) fn delete_link(dev: &str) -> Result<String, NetemError> {
    let c = argv(&format!("ip link del {dev}"));
    run(&c).map_err(|e| explain(e, dev, &c.join(" "), None))?;
    Ok(c.join(" "))
}

/// The device's qdiscs and filters, netchaos's marked.
pub(crate) fn show(dev: &str) -> Result<String, NetemError> {
    if !link_exists(dev) {
        return Err(NetemError::NoDevice(dev.to_string()));
    }
    let mut out = String::new();
    let mut devs = vec![dev.to_string()];
    let ifb = ifb_name(dev);
    if link_exists(&ifb) {
        devs.push(ifb);
    }
    for d in devs {
        let q = run(&argv(&format!("tc qdisc show dev {d}")))
            .map_err(|e| explain(e, &d, "show", None))?;
        for line in q.lines() {
            let mine = line.contains(&format!(" {HANDLE} "))
                || line.contains(&format!(" {CHILD_HANDLE} "))
                || d != dev;
            out.push_str(&format!(
                "{} {line}\n",
                if mine { "netchaos" } else { "        " }
            ));
        }
        if let Ok(f) = run(&argv(&format!("tc filter show dev {d}"))) {
            for line in f.lines().filter(|l| !l.trim().is_empty()) {
                out.push_str(&format!("         {line}\n"));
            }
        }
    }
    Ok(out)
}

/// Turns tc's terse errors into what to do: the one place their words are
/// read. `n`, when applying, suggests other ways to the same end.
fn explain(e: ToolError, dev: &str, what: &str, n: Option<&Netem>) -> NetemError {
    let missing = |module, thing| NetemError::MissingModule {
        module,
        thing,
        instead: n.map_or(String::new(), |n| alternatives(n, &e)),
    };
    if e.mentions("Specified qdisc kind is unknown") || e.mentions("Unknown qdisc") {
        for (kind, module, thing) in [
            ("netem", "sch_netem", "netem qdisc"),
            ("prio", "sch_prio", "prio qdisc"),
            ("tbf", "sch_tbf", "tbf qdisc"),
            ("htb", "sch_htb", "htb qdisc"),
            ("ingress", "sch_ingress", "ingress qdisc"),
        ] {
            if what.split_whitespace().any(|w| w == kind) {
                return missing(module, thing);
            }
        }
    }
    if e.mentions("Unknown device type") && what.contains("type ifb") {
        return missing("ifb", "ifb device (needed for --ingress)");
    }
    if e.mentions("action") && what.contains("mirred") {
        return missing("act_mirred", "mirred action (needed for --ingress)");
    }
    if e.mentions("classifier not found") {
        return missing(
            "cls_u32",
            "u32 classifier (needed for --dst, --dport, --sport)",
        );
    }
    if e.mentions("What is \"seed\"") {
        return NetemError::TcTooOld(
            "this tc does not know netem's `seed` (it came with iproute2 6.6, and needs Linux 6.6 or newer): \
             drop --seed, or the [netem] table's seed, or install a newer iproute2"
                .into(),
        );
    }
    if e.not_permitted() {
        return NetemError::NotPermitted {
            what: what.to_string(),
            dev: dev.to_string(),
        };
    }
    if e.mentions("Cannot find device") {
        return NetemError::NoDevice(dev.to_string());
    }
    NetemError::Tool(e)
}

/// Other ways to the same end, when a qdisc's module is missing.
fn alternatives(n: &Netem, e: &ToolError) -> String {
    if !(e.mentions("qdisc kind is unknown") || e.mentions("Unknown qdisc")) {
        return String::new();
    }
    let mut alt = Vec::new();
    if n.rate.is_some() && n.needs_netem() {
        alt.push(
            "--rate alone works without netem (it uses tbf, or htb with --dst/--dport/--sport)"
                .to_string(),
        );
    }
    if n.delay.is_some() || n.loss.is_some() {
        alt.push(
            "per-connection latency, jitter and packet loss need no qdisc: `netchaos run --fault latency:delay=…` \
             (or loss:percent=…) wraps a command, `netchaos attach` a running container"
                .to_string(),
        );
    }
    if n.filtered() && !n.needs_netem() {
        alt.push("without --dst/--dport/--sport the rate is applied with tbf alone".into());
    }
    if alt.is_empty() {
        String::new()
    } else {
        format!(". Instead: {}", alt.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// iproute2 before 6.6 answers `seed` with its whole usage text; the
    /// user gets what to drop instead.
    #[test]
    fn a_tc_without_seed_is_named() {
        let e = ToolError::Failed {
            command: "tc qdisc add dev eth0 root handle 4e43: netem delay 100000us seed 7".into(),
            stderr: "What is \"seed\"?\nUsage: ... netem [ limit PACKETS ]".into(),
        };
        let said = explain(e, "eth0", "tc qdisc add", None).to_string();
        assert!(said.contains("does not know netem's `seed`"), "{said}");
        assert!(!said.contains("Usage"), "{said}");
    }
}
