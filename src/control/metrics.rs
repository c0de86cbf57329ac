//! `GET /metrics`: the counters, encoded by prometheus-client from a
//! registry built per scrape — netchaos's own series (`netchaos_…`),
//! Toxiproxy's per-proxy byte counters
//! (`toxiproxy_proxy_{received,sent}_bytes_total` with its labels, so that
//! dashboards and checks written for Toxiproxy keep working), and with
//! `--runtime-metrics` the process's (`process_…`, and the `go_goroutines`
//! and `go_info` that Toxiproxy's checks look for, counting tasks). In
//! OpenMetrics when the scraper asks for it, else in Prometheus's text
//! format 0.0.4, as Toxiproxy answers.
//!
//! The counters themselves are the relay's atomics ([`Stats`]), which the
//! summary reads too; a [`Collector`] reads them at each scrape, and the
//! crate writes names, types and the `# EOF`. A counter is declared
//! without its `_total`, which the encoder adds.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::events::{Events, Stats};

/// The content type of an OpenMetrics answer (a scraper that asks for it:
/// Prometheus does).
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of Prometheus's text format, 0.0.4: what Toxiproxy
/// serves, and what `/metrics` answers a plain request with.
pub(crate) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a request's `Accept` asks for OpenMetrics (a media range of
/// it not refused with `q=0`).
pub(crate) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            parts.next() == Some("application/openmetrics-text")
                && !parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                })
        })
    })
}

/// What `/metrics` shows beyond netchaos's own series.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Extra {
    /// The process's series (`-runtime-metrics`).
    pub runtime: bool,
}

/// Renders the counters: OpenMetrics, or else Prometheus's text format.
pub(crate) fn render(events: Arc<Events>, extra: &Extra, openmetrics: bool) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        events,
        extra: *extra,
    }));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    if openmetrics {
        out
    } else {
        prometheus_text(&out)
    }
}

