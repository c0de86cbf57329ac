//! `packet_rate` (packet layer): a slow link. The flow's packets between
//! the client and the relay leave one at a time at `rate` (each takes its
//! length over the rate to "transmit"), wait in a queue of at most `queue`
//! packets while the link is busy, and are dropped when it is full — so
//! TCP sees a bottleneck: RTT growing with the queue, then losses, as on a
//! real link (not a token bucket on bytes, which is `bandwidth`). With
//! `stream = "both"` each direction is a link of its own at `rate`.

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};
use crate::units::format_rate;

/// netem's and a device's default queue (`txqueuelen`): 1000 packets.
pub(crate) const DEFAULT_QUEUE: u64 = 1000;
/// The longest queue: what the kernel's queue to netchaos holds.
pub(crate) const MAX_QUEUE: u64 = 10_000;
/// The slowest link: below this a single packet takes seconds.
pub(crate) const MIN_RATE: u64 = 1000;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PacketRate {
    /// Bytes per second.
    pub(crate) rate: u64,
    /// Packets that may wait for the link.
    pub(crate) queue: u64,
}

impl Kind for PacketRate {
    const INFO: KindInfo = KindInfo {
        name: "packet_rate",
        layer: Layer::Packet,
        default_stream: Stream::Both,
        streamed: true,
        stages: false,
        about: "the flow's packets cross a link of this rate: queued, then dropped when the queue is full",
        params: &[
            (
                "rate",
                "a rate, required, at least 8kbit",
                "the link's rate (each direction's, with stream = \"both\")",
            ),
            (
                "queue",
                "a number of packets, default 1000, at most 10000",
                "packets waiting for the link before it drops",
            ),
        ],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let rate = f.rate("rate")?.ok_or_else(|| {
            f.table_error("missing \"rate\" (a rate like \"1mbit\" or \"500KB/s\")")
        })?;
        if rate < MIN_RATE {
            return Err(f.table_error(format!(
                "rate must be at least {} (a link slower than that holds one packet for seconds)",
                format_rate(MIN_RATE)
            )));
        }
        let queue = f
            .integer_in("queue", 1, MAX_QUEUE)?
            .unwrap_or(DEFAULT_QUEUE);
        Ok(PacketRate { rate, queue })
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        let mut p = vec![("rate", format_rate(self.rate))];
        if self.queue != DEFAULT_QUEUE {
            p.push(("queue", self.queue.to_string()));
        }
        p
    }
}
