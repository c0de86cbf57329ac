//! `connect_timeout` (connect layer): the client's SYNs, retransmissions
//! included, are never answered, so `connect()` blocks until the client's
//! own connect timeout (or the kernel's SYN retries) gives up. The SYN gate
//! drops them; the upstream is never contacted.

use crate::profile::node::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub struct ConnectTimeout;

impl ConnectTimeout {
    pub fn parse(_: &mut Fields) -> Result<Self, ProfileError> {
        Ok(ConnectTimeout)
    }

    pub fn params(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
