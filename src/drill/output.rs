//! What drills and records print: the records as a table or CSV, the
//! checks' verdicts, a drill's side-by-side table (one row per scenario ×
//! client), and JUnit XML for CI (one test case per scenario × client ×
//! check).

use std::fmt::Write as _;
use std::io::Write;

use super::checks::{self, Verdict};
use super::records::{self, Failure, Records};
pub(crate) use crate::report::html::esc as xml;

/// The records as a table: one line per attempt, its logical request
/// first; the grouping rule said above it. Streamed: the columns are
/// measured in a first pass over the records, not kept as text.
pub(crate) fn table(r: &Records, out: &mut dyn Write) -> std::io::Result<()> {
    const HEAD: [&str; 9] = [
        "req",
        "try",
        "start",
        "target",
        "request",
        "got",
        "head/first/total ms",
        "retry-after",
        "faults",
    ];
    let cells = |g: usize, k: usize, x: &super::records::Rec| -> [String; 9] {
        let ms = |v: f32| match v.is_nan() {
            true => "-".to_string(),
            false => format!("{v:.0}"),
        };
        [
            if k == 0 {
                format!("{}", g + 1)
            } else {
                String::new()
            },
            format!("{}", k + 1),
            format!("{:.3}s", x.start - r.span.0),
            records::target(r, x),
            r.syms.name(x.request).to_string(),
            x.outcome(),
            format!("{}/{}/{}", ms(x.head_ms), ms(x.first_ms), ms(x.ms)),
            match x.retry_after.is_nan() {
                true => "-".into(),
                false => format!("{}s", x.retry_after),
            },
            match records::fault_list(r, x.faults).join(",") {
                f if f.is_empty() => "-".into(),
                f => f,
            },
        ]
    };
    let mut widths = HEAD.map(str::len);
    for (g, attempts) in r.groups.iter().enumerate() {
        for (k, &i) in attempts.iter().enumerate() {
            for (w, c) in widths.iter_mut().zip(cells(g, k, &r.recs[i as usize])) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    writeln!(
        out,
        "{} attempt(s) in {} logical request(s), grouped by {}",
        r.recs.len(),
        r.groups.len(),
        r.rule
    )?;
    let line = |out: &mut dyn Write, row: &[String; 9]| -> std::io::Result<()> {
        let mut l = String::new();
        for (i, (w, c)) in widths.iter().zip(row).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{c:<w$}");
        }
        writeln!(out, "{}", l.trim_end())
    };
    line(out, &HEAD.map(String::from))?;
    for (g, attempts) in r.groups.iter().enumerate() {
        for (k, &i) in attempts.iter().enumerate() {
            line(out, &cells(g, k, &r.recs[i as usize]))?;
        }
    }
    Ok(())
}

/// Rows in columns, two spaces apart.
pub(crate) fn align<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (w, c)) in widths.iter().zip(row).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = write!(line, "{c:<w$}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A CSV field, quoted where it must be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The records as CSV, a line at a time.
pub(crate) fn csv(r: &Records, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "request,attempt,start_s,host,model,method,path,status,error,head_ms,first_ms,ms,retry_after_s,faults,retry_count"
    )?;
    let num = |v: f32| match v.is_nan() {
        true => String::new(),
        false => format!("{v}"),
    };
    for (g, attempts) in r.groups.iter().enumerate() {
        for (k, &i) in attempts.iter().enumerate() {
            let x = &r.recs[i as usize];
            let (method, path) = records::method_path(r, x);
            let fields = [
                (g + 1).to_string(),
                (k + 1).to_string(),
                format!("{:.6}", x.start - r.span.0),
                r.syms.name(x.host).to_string(),
                r.syms.name(x.model).to_string(),
                method.to_string(),
                path.to_string(),
                match x.status {
                    0 => String::new(),
                    s => s.to_string(),
                },
                match x.failure {
                    Failure::None => String::new(),
                    f => f.as_str().to_string(),
                },
                num(x.head_ms),
                num(x.first_ms),
                format!("{}", x.ms),
                num(x.retry_after),
                records::fault_list(r, x.faults).join(" "),
                match x.retry_count {
                    -1 => String::new(),
                    c => c.to_string(),
                },
            ];
            let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
            writeln!(out, "{}", line.join(","))?;
        }
    }
    Ok(())
}

