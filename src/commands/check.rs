//! `netchaos check` and `netchaos profiles`: validate and show plans.

use crate::cli::{CheckArgs, Global};
use crate::error::{Error, Result};
use crate::profile::{self, builtin};

pub fn check(g: &Global, args: &CheckArgs) -> Result<u8> {
    if args.files.is_empty() && args.faults.is_empty() {
        return Err(Error::Usage(
            "nothing to check: give profile files or built-in names, or --fault specs".into(),
        ));
    }
    for f in &args.files {
        // Each profile on its own first, so a clash between two is reported
        // after each was found valid.
        profile::load(f)?;
        eprintln!("{f}: ok");
    }
    let plan = profile::build_plan(&args.files, &args.faults, g.seed.or(Some(0)))?;
    let mut text = plan.render();
    if g.seed.is_none() {
        text = text.replacen(
            "seed: 0\n",
            "seed: (drawn at start unless a profile or --seed sets one)\n",
            1,
        );
    }
    print!("{text}");
    Ok(0)
}

pub fn profiles() {
    let list = builtin::list();
    let w = list.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, desc) in list {
        println!("{name:<w$}  {desc}");
    }
    println!("\nUse one with -p NAME; see its rules with `netchaos check NAME`.");
}
