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

/// Packet marks the SYN gate puts on a SYN with its verdict; the output
/// chain copies them to the connection (conntrack mark), so that every
/// later packet of the flow carries them.
pub mod marks {
    /// All of netchaos's verdict marks have these high bits.
    pub const BASE: u32 = 0x6e64_0000;
    /// Accepted; the low byte is the connection's loss rule (0: none).
    pub const TRACK: u32 = 0x6e64_0100;
    /// Answer with RST (ECONNREFUSED).
    pub const REFUSE: u32 = 0x6e64_0200;
    /// Answer with ICMP host unreachable (EHOSTUNREACH).
    pub const UNREACHABLE: u32 = 0x6e64_0300;
}

/// One `loss` fault as a rule: connections whose mark carries `index`
/// lose `ppm` parts per million of their packets in `direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossRule {
    pub index: u8,
    pub ppm: u32,
    /// conntrack direction: `Some("original")` = client→server,
    /// `Some("reply")` = server→client, `None` = both.
    pub direction: Option<&'static str>,
}

/// The SYN gate's queue number (queues are per network namespace).
pub const QUEUE: u16 = 0;

/// The ruleset for `netchaos run`:
///
/// * `syn_gate` (output, before NAT, so the original destination is still
///   in the packet): every new outbound SYN is queued to netchaos, which
///   decides its fate (connect faults, the upstream's own answer);
/// * `intercept` (NAT output): outbound TCP to the relay, UDP DNS to the
///   forwarder; the relay's own marked sockets pass;
/// * `verdicts` (filter output): a refused SYN gets an RST or an ICMP
///   error, and the gate's mark is copied to the connection;
/// * `packet_faults` (filter input): blackouts (sets of client endpoints
///   with timeouts, filled at run time) and per-connection loss.
pub fn run_ruleset(r: &Redirects, losses: &[LossRule], native_gate: bool) -> String {
    use marks::*;
    let gate = if native_gate {
        format!(
            "\tchain syn_gate {{
\t\ttype filter hook output priority -150; policy accept;
\t\tmeta mark {RELAY_MARK:#x} return
\t\ttcp flags & (syn | ack) == syn queue num {QUEUE} bypass
\t}}
"
        )
    } else {
        String::new()
    };
    let mut loss = String::new();
    for l in losses {
        let dir = l
            .direction
            .map_or(String::new(), |d| format!("ct direction {d} "));
        loss.push_str(&format!(
            "\t\tct mark {mark:#010x} {dir}numgen random mod 1000000 < {ppm} drop\n",
            mark = TRACK | u32::from(l.index),
            ppm = l.ppm
        ));
    }
    format!(
        "table inet {TABLE} {{
\tset blackout4 {{ type ipv4_addr . inet_service; flags timeout; }}
\tset blackout6 {{ type ipv6_addr . inet_service; flags timeout; }}
{gate}\tchain intercept {{
\t\ttype nat hook output priority -100; policy accept;
\t\tmeta mark {RELAY_MARK:#x} return
\t\tudp dport 53 redirect to :{dns}
\t\tmeta l4proto tcp redirect to :{tcp}
\t}}
\tchain verdicts {{
\t\ttype filter hook output priority 0; policy accept;
\t\tmeta mark & 0xffff0000 == {BASE:#010x} ct mark set meta mark
\t\tmeta mark {REFUSE:#010x} reject with tcp reset
\t\tmeta mark {UNREACHABLE:#010x} reject with icmpx type host-unreachable
\t}}
\tchain packet_faults {{
\t\ttype filter hook input priority 0; policy accept;
\t\tip saddr . tcp sport @blackout4 drop
\t\tip daddr . tcp dport @blackout4 drop
\t\tip6 saddr . tcp sport @blackout6 drop
\t\tip6 daddr . tcp dport @blackout6 drop
{loss}\t}}
}}
",
        dns = r.dns_port,
        tcp = r.tcp_port,
    )
}

/// Whether `nft` refused the ruleset because this kernel has no native
/// `queue` expression (nft_queue); the gate then goes through xtables.
pub fn lacks_native_queue(err: &str) -> bool {
    err.contains("queue num") && err.contains("No such file or directory")
}

/// The SYN gate through iptables-nft's NFQUEUE target (nft_compat with
/// xt_NFQUEUE), for kernels without nft_queue. iptables places it in the
/// `mangle` tables' OUTPUT chains, which also run before NAT. The
/// namespace, and with it these tables, disappears with the command.
pub fn apply_xt_gate() -> Result<(), String> {
    for tool in ["iptables", "ip6tables"] {
        let mark = format!("{RELAY_MARK:#x}");
        let queue = QUEUE.to_string();
        let args = [
            "-w",
            "-t",
            "mangle",
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "--syn",
            "-m",
            "mark",
            "!",
            "--mark",
            &mark,
            "-j",
            "NFQUEUE",
            "--queue-num",
            &queue,
            "--queue-bypass",
        ];
        let out = Command::new(tool).args(args).output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "this kernel has no native nftables queue (nft_queue), and the `{tool}` command, which can \
                 use xt_NFQUEUE instead, was not found: install iptables (apt-get install iptables)"
            ),
            _ => format!("cannot run {tool}: {e}"),
        })?;
        // IPv6 may be off in the namespace; IPv4 is required.
        if !out.status.success() && tool == "iptables" {
            return Err(format!(
                "cannot install the SYN gate with iptables (NFQUEUE): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// The `nft` command that partitions one client endpoint's flow.
pub fn blackout_command(
    client: std::net::SocketAddr,
    duration: Option<std::time::Duration>,
) -> String {
    let set = if client.is_ipv4() {
        "blackout4"
    } else {
        "blackout6"
    };
    let timeout = duration.map_or(String::new(), |d| {
        format!(" timeout {}ms", d.as_millis().max(1))
    });
    format!(
        "add element inet {TABLE} {set} {{ {} . {}{timeout} }}",
        client.ip(),
        client.port()
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
    fn run_ruleset_redirects_gates_and_drops() {
        let text = run_ruleset(
            &Redirects {
                tcp_port: 4000,
                dns_port: 5000,
            },
            &[LossRule {
                index: 1,
                ppm: 100_000,
                direction: Some("original"),
            }],
            true,
        );
        assert!(text.starts_with("table inet netchaos {"));
        assert!(text.contains("type nat hook output priority -100"));
        assert!(text.contains("udp dport 53 redirect to :5000"));
        assert!(text.contains("meta l4proto tcp redirect to :4000"));
        assert!(text.contains("tcp flags & (syn | ack) == syn queue num 0 bypass"));
        assert!(text.contains("meta mark 0x6e640200 reject with tcp reset"));
        assert!(text.contains(
            "ct mark 0x6e640101 ct direction original numgen random mod 1000000 < 100000 drop"
        ));
        // The relay's own sockets skip the gate and the redirect.
        let gate = text.find("chain syn_gate").unwrap();
        assert!(
            text[gate..].find("meta mark 0x6e63 return").unwrap()
                < text[gate..].find("queue").unwrap()
        );
    }

    #[test]
    fn without_a_native_queue_the_gate_chain_is_left_out() {
        let r = Redirects {
            tcp_port: 1,
            dns_port: 2,
        };
        let text = run_ruleset(&r, &[], false);
        assert!(!text.contains("syn_gate") && !text.contains("queue"));
        assert!(text.contains("chain intercept"));
        assert!(lacks_native_queue(
            "Error: Could not process rule: No such file or directory\n tcp flags & (syn | ack) == syn queue num 0 bypass"
        ));
        assert!(!lacks_native_queue("Error: syntax error"));
    }

    #[test]
    fn blackout_elements() {
        let c = blackout_command(
            "127.0.0.1:4242".parse().unwrap(),
            Some(std::time::Duration::from_secs(2)),
        );
        assert_eq!(
            c,
            "add element inet netchaos blackout4 { 127.0.0.1 . 4242 timeout 2000ms }"
        );
        let c = blackout_command("[::1]:80".parse().unwrap(), None);
        assert_eq!(c, "add element inet netchaos blackout6 { ::1 . 80 }");
    }
}
