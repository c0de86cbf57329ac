//! The report as one self-contained HTML page: the run's facts and the
//! summary as static HTML, the timeline drawn by a small embedded script
//! (`report.js`, `report.css`) from the model embedded as JSON. Nothing is
//! fetched: no external script, style sheet, font or image.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::{Conn, Model};

const SCRIPT: &str = include_str!("report.js");
const STYLE: &str = include_str!("report.css");

/// Retry chains listed in the table, at most (the timeline shows them all).
const MAX_CHAINS: usize = 20;

/// What the script draws from.
#[derive(Serialize)]
struct PageData<'a> {
    conns: &'a [Conn],
    groups: &'a [String],
    windows: &'a [super::Band],
    end: f64,
    /// Logs drawn: with several, lanes name their log (connection
    /// numbers restart in each).
    runs: usize,
}

/// Escapes text for HTML (and XML) content and attribute values. A
/// control character other than a tab or a line end, which neither
/// allows, becomes a space.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Writes JSON that is safe inside `<script>`: no `<` can end the
/// element (in JSON a `<` can only be inside a string, where `\u003c`
/// means the same).
struct NoLt<'a, W: std::io::Write>(&'a mut W);

impl<W: std::io::Write> std::io::Write for NoLt<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(p) = rest.iter().position(|&b| b == b'<') {
            self.0.write_all(&rest[..p])?;
            self.0.write_all(b"\\u003c")?;
            rest = &rest[p + 1..];
        }
        self.0.write_all(rest)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn secs(t: f64) -> String {
    if t < 1.0 {
        format!("{:.0} ms", t * 1e3)
    } else {
        format!("{t:.2} s")
    }
}

/// A command line as a shell would read it back.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The page, as a string (tests).
#[cfg(test)]
pub(crate) fn render(m: &Model) -> String {
    let mut page = Vec::new();
    render_to(m, &mut page).expect("a Vec takes every write");
    String::from_utf8(page).expect("the page is UTF-8")
}

