//! `GET /metrics`: every worker's counters summed, the shared state (cache zones, upstream
//! health) read as it is, and the process's CPU and memory, in the OpenMetrics text format that
//! Prometheus scrapes. `prometheus_client` does the encoding; this file only gathers values.
//!
//! Names follow Prometheus conventions: `weir_` prefix, base units (seconds, bytes), `_total`
//! on counters (added by the encoder), and labels rather than names for dimensions.

use std::fmt::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::metrics::totals::{HistTotals, Totals};
use crate::metrics::{self, CloseReason, Counter, Metrics, DURATION_BUCKETS};
use crate::runtime::RuntimeConfig;

/// The OpenMetrics content type, served when the scraper asks for it (Prometheus does).
pub const OPENMETRICS: &[u8] = b"application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, served otherwise (curl, `promtool check metrics`).
pub const TEXT: &[u8] = b"text/plain; version=0.0.4; charset=utf-8";

/// The scrape, in OpenMetrics when `accept` (the request's `Accept`) names it, else in the
/// Prometheus text format: (content type, body).
pub fn scrape(
    cfg: &Arc<RuntimeConfig>,
    generation: u64,
    accept: Option<&[u8]>,
) -> (&'static [u8], String) {
    let open = render(cfg, &cfg.registry.metrics, generation);
    let wants_openmetrics = accept.is_some_and(|a| {
        a.windows(b"openmetrics".len())
            .any(|w| w.eq_ignore_ascii_case(b"openmetrics"))
    });
    if wants_openmetrics {
        (OPENMETRICS, open)
    } else {
        (TEXT, to_text_format(&open))
    }
}

/// OpenMetrics → Prometheus text 0.0.4: a counter's `# HELP`/`# TYPE` name the `_total`
/// sample, and there is no `# EOF`. Everything else is the same.
fn to_text_format(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len() + counters.len() * 16);
    for line in open.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                let _ = writeln!(out, "{p}{name}{total} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The scrape in OpenMetrics: `cfg` is the running config (its zones and upstreams),
/// `metrics` the counters.
pub fn render(cfg: &Arc<RuntimeConfig>, metrics: &Arc<Metrics>, generation: u64) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Scrape {
        cfg: cfg.clone(),
        metrics: metrics.clone(),
        generation,
    }));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        // Only a formatter error, which writing to a String never raises.
        let _ = writeln!(out, "# encoding failed: {e}");
    }
    out
}

#[derive(Debug)]
struct Scrape {
    cfg: Arc<RuntimeConfig>,
    metrics: Arc<Metrics>,
    generation: u64,
}

