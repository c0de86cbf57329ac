//! The nftables ruleset netchaos installs: one table, `inet netchaos`, built
//! here as text and applied atomically with `nft -f -`, so that it is either
//! all in place or not at all. Removing the table removes everything.
//!
//! (The ruleset is a handful of lines; text keeps it readable in logs and
//! tests, and `nft -f` applies it in one transaction, as the JSON API would.)

use super::error::{InterceptError, Result};
use crate::tool::ToolError;

/// The table netchaos owns, in family `inet` (IPv4 and IPv6).
pub(crate) const TABLE: &str = "netchaos";

/// A random `SO_MARK` for the DNS forwarder's own queries from inside an
/// existing namespace (`attach`, `--in-place`), which the redirect lets
/// through. Random per run, so that the namespace's processes (which may
/// set marks: CAP_NET_RAW is in Docker's default set) cannot know it; it
/// avoids zero and netchaos's verdict marks.
pub(crate) fn random_udp_mark() -> u32 {
    loop {
        let m: u32 = rand::random();
        if m != 0 && m & 0xffff_0000 != marks::BASE {
            return m;
        }
    }
}

/// Where intercepted traffic goes, inside the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Redirects {
    /// The relay's TCP listeners (127.0.0.1 and ::1, same port).
    pub tcp_port: u16,
    /// The DNS forwarder's UDP sockets (127.0.0.1 and ::1, same port).
    pub dns_port: u16,
}

/// Packet marks the SYN gate puts on a SYN with its verdict; the output
/// chain copies them to the connection (conntrack mark), so that every
/// later packet of the flow carries them.
pub(crate) mod marks {
    /// All of netchaos's verdict marks have these high bits.
    pub(crate) const BASE: u32 = 0x6e64_0000;
    /// Accepted; the low byte is the connection's loss rule (0: none).
    pub(crate) const TRACK: u32 = 0x6e64_0100;
    /// Answer with RST (ECONNREFUSED).
    pub(crate) const REFUSE: u32 = 0x6e64_0200;
    /// Answer with ICMP host unreachable (EHOSTUNREACH).
    pub(crate) const UNREACHABLE: u32 = 0x6e64_0300;
    /// Answer with ICMP network unreachable (ENETUNREACH).
    pub(crate) const NET_UNREACHABLE: u32 = 0x6e64_0400;
    /// Answer with ICMP administratively prohibited.
    pub(crate) const PROHIBITED: u32 = 0x6e64_0500;
    /// The relay's own dial (recognised by the gate from its 4-tuple, never
    /// from a socket mark, which the namespace's processes can forge): not
    /// redirected.
    pub(crate) const RELAY: u32 = 0x6e64_0600;
    /// Added to an accepted SYN's mark ([`TRACK`]): the flow's packets go
    /// through the packet delay line (`packet_latency`, `packet_rate`,
    /// bursty `loss`).
    pub(crate) const DELAYED: u32 = 0x0000_8000;
}

/// One `loss` fault as a rule: connections whose mark carries `index`
/// lose `ppm` parts per million of their packets in `direction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LossRule {
    pub index: u8,
    pub ppm: u32,
    /// conntrack direction: `Some("original")` = client→server,
    /// `Some("reply")` = server→client, `None` = both.
    pub direction: Option<&'static str>,
}

/// The SYN gate's queue number (queues are per network namespace; an
/// uncommon one, so that an existing namespace's own NFQUEUE users keep
/// theirs). 0x4e43 is "NC".
pub(crate) const QUEUE: u16 = 0x4e43;
/// The packet delay line's queue: the next number.
pub(crate) const DELAY_QUEUE: u16 = QUEUE + 1;