/// Writes the page to `w`: the tables (bounded in size) first, then the
/// model's JSON for the timeline, serialized straight into `w`.
pub(crate) fn render_to(m: &Model, w: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut h = String::with_capacity(64 * 1024);
    let title = match m.runs.first() {
        Some(r) if !r.mode.is_empty() => format!("netchaos report: {} ({})", r.mode, r.started),
        _ => "netchaos report".to_string(),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    runs(&mut h, m);
    summary(&mut h, m);
    timeline(&mut h, m);
    dns(&mut h, m);
    retries(&mut h, m);
    kept_retries(&mut h, m);
    let data = PageData {
        conns: &m.conns,
        groups: &m.groups,
        windows: &m.windows,
        end: m.end,
        runs: m.runs.len(),
    };
    h.push_str("<div id=\"tip\" hidden></div>\n<script type=\"application/json\" id=\"data\">");
    w.write_all(h.as_bytes())?;
    serde_json::to_writer(NoLt(w), &data)?;
    write!(w, "</script>\n<script>{SCRIPT}</script>\n</body></html>\n")
}

fn runs(h: &mut String, m: &Model) {
    h.push_str("<h2>Run</h2>\n<table class=\"runs\"><tr><th>seed</th><th>mode</th><th>started</th><th>command</th><th>profiles</th><th>faults asked for</th><th>--duration</th></tr>\n");
    for r in &m.runs {
        let profiles: Vec<String> = r
            .profiles
            .iter()
            .map(|(s, d)| format!("{}: {}", esc(s), esc(d)))
            .collect();
        let rules: Vec<String> = r.rules.iter().map(|s| esc(s)).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.seed.map_or("?".into(), |s| s.to_string()),
            esc(&r.mode),
            esc(&r.started),
            esc(&shell_words(&r.argv)),
            profiles.join("<br>"),
            rules.join("<br>"),
            r.faults_end.map_or(String::from("—"), |d| format!(
                "faults stop at {}",
                secs(d)
            )),
        );
    }
    h.push_str("</table>\n");
    if let Some(r) = m.runs.first().and_then(|r| r.seed) {
        let _ = writeln!(
            h,
            "<p class=\"note\">Replay: the same command with <code>--seed {r}</code> gives the same connections the same faults.</p>"
        );
    }
    if m.skipped > 0 {
        let _ = writeln!(
            h,
            "<p class=\"note\">{} line(s) of the log were not understood and are left out.</p>",
            m.skipped
        );
    }
    for (i, r) in m.runs.iter().enumerate() {
        if let Some(max) = r.truncated {
            let _ = writeln!(
                h,
                "<p class=\"note cut\">{}The log reached its size ({max} bytes, <code>--events-max</code>) and stops there: \
                 later connections and faults are not in it, and netchaos's exit summary counted them.</p>",
                if m.runs.len() > 1 {
                    format!("Log {}: ", i + 1)
                } else {
                    String::new()
                }
            );
        }
    }
    let s = &m.summary;
    let drawn_marks: usize = m.conns.iter().map(|c| c.faults.len()).sum();
    let drawn_requests: usize = m.conns.iter().map(|c| c.requests.len()).sum();
    if s.conns > m.conns.len() as u64
        || s.fault_events > drawn_marks as u64
        || s.requests > drawn_requests as u64
    {
        let _ = writeln!(
            h,
            "<p class=\"note bounded\">The timeline draws {} of {} connections, {drawn_marks} of {} fault marks and {drawn_requests} of {} HTTP requests \
             (at most the first {} connections, {} marks and {} requests, so that a report of any log is made in bounded memory); \
             the summary counts them all.{}</p>",
            m.conns.len(),
            s.conns,
            s.fault_events,
            s.requests,
            super::MAX_CONNS,
            super::MAX_MARKS,
            super::MAX_REQUESTS,
            if s.untracked_lines > 0 {
                format!(
                    " {} line(s) of connections beyond those it could follow (more than {} open at once) are counted roughly.",
                    s.untracked_lines,
                    super::MAX_COUNTED_OPEN
                )
            } else {
                String::new()
            }
        );
    }
}

/// The summary's HTTP requests row: counted where the HTTP layer read
/// them; where it never did (no HTTP fault, `--records`, `--tls` or
/// `--mock`), requests passed as bytes and are not known: not "0".
fn http_requests_row(s: &super::Summary) -> String {
    if s.requests == 0 && s.http_conns == 0 {
        return "<tr><th>HTTP requests</th><td class=\"n\">—</td><td>not read: connections passed as bytes \
                (the HTTP layer is on with HTTP faults, <code>--records</code>, <code>--tls</code> or <code>--mock</code>)</td></tr>"
            .to_string();
    }
    format!(
        "<tr><th>HTTP requests</th><td class=\"n\">{}</td><td>{} answered by netchaos</td></tr>",
        s.requests, s.requests_injected
    )
}

