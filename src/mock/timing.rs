//! The mock's timing model of a provider: the time to the first token
//! (`ttft`, with a uniform jitter) and a steady rate of tokens after it
//! (each token's moment jittered by at most a third of the gap between
//! two, never reordered, so the rate over an answer holds exactly).
//!
//! Pure: an answer's moments are offsets from when its request arrived,
//! drawn from the answer's own generator ([`super::text::Key`]).

use std::time::Duration;

use rand::Rng;

/// How fast the mock answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timing {
    /// The time to the first token, on average.
    pub(crate) ttft: Duration,
    /// ± this much, uniform.
    pub(crate) jitter: Duration,
    /// Tokens per second after the first.
    pub(crate) tokens_per_s: f64,
}

impl Default for Timing {
    /// A mid-sized hosted model's: 300ms±100ms to the first token, 80
    /// tokens a second.
    fn default() -> Timing {
        Timing {
            ttft: Duration::from_millis(300),
            jitter: Duration::from_millis(100),
            tokens_per_s: 80.0,
        }
    }
}

/// The fastest rate the mock is asked for (a token a microsecond would be
/// below any timer's resolution).
pub(crate) const MAX_TOKENS_PER_S: f64 = 100_000.0;

/// Reads `300ms`, `300ms±100ms` or `300ms+-100ms`: the time to the first
/// token and its jitter (no larger than the time itself).
pub(crate) fn parse_ttft(s: &str) -> Result<(Duration, Duration), String> {
    let (mean, jitter) = match s.split_once('±').or_else(|| s.split_once("+-")) {
        Some((m, j)) => (m, Some(j)),
        None => (s, None),
    };
    let mean = crate::units::parse_duration(mean).map_err(|e| format!("{s:?}: expected {e}"))?;
    let jitter = match jitter {
        Some(j) => crate::units::parse_duration(j).map_err(|e| format!("{s:?}: expected {e}"))?,
        None => Duration::ZERO,
    };
    if jitter > mean {
        return Err(format!(
            "{s:?}: the jitter is larger than the time itself (it would go below zero)"
        ));
    }
    Ok((mean, jitter))
}

/// Reads a rate of tokens per second: above 0, at most
/// [`MAX_TOKENS_PER_S`].
pub(crate) fn parse_tokens_per_s(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= MAX_TOKENS_PER_S => Ok(r),
        _ => Err(format!(
            "{s:?}: expected a number of tokens per second above 0, at most {MAX_TOKENS_PER_S}"
        )),
    }
}

/// Timing by model: the first glob a request's `model` matches gives its
/// timing (`claude-opus-*` slower than `*haiku*`, so that a primary and
/// its fallback differ); the base timing for the rest.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timings {
    pub(crate) base: Timing,
    pub(crate) models: Vec<ModelTiming>,
}

/// One model glob's timing (`--mock-model`).
#[derive(Debug, Clone)]
pub(crate) struct ModelTiming {
    glob: wildmatch::WildMatch,
    timing: Timing,
}

impl From<Timing> for Timings {
    fn from(base: Timing) -> Timings {
        Timings {
            base,
            models: Vec::new(),
        }
    }
}

impl Timings {
    /// The timing of answers for `model`.
    pub(crate) fn of(&self, model: &str) -> Timing {
        self.models
            .iter()
            .find(|m| m.glob.matches(model))
            .map_or(self.base, |m| m.timing)
    }
}

/// Reads `GLOB:ttft=800ms±200ms,tokens_per_s=40` (either key may be
/// left out: `base`'s then).
pub(crate) fn parse_model(s: &str, base: Timing) -> Result<ModelTiming, String> {
    // The last colon: a glob may hold one (`ft:gpt-4o*`), a timing not.
    let (glob, rest) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: expected GLOB:ttft=DURATION[±JITTER],tokens_per_s=N"))?;
    let glob = glob.trim();
    if glob.is_empty() {
        return Err(format!(
            "{s:?}: a model glob before the colon, like claude-opus-*"
        ));
    }
    let mut timing = base;
    for kv in rest.split(',').filter(|kv| !kv.trim().is_empty()) {
        match kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("ttft", v)) => (timing.ttft, timing.jitter) = parse_ttft(v)?,
            Some(("tokens_per_s", v)) => timing.tokens_per_s = parse_tokens_per_s(v)?,
            _ => {
                return Err(format!(
                    "{s:?}: {kv:?} is not ttft=DURATION[±JITTER] or tokens_per_s=N"
                ));
            }
        }
    }
    Ok(ModelTiming {
        glob: wildmatch::WildMatch::new(glob),
        timing,
    })
}

