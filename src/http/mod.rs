//! The HTTP layer: faults per request, on HTTP/1.1 keep-alive connections
//! and HTTP/2 streams (gRPC), in the clear and (through [`crate::tls`])
//! inside HTTPS.
pub(crate) mod attempt;
pub(crate) mod budget;
pub(crate) mod decide;
pub(crate) mod events;
pub(crate) mod exchange;
pub(crate) mod h2;
pub(crate) mod h2_resets;
pub(crate) mod h2_stream;
#[cfg(test)]
mod harness;
pub(crate) mod phases;
pub(crate) mod rewrite;
pub(crate) mod tape;
pub(crate) mod wire;

// The wire vocabulary lives below the fault model; the engines name it here.
pub(crate) use crate::protocol::{eventstream, grpc};
