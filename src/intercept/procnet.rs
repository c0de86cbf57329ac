//! What listens inside the namespace, read from `/proc/PID/net/tcp{,6}`
//! (which shows the sockets of PID's network namespace). The relay asks
//! before sending a loopback connection out to the host: a service the
//! wrapped command itself runs on that port keeps its connections inside.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const LISTEN: &str = "0A";

/// The network devices of the calling thread's namespace.
pub fn links() -> Vec<String> {
    std::fs::read_to_string("/proc/thread-self/net/dev")
        .map(|t| {
            t.lines()
                .skip(2)
                .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a TCP listener accepts connections to `addr`, per the tables
/// under `net_dir` (`/proc/PID/net`, or `/proc/thread-self/net` from a
/// thread inside the namespace), ignoring `skip` (netchaos's own listeners).
pub fn listening(net_dir: &str, addr: SocketAddr, skip: &[u16]) -> bool {
    if skip.contains(&addr.port()) {
        return false;
    }
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("{net_dir}/{f}"))
            .map(|text| listeners(&text).any(|l| accepts(l, addr)))
            .unwrap_or(false)
    })
}

/// Listening addresses in a `/proc/net/tcp`-format table.
fn listeners(text: &str) -> impl Iterator<Item = SocketAddr> + '_ {
    text.lines().skip(1).filter_map(|line| {
        let mut cols = line.split_whitespace();
        let local = cols.nth(1)?;
        let state = cols.nth(1)?;
        if state != LISTEN {
            return None;
        }
        parse_hex_addr(local)
    })
}

/// `0100007F:1F90` or the 32-digit IPv6 form; the address is stored as
/// 32-bit words in host byte order.
fn parse_hex_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
            .ok()
            .map(u32::from_be)
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?.to_be_bytes())),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_be_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn accepts(listener: SocketAddr, dst: SocketAddr) -> bool {
    if listener.port() != dst.port() {
        return false;
    }
    let l = listener.ip();
    let d = match dst.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(dst.ip(), IpAddr::V4),
        v4 => v4,
    };
    // A dual-stack `::` listener also takes IPv4 (its v6only flag is not in
    // /proc; most are dual-stack).
    l.is_unspecified()
        || l == d
        || matches!(l, IpAddr::V6(v6) if v6.to_ipv4_mapped() == Some(match d { IpAddr::V4(v4) => v4, _ => Ipv4Addr::UNSPECIFIED }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F91 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 100 0 0 10 0
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000
";

    #[test]
    fn reads_listeners_in_host_byte_order() {
        let l: Vec<SocketAddr> = listeners(TCP).collect();
        assert_eq!(
            l,
            vec![
                "127.0.0.1:8080".parse().unwrap(),
                "0.0.0.0:80".parse().unwrap()
            ]
        );
        let l6: Vec<SocketAddr> = listeners(TCP6).collect();
        assert_eq!(l6, vec!["[::1]:8082".parse().unwrap()]);
    }

    #[test]
    fn matching() {
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap();
        assert!(accepts(any, "127.0.0.1:80".parse().unwrap()));
        assert!(!accepts(any, "127.0.0.1:81".parse().unwrap()));
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(accepts(lo, "127.0.0.1:8080".parse().unwrap()));
        assert!(!accepts(lo, "127.0.0.2:8080".parse().unwrap()));
        assert!(accepts(lo, "[::ffff:127.0.0.1]:8080".parse().unwrap()));
        let v6any: SocketAddr = "[::]:9000".parse().unwrap();
        assert!(accepts(v6any, "127.0.0.1:9000".parse().unwrap()));
    }
}