/// The records as a JSON array, an attempt at a time.
pub(crate) fn json(r: &Records, out: &mut dyn Write) -> std::io::Result<()> {
    write!(out, "[")?;
    let mut first = true;
    for (g, attempts) in r.groups.iter().enumerate() {
        for (k, &i) in attempts.iter().enumerate() {
            let v = records::attempt_json(r, g, k, &r.recs[i as usize]);
            write!(out, "{}\n  {v}", if first { "" } else { "," })?;
            first = false;
        }
    }
    writeln!(out, "\n]")
}

/// Verdicts, a line each: `ok` or `FAILED`, and the message.
pub(crate) fn verdicts(vs: &[Verdict]) -> String {
    let mut out = String::new();
    for v in vs {
        let _ = writeln!(
            out,
            "  {} {}",
            if v.pass { "ok    " } else { "FAILED" },
            v.message()
        );
    }
    out
}

/// What a drill's table says of one run: the columns.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Summary {
    pub requests: usize,
    pub answered: usize,
    /// Answered by another target than the request's first.
    pub fallback: usize,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub attempts: usize,
    /// Attempts a fault acted on.
    pub faulted: usize,
}

impl Summary {
    pub(crate) fn of(r: &Records) -> Summary {
        let answered = r.groups.iter().filter(|g| checks::served(r, g)).count();
        let fallback = r.groups.iter().filter(|a| checks::fell_back(r, a)).count();
        let mut ms: Vec<f64> = r.groups.iter().map(|g| checks::request_ms(r, g)).collect();
        Summary {
            requests: r.groups.len(),
            answered,
            fallback,
            p50_ms: checks::percentile(&mut ms, 50.0),
            p95_ms: checks::percentile(&mut ms, 95.0),
            attempts: r.recs.len(),
            faulted: r.recs.iter().filter(|x| x.faults != 0).count(),
        }
    }
}

/// One row of a drill's table: a scenario × client, over its seeds.
pub(crate) struct Row<'a> {
    pub scenario: &'a str,
    pub client: &'a str,
    pub runs: Vec<&'a super::run::Run>,
}

impl Row<'_> {
    /// `pass`, `FAIL`, `flaky (2/3 seeds)`, `aborted`, `error`.
    pub(crate) fn verdict(&self) -> String {
        let passed = self.runs.iter().filter(|r| r.pass()).count();
        if self.runs.iter().any(|r| r.error.is_some()) {
            "error".into()
        } else if self.runs.iter().any(|r| r.aborted) {
            "aborted".into()
        } else if passed == self.runs.len() {
            "pass".into()
        } else if passed == 0 {
            "FAIL".into()
        } else {
            format!("flaky ({passed}/{} seeds)", self.runs.len())
        }
    }
}

/// The runs as rows, in the order they ran.
pub(crate) fn rows(o: &super::run::Outcome) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    for r in &o.runs {
        match rows
            .iter_mut()
            .find(|x| x.scenario == r.scenario && x.client == r.client)
        {
            Some(x) => x.runs.push(r),
            None => rows.push(Row {
                scenario: &r.scenario,
                client: &r.client,
                runs: vec![r],
            }),
        }
    }
    // Scenario by scenario (the steady state first), clients side by side.
    let mut order: Vec<&str> = Vec::new();
    for r in &o.runs {
        if !order.contains(&r.scenario.as_str()) {
            order.push(&r.scenario);
        }
    }
    rows.sort_by_key(|r| order.iter().position(|s| *s == r.scenario));
    rows
}

/// A drill's side-by-side table: one row per scenario × client.
pub(crate) fn drill_table(o: &super::run::Outcome) -> String {
    let mut cells: Vec<[String; 8]> = vec![[
        "scenario".into(),
        "client".into(),
        "answered".into(),
        "fallback".into(),
        "p50 / p95 ms".into(),
        "calls / request".into(),
        "faults".into(),
        "verdict".into(),
    ]];
    for row in rows(o) {
        let sum = |f: fn(&Summary) -> usize| row.runs.iter().map(|r| f(&r.summary)).sum::<usize>();
        let (requests, answered) = (sum(|s| s.requests), sum(|s| s.answered));
        let attempts = sum(|s| s.attempts);
        let mut ms: Vec<f64> = row
            .runs
            .iter()
            .flat_map(|r| r.request_ms.iter().copied())
            .collect();
        let p50 = checks::percentile(&mut ms, 50.0);
        let p95 = checks::percentile(&mut ms, 95.0);
        let lat = match (p50, p95) {
            (Some(a), Some(b)) => format!("{a:.0} / {b:.0}"),
            _ => "-".into(),
        };
        cells.push([
            row.scenario.to_string(),
            row.client.to_string(),
            format!("{answered}/{requests}"),
            sum(|s| s.fallback).to_string(),
            lat,
            match requests {
                0 => "-".into(),
                n => format!("{:.2}", attempts as f64 / n as f64),
            },
            sum(|s| s.faulted).to_string(),
            row.verdict(),
        ]);
    }
    align(&cells)
}

