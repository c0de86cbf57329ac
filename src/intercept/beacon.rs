//! The owner's beacon: an abstract Unix socket that the netchaos owning a
//! namespace's table binds in that network namespace, named after itself.
//! Abstract socket names belong to the network namespace and vanish with
//! the last descriptor — also on SIGKILL or an OOM kill — so anyone in the
//! namespace can tell a live owner from a dead one where the owner's pid
//! means nothing: across PID namespaces (a pod's restarted sidecar, `clean`
//! from the node). A process of the namespace could squat a name to make a
//! dead owner look alive; that only keeps the old table (the refusal says
//! how to clean it), never removes a live owner's.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use super::nft::Owner;

/// A lit beacon: the name stays bound while this lives.
pub(crate) struct Beacon {
    _socket: UnixListener,
}

fn address(owner: &Owner) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(
        format!(
            "netchaos-owner pid={} start={} pidns={}",
            owner.pid, owner.start, owner.pidns
        )
        .as_bytes(),
    )
}

/// Binds `owner`'s name in the network namespace of the calling thread.
pub(crate) fn light(owner: &Owner) -> std::io::Result<Beacon> {
    Ok(Beacon {
        _socket: UnixListener::bind_addr(&address(owner)?)?,
    })
}

/// Whether `owner`'s beacon is lit in the calling thread's network
/// namespace: `None` when that cannot be told.
pub(crate) fn lit(owner: &Owner) -> Option<bool> {
    match UnixListener::bind_addr(&address(owner).ok()?) {
        // Free: nobody holds it (the probe lets go at once).
        Ok(_) => Some(false),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Some(true),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beacon_is_lit_while_it_lives() {
        let owner = Owner {
            pid: 4_000_000 + std::process::id() as i32,
            start: 7,
            pidns: 9,
            beacon: true,
        };
        assert_eq!(lit(&owner), Some(false));
        let b = light(&owner).unwrap();
        assert_eq!(lit(&owner), Some(true));
        assert!(light(&owner).is_err(), "one owner per name");
        drop(b);
        assert_eq!(lit(&owner), Some(false));
    }
}
