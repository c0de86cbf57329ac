//! `GET /metrics`: the counters in Prometheus's text format, every series
//! named `netchaos_…`.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::events::Stats;

/// Renders the counters.
pub(crate) fn render(stats: &Stats) -> String {
    let mut out = String::new();
    let proxies: Vec<_> = stats
        .proxies
        .lock()
        .expect("stats lock")
        .iter()
        .map(|(n, p)| (n.clone(), p.clone()))
        .collect();
    family_into(
        &mut out,
        "netchaos_connections_open",
        "gauge",
        "Connections open now, by proxy.",
    );
    for (name, p) in &proxies {
        let _ = writeln!(
            out,
            "netchaos_connections_open{{proxy=\"{}\"}} {}",
            escape(name),
            p.open.load(Ordering::Relaxed)
        );
    }
    family_into(
        &mut out,
        "netchaos_connections_total",
        "counter",
        "Connections accepted (or refused at the SYN), by proxy.",
    );
    for (name, p) in &proxies {
        let _ = writeln!(
            out,
            "netchaos_connections_total{{proxy=\"{}\"}} {}",
            escape(name),
            p.total.load(Ordering::Relaxed)
        );
    }
    family_into(
        &mut out,
        "netchaos_bytes_total",
        "counter",
        "Bytes delivered, by proxy and direction.",
    );
    for (name, p) in &proxies {
        for (i, dir) in ["upstream", "downstream"].iter().enumerate() {
            let _ = writeln!(
                out,
                "netchaos_bytes_total{{proxy=\"{}\",direction=\"{dir}\"}} {}",
                escape(name),
                p.bytes[i].load(Ordering::Relaxed)
            );
        }
    }
    family_into(
        &mut out,
        "netchaos_faults_injected_total",
        "counter",
        "Faults that took effect, by rule and kind.",
    );
    for ((rule, kind), n) in stats.faults.lock().expect("stats lock").iter() {
        let _ = writeln!(
            out,
            "netchaos_faults_injected_total{{rule=\"{}\",fault=\"{kind}\"}} {n}",
            escape(rule)
        );
    }
    family_into(
        &mut out,
        "netchaos_relay_errors_total",
        "counter",
        "Relay errors (not injected faults), by kind.",
    );
    for (kind, n) in stats.errors.lock().expect("stats lock").iter() {
        let _ = writeln!(out, "netchaos_relay_errors_total{{kind=\"{kind}\"}} {n}");
    }
    family_into(
        &mut out,
        "netchaos_listener_pauses_total",
        "counter",
        "Times a listener stopped listening (new connections refused at connect), by reason: limit (--max-connections) or resources (out of descriptors or memory).",
    );
    for (reason, n) in stats.pauses.lock().expect("stats lock").iter() {
        let _ = writeln!(
            out,
            "netchaos_listener_pauses_total{{reason=\"{reason}\"}} {n}"
        );
    }
    family_into(
        &mut out,
        "netchaos_connections_refused_total",
        "counter",
        "Connections refused at the SYN because of the connection limit.",
    );
    let _ = writeln!(
        out,
        "netchaos_connections_refused_total{{reason=\"limit\"}} {}",
        stats.refused_at_limit.load(Ordering::Relaxed)
    );
    family_into(
        &mut out,
        "netchaos_dns_queries_dropped_total",
        "counter",
        "DNS queries the forwarder dropped, by reason: malformed (not a standard query) or busy (too many in flight).",
    );
    for why in crate::events::DnsRefusal::ALL {
        let _ = writeln!(
            out,
            "netchaos_dns_queries_dropped_total{{reason=\"{}\"}} {}",
            why.as_str(),
            stats.dns_refused[why as usize].load(Ordering::Relaxed)
        );
    }
    family_into(
        &mut out,
        "netchaos_connections_by_path_total",
        "counter",
        "Connections by the path their bytes took: splice (in the kernel, no fault on the bytes), pipeline (stream faults), http or https (the HTTP layer).",
    );
    for (path, n) in stats.paths.lock().expect("stats lock").iter() {
        let _ = writeln!(
            out,
            "netchaos_connections_by_path_total{{path=\"{path}\"}} {n}"
        );
    }
    family_into(
        &mut out,
        "netchaos_http_requests_total",
        "counter",
        "HTTP requests the HTTP layer read.",
    );
    let _ = writeln!(
        out,
        "netchaos_http_requests_total {}",
        stats.http_requests.load(Ordering::Relaxed)
    );
    family_into(
        &mut out,
        "netchaos_http_faults_total",
        "counter",
        "HTTP faults applied to requests, by fault and status answered (0: none).",
    );
    for ((fault, status), n) in stats.http_faulted.lock().expect("stats lock").iter() {
        let _ = writeln!(
            out,
            "netchaos_http_faults_total{{fault=\"{fault}\",status=\"{status}\"}} {n}"
        );
    }
    family_into(
        &mut out,
        "netchaos_event_log_errors_total",
        "counter",
        "Event lines that could not be written.",
    );
    let _ = writeln!(
        out,
        "netchaos_event_log_errors_total {}",
        stats.log_errors.load(Ordering::Relaxed)
    );
    out
}

fn family_into(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Escapes a label value (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_escaped_labels() {
        let stats = Stats::default();
        stats.proxy("we\"ird").total.fetch_add(3, Ordering::Relaxed);
        stats
            .faults
            .lock()
            .unwrap()
            .insert(("r".into(), "latency"), 2);
        let text = render(&stats);
        assert!(
            text.contains("netchaos_connections_total{proxy=\"we\\\"ird\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("netchaos_faults_injected_total{rule=\"r\",fault=\"latency\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE netchaos_bytes_total counter"),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("netchaos_"), "{line}");
        }
    }
}
