//! `rate_limit` with `cluster: redis`: one quota for the whole cluster, counted in Redis
//! (`cluster/redis.rs`), decided on each node without a network hop.
//!
//! Each node decides by its own GCRA table (`rate_limit.rs`) as a single node would, and notes
//! the keys it decided for and how many requests it admitted. Every `cluster.redis_sync`
//! (20 ms by default) one task sends those counts (and how long ago the first was admitted) to
//! Redis, all keys in one round trip, and sets
//! each key's TAT in the table to the cluster's (Redis's answer, plus what was admitted here
//! while it travelled). So every admitted request is counted exactly once in Redis, whichever
//! node admitted it, and a node's view lags the cluster's by one sync at most: across N nodes a
//! saturated key can overshoot by the other nodes' quota for one interval, which the next sync
//! takes back (the TAT carries it). This is Kong's `sync_rate` batching; the alternative, a
//! Redis round trip per request, would add that round trip to every limited request's latency.
//!
//! The state (table, counts, the sync task) is kept across reloads under the filter's name and
//! settings, so a reload neither forgets nor re-sends counts (Kong's double counting after a
//! reload came from a second timer flushing the same counters).
//!
//! When Redis does not answer, the filter fails open in a bounded way: each node keeps deciding
//! alone with the quota divided by the live members (as `cluster: members`), every failed sync
//! counts in `weir_cluster_redis_errors`, and one line is logged when Redis goes and one when it
//! comes back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

use super::rate_limit::Table;
use crate::cluster::redis::Redis;
use crate::cluster::ClusterState;

/// A key this node decided for, synced while it is used or limited.
#[derive(Debug)]
struct Noted {
    hash: u64,
    /// Requests admitted here and not yet sent, and when the first of them was (table time).
    admitted: u64,
    first: u64,
    /// Decided for since the last sync (a key nobody asks for is no longer synced).
    touched: bool,
}

/// A `cluster: redis` limit's state, kept across reloads.
#[derive(Debug)]
pub struct Shared {
    pub table: Arc<Table>,
    noted: Mutex<HashMap<Vec<u8>, Noted>>,
    max_keys: usize,
    redis: Redis,
    /// `weir:rl:NAME:`, before each key.
    prefix: String,
    interval: u64,
    sync: Duration,
    healthy: AtomicBool,
    state: Arc<ClusterState>,
    started: Once,
    name: String,
}

impl Shared {
    /// A limit's state: `interval` in nanoseconds, `prefix` the cluster's etcd prefix.
    pub fn new(
        name: &str,
        (url, sync, prefix): (&str, Duration, &str),
        interval: u64,
        max_keys: usize,
        state: &Arc<ClusterState>,
    ) -> Result<Shared, String> {
        Ok(Shared {
            table: Arc::new(Table::new(max_keys)),
            noted: Mutex::new(HashMap::new()),
            max_keys,
            redis: Redis::open(url, crate::cluster::REDIS_TIMEOUT)?,
            prefix: format!("{}:rl:{name}:", prefix.trim_matches('/')),
            interval,
            sync,
            healthy: AtomicBool::new(true),
            state: state.clone(),
            started: Once::new(),
            name: name.to_string(),
        })
    }

    /// How long Redis keeps a key after its TAT has passed: the longest a node's report of
    /// its admissions may be late (ten sync intervals).
    pub fn outlive(&self) -> Duration {
        self.sync * 10
    }

    /// Whether the last sync got an answer.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Notes a decision for `key` (hashed `hash` in the table); starts the sync task on first
    /// use (a worker's runtime is current then).
    pub(super) fn note(self: &Arc<Self>, key: &[u8], hash: u64, admitted: bool, now: u64) {
        self.started.call_once(|| {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(run(Arc::downgrade(self), self.sync));
            }
        });
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = noted.get_mut(key) {
            n.touched = true;
            if admitted {
                if n.admitted == 0 {
                    n.first = now;
                }
                n.admitted += 1;
            }
        } else if noted.len() < self.max_keys {
            noted.insert(
                key.to_vec(),
                Noted {
                    hash,
                    admitted: u64::from(admitted),
                    first: now,
                    touched: true,
                },
            );
        }
    }

    /// One sync: the counts out, the cluster's TATs in.
    async fn sync_once(&self) {
        let now = self.table.now();
        let batch: Vec<(Vec<u8>, u64, u64, u64)> = {
            let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
            // A key stays synced while it is used or still limited here (its TAT ahead): a
            // node that refuses a key learns when the others' requests let it go, and one
            // that has admitted nothing for a while learns what the others admitted.
            noted.retain(|_, n| n.touched || n.admitted > 0 || self.table.tat(n.hash) > now);
            noted
                .iter_mut()
                .map(|(k, n)| {
                    let age = match n.admitted {
                        0 => 0,
                        // No older than Redis remembers a passed TAT.
                        _ => now
                            .saturating_sub(n.first)
                            .min(self.outlive().as_nanos() as u64),
                    };
                    let sent = (k.clone(), n.hash, n.admitted, age);
                    n.admitted = 0;
                    n.touched = false;
                    sent
                })
                .collect()
        };
        if batch.is_empty() {
            return;
        }
        let keys: Vec<(String, u64, u64)> = batch
            .iter()
            .map(|(k, _, n, age)| {
                let key = format!("{}{}", self.prefix, String::from_utf8_lossy(k));
                (key, *n, age / 1000)
            })
            .collect();
        let interval_us = (self.interval / 1000).max(1);
        match self.redis.add(&keys, interval_us, self.outlive()).await {
            Ok(aheads) => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!(filter = %self.name, redis = %self.redis.url, "Redis answers again: the rate limit is counted across the cluster");
                }
                let now = self.table.now();
                let noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
                for ((key, hash, _, _), ahead) in batch.iter().zip(aheads) {
                    // Admitted here while the sync travelled: counted next time, ahead already.
                    let since = noted.get(key).map_or(0, |n| n.admitted);
                    let ahead = u64::try_from(ahead).unwrap_or(0).saturating_mul(1000);
                    self.table
                        .set_tat(*hash, now + ahead + since * self.interval, now);
                }
            }
            Err(e) => {
                self.state.redis_errors.fetch_add(1, Ordering::Relaxed);
                if self.healthy.swap(false, Ordering::Relaxed) {
                    tracing::warn!(filter = %self.name, error = %e, "Redis does not answer: each node limits to its share of the quota (by live members) until it does");
                }
            }
        }
    }
}

/// The sync task: ends when the limit's state is dropped (its filter left the config).
async fn run(shared: Weak<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = shared.upgrade() else {
            return;
        };
        s.sync_once().await;
    }
}
