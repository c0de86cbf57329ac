//! `netchaos netem apply|clear|show`: host-level shaping with tc.

use crate::cli::{Global, NetemAction, NetemApply, NetemArgs};
use crate::error::{Error, Result};
use crate::netem::{self, Netem, apply};
use crate::profile;

pub(super) fn run(g: &Global, args: &NetemArgs) -> Result<u8> {
    match &args.action {
        NetemAction::Apply(a) => {
            let n = options(g, a)?;
            if a.dry_run {
                print!("{}", netem::render(&netem::plan(&n)));
                return Ok(0);
            }
            // A signal in the middle must not leave half a setup: it is
            // held until apply is done (or rolled back), then the setup is
            // taken back and netchaos exits as the signal would have.
            let held = HeldSignals::install()?;
            let applied = apply::apply(&n);
            if let Some(sig) = held.caught() {
                let _ = apply::clear(&n.dev);
                eprintln!(
                    "netchaos: interrupted by signal {sig}: nothing of netchaos's is left on {}",
                    n.dev
                );
                return Ok((128 + sig).min(255) as u8);
            }
            applied.map_err(Error::runtime)?;
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
            // Clearing runs to the end whatever signal arrives meanwhile.
            let held = HeldSignals::install()?;
            let done = apply::clear(dev).map_err(Error::runtime)?;
            if let Some(sig) = held.caught() {
                eprintln!("netchaos: signal {sig} arrived while clearing; cleared first");
            }
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

/// SIGINT, SIGTERM and SIGHUP, noted instead of acted on while tc runs.
struct HeldSignals {
    caught: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HeldSignals {
    fn install() -> Result<HeldSignals> {
        let caught = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register_usize(sig, caught.clone(), sig as usize)
                .map_err(|e| Error::runtime(format!("cannot handle signals: {e}")))?;
        }
        Ok(HeldSignals { caught })
    }

    /// The last signal that arrived, if any.
    fn caught(&self) -> Option<i32> {
        match self.caught.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            s => Some(s as i32),
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
        loss_burst,
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
    n.mtu = Some(&n.dev)
        .filter(|d| !d.is_empty() && !d.contains('/'))
        .and_then(|d| std::fs::read_to_string(format!("/sys/class/net/{d}/mtu")).ok())
        .and_then(|m| m.trim().parse().ok());
    n.validate().map_err(|e| Error::Usage(e.0))?;
    Ok(n)
}
