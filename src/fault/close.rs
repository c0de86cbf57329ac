//! `close`: after `after_bytes` (or `after` a time) the destination gets a
//! clean FIN and the connection is closed on both sides: a truncated stream
//! that looks like a normal end to the reader.

use super::{Item, ItemKind, StageCtx, StageIo, Trigger, Until, parse_trigger, pass_until};
use crate::profile::node::{Fields, ProfileError};

#[derive(Debug, Clone, PartialEq)]
pub struct Close {
    pub trigger: Trigger,
}

impl Close {
    pub fn parse(f: &mut Fields) -> Result<Self, ProfileError> {
        Ok(Close {
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
                kind: ItemKind::Close,
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
    async fn truncates_at_the_mark() {
        let FaultKind::Close(c) = spec("close", &[("after_bytes", "100")]).unwrap().kind else {
            unreachable!()
        };
        let (tx, mut rx, io) = channels();
        tokio::spawn(async move { c.run(ctx(Window::ALWAYS), &mut { io }).await });
        tx.send(data(150)).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().len(), 100);
        assert_eq!(rx.recv().await.unwrap().kind, ItemKind::Close);
    }
}
