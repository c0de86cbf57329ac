//! What a fault does where a layer asks it: the layers' hooks on a fault
//! kind ([`super::Kind::on_request`], [`super::Kind::on_query`]). A layer
//! gathers these acts into its decision and never looks at which kind
//! made one, so a new kind that acts like an old one touches its own file
//! and the registry only.

use std::net::IpAddr;
use std::time::Duration;

use super::dns_error::Rcode;
use super::http_abort::HttpAbort;
use super::http_delay::Phase;
use super::http_reply::AnswerPhase;
use super::http_rewrite::HttpRewrite;
use super::http_status::{After, HttpStatus};
use super::http_truncate::HttpTruncate;
use super::sse::Sse;
use bytes::Bytes;

/// What an HTTP fault does to one request it matched and was drawn for.
#[derive(Debug, Clone)]
pub(crate) enum HttpAct {
    /// Answers in the upstream's place (`Request`), or instead of the
    /// upstream's response (`Response`).
    Answer(AnswerPhase, Reply),
    /// Holds the request, or its response's head, this long.
    Hold(Phase, Duration),
    /// Acts on the response's events or messages.
    Events(Sse),
    /// Cuts the response's body short.
    Truncate(HttpTruncate),
    /// Edits the request on its way, or the response.
    Rewrite(AnswerPhase, HttpRewrite),
}

/// How netchaos answers a request in the upstream's place.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// With a canned reply (`http_status`; boxed: it is the large one).
    Status(Box<HttpStatus>),
    /// With no reply at all, the connection ending (`http_abort`).
    Abort(Box<HttpAbort>),
}

impl Reply {
    /// The status the client gets, if it gets one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Reply::Status(s) => Some(s.status()),
            Reply::Abort(_) => None,
        }
    }

    /// The bytes the client gets (`closing`: the connection ends after
    /// them; `head_only`: they answer a HEAD).
    pub(crate) fn bytes(&self, closing: bool, head_only: bool) -> Bytes {
        match self {
            Reply::Status(s) => s.reply(closing, head_only),
            Reply::Abort(_) => Bytes::new(),
        }
    }

    pub(crate) fn then(&self) -> After {
        match self {
            Reply::Status(s) => s.then(),
            Reply::Abort(a) => a.then(),
        }
    }
}

/// What a DNS fault does to one query it matched.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DnsAct {
    /// Holds whatever answer the query gets this long.
    Hold(Duration),
    /// Never answers it.
    Silence,
    /// Answers it in the resolver's place.
    Answer(Made),
}

/// An answer made in the resolver's place.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Made {
    Error(Rcode),
    /// NOERROR with these addresses (maybe none).
    Addresses {
        addrs: Vec<IpAddr>,
        ttl: u32,
    },
    /// TC set, no records: retry over TCP.
    Truncated,
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::fault::dns_match::QueryView;
    use crate::fault::{FaultKind, KINDS, Layer};

    fn kind(flag: &str) -> FaultKind {
        crate::profile::parse_fault_flag(flag)
            .unwrap_or_else(|e| panic!("{flag}: {e}"))
            .kind
    }

    fn on_request(flag: &str) -> Option<HttpAct> {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        kind(flag).on_request(&mut rng, Some("api.example"), "/v1/messages")
    }

    fn on_query(flag: &str, udp: bool) -> Option<DnsAct> {
        let q = QueryView {
            name: "api.example",
            qtype: 1,
        };
        kind(flag).on_query(&q, udp, &mut ChaCha8Rng::seed_from_u64(1))
    }

    /// A kind of each layer with hooks, and what its hook says.
    #[test]
    fn every_http_and_dns_kind_acts_through_its_hook() {
        let http = [
            ("http_status:status=529", "answer"),
            ("http_abort:then=close", "answer"),
            ("http_delay:delay=1s", "hold"),
            ("http_delay:delay=1s,phase=request", "hold"),
            ("sse:drop_after_events=2", "events"),
            ("http_truncate:after_bytes=10", "truncate"),
            ("http_rewrite:phase=response,set_status=500", "rewrite"),
        ];
        for (flag, want) in http {
            let act = on_request(flag).unwrap_or_else(|| panic!("{flag}: no act"));
            let got = match act {
                HttpAct::Answer(..) => "answer",
                HttpAct::Hold(..) => "hold",
                HttpAct::Events(_) => "events",
                HttpAct::Truncate(_) => "truncate",
                HttpAct::Rewrite(..) => "rewrite",
            };
            assert_eq!(got, want, "{flag}");
            assert!(kind(flag).request_match().is_some(), "{flag}");
            assert_eq!(on_query(flag, true), None, "{flag}");
        }
        assert_eq!(
            on_query("dns_delay:delay=2s", true),
            Some(DnsAct::Hold(Duration::from_secs(2)))
        );
        assert_eq!(on_query("dns_timeout", true), Some(DnsAct::Silence));
        assert_eq!(
            on_query("dns_error:rcode=SERVFAIL", true),
            Some(DnsAct::Answer(Made::Error(Rcode::ServFail)))
        );
        assert_eq!(
            on_query("dns_answer:addresses=10.0.0.9", true),
            Some(DnsAct::Answer(Made::Addresses {
                addrs: vec!["10.0.0.9".parse().unwrap()],
                ttl: 60,
            }))
        );
        // Truncation is for UDP queries only; a name it does not match is
        // left alone.
        assert_eq!(
            on_query("dns_truncate", true),
            Some(DnsAct::Answer(Made::Truncated))
        );
        assert_eq!(on_query("dns_truncate", false), None);
        assert_eq!(on_query("dns_timeout:name=other.example", true), None);
        // Every HTTP and DNS kind the registry holds was looked at above:
        // a new one without its hook fails here.
        let seen = [
            "http_status",
            "http_abort",
            "http_delay",
            "sse",
            "http_truncate",
            "http_rewrite",
            "dns_delay",
            "dns_timeout",
            "dns_error",
            "dns_answer",
            "dns_truncate",
        ];
        for k in KINDS {
            if matches!(k.layer, Layer::Http | Layer::Dns) {
                assert!(seen.contains(&k.name), "{}: no hook test", k.name);
            }
        }
        // Other layers' kinds have no HTTP or DNS hook.
        for flag in ["latency:delay=1s", "tls_error", "refuse"] {
            assert!(on_request(flag).is_none(), "{flag}");
            assert!(kind(flag).request_match().is_none(), "{flag}");
            assert_eq!(on_query(flag, true), None, "{flag}");
        }
    }
}
