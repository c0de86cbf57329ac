//! Host-level shaping with tc: `netchaos netem apply|clear|show`.
//!
//! [`Netem`] holds the options; [`plan`] turns them into the exact `tc`
//! (and `ip`) commands — pure, so `--dry-run` prints them and golden tests
//! pin them — and [`apply`](mod@apply) runs them, checks what the device already has,
//! and rolls back on failure.
//!
//! netchaos owns handle `4e43:` ("NC") on the device (and `4e44:` under
//! it), and an ifb device for `--ingress`. It never replaces a root qdisc
//! it did not create, and `clear` removes exactly its own.
//!
//! * Everything, with netem options: `root netem`.
//! * Everything, `--rate` alone: `root tbf` (no netem needed).
//! * Only matching traffic (`--dst`, `--dport`, `--sport`): a `prio` root
//!   with a fourth band for the matches; the priomap sends everything else
//!   to the usual three bands, so it is not disturbed. `--rate` alone uses
//!   `htb` instead (unmatched traffic in a class at 100 Gbit/s).
//! * `--ingress`: incoming traffic is redirected (mirred) to an ifb device,
//!   which gets the same setup.

pub(crate) mod apply;

use std::fmt::Write as _;
use std::time::Duration;

use ipnet::IpNet;

use crate::settings::{Fields, ProfileError};
use crate::units;

/// netchaos's root handle on a device ("NC").
pub(crate) const HANDLE: &str = "4e43:";
/// The netem qdisc under the prio root's matching band.
pub(crate) const CHILD_HANDLE: &str = "4e44:";

/// Delay distributions netem knows.
pub(crate) const DISTRIBUTIONS: &[&str] = &["normal", "pareto", "paretonormal", "uniform"];

/// What to do to a device's traffic.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Netem {
    pub dev: String,
    pub delay: Option<Duration>,
    pub jitter: Option<Duration>,
    /// Percent.
    pub correlation: Option<f64>,
    pub distribution: Option<String>,
    /// Percent each.
    pub loss: Option<f64>,
    /// Mean packets lost in a row (netem's Gilbert model, `loss gemodel`).
    pub loss_burst: Option<f64>,
    pub duplicate: Option<f64>,
    pub corrupt: Option<f64>,
    pub reorder: Option<f64>,
    pub gap: Option<u32>,
    /// Bytes per second.
    pub rate: Option<u64>,
    /// Packets netem may hold.
    pub limit: Option<u32>,
    pub seed: Option<u64>,
    pub dst: Vec<IpNet>,
    pub dport: Option<u16>,
    pub sport: Option<u16>,
    pub ingress: bool,
    /// The device's MTU, read when the command runs (not a setting): a
    /// token bucket must hold a full-size packet, or tbf drops them all.
    pub mtu: Option<u32>,
}

impl Netem {
    /// Whether any option needs the netem qdisc (not just a rate).
    pub(crate) fn needs_netem(&self) -> bool {
        self.delay.is_some()
            || self.loss.is_some()
            || self.duplicate.is_some()
            || self.corrupt.is_some()
            || self.reorder.is_some()
            || self.limit.is_some()
    }

    pub(crate) fn filtered(&self) -> bool {
        !self.dst.is_empty() || self.dport.is_some() || self.sport.is_some()
    }

