//! A stop condition, `error_rate > 0.5 over 10s`: when the share of HTTP
//! attempts that failed, among those that ended in the window, crosses
//! the line (judged once [`MIN_ATTEMPTS`] are in it). `--stop-if` on
//! `run`, `attach` and `proxy` removes the faults then; a drill's `stop`
//! marks its scenario aborted.

use std::time::Duration;

/// Attempts in the window before the rate is judged: one failure of the
/// first attempt is no rate.
pub(crate) const MIN_ATTEMPTS: usize = 5;

/// A parsed `--stop-if` condition.
#[derive(Debug, Clone)]
pub(crate) struct StopIf {
    pub text: String,
    /// The line, and whether reaching it is enough (`>=`).
    pub rate: f64,
    pub inclusive: bool,
    pub over: Duration,
}

impl StopIf {
    /// `error_rate > 0.5 over 10s` (`>=` too; a share or a percentage).
    pub(crate) fn parse(text: &str) -> Result<StopIf, String> {
        let bad = |why: &str| {
            format!("--stop-if {text:?}: {why}; expected e.g. \"error_rate > 0.5 over 10s\"")
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        let [metric, op, value, over_kw, window] = words[..] else {
            return Err(bad("five words"));
        };
        if metric != "error_rate" {
            return Err(bad(&format!(
                "unknown measure {metric:?} (error_rate is the one)"
            )));
        }
        let inclusive = match op {
            ">" => false,
            ">=" => true,
            _ => return Err(bad(&format!("{op:?} is not > or >="))),
        };
        let rate = match value.strip_suffix('%') {
            Some(p) => p.parse::<f64>().map(|p| p / 100.0),
            None => value.parse::<f64>(),
        }
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| bad(&format!("{value:?} is not a share between 0 and 1")))?;
        if over_kw != "over" {
            return Err(bad(&format!("{over_kw:?} where \"over\" goes")));
        }
        let over = humantime::parse_duration(window)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| bad(&format!("{window:?} is not a duration like 10s")))?;
        Ok(StopIf {
            text: text.to_string(),
            rate,
            inclusive,
            over,
        })
    }

    pub(crate) fn crossed(&self, attempts: usize, failed: usize) -> bool {
        if attempts < MIN_ATTEMPTS {
            return false;
        }
        let r = failed as f64 / attempts as f64;
        if self.inclusive {
            r >= self.rate
        } else {
            r > self.rate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_or_say_what_is_wrong() {
        let s = StopIf::parse("error_rate > 0.5 over 10s").unwrap();
        assert_eq!(
            (s.rate, s.inclusive, s.over),
            (0.5, false, Duration::from_secs(10))
        );
        assert!(
            StopIf::parse("error_rate >= 20% over 1m")
                .unwrap()
                .inclusive
        );
        for (bad, why) in [
            ("error_rate > 0.5", "five words"),
            ("latency > 0.5 over 10s", "unknown measure"),
            ("error_rate < 0.5 over 10s", "not > or >="),
            ("error_rate > 2 over 10s", "between 0 and 1"),
            ("error_rate > 0.5 in 10s", "where \"over\" goes"),
            ("error_rate > 0.5 over soon", "not a duration"),
        ] {
            let e = StopIf::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_line_is_judged_once_enough_attempts_are_in() {
        let s = StopIf::parse("error_rate > 0.5 over 10s").unwrap();
        assert!(!s.crossed(4, 4));
        assert!(!s.crossed(10, 5));
        assert!(s.crossed(10, 6));
        assert!(
            StopIf::parse("error_rate >= 0.5 over 10s")
                .unwrap()
                .crossed(10, 5)
        );
    }
}
