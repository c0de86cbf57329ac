//! The netlink framing netchaos's own protocol modules share ([`nfqueue`],
//! [`rtnl`]): message headers, attributes, and the request that waits for
//! its acknowledgement. Headers and attribute headers are native-endian
//! and 4-byte aligned (`linux/netlink.h`); what goes inside is each
//! protocol's business.
//!
//! [`nfqueue`]: super::nfqueue
//! [`rtnl`]: super::rtnl

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{MsgFlags, recv, send};

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;
/// With `NLM_F_CREATE`: fail if it exists (what `ip … add` asks).
pub(crate) const NLM_F_EXCL: u16 = 0x200;
pub(crate) const NLM_F_CREATE: u16 = 0x400;

/// One message of a buffer: its type and what follows its header.
pub(crate) struct Message<'a> {
    pub kind: u16,
    pub body: &'a [u8],
}

/// Netlink messages in a buffer; stops at the first malformed one.
pub(crate) fn messages(mut buf: &[u8]) -> impl Iterator<Item = Message<'_>> {
    std::iter::from_fn(move || {
        if buf.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(buf[4..6].try_into().expect("2 bytes"));
        if len < 16 || len > buf.len() {
            return None;
        }
        let msg = Message {
            kind,
            body: &buf[16..len],
        };
        buf = &buf[align(len).min(buf.len())..];
        Some(msg)
    })
}

/// Attributes: (type without flag bits, payload).
pub(crate) fn attrs(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes(buf[..2].try_into().expect("2 bytes")) as usize;
        let kind = u16::from_ne_bytes(buf[2..4].try_into().expect("2 bytes")) & 0x3fff;
        if len < 4 || len > buf.len() {
            return None;
        }
        let data = &buf[4..len];
        buf = &buf[align(len).min(buf.len())..];
        Some((kind, data))
    })
}

pub(crate) fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// A message header of type `kind` (length patched by [`finish`]), with
/// sequence number 0 and the kernel as its destination.
pub(crate) fn header(kind: u16, flags: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&0u32.to_ne_bytes()); // length
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    m
}

pub(crate) fn put_attr(m: &mut Vec<u8>, kind: u16, data: &[u8]) {
    m.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(data);
    m.resize(align(m.len()), 0);
}

/// Writes the message's length into its header.
pub(crate) fn finish(m: &mut [u8]) {
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
}

/// Sends a request that asked for an acknowledgement (`NLM_F_ACK`) and
/// waits for it: `Ok` for the kernel's yes, its errno for a no.
pub(crate) fn request(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    send(fd.as_raw_fd(), msg, MsgFlags::empty())?;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if let Some(code) = ack(&buf[..n]) {
            return match code {
                0 => Ok(()),
                e => Err(io::Error::from_raw_os_error(-e)),
            };
        }
    }
}

/// The error code of the first acknowledgement (`NLMSG_ERROR`) in a
/// buffer: 0 for success, a negative errno for a refusal.
fn ack(buf: &[u8]) -> Option<i32> {
    messages(buf).find(|m| m.kind == NLMSG_ERROR).map(|m| {
        m.body
            .get(..4)
            .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_attributes_round_trip_and_garbage_ends_them() {
        let mut m = header(42, NLM_F_ACK);
        m.extend_from_slice(&[7, 7, 7, 7]);
        put_attr(&mut m, 3, &[1, 2, 3]);
        put_attr(&mut m, 0x8005, &[9; 4]); // NLA_F_NESTED is masked off
        finish(&mut m);
        assert_eq!(m.len() % 4, 0);
        let two = [m.clone(), m].concat();
        let msgs: Vec<_> = messages(&two).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].kind, 42);
        let a: Vec<_> = attrs(&msgs[1].body[4..]).collect();
        assert_eq!(a, vec![(3, &[1u8, 2, 3][..]), (5, &[9u8; 4][..])]);
        assert_eq!(messages(&[0xff; 40]).count(), 0);
        assert_eq!(attrs(&[1, 0, 0, 0]).count(), 0);
    }

    #[test]
    fn an_acknowledgement_carries_the_kernels_answer() {
        let ack_of = |code: i32| {
            let mut m = header(NLMSG_ERROR, 0);
            m.extend_from_slice(&code.to_ne_bytes());
            finish(&mut m);
            m
        };
        assert_eq!(ack(&ack_of(0)), Some(0));
        assert_eq!(ack(&ack_of(-libc::EEXIST)), Some(-libc::EEXIST));
        assert_eq!(ack(&header(16, 0)), None);
    }
}
