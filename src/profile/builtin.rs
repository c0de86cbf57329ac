//! The built-in profiles: the files of `profiles/`, embedded at build time
//! (see `build.rs`) and usable by name (`-p flaky`).

include!(concat!(env!("OUT_DIR"), "/builtin_profiles.rs"));

/// The TOML text of a built-in profile.
pub(crate) fn get(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

pub(crate) fn names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// Every built-in with its description, for `netchaos profiles`.
pub(crate) fn list() -> Vec<(&'static str, String)> {
    BUILTIN
        .iter()
        .map(|(name, text)| {
            let desc = super::parse(name, text, None)
                .ok()
                .and_then(|d| d.description)
                .unwrap_or_default();
            (*name, desc)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_builtin_parses_and_has_a_description() {
        assert!(!super::BUILTIN.is_empty());
        for (name, text) in super::BUILTIN {
            let doc = super::super::parse(name, text, None).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                doc.description.is_some_and(|d| !d.is_empty()),
                "{name} has no description"
            );
            assert!(!doc.rules.is_empty(), "{name} has no rules");
        }
    }
}