/// What failed, run by run: the checks' messages, an aborted or broken
/// run's reason.
pub(crate) fn failures(o: &super::run::Outcome) -> String {
    let mut out = String::new();
    for r in &o.runs {
        if r.pass() {
            continue;
        }
        let _ = writeln!(out, "{} / {} (seed {}):", r.scenario, r.client, r.seed);
        if let Some(e) = &r.error {
            let _ = writeln!(
                out,
                "  error: {e} (the command's output: {})",
                r.output.display()
            );
        }
        if r.aborted {
            let _ = writeln!(
                out,
                "  aborted: the stop condition was crossed, the faults removed"
            );
        }
        for v in r.verdicts.iter().filter(|v| !v.pass) {
            let _ = writeln!(out, "  FAILED {}", v.message());
        }
    }
    for c in &o.invalid {
        let _ = writeln!(
            out,
            "{c}: the steady state did not hold, so its scenarios were not run: the drill is invalid for it"
        );
    }
    out
}

/// JUnit XML: a test suite per scenario (the steady state too), a test
/// case per client × check, failed when it failed for any seed.
pub(crate) fn junit(drill: &super::spec::Drill, o: &super::run::Outcome) -> String {
    let rows = rows(o);
    let mut scenarios: Vec<&str> = Vec::new();
    for r in &rows {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario);
        }
    }
    let mut body = String::new();
    let (mut total, mut failed_total) = (0, 0);
    for sc in scenarios {
        let mut cases = String::new();
        let (mut n, mut failed) = (0, 0);
        for row in rows.iter().filter(|r| r.scenario == sc) {
            // Checks by name, in order, over the row's seeds.
            let mut names: Vec<&str> = Vec::new();
            for run in &row.runs {
                for v in &run.verdicts {
                    if !names.contains(&v.check.as_str()) {
                        names.push(&v.check);
                    }
                }
            }
            if row.runs.iter().any(|r| r.error.is_some() || r.aborted) {
                names.push("run");
            }
            for name in names {
                n += 1;
                let _ = write!(
                    cases,
                    "    <testcase classname=\"{}.{}\" name=\"{} / {}\">",
                    xml(&drill.name),
                    xml(sc),
                    xml(row.client),
                    xml(name),
                );
                let mut messages = Vec::new();
                for run in &row.runs {
                    if name == "run" {
                        if let Some(e) = &run.error {
                            messages.push(format!("seed {}: {e}", run.seed));
                        } else if run.aborted {
                            messages.push(format!(
                                "seed {}: aborted (the stop condition was crossed)",
                                run.seed
                            ));
                        }
                        continue;
                    }
                    for v in run.verdicts.iter().filter(|v| v.check == name && !v.pass) {
                        messages.push(format!("seed {}: {}", run.seed, v.message()));
                    }
                }
                if messages.is_empty() {
                    cases.push_str("</testcase>\n");
                } else {
                    failed += 1;
                    let _ = writeln!(
                        cases,
                        "\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
                        xml(&messages[0]),
                        xml(name),
                        xml(&messages.join("\n"))
                    );
                }
            }
        }
        total += n;
        failed_total += failed;
        let _ = write!(
            body,
            "  <testsuite name=\"{}.{}\" tests=\"{n}\" failures=\"{failed}\" errors=\"0\" skipped=\"0\">\n{cases}  </testsuite>\n",
            xml(&drill.name),
            xml(sc)
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{total}\" failures=\"{failed_total}\" errors=\"0\">\n{body}</testsuites>\n",
        xml(&drill.name)
    )
}

/// The drill's verdicts as JSON.
pub(crate) fn drill_json(drill: &super::spec::Drill, o: &super::run::Outcome) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows(o)
        .iter()
        .map(|r| {
            serde_json::json!({
                "scenario": r.scenario,
                "client": r.client,
                "verdict": r.verdict(),
                "runs": r.runs,
            })
        })
        .collect();
    serde_json::json!({
        "drill": drill.name,
        "hypothesis": drill.hypothesis.trim(),
        "pass": o.pass(),
        "invalid": o.invalid,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_it_must() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(
            xml("<a href=\"x\">&'\u{1}"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39; "
        );
    }
}
