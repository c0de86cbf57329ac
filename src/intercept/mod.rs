//! Interception: where transparently relayed connections come from.
//!
//! `netchaos run` wraps a command in a new network namespace (and, without
//! root, a user namespace) made by a small agent process ([`agent`]): `lo`
//! up with a default route, one nftables table ([`nft`]) redirecting every
//! outbound TCP connection to the relay's listeners and every UDP DNS query
//! to a forwarder ([`dns`]), all created inside the namespace and handed to
//! netchaos over a socket pair ([`channel`]). The relay, outside, reads each
//! connection's original destination and dials it from the host's network
//! namespace; [`sandbox`] is netchaos's handle on all of this, and
//! [`privilege`] keeps the wrapped command from holding CAP_NET_ADMIN.
//!
//! Nothing outlives the command: the namespace and its table disappear with
//! the last process and socket in it.

pub mod agent;
pub mod channel;
pub mod dns;
pub mod nft;
pub mod privilege;
pub mod procnet;
pub mod sandbox;

pub use sandbox::{CommandEnd, Control, Listeners, Sandbox};
