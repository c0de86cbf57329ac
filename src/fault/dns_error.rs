//! `dns_error` (DNS layer): a matching query is answered in the resolver's
//! place with an error code — `NXDOMAIN` ("no such name": curl exit 6,
//! Python `socket.gaierror` EAI_NONAME), `SERVFAIL` or `REFUSED` (the
//! resolver failed: EAI_AGAIN, "temporary failure in name resolution").

use super::acts::{DnsAct, Made};
use super::dns_match::QueryMatch;
use super::dns_match::QueryView;
use super::dns_timeout::MATCH_PARAMS;
use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone)]
pub(crate) struct DnsError {
    rcode: Rcode,
    matcher: QueryMatch,
}

/// The answer codes `dns_error` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rcode {
    ServFail = 2,
    NxDomain = 3,
    Refused = 5,
}

impl Rcode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Rcode::ServFail => "SERVFAIL",
            Rcode::NxDomain => "NXDOMAIN",
            Rcode::Refused => "REFUSED",
        }
    }
}

impl Kind for DnsError {
    const INFO: KindInfo = KindInfo {
        name: "dns_error",
        layer: Layer::Dns,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "a matching DNS query is answered NXDOMAIN, SERVFAIL or REFUSED in the resolver's place",
        params: &[
            (
                "rcode",
                "NXDOMAIN (default), SERVFAIL or REFUSED",
                "the answer's code",
            ),
            MATCH_PARAMS[0],
            MATCH_PARAMS[1],
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rcode = match f
            .string("rcode")?
            .map(|s| s.to_ascii_uppercase())
            .as_deref()
        {
            None | Some("NXDOMAIN") => Rcode::NxDomain,
            Some("SERVFAIL") => Rcode::ServFail,
            Some("REFUSED") => Rcode::Refused,
            Some(other) => {
                return Err(f.table_error(format!(
                    "rcode: expected \"NXDOMAIN\", \"SERVFAIL\" or \"REFUSED\", got {other:?}"
                )));
            }
        };
        Ok(DnsError {
            rcode,
            matcher: QueryMatch::parse(f)?,
        })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("rcode", self.rcode.as_str().to_string())];
        p.extend(self.matcher.params());
        p
    }

    fn on_query(
        &self,
        q: &QueryView<'_>,
        _udp: bool,
        _rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Option<DnsAct> {
        self.matcher()
            .matches(q)
            .then(|| DnsAct::Answer(Made::Error(self.rcode())))
    }
}

impl DnsError {
    pub(crate) fn matcher(&self) -> &QueryMatch {
        &self.matcher
    }

    pub(crate) fn rcode(&self) -> Rcode {
        self.rcode
    }
}
