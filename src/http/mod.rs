//! The HTTP layer: HTTP/1.1 faults per request, on keep-alive connections
//! and (through [`crate::tls`]) inside HTTPS.
pub(crate) mod decide;
pub(crate) mod events;
pub(crate) mod eventstream;
pub(crate) mod exchange;
pub(crate) mod rewrite;
pub(crate) mod wire;
