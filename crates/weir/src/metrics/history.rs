//! The short history behind the dashboard: once a second a thread sums the workers' counters
//! ([`Totals`]) into a compact [`Sample`] and keeps the last five minutes. The dashboard then
//! shows rates, error rates and latency quantiles on first paint, from the server's own
//! samples, instead of waiting for two scrapes of its own (HAProxy's stats page keeps its
//! rates the same way).
//!
//! Cost: one thread asleep but for one summing pass a second, only when an admin listener is
//! configured; nothing on the request path. 300 samples of a few hundred bytes per route and
//! server.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::totals::{HistTotals, Totals};
use super::RouteKey;

/// Samples kept: five minutes at one a second.
pub const KEEP: usize = 300;
const EVERY: Duration = Duration::from_secs(1);

/// What a route or an upstream server had counted at a sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub requests: u64,
    pub c4xx: u64,
    pub c5xx: u64,
    pub latency: HistTotals,
}

impl Counts {
    /// Adds `other` in (the sum over routes).
    pub fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.c4xx += other.c4xx;
        self.c5xx += other.c5xx;
        for (a, b) in self.latency.buckets.iter_mut().zip(&other.latency.buckets) {
            *a += b;
        }
        self.latency.sum_ns += other.latency.sum_ns;
    }

    /// What was counted since `before`.
    pub fn since(&self, before: &Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_sub(before.requests),
            c4xx: self.c4xx.saturating_sub(before.c4xx),
            c5xx: self.c5xx.saturating_sub(before.c5xx),
            latency: self.latency.since(&before.latency),
        }
    }
}

/// A cache zone's lookups at a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ZoneCounts {
    pub hits: u64,
    pub misses: u64,
}

impl ZoneCounts {
    /// A zone's lookups now.
    pub fn of(s: &weir_cache::store::Stats) -> ZoneCounts {
        use std::sync::atomic::Ordering::Relaxed;
        ZoneCounts {
            hits: s.hits.load(Relaxed),
            misses: s.misses.load(Relaxed),
        }
    }
}

/// Everything counted at one instant.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Instant,
    /// Unix milliseconds, for the charts' time axis.
    pub unix_ms: u64,
    pub routes: BTreeMap<RouteKey, Counts>,
    pub servers: BTreeMap<(String, String), Counts>,
    pub zones: BTreeMap<String, ZoneCounts>,
}

impl Sample {
    /// A sample of `totals` and `zones`, taken now.
    pub fn of(totals: &Totals, zones: BTreeMap<String, ZoneCounts>) -> Sample {
        let routes = totals
            .routes
            .iter()
            .map(|(k, r)| {
                let counts = Counts {
                    requests: r.requests(),
                    c4xx: r.class(4),
                    c5xx: r.class(5),
                    latency: r.latency.clone(),
                };
                (k.clone(), counts)
            })
            .collect();
        let servers = totals
            .servers
            .iter()
            .map(|(k, s)| {
                let counts = Counts {
                    requests: s.requests(),
                    c4xx: s.classes[4],
                    // A request that failed before any status is an error too.
                    c5xx: s.classes[5] + s.classes[0],
                    latency: s.latency.clone(),
                };
                (k.clone(), counts)
            })
            .collect();
        Sample {
            at: Instant::now(),
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            routes,
            servers,
            zones,
        }
    }

    /// The routes summed, but for the admin listener's (the dashboard's own requests).
    pub fn traffic(&self) -> Counts {
        let mut all = Counts::default();
        for ((listener, _), c) in &self.routes {
            if listener != "admin" {
                all.add(c);
            }
        }
        all
    }
}

/// The samples of the last [`KEEP`] seconds, oldest first.
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
    started: OnceLock<()>,
}

impl History {
    /// Starts the sampling thread (once; later calls do nothing). `take` returns `None` when
    /// what it samples is gone, and the thread ends.
    pub fn start(self: &std::sync::Arc<Self>, take: impl Fn() -> Option<Sample> + Send + 'static) {
        let history = std::sync::Arc::downgrade(self);
        self.started.get_or_init(move || {
            let spawned = std::thread::Builder::new()
                .name("weir-history".into())
                .spawn(move || loop {
                    let (Some(h), Some(s)) = (history.upgrade(), take()) else {
                        return;
                    };
                    h.push(s);
                    drop(h);
                    std::thread::sleep(EVERY);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the dashboard's sampling thread");
            }
        });
    }

    /// Adds a sample, dropping the oldest past [`KEEP`].
    pub fn push(&self, s: Sample) {
        let mut q = super::lock(&self.samples);
        if q.len() == KEEP {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// A copy of the samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        super::lock(&self.samples).iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_subtract() {
        let mut a = Counts {
            requests: 10,
            c4xx: 2,
            c5xx: 1,
            latency: HistTotals::default(),
        };
        a.latency.buckets[0] = 10;
        let mut sum = Counts::default();
        sum.add(&a);
        sum.add(&a);
        assert_eq!(
            (sum.requests, sum.c4xx, sum.latency.buckets[0]),
            (20, 4, 20)
        );
        assert_eq!(sum.since(&a), a);
    }

    #[test]
    fn history_keeps_the_last_five_minutes() {
        let h = History::default();
        for i in 0..KEEP + 5 {
            let mut s = Sample::of(&Totals::default(), BTreeMap::new());
            s.unix_ms = i as u64;
            h.push(s);
        }
        let kept = h.samples();
        assert_eq!(kept.len(), KEEP);
        assert_eq!(kept[0].unix_ms, 5);
    }

    #[test]
    fn the_admin_listener_is_not_traffic() {
        let m = super::super::Metrics::default();
        let w = m.add_worker();
        w.route("admin", "-").record(200, 1);
        w.route("127.0.0.1:80", "a").record(503, 1);
        w.route("127.0.0.1:80", "b").record(404, 1);
        let t = Sample::of(&m.totals(), BTreeMap::new()).traffic();
        assert_eq!((t.requests, t.c4xx, t.c5xx), (2, 1, 1));
    }
}
