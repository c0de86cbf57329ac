//! The wire vocabulary of the protocols netchaos follows, as faults and
//! reports name it: gRPC's status codes and trailers-only answers
//! ([`grpc`]), the formats streamed answers come in ([`events`]) and AWS's
//! binary event stream ([`eventstream`]). A leaf: it knows no socket, no
//! fault and no engine, so that `fault` (which names a `grpc_status` or an
//! event format) need not reach up into `http`.

pub(crate) mod events;
pub(crate) mod eventstream;
pub(crate) mod grpc;