fn summary(h: &mut String, m: &Model) {
    let s = &m.summary;
    let outcomes: Vec<String> = s
        .by_outcome
        .iter()
        .map(|(k, n)| format!("{} {n}", esc(k)))
        .collect();
    let _ = write!(
        h,
        "<h2>Summary</h2>\n<table><tr><th>connections</th><td class=\"n\">{}</td><td>{}</td></tr>\
         <tr><th>bytes</th><td class=\"n\">{}</td><td>upstream (client→server)</td></tr>\
         <tr><th></th><td class=\"n\">{}</td><td>downstream (server→client)</td></tr>\
         <tr><th>faults injected</th><td class=\"n\">{}</td><td>marks on the timeline</td></tr>\
         {}\
         <tr><th>retries</th><td class=\"n\">{}</td><td>connections opened within a minute after the one before them, from the same client host to the same destination, failed (an unclean end, a 429 or 5xx, a gRPC error); independent connections to one server are not counted</td></tr>\
         <tr><th></th><td class=\"n\">{}</td><td>requests sent again on the same kept connection within a minute after the same method and path failed there (a 429 or 5xx, a gRPC error)</td></tr>",
        s.conns,
        outcomes.join(", "),
        s.bytes_up,
        s.bytes_down,
        s.fault_events,
        http_requests_row(s),
        s.retries,
        s.request_retries
    );
    for (k, n) in &s.errors {
        let _ = write!(
            h,
            "<tr><th>relay error</th><td class=\"n\">{n}</td><td>{}</td></tr>",
            esc(k)
        );
    }
    h.push_str("</table>\n");
    if !s.faults.is_empty() {
        h.push_str(
            "<table><tr><th>rule</th><th>fault</th><th>connections</th><th>hits</th></tr>\n",
        );
        for (rule, kind, hits, conns) in &s.faults {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{conns}</td><td class=\"n\">{hits}</td></tr>",
                esc(rule),
                esc(kind)
            );
        }
        h.push_str("</table>\n");
    }
}

