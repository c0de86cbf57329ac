//! The namespace's own addressing over rtnetlink (`NETLINK_ROUTE`), as
//! `ip` would set it: a link up (with an MTU), a host address on it, a
//! default route through it. The agent sets `run`'s `lo` this way from
//! inside the namespace; starting `ip` for it cost about 2 ms of
//! `netchaos run`'s start-up per family.
//!
//! Message layout: `linux/rtnetlink.h`, `linux/if_link.h`,
//! `linux/if_addr.h` — a netlink header, the request's fixed struct
//! (`ifinfomsg`, `ifaddrmsg`, `rtmsg`), then attributes.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{
    AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, socket,
};

use super::netlink::{NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, finish, header, put_attr, request};

/// `lo`'s index in every network namespace (`LOOPBACK_IFINDEX`).
pub(crate) const LOOPBACK: u32 = 1;

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const IFLA_MTU: u16 = 4;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_F_NODAD: u8 = 0x02;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;

/// A routing socket in the calling thread's network namespace.
pub(crate) struct Rtnl(OwnedFd);

impl Rtnl {
    pub(crate) fn open() -> io::Result<Rtnl> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        Ok(Rtnl(fd))
    }

    /// `ip link set DEV [mtu MTU] up`.
    pub(crate) fn link_up(&self, index: u32, mtu: Option<u32>) -> io::Result<()> {
        request(&self.0, &link_up_msg(index, mtu))
    }

    /// `ip addr add ADDR/32 dev DEV` (`/128 … nodad` for IPv6: usable at
    /// once, as a source, with no duplicate detection to wait for).
    pub(crate) fn add_host_address(&self, index: u32, addr: IpAddr) -> io::Result<()> {
        request(&self.0, &address_msg(index, addr))
    }

    /// `ip route add default dev DEV src SRC`, in SRC's family.
    pub(crate) fn add_default_route(&self, index: u32, src: IpAddr) -> io::Result<()> {
        request(&self.0, &default_route_msg(index, src))
    }
}

fn link_up_msg(index: u32, mtu: Option<u32>) -> Vec<u8> {
    let mut m = header(RTM_NEWLINK, NLM_F_ACK);
    // struct ifinfomsg: family, pad, type, index, flags, change.
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    m.extend_from_slice(&(index as i32).to_ne_bytes());
    m.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
    m.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
    if let Some(mtu) = mtu {
        put_attr(&mut m, IFLA_MTU, &mtu.to_ne_bytes());
    }
    finish(&mut m);
    m
}

