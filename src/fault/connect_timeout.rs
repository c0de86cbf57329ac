//! `connect_timeout` (connect layer): the client's SYNs, retransmissions
//! included, are never answered, so `connect()` blocks until the client's
//! own connect timeout (or the kernel's SYN retries) gives up. The SYN gate
//! drops them; the upstream is never contacted.

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConnectTimeout;

impl Kind for ConnectTimeout {
    const INFO: KindInfo = KindInfo {
        name: "connect_timeout",
        layer: Layer::Connect,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "the SYNs are never answered: connect() times out",
        params: &[],
    };

    fn parse(_: &mut Fields) -> Result<Self, ProfileError> {
        Ok(ConnectTimeout)
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