/// The ruleset netchaos installs in a namespace:
///
/// * `syn_gate` (output, before NAT, so the original destination is still
///   in the packet): every new outbound SYN is queued to netchaos, which
///   decides its fate (connect faults, the upstream's own answer);
/// * `intercept` (NAT output): outbound TCP to the relay, UDP DNS to the
///   forwarder; the relay's own marked sockets pass;
/// * `inbound` (NAT prerouting, `attach --inbound` only): connections
///   arriving for the given local ports go to the relay's inbound listener;
/// * `loop_source` (NAT postrouting, `run` only): the relay's dials for a
///   loopback client leave with the client's address and port
///   ([`LoopSource`]);
/// * `verdicts` (filter output): a refused SYN gets an RST or an ICMP
///   error, the gate's mark is copied to the connection, and blackouts drop
///   what the namespace sends to a partitioned client (never the relay's
///   own flows, whose endpoint may be that client's: `loop_source`);
/// * `delay_line` (filter prerouting, `run` only): the packets of flows
///   marked [`marks::DELAYED`] are queued to the packet delay line — on
///   the way in, after `lo` has orphaned them, so the sender's TCP does not
///   count them as its own queued bytes (TCP small queues would otherwise
///   hold it to a couple of packets in flight);
/// * `packet_faults` (filter input): blackouts (sets of client endpoints
///   with timeouts, filled at run time; the relay's own flows pass) and
///   per-connection loss.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ruleset {
    pub redirects: Redirects,
    pub losses: Vec<LossRule>,
    /// Queue SYNs with nftables' own `queue` (nft_queue); without it the
    /// gate is an iptables chain ([`install`] decides).
    pub native_gate: bool,
    /// Queue delayed flows' packets to [`DELAY_QUEUE`] (natively, or
    /// through the iptables chain [`XT_DELAY_CHAIN`]).
    pub delay_line: bool,
    /// Local ports whose arriving connections go to `inbound_port`.
    pub inbound: Vec<u16>,
    pub inbound_port: u16,
    /// Loopback ports never intercepted (netchaos's own control API when it
    /// shares the namespace).
    pub exempt: Vec<u16>,
    /// Who installed the table (its comment; see [`Owner`]).
    pub owner: Option<Owner>,
    /// The DNS forwarder's socket mark ([`random_udp_mark`]).
    pub udp_mark: u32,
    /// The namespace is netchaos's own, new (`run`): no table of anyone
    /// else's can be in it, so none is looked for.
    pub fresh_namespace: bool,
    /// `dns_answer random = true` is in the plan: the ranges its answers
    /// come from are dropped on the way out, so that a client sent there
    /// reaches nobody, on any network (some route them).
    pub blackhole: Option<Blackhole>,
    /// `run`'s own addresses: the relay's dials for a loopback client bind
    /// them with the client's port, and leave with the client's loopback
    /// address as their source (the server sees the port the client bound;
    /// `Sandbox::connect_inside`).
    pub loop_source: Option<LoopSource>,
}

/// The stand-in source addresses of the relay's dials for loopback
/// clients, written back to 127.0.0.1 and ::1 on the way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoopSource {
    pub v4: std::net::Ipv4Addr,
    pub v6: std::net::Ipv6Addr,
}

impl LoopSource {
    /// Only the relay's own dials (the gate's verdict mark, given from the
    /// 4-tuple, never a socket mark) are rewritten; the source port stays
    /// (NAT keeps it while the 4-tuple is free).
    fn render(&self) -> String {
        use marks::RELAY;
        format!(
            "\tchain loop_source {{
\t\ttype nat hook postrouting priority 100; policy accept;
\t\tmeta mark {RELAY:#010x} meta l4proto tcp ip saddr {} ip daddr 127.0.0.0/8 snat ip to 127.0.0.1
\t\tmeta mark {RELAY:#010x} meta l4proto tcp ip6 saddr {} ip6 daddr ::1 snat ip6 to ::1
\t}}
",
            self.v4, self.v6
        )
    }
}

/// The documentation ranges `dns_answer random` draws from, dropped in the
/// namespace before interception sees them (no dial, no packet out),
/// except the namespace's own addresses in them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Blackhole {
    pub keep: Vec<std::net::IpAddr>,
}

impl Blackhole {
    fn render(&self) -> String {
        let (v4, v6): (Vec<&str>, Vec<&str>) = crate::fault::dns_answer::UNROUTED
            .iter()
            .partition(|r| !r.contains(':'));
        let keep = |six: bool| {
            let own: Vec<String> = self
                .keep
                .iter()
                .filter(|a| a.is_ipv6() == six)
                .map(|a| a.to_string())
                .collect();
            let fam = if six { "ip6" } else { "ip" };
            match own.len() {
                0 => String::new(),
                _ => format!("{fam} daddr != {{ {} }} ", own.join(", ")),
            }
        };
        format!(
            "\tchain blackhole {{
\t\ttype filter hook output priority -200; policy accept;
\t\t{}ip daddr {{ {} }} drop
\t\t{}ip6 daddr {{ {} }} drop
\t}}
",
            keep(false),
            v4.join(", "),
            keep(true),
            v6.join(", ")
        )
    }
}