/// The legend's shapes, as the script draws them.
const LEGEND: &str = r##"<div class="legend">
<span><svg width="40" height="14"><rect x="0.5" y="5" width="39" height="4" fill="#fff" stroke="#2ca02c" stroke-dasharray="2 1"/></svg> resolve (the name's DNS answer, before the connection)</span>
<span><svg width="40" height="14"><rect x="0" y="2" width="40" height="10" fill="url(#lhatch)" stroke="#777" stroke-width="0.5"/><defs><pattern id="lhatch" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="4" stroke="#777" stroke-width="1.5"/></pattern></defs></svg> connect (to the upstream connected)</span>
<span><svg width="40" height="14"><rect x="0" y="5.5" width="40" height="3" fill="#888"/></svg> waiting (until the first byte to the client)</span>
<span><svg width="40" height="14"><rect x="0" y="3" width="40" height="8" fill="#4a6fa5"/></svg> transfer</span>
<span><svg width="40" height="14"><rect x="2" y="4" width="6" height="3" fill="#4a6fa5" opacity="0.45"/><rect x="10" y="1" width="6" height="6" fill="#4a6fa5" opacity="0.45"/><rect x="18" y="9" width="6" height="4" fill="#4a6fa5" opacity="0.45"/></svg> bytes over time (above: to the client, below: to the server; log scale)</span>
<span><svg width="14" height="14"><path d="M3,7a4,4 0 1,0 8,0a4,4 0 1,0 -8,0" fill="none" stroke="#2a7f2a" stroke-width="1.8"/></svg> ok (FIN)</span>
<span><svg width="14" height="14"><path d="M3,3L11,11M11,3L3,11" stroke="#c0392b" stroke-width="2.4"/></svg> reset</span>
<span><svg width="14" height="14"><path d="M3,3h8v8h-8z" stroke="#d68910" fill="#d6891055" stroke-width="1.8"/></svg> truncated</span>
<span><svg width="14" height="14"><path d="M3,3h8L3,11h8z" stroke="#7d3c98" fill="#7d3c9855" stroke-width="1.8"/></svg> timed out</span>
<span><svg width="14" height="14"><path d="M7,3L11,7L7,11L3,7z" stroke="#1f618d" fill="#1f618d55" stroke-width="1.8"/></svg> refused</span>
<span><svg width="14" height="14"><path d="M7,3v8M3,7h8" stroke="#555" stroke-width="1.8"/></svg> failed / aborted</span>
<span><svg width="14" height="14"><path d="M3,3h8l-4,6z" fill="#d62728"/></svg> injected fault (hover: kind, rule, parameters)</span>
<span><svg width="14" height="14"><rect x="5" y="1" width="4" height="12" fill="#2c3e50"/></svg> HTTP request answered by the upstream</span>
<span><svg width="14" height="14"><rect x="5" y="1" width="4" height="12" fill="#fff" stroke="#d62728" stroke-width="1.5"/></svg> answered by netchaos</span>
<span><svg width="14" height="14"><rect x="5" y="1" width="4" height="12" fill="#9b59b6"/></svg> a retry on the same connection</span>
<span><svg width="40" height="14"><path d="M0,3C12,3 28,11 40,11" fill="none" stroke="#9b59b6" stroke-dasharray="3 2"/></svg> next connection, same client host and destination (retry)</span>
<span><svg width="20" height="14"><rect x="0" y="0" width="20" height="14" fill="rgba(255,200,0,0.3)"/></svg> fault window (active, --duration)</span>
</div>
"##;

fn timeline(h: &mut String, m: &Model) {
    // What the timeline draws (the summary counts all).
    let marks: usize = m.conns.iter().map(|c| c.faults.len()).sum();
    let requests: usize = m.conns.iter().map(|c| c.requests.len()).sum();
    let _ = write!(
        h,
        "<h2>Timeline</h2>\n<main id=\"report\" data-lanes=\"{}\" data-faults=\"{}\" data-requests=\"{}\">\n\
         <div id=\"toolbar\"><button id=\"zin\" type=\"button\">zoom in</button><button id=\"zout\" type=\"button\">zoom out</button>\
         <button id=\"zreset\" type=\"button\">whole run</button> showing <span id=\"window\"></span>\
         <span class=\"note\"> — Ctrl+wheel zooms where the pointer is, drag pans, hover a mark for details</span>\
         <span id=\"canvasmode\" hidden> — <select id=\"rowsel\" aria-label=\"connections per lane\"></select> <span id=\"perrow\" class=\"note\"></span></span></div>\n{LEGEND}\
         <div id=\"timeline\"><div id=\"axis\"></div><canvas id=\"activity\" height=\"40\"></canvas><div id=\"lanes\"></div>\
         <div id=\"scroller\"><canvas id=\"cv\"></canvas><div id=\"spacer\"></div></div></div>\n</main>\n\
         <p class=\"note\">Lanes are grouped by proxy and destination, each group in order of opening. \
         Phases come from the close line (<code>dial_ms</code>, <code>first_byte_downstream_ms</code>); \
         a connection with neither did not reach an upstream.</p>\n",
        m.conns.len(),
        marks,
        requests
    );
}

/// Successive connections from one client host to one destination, with
/// the pauses between them: backoff grows them, a retry storm has none.
/// Most DNS faults listed one by one; the rest are counted by kind.
const MAX_DNS_ROWS: usize = 200;

/// The resolve phase: DNS faults, by name and in order. They act before
/// any connection exists, so they have no lane of their own.
fn dns(h: &mut String, m: &Model) {
    if m.dns.is_empty() && m.dns_queries == 0 {
        return;
    }
    let mut by: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for d in &m.dns {
        *by.entry((&d.name, &d.qtype, &d.fault)).or_default() += 1;
    }
    let _ = write!(
        h,
        "<h2>Name resolution</h2>\n<section id=\"dns\" data-dns-faults=\"{}\">\
         <p>{} DNS queries{}; {} faulted. A connection to a name resolved here shows its resolve phase on its lane (dotted).</p>\
         <table><tr><th>name</th><th>type</th><th>fault</th><th>queries</th></tr>\n",
        m.dns_faults,
        m.dns_queries,
        if m.dns_answers.is_empty() {
            String::new()
        } else {
            let a: Vec<String> = m
                .dns_answers
                .iter()
                .map(|(k, n)| format!("{} {n}", esc(k)))
                .collect();
            format!(" (answers: {})", a.join(", "))
        },
        m.dns_faults
    );
    for ((name, qtype, fault), n) in &by {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{n}</td></tr>",
            esc(name),
            esc(qtype),
            esc(fault)
        );
    }
    h.push_str("</table>\n<table><tr><th>time</th><th>client</th><th>query</th><th>over</th><th>rule</th><th>fault</th><th>parameters</th></tr>\n");
    for d in m.dns.iter().take(MAX_DNS_ROWS) {
        let _ = writeln!(
            h,
            "<tr class=\"dns-fault\"><td class=\"n\">{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            secs(d.t),
            esc(&d.client),
            esc(&d.qtype),
            esc(&d.name),
            esc(&d.transport),
            esc(&d.rule),
            esc(&d.fault),
            esc(&d.params)
        );
    }
    h.push_str("</table>\n");
    if m.dns_faults > MAX_DNS_ROWS as u64 {
        let _ = writeln!(
            h,
            "<p class=\"note\">{} more DNS faults, counted above{}.</p>",
            m.dns_faults - MAX_DNS_ROWS as u64,
            if m.dns_faults > m.dns.len() as u64 {
                format!(" (by name: the first {})", m.dns.len())
            } else {
                String::new()
            }
        );
    }
    h.push_str("</section>\n");
}

