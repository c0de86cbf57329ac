//! A message channel between netchaos and its namespace agent: a
//! `SOCK_SEQPACKET` socket pair carrying small JSON messages and, with them,
//! file descriptors (`SCM_RIGHTS`) — how sockets created inside the
//! namespace reach the relay outside it.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};
use serde::{Serialize, de::DeserializeOwned};

/// Largest message; messages are small JSON objects.
const MAX_MSG: usize = 64 * 1024;
/// Most descriptors one message carries.
const MAX_FDS: usize = 12;

/// One end of a socket pair.
#[derive(Debug)]
pub(crate) struct Channel(OwnedFd);

impl Channel {
    /// A connected pair; both ends close on exec.
    pub(crate) fn pair() -> io::Result<(Channel, Channel)> {
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        Ok((Channel(a), Channel(b)))
    }

    /// Sends `msg` (as JSON) with `fds`.
    pub(crate) fn send<T: Serialize>(&self, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(
            self.0.as_raw_fd(),
            &[IoSlice::new(&body)],
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        )?;
        Ok(())
    }

    /// Receives one message and the descriptors that came with it; `None`
    /// when the other end is closed.
    pub(crate) fn recv<T: DeserializeOwned>(&self) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
        let mut buf = vec![0u8; MAX_MSG];
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = loop {
                match recvmsg::<()>(
                    self.0.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                ) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other?,
                }
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    fds.extend(raw.into_iter().map(own_received_fd));
                }
            }
            (msg.bytes, fds)
        };
        if n == 0 {
            return Ok(None);
        }
        let msg = serde_json::from_slice(&buf[..n]).map_err(io::Error::other)?;
        Ok(Some((msg, fds)))
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Bounds how long a blocking receive may wait (`None`: forever).
    pub(crate) fn set_recv_timeout(&self, d: Option<std::time::Duration>) -> io::Result<()> {
        socket2::SockRef::from(&self.0).set_read_timeout(d)
    }
}

fn own_received_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel just installed `fd` in this process for this
    // message (SCM_RIGHTS); nothing else refers to it, so we own it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_descriptors() {
        let (a, b) = Channel::pair().unwrap();
        let (x, _y) = Channel::pair().unwrap();
        a.send(&serde_json::json!({"hello": 1}), &[x.as_fd()])
            .unwrap();
        let (msg, fds): (serde_json::Value, _) = b.recv().unwrap().unwrap();
        assert_eq!(msg["hello"], 1);
        assert_eq!(fds.len(), 1);
        drop(a);
        assert!(
            b.recv::<serde_json::Value>().unwrap().is_none(),
            "EOF after close"
        );
    }
}
