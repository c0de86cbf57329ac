//! Answers made in the resolver's place: an error code, addresses, or a
//! truncated reply — well-formed DNS with the query's id and question, the
//! way a recursive resolver's own answer looks to the client's stub.

use std::net::IpAddr;

use simple_dns::rdata::{A, AAAA, RData};
use simple_dns::{CLASS, Packet, PacketFlag, RCODE, ResourceRecord};

use super::decide::Made;

/// The reply to `query` (its raw bytes) that `made` says; `None` when the
/// query cannot be parsed (it was, to get here) or built.
pub(crate) fn build(query: &[u8], made: &Made) -> Option<Vec<u8>> {
    let q = Packet::parse(query).ok()?;
    let mut r = Packet::new_reply(q.id());
    r.set_flags(PacketFlag::RECURSION_AVAILABLE);
    if q.has_flags(PacketFlag::RECURSION_DESIRED) {
        r.set_flags(PacketFlag::RECURSION_DESIRED);
    }
    let question = q.questions.first()?.clone();
    match made {
        Made::Error(code) => {
            *r.rcode_mut() = match *code as u8 {
                2 => RCODE::ServerFailure,
                3 => RCODE::NameError,
                _ => RCODE::Refused,
            };
        }
        Made::Truncated => r.set_flags(PacketFlag::TRUNCATION),
        Made::Addresses { addrs, ttl } => {
            for a in addrs {
                let rdata = match a {
                    IpAddr::V4(v4) => RData::A(A {
                        address: u32::from(*v4),
                    }),
                    IpAddr::V6(v6) => RData::AAAA(AAAA {
                        address: u128::from(*v6),
                    }),
                };
                r.answers.push(ResourceRecord::new(
                    question.qname.clone(),
                    CLASS::IN,
                    *ttl,
                    rdata,
                ));
            }
        }
    }
    r.questions.push(question);
    r.build_bytes_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::dns_error::Rcode;
    use simple_dns::{Name, Question, TYPE};

    fn query() -> Vec<u8> {
        let mut q = Packet::new_query(0x1234);
        q.set_flags(PacketFlag::RECURSION_DESIRED);
        q.questions.push(Question::new(
            Name::new_unchecked("api.example.com"),
            TYPE::A.into(),
            CLASS::IN.into(),
            false,
        ));
        q.build_bytes_vec().unwrap()
    }

    #[test]
    fn replies_carry_the_id_question_and_code() {
        let nx = build(&query(), &Made::Error(Rcode::NxDomain)).unwrap();
        let p = Packet::parse(&nx).unwrap();
        assert_eq!(p.id(), 0x1234);
        assert!(p.has_flags(PacketFlag::RESPONSE | PacketFlag::RECURSION_DESIRED));
        assert_eq!(p.rcode(), RCODE::NameError);
        assert_eq!(p.questions[0].qname.to_string(), "api.example.com");
        let a = build(
            &query(),
            &Made::Addresses {
                addrs: vec!["10.9.8.7".parse().unwrap()],
                ttl: 5,
            },
        )
        .unwrap();
        let p = Packet::parse(&a).unwrap();
        assert_eq!(p.rcode(), RCODE::NoError);
        assert_eq!(p.answers.len(), 1);
        assert_eq!(p.answers[0].ttl, 5);
        let t = Packet::parse(&build(&query(), &Made::Truncated).unwrap())
            .unwrap()
            .has_flags(PacketFlag::TRUNCATION);
        assert!(t);
    }
}
