//! `refuse` (connect layer): the client's SYN is answered with an RST, so
//! `connect()` fails with ECONNREFUSED. The SYN gate applies it; the
//! upstream is never contacted.

use super::{Kind, KindInfo, Layer, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refuse;

impl Kind for Refuse {
    const INFO: KindInfo = KindInfo {
        name: "refuse",
        layer: Layer::Connect,
        default_stream: Stream::Both,
        streamed: false,
        stages: false,
        about: "the SYN is answered with RST: connect() fails with ECONNREFUSED",
        params: &[],
    };

    fn parse(_: &mut Fields) -> Result<Self, ProfileError> {
        Ok(Refuse)
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}