pub(super) type Labels = Vec<(&'static str, String)>;

/// Encodes one metric family from `(labels, value)` rows.
pub(super) fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: impl IntoIterator<Item = (Labels, M)>,
) -> fmt::Result {
    let mut m: MetricEncoder = enc.encode_descriptor(name, help, None, kind)?;
    let mut rows: Vec<(Labels, M)> = rows.into_iter().collect();
    if matches!(rows.as_slice(), [(labels, _)] if labels.is_empty()) {
        // One value without labels: `name 3`, not `name{} 3`.
        if let Some((_, value)) = rows.pop() {
            return value.encode(m);
        }
    }
    for (labels, value) in rows {
        value.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

pub(super) fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

pub(super) fn gauge(v: i64) -> ConstGauge<i64> {
    ConstGauge::new(v)
}

/// A histogram from its per-bucket (non-cumulative) counts and sum.
pub(super) struct Histogram {
    buckets: Vec<(f64, u64)>,
    count: u64,
    sum: f64,
}

impl Histogram {
    pub(super) fn of(h: &HistTotals) -> Histogram {
        Histogram {
            buckets: h
                .buckets
                .iter()
                .enumerate()
                // The encoder writes f64::MAX as `+Inf`.
                .map(|(i, n)| (DURATION_BUCKETS.get(i).copied().unwrap_or(f64::MAX), *n))
                .collect(),
            count: h.count(),
            sum: h.sum_ns as f64 / 1e9,
        }
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<()>(self.sum, self.count, &self.buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl prometheus_client::collector::Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let workers = self.metrics.workers();
        let totals = self.metrics.totals();
        self.http(&mut enc, &totals)?;
        self.connections(&mut enc, &workers)?;
        super::scrape_servers::families(&self.cfg, &totals, &mut enc)?;
        super::scrape_filters::families(&self.cfg, &mut enc)?;
        super::scrape_storage::families(&self.cfg, &mut enc)?;
        super::scrape_cluster::families(&self.cfg, &mut enc)?;
        self.cache(&mut enc)?;
        family(
            &mut enc,
            "weir_panics",
            "Panics caught: each closed the connection being served; the worker went on.",
            MetricType::Counter,
            [(Labels::new(), counter(crate::logs::PANICS.total()))],
        )?;
        family(
            &mut enc,
            "weir_access_log_dropped_lines",
            "Access log lines dropped because the log writer fell behind.",
            MetricType::Counter,
            [(
                Labels::new(),
                counter(self.metrics.log_dropped.load(Ordering::Relaxed)),
            )],
        )?;
        trace_export(&mut enc)?;
        kubernetes(&mut enc)?;
        family(
            &mut enc,
            "weir_config_reloads",
            "Configurations swapped in since start.",
            MetricType::Counter,
            [(Labels::new(), counter(self.generation))],
        )?;
        process(&mut enc)
    }
}

impl Scrape {
    fn http(&self, enc: &mut DescriptorEncoder, totals: &Totals) -> fmt::Result {
        let rows = totals.routes.iter().flat_map(|((listener, route), t)| {
            t.codes
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| {
                    (
                        vec![
                            ("listener", listener.clone()),
                            ("route", route.clone()),
                            ("code", (i + 100).to_string()),
                        ],
                        counter(*n),
                    )
                })
        });
        family(
            enc,
            "weir_http_requests",
            "Requests answered, by listener, route and status code.",
            MetricType::Counter,
            rows,
        )?;
        let rows = totals.routes.iter().flat_map(|((listener, route), t)| {
            t.grpc
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(code, n)| {
                    (
                        vec![
                            ("listener", listener.clone()),
                            ("route", route.clone()),
                            ("grpc_status", code.to_string()),
                        ],
                        counter(*n),
                    )
                })
        });
        family(
            enc,
            "weir_grpc_responses",
            "gRPC calls answered, by listener, route and grpc-status (the upstream's, or weir's own refusal's).",
            MetricType::Counter,
            rows,
        )?;
        let rows = totals.routes.iter().map(|((listener, route), t)| {
            (
                vec![("listener", listener.clone()), ("route", route.clone())],
                Histogram::of(&t.latency),
            )
        });
        family(
            enc,
            "weir_http_request_duration_seconds",
            "Time from a request's head to its response queued in full.",
            MetricType::Histogram,
            rows,
        )
    }

    fn connections(
        &self,
        enc: &mut DescriptorEncoder,
        workers: &[Arc<metrics::WorkerMetrics>],
    ) -> fmt::Result {
        let sum = |f: &dyn Fn(&metrics::WorkerMetrics) -> &Counter| -> u64 {
            workers.iter().map(|w| f(w).get()).sum()
        };
        let accepted = sum(&|w| &w.accepted);
        family(
            enc,
            "weir_connections_accepted",
            "Client connections accepted.",
            MetricType::Counter,
            [(Labels::new(), counter(accepted))],
        )?;
        let mut closed_all = 0;
        let rows: Vec<_> = CloseReason::ALL
            .iter()
            .map(|r| {
                let n = sum(&|w| &w.closed[*r as usize]);
                closed_all += n;
                (vec![("reason", r.as_str().to_string())], counter(n))
            })
            .collect();
        family(
            enc,
            "weir_connections_closed",
            "Client connections closed, by reason.",
            MetricType::Counter,
            rows,
        )?;
        let refused: Vec<_> = metrics::Refusal::ALL
            .iter()
            .map(|r| {
                let n = sum(&|w| &w.refused[*r as usize]);
                (vec![("reason", r.as_str().to_string())], counter(n))
            })
            .collect();
        family(
            enc,
            "weir_connections_refused",
            "Connections closed as soon as accepted: max_connections (or the admin budget) in use, or the descriptor limit.",
            MetricType::Counter,
            refused,
        )?;
        family(
            enc,
            "weir_connections_open",
            "Client connections open now.",
            MetricType::Gauge,
            [(
                Labels::new(),
                gauge(accepted.saturating_sub(closed_all) as i64),
            )],
        )?;
        // Per worker: how evenly SO_REUSEPORT spreads connections and requests
        // (`bench/scaling.sh`).
        let per_worker = |f: &dyn Fn(&metrics::WorkerMetrics) -> u64| -> Vec<_> {
            workers
                .iter()
                .enumerate()
                .map(|(i, w)| (vec![("worker", i.to_string())], counter(f(w))))
                .collect()
        };
        family(
            enc,
            "weir_worker_connections_accepted",
            "Client connections accepted, by worker.",
            MetricType::Counter,
            per_worker(&|w| w.accepted.get()),
        )?;
        family(
            enc,
            "weir_worker_requests",
            "Requests answered, by worker (every route's).",
            MetricType::Counter,
            per_worker(&|w| {
                metrics::lock(&w.routes)
                    .values()
                    .map(|r| r.codes.iter().map(|c| c.get()).sum::<u64>())
                    .sum()
            }),
        )?;
        family(
            enc,
            "weir_connections_parked",
            "Idle keep-alive connections parked outside a task now (open; counted in weir_connections_open too).",
            MetricType::Gauge,
            [(Labels::new(), gauge(sum(&|w| &w.parked) as i64))],
        )?;
        let rows: Vec<_> = metrics::TlsOutcome::ALL
            .iter()
            .map(|o| {
                let n = sum(&|w| &w.tls[*o as usize]);
                (vec![("result", o.label().to_string())], counter(n))
            })
            .collect();
        family(
            enc,
            "weir_tls_handshakes",
            "TLS handshakes, by result (full, resumed, failed, plaintext, timeout).",
            MetricType::Counter,
            rows,
        )?;
        family(
            enc,
            "weir_http2_abuse_closes",
            "HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM (floods, rapid reset).",
            MetricType::Counter,
            [(Labels::new(), counter(sum(&|w| &w.h2_abuse)))],
        )?;
        let rows: Vec<_> = crate::metrics::QuicEvent::ALL
            .iter()
            .map(|e| {
                let n = sum(&|w| &w.quic[*e as usize]);
                (vec![("event", e.label().to_string())], counter(n))
            })
            .collect();
        family(
            enc,
            "weir_http3_connections",
            "QUIC connection attempts, by event (accepted, retry, refused, shield, abuse).",
            MetricType::Counter,
            rows,
        )?;
        family(
            enc,
            "weir_http3_requests",
            "HTTP/3 request streams answered.",
            MetricType::Counter,
            [(Labels::new(), counter(sum(&|w| &w.h3_requests)))],
        )
    }

    fn cache(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        type Stat = fn(&weir_cache::store::Stats) -> &weir_cache::Striped;
        let counters: [(&str, &str, Stat); 8] = [
            ("hits", "Requests served from the store.", |s| &s.hits),
            ("misses", "Lookups that found nothing usable.", |s| {
                &s.misses
            }),
            (
                "stale",
                "Stale objects served (stale-while-revalidate, stale-if-error).",
                |s| &s.stale,
            ),
            (
                "revalidated",
                "Stale objects revalidated with a 304.",
                |s| &s.revalidated,
            ),
            ("stores", "Responses stored.", |s| &s.stores),
            ("evictions", "Objects evicted to make room.", |s| {
                &s.evictions
            }),
            (
                "coalesced",
                "Requests that waited for another request's fetch.",
                |s| &s.coalesced,
            ),
            ("purged", "Objects purged.", |s| &s.purged),
        ];
        let zones = &self.cfg.cache_zones;
        let zone = |name: &str| vec![("zone", name.to_string())];
        for (name, help, stat) in counters {
            family(
                enc,
                &format!("weir_cache_{name}"),
                help,
                MetricType::Counter,
                zones.iter().map(|z| {
                    (
                        zone(&z.name),
                        counter(stat(&z.store.stats).load(Ordering::Relaxed)),
                    )
                }),
            )?;
        }
        let usage: Vec<_> = zones.iter().map(|z| (z, z.store.usage())).collect();
        family(
            enc,
            "weir_cache_objects",
            "Objects stored.",
            MetricType::Gauge,
            usage
                .iter()
                .map(|(z, (o, _))| (zone(&z.name), gauge(*o as i64))),
        )?;
        family(
            enc,
            "weir_cache_bytes",
            "Bytes the stored objects occupy.",
            MetricType::Gauge,
            usage
                .iter()
                .map(|(z, (_, b))| (zone(&z.name), gauge(*b as i64))),
        )?;
        family(
            enc,
            "weir_cache_max_bytes",
            "The zone's max_size.",
            MetricType::Gauge,
            zones
                .iter()
                .map(|z| (zone(&z.name), gauge(z.store.limit() as i64))),
        )
    }
}

/// The standard `process_*` metrics, from `/proc/self`.
fn process(enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(p) = ProcStat::read() else {
        return Ok(());
    };
    let one = |v| [(Labels::new(), v)];
    family(
        enc,
        "process_cpu_seconds",
        "User and system CPU time spent, in seconds.",
        MetricType::Counter,
        [(Labels::new(), ConstCounter::new(p.cpu_seconds))],
    )?;
    family(
        enc,
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        MetricType::Gauge,
        one(gauge(p.rss_bytes)),
    )?;
    family(
        enc,
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        MetricType::Gauge,
        one(gauge(p.vsize_bytes)),
    )?;
    family(
        enc,
        "process_open_fds",
        "Open file descriptors.",
        MetricType::Gauge,
        one(gauge(p.open_fds)),
    )?;
    family(
        enc,
        "process_start_time_seconds",
        "Start time of the process since the Unix epoch, in seconds.",
        MetricType::Gauge,
        one(gauge(p.start_time_seconds)),
    )
}

/// What `/proc/self/stat` and `/proc/self/fd` say.
#[derive(Debug)]
pub struct ProcStat {
    pub cpu_seconds: f64,
    pub rss_bytes: i64,
    pub vsize_bytes: i64,
    pub open_fds: i64,
    pub start_time_seconds: i64,
}

impl ProcStat {
    pub fn read() -> Option<ProcStat> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        let ticks = sysconf(libc::_SC_CLK_TCK, 100) as f64;
        let page = sysconf(libc::_SC_PAGESIZE, 4096);
        // Indices are the stat(5) field numbers minus 3 (pid and comm are consumed).
        let utime = num(11)? as f64;
        let stime = num(12)? as f64;
        let start_ticks = num(19)? as f64;
        let vsize = num(20)?;
        let rss_pages = num(21)?;
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<i64>().ok())?;
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64);
        Some(ProcStat {
            cpu_seconds: (utime + stime) / ticks,
            rss_bytes: rss_pages * page,
            vsize_bytes: vsize,
            open_fds,
            start_time_seconds: boot + (start_ticks / ticks) as i64,
        })
    }
}

