//! `dns_truncate` (DNS layer): a matching query over UDP is answered with
//! the TC (truncated) bit and no records, so the client retries over TCP —
//! where the DNS layer's other faults apply too. Over TCP it does nothing
//! (there is nothing to truncate to).

use super::acts::{DnsAct, Made};
use super::dns_match::QueryMatch;
use super::dns_match::QueryView;
use super::dns_timeout::MATCH_PARAMS;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct DnsTruncate {
    matcher: QueryMatch,
}

impl Kind for DnsTruncate {
    const INFO: KindInfo = KindInfo {
        name: "dns_truncate",
        layer: Layer::Dns,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching UDP DNS query is answered truncated (TC): the client retries over TCP",
        params: &MATCH_PARAMS,
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(DnsTruncate {
            matcher: QueryMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        self.matcher.params()
    }

    fn on_query(
        &self,
        q: &QueryView<'_>,
        udp: bool,
        _rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<DnsAct> {
        (udp && self.matcher().matches(q)).then_some(DnsAct::Answer(Made::Truncated))
    }
}

impl DnsTruncate {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }
}
