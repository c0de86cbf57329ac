//! The checks a client's contract is judged by, each read from the
//! request records ([`super::records`]): named, parameterised, and each
//! failure naming the logical requests that broke it. Written as
//! `name`, `name=value`, or `name=value,param=value` (`max_attempts=3`,
//! `breaker=5,cooloff=30s`, `no_retry_on=400,401`); the catalogue and
//! what each reads is in docs/drills.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::records::{self, Records};

/// One check, as written and as parsed.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    /// As the user wrote it (what the verdicts name).
    pub text: String,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    SuccessRate(f64),
    Latency(u8, Duration),
    TtftP95(Duration),
    Deadline(Duration),
    MaxAttempts(usize),
    RetryAfterHonoured,
    Backoff {
        min: Duration,
        factor: f64,
    },
    Jitter,
    NoRetryOn(Vec<u16>),
    /// The target; `immediate`: the attempt right after a failure on the
    /// first target goes to it (no retry of the first target between).
    Fallback(String, bool),
    FallbackShare(f64),
    Breaker {
        failures: usize,
        cooloff: Duration,
    },
    IdempotentRetries,
    NoDuplicateWork(usize),
}

/// The checks' names, for errors and completions.
pub(crate) const NAMES: &[&str] = &[
    "success_rate",
    "latency_p50",
    "latency_p95",
    "latency_p99",
    "ttft_p95",
    "deadline",
    "max_attempts",
    "retry_after_honoured",
    "backoff",
    "jitter",
    "no_retry_on",
    "fallback",
    "fallback_share",
    "breaker",
    "idempotent_retries",
    "no_duplicate_work",
];

/// Parses every check, or says what is wrong with the first bad one.
pub(crate) fn parse_all(texts: &[String]) -> Result<Vec<Check>, String> {
    texts.iter().map(|t| Check::parse(t)).collect()
}

/// A check's verdict on some records.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub check: String,
    pub pass: bool,
    /// What was measured, in a line.
    pub measured: String,
    /// The logical requests that broke it (the first few).
    pub offenders: Vec<String>,
    /// How many broke it in all.
    pub broken: usize,
}

impl Verdict {
    /// The failure message: what was measured, and who broke it.
    pub(crate) fn message(&self) -> String {
        let mut m = format!("{}: {}", self.check, self.measured);
        if !self.offenders.is_empty() {
            let _ = write!(m, "; e.g. {}", self.offenders.join("; "));
            if self.broken > self.offenders.len() {
                let _ = write!(m, " (and {} more)", self.broken - self.offenders.len());
            }
        }
        m
    }
}

/// Offending requests named in a message, at most.
const NAMED: usize = 5;

fn duration(check: &str, v: &str) -> Result<Duration, String> {
    humantime::parse_duration(v.trim())
        .map_err(|_| format!("{check}: expected a duration like \"500ms\" or \"30s\", got {v:?}"))
}

fn share(check: &str, v: &str) -> Result<f64, String> {
    let t = v.trim();
    let x = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("{check}: expected a share like 0.95 or 95%, got {v:?}"))?;
    if !(0.0..=1.0).contains(&x) {
        return Err(format!(
            "{check}: {v:?} is not between 0 and 1 (0% and 100%)"
        ));
    }
    Ok(x)
}

fn count(check: &str, v: &str) -> Result<usize, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{check}: expected a whole number, got {v:?}"))
}