/// `sysconf(name)`, or `default` when the system does not say.
fn sysconf(name: libc::c_int, default: i64) -> i64 {
    // SAFETY: sysconf reads a constant of the running system; no memory is passed.
    #[allow(unsafe_code)]
    let v = unsafe { libc::sysconf(name) };
    if v > 0 {
        v
    } else {
        default
    }
}

/// The Kubernetes provider's counters (`metrics/kubernetes.rs`).
fn kubernetes(enc: &mut DescriptorEncoder) -> fmt::Result {
    use crate::metrics::kubernetes::{APPLIED, FAILED, LEFT_OUT, REBUILDS, SKIPPED};
    family(
        enc,
        "weir_kubernetes_rebuilds",
        "Bursts of cluster changes converted into a config (`skipped`: only objects no route names).",
        MetricType::Counter,
        [("converted", &REBUILDS), ("skipped", &SKIPPED)].map(|(what, n)| {
            (
                vec![("outcome", what.to_string())],
                counter(n.load(Ordering::Relaxed)),
            )
        }),
    )?;
    family(
        enc,
        "weir_kubernetes_reloads",
        "Configs from the cluster handed to the reload path, by outcome.",
        MetricType::Counter,
        [("applied", &APPLIED), ("failed", &FAILED)].map(|(what, n)| {
            (
                vec![("outcome", what.to_string())],
                counter(n.load(Ordering::Relaxed)),
            )
        }),
    )?;
    family(
        enc,
        "weir_kubernetes_objects_left_out",
        "Objects left out of the last rebuild: their config does not compile (each told by an event).",
        MetricType::Gauge,
        [(Labels::new(), gauge(LEFT_OUT.load(Ordering::Relaxed) as i64))],
    )
}

/// The span exporter's counters (`trace/export.rs`), process-wide: they outlive configs.
fn trace_export(enc: &mut DescriptorEncoder) -> fmt::Result {
    use crate::trace::export::{DROPPED_EXPORT, DROPPED_QUEUE, EXPORTED, REJECTED};
    family(
        enc,
        "weir_trace_spans_exported",
        "Spans the OTLP collector took.",
        MetricType::Counter,
        [(Labels::new(), counter(EXPORTED.load(Ordering::Relaxed)))],
    )?;
    family(
        enc,
        "weir_trace_spans_dropped",
        "Spans not exported: the queue was full, the export failed, or the collector rejected them.",
        MetricType::Counter,
        [
            ("queue_full", &DROPPED_QUEUE),
            ("export_failed", &DROPPED_EXPORT),
            ("rejected", &REJECTED),
        ]
        .map(|(reason, n)| {
            (
                vec![("reason", reason.to_string())],
                counter(n.load(Ordering::Relaxed)),
            )
        }),
    )
}
