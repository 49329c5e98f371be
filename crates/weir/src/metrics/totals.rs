//! Every worker's counters summed once: what `/metrics` encodes and what the dashboard's
//! history (`admin/history.rs`) samples each second, so the two always agree.

use std::collections::BTreeMap;

use super::{lock, Histogram, Metrics, RouteKey, CODES, DURATION_BUCKETS};

/// A histogram summed over workers: counts per bucket (not cumulative, `+Inf` last) and the
/// sum in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistTotals {
    pub buckets: [u64; 21],
    pub sum_ns: u64,
}

impl HistTotals {
    fn add(&mut self, h: &Histogram) {
        for (sum, n) in self.buckets.iter_mut().zip(&h.buckets) {
            *sum += n.get();
        }
        self.sum_ns += h.sum_ns.get();
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// What was added since `before` (the same series sampled earlier).
    pub fn since(&self, before: &HistTotals) -> HistTotals {
        let mut out = self.clone();
        for (o, b) in out.buckets.iter_mut().zip(&before.buckets) {
            *o = o.saturating_sub(*b);
        }
        out.sum_ns = out.sum_ns.saturating_sub(before.sum_ns);
        out
    }

    /// The `q` quantile as the upper bound of its bucket in seconds, as Prometheus's
    /// `histogram_quantile` reads a bucket without interpolating (`None` without samples;
    /// past the last bound it is the last bound, 5 s, and more).
    /// The `q` quantile interpolated linearly inside its bucket (from the bucket below's bound,
    /// or 0), as Prometheus' `histogram_quantile`; `None` without samples, infinite past the
    /// last bound.
    pub fn interpolated(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).max(1.0);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            if *n > 0 && (seen + n) as f64 >= rank {
                let Some(upper) = DURATION_BUCKETS.get(i).copied() else {
                    return Some(f64::INFINITY);
                };
                let lower = if i == 0 { 0.0 } else { DURATION_BUCKETS[i - 1] };
                let within = (rank - seen as f64) / *n as f64;
                return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
            }
            seen += n;
        }
        Some(f64::INFINITY)
    }

    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(DURATION_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

/// One route summed over workers.
#[derive(Debug, Clone)]
pub struct RouteTotals {
    /// Index `status - 100`.
    pub codes: Vec<u64>,
    pub latency: HistTotals,
    /// gRPC calls by `grpc-status`.
    pub grpc: [u64; 17],
}

impl RouteTotals {
    pub fn requests(&self) -> u64 {
        self.codes.iter().sum()
    }

    /// Requests answered with a status in `class` (4 for 4xx, 5 for 5xx).
    pub fn class(&self, class: usize) -> u64 {
        let start = (class * 100).saturating_sub(100);
        self.codes.iter().skip(start).take(100).sum()
    }
}

/// One upstream server summed over workers.
#[derive(Debug, Clone, Default)]
pub struct ServerTotals {
    pub classes: [u64; 6],
    pub latency: HistTotals,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub in_flight: u64,
}

impl ServerTotals {
    pub fn requests(&self) -> u64 {
        self.classes.iter().sum()
    }
}

/// Everything the workers counted, by route and by upstream server.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub routes: BTreeMap<RouteKey, RouteTotals>,
    pub servers: BTreeMap<(String, String), ServerTotals>,
}

impl Metrics {
    /// Client connections accepted, and open now, over every worker.
    pub fn connections(&self) -> (u64, u64) {
        let workers = self.workers();
        let accepted: u64 = workers.iter().map(|w| w.accepted.get()).sum();
        let closed: u64 = workers
            .iter()
            .flat_map(|w| w.closed.iter().map(|c| c.get()))
            .sum();
        (accepted, accepted.saturating_sub(closed))
    }

    /// Sums every worker's counters.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for w in self.workers() {
            for (key, r) in lock(&w.routes).iter() {
                let sum = t.routes.entry(key.clone()).or_insert_with(|| RouteTotals {
                    codes: vec![0; CODES],
                    latency: HistTotals::default(),
                    grpc: [0; 17],
                });
                for (s, n) in sum.grpc.iter_mut().zip(r.grpc.iter()) {
                    *s += n.get();
                }
                for (s, n) in sum.codes.iter_mut().zip(r.codes.iter()) {
                    *s += n.get();
                }
                sum.latency.add(&r.latency);
            }
            for (key, m) in lock(&w.servers).iter() {
                let sum = t.servers.entry(key.clone()).or_default();
                for (s, n) in sum.classes.iter_mut().zip(&m.classes) {
                    *s += n.get();
                }
                sum.latency.add(&m.latency);
                sum.bytes_sent += m.bytes_sent.get();
                sum.bytes_received += m.bytes_received.get();
                // Taken and given back by the same worker, in order: never below zero.
                sum.in_flight += m.in_flight.get();
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolated_quantiles_fall_inside_their_bucket() {
        let mut h = HistTotals::default();
        assert_eq!(h.interpolated(0.5), None);
        h.buckets[3] = 100; // 5-10 µs
        let p50 = h.interpolated(0.5).unwrap();
        assert!((p50 - 0.0000075).abs() < 1e-9, "{p50}");
        h.buckets[6] = 100; // 50-100 µs
        let p99 = h.interpolated(0.99).unwrap();
        assert!(p99 > 0.00005 && p99 <= 0.0001, "{p99}");
        h.buckets[20] = 1000; // past 5 s
        assert_eq!(h.interpolated(0.99), Some(f64::INFINITY));
        // Sub-microsecond answers: inside the first bucket, 0-1 µs.
        let mut fast = HistTotals::default();
        fast.buckets[0] = 10;
        assert!(fast.interpolated(0.99).unwrap() <= 0.000001);
    }

    #[test]
    fn quantiles_read_bucket_upper_bounds() {
        let mut h = HistTotals::default();
        assert_eq!(h.quantile(0.5), None);
        h.buckets[3] = 98; // ≤ 10 µs
        h.buckets[9] = 1; // ≤ 1 ms
        h.buckets[20] = 1; // > 5 s
        assert_eq!(h.quantile(0.5), Some(0.00001));
        assert_eq!(h.quantile(0.99), Some(0.001));
        assert_eq!(h.quantile(1.0), Some(f64::INFINITY));
        let before = h.clone();
        h.buckets[6] += 10; // ≤ 100 µs
        assert_eq!(h.since(&before).quantile(0.5), Some(0.0001));
    }

    #[test]
    fn workers_are_summed_by_route_and_server() {
        let m = Metrics::default();
        let (a, b) = (m.add_worker(), m.add_worker());
        a.route("l", "r").record(200, 5);
        b.route("l", "r").record(404, 5);
        b.route("l", "r").record(503, 5);
        a.server("u", "s").record(200, 5, 10, 1);
        b.server("u", "s").record(502, 5, 20, 2);
        b.server("u", "s").in_flight.inc();
        let t = m.totals();
        let r = &t.routes[&("l".into(), "r".into())];
        assert_eq!((r.requests(), r.class(4), r.class(5)), (3, 1, 1));
        assert_eq!(r.latency.count(), 3);
        let s = &t.servers[&("u".into(), "s".into())];
        assert_eq!((s.requests(), s.classes[5], s.bytes_sent), (2, 1, 30));
        assert_eq!((s.bytes_received, s.in_flight), (3, 1));
    }
}
