//! `loss` (packet layer): `percent` of the connection's packets between the
//! client and the relay are dropped in the namespace's input path, so TCP
//! retransmits for real. With `stream`, only client→server (`upstream`) or
//! server→client (`downstream`) packets are dropped. Which connections get
//! it is seeded; which packets are lost is the kernel's random choice.

use crate::profile::node::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub struct Loss {
    /// The share of packets dropped, 0..=1.
    pub rate: f64,
}

impl Loss {
    pub fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rate = f
            .percent("percent")?
            .ok_or_else(|| f.table_error("missing \"percent\" (like 10 for 10 %)"))?;
        if rate <= 0.0 {
            return Err(f.table_error("percent must be more than 0"));
        }
        Ok(Loss { rate })
    }

    pub fn params(&self) -> Vec<(&'static str, String)> {
        vec![("percent", format!("{}", (self.rate * 1e4).round() / 1e2))]
    }

    /// The rate in parts per million, as nftables' `numgen` compares it.
    pub fn ppm(&self) -> u32 {
        (self.rate * 1e6).round() as u32
    }
}