/// OpenMetrics text as Prometheus's text format 0.0.4: the same samples,
/// a counter family named as its samples (`# TYPE x_total counter`, as
/// Toxiproxy's Go client writes it — a 0.0.4 parser takes `x_total`
/// samples under `# TYPE x` for untyped ones), and no `# EOF`.
fn prometheus_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len() + 16 * counters.len());
    for line in om.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((p, rest))
                if rest
                    .split_once(' ')
                    .is_some_and(|(name, _)| counters.contains(name)) =>
            {
                let (name, tail) = rest.split_once(' ').expect("checked");
                out.push_str(&format!("{p}{name}_total {tail}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// One scrape's view of the counters.
struct Scrape {
    events: Arc<Events>,
    extra: Extra,
}

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrape")
            .field("extra", &self.extra)
            .finish()
    }
}

type Labels = Vec<(&'static str, String)>;

/// A family's series, each with its labels.
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    series: impl IntoIterator<Item = (Labels, M)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    let mut series = series.into_iter().peekable();
    if series.peek().is_some_and(|(l, _)| l.is_empty()) {
        // One series of its own, without labels.
        let (_, metric) = series.next().expect("peeked");
        return metric.encode(m);
    }
    for (labels, metric) in series {
        {
            // The crate writes label values as they are
            // (prometheus/client_rust#151), and a proxy's name is the
            // API client's: escaped here, as both formats require.
            let labels: Labels = labels.into_iter().map(|(k, v)| (k, escape(&v))).collect();
            metric.encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// Escapes a label value (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn counters(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    family(
        enc,
        name,
        help,
        MetricType::Counter,
        series.into_iter().map(|(l, v)| (l, ConstCounter::new(v))),
    )
}

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> fmt::Result {
    counters(enc, name, help, [(vec![], v)])
}

fn gauges(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, i64)>,
) -> fmt::Result {
    family(
        enc,
        name,
        help,
        MetricType::Gauge,
        series.into_iter().map(|(l, v)| (l, ConstGauge::new(v))),
    )
}

fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> fmt::Result {
    gauges(enc, name, help, [(vec![], saturate(v))])
}

/// A gauge's value (the crate's gauges are signed): past `i64::MAX`, that.
fn saturate(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let stats: &Stats = &self.events.stats;
        let enc = &mut enc;
        let proxies: Vec<_> = stats
            .proxies
            .lock()
            .expect("stats lock")
            .iter()
            .map(|(n, p)| (n.clone(), p.clone()))
            .collect();
        let by_proxy = |f: &dyn Fn(&crate::events::ProxyStats) -> u64| {
            proxies
                .iter()
                .map(|(n, p)| (vec![("proxy", n.clone())], f(p)))
                .collect::<Vec<_>>()
        };
        gauges(
            enc,
            "netchaos_connections_open",
            "Connections open now, by proxy.",
            by_proxy(&|p| load(&p.open))
                .into_iter()
                .map(|(l, v)| (l, saturate(v))),
        )?;
        counters(
            enc,
            "netchaos_connections",
            "Connections accepted (or refused at the SYN), by proxy.",
            by_proxy(&|p| load(&p.total)),
        )?;
        counters(
            enc,
            "netchaos_bytes",
            "Bytes delivered, by proxy and direction.",
            proxies.iter().flat_map(|(n, p)| {
                ["upstream", "downstream"]
                    .into_iter()
                    .enumerate()
                    .map(move |(i, dir)| {
                        (
                            vec![("proxy", n.clone()), ("direction", dir.to_string())],
                            load(&p.bytes[i]),
                        )
                    })
            }),
        )?;
        let faults: Vec<_> = stats
            .faults
            .lock()
            .expect("stats lock")
            .iter()
            .map(|((rule, kind), c)| {
                (
                    vec![("rule", rule.clone()), ("fault", kind.to_string())],
                    c.hits,
                )
            })
            .collect();
        counters(
            enc,
            "netchaos_faults_injected",
            "Faults that took effect, by rule and kind.",
            faults,
        )?;
        let by_key = |m: &std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
                      key: &'static str| {
            m.lock()
                .expect("stats lock")
                .iter()
                .map(|(k, n)| (vec![(key, k.to_string())], *n))
                .collect::<Vec<_>>()
        };
        counters(
            enc,
            "netchaos_relay_errors",
            "Relay errors (not injected faults), by kind.",
            by_key(&stats.errors, "kind"),
        )?;
        counters(
            enc,
            "netchaos_listener_pauses",
            "Times a listener stopped listening (new connections refused at connect), by reason: limit (--max-connections) or resources (out of descriptors or memory).",
            by_key(&stats.pauses, "reason"),
        )?;
        counters(
            enc,
            "netchaos_connections_refused",
            "Connections refused at the SYN because of the connection limit.",
            [(
                vec![("reason", "limit".to_string())],
                load(&stats.refused_at_limit),
            )],
        )?;
        counter(
            enc,
            "netchaos_connections_abandoned",
            "Connection attempts their client gave up before the handshake completed: no upstream dialled, or the one dialled closed unused.",
            load(&stats.abandoned),
        )?;
        counters(
            enc,
            "netchaos_dns_queries_dropped",
            "DNS queries the forwarder dropped, by reason: malformed (not a standard query) or busy (too many in flight).",
            crate::events::DnsRefusal::ALL.map(|why| {
                (
                    vec![("reason", why.as_str().to_string())],
                    load(&stats.dns_refused[why as usize]),
                )
            }),
        )?;
        counters(
            enc,
            "netchaos_connections_by_path",
            "Connections by the path their bytes took: splice (the fast path: no fault on the bytes), pipeline (stream faults), http or https (the HTTP layer).",
            by_key(&stats.paths, "path"),
        )?;
        counter(
            enc,
            "netchaos_http_requests",
            "HTTP requests the HTTP layer read.",
            load(&stats.http_requests),
        )?;
        counter(
            enc,
            "netchaos_http2_upstream_redials",
            "HTTP/2 upstream connections dialled again after their GOAWAY.",
            load(&stats.upstream_redials),
        )?;
        let http_faults: Vec<_> = stats
            .http_faulted
            .lock()
            .expect("stats lock")
            .iter()
            .map(|((fault, status, grpc), n)| {
                let mut l = vec![("fault", fault.to_string()), ("status", status.to_string())];
                if let Some(g) = grpc {
                    l.push(("grpc_status", g.to_string()));
                }
                (l, *n)
            })
            .collect();
        counters(
            enc,
            "netchaos_http_faults",
            "HTTP faults applied to requests, by fault and status answered (0: none).",
            http_faults,
        )?;
        counter(
            enc,
            "netchaos_dns_queries",
            "DNS queries of the namespace the DNS layer saw (retransmissions not counted).",
            load(&stats.dns_queries),
        )?;
        counters(
            enc,
            "netchaos_dns_faults",
            "DNS faults applied to queries, by fault.",
            by_key(&stats.dns_faulted, "fault"),
        )?;
        for (name, kind, received) in [
            ("toxiproxy_proxy_received_bytes", "received", true),
            ("toxiproxy_proxy_sent_bytes", "sent", false),
        ] {
            let mut series = Vec::new();
            for (proxy, p) in &proxies {
                let Some((listener, upstream)) = p.labels.lock().expect("stats lock").clone()
                else {
                    continue;
                };
                for dir in [
                    crate::fault::Direction::Downstream,
                    crate::fault::Direction::Upstream,
                ] {
                    let n = if received {
                        load(&p.received[dir.index()])
                    } else {
                        load(&p.bytes[dir.index()])
                    };
                    series.push((
                        vec![
                            ("direction", dir.as_str().to_string()),
                            ("listener", listener.clone()),
                            ("proxy", proxy.clone()),
                            ("upstream", upstream.clone()),
                        ],
                        n,
                    ));
                }
            }
            counters(
                enc,
                name,
                &format!(
                    "Bytes {kind} by the proxy, by direction (Toxiproxy's series and labels)."
                ),
                series,
            )?;
        }
        let (out_now, limit, misses) = crate::relay::fast::bulk_buffers();
        gauge(
            enc,
            "netchaos_relay_bulk_buffers",
            "The fast path's bulk buffers out now (held by backed-up directions, or pooled).",
            out_now as u64,
        )?;
        gauge(
            enc,
            "netchaos_relay_bulk_buffers_limit",
            "The most bulk buffers out at once.",
            limit as u64,
        )?;
        counter(
            enc,
            "netchaos_relay_bulk_buffer_misses",
            "Bulk reads that found every bulk buffer out, and were carried in small copies.",
            misses,
        )?;
        let (used, limit, refused) = crate::http::budget::usage();
        gauge(
            enc,
            "netchaos_http_memory_bytes",
            "Bytes the HTTP layer holds in its memory budget now (heads, bodies held whole, bytes passed on and not yet written).",
            used as u64,
        )?;
        gauge(
            enc,
            "netchaos_http_memory_limit_bytes",
            "The HTTP layer's memory budget (NETCHAOS_HTTP_MEMORY).",
            limit as u64,
        )?;
        counter(
            enc,
            "netchaos_http_memory_refusals",
            "Heads answered 431, or bodies not held whole, for want of budget.",
            refused,
        )?;
        if self.extra.runtime {
            runtime(enc)?;
        }
        counter(
            enc,
            "netchaos_event_log_errors",
            "Event lines that could not be written.",
            load(&stats.log_errors),
        )?;
        counter(
            enc,
            "netchaos_event_log_dropped",
            "Event lines counted but not written: the log reached its size (--events-max).",
            load(&stats.log_dropped),
        )
    }
}