fn retries(h: &mut String, m: &Model) {
    let mut chains: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut head = vec![0usize; m.conns.len()];
    for (i, c) in m.conns.iter().enumerate() {
        head[i] = c.prev.map_or(i, |p| head[p]);
        chains.entry(head[i]).or_default().push(i);
    }
    let mut list: Vec<Vec<usize>> = chains.into_values().filter(|c| c.len() > 1).collect();
    if list.is_empty() {
        return;
    }
    list.sort_by_key(|c| std::cmp::Reverse(c.len()));
    h.push_str("<h2>Retries and reconnects</h2>\n<table><tr><th>destination</th><th>client host</th><th>connections</th><th>outcomes in order</th><th>pauses between them (end → next open)</th><th>pattern</th></tr>\n");
    for chain in list.iter().take(MAX_CHAINS) {
        let first = &m.conns[chain[0]];
        let outcomes: Vec<&str> = chain.iter().map(|&i| m.conns[i].class).collect();
        let gaps: Vec<f64> = chain
            .windows(2)
            .map(|w| {
                let (a, b) = (&m.conns[w[0]], &m.conns[w[1]]);
                b.open - a.close.unwrap_or(b.open)
            })
            .collect();
        let shown: Vec<String> = gaps
            .iter()
            .take(8)
            .map(|g| if *g < 0.0 { "overlap".into() } else { secs(*g) })
            .collect();
        let pattern = pattern_of(&gaps);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}{}</td><td>{pattern}</td></tr>",
            esc(&m.groups[first.group]),
            esc(super::client_host(&first.client)),
            chain.len(),
            esc(&runs_of(&outcomes)),
            shown.join(", "),
            if gaps.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    if list.len() > MAX_CHAINS {
        let _ = writeln!(
            h,
            "</table><p class=\"note\">{} more chains are on the timeline.</p>",
            list.len() - MAX_CHAINS
        );
    } else {
        h.push_str("</table>\n");
    }
}

