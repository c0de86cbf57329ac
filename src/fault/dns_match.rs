//! What every DNS fault shares: which queries it applies to — the queried
//! name (`name`: exact, `*.example.com` for its subdomains, or a glob with
//! `*` and `?` elsewhere, which takes Chaos Mesh's DNSChaos patterns) and the
//! query type (`qtype`: `A`, `AAAA`, …). The per-query `probability` draw
//! is the DNS layer's, from (seed, rule, fault, query number).

use crate::settings::{Fields, ProfileError};

/// A query, as far as matching looks at it.
pub(crate) struct QueryView<'a> {
    /// Lower case, without the trailing dot.
    pub(crate) name: &'a str,
    pub(crate) qtype: u16,
}

/// Which queries a DNS fault applies to; empty criteria match every query.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryMatch {
    names: Vec<NamePattern>,
    qtypes: Vec<u16>,
}

/// A queried name: exactly, (`*.example.com`) any of its subdomains, or a
/// glob (`chaos-mesh.*`, `github.?om`: `*` any run of characters, dots
/// included, `?` one character).
#[derive(Debug, Clone, PartialEq)]
enum NamePattern {
    Exact(String),
    /// The suffix with its leading dot (`.example.com`).
    Subdomains(String),
    Glob(String, wildmatch::WildMatch),
}

impl NamePattern {
    fn parse(s: &str) -> Option<NamePattern> {
        let s = s.trim().trim_end_matches('.').to_ascii_lowercase();
        let (sub, name) = match s.strip_prefix("*.") {
            Some(rest) if !rest.contains(['*', '?']) => (true, rest.to_string()),
            _ => (false, s),
        };
        let glob = name.contains(['*', '?']);
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars().all(|c| {
                        c.is_ascii_alphanumeric()
                            || c == '-'
                            || c == '_'
                            || (glob && "*?".contains(c))
                    })
            });
        valid.then(|| match (sub, glob) {
            (true, _) => NamePattern::Subdomains(format!(".{name}")),
            (false, true) => NamePattern::Glob(name.clone(), wildmatch::WildMatch::new(&name)),
            (false, false) => NamePattern::Exact(name),
        })
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Exact(n) => n == name,
            NamePattern::Subdomains(suffix) => {
                name.len() > suffix.len() && name.ends_with(suffix.as_str())
            }
            NamePattern::Glob(_, g) => g.matches(name),
        }
    }
}

impl std::fmt::Display for NamePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NamePattern::Exact(n) | NamePattern::Glob(n, _) => f.write_str(n),
            NamePattern::Subdomains(s) => write!(f, "*{s}"),
        }
    }
}

/// The record types people name, by number.
const TYPES: &[(&str, u16)] = &[
    ("A", 1),
    ("NS", 2),
    ("CNAME", 5),
    ("SOA", 6),
    ("PTR", 12),
    ("MX", 15),
    ("TXT", 16),
    ("AAAA", 28),
    ("SRV", 33),
    ("SVCB", 64),
    ("HTTPS", 65),
    ("ANY", 255),
    ("CAA", 257),
];

/// A query type's name (`TYPE99` for one without a name here).
pub(crate) fn type_name(t: u16) -> String {
    TYPES
        .iter()
        .find(|(_, n)| *n == t)
        .map_or_else(|| format!("TYPE{t}"), |(s, _)| s.to_string())
}

fn parse_type(s: &str) -> Option<u16> {
    let up = s.trim().to_ascii_uppercase();
    TYPES
        .iter()
        .find(|(n, _)| *n == up)
        .map(|(_, t)| *t)
        .or_else(|| up.strip_prefix("TYPE")?.parse().ok())
}

impl QueryMatch {
    pub(crate) fn parse(f: &mut Fields) -> Result<QueryMatch, ProfileError> {
        let mut m = QueryMatch::default();
        // Several as an array, or apart by `|` (`A|AAAA`, what a flag gives).
        for (text, loc) in f.alternatives("name")?.unwrap_or_default() {
            match NamePattern::parse(&text) {
                Some(p) => m.names.push(p),
                None => {
                    return Err(f.error(
                        "name",
                        &loc,
                        format!(
                            "expected a host name like \"api.example.com\", \"*.example.com\" or a glob like \"api-?.example.*\", got {text:?}"
                        ),
                    ));
                }
            }
        }
        for (text, loc) in f.alternatives("qtype")?.unwrap_or_default() {
            let Some(n) = parse_type(&text) else {
                let known: Vec<&str> = TYPES.iter().map(|(n, _)| *n).collect();
                return Err(f.error(
                    "qtype",
                    &loc,
                    format!(
                        "unknown query type {text:?}; expected one of {} or TYPEnn",
                        known.join(", ")
                    ),
                ));
            };
            m.qtypes.push(n);
        }
        Ok(m)
    }