impl Check {
    /// Parses `name`, `name=value` or `name=value,param=value,…`.
    pub(crate) fn parse(text: &str) -> Result<Check, String> {
        let text = text.trim();
        let (name, rest) = match text.split_once('=') {
            Some((n, r)) => (n.trim(), Some(r)),
            None => (text, None),
        };
        // Items with `=` are named parameters; the others the main value.
        let mut main: Vec<&str> = Vec::new();
        let mut params: BTreeMap<&str, &str> = BTreeMap::new();
        for item in rest
            .unwrap_or("")
            .split(',')
            .filter(|i| !i.trim().is_empty())
        {
            match item.split_once('=') {
                Some((k, v)) => {
                    params.insert(k.trim(), v.trim());
                }
                None => main.push(item.trim()),
            }
        }
        let main_value = main.join(",");
        let needs = |what: &str| -> Result<&str, String> {
            match main_value.as_str() {
                "" => Err(format!("{name}: needs {what} ({name}={what})")),
                v => Ok(v),
            }
        };
        let kind = match name {
            "success_rate" => Kind::SuccessRate(match main_value.as_str() {
                "" => 1.0,
                v => share(name, v)?,
            }),
            "latency_p50" | "latency_p95" | "latency_p99" => {
                let p = name[9..].parse().expect("a percentile");
                Kind::Latency(p, duration(name, needs("a duration")?)?)
            }
            "ttft_p95" => Kind::TtftP95(duration(name, needs("a duration")?)?),
            "deadline" => Kind::Deadline(duration(name, needs("a duration")?)?),
            "max_attempts" => {
                let n = count(name, needs("a number")?)?;
                if n == 0 {
                    return Err(format!("{name}: at least 1"));
                }
                Kind::MaxAttempts(n)
            }
            "retry_after_honoured" | "retry_after_honored" => Kind::RetryAfterHonoured,
            "backoff" => Kind::Backoff {
                min: match params.remove("min").or(main.first().copied()) {
                    Some(v) => duration(name, v)?,
                    None => Duration::from_millis(50),
                },
                factor: match params.remove("factor") {
                    Some(v) => v.parse::<f64>().ok().filter(|f| *f >= 1.0).ok_or_else(|| {
                        format!("{name}: factor: a number of at least 1, got {v:?}")
                    })?,
                    None => 1.2,
                },
            },
            "jitter" => Kind::Jitter,
            "no_retry_on" => Kind::NoRetryOn(match main.is_empty() {
                true => vec![400, 401, 403, 404, 422],
                false => main
                    .iter()
                    .map(|s| {
                        s.parse::<u16>()
                            .ok()
                            .filter(|s| (100..600).contains(s))
                            .ok_or_else(|| format!("{name}: {s:?} is not an HTTP status"))
                    })
                    .collect::<Result<_, _>>()?,
            }),
            "fallback" => Kind::Fallback(
                needs("a target: a host, a model or host/model")?.to_string(),
                match params.remove("immediate") {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(v) => return Err(format!("{name}: immediate: true or false, got {v:?}")),
                },
            ),
            "fallback_share" => Kind::FallbackShare(share(name, needs("a share")?)?),
            "breaker" => Kind::Breaker {
                failures: match params.remove("failures").or(main.first().copied()) {
                    Some(v) => count(name, v)?.max(1),
                    None => 5,
                },
                cooloff: match params.remove("cooloff") {
                    Some(v) => duration(name, v)?,
                    None => Duration::from_secs(30),
                },
            },
            "idempotent_retries" => Kind::IdempotentRetries,
            "no_duplicate_work" => Kind::NoDuplicateWork(match main_value.as_str() {
                "" => 0,
                v => count(name, v)?,
            }),
            _ => {
                let hint = NAMES
                    .iter()
                    .map(|n| (strsim::levenshtein(n, name), n))
                    .min()
                    .filter(|(d, _)| *d <= 3)
                    .map(|(_, n)| format!(" (did you mean {n:?}?)"))
                    .unwrap_or_default();
                return Err(format!(
                    "unknown check {name:?}{hint}; the checks: {}",
                    NAMES.join(", ")
                ));
            }
        };
        if let Some(k) = params.keys().next() {
            return Err(format!("{name}: unknown parameter {k:?}"));
        }
        if main.len() > 1 && !matches!(kind, Kind::NoRetryOn(_)) {
            return Err(format!("{name}: one value, got {main_value:?}"));
        }
        Ok(Check {
            text: text.to_string(),
            kind,
        })
    }

