//! Segmentation offload on the namespace's loopback, for the packet faults.
//!
//! `loss` and the packet delay line act on the packets `lo` carries. With
//! TCP segmentation offload on, a packet there is a whole 64 KiB GSO batch:
//! dropping one is losing ~45 segments at once. Turning TSO off makes the
//! kernel cut each batch into MTU-sized segments before the device, as a
//! NIC does before the wire, so the rules see a real path's packets while
//! the sender's TCP still builds (and paces, and sizes its window for)
//! batches as it would towards a real NIC. Capping `gso_max_size` to the
//! MTU instead, as netchaos did before, made TCP itself send single
//! segments: with BBR on loopback's microsecond round trip its window then
//! fell to two or three segments, too few for a loss to be recovered by
//! duplicate acknowledgements, and 16 MiB at 10 % loss took 13–26 s
//! (40–66 retransmission timeouts) where a veth path takes 0.3–2 s.

use std::io;
use std::os::fd::AsRawFd;

/// `ETHTOOL_STSO` (linux/ethtool.h): set TCP segmentation offload, all of
/// TSO, TSO6, TSO-ECN and TSO-MANGLEID.
const ETHTOOL_STSO: u32 = 0x1f;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Turns TCP segmentation offload off on `ifname` (in the calling thread's
/// network namespace); generic segmentation stays on, so batches are cut
/// in software just before the device.
pub(crate) fn tso_off(ifname: &str) -> io::Result<()> {
    let name = ifname.as_bytes();
    if name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    // Any socket carries the ioctl; an unbound one sends nothing.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
        .or_else(|_| socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None))?;
    let mut value = EthtoolValue {
        cmd: ETHTOOL_STSO,
        data: 0,
    };
    // SAFETY: ifreq is plain data, zero is a valid value for every field.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name and the
    // ethtool_value that ifru_data points to, both live for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as libc::Ioctl, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_kernel_cannot_take_is_refused_before_the_call() {
        let long = "x".repeat(libc::IFNAMSIZ);
        assert_eq!(
            tso_off(&long).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            tso_off("lo\0x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn a_missing_device_is_an_error_not_a_silent_success() {
        assert!(tso_off("nc-no-such-if").is_err());
    }
}