    /// The same, with `qtype` defaulting to `types` when none was given.
    pub(crate) fn or_types(mut self, types: &[u16]) -> QueryMatch {
        if self.qtypes.is_empty() {
            self.qtypes = types.to_vec();
        }
        self
    }

    pub(crate) fn matches(&self, q: &QueryView<'_>) -> bool {
        (self.names.is_empty() || self.names.iter().any(|p| p.matches(q.name)))
            && (self.qtypes.is_empty() || self.qtypes.contains(&q.qtype))
    }

    pub(crate) fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if !self.names.is_empty() {
            let n: Vec<String> = self.names.iter().map(|n| n.to_string()).collect();
            p.push(("name", n.join("|")));
        }
        if !self.qtypes.is_empty() {
            let t: Vec<String> = self.qtypes.iter().map(|t| type_name(*t)).collect();
            p.push(("qtype", t.join("|")));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use crate::fault::testing::spec;

    #[test]
    fn names_and_types() {
        let s = spec("dns_error", &[("name", "*.example.com"), ("qtype", "aaaa")]).unwrap();
        let crate::fault::FaultKind::DnsError(e) = &s.kind else {
            panic!()
        };
        let m = e.matcher();
        let q = |name, qtype| super::QueryView { name, qtype };
        assert!(m.matches(&q("api.example.com", 28)));
        assert!(!m.matches(&q("api.example.com", 1)), "A is not AAAA");
        assert!(
            !m.matches(&q("example.com", 28)),
            "the glob is for subdomains"
        );
        assert!(!m.matches(&q("example.org", 28)));
        let e = spec("dns_error", &[("qtype", "AAAAA")]).unwrap_err();
        assert!(e.message.contains("unknown query type"), "{e}");
        let e = spec("dns_error", &[("name", "10.0.0.0/8")]).unwrap_err();
        assert!(e.message.contains("expected a host name"), "{e}");
        assert_eq!(super::type_name(65), "HTTPS");
        // Chaos Mesh's DNSChaos patterns.
        let s = spec("dns_error", &[("name", "chaos-mesh.*")]).unwrap();
        let crate::fault::FaultKind::DnsError(e) = &s.kind else {
            panic!()
        };
        assert!(e.matcher().matches(&q("chaos-mesh.org", 1)));
        assert!(
            e.matcher().matches(&q("chaos-mesh.co.uk", 1)),
            "* crosses dots"
        );
        assert!(!e.matcher().matches(&q("chaos-mesh", 1)));
        let s = spec("dns_error", &[("name", "GitHub.?om")]).unwrap();
        let crate::fault::FaultKind::DnsError(e) = &s.kind else {
            panic!()
        };
        assert!(e.matcher().matches(&q("github.com", 1)));
        assert!(!e.matcher().matches(&q("github.co", 1)));
        assert_eq!(e.matcher().params()[0].1, "github.?om");
        assert_eq!(super::parse_type("type99"), Some(99));
    }

    /// Several in one flag value, apart by `|`, as they print.
    #[test]
    fn several_names_and_types_in_a_flag() {
        let s = spec(
            "dns_error",
            &[("name", "a.example|*.b.example"), ("qtype", "A|MX")],
        )
        .unwrap();
        let crate::fault::FaultKind::DnsError(e) = &s.kind else {
            panic!()
        };
        let q = |name, qtype| super::QueryView { name, qtype };
        assert!(e.matcher().matches(&q("a.example", 15)));
        assert!(e.matcher().matches(&q("x.b.example", 1)));
        assert!(
            !e.matcher().matches(&q("a.example", 28)),
            "AAAA is not asked"
        );
        assert_eq!(
            e.matcher().params(),
            [
                ("name", "a.example|*.b.example".into()),
                ("qtype", "A|MX".into())
            ]
        );
        let e = spec("dns_error", &[("qtype", "A|")]).unwrap_err();
        assert!(e.message.contains("unknown query type \"\""), "{e}");
    }
}
