//! `dns_timeout` (DNS layer): a matching query is never answered — nor is
//! any retransmission of it — so the client's resolver runs into its own
//! timeout ("Resolving timed out", `EAI_AGAIN`), before any connect.

use super::acts::DnsAct;
use super::dns_match::QueryMatch;
use super::dns_match::QueryView;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct DnsTimeout {
    matcher: QueryMatch,
}

/// The parameters every DNS fault shares (the query match).
pub(crate) const MATCH_PARAMS: [(&str, &str, &str); 2] = [
    (
        "name",
        "host names, \"*.example.com\" (subdomains) or globs (* and ?)",
        "only queries for these names",
    ),
    (
        "qtype",
        "record types (A, AAAA, …)",
        "only queries of these types",
    ),
];

impl Kind for DnsTimeout {
    const INFO: KindInfo = KindInfo {
        name: "dns_timeout",
        layer: Layer::Dns,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching DNS query (and every retry of it) is never answered: resolution times out",
        params: &MATCH_PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(DnsTimeout {
            matcher: QueryMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        self.matcher.params()
    }

    fn on_query(
        &self,
        q: &QueryView<'_>,
        _udp: bool,
        _rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<DnsAct> {
        self.matcher().matches(q).then_some(DnsAct::Silence)
    }
}

impl DnsTimeout {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }
}