fn address_msg(index: u32, addr: IpAddr) -> Vec<u8> {
    let mut m = header(RTM_NEWADDR, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    let (family, prefix, flags, bytes) = family_of(addr);
    // struct ifaddrmsg: family, prefix length, flags, scope, index.
    m.extend_from_slice(&[family, prefix, flags, RT_SCOPE_UNIVERSE]);
    m.extend_from_slice(&index.to_ne_bytes());
    put_attr(&mut m, IFA_LOCAL, &bytes);
    put_attr(&mut m, IFA_ADDRESS, &bytes);
    finish(&mut m);
    m
}

fn default_route_msg(index: u32, src: IpAddr) -> Vec<u8> {
    let mut m = header(RTM_NEWROUTE, NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
    let (family, _, _, bytes) = family_of(src);
    // A route with no gateway is on-link: `ip` gives IPv4 ones link scope
    // (IPv6 routes have no scope).
    let scope = match src {
        IpAddr::V4(_) => RT_SCOPE_LINK,
        IpAddr::V6(_) => RT_SCOPE_UNIVERSE,
    };
    // struct rtmsg: family, dst_len (0: default), src_len, tos, table,
    // protocol, scope, type, flags.
    m.extend_from_slice(&[family, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, scope]);
    m.push(RTN_UNICAST);
    m.extend_from_slice(&0u32.to_ne_bytes());
    put_attr(&mut m, RTA_OIF, &index.to_ne_bytes());
    put_attr(&mut m, RTA_PREFSRC, &bytes);
    finish(&mut m);
    m
}

/// Family, host prefix length, address flags and bytes of `addr`.
fn family_of(addr: IpAddr) -> (u8, u8, u8, Vec<u8>) {
    match addr {
        IpAddr::V4(v4) => (libc::AF_INET as u8, 32, 0, v4.octets().to_vec()),
        IpAddr::V6(v6) => (libc::AF_INET6 as u8, 128, IFA_F_NODAD, v6.octets().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::netlink::{attrs, messages};
    use super::*;

    /// A message's type, flags, fixed struct and attributes.
    type Parts = (u16, u16, Vec<u8>, Vec<(u16, Vec<u8>)>);

    fn parts(m: &[u8], fixed: usize) -> Parts {
        let flags = u16::from_ne_bytes(m[6..8].try_into().unwrap());
        let msg = messages(m).next().expect("one whole message");
        assert_eq!(msg.body.len() + 16, m.len(), "length in the header");
        let a = attrs(&msg.body[fixed..])
            .map(|(k, d)| (k, d.to_vec()))
            .collect();
        (msg.kind, flags, msg.body[..fixed].to_vec(), a)
    }

    #[test]
    fn link_up_sets_the_up_flag_and_the_mtu_when_asked() {
        let (kind, flags, fixed, a) = parts(&link_up_msg(1, Some(1500)), 16);
        assert_eq!((kind, flags), (RTM_NEWLINK, 1 | NLM_F_ACK));
        assert_eq!(i32::from_ne_bytes(fixed[4..8].try_into().unwrap()), 1);
        let up = (libc::IFF_UP as u32).to_ne_bytes();
        assert_eq!((&fixed[8..12], &fixed[12..16]), (&up[..], &up[..]));
        assert_eq!(a, vec![(IFLA_MTU, 1500u32.to_ne_bytes().to_vec())]);
        assert!(parts(&link_up_msg(1, None), 16).3.is_empty());
    }

    #[test]
    fn addresses_are_host_addresses_and_ipv6_skips_duplicate_detection() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let (kind, flags, fixed, a) = parts(&address_msg(1, v4), 8);
        assert_eq!(kind, RTM_NEWADDR);
        assert_eq!(flags, 1 | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
        assert_eq!(&fixed[..4], &[libc::AF_INET as u8, 32, 0, 0]);
        assert_eq!(u32::from_ne_bytes(fixed[4..8].try_into().unwrap()), 1);
        assert_eq!(
            a,
            vec![
                (IFA_LOCAL, vec![192, 0, 2, 1]),
                (IFA_ADDRESS, vec![192, 0, 2, 1])
            ]
        );
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let (_, _, fixed, a) = parts(&address_msg(1, v6), 8);
        assert_eq!(&fixed[..3], &[libc::AF_INET6 as u8, 128, IFA_F_NODAD]);
        assert_eq!(a[0].1.len(), 16);
    }

    #[test]
    fn default_routes_leave_through_the_device_from_the_source() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let (kind, _, fixed, a) = parts(&default_route_msg(1, v4), 12);
        assert_eq!(kind, RTM_NEWROUTE);
        assert_eq!(
            &fixed[..8],
            &[
                libc::AF_INET as u8,
                0,
                0,
                0,
                RT_TABLE_MAIN,
                RTPROT_BOOT,
                RT_SCOPE_LINK,
                RTN_UNICAST
            ]
        );
        assert_eq!(
            a,
            vec![
                (RTA_OIF, 1u32.to_ne_bytes().to_vec()),
                (RTA_PREFSRC, vec![192, 0, 2, 1])
            ]
        );
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let (_, _, fixed, _) = parts(&default_route_msg(1, v6), 12);
        assert_eq!(fixed[6], RT_SCOPE_UNIVERSE);
    }
}

#[cfg(test)]
mod kernel {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

    use super::*;

    /// In a network namespace of its own (a thread's: the test's own
    /// stays as it is), the messages do what `ip` would: `lo` comes up,
    /// and the default routes leave from the addresses set.
    #[test]
    fn the_kernel_takes_the_messages() {
        std::thread::spawn(|| {
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "cannot make a network namespace in CI: {e}"
                );
                eprintln!("skipped: cannot make a network namespace here ({e})");
                return;
            }
            let (v4, v6) = (
                Ipv4Addr::new(192, 0, 2, 77),
                "2001:db8::77".parse::<Ipv6Addr>().unwrap(),
            );
            let nl = Rtnl::open().unwrap();
            nl.link_up(LOOPBACK, Some(1500)).unwrap();
            nl.add_host_address(LOOPBACK, v4.into()).unwrap();
            nl.add_default_route(LOOPBACK, v4.into()).unwrap();
            // A refusal comes back as the kernel's errno.
            let again = nl.add_host_address(LOOPBACK, v4.into()).unwrap_err();
            assert_eq!(again.raw_os_error(), Some(libc::EEXIST));
            // `lo` is up: a connection to 127.0.0.1 goes through.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            // The default route picks the address as the source (a UDP
            // connect sends nothing).
            let u = UdpSocket::bind("0.0.0.0:0").unwrap();
            u.connect("198.51.100.9:9").unwrap();
            assert_eq!(u.local_addr().unwrap().ip(), v4);
            let has_v6 = nl.add_host_address(LOOPBACK, v6.into());
            if has_v6.is_ok() {
                nl.add_default_route(LOOPBACK, v6.into()).unwrap();
                let u = UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).unwrap();
                u.connect("[2001:db8::9]:9").unwrap();
                assert_eq!(u.local_addr().unwrap().ip(), v6);
            }
        })
        .join()
        .unwrap();
    }
}
