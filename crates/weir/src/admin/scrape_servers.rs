//! The upstream server families of `/metrics`: what the workers counted per server (responses
//! by status class, a latency histogram, bytes, requests in flight) and the shared health state
//! (failures, desyncs, ejections, up, drained).

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::scrape::{counter, family, gauge, Histogram, Labels};
use crate::metrics::totals::{ServerTotals, Totals};
use crate::proxy::upstream::Server;
use crate::runtime::RuntimeConfig;

/// The status class labels, by `ServerMetrics::classes` index.
const CLASSES: [&str; 6] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx"];

pub(super) fn families(
    cfg: &RuntimeConfig,
    totals: &Totals,
    enc: &mut DescriptorEncoder,
) -> fmt::Result {
    let servers: Vec<(&str, &Server)> = cfg
        .upstreams
        .iter()
        .flat_map(|u| u.servers.iter().map(move |s| (u.name.as_str(), s)))
        .collect();
    let empty = ServerTotals::default();
    let counted = |u: &str, s: &Server| {
        totals
            .servers
            .get(&(u.to_string(), s.name.clone()))
            .unwrap_or(&empty)
    };
    let labels = |u: &str, s: &str| -> Labels {
        vec![("upstream", u.to_string()), ("server", s.to_string())]
    };
    family(
        enc,
        "weir_upstream_requests",
        "Requests sent to an upstream server (retries count once per server tried last).",
        MetricType::Counter,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), counter(counted(u, s).requests()))),
    )?;
    family(
        enc,
        "weir_upstream_responses",
        "Requests an upstream server served, by status class of the response sent (none: failed before one).",
        MetricType::Counter,
        servers.iter().flat_map(|(u, s)| {
            let t = counted(u, s);
            CLASSES.iter().zip(t.classes).map(|(class, n)| {
                let mut l = labels(u, &s.name);
                l.push(("class", class.to_string()));
                (l, counter(n))
            })
        }),
    )?;
    family(
        enc,
        "weir_upstream_request_duration_seconds",
        "Time from a request's head to its response queued in full, for requests an upstream server served.",
        MetricType::Histogram,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), Histogram::of(&counted(u, s).latency))),
    )?;
    family(
        enc,
        "weir_upstream_sent_bytes",
        "Response bytes sent to clients from an upstream server's responses (heads included).",
        MetricType::Counter,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), counter(counted(u, s).bytes_sent))),
    )?;
    family(
        enc,
        "weir_upstream_received_bytes",
        "Request body bytes received from clients for an upstream server.",
        MetricType::Counter,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), counter(counted(u, s).bytes_received))),
    )?;
    family(
        enc,
        "weir_upstream_in_flight",
        "Requests sent to an upstream server whose response is not relayed in full yet.",
        MetricType::Gauge,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), gauge(counted(u, s).in_flight as i64))),
    )?;
    family(
        enc,
        "weir_upstream_failures",
        "Failed attempts on an upstream server: connect errors, timeouts, resets, bad responses.",
        MetricType::Counter,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), counter(s.health.failures()))),
    )?;
    family(
        enc,
        "weir_upstream_desync",
        "Upstream connections closed instead of reused because bytes followed a complete response.",
        MetricType::Counter,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), counter(s.health.desyncs()))),
    )?;
    family(
        enc,
        "weir_upstream_ejections",
        "Times outlier detection ejected the server.",
        MetricType::Counter,
        servers.iter().map(|(u, s)| {
            let n = s.health.outlier.ejections.load(Ordering::Relaxed);
            (labels(u, &s.name), counter(n))
        }),
    )?;
    family(
        enc,
        "weir_upstream_server_drained",
        "1 when an operator drained the server through the admin API (no new requests).",
        MetricType::Gauge,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), gauge(s.health.drained() as i64))),
    )?;
    let now = crate::proxy::upstream::now_ms();
    family(
        enc,
        "weir_upstream_server_up",
        "1 when the server takes requests (active and passive health, not drained), 0 when not.",
        MetricType::Gauge,
        servers
            .iter()
            .map(|(u, s)| (labels(u, &s.name), gauge(s.health.is_up(now) as i64))),
    )
}
