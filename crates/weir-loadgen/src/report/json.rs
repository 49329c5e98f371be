//! Machine-readable results, one object per run. Counts are integers, times carry their unit in
//! the name, and no value appears twice: the target, when it ran and for how long, the load's
//! shape (connections, threads, rate), what came back, latency, errors and statuses.

use crate::run::RunResult;

pub fn value(r: &RunResult) -> serde_json::Value {
    let h = &r.stats.latency;
    let ms = |us: f64| us / 1000.0;
    let q = |p: f64| ms(h.value_at_quantile(p) as f64);
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let e = &r.stats.errors;
    let statuses: serde_json::Map<String, serde_json::Value> = r
        .stats
        .statuses
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    let started = r
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    serde_json::json!({
        "target": r.options.target.name,
        "url": r.options.target.url,
        "timestamp": String::from_utf8_lossy(&weir_http::date::rfc3339(started.as_secs(), started.subsec_millis())),
        "duration_seconds": r.elapsed.as_secs_f64(),
        "connections": r.options.connections,
        "threads": r.options.threads.clamp(1, r.options.connections.max(1)),
        "rate_per_second": r.options.rate,
        "pipeline": r.options.pipeline,
        "requests": r.stats.responses,
        "requests_per_second": r.stats.responses as f64 / secs,
        "bytes": r.stats.bytes,
        "body_bytes": r.stats.body_bytes,
        "tls_handshakes": r.stats.handshakes,
        "tls_resumed": r.stats.resumed,
        "handshakes_per_second": r.handshakes_per_sec(),
        "protocol": if r.options.h2 { "h2" } else { "http/1.1" },
        "streams": r.options.streams,
        "bytes_per_second": r.stats.bytes as f64 / secs,
        "latency_ms": {
            "min": ms(h.min() as f64),
            "mean": ms(h.mean()),
            "stddev": ms(h.stdev()),
            "max": ms(h.max() as f64),
            "p30": q(0.30),
            "p50": q(0.50),
            "p75": q(0.75),
            "p90": q(0.90),
            "p99": q(0.99),
            "p99_99": q(0.9999),
        },
        "errors": {
            "connect": e.connect,
            "read": e.read,
            "write": e.write,
            "timeout": e.timeout,
            "status": e.status,
        },
        "statuses": statuses,
    })
}

/// All runs as a JSON array.
pub fn render(runs: &[RunResult]) -> String {
    serde_json::Value::Array(runs.iter().map(value).collect()).to_string()
}
