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

/// `netchaos faults [TYPE]`: every fault kind, by layer, with its
/// parameters as the registry declares them.
pub(crate) fn faults(only: Option<&str>) -> Result<u8> {
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
    let w = KINDS.iter().map(|k| k.name.len()).max().unwrap_or(0);
    for k in kinds {
        println!("{:<7}  {:<w$}  {}", k.layer.as_str(), k.name, k.about);
        let mut params: Vec<(&str, String)> = k
            .params
            .iter()
            .map(|(p, form, meaning)| (*p, format!("{meaning} ({form})")))
            .collect();
        if k.per_request() {
            params.extend(
                crate::fault::http_match::PARAMS
                    .iter()
                    .map(|(p, form, meaning)| (*p, format!("{meaning} ({form})"))),
            );
        }
        if k.streamed {
            let d = k.default_stream.as_str();
            params.push((
                "stream",
                format!("which bytes (upstream, downstream or both; default {d})"),
            ));
        }
        let pw = params.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
        for (p, text) in params {
            println!("{:<7}    {p:<pw$}  {text}", "");
        }
    }
    println!(
        "\nEvery fault also takes probability (0 to 1, default 1: the share of matching connections\n\
         that get it, drawn per connection from the seed; per request for HTTP faults) and active\n\
         (a window like \"10s..40s\").\n\
         Use one with --fault TYPE:key=value,... or as a [[rules.faults]] table of a profile.\n\
         Connect and packet faults need interception: netchaos run, attach or run --in-place.\n\
         HTTP faults act on HTTP/1.1 requests (keep-alive included) and HTTP/2 streams (gRPC); on HTTPS with run --tls.\n\
         TLS faults act on the handshakes netchaos terminates (--tls), once per connection."
    );
    Ok(0)
}
