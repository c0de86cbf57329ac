//! `loss` (packet layer): `percent` of the connection's packets between the
//! client and the relay are dropped in the namespace's input path, so TCP
//! retransmits for real. With `stream`, only client→server (`upstream`) or
//! server→client (`downstream`) packets are dropped. Which connections get
//! it is seeded; which packets are lost is the kernel's random choice.

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Loss {
    /// The share of packets dropped, 0..=1.
    rate: f64,
}

impl Kind for Loss {
    const INFO: KindInfo = KindInfo {
        name: "loss",
        layer: Layer::Packet,
        default_stream: Stream::Both,
        streamed: true,
        stages: false,
        about: "percent of the flow's packets are dropped: real retransmissions",
        params: &[("percent", "a percentage above 0, like 10 or \"2.5%\"", "the share of packets dropped")],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rate = f
            .percent("percent")?
            .ok_or_else(|| f.table_error("missing \"percent\" (like 10 for 10 %)"))?;
        if rate <= 0.0 {
            return Err(f.table_error("percent must be more than 0"));
        }
        Ok(Loss { rate })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("percent", format!("{}", (self.rate * 1e4).round() / 1e2))]
    }
}

impl Loss {

    /// The rate in parts per million, as nftables' `numgen` compares it.
    pub(crate) fn ppm(&self) -> u32 {
        (self.rate * 1e6).round() as u32
    }
}