    /// Judges `r`.
    pub(crate) fn judge(&self, r: &Records) -> Verdict {
        let mut v = Verdict {
            check: self.text.clone(),
            pass: true,
            measured: String::new(),
            offenders: Vec::new(),
            broken: 0,
        };
        let mut offend = |v: &mut Verdict, what: String| {
            v.pass = false;
            v.broken += 1;
            if v.offenders.len() < NAMED {
                v.offenders.push(what);
            }
        };
        let n = r.groups.len();
        match &self.kind {
            Kind::SuccessRate(min) => {
                let ok = r.groups.iter().filter(|g| served(r, g)).count();
                let rate = if r.groups.is_empty() {
                    1.0
                } else {
                    ok as f64 / n as f64
                };
                v.measured = format!(
                    "{ok}/{n} requests answered ({:.1}%, at least {:.1}% asked)",
                    rate * 100.0,
                    min * 100.0
                );
                if n == 0 {
                    v.measured = "no requests were made".into();
                    v.pass = false;
                } else if rate + 1e-9 < *min {
                    for (g, a) in r.groups.iter().enumerate() {
                        if !served(r, a) {
                            let last = &r.recs[*a.last().expect("an attempt") as usize];
                            offend(
                                &mut v,
                                format!("{} ended {}", records::label(r, g), last.outcome()),
                            );
                        }
                    }
                    v.pass = false;
                }
            }
            Kind::Latency(p, limit) => {
                let mut ms: Vec<f64> = r.groups.iter().map(|g| request_ms(r, g)).collect();
                match percentile(&mut ms, f64::from(*p)) {
                    None => v.measured = "no requests".into(),
                    Some(x) => {
                        let lim = limit.as_secs_f64() * 1000.0;
                        v.measured = format!("p{p} {x:.0} ms (at most {lim:.0} ms asked)");
                        if x > lim {
                            for (g, a) in r.groups.iter().enumerate() {
                                let t = request_ms(r, a);
                                if t > lim {
                                    offend(
                                        &mut v,
                                        format!("{} took {t:.0} ms", records::label(r, g)),
                                    );
                                }
                            }
                            v.pass = false;
                        }
                    }
                }
            }
            Kind::TtftP95(limit) => {
                // From the request's first attempt to the first body byte
                // of the attempt that answered it.
                let mut firsts: Vec<(usize, f64)> = Vec::new();
                for (g, a) in r.groups.iter().enumerate() {
                    let last = &r.recs[*a.last().expect("an attempt") as usize];
                    if last.ok() && !last.first_ms.is_nan() {
                        let first = &r.recs[a[0] as usize];
                        let t = (last.start - first.start) * 1000.0 + f64::from(last.first_ms);
                        firsts.push((g, t));
                    }
                }
                let mut ts: Vec<f64> = firsts.iter().map(|x| x.1).collect();
                match percentile(&mut ts, 95.0) {
                    None => {
                        v.measured = "no answered request had a body (no first token)".into();
                        v.pass = false;
                    }
                    Some(x) => {
                        let lim = limit.as_secs_f64() * 1000.0;
                        v.measured = format!(
                            "p95 time to first token {x:.0} ms over {} requests (at most {lim:.0} ms asked)",
                            ts.len()
                        );
                        if x > lim {
                            for (g, t) in firsts {
                                if t > lim {
                                    offend(
                                        &mut v,
                                        format!(
                                            "{}: first token at {t:.0} ms",
                                            records::label(r, g)
                                        ),
                                    );
                                }
                            }
                            v.pass = false;
                        }
                    }
                }
            }
            Kind::Deadline(limit) => {
                let lim = limit.as_secs_f64();
                let mut worst = 0.0f64;
                for (g, a) in r.groups.iter().enumerate() {
                    let t0 = r.recs[a[0] as usize].start;
                    let end = a
                        .iter()
                        .map(|&i| r.recs[i as usize].end())
                        .fold(0.0, f64::max);
                    worst = worst.max(end - t0);
                    if end - t0 > lim {
                        let late = a
                            .iter()
                            .filter(|&&i| r.recs[i as usize].end() - t0 > lim)
                            .count();
                        offend(
                            &mut v,
                            format!(
                                "{} ended at {:.2}s, {late} attempt(s) still in flight after {:.2}s",
                                records::label(r, g),
                                end - t0,
                                lim
                            ),
                        );
                    }
                }
                v.measured =
                    format!("the slowest request ended after {worst:.2}s (deadline {lim:.2}s)");
            }
            Kind::MaxAttempts(max) => {
                let most = r.groups.iter().map(<[u32]>::len).max().unwrap_or(0);
                v.measured = format!("at most {most} attempt(s) per request ({max} allowed)");
                for (g, a) in r.groups.iter().enumerate() {
                    if a.len() > *max {
                        offend(&mut v, records::label(r, g));
                    }
                }
            }
            Kind::RetryAfterHonoured => {
                // The next attempt on the same host waits as long as asked
                // (50 ms of slack for clocks and scheduling); one on
                // another target (a fallback) need not.
                let mut given = 0;
                for (g, a) in r.groups.iter().enumerate() {
                    for w in a.windows(2) {
                        let (p, q) = (&r.recs[w[0] as usize], &r.recs[w[1] as usize]);
                        if p.retry_after.is_nan() || p.host != q.host {
                            continue;
                        }
                        given += 1;
                        let waited = q.start - p.end();
                        if waited + 0.05 < f64::from(p.retry_after) {
                            offend(
                                &mut v,
                                format!(
                                    "{}: retried after {:.0} ms, retry-after {}s",
                                    records::label(r, g),
                                    waited.max(0.0) * 1000.0,
                                    p.retry_after
                                ),
                            );
                        }
                    }
                }
                v.measured = format!(
                    "{given} retr{} after a retry-after, {} too early",
                    if given == 1 { "y" } else { "ies" },
                    v.broken
                );
            }
            Kind::Backoff { min, factor } => {
                let mut retries = 0;
                for (g, a) in r.groups.iter().enumerate() {
                    let mut last_gap: Option<f64> = None;
                    for w in a.windows(2) {
                        let (p, q) = (&r.recs[w[0] as usize], &r.recs[w[1] as usize]);
                        if p.host != q.host || p.model != q.model {
                            // A fallback is not a retry.
                            last_gap = None;
                            continue;
                        }
                        retries += 1;
                        let gap = q.start - p.end();
                        let min = min.as_secs_f64();
                        // A wait the upstream asked for (retry-after) is
                        // the client's to honour, not to grow.
                        if !p.retry_after.is_nan() {
                            last_gap = None;
                            continue;
                        }
                        if gap + 1e-3 < min {
                            offend(
                                &mut v,
                                format!(
                                    "{}: retried after {:.0} ms (at least {:.0} ms asked)",
                                    records::label(r, g),
                                    gap.max(0.0) * 1000.0,
                                    min * 1000.0
                                ),
                            );
                            break;
                        }
                        if let Some(lg) = last_gap
                            && gap < lg * factor - 1e-3
                        {
                            offend(
                                &mut v,
                                format!(
                                    "{}: waits did not grow ({:.0} ms then {:.0} ms)",
                                    records::label(r, g),
                                    lg * 1000.0,
                                    gap * 1000.0
                                ),
                            );
                            break;
                        }
                        last_gap = Some(gap);
                    }
                }
                v.measured = format!(
                    "{retries} retr{}, {} request(s) without a growing backoff",
                    if retries == 1 { "y" } else { "ies" },
                    v.broken
                );
            }
            Kind::Jitter => {
                // The k-th retries of requests that failed together: their
                // waits must differ, or the clients come back in lock-step.
                let mut by_k: BTreeMap<usize, Vec<(usize, f64)>> = BTreeMap::new();
                for (g, a) in r.groups.iter().enumerate() {
                    for (k, w) in a.windows(2).enumerate() {
                        let (p, q) = (&r.recs[w[0] as usize], &r.recs[w[1] as usize]);
                        if (p.host, p.model) == (q.host, q.model) && p.retry_after.is_nan() {
                            by_k.entry(k).or_default().push((g, q.start - p.end()));
                        }
                    }
                }
                let mut sets = 0;
                for (k, gaps) in by_k {
                    if gaps.len() < 3 {
                        continue;
                    }
                    sets += 1;
                    let mean = gaps.iter().map(|x| x.1).sum::<f64>() / gaps.len() as f64;
                    let spread = gaps.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max)
                        - gaps.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
                    if spread < (mean * 0.05).max(0.002) {
                        offend(
                            &mut v,
                            format!(
                                "retry {}: {} requests waited {:.0} ms ± {:.1} ms",
                                k + 1,
                                gaps.len(),
                                mean * 1000.0,
                                spread * 500.0
                            ),
                        );
                    }
                }
                v.measured = format!(
                    "{sets} set(s) of concurrent retries compared, {} in lock-step",
                    v.broken
                );
            }
            Kind::NoRetryOn(statuses) => {
                for (g, a) in r.groups.iter().enumerate() {
                    for w in a.windows(2) {
                        let p = &r.recs[w[0] as usize];
                        if statuses.contains(&p.status) {
                            offend(
                                &mut v,
                                format!("{}: retried after a {}", records::label(r, g), p.status),
                            );
                            break;
                        }
                    }
                }
                let list: Vec<String> = statuses.iter().map(u16::to_string).collect();
                v.measured = format!("{} request(s) retried after {}", v.broken, list.join("/"));
            }
            Kind::Fallback(to, immediate) => {
                // Every request that failed on its first target reached
                // the named one (and was answered there); `immediate`: at
                // the attempt after the first failure.
                let mut failed_over = 0;
                for (g, a) in r.groups.iter().enumerate() {
                    let first = &r.recs[a[0] as usize];
                    if *immediate
                        && let Some(w) = a.windows(2).find(|w| !r.recs[w[0] as usize].ok())
                        && !records::targets(r, first, to)
                        && !records::targets(r, &r.recs[w[1] as usize], to)
                    {
                        let next = &r.recs[w[1] as usize];
                        failed_over += 1;
                        offend(
                            &mut v,
                            format!(
                                "{}: after a failure, the next attempt went to {}",
                                records::label(r, g),
                                records::target(r, next)
                            ),
                        );
                        continue;
                    }
                    let primary_failed = a
                        .iter()
                        .map(|&i| &r.recs[i as usize])
                        .any(|x| (x.host, x.model) == (first.host, first.model) && !x.ok());
                    if !primary_failed || records::targets(r, first, to) {
                        continue;
                    }
                    failed_over += 1;
                    let last = &r.recs[*a.last().expect("an attempt") as usize];
                    if !(records::targets(r, last, to) && last.ok()) {
                        offend(
                            &mut v,
                            format!(
                                "{}: ended on {} with {}",
                                records::label(r, g),
                                records::target(r, last),
                                last.outcome()
                            ),
                        );
                    }
                }
                v.measured = format!(
                    "{failed_over} request(s) failed on their first target, {} not answered by {to}",
                    v.broken
                );
            }
            Kind::FallbackShare(min) => {
                let moved = r.groups.iter().filter(|a| fell_back(r, a)).count();
                let share = if n == 0 { 0.0 } else { moved as f64 / n as f64 };
                v.measured = format!(
                    "{moved}/{n} requests answered by a fallback ({:.1}%, at least {:.1}% asked)",
                    share * 100.0,
                    min * 100.0
                );
                if share + 1e-9 < *min || n == 0 {
                    v.pass = false;
                }
            }
            Kind::Breaker { failures, cooloff } => {
                breaker(r, *failures, *cooloff, &mut v, &mut offend)
            }
            Kind::IdempotentRetries => {
                let mut retried = 0;
                for (g, a) in r.groups.iter().enumerate() {
                    let first = &r.recs[a[0] as usize];
                    if a.len() < 2 || records::method_path(r, first).0 != "POST" {
                        continue;
                    }
                    retried += 1;
                    if first.idem == 0 || a.iter().any(|&i| r.recs[i as usize].idem != first.idem) {
                        offend(
                            &mut v,
                            format!(
                                "{}: {}",
                                records::label(r, g),
                                match first.idem {
                                    0 => "retried without an Idempotency-Key",
                                    _ => "retried with another Idempotency-Key",
                                }
                            ),
                        );
                    }
                }
                v.measured = format!(
                    "{retried} retried POST request(s), {} without one key",
                    v.broken
                );
            }
            Kind::NoDuplicateWork(max) => {
                let mut dup = 0;
                for (g, a) in r.groups.iter().enumerate() {
                    let served = a
                        .iter()
                        .filter(|&&i| (200..300).contains(&r.recs[i as usize].upstream))
                        .count();
                    if served > 1 {
                        dup += 1;
                        if dup > *max {
                            offend(
                                &mut v,
                                format!(
                                    "{}: the upstream served it {served} times",
                                    records::label(r, g)
                                ),
                            );
                        }
                    }
                }
                v.measured = format!(
                    "{dup} request(s) served more than once by the upstream (at most {max} allowed)"
                );
                v.pass = dup <= *max;
            }
        }
        v
    }
}

