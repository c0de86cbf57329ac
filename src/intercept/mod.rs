//! Interception: where transparently relayed connections come from.
//!
//! `netchaos run` wraps a command in new network and mount namespaces
//! (and, without root, a user namespace) made by a small agent process
//! ([`agent`], at [`addresses`] the host does not use): `lo` up with a
//! default route, one nftables table ([`nft`]) redirecting every outbound
//! TCP connection to the relay's listeners and every UDP DNS query to a
//! forwarder ([`dns_forward`]), all created inside the namespace and handed to
//! netchaos over a socket pair ([`channel`]). The command runs in a PID
//! namespace whose first process ([`init`]) ties its life to netchaos's
//! and keeps it inside the boundary ([`privilege`]). `attach` and
//! `--in-place` install the same table in a namespace that exists already
//! ([`attach`], through a thread of netchaos's in it, [`nsthread`]).
//! [`sandbox`] is netchaos's handle on a namespace, and implements the
//! relay's `Interception`: the relay, outside, asks it where a connection
//! was going and how to reach inside.
//!
//! Before the redirect, each new SYN is queued ([`nfqueue`]) to the SYN gate
//! ([`syn_gate`], with its memory in [`gate`]), which carries out the
//! connect-phase decisions of `fault::connect` and holds the SYN until the
//! real upstream has answered, so that `connect()` fails the way it would
//! have without netchaos. Packet faults (`loss`, numbered by [`loss`], and
//! `blackout`) are rules of the same table.
//!
//! Nothing outlives netchaos: the namespace and its table disappear with
//! the last process and socket in it, and the command's processes die with
//! netchaos. What fails here is an [`error::InterceptError`].

pub(crate) mod addresses;
pub(crate) mod agent;
pub(crate) mod attach;
pub(crate) mod beacon;
pub(crate) mod cgroup;
pub(crate) mod channel;
pub(crate) mod delay_line;
pub(crate) mod dns_forward;
pub(crate) mod error;
pub(crate) mod gate;
pub(crate) mod init;
pub(crate) mod kernel_facts;
pub(crate) mod locate;
pub(crate) mod loss;
pub(crate) mod netlink;
pub(crate) mod nfqueue;
pub(crate) mod nft;
pub(crate) mod nsthread;
pub(crate) mod offload;
pub(crate) mod privilege;
pub(crate) mod rtnl;
pub(crate) mod run_dir;
pub(crate) mod sandbox;
pub(crate) mod sock_diag;
pub(crate) mod syn_gate;
pub(crate) mod trust;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Packet-level control of one intercepted connection: blackouts add the
/// client's endpoint to the namespace's blackout set, with a timeout.
pub(crate) struct FlowPartition {
    door: Arc<sandbox::Door>,
    client: SocketAddr,
    /// When the connection was accepted (this was made).
    opened: std::time::Instant,
    /// Told when the connection is gone (this is dropped with it).
    delay_line: Option<Arc<delay_line::DelayLine>>,
}

impl Drop for FlowPartition {
    fn drop(&mut self) {
        if let Some(line) = &self.delay_line {
            line.closed(self.client, self.opened);
        }
    }
}

use crate::fault::PartitionError;

impl crate::fault::Partition for FlowPartition {
    fn blackout(
        &self,
        duration: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = Result<(), PartitionError>> + Send + '_>> {
        let (door, client) = (self.door.clone(), self.client);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || door.blackout(client, duration))
                .await
                .map_err(|e| PartitionError(e.to_string()))?
                .map_err(|e| PartitionError(e.to_string()))
        })
    }
}
