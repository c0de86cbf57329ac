//! The nftables ruleset netchaos installs: one table, `inet netchaos`, built
//! here as text and applied atomically with `nft -f -`, so that it is either
//! all in place or not at all. Removing the table removes everything.
//!
//! (The ruleset is a handful of lines; text keeps it readable in logs and
//! tests, and `nft -f` applies it in one transaction, as the JSON API would.)

use std::io::Write;
use std::process::{Command, Stdio};

/// The table netchaos owns, in family `inet` (IPv4 and IPv6).
pub const TABLE: &str = "netchaos";

/// `SO_MARK` on the relay's own sockets, so that interception skips them.
pub const RELAY_MARK: u32 = 0x6e63; // "nc"

/// Where intercepted traffic goes, inside the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirects {
    /// The relay's TCP listeners (127.0.0.1 and ::1, same port).
    pub tcp_port: u16,
    /// The DNS forwarder's UDP sockets (127.0.0.1 and ::1, same port).
    pub dns_port: u16,
}

/// The ruleset for `netchaos run`: every outbound TCP connection and every
/// UDP DNS query from the namespace goes to netchaos, except what the relay
/// itself sends (marked).
pub fn run_ruleset(r: &Redirects) -> String {
    format!(
        "table inet {TABLE} {{
\tchain output {{
\t\ttype nat hook output priority -100; policy accept;
\t\tmeta mark {RELAY_MARK:#x} return
\t\tudp dport 53 redirect to :{dns}
\t\tmeta l4proto tcp redirect to :{tcp}
\t}}
}}
",
        dns = r.dns_port,
        tcp = r.tcp_port,
    )
}

/// Applies `ruleset` with `nft -f -` (one atomic transaction).
pub fn apply(ruleset: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "the `nft` command was not found: install nftables (apt-get install nftables)"
                    .to_string()
            }
            _ => format!("cannot run nft: {e}"),
        })?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(ruleset.as_bytes())
        .map_err(|e| format!("cannot write to nft: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft rejected the netchaos ruleset: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ruleset_redirects_tcp_and_dns_and_skips_the_relay() {
        let text = run_ruleset(&Redirects {
            tcp_port: 4000,
            dns_port: 5000,
        });
        assert!(text.starts_with("table inet netchaos {"));
        assert!(text.contains("type nat hook output priority -100"));
        assert!(text.contains("meta mark 0x6e63 return"));
        assert!(text.contains("udp dport 53 redirect to :5000"));
        assert!(text.contains("meta l4proto tcp redirect to :4000"));
        // The mark exemption must come before the redirects.
        assert!(text.find("meta mark").unwrap() < text.find("redirect").unwrap());
    }
}