/// The breaker: after `failures` availability failures in a row on a
/// target (a 429 neither counts nor breaks the run), it gets no attempt
/// for `cooloff`; after it, it is tried again.
fn breaker(
    r: &Records,
    failures: usize,
    cooloff: Duration,
    v: &mut Verdict,
    offend: &mut impl FnMut(&mut Verdict, String),
) {
    // Per target, in the order attempts began.
    let mut by: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for (i, x) in r.recs.iter().enumerate() {
        by.entry((x.host, x.model)).or_default().push(i as u32);
    }
    let group_of: Vec<u32> = {
        let mut g = vec![0; r.recs.len()];
        for (k, a) in r.groups.iter().enumerate() {
            for &i in a {
                g[i as usize] = k as u32;
            }
        }
        g
    };
    let cool = cooloff.as_secs_f64();
    let last_start = r.recs.last().map_or(0.0, |x| x.start);
    let mut opened = 0;
    for attempts in by.values() {
        let mut run = 0;
        let mut k = 0;
        while k < attempts.len() {
            let x = &r.recs[attempts[k] as usize];
            if x.status == 429 && x.failure == records::Failure::None {
                k += 1;
                continue;
            }
            if !x.unavailable() {
                run = 0;
                k += 1;
                continue;
            }
            run += 1;
            k += 1;
            if run < failures {
                continue;
            }
            // Open: from the end of the failure that tripped it.
            opened += 1;
            let from = x.end();
            // Attempts begun before it tripped were in flight: not leaks.
            let in_flight = attempts[k..]
                .iter()
                .take_while(|&&i| r.recs[i as usize].start < from)
                .count();
            let leaks: Vec<usize> = attempts[k + in_flight..]
                .iter()
                .map(|&i| i as usize)
                .take_while(|&i| r.recs[i].start < from + cool * 0.95)
                .collect();
            if let Some(&i) = leaks.first() {
                offend(
                    v,
                    format!(
                        "{} went to {} {:.2}s after its breaker should have opened ({} attempt(s) within the {}s cool-off)",
                        records::label(r, group_of[i] as usize),
                        records::target(r, x),
                        r.recs[i].start - from,
                        leaks.len(),
                        cool
                    ),
                );
                k += in_flight + leaks.len();
                run = 0;
                continue;
            }
            // Tried again after the cool-off, if the run went on so long.
            let after = attempts[k..]
                .iter()
                .find(|&&i| r.recs[i as usize].start >= from + cool * 0.95);
            if after.is_none() && last_start > from + cool * 1.5 {
                offend(
                    v,
                    format!(
                        "{} was never tried again after its cool-off (last request at {:.2}s)",
                        records::target(r, x),
                        last_start - r.span.0
                    ),
                );
            }
            run = 0;
        }
    }
    v.measured = format!(
        "the breaker opened {opened} time(s) ({failures} failures, {}s cool-off), {} leak(s)",
        cool, v.broken
    );
}

