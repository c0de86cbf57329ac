//! The built-in drills: TOML files in `profiles/drills/`, compiled in,
//! runnable as `netchaos drill --builtin NAME -- COMMAND` and printed as
//! templates to copy (`--show NAME`).

/// Each built-in drill: its name and its file.
pub(crate) const DRILLS: &[(&str, &str)] = &[(
    "llm-failover",
    include_str!("../../profiles/drills/llm-failover.toml"),
)];

/// A built-in drill's file, or an error that lists them.
pub(crate) fn get(name: &str) -> Result<&'static str, String> {
    DRILLS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
        .ok_or_else(|| {
            let names: Vec<&str> = DRILLS.iter().map(|(n, _)| *n).collect();
            format!(
                "no built-in drill {name:?}; the built-in drills: {}",
                names.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_drill_parses_and_checks_out() {
        for (name, text) in DRILLS {
            let d = super::super::spec::parse(name, text, Some("true".into()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!d.scenarios.is_empty(), "{name}");
            // Each scenario's fault is a real fault or profile.
            for s in &d.scenarios {
                match &s.fault {
                    super::super::spec::Fault::Flag(f) => {
                        crate::profile::parse_fault_flag(f)
                            .unwrap_or_else(|e| panic!("{name}/{}: {e}", s.name));
                    }
                    super::super::spec::Fault::Profile(p) => assert!(
                        crate::profile::builtin::names().contains(&p.as_str()),
                        "{name}/{}: no profile {p}",
                        s.name
                    ),
                }
            }
        }
        assert!(get("nope").unwrap_err().contains("llm-failover"));
    }
}