/// The process's own series, from `/proc/self`.
fn runtime(enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
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
    family(
        enc,
        "process_cpu_seconds",
        "User and system CPU time spent, in seconds.",
        MetricType::Counter,
        [(vec![], ConstCounter::new(cpu))],
    )?;
    gauge(
        enc,
        "process_open_fds",
        "Open file descriptors.",
        fds as u64,
    )?;
    gauge(enc, "process_max_fds", "The open-files limit.", max_fds)?;
    gauge(
        enc,
        "process_resident_memory_bytes",
        "Resident memory, in bytes.",
        field("VmRSS:") * 1024,
    )?;
    gauge(
        enc,
        "process_virtual_memory_bytes",
        "Virtual memory, in bytes.",
        field("VmSize:") * 1024,
    )?;
    family(
        enc,
        "process_start_time_seconds",
        "Start time of the process since the epoch, in seconds.",
        MetricType::Gauge,
        [(vec![], ConstGauge::new(start))],
    )?;
    // Toxiproxy's runtime series, for the checks that look for them:
    // netchaos is not Go, so these count its tasks and name netchaos.
    gauge(
        enc,
        "go_goroutines",
        "Tasks alive in netchaos's runtime (netchaos is not written in Go).",
        tasks as u64,
    )?;
    gauges(
        enc,
        "go_info",
        "What runs here (netchaos, not Go).",
        [(
            vec![("version", format!("netchaos {}", env!("CARGO_PKG_VERSION")))],
            1,
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_escaped_labels() {
        let events = Arc::new(Events::in_memory());
        let stats = &events.stats;
        stats.proxy("we\"ird").total.fetch_add(3, Ordering::Relaxed);
        stats.faults.lock().unwrap().insert(
            ("r".into(), "latency"),
            crate::events::FaultCount {
                hits: 2,
                ..Default::default()
            },
        );
        let om = render(events.clone(), &Extra::default(), true);
        assert_eq!(om.lines().last(), Some("# EOF"), "{om}");
        assert!(om.contains("# TYPE netchaos_bytes counter"), "{om}");
        let text = render(events.clone(), &Extra::default(), false);
        // The same samples, each counter family named as Toxiproxy's are.
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(String::from)
                .collect()
        };
        assert_eq!(samples(&om), samples(&text));
        assert!(!text.contains("# EOF"), "{text}");
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
        assert!(
            text.contains("# TYPE netchaos_connections_open gauge"),
            "{text}"
        );
        assert!(
            text.contains("netchaos_connections_abandoned_total 0"),
            "{text}"
        );
        assert!(
            text.contains("# HELP netchaos_bytes_total Bytes delivered"),
            "{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("netchaos_"), "{line}");
            assert!(!line.contains("_total_total"), "{line}");
        }
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0,text/plain"
        )));
        assert!(!wants_openmetrics(None));
        stats.label_proxy("p", "127.0.0.1:20000", "localhost:20002");
        stats.proxy("p").bytes[1].fetch_add(7, Ordering::Relaxed);
        let text = render(events, &Extra { runtime: true }, false);
        assert!(
            text.contains("# TYPE toxiproxy_proxy_sent_bytes_total counter"),
            "{text}"
        );
        assert!(
            text.contains("toxiproxy_proxy_sent_bytes_total{direction=\"downstream\",listener=\"127.0.0.1:20000\",proxy=\"p\",upstream=\"localhost:20002\"} 7"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("go_goroutines ")),
            "{text}"
        );
        assert!(text.lines().any(|l| l.starts_with("go_info{")), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("process_cpu_seconds_total ")),
            "{text}"
        );
    }
}
