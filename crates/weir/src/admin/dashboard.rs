//! `GET /dashboard.json`: what the dashboard page (`dashboard.html`) draws, in one answer, so
//! that its first paint already has figures. Rates and quantiles come from the server's own
//! samples (`metrics/history.rs`): per second over the last five minutes for the charts, and
//! over the last [`WINDOW`] for the tables (the counters now against the sample that old).
//! Totals are read from the same sums `/metrics` encodes (`metrics/totals.rs`), so the two
//! agree.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::metrics::history::{Counts, Sample, ZoneCounts};
use crate::runtime::RuntimeConfig;

/// The window of the tables' rates and quantiles.
pub const WINDOW: Duration = Duration::from_secs(10);

pub(super) fn dashboard(cfg: &RuntimeConfig, generation: u64) -> (u16, String) {
    let registry = &cfg.registry;
    let totals = registry.metrics.totals();
    let zone_counts: BTreeMap<String, ZoneCounts> = cfg
        .cache_zones
        .iter()
        .map(|z| (z.name.clone(), ZoneCounts::of(&z.store.stats)))
        .collect();
    let now = Sample::of(&totals, zone_counts);
    let samples = registry.history.samples();
    // The newest sample at least WINDOW old, else the oldest (weir started less than WINDOW
    // ago), else nothing yet: then every counter started at zero when the process did.
    let base = samples
        .iter()
        .rev()
        .find(|s| now.at.duration_since(s.at) >= WINDOW)
        .or(samples.first());
    let seconds = base
        .map_or_else(
            || now.at.duration_since(registry.process.started),
            |b| now.at.duration_since(b.at),
        )
        .as_secs_f64()
        .max(0.001);
    let rate = |n: u64| n as f64 / seconds;
    let windowed = |now: &Counts, before: Option<&Counts>| -> Value {
        let d = before.map_or_else(|| now.clone(), |b| now.since(b));
        json!({
            "requests": now.requests, "4xx": now.c4xx, "5xx": now.c5xx,
            "rps": rate(d.requests), "4xx_rate": rate(d.c4xx), "5xx_rate": rate(d.c5xx),
            "p50": quantile(&d, 0.5), "p99": quantile(&d, 0.99), "mean": mean(&d),
        })
    };
    let traffic = windowed(&now.traffic(), base.map(Sample::traffic).as_ref());
    let now = &now;
    let routes: Vec<Value> = cfg
        .listeners
        .iter()
        .filter(|l| !l.admin)
        .flat_map(|l| {
            let listener = l.shown();
            let zone = |i: usize| {
                cfg.cache_zones
                    .get(i)
                    .map_or_else(String::new, |z| z.name.clone())
            };
            // Requests no route matched (404, 405) first: HAProxy's stats page shows them too.
            let unmatched = {
                let key = (listener.clone(), "-".to_string());
                let counts = now.routes.get(&key).cloned().unwrap_or_default();
                let mut v = windowed(&counts, base.and_then(|b| b.routes.get(&key)));
                v["listener"] = json!(listener);
                v["route"] = json!("(no route matched)");
                v["match"] = json!("-");
                v["methods"] = Value::Null;
                v["action"] = json!("404 / 405");
                v
            };
            std::iter::once(unmatched).chain(l.routes.iter().map(move |r| {
                let key = (listener.clone(), r.name.clone());
                let counts = now.routes.get(&key).cloned().unwrap_or_default();
                let mut v = windowed(&counts, base.and_then(|b| b.routes.get(&key)));
                v["listener"] = json!(listener);
                v["route"] = json!(r.name);
                v["match"] = json!(r.matcher.describe());
                v["methods"] = json!(r
                    .methods
                    .as_ref()
                    .map(|m| m.iter().map(|m| m.as_str()).collect::<Vec<_>>()));
                v["action"] = json!(r.describe_action(zone));
                v
            }))
        })
        .collect();
    let now_ms = crate::proxy::upstream::now_ms();
    let servers: Vec<Value> = cfg
        .upstreams
        .iter()
        .flat_map(|u| {
            u.servers.iter().map(|s| {
                let key = (u.name.clone(), s.name.clone());
                let counts = now.servers.get(&key).cloned().unwrap_or_default();
                let mut v = windowed(&counts, base.and_then(|b| b.servers.get(&key)));
                let t = totals.servers.get(&key);
                let health = if s.health.drained() {
                    "drained"
                } else if s.health.is_up(now_ms) {
                    "up"
                } else {
                    "down"
                };
                v["upstream"] = json!(u.name);
                v["server"] = json!(s.name);
                v["address"] = json!(s
                    .log_addr()
                    .map_or_else(|| s.name.clone(), |a| a.to_string()));
                v["health"] = json!(health);
                v["in_flight"] = json!(t.map_or(0, |t| t.in_flight));
                v["failures"] = json!(s.health.failures());
                v["sent_bytes"] = json!(t.map_or(0, |t| t.bytes_sent));
                v["received_bytes"] = json!(t.map_or(0, |t| t.bytes_received));
                v
            })
        })
        .collect();
    let zones: Vec<Value> = cfg
        .cache_zones
        .iter()
        .map(|z| {
            let c = now.zones.get(&z.name).copied().unwrap_or_default();
            let b = base
                .and_then(|b| b.zones.get(&z.name))
                .copied()
                .unwrap_or_default();
            let (hits, misses) = (
                c.hits - b.hits.min(c.hits),
                c.misses - b.misses.min(c.misses),
            );
            let (objects, bytes) = z.store.usage();
            let disk = z.disk.as_ref().map(|d| {
                let (objects, bytes) = d.usage();
                json!({"objects": objects, "bytes": bytes, "limit": d.config().max_size,
                       "hits": d.stats().hits.load(Relaxed), "ready": d.is_ready()})
            });
            json!({
                "zone": z.name, "objects": objects, "bytes": bytes, "limit": z.store.limit(),
                "hits": c.hits, "misses": c.misses,
                "hit_ratio": (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
                "evictions": z.store.stats.evictions.load(Relaxed),
                "disk": disk,
            })
        })
        .collect();
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let listener_at = |key: &str| {
        cfg.listeners
            .iter()
            .find(|l| l.key == format!("{key}.address"))
            .map_or_else(|| key.to_string(), |l| l.shown())
    };
    let mut certificates: Vec<Value> = cfg
        .certificates
        .iter()
        .map(|(key, c)| {
            json!({"listener": listener_at(key), "names": c.names, "source": "file",
                   "not_after": c.not_after, "days_left": (c.not_after - now_unix) / 86_400})
        })
        .collect();
    let on_demand = cfg
        .acme
        .iter()
        .flat_map(|a| a.on_demand.iter().flat_map(|od| od.all()));
    for (a, source) in cfg
        .acme
        .iter()
        .filter(|a| !a.names().is_empty())
        .cloned()
        .map(|a| (a, "acme"))
        .chain(on_demand.map(|a| (a, "acme on demand")))
    {
        let current = a.current.load();
        let not_after = current.as_ref().map(|c| c.not_after);
        certificates.push(
            json!({"listener": "acme", "names": a.names(), "source": source,
            "not_after": not_after, "days_left": not_after.map(|n| (n - now_unix) / 86_400)}),
        );
    }
    let (accepted, open) = registry.metrics.connections();
    let proc = super::scrape::ProcStat::read();
    let process = json!({
        "connections_open": open, "connections_accepted": accepted,
        "rss_bytes": proc.as_ref().map(|p| p.rss_bytes),
        "cpu_seconds": proc.as_ref().map(|p| p.cpu_seconds),
        "open_fds": proc.as_ref().map(|p| p.open_fds),
        "log_dropped": registry.metrics.log_dropped.load(Relaxed),
    });
    (
        200,
        json!({
            "generation": generation,
            "process": process,
            "uptime_seconds": registry.process.started.elapsed().as_secs(),
            "window_seconds": seconds,
            "traffic": traffic,
            "series": series(&samples, now),
            "routes": routes,
            "servers": servers,
            "zones": zones,
            "certificates": certificates,
        })
        .to_string(),
    )
}

/// Per second over the samples (and the last one to now): time, requests/s, 4xx/s, 5xx/s,
/// p50 and p99 (seconds; null without requests).
fn series(samples: &[Sample], now: &Sample) -> Value {
    let mut t = Vec::new();
    let (mut rps, mut e4, mut e5, mut p50, mut p99) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let points: Vec<&Sample> = samples.iter().chain(std::iter::once(now)).collect();
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let secs = seconds_between(a.at, b.at);
        if secs < 0.2 {
            continue;
        }
        let d = b.traffic().since(&a.traffic());
        t.push(b.unix_ms);
        rps.push(d.requests as f64 / secs);
        e4.push(d.c4xx as f64 / secs);
        e5.push(d.c5xx as f64 / secs);
        p50.push(quantile(&d, 0.5));
        p99.push(quantile(&d, 0.99));
    }
    json!({"t": t, "rps": rps, "4xx": e4, "5xx": e5, "p50": p50, "p99": p99})
}

/// A quantile in seconds, interpolated inside its bucket as Prometheus' `histogram_quantile`
/// does (the bucket's upper bound alone read "≤ 10 µs" for every route of a fast server):
/// null without requests, `"inf"` past the last bucket (5 s).
fn quantile(c: &Counts, q: f64) -> Value {
    match c.latency.interpolated(q) {
        Some(v) if v.is_finite() => json!(v),
        Some(_) => json!("inf"),
        None => Value::Null,
    }
}

/// The mean duration in seconds (exact: the histograms keep the sum); null without requests.
fn mean(c: &Counts) -> Value {
    let n = c.latency.count();
    if n == 0 {
        return Value::Null;
    }
    json!(c.latency.sum_ns as f64 / n as f64 / 1e9)
}

fn seconds_between(a: Instant, b: Instant) -> f64 {
    b.duration_since(a).as_secs_f64()
}