    /// Checks combinations tc would reject (or silently ignore).
    pub(crate) fn validate(&self) -> Result<(), BadValue> {
        if self.dev.is_empty() {
            return Err(BadValue(
                "--dev is required: the network device to shape, like eth0".into(),
            ));
        }
        if self.dev.len() > 15 || self.dev.contains(['/', ' ']) {
            return Err(BadValue(format!(
                "--dev {:?} is not a network device name",
                self.dev
            )));
        }
        if self.jitter.is_some() && self.delay.is_none() {
            return Err(BadValue("--jitter needs --delay".into()));
        }
        if (self.correlation.is_some() || self.distribution.is_some()) && self.jitter.is_none() {
            return Err(BadValue(
                "--correlation and --distribution need --jitter".into(),
            ));
        }
        if let Some(d) = &self.distribution {
            if !DISTRIBUTIONS.contains(&d.as_str()) {
                return Err(BadValue(format!(
                    "--distribution {d:?}: expected one of {}",
                    DISTRIBUTIONS.join(", ")
                )));
            }
        }
        if self.reorder.is_some() && self.delay.is_none() {
            return Err(BadValue(
                "--reorder needs --delay (netem reorders by sending some packets without it)"
                    .into(),
            ));
        }
        if let Some(b) = self.loss_burst {
            if self.loss.is_none() {
                return Err(BadValue("--loss-burst needs --loss".into()));
            }
            if !(1.0..=1000.0).contains(&b) {
                return Err(BadValue(format!(
                    "--loss-burst {b}: expected a number of packets from 1 to 1000"
                )));
            }
            // A good stretch lasts a packet at least: runs of b lose at
            // most b/(b+1) of the packets (100 % aside).
            let most = 100.0 * b / (b + 1.0);
            match self.loss {
                Some(l) if l < 100.0 && l > most => {
                    return Err(BadValue(format!(
                        "--loss {l} --loss-burst {b}: runs of {b} packets lose at most {}% (or 100%)",
                        (most * 100.0).floor() / 100.0
                    )));
                }
                _ => {}
            }
        }
        if self.gap.is_some() && self.reorder.is_none() {
            return Err(BadValue("--gap needs --reorder".into()));
        }
        if self.rate == Some(0) {
            return Err(BadValue("--rate must be more than 0".into()));
        }
        if self.limit == Some(0) {
            return Err(BadValue("--limit must be at least 1 packet".into()));
        }
        if self.seed.is_some() && !self.needs_netem() {
            return Err(BadValue(
                "--seed seeds netem's random choices: give --loss, --duplicate, --corrupt, --reorder or --jitter with it \
                 (--rate alone uses tbf, which draws nothing)"
                    .into(),
            ));
        }
        if !self.needs_netem() && self.rate.is_none() {
            return Err(BadValue("nothing to apply: give --delay, --loss, --duplicate, --corrupt, --reorder, --rate or --limit".into()));
        }
        for (name, v) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
            ("reorder", self.reorder),
            ("correlation", self.correlation),
        ] {
            if let Some(v) = v {
                if !(0.0..=100.0).contains(&v) {
                    return Err(BadValue(format!(
                        "--{name} {v}: expected a percentage between 0 and 100"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Reads a profile's `[netem]` table (same keys as the flags).
    pub(crate) fn from_fields(f: &mut Fields) -> Result<Netem, ProfileError> {
        let percent = |f: &mut Fields, k: &'static str| f.percent(k).map(|v| v.map(|x| x * 100.0));
        let mut n = Netem {
            dev: f.string("dev")?.unwrap_or_default(),
            delay: f.duration("delay")?,
            jitter: f.duration("jitter")?,
            correlation: percent(f, "correlation")?,
            distribution: f.choice("distribution", DISTRIBUTIONS)?.map(str::to_string),
            loss: percent(f, "loss")?,
            loss_burst: f.number_in("loss_burst", 1.0, 1000.0)?,
            duplicate: percent(f, "duplicate")?,
            corrupt: percent(f, "corrupt")?,
            reorder: percent(f, "reorder")?,
            gap: f
                .integer_in("gap", 1, u64::from(u32::MAX))?
                .map(|g| g as u32),
            rate: f.rate("rate")?,
            limit: f
                .integer_in("limit", 1, u64::from(u32::MAX))?
                .map(|l| l as u32),
            seed: f.integer_in("seed", 0, u64::MAX)?,
            ingress: f.boolean("ingress")?.unwrap_or(false),
            ..Netem::default()
        };
        for d in f.strings("dst")?.unwrap_or_default() {
            let text = crate::settings::node_text(&d);
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    f.error(
                        "dst",
                        &d.loc,
                        format!("expected a CIDR like \"10.0.0.0/8\", got {text:?}"),
                    )
                })?;
            n.dst.push(net);
        }
        n.dport = f.integer_in("dport", 1, 65535)?.map(|p| p as u16);
        n.sport = f.integer_in("sport", 1, 65535)?.map(|p| p as u16);
        Ok(n)
    }

    /// The device whose egress gets the qdiscs: `dev`, or its ifb.
    pub(crate) fn shaped_dev(&self) -> String {
        if self.ingress {
            ifb_name(&self.dev)
        } else {
            self.dev.clone()
        }
    }
}

/// The ifb device netchaos makes for `--ingress` on `dev`: `ncifb` and a
/// hash of the name (interface names are at most 15 characters, so the
/// name itself may not fit, and two long names must not share an ifb).
pub(crate) fn ifb_name(dev: &str) -> String {
    let h = dev.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{IFB_PREFIX}{:08x}", h as u32)
}

/// How every ifb device netchaos makes is named at the start.
pub(crate) const IFB_PREFIX: &str = "ncifb";

/// One command: the program and its arguments.
pub(crate) type Cmd = Vec<String>;

fn cmd(parts: &str) -> Cmd {
    parts.split_whitespace().map(str::to_string).collect()
}

/// netem's arguments: `delay 100ms 20ms 25% distribution normal loss 1% …`.
pub(crate) fn netem_args(n: &Netem) -> String {
    let mut a = String::new();
    if let Some(d) = n.delay {
        let _ = write!(a, " delay {}", tc_time(d));
        if let Some(j) = n.jitter {
            let _ = write!(a, " {}", tc_time(j));
            if let Some(c) = n.correlation {
                let _ = write!(a, " {}", pct(c));
            }
        }
        // Uniform is netem's own jitter when no table is given; tc has
        // no uniform.dist to load.
        if let Some(dist) = n.distribution.as_deref().filter(|d| *d != "uniform") {
            let _ = write!(a, " distribution {dist}");
        }
    }
    if let Some(l) = n.loss {
        let _ = write!(a, " loss {}", loss_model(l, n.loss_burst));
    }
    for (name, v) in [("duplicate", n.duplicate), ("corrupt", n.corrupt)] {
        if let Some(v) = v {
            let _ = write!(a, " {name} {}", pct(v));
        }
    }
    if let Some(r) = n.reorder {
        let _ = write!(a, " reorder {}", pct(r));
        if let Some(g) = n.gap {
            let _ = write!(a, " gap {g}");
        }
    }
    if let Some(r) = n.rate {
        let _ = write!(a, " rate {}", tc_rate(r));
    }
    if let Some(l) = n.limit {
        let _ = write!(a, " limit {l}");
    }
    if let Some(s) = n.seed {
        let _ = write!(a, " seed {s}");
    }
    a
}

/// netem's loss: `L%` each packet on its own, or for runs of `burst`
/// packets on average the Gilbert model (`gemodel p r`, every packet lost
/// in the bad state, none in the good): leaving the bad state with chance
/// `r = 1/burst`, entering it with `p = L·r / (1 − L)`, so that it is bad
/// `L` of the time.
fn loss_model(loss: f64, burst: Option<f64>) -> String {
    match burst.filter(|b| *b > 1.0 && loss < 100.0) {
        None => pct(loss),
        Some(b) => {
            let r = 100.0 / b;
            let p = loss * r / (100.0 - loss);
            // Small chances need more digits than other percentages: p
            // for 0.01 % in runs of 1,000 is 0.00001 %.
            format!("gemodel {} {}", fine_pct(p.min(100.0)), fine_pct(r))
        }
    }
}

/// A percentage to eight decimals, trailing zeros dropped.
fn fine_pct(p: f64) -> String {
    let s = format!("{p:.8}");
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

/// Microseconds, which tc reads exactly.
fn tc_time(d: Duration) -> String {
    format!("{}us", d.as_micros())
}

fn pct(p: f64) -> String {
    let s = format!("{p:.4}");
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

/// Bits per second, unambiguous (tc's `bps` means bytes).
fn tc_rate(bytes_per_sec: u64) -> String {
    format!("{}bit", bytes_per_sec.saturating_mul(8))
}

/// tbf's burst: 10 ms at the rate, at least a few full-size frames, and
/// always more than one packet of the device (tbf drops a packet that does
/// not fit its bucket: every segment on `lo`, whose MTU is 65536).
fn burst(rate: u64, mtu: Option<u32>) -> u64 {
    (rate / 100)
        .max(16 * 1024)
        .max(u64::from(mtu.unwrap_or(0)) + 1024)
}

/// The commands that apply `n`, in order.
pub(crate) fn plan(n: &Netem) -> Vec<Cmd> {
    let mut out = Vec::new();
    let dev = n.shaped_dev();
    if n.ingress {
        let ifb = ifb_name(&n.dev);
        out.push(cmd(&format!("ip link add {ifb} type ifb")));
        out.push(cmd(&format!("ip link set dev {ifb} up")));
        out.push(cmd(&format!(
            "tc qdisc add dev {} handle ffff: ingress",
            n.dev
        )));
        out.push(cmd(&format!(
            "tc filter add dev {} parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev {ifb}",
            n.dev
        )));
    }
    let args = netem_args(n);
    match (n.filtered(), n.needs_netem()) {
        (false, true) => out.push(cmd(&format!(
            "tc qdisc add dev {dev} root handle {HANDLE} netem{args}"
        ))),
        (false, false) => {
            let r = n.rate.expect("validated: a rate");
            out.push(cmd(&format!(
                "tc qdisc add dev {dev} root handle {HANDLE} tbf rate {} burst {} latency 50ms",
                tc_rate(r),
                burst(r, n.mtu)
            )));
        }
        (true, true) => {
            // Bands 1-3 keep the default priomap; band 4 is for matches.
            out.push(cmd(&format!(
                "tc qdisc add dev {dev} root handle {HANDLE} prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1"
            )));
            out.push(cmd(&format!(
                "tc qdisc add dev {dev} parent {HANDLE}4 handle {CHILD_HANDLE} netem{args}"
            )));
            out.extend(filters(n, &dev, &format!("{HANDLE}4")));
        }
        (true, false) => {
            let r = n.rate.expect("validated: a rate");
            out.push(cmd(&format!(
                "tc qdisc add dev {dev} root handle {HANDLE} htb default 1"
            )));
            out.push(cmd(&format!(
                "tc class add dev {dev} parent {HANDLE} classid {HANDLE}1 htb rate 100gbit"
            )));
            out.push(cmd(&format!(
                "tc class add dev {dev} parent {HANDLE} classid {HANDLE}2 htb rate {} ceil {} burst {}",
                tc_rate(r),
                tc_rate(r),
                burst(r, n.mtu)
            )));
            out.extend(filters(n, &dev, &format!("{HANDLE}2")));
        }
    }
    out
}

/// u32 filters sending matching packets (IPv4 and IPv6) to `flow`.
fn filters(n: &Netem, dev: &str, flow: &str) -> Vec<Cmd> {
    let ports = |family: &str| {
        let mut m = String::new();
        if let Some(p) = n.dport {
            let _ = write!(m, " match {family} dport {p} 0xffff");
        }
        if let Some(p) = n.sport {
            let _ = write!(m, " match {family} sport {p} 0xffff");
        }
        m
    };
    let mut out = Vec::new();
    let mut prio = 1;
    let mut add = |proto: &str, matches: String| {
        out.push(cmd(&format!("tc filter add dev {dev} parent {HANDLE} protocol {proto} prio {prio} u32{matches} flowid {flow}")));
        prio += 1;
    };
    let v4: Vec<_> = n.dst.iter().filter(|d| matches!(d, IpNet::V4(_))).collect();
    let v6: Vec<_> = n.dst.iter().filter(|d| matches!(d, IpNet::V6(_))).collect();
    if n.dst.is_empty() {
        add("ip", ports("ip"));
        add("ipv6", ports("ip6"));
    }
    for d in v4 {
        add("ip", format!(" match ip dst {d}{}", ports("ip")));
    }
    for d in v6 {
        add("ipv6", format!(" match ip6 dst {d}{}", ports("ip6")));
    }
    out
}

/// The commands that remove what [`plan`] added (used to roll back).
pub(crate) fn unplan(n: &Netem) -> Vec<Cmd> {
    let mut out = vec![cmd(&format!(
        "tc qdisc del dev {} root handle {HANDLE}",
        n.shaped_dev()
    ))];
    if n.ingress {
        out.push(cmd(&format!(
            "tc qdisc del dev {} handle ffff: ingress",
            n.dev
        )));
        out.push(cmd(&format!("ip link del {}", ifb_name(&n.dev))));
    }
    out
}

/// Formats a plan one command per line, as `--dry-run` prints it.
pub(crate) fn render(cmds: &[Cmd]) -> String {
    cmds.iter().map(|c| c.join(" ") + "\n").collect()
}

/// Parses `--dst`: a CIDR or a single address.
pub(crate) fn parse_dst(s: &str) -> Result<IpNet, BadValue> {
    s.parse::<IpNet>()
        .map(|n| n.trunc())
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| {
            BadValue(format!(
                "expected a CIDR like 10.0.0.0/8 or an address, got {s:?}"
            ))
        })
}

/// Parses the percent flags (`10`, `10%`, `0.5%`).
pub(crate) fn parse_percent_flag(s: &str) -> Result<f64, BadValue> {
    units::parse_percent(s)
        .map(|f| f * 100.0)
        .map_err(|e| BadValue(format!("expected {e}")))
}

/// A shaping setting that makes no sense, in words that say why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadValue(pub(crate) String);

#[cfg(test)]
mod tests {
    use super::*;

    fn netem(f: impl FnOnce(&mut Netem)) -> Netem {
        let mut n = Netem {
            dev: "eth0".into(),
            ..Netem::default()
        };
        f(&mut n);
        n.validate().unwrap();
        n
    }

    #[test]
    fn loss_in_runs_is_netems_gilbert_model_with_the_same_share() {
        assert_eq!(loss_model(5.0, None), "5%");
        assert_eq!(loss_model(5.0, Some(1.0)), "5%");
        // r = 1/4; p = 5 % · r / 95 %: bad p/(p+r) = 5 % of the time.
        assert_eq!(loss_model(5.0, Some(4.0)), "gemodel 1.31578947% 25%");
        assert_eq!(loss_model(100.0, Some(4.0)), "100%");
        assert_eq!(loss_model(0.01, Some(1000.0)), "gemodel 0.00001% 0.1%");
        assert_eq!(loss_model(0.05, Some(200.0)), "gemodel 0.00025013% 0.5%");
        let n = Netem {
            dev: "eth0".into(),
            loss: Some(20.0),
            loss_burst: Some(5.0),
            ..Netem::default()
        };
        assert_eq!(netem_args(&n), " loss gemodel 5% 20%");
    }

    #[test]
    fn golden_everything_with_netem() {
        let n = netem(|n| {
            n.delay = Some(Duration::from_millis(100));
            n.jitter = Some(Duration::from_millis(20));
            n.correlation = Some(25.0);
            n.distribution = Some("normal".into());
            n.loss = Some(1.5);
            n.duplicate = Some(0.1);
            n.corrupt = Some(0.01);
            n.reorder = Some(5.0);
            n.gap = Some(3);
            n.rate = Some(125_000);
            n.limit = Some(1000);
            n.seed = Some(7);
        });
        assert_eq!(
            render(&plan(&n)),
            "tc qdisc add dev eth0 root handle 4e43: netem delay 100000us 20000us 25% distribution normal loss 1.5% duplicate 0.1% corrupt 0.01% reorder 5% gap 3 rate 1000000bit limit 1000 seed 7\n"
        );
        assert_eq!(
            render(&unplan(&n)),
            "tc qdisc del dev eth0 root handle 4e43:\n"
        );
    }

    #[test]
    fn uniform_jitter_is_netems_default_not_a_table() {
        let n = netem(|n| {
            n.delay = Some(Duration::from_millis(50));
            n.jitter = Some(Duration::from_millis(10));
            n.distribution = Some("uniform".into());
        });
        assert_eq!(netem_args(&n), " delay 50000us 10000us");
    }

    #[test]
    fn the_bucket_holds_a_full_packet_of_the_device() {
        let n = netem(|n| {
            n.dev = "lo".into();
            n.rate = Some(1_000_000);
            n.mtu = Some(65536);
        });
        let plan = render(&plan(&n));
        assert!(plan.contains("burst 66560 "), "{plan}");
    }

    #[test]
    fn golden_rate_alone_uses_tbf() {
        let mut seeded = Netem {
            dev: "eth0".into(),
            rate: Some(1_000_000),
            seed: Some(7),
            ..Netem::default()
        };
        let e = seeded.validate().unwrap_err().to_string();
        assert!(e.contains("tbf, which draws nothing"), "{e}");
        seeded.loss = Some(1.0);
        seeded.validate().unwrap();
        let n = netem(|n| n.rate = Some(1_000_000));
        assert_eq!(
            render(&plan(&n)),
            "tc qdisc add dev eth0 root handle 4e43: tbf rate 8000000bit burst 16384 latency 50ms\n"
        );
    }

    #[test]
    fn golden_filtered_netem_uses_a_fourth_prio_band() {
        let n = netem(|n| {
            n.delay = Some(Duration::from_millis(50));
            n.dst = vec![
                "10.0.0.0/8".parse().unwrap(),
                "2001:db8::/32".parse().unwrap(),
            ];
            n.dport = Some(5432);
        });
        assert_eq!(
            render(&plan(&n)),
            "tc qdisc add dev eth0 root handle 4e43: prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1\n\
             tc qdisc add dev eth0 parent 4e43:4 handle 4e44: netem delay 50000us\n\
             tc filter add dev eth0 parent 4e43: protocol ip prio 1 u32 match ip dst 10.0.0.0/8 match ip dport 5432 0xffff flowid 4e43:4\n\
             tc filter add dev eth0 parent 4e43: protocol ipv6 prio 2 u32 match ip6 dst 2001:db8::/32 match ip6 dport 5432 0xffff flowid 4e43:4\n"
        );
    }

    #[test]
    fn golden_port_only_filters_both_families() {
        let n = netem(|n| {
            n.loss = Some(10.0);
            n.sport = Some(443);
        });
        let text = render(&plan(&n));
        assert!(
            text.contains("protocol ip prio 1 u32 match ip sport 443 0xffff flowid 4e43:4\n"),
            "{text}"
        );
        assert!(
            text.contains("protocol ipv6 prio 2 u32 match ip6 sport 443 0xffff flowid 4e43:4\n"),
            "{text}"
        );
    }

    #[test]
    fn golden_filtered_rate_uses_htb() {
        let n = netem(|n| {
            n.rate = Some(125_000);
            n.dst = vec!["192.0.2.7/32".parse().unwrap()];
        });
        assert_eq!(
            render(&plan(&n)),
            "tc qdisc add dev eth0 root handle 4e43: htb default 1\n\
             tc class add dev eth0 parent 4e43: classid 4e43:1 htb rate 100gbit\n\
             tc class add dev eth0 parent 4e43: classid 4e43:2 htb rate 1000000bit ceil 1000000bit burst 16384\n\
             tc filter add dev eth0 parent 4e43: protocol ip prio 1 u32 match ip dst 192.0.2.7/32 flowid 4e43:2\n"
        );
    }

    #[test]
    fn golden_ingress_goes_through_an_ifb() {
        let n = netem(|n| {
            n.delay = Some(Duration::from_millis(10));
            n.ingress = true;
        });
        assert_eq!(
            render(&plan(&n)),
            "ip link add ncifb7a25a404 type ifb\n\
             ip link set dev ncifb7a25a404 up\n\
             tc qdisc add dev eth0 handle ffff: ingress\n\
             tc filter add dev eth0 parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress redirect dev ncifb7a25a404\n\
             tc qdisc add dev ncifb7a25a404 root handle 4e43: netem delay 10000us\n"
        );
        assert_eq!(
            render(&unplan(&n)),
            "tc qdisc del dev ncifb7a25a404 root handle 4e43:\ntc qdisc del dev eth0 handle ffff: ingress\nip link del ncifb7a25a404\n"
        );
        assert_ne!(ifb_name("veth1234567890a"), ifb_name("veth1234567890b"));
    }

    #[test]
    fn impossible_combinations_are_refused() {
        let bad = |f: &dyn Fn(&mut Netem)| {
            let mut n = Netem {
                dev: "eth0".into(),
                ..Netem::default()
            };
            f(&mut n);
            n.validate().unwrap_err().0
        };
        assert!(bad(&|_| {}).contains("nothing to apply"));
        assert!(
            bad(&|n| n.jitter = Some(Duration::from_millis(1))).contains("--jitter needs --delay")
        );
        assert!(
            bad(&|n| {
                n.loss = Some(1.0);
                n.reorder = Some(1.0)
            })
            .contains("--reorder needs --delay")
        );
        assert!(bad(&|n| n.loss = Some(150.0)).contains("between 0 and 100"));
        assert!(bad(&|n| n.loss_burst = Some(4.0)).contains("--loss-burst needs --loss"));
        assert!(
            bad(&|n| {
                n.loss = Some(5.0);
                n.loss_burst = Some(0.5);
            })
            .contains("from 1 to 1000")
        );
        assert!(
            bad(&|n| {
                n.loss = Some(80.0);
                n.loss_burst = Some(2.0);
            })
            .contains("lose at most 66.66%")
        );
        assert!(
            bad(&|n| {
                n.dev = "bad/name".into();
                n.loss = Some(1.0)
            })
            .contains("not a network device")
        );
        assert!(bad(&|n| n.rate = Some(0)).contains("more than 0"));
    }
}
