//! Human units: durations (`150ms`), rates (`1mbit`, `500KB/s`), sizes
//! (`16KiB`), percentages (`10%`) and activity windows (`10s..40s`).
//!
//! Every parser returns the canonical value or a short `expected` phrase that
//! the profile layer turns into a located, specific error. Decimal prefixes
//! are powers of 1000 (as in `tc`), binary ones (`Ki`, `Mi`, `Gi`) of 1024.

use std::fmt;
use std::time::Duration;

/// What a duration looks like, for error messages.
pub(crate) const DURATION_FORM: &str = "a duration like \"150ms\", \"2s\" or \"1m\"";
/// What a rate looks like, for error messages.
pub(crate) const RATE_FORM: &str = "a rate like \"1mbit\" or \"500KB/s\"";
/// What a size looks like, for error messages.
pub(crate) const SIZE_FORM: &str = "a size like 4096, \"16KiB\" or \"1MB\"";
/// What a window looks like, for error messages.
pub(crate) const WINDOW_FORM: &str = "a window like \"10s..40s\", \"..30s\" or \"5s..\"";

/// Splits `"150ms"` into `(150.0, "ms")`; the number may be fractional.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map_or(s.len(), |(i, _)| i);
    if end == 0 {
        return None;
    }
    let n: f64 = s[..end].parse().ok()?;
    n.is_finite().then_some((n, s[end..].trim()))
}

/// Parses a duration such as `150ms`, `2s`, `1.5m`, `1h`, `250us`.
/// A bare `0` is accepted; other bare numbers are rejected because their unit
/// would be a guess.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, &'static str> {
    let (n, unit) = split_number(s).ok_or(DURATION_FORM)?;
    let secs = match unit {
        "" if n == 0.0 => 0.0,
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" | "sec" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(DURATION_FORM),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| DURATION_FORM)
}

/// Parses a rate into bytes per second. Bit rates (`kbit`, `mbit`, `gbit`)
/// and byte rates (`B/s`, `KB/s`, `MiB/s`, …). `0` alone means zero.
/// `mbps`/`kbps` are rejected: people disagree on whether they mean bits or
/// bytes (tc reads them as bytes), so we make the user say which.
pub(crate) fn parse_rate(s: &str) -> Result<u64, &'static str> {
    let (n, unit) = split_number(s).ok_or(RATE_FORM)?;
    let bytes_per_sec = match unit {
        "" if n == 0.0 => 0.0,
        "bit" | "bit/s" => n / 8.0,
        "kbit" | "kbit/s" => n * 1e3 / 8.0,
        "mbit" | "mbit/s" => n * 1e6 / 8.0,
        "gbit" | "gbit/s" => n * 1e9 / 8.0,
        "B/s" => n,
        "KB/s" | "kB/s" => n * 1e3,
        "MB/s" => n * 1e6,
        "GB/s" => n * 1e9,
        "KiB/s" => n * 1024.0,
        "MiB/s" => n * 1024.0 * 1024.0,
        "GiB/s" => n * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(RATE_FORM),
    };
    to_u64(bytes_per_sec).ok_or(RATE_FORM)
}

/// Parses a size in bytes: a bare integer, or `16KiB`, `1MB`, `512B`.
pub(crate) fn parse_size(s: &str) -> Result<u64, &'static str> {
    let (n, unit) = split_number(s).ok_or(SIZE_FORM)?;
    let bytes = match unit {
        "" | "B" => n,
        "KB" | "kB" | "K" | "k" => n * 1e3,
        "MB" | "M" => n * 1e6,
        "GB" | "G" => n * 1e9,
        "KiB" => n * 1024.0,
        "MiB" => n * 1024.0 * 1024.0,
        "GiB" => n * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(SIZE_FORM),
    };
    if bytes.fract() != 0.0 {
        return Err(SIZE_FORM);
    }
    to_u64(bytes).ok_or(SIZE_FORM)
}

fn to_u64(x: f64) -> Option<u64> {
    (x >= 0.0 && x < u64::MAX as f64).then_some(x.round() as u64)
}

/// Parses a percentage `"10%"` or `"10"` into a fraction in `0.0..=1.0`.
pub(crate) fn parse_percent(s: &str) -> Result<f64, &'static str> {
    const FORM: &str = "a percentage between 0 and 100, like 10 or \"2.5%\"";
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let n: f64 = t.parse().map_err(|_| FORM)?;
    if (0.0..=100.0).contains(&n) {
        Ok(n / 100.0)
    } else {
        Err(FORM)
    }
}

/// Formats a byte rate the way people write them (`1mbit`, `500kbit`),
/// in a form [`parse_rate`] reads back to the same rate: bytes per second
/// (`123457B/s`) where bits would need rounding.
pub(crate) fn format_rate(bytes_per_sec: u64) -> String {
    // In bits a rate can pass u64 (parse_rate reads up to u64::MAX bytes/s).
    let bits = u128::from(bytes_per_sec) * 8;
    for (scale, unit) in [
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bits >= scale {
            let v = format!("{:.3}", bits as f64 / scale as f64);
            let v = v.trim_end_matches('0').trim_end_matches('.');
            let text = format!("{v}{unit}");
            return match parse_rate(&text) {
                Ok(r) if r == bytes_per_sec => text,
                _ => format!("{bytes_per_sec}B/s"),
            };
        }
    }
    format!("{bits}bit")
}

