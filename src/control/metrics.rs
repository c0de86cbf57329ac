//! `GET /metrics`: the counters in Prometheus's text format — netchaos's
//! own series (`netchaos_…`), Toxiproxy's per-proxy byte counters
//! (`toxiproxy_proxy_{received,sent}_bytes_total` with its labels, so that
//! dashboards and checks written for Toxiproxy keep working), and with
//! `--runtime-metrics` the process's (`process_…`, and the `go_goroutines`
//! and `go_info` that Toxiproxy's checks look for, counting tasks).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::events::Stats;

/// What `/metrics` shows beyond netchaos's own series.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extra {
    /// The process's series (`-runtime-metrics`).
    pub runtime: bool,
}

/// Renders the counters.
pub(crate) fn render(stats: &Stats, extra: &Extra) -> String {
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
    for ((rule, kind), count) in stats.faults.lock().expect("stats lock").iter() {
        let n = count.hits;
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
        "netchaos_connections_abandoned_total",
        "counter",
        "Connection attempts their client gave up before the handshake completed: no upstream dialled, or the one dialled closed unused.",
    );
    let _ = writeln!(
        out,
        "netchaos_connections_abandoned_total {}",
        stats.abandoned.load(Ordering::Relaxed)
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
        "Connections by the path their bytes took: splice (the fast path: no fault on the bytes), pipeline (stream faults), http or https (the HTTP layer).",
    );
    for (path, n) in stats.paths.lock().expect("stats lock").iter() {
        let _ = writeln!(
            out,
            "netchaos_connections_by_path_total{{path=\"{path}\"}} {n}"
        );
    }
    counter_into(
        &mut out,
        "netchaos_http_requests_total",
        "HTTP requests the HTTP layer read.",
        stats.http_requests.load(Ordering::Relaxed),
    );
    counter_into(
        &mut out,
        "netchaos_http2_upstream_redials_total",
        "HTTP/2 upstream connections dialled again after their GOAWAY.",
        stats.upstream_redials.load(Ordering::Relaxed),
    );
    family_into(
        &mut out,
        "netchaos_http_faults_total",
        "counter",
        "HTTP faults applied to requests, by fault and status answered (0: none).",
    );
    for ((fault, status, grpc), n) in stats.http_faulted.lock().expect("stats lock").iter() {
        let grpc = grpc.map_or(String::new(), |g| format!(",grpc_status=\"{g}\""));
        let _ = writeln!(
            out,
            "netchaos_http_faults_total{{fault=\"{fault}\",status=\"{status}\"{grpc}}} {n}"
        );
    }
    counter_into(
        &mut out,
        "netchaos_dns_queries_total",
        "DNS queries of the namespace the DNS layer saw (retransmissions not counted).",
        stats.dns_queries.load(Ordering::Relaxed),
    );
    family_into(
        &mut out,
        "netchaos_dns_faults_total",
        "counter",
        "DNS faults applied to queries, by fault.",
    );
    for (fault, n) in stats.dns_faulted.lock().expect("stats lock").iter() {
        let _ = writeln!(out, "netchaos_dns_faults_total{{fault=\"{fault}\"}} {n}");
    }
    for (name, kind, index) in [
        ("toxiproxy_proxy_received_bytes_total", "received", 0),
        ("toxiproxy_proxy_sent_bytes_total", "sent", 1),
    ] {
        family_into(
            &mut out,
            name,
            "counter",
            &format!("Bytes {kind} by the proxy, by direction (Toxiproxy's series and labels)."),
        );
        for (proxy, p) in &proxies {
            let Some((listener, upstream)) = p.labels.lock().expect("stats lock").clone() else {
                continue;
            };
            for dir in [
                crate::fault::Direction::Downstream,
                crate::fault::Direction::Upstream,
            ] {
                let n = if index == 0 {
                    p.received[dir.index()].load(Ordering::Relaxed)
                } else {
                    p.bytes[dir.index()].load(Ordering::Relaxed)
                };
                let _ = writeln!(
                    out,
                    "{name}{{direction=\"{}\",listener=\"{}\",proxy=\"{}\",upstream=\"{}\"}} {n}",
                    dir.as_str(),
                    escape(&listener),
                    escape(proxy),
                    escape(&upstream),
                );
            }
        }
    }
    let (out_now, limit, misses) = crate::relay::fast::bulk_buffers();
    family_into(
        &mut out,
        "netchaos_relay_bulk_buffers",
        "gauge",
        "The fast path's bulk buffers out now (held by backed-up directions, or pooled).",
    );
    let _ = writeln!(out, "netchaos_relay_bulk_buffers {out_now}");
    family_into(
        &mut out,
        "netchaos_relay_bulk_buffers_limit",
        "gauge",
        "The most bulk buffers out at once.",
    );
    let _ = writeln!(out, "netchaos_relay_bulk_buffers_limit {limit}");
    family_into(
        &mut out,
        "netchaos_relay_bulk_buffer_misses_total",
        "counter",
        "Bulk reads that found every bulk buffer out, and were carried in small copies.",
    );
    let _ = writeln!(out, "netchaos_relay_bulk_buffer_misses_total {misses}");
    let (used, limit, refused) = crate::http::budget::usage();
    family_into(
        &mut out,
        "netchaos_http_memory_bytes",
        "gauge",
        "Bytes the HTTP layer holds in its memory budget now (heads, bodies held whole, bytes passed on and not yet written).",
    );
    let _ = writeln!(out, "netchaos_http_memory_bytes {used}");
    family_into(
        &mut out,
        "netchaos_http_memory_limit_bytes",
        "gauge",
        "The HTTP layer's memory budget (NETCHAOS_HTTP_MEMORY).",
    );
    let _ = writeln!(out, "netchaos_http_memory_limit_bytes {limit}");
    family_into(
        &mut out,
        "netchaos_http_memory_refusals_total",
        "counter",
        "Heads answered 431, or bodies not held whole, for want of budget.",
    );
    let _ = writeln!(out, "netchaos_http_memory_refusals_total {refused}");
    if extra.runtime {
        runtime_into(&mut out);
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
    family_into(
        &mut out,
        "netchaos_event_log_dropped_total",
        "counter",
        "Event lines counted but not written: the log reached its size (--events-max).",
    );
    let _ = writeln!(
        out,
        "netchaos_event_log_dropped_total {}",
        stats.log_dropped.load(Ordering::Relaxed)
    );
    out
}

/// The process's own series, from `/proc/self`.
fn runtime_into(out: &mut String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let max_fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(0, |(soft, _)| soft);
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces).
    let after: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let num = |i: usize| {
        after
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let cpu = (num(11) + num(12)) / ticks;
    let boot = std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    let start = boot + num(19) / ticks;
    let tasks = tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_alive_tasks());
    for (name, kind, help, value) in [
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            format!("{cpu}"),
        ),
        (
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            fds.to_string(),
        ),
        (
            "process_max_fds",
            "gauge",
            "The open-files limit.",
            max_fds.to_string(),
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory, in bytes.",
            (field("VmRSS:") * 1024).to_string(),
        ),
        (
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory, in bytes.",
            (field("VmSize:") * 1024).to_string(),
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the epoch, in seconds.",
            format!("{start}"),
        ),
        // Toxiproxy's runtime series, for the checks that look for them:
        // netchaos is not Go, so these count its tasks and name netchaos.
        (
            "go_goroutines",
            "gauge",
            "Tasks alive in netchaos's runtime (netchaos is not written in Go).",
            tasks.to_string(),
        ),
    ] {
        family_into(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    family_into(
        out,
        "go_info",
        "gauge",
        "What runs here (netchaos, not Go).",
    );
    let _ = writeln!(
        out,
        "go_info{{version=\"netchaos {}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
}

fn family_into(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A counter family of one unlabelled series.
fn counter_into(out: &mut String, name: &str, help: &str, value: u64) {
    family_into(out, name, "counter", help);
    let _ = writeln!(out, "{name} {value}");
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
        stats.faults.lock().unwrap().insert(
            ("r".into(), "latency"),
            crate::events::FaultCount {
                hits: 2,
                ..Default::default()
            },
        );
        let text = render(&stats, &Extra::default());
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
        stats.label_proxy("p", "127.0.0.1:20000", "localhost:20002");
        stats.proxy("p").bytes[1].fetch_add(7, Ordering::Relaxed);
        let text = render(&stats, &Extra { runtime: true });
        assert!(
            text.contains("toxiproxy_proxy_sent_bytes_total{direction=\"downstream\",listener=\"127.0.0.1:20000\",proxy=\"p\",upstream=\"localhost:20002\"} 7"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("go_goroutines ")),
            "{text}"
        );
        assert!(text.lines().any(|l| l.starts_with("go_info{")), "{text}");
    }
}
