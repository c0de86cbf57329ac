//! `netchaos netem apply|clear|show`: host-level shaping with tc.

use crate::cli::{Global, NetemAction, NetemApply, NetemArgs};
use crate::error::{Error, Result};
use crate::netem::{self, Netem, apply};
use crate::profile;

pub fn run(g: &Global, args: &NetemArgs) -> Result<u8> {
    match &args.action {
        NetemAction::Apply(a) => {
            let n = options(g, a)?;
            if a.dry_run {
                print!("{}", netem::render(&netem::plan(&n)));
                return Ok(0);
            }
            apply::apply(&n).map_err(Error::runtime)?;
            eprintln!(
                "netchaos: {} shaped; undo with `netchaos netem clear --dev {}`",
                n.dev, n.dev
            );
            Ok(0)
        }
        NetemAction::Clear { dev, dry_run } => {
            if *dry_run {
                let cmds = apply::clear_plan(dev).map_err(Error::runtime)?;
                print!("{}", netem::render(&cmds));
                return Ok(0);
            }
            let done = apply::clear(dev).map_err(Error::runtime)?;
            if done.is_empty() {
                eprintln!("netchaos: nothing of netchaos's on {dev}");
            }
            for c in done {
                eprintln!("netchaos: {c}");
            }
            Ok(0)
        }
        NetemAction::Show { dev } => {
            print!("{}", apply::show(dev).map_err(Error::runtime)?);
            Ok(0)
        }
    }
}

/// The profile's `[netem]` table, overridden by the flags.
fn options(g: &Global, a: &NetemApply) -> Result<Netem> {
    let mut n = match &a.profile {
        Some(p) => profile::load(p)?
            .netem
            .ok_or_else(|| Error::Usage(format!("profile {p} has no [netem] table")))?,
        None => Netem::default(),
    };
    macro_rules! over {
        ($($f:ident),*) => { $( if a.$f.is_some() { n.$f = a.$f.clone(); } )* };
    }
    over!(
        delay,
        jitter,
        correlation,
        distribution,
        loss,
        duplicate,
        corrupt,
        reorder,
        gap,
        rate,
        limit,
        dport,
        sport
    );
    if let Some(d) = &a.dev {
        n.dev = d.clone();
    }
    if g.seed.is_some() {
        n.seed = g.seed;
    }
    if !a.dst.is_empty() {
        n.dst = a.dst.clone();
    }
    n.ingress |= a.ingress;
    n.validate().map_err(Error::Usage)?;
    Ok(n)
}
