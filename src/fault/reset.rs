//! `reset`: after `after_bytes` (or `after` a time) both sides get a TCP
//! RST, so reads and writes fail with ECONNRESET. Bytes beyond the mark are
//! discarded, as a real abort would.

use super::{Item, ItemKind, StageCtx, StageIo, Trigger, Until, parse_trigger, pass_until};
use crate::profile::node::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub struct Reset {
    pub trigger: Trigger,
}

impl Reset {
    pub fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(Reset {
            trigger: parse_trigger(f)?,
        })
    }

    pub fn params(&self) -> Vec<(&'static str, String)> {
        vec![self.trigger.param()]
    }

    pub async fn run(self, mut ctx: StageCtx, io: &mut StageIo) {
        if let Ok(Until::Fired(_)) = pass_until(self.trigger, &ctx, io).await {
            ctx.hit.fire();
            let item = Item {
                at: tokio::time::Instant::now(),
                kind: ItemKind::Reset,
            };
            let _ = io.send(item).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::fault::FaultKind;
    use crate::units::Window;

    #[tokio::test(start_paused = true)]
    async fn resets_exactly_after_the_mark() {
        let FaultKind::Reset(r) = spec("reset", &[("after_bytes", "4KiB")]).unwrap().kind else {
            unreachable!()
        };
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move { r.run(ctx(Window::ALWAYS), &mut { io }).await });
        tx.send(data(3000)).await.unwrap();
        tx.send(data(3000)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 3000);
        assert_eq!(rx.recv().await.unwrap().len(), 1096);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Reset);
    }
}