impl Timing {
    /// When each of `n` tokens is ready, from the request's arrival: the
    /// first after the drawn time to first token, each next one a gap of
    /// `1 / tokens_per_s` on (± a third of it) — non-decreasing.
    pub(crate) fn moments(&self, n: usize, rng: &mut impl Rng) -> Vec<Duration> {
        let first = self.first_token(rng);
        let gap = 1.0 / self.tokens_per_s;
        let mut out = Vec::with_capacity(n);
        let mut last = first;
        for k in 0..n {
            let mut t = first + gap * k as f64;
            if k > 0 && k + 1 < n {
                t += rng.random_range(-gap / 3.0..=gap / 3.0);
            }
            // The last lands exactly: the rate over the answer is the rate.
            let t = t.max(last);
            last = t;
            out.push(Duration::from_secs_f64(t));
        }
        out
    }

    /// The drawn time to the first token, in seconds.
    fn first_token(&self, rng: &mut impl Rng) -> f64 {
        let mean = self.ttft.as_secs_f64();
        let j = self.jitter.as_secs_f64();
        if j == 0.0 {
            return mean;
        }
        (mean + rng.random_range(-j..=j)).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn moments_keep_the_rate_and_never_reorder() {
        let t = Timing {
            ttft: ms(300),
            jitter: ms(100),
            tokens_per_s: 50.0,
        };
        let mut firsts = Vec::new();
        for seed in 0..200 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let m = t.moments(11, &mut rng);
            assert!(m.windows(2).all(|w| w[0] <= w[1]), "{m:?}");
            let span = (m[10] - m[0]).as_secs_f64();
            assert!((span - 0.2).abs() < 1e-9, "10 gaps of 20ms: {span}");
            assert!(m[0] >= ms(200) && m[0] <= ms(400), "{:?}", m[0]);
            firsts.push(m[0]);
        }
        firsts.sort();
        let median = firsts[firsts.len() / 2];
        assert!(median > ms(280) && median < ms(320), "{median:?}");
        assert!(t.moments(0, &mut rand::rng()).is_empty());
    }

    #[test]
    fn without_jitter_the_first_token_is_on_time() {
        let t = Timing {
            ttft: ms(40),
            jitter: Duration::ZERO,
            tokens_per_s: 1000.0,
        };
        let m = t.moments(3, &mut rand::rng());
        assert_eq!(m[0], ms(40));
        assert_eq!(m[2], ms(42));
    }

    #[test]
    fn the_first_matching_model_glob_gives_the_timing() {
        let base = Timing::default();
        let t = Timings {
            base,
            models: vec![
                parse_model("claude-opus-*:ttft=800ms±200ms,tokens_per_s=40", base).unwrap(),
                parse_model("*haiku*:ttft=100ms", base).unwrap(),
            ],
        };
        assert_eq!(t.of("claude-opus-4-1").ttft, ms(800));
        assert_eq!(t.of("claude-opus-4-1").tokens_per_s, 40.0);
        let haiku = t.of("claude-haiku-4-5");
        assert_eq!(
            (haiku.ttft, haiku.jitter, haiku.tokens_per_s),
            (ms(100), ms(0), 80.0)
        );
        assert_eq!(t.of("gpt-4o"), base);
        for bad in [
            "opus",
            ":ttft=1s",
            "x:speed=2",
            "x:ttft=fast",
            "x:tokens_per_s=0",
        ] {
            assert!(parse_model(bad, base).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_read_as_the_user_writes_them() {
        assert_eq!(parse_ttft("300ms±100ms").unwrap(), (ms(300), ms(100)));
        assert_eq!(parse_ttft("1s+-50ms").unwrap(), (ms(1000), ms(50)));
        assert_eq!(parse_ttft("0").unwrap(), (ms(0), ms(0)));
        assert!(parse_ttft("100ms±200ms").unwrap_err().contains("larger"));
        assert!(parse_ttft("fast").is_err());
        assert_eq!(parse_tokens_per_s("80").unwrap(), 80.0);
        assert_eq!(parse_tokens_per_s("0.5").unwrap(), 0.5);
        for bad in ["0", "-1", "inf", "NaN", "1e9", "x"] {
            assert!(parse_tokens_per_s(bad).is_err(), "{bad}");
        }
    }
}