/// Whether a logical request was answered: its last attempt's answer
/// whole and not an error.
pub(crate) fn served(r: &Records, attempts: &[u32]) -> bool {
    attempts.last().is_some_and(|&i| r.recs[i as usize].ok())
}

/// Whether a logical request was answered by another target than its
/// first attempt's (a fallback).
pub(crate) fn fell_back(r: &Records, attempts: &[u32]) -> bool {
    let first = &r.recs[attempts[0] as usize];
    let last = &r.recs[*attempts.last().expect("an attempt") as usize];
    last.ok() && (last.host, last.model) != (first.host, first.model)
}

/// A logical request's time, first attempt's start to last's end (ms).
pub(crate) fn request_ms(r: &Records, attempts: &[u32]) -> f64 {
    let t0 = r.recs[attempts[0] as usize].start;
    let end = attempts
        .iter()
        .map(|&i| r.recs[i as usize].end())
        .fold(t0, f64::max);
    (end - t0) * 1000.0
}

/// The `p`th percentile (nearest rank) of `xs`.
pub(crate) fn percentile(xs: &mut [f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * xs.len() as f64).ceil() as usize;
    Some(xs[rank.clamp(1, xs.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::super::records::Failure;
    use super::super::records::tests::{make, make_with};
    use super::*;

    const OK: Failure = Failure::None;

    fn judge(check: &str, r: &Records) -> Verdict {
        Check::parse(check).unwrap().judge(r)
    }

    #[test]
    fn no_attempts_fail_the_rate_and_pass_the_bounds() {
        let r = make(&[]);
        assert!(!judge("success_rate", &r).pass);
        assert!(judge("max_attempts=1", &r).pass);
        assert!(judge("deadline=1s", &r).pass);
        assert!(!judge("ttft_p95=1s", &r).pass);
        assert!(judge("latency_p95=1s", &r).pass);
    }

    /// Each check, written with a parameter where it needs one.
    fn every_check() -> Vec<&'static str> {
        NAMES
            .iter()
            .map(|n| match *n {
                "latency_p50" => "latency_p50=1s",
                "latency_p95" => "latency_p95=1s",
                "latency_p99" => "latency_p99=1s",
                "ttft_p95" => "ttft_p95=1s",
                "deadline" => "deadline=1s",
                "max_attempts" => "max_attempts=2",
                "fallback" => "fallback=b",
                "fallback_share" => "fallback_share=0",
                n => n,
            })
            .collect()
    }

    #[test]
    fn every_check_judges_none_one_and_tied_attempts_without_panicking() {
        let none = make(&[]);
        let one = make_with(&[(0.0, 10.0, 200, OK, "a", "m")], |_, x| x.first_ms = 5.0);
        // Two requests at the same instant, one failing, its retry tied
        // to its end.
        let tied = make_with(
            &[
                (1.0, 0.0, 503, OK, "a", "m"),
                (1.0, 0.0, 200, OK, "a", "m"),
                (1.0, 5.0, 200, OK, "a", "m"),
            ],
            |i, x| x.body = [1, 1, 2][i],
        );
        for text in every_check() {
            let c = Check::parse(text).unwrap();
            for (what, r) in [("none", &none), ("one", &one), ("tied", &tied)] {
                let v = c.judge(r);
                assert!(!v.measured.is_empty(), "{text} on {what}: says nothing");
                assert!(
                    v.broken == 0 || !v.pass,
                    "{text} on {what}: broken yet passed"
                );
                assert!(v.offenders.len() <= v.broken, "{text} on {what}");
            }
            // One whole answer in 10 ms breaks none of them (a request
            // that never failed needs no fallback).
            assert!(c.judge(&one).pass, "{text}: {}", c.judge(&one).message());
        }
        assert_eq!(tied.groups.len(), 2);
        assert!(Check::parse("max_attempts=2").unwrap().judge(&tied).pass);
        assert!(!Check::parse("backoff").unwrap().judge(&tied).pass);
    }

    #[test]
    fn one_attempt_is_judged_alone() {
        let r = make(&[(0.0, 100.0, 529, OK, "a", "m")]);
        let v = judge("success_rate=0.5", &r);
        assert!(!v.pass);
        assert!(
            v.message()
                .contains("#1 (POST /v1/messages, 1 attempt from 0.00s) ended 529"),
            "{}",
            v.message()
        );
        assert!(judge("max_attempts=1", &r).pass);
        assert!(!judge("latency_p50=50ms", &r).pass);
        assert!(judge("latency_p50=100ms", &r).pass);
    }

    #[test]
    fn the_attempt_budget_names_who_spent_more() {
        let r = make(&[
            (0.0, 1.0, 529, OK, "a", "m"),
            (0.1, 1.0, 529, OK, "a", "m"),
            (0.2, 1.0, 529, OK, "a", "m"),
            (0.3, 1.0, 200, OK, "a", "m"),
        ]);
        let v = judge("max_attempts=3", &r);
        assert!(!v.pass);
        assert!(v.message().contains("4 attempts"), "{}", v.message());
        assert!(judge("max_attempts=4", &r).pass);
    }

    #[test]
    fn retry_after_is_measured_from_the_answer_and_ties_pass() {
        // A 1 s retry-after; the retry begins exactly 1 s after the end.
        let r = make_with(
            &[
                (0.0, 100.0, 429, OK, "a", "m"),
                (1.1, 10.0, 200, OK, "a", "m"),
            ],
            |i, x| {
                if i == 0 {
                    x.retry_after = 1.0
                }
            },
        );
        assert!(judge("retry_after_honoured", &r).pass);
        let early = make_with(
            &[
                (0.0, 100.0, 429, OK, "a", "m"),
                (0.5, 10.0, 200, OK, "a", "m"),
            ],
            |i, x| {
                if i == 0 {
                    x.retry_after = 1.0
                }
            },
        );
        let v = judge("retry_after_honoured", &early);
        assert!(!v.pass);
        assert!(
            v.message().contains("retried after 400 ms, retry-after 1s"),
            "{}",
            v.message()
        );
        // A fallback to another host need not wait.
        let moved = make_with(
            &[
                (0.0, 100.0, 429, OK, "a", "m"),
                (0.2, 10.0, 200, OK, "b", "m"),
            ],
            |i, x| {
                if i == 0 {
                    x.retry_after = 1.0
                }
            },
        );
        assert!(judge("retry_after_honoured", &moved).pass);
    }

    #[test]
    fn immediate_or_shrinking_retries_are_no_backoff() {
        let growing = make(&[
            (0.0, 10.0, 500, OK, "a", "m"),
            (0.51, 10.0, 500, OK, "a", "m"),
            (1.52, 10.0, 200, OK, "a", "m"),
        ]);
        assert!(
            judge("backoff", &growing).pass,
            "{}",
            judge("backoff", &growing).message()
        );
        let immediate = make(&[
            (0.0, 10.0, 500, OK, "a", "m"),
            (0.011, 10.0, 200, OK, "a", "m"),
        ]);
        assert!(!judge("backoff", &immediate).pass);
        let shrinking = make(&[
            (0.0, 10.0, 500, OK, "a", "m"),
            (1.01, 10.0, 500, OK, "a", "m"),
            (1.52, 10.0, 200, OK, "a", "m"),
        ]);
        assert!(
            judge("backoff", &shrinking)
                .message()
                .contains("did not grow")
        );
    }

    #[test]
    fn a_wait_retry_after_asked_for_is_no_step_of_the_backoff() {
        // 2 s asked by retry-after, then the client's own 1 s: not shrinking.
        let r = make_with(
            &[
                (0.0, 10.0, 429, OK, "a", "m"),
                (2.02, 10.0, 500, OK, "a", "m"),
                (3.04, 10.0, 200, OK, "a", "m"),
            ],
            |i, x| {
                if i == 0 {
                    x.retry_after = 2.0
                }
            },
        );
        assert!(
            judge("backoff", &r).pass,
            "{}",
            judge("backoff", &r).message()
        );
    }

    #[test]
    fn attempts_in_flight_when_the_breaker_trips_are_no_leak() {
        // Three concurrent requests to the primary, all failing; the third
        // began before the second ended (which tripped a breaker of 2).
        let r = make_with(
            &[
                (0.0, 100.0, 503, OK, "p", ""),
                (0.01, 100.0, 503, OK, "p", ""),
                (0.05, 100.0, 503, OK, "p", ""),
                (0.2, 10.0, 200, OK, "s", ""),
            ],
            |i, x| x.body = i as u64 + 1,
        );
        let v = judge("breaker=2,cooloff=10s", &r);
        assert!(v.pass, "{}", v.message());
    }

    #[test]
    fn lock_step_retries_are_caught() {
        // Three requests, each failing at 0 and retried exactly 500 ms on.
        let mut a = Vec::new();
        for k in 0..3 {
            let t = k as f64 * 0.001;
            a.push((t, 0.0, 500, OK, "a", "m"));
            a.push((t + 0.5, 10.0, 200, OK, "a", "m"));
        }
        let bodies = [1, 1, 2, 2, 3, 3];
        let r = make_with(&a, |i, x| x.body = bodies[i]);
        assert_eq!(r.groups.len(), 3);
        assert!(!judge("jitter", &r).pass);
    }

    #[test]
    fn a_retried_404_breaks_no_retry_on() {
        let r = make(&[(0.0, 1.0, 404, OK, "a", "m"), (0.5, 1.0, 404, OK, "a", "m")]);
        assert!(!judge("no_retry_on", &r).pass);
        assert!(judge("no_retry_on=500", &r).pass);
    }

    #[test]
    fn a_fallback_must_answer_what_the_primary_failed() {
        let ok = make(&[
            (0.0, 1.0, 529, OK, "a", "m1"),
            (0.5, 1.0, 200, OK, "a", "m2"),
        ]);
        assert!(judge("fallback=m2", &ok).pass);
        assert!(judge("fallback_share=1", &ok).pass);
        let none = make(&[
            (0.0, 1.0, 529, OK, "a", "m1"),
            (0.5, 1.0, 529, OK, "a", "m1"),
        ]);
        let v = judge("fallback=m2", &none);
        assert!(!v.pass);
        assert!(
            v.message().contains("ended on a/m1 with 529"),
            "{}",
            v.message()
        );
    }

    #[test]
    fn an_immediate_fallback_takes_the_next_attempt() {
        let retried_first = make(&[
            (0.0, 1.0, 529, OK, "a", "m1"),
            (0.5, 1.0, 529, OK, "a", "m1"),
            (1.0, 1.0, 200, OK, "a", "m2"),
        ]);
        assert!(judge("fallback=m2", &retried_first).pass);
        let v = judge("fallback=m2,immediate=true", &retried_first);
        assert!(!v.pass);
        assert!(
            v.message().contains("the next attempt went to a/m1"),
            "{}",
            v.message()
        );
        let at_once = make(&[
            (0.0, 1.0, 529, OK, "a", "m1"),
            (0.1, 1.0, 200, OK, "a", "m2"),
        ]);
        assert!(judge("fallback=m2,immediate=true", &at_once).pass);
        assert!(Check::parse("fallback=m2,immediate=soon").is_err());
    }

    #[test]
    fn a_breaker_keeps_off_for_its_cooloff_and_429_never_counts() {
        // Two failures trip a breaker of 2; the third request should go
        // elsewhere for 10 s but goes to the primary at once.
        let mut a = vec![
            (0.0, 1.0, 503, OK, "p", ""),
            (1.0, 1.0, 503, OK, "p", ""),
            (2.0, 1.0, 503, OK, "p", ""),
        ];
        let bodies = [1, 2, 3, 4, 5, 6];
        let leaky = make_with(&a, |i, x| x.body = bodies[i]);
        let v = judge("breaker=2,cooloff=10s", &leaky);
        assert!(!v.pass, "{}", v.message());
        // A client that went to the standby, and back after 10 s.
        a[2] = (2.0, 1.0, 200, OK, "s", "");
        a.push((12.0, 1.0, 200, OK, "p", ""));
        let good = make_with(&a, |i, x| x.body = bodies[i]);
        assert!(
            judge("breaker=2,cooloff=10s", &good).pass,
            "{}",
            judge("breaker=2,cooloff=10s", &good).message()
        );
        // 429s never trip it.
        let limited = make_with(
            &[
                (0.0, 1.0, 429, OK, "p", ""),
                (1.0, 1.0, 429, OK, "p", ""),
                (2.0, 1.0, 200, OK, "p", ""),
            ],
            |i, x| x.body = bodies[i],
        );
        assert!(judge("breaker=2,cooloff=10s", &limited).pass);
    }

    #[test]
    fn retried_posts_need_one_key() {
        let without = make(&[
            (0.0, 1.0, 500, Failure::Reset, "a", ""),
            (0.5, 1.0, 200, OK, "a", ""),
        ]);
        assert!(!judge("idempotent_retries", &without).pass);
        let with = make_with(
            &[
                (0.0, 1.0, 0, Failure::Reset, "a", ""),
                (0.5, 1.0, 200, OK, "a", ""),
            ],
            |_, x| x.idem = 9,
        );
        assert!(judge("idempotent_retries", &with).pass);
    }

    #[test]
    fn work_the_upstream_did_twice_is_counted() {
        let r = make_with(
            &[
                (0.0, 1.0, 0, Failure::Truncated, "a", ""),
                (0.5, 1.0, 200, OK, "a", ""),
            ],
            |_, x| x.upstream = 200,
        );
        assert!(!judge("no_duplicate_work", &r).pass);
        assert!(judge("no_duplicate_work=1", &r).pass);
    }

    #[test]
    fn bad_checks_are_refused_with_the_reason() {
        assert!(
            Check::parse("max_atempts=3")
                .unwrap_err()
                .contains("did you mean \"max_attempts\"")
        );
        assert!(
            Check::parse("max_attempts")
                .unwrap_err()
                .contains("needs a number")
        );
        assert!(
            Check::parse("deadline=soon")
                .unwrap_err()
                .contains("duration")
        );
        assert!(
            Check::parse("success_rate=120%")
                .unwrap_err()
                .contains("between 0 and 1")
        );
        assert!(
            Check::parse("breaker=3,cooldown=1s")
                .unwrap_err()
                .contains("unknown parameter \"cooldown\"")
        );
        assert!(
            Check::parse("no_retry_on=400,999")
                .unwrap_err()
                .contains("not an HTTP status")
        );
        assert!(Check::parse("success_rate=95%").is_ok());
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let mut xs = vec![3.0, 1.0, 2.0, 4.0];
        assert_eq!(percentile(&mut xs, 50.0), Some(2.0));
        assert_eq!(percentile(&mut xs, 95.0), Some(4.0));
        assert_eq!(percentile(&mut [], 50.0), None);
        // Ties.
        assert_eq!(percentile(&mut [5.0, 5.0], 50.0), Some(5.0));
    }
}
