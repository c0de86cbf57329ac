//! `corrupt`: each bit of the direction's data is flipped with probability
//! `bits` (Toxiproxy's `corrupt` toxic calls it `probability`): what a bad
//! NIC, a flaky middlebox or a memory error does, below TCP's checksum.

use bytes::BytesMut;
use rand::Rng;

use super::{Item, ItemKind, Kind, KindInfo, Layer, Next, StageCtx, StageFuture, StageIo, Stream};
use crate::settings::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Corrupt {
    bits: f64,
}

impl Corrupt {
    pub(crate) fn new(bits: f64) -> Corrupt {
        Corrupt {
            bits: bits.clamp(0.0, 1.0),
        }
    }
}

impl Kind for Corrupt {
    const INFO: KindInfo = KindInfo {
        name: "corrupt",
        layer: Layer::Stream,
        default_stream: Stream::Downstream,
        streamed: true,
        stages: true,
        about: "bits of the data are flipped at random",
        params: &[(
            "bits",
            "a share from 0 to 1, required",
            "the chance of each bit to flip",
        )],
    };

    fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        let bits = f.number_in("bits", 0.0, 1.0)?.ok_or_else(|| {
            f.table_error("missing \"bits\" (the share of bits flipped, like 0.001)")
        })?;
        Ok(Corrupt::new(bits))
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("bits", self.bits.to_string())]
    }

    fn stage<'a>(&self, ctx: StageCtx, io: &'a mut StageIo) -> Option<StageFuture<'a>> {
        Some(Box::pin(self.clone().run(ctx, io)))
    }
}

impl Corrupt {
    /// Flips each bit with probability `bits`, jumping from one flip to the
    /// next (geometric gaps) rather than drawing per bit.
    fn flip(&self, data: &mut [u8], rng: &mut impl Rng) -> bool {
        let total = data.len() as u64 * 8;
        if self.bits <= 0.0 || total == 0 {
            return false;
        }
        let mut flipped = false;
        let mut at = 0u64;
        loop {
            let gap = if self.bits >= 1.0 {
                0
            } else {
                let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
                (u.ln() / (1.0 - self.bits).ln()).floor() as u64
            };
            at = at.saturating_add(gap);
            if at >= total {
                return flipped;
            }
            data[(at / 8) as usize] ^= 1 << (at % 8);
            flipped = true;
            at += 1;
        }
    }

    async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        loop {
            let item = match io.next().await {
                Next::Item(item) => item,
                Next::Ended => return,
                Next::Stopped => return io.pass_rest().await,
            };
            let item = match &item.kind {
                ItemKind::Data(bytes) if ctx.active_at(item.at) => {
                    let mut copy = BytesMut::from(&bytes[..]);
                    if self.flip(&mut copy, &mut ctx.rng) {
                        ctx.hit.fire();
                    }
                    Item::data(item.at, copy.freeze())
                }
                _ => item,
            };
            if io.send(item).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn flips_about_the_share_asked() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let c = Corrupt::new(0.01);
        let mut data = vec![0u8; 100_000];
        c.flip(&mut data, &mut rng);
        let ones: u32 = data.iter().map(|b| b.count_ones()).sum();
        assert!(
            (7_000..9_000).contains(&ones),
            "{ones} of 800000 bits at 1%"
        );
        let mut all = vec![0u8; 10];
        Corrupt::new(1.0).flip(&mut all, &mut rng);
        assert_eq!(all, vec![0xFF; 10]);
        let mut none = vec![0u8; 10];
        assert!(!Corrupt::new(0.0).flip(&mut none, &mut rng));
    }
}