/// Requests sent again on one kept connection: each chain a request and
/// its retries ([`super::Request::retried`]), with its answers in order
/// and the pauses between the attempts' starts.
fn kept_retries(h: &mut String, m: &Model) {
    let mut chains: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, c) in m.conns.iter().enumerate() {
        let mut open: Vec<Vec<usize>> = Vec::new();
        for (k, r) in c.requests.iter().enumerate() {
            let same = |j: &usize| {
                let p = &c.requests[*j];
                p.method == r.method && p.path == r.path
            };
            match open.iter_mut().rev().find(|ch| ch.last().is_some_and(same)) {
                Some(ch) if r.retried => ch.push(k),
                _ => open.push(vec![k]),
            }
        }
        chains.extend(open.into_iter().filter(|ch| ch.len() > 1).map(|ch| (i, ch)));
    }
    if chains.is_empty() {
        return;
    }
    chains.sort_by_key(|(_, ch)| std::cmp::Reverse(ch.len()));
    h.push_str(
        "<h2>Retries on a kept connection</h2>\n<p class=\"note\">A client that keeps its connection \
         alive sends its retry on it: no new connection, so these are not in the table above.</p>\n\
         <table class=\"kept-retries\"><tr><th>destination</th><th>connection</th><th>request</th><th>attempts</th>\
         <th>answers in order</th><th>pauses between them (start → next start)</th><th>pattern</th></tr>\n",
    );
    for (i, chain) in chains.iter().take(MAX_CHAINS) {
        let c = &m.conns[*i];
        let rs: Vec<&super::Request> = chain.iter().map(|&k| &c.requests[k]).collect();
        let answers: Vec<String> = rs
            .iter()
            .map(|r| match (&r.grpc, r.status) {
                (Some(g), _) => g.split(' ').next().unwrap_or_default().to_string(),
                (None, Some(st)) => st.to_string(),
                (None, None) => "no answer".to_string(),
            })
            .collect();
        let answers: Vec<&str> = answers.iter().map(String::as_str).collect();
        let gaps: Vec<f64> = rs.windows(2).map(|w| w[1].began() - w[0].began()).collect();
        let shown: Vec<String> = gaps.iter().take(8).map(|g| secs(*g)).collect();
        let pattern = pattern_of(&gaps);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{} {}</td><td class=\"n\">{}</td><td>{}</td><td>{}{}</td><td>{pattern}</td></tr>",
            esc(&m.groups[c.group]),
            esc(&format!("#{}", c.id)),
            esc(&rs[0].method),
            esc(&rs[0].path),
            rs.len(),
            esc(&runs_of(&answers)),
            shown.join(", "),
            if gaps.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    h.push_str("</table>\n");
    if chains.len() > MAX_CHAINS {
        let _ = writeln!(
            h,
            "<p class=\"note\">{} more such chains are on the timeline.</p>",
            chains.len() - MAX_CHAINS
        );
    }
}

/// What the pauses between a chain's attempts say: none at all (a retry
/// storm), growing ones (backoff), or overlapping ones (not retries: a
/// pool's connections).
fn pattern_of(gaps: &[f64]) -> &'static str {
    if gaps.iter().all(|g| *g < 0.0) {
        "concurrent (a pool?)"
    } else if gaps.len() >= 4 && gaps.iter().all(|g| *g < 0.05) {
        "retry storm: no pause"
    } else if gaps.len() >= 2
        && gaps.windows(2).all(|w| w[1] >= w[0] * 0.9)
        && gaps[gaps.len() - 1] >= 1.5 * gaps[0].max(0.001)
    {
        "backoff: pauses grow"
    } else {
        ""
    }
}

/// Outcomes in order, repeats folded (`reset ×3 → ok`), the first ten
/// changes shown.
fn runs_of(outcomes: &[&str]) -> String {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for o in outcomes {
        match runs.last_mut() {
            Some((last, n)) if last == o => *n += 1,
            _ => runs.push((o, 1)),
        }
    }
    let mut text: Vec<String> = runs
        .iter()
        .take(10)
        .map(|(o, n)| match n {
            1 => o.to_string(),
            n => format!("{o} ×{n}"),
        })
        .collect();
    if runs.len() > 10 {
        text.push("…".into());
    }
    text.join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_fold_repeats() {
        assert_eq!(runs_of(&["reset", "reset", "ok"]), "reset ×2 → ok");
    }

    #[test]
    fn embedded_json_cannot_close_the_script() {
        let lines = r#"{"time":"2026-12-01T10:00:00.000Z","t":0.0,"event":"open","conn":1,"client":"1.2.3.4:5","dst":"</script><b>x","proxy":"p"}"#;
        let m = super::super::from_lines([lines.lines()]);
        let page = render(&m);
        assert!(!page.contains("</script><b>"));
        assert_eq!(page.matches("</script>").count(), 2);
        assert!(!page.contains("http://") && !page.contains("https://"));
    }
}
