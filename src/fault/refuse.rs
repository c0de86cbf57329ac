//! `refuse` (connect layer): the client's SYN is answered with an RST, so
//! `connect()` fails with ECONNREFUSED. The SYN gate applies it; the
//! upstream is never contacted.

use crate::profile::node::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub struct Refuse;

impl Refuse {
    pub fn parse(_: &mut Fields) -> Result<Self, ProfileError> {
        Ok(Refuse)
    }

    pub fn params(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
