//! `packet_latency` (packet layer): a slower path, not a late reply. Every
//! packet of the flow between the client and the relay — the handshake and
//! the ACKs included, both ways — waits in netchaos's packet delay line
//! ([`super::path`]), so `connect()` takes a round trip, slow start climbs
//! over a `delay` round trip, and the client's TCP measures the RTT it
//! would on such a path. `delay` is the round trip added: with `stream =
//! "both"` (the default) each direction carries half of it; with one
//! direction, that direction carries all of it. `latency` is the other
//! delay: each byte of a stream late, the handshake and TCP left alone.

use std::time::Duration;

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_duration;

/// The longest delay the line holds a packet (the kernel's queue holds the
/// packets meanwhile; see [`super::path`]).
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PacketLatency {
    pub(crate) delay: Duration,
    pub(crate) jitter: Duration,
}

impl Kind for PacketLatency {
    const INFO: KindInfo = KindInfo {
        name: "packet_latency",
        layer: Layer::Packet,
        default_stream: Stream::Both,
        streamed: true,
        stages: false,
        about: "the flow's packets (SYN and ACKs too) cross a path with this round trip",
        params: &[
            (
                "delay",
                "a duration, required, at most 60s",
                "the round trip added (half each way with stream = \"both\")",
            ),
            (
                "jitter",
                "a duration, default 0",
                "± this much per packet, uniform; never reorders",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let delay = f
            .duration("delay")?
            .ok_or_else(|| f.table_error("missing \"delay\" (a duration like \"50ms\")"))?;
        let jitter = f.duration("jitter")?.unwrap_or_default();
        if delay.is_zero() {
            return Err(f.table_error("delay must be more than 0"));
        }
        if delay > MAX_DELAY || jitter > MAX_DELAY {
            return Err(f.table_error(format!(
                "delay and jitter are at most {} (packets wait in the kernel meanwhile)",
                format_duration(MAX_DELAY)
            )));
        }
        Ok(PacketLatency { delay, jitter })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("delay", format_duration(self.delay))];
        if !self.jitter.is_zero() {
            p.push(("jitter", format_duration(self.jitter)));
        }
        p
    }
}
