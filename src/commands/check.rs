//! `netchaos check`, `netchaos profiles` and `netchaos faults`: validate
//! and show plans, and list what they can use.

use crate::cli::{CheckArgs, Global};
use crate::error::{Error, Result};
use crate::profile::{self, builtin};

pub(super) fn check(g: &Global, args: &CheckArgs) -> Result<u8> {
    let files: Vec<String> = args.files.iter().chain(&args.profiles).cloned().collect();
    if files.is_empty() && args.faults.is_empty() {
        return Err(Error::Usage(
            "nothing to check: give profile files or built-in names, or --fault specs".into(),
        ));
    }
    for f in &files {
        // Each profile on its own first, so a clash between two is reported
        // after each was found valid.
        profile::load(f)?;
        eprintln!("{f}: ok");
    }
    let profile_seed = files
        .iter()
        .find_map(|f| profile::load(f).ok().and_then(|d| d.seed));
    let mut plan = profile::build_plan(&files, &args.faults, g.seed)?;
    // Its cassettes read, as a run would (their hosts listed).
    plan.load_cassette(&[])?;
    let mut text = plan.render();
    if g.seed.is_none() && profile_seed.is_none() {
        text = text.replacen(
            &format!("seed: {}\n", plan.seed),
            "seed: (drawn at start unless a profile or --seed sets one)\n",
            1,
        );
    }
    print!("{text}");
    for w in plan.warnings() {
        eprintln!("netchaos: warning: {w}");
    }
    Ok(0)
}

pub(super) fn profiles() {
    let list = builtin::list();
    let w = list.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, desc) in list {
        text.push_str(&format!("{name:<w$}  {desc}\n"));
    }
    text.push_str("\nUse one with -p NAME; see its rules with `netchaos check NAME`.\n");
    // A reader that stops early (`| grep -q`, `| head`) is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
}

/// `netchaos faults [TYPE] [--markdown]`: every fault kind, by layer, with
/// its parameters as the registry declares them; `--markdown` renders the
/// same as docs/faults-reference.md (a unit test keeps that file current).
pub(crate) fn faults(only: Option<&str>, markdown: bool) -> Result<u8> {
    use crate::fault::{KINDS, find_kind};
    let kinds: Vec<_> = match only {
        Some(n) => vec![find_kind(n).ok_or_else(|| {
            let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
            let hint = crate::settings::closest(n, &names)
                .map_or(String::new(), |k| format!(" (did you mean {k:?}?)"));
            Error::Usage(format!(
                "no fault type {n:?}{hint}; the types are {}",
                crate::settings::quoted_list(&names)
            ))
        })?],
        None => KINDS.to_vec(),
    };
    let text = if markdown {
        faults_markdown(&kinds)
    } else {
        faults_text(&kinds)
    };
    // A reader that stops early (`| head`) is not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

/// A fault kind's parameters as (name, meaning, form): its own, the
/// request matchers of per-request faults, and `stream` where it applies.
fn fault_params(k: &crate::fault::KindInfo) -> Vec<(&'static str, String, String)> {
    let mut params: Vec<(&str, String, String)> = k
        .params
        .iter()
        .map(|(p, form, meaning)| (*p, meaning.to_string(), form.to_string()))
        .collect();
    if k.per_request() {
        params.extend(
            crate::fault::http_match::PARAMS
                .iter()
                .map(|(p, form, meaning)| (*p, meaning.to_string(), form.to_string())),
        );
    }
    if k.streamed {
        let d = k.default_stream.as_str();
        params.push((
            "stream",
            "which bytes".to_string(),
            format!("upstream, downstream or both; default {d}"),
        ));
    }
    params
}

const FAULTS_FOOTER: &str = "Every fault also takes probability (0 to 1, default 1: the share of matching connections\n\
     that get it, drawn per connection from the seed; per request for HTTP faults) and active\n\
     (a window like \"10s..40s\").\n\
     Use one with --fault TYPE:key=value,... or as a [[rules.faults]] table of a profile.\n\
     Connect and packet faults need interception: netchaos run, attach or run --in-place.\n\
     HTTP faults act on HTTP/1.1 requests (keep-alive included) and HTTP/2 streams (gRPC); on HTTPS with run --tls.\n\
     TLS faults act on the handshakes netchaos terminates (--tls), once per connection.";

fn faults_text(kinds: &[&crate::fault::KindInfo]) -> String {
    use std::fmt::Write;
    let w = crate::fault::KINDS
        .iter()
        .map(|k| k.name.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for k in kinds {
        let _ = writeln!(out, "{:<7}  {:<w$}  {}", k.layer.as_str(), k.name, k.about);
        let params = fault_params(k);
        let pw = params.iter().map(|(p, ..)| p.len()).max().unwrap_or(0);
        for (p, meaning, form) in params {
            let _ = writeln!(out, "{:<7}    {p:<pw$}  {meaning} ({form})", "");
        }
    }
    let _ = writeln!(out, "\n{FAULTS_FOOTER}");
    out
}

/// The Markdown reference: a table of contents by layer, then a section
/// per fault with its parameters in a table.
fn faults_markdown(kinds: &[&crate::fault::KindInfo]) -> String {
    use std::fmt::Write;
    let cell = |s: &str| s.replace('|', "\\|");
    // By layer, in the fault model's order (connect first); the registry's
    // order within a layer.
    let mut kinds = kinds.to_vec();
    kinds.sort_by_key(|k| k.layer as u8);
    let mut out = String::from(
        "# Fault reference\n\n\
         <!-- Generated by `netchaos faults --markdown > docs/faults-reference.md`; \
         do not edit by hand (a unit test compares). -->\n\n\
         Every fault type netchaos knows, as the binary declares it (`netchaos faults TYPE` \
         prints the same). What each looks like to a client, with measurements: \
         [faults.md](faults.md) and [fidelity.md](fidelity.md).\n\n",
    );
    let mut layer = "";
    for k in &kinds {
        if k.layer.as_str() != layer {
            layer = k.layer.as_str();
            let _ = writeln!(out, "## {layer}\n");
        }
        let _ = writeln!(out, "### `{}`\n\n{}\n", k.name, k.about);
        let params = fault_params(k);
        if params.is_empty() {
            out.push_str("No parameters.\n\n");
            continue;
        }
        out.push_str("| parameter | meaning | value |\n|---|---|---|\n");
        for (p, meaning, form) in params {
            let _ = writeln!(out, "| `{p}` | {} | {} |", cell(&meaning), cell(&form));
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "## Every fault\n\n{}",
        FAULTS_FOOTER.replace('\n', " ")
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fault_reference_in_docs_is_what_the_binary_declares() {
        let all: Vec<_> = crate::fault::KINDS.to_vec();
        let want = faults_markdown(&all);
        let have = include_str!("../../docs/faults-reference.md");
        assert!(
            have == want,
            "docs/faults-reference.md is stale: run \
             `cargo run -q -- faults --markdown > docs/faults-reference.md`"
        );
        for k in crate::fault::KINDS {
            assert!(want.contains(&format!("### `{}`", k.name)), "{}", k.name);
        }
    }
}