/// Formats a byte count in the units `parse_size` reads: `1MiB`, `64KiB`,
/// `1500`.
pub(crate) fn format_size(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n % size == 0 {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

/// Formats a duration compactly: `150ms`, `2s`, `1.500ms`, `300us`,
/// `2ns` — in a form [`parse_duration`] reads back to the same duration
/// (nanoseconds where a shorter form would not).
pub(crate) fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let text = if ns == 0 {
        "0s".into()
    } else if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns < 1000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 && ns % 1000 == 0 {
        format!("{}us", ns / 1000)
    } else if ns % 1000 == 0 {
        format!("{}.{:03}ms", ns / 1_000_000, ns % 1_000_000 / 1000)
    } else {
        let (scale, unit) = if ns < 1_000_000 {
            (1000, "us")
        } else {
            (1_000_000, "ms")
        };
        let frac = format!("{:0width$}", ns % scale, width = scale.ilog10() as usize);
        format!("{}.{}{unit}", ns / scale, frac.trim_end_matches('0'))
    };
    match parse_duration(&text) {
        Ok(back) if back == d => text,
        _ => format!("{ns}ns"),
    }
}

/// When a fault may act, relative to the moment netchaos started.
/// `end` is exclusive; `None` bounds are open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub start: Option<Duration>,
    pub end: Option<Duration>,
}

impl Window {
    /// Always active.
    pub const ALWAYS: Window = Window {
        start: None,
        end: None,
    };

    /// Parses `A..B`, `..B`, `A..`; both sides are durations.
    pub fn parse(s: &str) -> Result<Window, &'static str> {
        let (a, b) = s.trim().split_once("..").ok_or(WINDOW_FORM)?;
        let side = |x: &str| -> Result<Option<Duration>, &'static str> {
            let x = x.trim();
            if x.is_empty() {
                Ok(None)
            } else {
                parse_duration(x).map(Some).map_err(|_| WINDOW_FORM)
            }
        };
        let w = Window {
            start: side(a)?,
            end: side(b)?,
        };
        match (w.start, w.end) {
            (Some(s), Some(e)) if e <= s => Err("a window whose end comes after its start"),
            _ => Ok(w),
        }
    }

    /// Whether the window contains `t` (time since start).
    pub fn contains(&self, t: Duration) -> bool {
        self.start.is_none_or(|s| t >= s) && self.end.is_none_or(|e| t < e)
    }

    /// Whether the window is over for good at `t`.
    pub fn is_over(&self, t: Duration) -> bool {
        self.end.is_some_and(|e| t >= e)
    }

    /// The window cut short so that it ends no later than `limit`
    /// (`--duration`: fault injection stops after D).
    pub fn clamp_end(self, limit: Duration) -> Window {
        Window {
            start: self.start,
            end: Some(self.end.map_or(limit, |e| e.min(limit))),
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Window::ALWAYS {
            return f.write_str("always");
        }
        if let Some(s) = self.start {
            f.write_str(&format_duration(s))?;
        }
        f.write_str("..")?;
        if let Some(e) = self.end {
            f.write_str(&format_duration(e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("150ms"), Ok(Duration::from_millis(150)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_err(), "bare numbers need a unit");
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1 fortnight").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1mbit"), Ok(125_000));
        assert_eq!(parse_rate("500kbit"), Ok(62_500));
        assert_eq!(parse_rate("2MB/s"), Ok(2_000_000));
        assert_eq!(parse_rate("500KB/s"), Ok(500_000));
        assert_eq!(parse_rate("1MiB/s"), Ok(1_048_576));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("10mbps").is_err(), "ambiguous unit");
        assert!(parse_rate("100").is_err(), "bare numbers need a unit");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("big").is_err());
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("10%"), Ok(0.1));
        assert_eq!(parse_percent("50"), Ok(0.5));
        assert!(parse_percent("101").is_err());
        assert!(parse_percent("-1").is_err());
    }

    #[test]
    fn windows() {
        let w = Window::parse("10s..40s").unwrap();
        assert!(!w.contains(Duration::from_secs(9)));
        assert!(w.contains(Duration::from_secs(10)));
        assert!(!w.contains(Duration::from_secs(40)));
        assert!(w.is_over(Duration::from_secs(40)));
        let open = Window::parse("5s..").unwrap();
        assert!(open.contains(Duration::from_secs(3600)));
        assert_eq!(
            Window::parse("..30s").unwrap().end,
            Some(Duration::from_secs(30))
        );
        assert!(Window::parse("40s..10s").is_err());
        assert!(Window::parse("10s").is_err());
        assert_eq!(Window::parse("10s..40s").unwrap().to_string(), "10s..40s");
        let clamped = Window::ALWAYS.clamp_end(Duration::from_secs(5));
        assert!(clamped.is_over(Duration::from_secs(5)));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(Duration::from_millis(150)), "150ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_duration(Duration::from_micros(1500)), "1.500ms");
        assert_eq!(format_duration(Duration::from_nanos(2)), "2ns");
        assert_eq!(
            format_duration(Duration::from_nanos(100_990_001)),
            "100.990001ms"
        );
        for ns in [
            1,
            999,
            1000,
            1001,
            1_500_000,
            100_990_000,
            61_000_000_007,
            u64::MAX >> 20,
        ] {
            let d = Duration::from_nanos(ns);
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d, "{ns}");
        }
        assert_eq!(format_rate(125_000), "1mbit");
        assert_eq!(format_rate(62_500), "500kbit");
        assert_eq!(format_rate(123_457), "987.656kbit");
        assert_eq!(format_rate(1_234_567), "1234567B/s");
        for r in [
            1,
            7,
            125,
            62_500,
            123_457,
            1_234_567,
            10_000_000,
            125_000_000_000,
            1 << 62,
        ] {
            assert_eq!(parse_rate(&format_rate(r)).unwrap(), r, "{r}");
        }
    }
}