impl Ruleset {
    pub(crate) fn render(&self) -> String {
        use marks::*;
        let exempt = if self.exempt.is_empty() {
            String::new()
        } else {
            let ports = set_of(&self.exempt);
            format!(
                "\t\tip daddr 127.0.0.0/8 tcp dport {ports} return\n\t\tip6 daddr ::1 tcp dport {ports} return\n"
            )
        };
        let gate = if self.native_gate {
            format!(
                "\tchain syn_gate {{
\t\ttype filter hook output priority -150; policy accept;
{exempt}\t\ttcp flags & (syn | ack) == syn queue num {QUEUE} bypass
\t}}
"
            )
        } else {
            String::new()
        };
        let delay_line = if self.native_gate && self.delay_line {
            format!(
                "\tchain delay_line {{
\t\ttype filter hook prerouting priority -150; policy accept;
\t\tct mark & {DELAYED_MASK:#010x} == {delayed:#010x} queue num {DELAY_QUEUE} bypass
\t}}
",
                delayed = BASE | DELAYED
            )
        } else {
            String::new()
        };
        let inbound = if self.inbound.is_empty() {
            String::new()
        } else {
            format!(
                "\tchain inbound {{
\t\ttype nat hook prerouting priority -100; policy accept;
\t\ttcp dport {} redirect to :{}
\t}}
",
                set_of(&self.inbound),
                self.inbound_port
            )
        };
        let mut loss = String::new();
        for l in &self.losses {
            let dir = l
                .direction
                .map_or(String::new(), |d| format!("ct direction {d} "));
            loss.push_str(&format!(
                "\t\tct mark & {not_delayed:#010x} == {mark:#010x} {dir}numgen random mod 1000000 < {ppm} drop\n",
                not_delayed = !DELAYED,
                mark = TRACK | u32::from(l.index),
                ppm = l.ppm
            ));
        }
        let blackhole = self
            .blackhole
            .as_ref()
            .map_or(String::new(), Blackhole::render);
        let loop_source = self
            .loop_source
            .as_ref()
            .map_or(String::new(), LoopSource::render);
        let comment = self
            .owner
            .as_ref()
            .map_or(String::new(), |o| format!("\tcomment \"{o}\"\n"));
        format!(
            "table inet {TABLE} {{
{comment}\tset blackout4 {{ type ipv4_addr . inet_service; flags timeout; }}
\tset blackout6 {{ type ipv6_addr . inet_service; flags timeout; }}
{blackhole}{gate}\tchain intercept {{
\t\ttype nat hook output priority -100; policy accept;
\t\tmeta mark {RELAY:#010x} return
{exempt}\t\tmeta l4proto udp meta mark {udp_mark:#x} return
\t\tudp dport 53 redirect to :{dns}
\t\tmeta l4proto tcp redirect to :{tcp}
\t}}
{inbound}{loop_source}{delay_line}\tchain verdicts {{
\t\ttype filter hook output priority 0; policy accept;
\t\tmeta mark & 0xffff0000 == {BASE:#010x} ct mark set meta mark
\t\tmeta mark {REFUSE:#010x} reject with tcp reset
\t\tmeta mark {UNREACHABLE:#010x} reject with icmpx type host-unreachable
\t\tmeta mark {NET_UNREACHABLE:#010x} reject with icmpx type no-route
\t\tmeta mark {PROHIBITED:#010x} reject with icmpx type admin-prohibited
\t\tct mark {RELAY:#010x} return
\t\tip daddr . tcp dport @blackout4 drop
\t\tip6 daddr . tcp dport @blackout6 drop
\t}}
\tchain packet_faults {{
\t\ttype filter hook input priority 0; policy accept;
\t\tct mark {RELAY:#010x} return
\t\tip saddr . tcp sport @blackout4 drop
\t\tip daddr . tcp dport @blackout4 drop
\t\tip6 saddr . tcp sport @blackout6 drop
\t\tip6 daddr . tcp dport @blackout6 drop
{loss}\t}}
}}
",
            dns = self.redirects.dns_port,
            tcp = self.redirects.tcp_port,
            udp_mark = self.udp_mark,
        )
    }
}

impl Ruleset {
    /// The transaction that ends interception but keeps the flows already
    /// redirected to the relay translated, so they may finish through it:
    /// every rule and chain goes except the NAT chains, where one rule
    /// reading the connection state stays. The kernel tracks a namespace's
    /// connections (and so translates them) only while some rule needs
    /// conntrack there; without one, deleting the redirect would send the
    /// relay's answers out untranslated and the client would reset them.
    /// In a NAT chain the rule never matches (only a flow's first packet
    /// goes through one), so new connections and lookups go straight to
    /// their destinations. The table goes once the flows have drained.
    /// `native_gate` must say how the gate was installed.
    pub(crate) fn draining(&self) -> String {
        let mut gone = vec!["verdicts", "packet_faults"];
        if self.native_gate {
            gone.push("syn_gate");
        }
        if self.native_gate && self.delay_line {
            gone.push("delay_line");
        }
        if self.blackhole.is_some() {
            gone.push("blackhole");
        }
        let mut script = format!(
            "flush table inet {TABLE}\nadd rule inet {TABLE} intercept ct state established accept\n"
        );
        for chain in gone {
            script.push_str(&format!("delete chain inet {TABLE} {chain}\n"));
        }
        // (The blackout sets stay, unreferenced, until the table goes:
        // older kernels refuse to delete a set in the batch that flushed
        // the rules using it.)
        script
    }
}

/// The bits of a conntrack mark that say "netchaos's, delayed".
const DELAYED_MASK: u32 = 0xffff_0000 | marks::DELAYED;

/// `{ 80, 443 }` (or a bare port).
fn set_of(ports: &[u16]) -> String {
    match ports {
        [p] => p.to_string(),
        ps => format!(
            "{{ {} }}",
            ps.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// What [`install`] put in place, so that exactly that is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Installed {
    /// The gate is the iptables chain [`XT_CHAIN`], not part of the table.
    pub(crate) xt_gate: bool,
    /// iptables created the `ip`/`ip6` `mangle` tables for the gate (they
    /// did not exist before), so they go too once empty.
    pub(crate) made_mangle: [bool; 2],
    /// The table carries its owner in its comment (false where the
    /// kernel or nft is too old for table comments: a table found without
    /// one is then this process's own, as the claim and the gate's queue
    /// keep any other netchaos out).
    pub(crate) owner_recorded: bool,
}

/// Installs `rs` (the table, atomically) and the SYN gate: nftables' own
/// queue where the kernel has it, otherwise the iptables chain.
pub(crate) fn install(rs: &Ruleset) -> Result<Installed> {
    use super::kernel_facts::{self, NO_NFT_QUEUE};
    let known_absent = kernel_facts::known(NO_NFT_QUEUE);
    if !known_absent {
        return install_native(rs).or_else(|e| match lacks_native_queue(&e) {
            true => {
                kernel_facts::remember(NO_NFT_QUEUE);
                install_xt(rs)
            }
            false => Err(e),
        });
    }
    // Remembered from an earlier run of this boot; should the iptables
    // path fail (no iptables), the kernel may have gained the module since.
    install_xt(rs).or_else(|e| install_native(rs).map_err(|_| e))
}

/// The table with nftables' own queue for the gate.
fn install_native(rs: &Ruleset) -> Result<Installed> {
    let mut rs = rs.clone();
    rs.native_gate = true;
    let owner_recorded = apply_with_comment_fallback(&rs)?;
    Ok(Installed {
        xt_gate: false,
        made_mangle: [false; 2],
        owner_recorded,
    })
}

/// The table without the queue, and the gate as an iptables chain.
fn install_xt(rs: &Ruleset) -> Result<Installed> {
    let mut rs = rs.clone();
    rs.native_gate = false;
    let owner_recorded = apply_with_comment_fallback(&rs)?;
    // (Each look is an `nft` run: milliseconds of `run`'s start-up.)
    let made_mangle = match rs.fresh_namespace {
        true => [true; 2],
        false => XT_FAMILIES.map(|(_, family)| !table_exists(family, "mangle")),
    };
    let installed = Installed {
        xt_gate: true,
        made_mangle,
        owner_recorded,
    };
    if let Err(e) = apply_xt_gate(&rs.exempt, rs.delay_line) {
        let _ = delete_table();
        remove_xt_gate(&installed);
        return Err(e);
    }
    Ok(installed)
}

/// Table comments need Linux 5.10 and nft 0.9.7; older ones get the table
/// without its owner (which [`Owner::read`] then reports as unknown).
/// Whether the owner went in.
fn apply_with_comment_fallback(rs: &Ruleset) -> Result<bool> {
    match apply(&rs.render()) {
        Err(InterceptError::Tool(e)) if rs.owner.is_some() && e.mentions("comment") => {
            let bare = Ruleset {
                owner: None,
                ..rs.clone()
            };
            apply(&bare.render()).map(|()| false)
        }
        r => r.map(|()| rs.owner.is_some()),
    }
}

/// Whether `nft` refused the ruleset because this kernel has no native
/// `queue` expression (nft_queue); the gate then goes through xtables.
fn lacks_native_queue(err: &InterceptError) -> bool {
    matches!(err, InterceptError::Tool(e) if e.no_such_object() && e.mentions("queue num"))
}

/// The iptables chain (table `mangle`) holding the SYN gate on kernels
/// without nft_queue.
pub(crate) const XT_CHAIN: &str = "NETCHAOS";
/// The iptables chain (table `mangle`, from PREROUTING) queueing delayed
/// flows to the packet delay line on kernels without nft_queue.
pub(crate) const XT_DELAY_CHAIN: &str = "NETCHAOS_DELAY";
/// netchaos's iptables chains and the `mangle` hook chain each is jumped
/// to from.
const XT_JUMPS: [(&str, &str); 2] = [(XT_CHAIN, "OUTPUT"), (XT_DELAY_CHAIN, "PREROUTING")];

/// The SYN gate through iptables-nft's NFQUEUE target (nft_compat with
/// xt_NFQUEUE), for kernels without nft_queue: a chain of netchaos's own in
/// the `mangle` table, jumped to first from OUTPUT (which, like the native
/// gate, runs before NAT). Applied with `iptables-restore --noflush`, so the
/// chain and its jump go in together and nothing else in the table changes.
pub(crate) fn apply_xt_gate(exempt: &[u16], delay_line: bool) -> Result<()> {
    for ((tool, _), lo) in XT_FAMILIES.into_iter().zip(["127.0.0.0/8", "::1/128"]) {
        let mut text = format!("*mangle\n:{XT_CHAIN} - [0:0]\n");
        for p in exempt {
            text.push_str(&format!(
                "-A {XT_CHAIN} -d {lo} -p tcp --dport {p} -j RETURN\n"
            ));
        }
        text.push_str(&format!(
            "-A {XT_CHAIN} -p tcp --syn -j NFQUEUE --queue-num {QUEUE} --queue-bypass\n\
             -I OUTPUT 1 -j {XT_CHAIN}\n"
        ));
        if delay_line {
            use marks::{BASE, DELAYED};
            text.push_str(&format!(
                ":{XT_DELAY_CHAIN} - [0:0]\n\
                 -A {XT_DELAY_CHAIN} -m connmark --mark {mark:#010x}/{DELAYED_MASK:#010x} \
                 -j NFQUEUE --queue-num {DELAY_QUEUE} --queue-bypass\n\
                 -I PREROUTING 1 -j {XT_DELAY_CHAIN}\n",
                mark = BASE | DELAYED
            ));
        }
        text.push_str("COMMIT\n");
        let restore = format!("{tool}-restore");
        match crate::tool::run(&restore, &["--noflush"], Some(&text)) {
            Ok(_) => {}
            Err(e @ ToolError::Missing { .. }) => {
                return Err(InterceptError::Unavailable(format!(
                    "this kernel has no native nftables queue (nft_queue), and iptables could use \
                     xt_NFQUEUE instead, but {e}"
                )));
            }
            // IPv6 may be off in the namespace; IPv4 is required.
            Err(e) if tool == "iptables" => {
                return Err(InterceptError::Unavailable(format!(
                    "cannot install the SYN gate with iptables (NFQUEUE): {}",
                    e.stderr()
                )));
            }
            Err(e) => tracing::warn!(
                "IPv6 connections are not gated (nor delayed) here: ip6tables: {}",
                e.stderr().trim()
            ),
        }
    }
    Ok(())
}

/// `iptables -w -t mangle ARGS` succeeds.
fn mangle(tool: &str, args: &[&str]) -> bool {
    let mut all = vec!["-w", "-t", "mangle"];
    all.extend_from_slice(args);
    crate::tool::succeeds(tool, &all)
}

/// Whether the iptables gate chain exists (in the namespace the caller is
/// in).
pub(crate) fn has_xt_gate() -> bool {
    mangle("iptables", &["-S", XT_CHAIN])
}

/// The iptables commands and the nftables families their tables live in.
const XT_FAMILIES: [(&str, &str); 2] = [("iptables", "ip"), ("ip6tables", "ip6")];

fn table_exists(family: &str, name: &str) -> bool {
    crate::tool::succeeds("nft", &["list", "table", family, name])
}

/// Removes the iptables gate chain and the jumps to it, IPv4 and IPv6
/// (and the `mangle` tables, when `installed` says iptables made them and
/// nothing else uses them); absent pieces are not errors. Returns what
/// could not be removed.
pub(crate) fn remove_xt_gate(installed: &Installed) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, (tool, family)) in XT_FAMILIES.into_iter().enumerate() {
        let mut present = false;
        for (chain, hook) in XT_JUMPS {
            if !mangle(tool, &["-S", chain]) {
                continue;
            }
            present = true;
            // Every jump (a replaced netchaos may have left more than one).
            for _ in 0..16 {
                if !mangle(tool, &["-C", hook, "-j", chain]) {
                    break;
                }
                if !mangle(tool, &["-D", hook, "-j", chain]) {
                    errors.push(format!(
                        "{tool}: cannot remove the jump to {chain} from mangle {hook}"
                    ));
                    break;
                }
            }
            if !(mangle(tool, &["-F", chain]) && mangle(tool, &["-X", chain])) {
                errors.push(format!("{tool}: cannot delete the chain mangle {chain}"));
            }
        }
        if present && installed.made_mangle[i] && mangle_is_empty(tool) {
            let _ = apply(&format!("delete table {family} mangle"));
        }
    }
    errors
}

/// Whether a `mangle` table holds no rule and no chain of anyone's.
fn mangle_is_empty(tool: &str) -> bool {
    crate::tool::run(tool, &["-w", "-t", "mangle", "-S"], None)
        .is_ok_and(|out| out.lines().all(|l| l.starts_with("-P ")))
}

/// Who installed a table: written into its comment, so that a later
/// netchaos can tell a live owner from debris left by a killed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub pid: i32,
    /// The owner's start time (clock ticks after boot, /proc/PID/stat field
    /// 22): a recycled pid does not pass for the owner.
    pub start: u64,
    /// The owner's PID namespace; in another one its pid means nothing here.
    pub pidns: u64,
    /// The owner keeps a [`beacon`](super::beacon) lit in the namespace,
    /// which tells whether it lives from any PID namespace.
    pub beacon: bool,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "netchaos pid={} start={} pidns={}{}",
            self.pid,
            self.start,
            self.pidns,
            if self.beacon { " beacon=1" } else { "" }
        )
    }
}

/// Whether the owner of a table still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Alive,
    Dead,
    /// No owner recorded, or one in another PID namespace without a
    /// beacon (an older netchaos).
    Unknown,
}

impl Owner {
    /// This process.
    pub(crate) fn me() -> Owner {
        let pid = std::process::id() as i32;
        Owner {
            pid,
            start: start_time(pid).unwrap_or(0),
            pidns: pidns(),
            beacon: true,
        }
    }

    /// Parses a table comment written by [`Display`].
    pub(crate) fn parse(comment: &str) -> Option<Owner> {
        let rest = comment.strip_prefix("netchaos ")?;
        let mut pid = None;
        let mut start = None;
        let mut ns = None;
        let mut beacon = false;
        for kv in rest.split_whitespace() {
            match kv.split_once('=')? {
                ("pid", v) => pid = v.parse().ok(),
                ("start", v) => start = v.parse().ok(),
                ("pidns", v) => ns = v.parse().ok(),
                ("beacon", v) => beacon = v == "1",
                _ => {}
            }
        }
        Some(Owner {
            pid: pid?,
            start: start?,
            pidns: ns?,
            beacon,
        })
    }

    /// Called from inside the table's network namespace (the beacon is
    /// looked for there).
    pub(crate) fn liveness(&self) -> Liveness {
        if self.pidns != pidns() {
            return match self.beacon.then(|| super::beacon::lit(self)).flatten() {
                Some(true) => Liveness::Alive,
                Some(false) => Liveness::Dead,
                None => Liveness::Unknown,
            };
        }
        match start_time(self.pid) {
            Some(t) if t == self.start => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

fn pidns() -> u64 {
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or(0)
}

/// Field 22 of /proc/PID/stat (after the parenthesised command name, which
/// may itself hold spaces and parentheses); `None` for a process that is
/// gone or a zombie (killed, not yet reaped: it serves nothing).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// The table as found in the namespace the caller is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Absent,
    /// Present; its owner as recorded (None: no readable owner).
    Present(Option<Owner>),
}

/// Looks for netchaos's table (in the caller's namespace).
pub(crate) fn find_table() -> Result<Found> {
    match crate::tool::run("nft", &["list", "table", "inet", TABLE], None) {
        Ok(text) => Ok(Found::Present(table_comment(&text).and_then(Owner::parse))),
        Err(e) if e.no_such_object() => Ok(Found::Absent),
        Err(e) => Err(e.into()),
    }
}

/// The table's own comment in `nft list table` output (the first
/// `comment "..."` before any set or chain).
fn table_comment(listing: &str) -> Option<&str> {
    let head = listing
        .split("\n\tset ")
        .next()?
        .split("\n\tchain ")
        .next()?;
    let at = head.find("comment \"")? + "comment \"".len();
    let end = head[at..].find('"')?;
    Some(&head[at..at + end])
}

/// The `nft` command that partitions one client endpoint's flow.
pub(crate) fn blackout_command(
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
pub(crate) fn apply(ruleset: &str) -> Result<()> {
    crate::tool::run("nft", &["-f", "-"], Some(ruleset))?;
    Ok(())
}

/// Deletes netchaos's table; `Ok(false)` when there was none.
pub(crate) fn delete_table() -> Result<bool> {
    match apply(&format!("delete table inet {TABLE}")) {
        Ok(()) => Ok(true),
        Err(InterceptError::Tool(e)) if e.no_such_object() => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> Ruleset {
        Ruleset {
            redirects: Redirects {
                tcp_port: 4000,
                dns_port: 5000,
            },
            losses: vec![LossRule {
                index: 1,
                ppm: 100_000,
                direction: Some("original"),
            }],
            native_gate: true,
            udp_mark: 0x1234,
            ..Ruleset::default()
        }
    }

    #[test]
    fn ruleset_redirects_gates_and_drops() {
        let text = rs().render();
        assert!(text.starts_with("table inet netchaos {"));
        assert!(text.contains("type nat hook output priority -100"));
        assert!(text.contains("udp dport 53 redirect to :5000"));
        assert!(text.contains("meta l4proto tcp redirect to :4000"));
        assert!(text.contains("tcp flags & (syn | ack) == syn queue num 20035 bypass"));
        assert!(text.contains("meta mark 0x6e640200 reject with tcp reset"));
        assert!(text.contains(
            "ct mark & 0xffff7fff == 0x6e640101 ct direction original numgen random mod 1000000 < 100000 drop"
        ));
        // Every SYN is queued, whatever its mark; only the gate's own verdict
        // for the relay's dials skips the redirect.
        let gate = &text[text.find("chain syn_gate").unwrap()..];
        let gate = &gate[..gate.find('}').unwrap()];
        assert!(!gate.contains("mark"), "{gate}");
        let intercept = &text[text.find("chain intercept").unwrap()..];
        assert!(
            intercept.find("meta mark 0x6e640600 return").unwrap()
                < intercept.find("meta l4proto tcp redirect").unwrap()
        );
        assert!(intercept.contains("meta l4proto udp meta mark 0x1234 return"));
        assert!(!text.contains("prerouting") && !text.contains("comment"));
    }

    /// The relay's own flows carry the partitioned client's endpoint on the
    /// wire when `loop_source` gave them its port: a blackout must not drop
    /// them (measured: the server behind them retransmitted 4 segments
    /// through a 1 s blackout instead of 2).
    #[test]
    fn blackouts_never_drop_the_relays_own_flows() {
        let text = rs().render();
        for chain in ["chain verdicts", "chain packet_faults"] {
            let c = &text[text.find(chain).unwrap()..];
            let c = &c[..c.find('}').unwrap()];
            let pass = c.find("ct mark 0x6e640600 return").expect(chain);
            assert!(pass < c.find("@blackout4 drop").unwrap(), "{c}");
        }
    }

    #[test]
    fn loop_source_rewrites_only_the_relays_own_dials() {
        assert!(!rs().render().contains("loop_source"));
        let text = Ruleset {
            loop_source: Some(LoopSource {
                v4: "192.0.2.1".parse().unwrap(),
                v6: "2001:db8::1".parse().unwrap(),
            }),
            ..rs()
        }
        .render();
        assert!(text.contains("type nat hook postrouting priority 100"));
        assert!(text.contains(
            "meta mark 0x6e640600 meta l4proto tcp ip saddr 192.0.2.1 ip daddr 127.0.0.0/8 snat ip to 127.0.0.1"
        ));
        assert!(
            text.contains(
                "meta mark 0x6e640600 meta l4proto tcp ip6 saddr 2001:db8::1 ip6 daddr ::1 snat ip6 to ::1"
            )
        );
    }

    #[test]
    fn inbound_ports_exemptions_and_owner() {
        let owner = Owner {
            pid: 42,
            start: 7,
            pidns: 9,
            beacon: true,
        };
        let text = Ruleset {
            inbound: vec![8080, 9090],
            inbound_port: 4001,
            exempt: vec![8474],
            owner: Some(owner.clone()),
            ..rs()
        }
        .render();
        assert!(text.contains("\tcomment \"netchaos pid=42 start=7 pidns=9 beacon=1\"\n"));
        assert!(text.contains("type nat hook prerouting priority -100"));
        assert!(text.contains("tcp dport { 8080, 9090 } redirect to :4001"));
        let intercept = &text[text.find("chain intercept").unwrap()..];
        assert!(
            intercept
                .find("ip daddr 127.0.0.0/8 tcp dport 8474 return")
                .unwrap()
                < intercept.find("redirect to :4000").unwrap()
        );
        assert!(text.contains("ip6 daddr ::1 tcp dport 8474 return"));
        assert_eq!(
            table_comment(&text),
            Some("netchaos pid=42 start=7 pidns=9 beacon=1")
        );
        assert_eq!(Owner::parse(&owner.to_string()), Some(owner));
        assert_eq!(Owner::parse("something else"), None);
        assert_eq!(Owner::parse("netchaos pid=x"), None);
    }

    #[test]
    fn draining_keeps_only_the_empty_nat_chains() {
        let mut r = rs();
        r.inbound = vec![8080];
        r.blackhole = Some(Blackhole::default());
        let full = r.render();
        let drain = r.draining();
        assert!(drain.starts_with(
            "flush table inet netchaos\nadd rule inet netchaos intercept ct state established accept\n"
        ));
        // Every chain of the full table but the NAT ones is deleted.
        for line in full.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("chain ") {
                let name = name.trim_end_matches(" {");
                let deleted = drain.contains(&format!("delete chain inet netchaos {name}\n"));
                assert_eq!(deleted, !["intercept", "inbound"].contains(&name), "{name}");
            }
        }
    }

    #[test]
    fn owners_are_told_apart_by_start_time() {
        let me = Owner::me();
        assert_eq!(me.liveness(), Liveness::Alive);
        let recycled = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(recycled.liveness(), Liveness::Dead);
        // In another PID namespace, an owner without a beacon cannot be
        // told; one with a beacon is alive while it is lit.
        let elsewhere = Owner {
            pidns: me.pidns + 1,
            beacon: false,
            ..me
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
        let beaconed = Owner {
            beacon: true,
            ..elsewhere
        };
        assert_eq!(beaconed.liveness(), Liveness::Dead);
        let lit = super::super::beacon::light(&beaconed).unwrap();
        assert_eq!(beaconed.liveness(), Liveness::Alive);
        drop(lit);
        assert_eq!(beaconed.liveness(), Liveness::Dead);
    }

    #[test]
    fn without_a_native_queue_the_gate_chain_is_left_out() {
        let text = Ruleset {
            native_gate: false,
            ..rs()
        }
        .render();
        assert!(!text.contains("syn_gate") && !text.contains("queue"));
        assert!(text.contains("chain intercept"));
        let refused = |stderr: &str| {
            InterceptError::Tool(ToolError::Failed {
                command: "nft -f -".into(),
                stderr: stderr.into(),
            })
        };
        assert!(lacks_native_queue(&refused(
            "Error: Could not process rule: No such file or directory\n tcp flags & (syn | ack) == syn queue num 0 bypass"
        )));
        assert!(!lacks_native_queue(&refused("Error: syntax error")));
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
