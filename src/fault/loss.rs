//! `loss` (packet layer): `percent` of the connection's packets between the
//! client and the relay are dropped in the namespace's input path, so TCP
//! retransmits for real. With `stream`, only client→server (`upstream`) or
//! server→client (`downstream`) packets are dropped. Which connections get
//! it is seeded; which packets are lost is the kernel's random choice
//! (an nftables `numgen` rule: each packet on its own).
//!
//! With `burst` above 1 losses come in runs of that many packets on
//! average, as on a congested or radio link (tc-netem's `loss gemodel`,
//! Chaos Mesh's `loss.correlation`): the flow then crosses the packet
//! delay line, where a two-state (Gilbert) model of each direction decides,
//! seeded ([`crate::fault::path`]).

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Loss {
    /// The share of packets dropped, 0..=1.
    rate: f64,
    /// The mean length of a run of losses; 1: each packet on its own.
    burst: f64,
}

impl Kind for Loss {
    const INFO: KindInfo = KindInfo {
        name: "loss",
        layer: Layer::Packet,
        default_stream: Stream::Both,
        streamed: true,
        stages: false,
        about: "percent of the flow's packets are dropped: real retransmissions",
        params: &[
            (
                "percent",
                "a percentage above 0, like 10 or \"2.5%\"",
                "the share of packets dropped",
            ),
            (
                "burst",
                "a number from 1 to 1000, default 1",
                "how many packets in a row are lost on average (1: each on its own; above 1: run only)",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rate = f
            .percent("percent")?
            .ok_or_else(|| f.table_error("missing \"percent\" (like 10 for 10 %)"))?;
        if rate <= 0.0 {
            return Err(f.table_error("percent must be more than 0"));
        }
        let burst = f.number_in("burst", 1.0, 1000.0)?.unwrap_or(1.0);
        // A good stretch lasts a packet at least, so runs of `burst` lose
        // at most burst/(burst+1) of the packets (100 % aside: all lost).
        let most = burst / (burst + 1.0);
        if burst > 1.0 && rate < 1.0 && rate > most {
            return Err(f.table_error(format!(
                "runs of {burst} packets on average lose at most {}% (or 100%): lower percent or raise burst",
                (most * 1e4).floor() / 1e2
            )));
        }
        Ok(Loss { rate, burst })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        // Six decimals: shown through the API, a value must read back as
        // itself (0.001 % is a valid share, not 0).
        let mut p = vec![("percent", format!("{}", (self.rate * 1e8).round() / 1e6))];
        if self.bursty() {
            p.push(("burst", format!("{}", self.burst)));
        }
        p
    }
}

impl Loss {
    /// Whether losses come in runs: the packet delay line's model decides
    /// instead of an nftables rule.
    pub(crate) fn bursty(&self) -> bool {
        self.burst > 1.0
    }

    /// The share of packets lost, 0..=1.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// The mean number of packets lost in a row.
    pub(crate) fn burst(&self) -> f64 {
        self.burst
    }

    /// The rate in parts per million, as nftables' `numgen` compares it.
    pub(crate) fn ppm(&self) -> u32 {
        (self.rate * 1e6).round() as u32
    }
}
