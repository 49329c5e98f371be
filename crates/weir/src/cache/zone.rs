//! A cache zone: the store, the table of in-flight misses used for request coalescing, and the
//! hit-for-miss marks. Shared by all workers (`Arc`), with short `Mutex` sections only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use weir_cache::MemoryStore;

/// How a coalesced miss ended, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The response is in the store: serve it from there.
    Stored,
    /// Not storable (or failed): fetch on your own.
    Uncacheable,
}

/// One zone.
#[derive(Debug)]
pub struct CacheZone {
    pub name: String,
    pub store: MemoryStore,
    inflight: Mutex<HashMap<u64, watch::Receiver<Option<Outcome>>>>,
    hit_for_miss: Mutex<HashMap<u64, u64>>,
    /// Seconds added to the system clock: lets tests (and nothing else) move time forward.
    skew: AtomicI64,
}

/// The role a request gets for a missing key.
#[derive(Debug)]
pub enum Role {
    /// Fetch it and call [`CacheZone::finish`].
    Leader(watch::Sender<Option<Outcome>>),
    /// Wait for the leader.
    Follower(watch::Receiver<Option<Outcome>>),
}

impl CacheZone {
    pub fn new(name: &str, limit: u64, shards: usize) -> CacheZone {
        CacheZone {
            name: name.to_string(),
            store: MemoryStore::new(limit, shards),
            inflight: Mutex::new(HashMap::new()),
            hit_for_miss: Mutex::new(HashMap::new()),
            skew: AtomicI64::new(0),
        }
    }

    /// Unix seconds, as the cache sees them.
    pub fn now(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0) as i64;
        (real + self.skew.load(Ordering::Relaxed)).max(0) as u64
    }

    /// Moves the cache's clock forward (tests drive freshness without sleeping).
    pub fn advance_clock(&self, secs: i64) {
        self.skew.fetch_add(secs, Ordering::Relaxed);
    }

    /// Becomes the leader for `hash`, or a follower of the request already fetching it.
    pub fn join(&self, hash: u64) -> Role {
        let mut table = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = table.get(&hash) {
            if rx.has_changed().is_ok() {
                return Role::Follower(rx.clone());
            }
        }
        let (tx, rx) = watch::channel(None);
        table.insert(hash, rx);
        Role::Leader(tx)
    }

    /// Ends a leader's fetch and releases its followers.
    pub fn finish(&self, hash: u64, tx: watch::Sender<Option<Outcome>>, outcome: Outcome) {
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&hash);
        tx.send_replace(Some(outcome));
    }

    /// Marks `hash` hit-for-miss until `now + secs`.
    pub fn mark_hit_for_miss(&self, hash: u64, secs: u64) {
        if secs > 0 {
            let until = self.now() + secs;
            self.hit_for_miss
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(hash, until);
        }
    }

    /// Whether `hash` is marked hit-for-miss now (expired marks are dropped).
    pub fn is_hit_for_miss(&self, hash: u64) -> bool {
        let now = self.now();
        let mut m = self.hit_for_miss.lock().unwrap_or_else(|e| e.into_inner());
        match m.get(&hash) {
            Some(until) if *until > now => true,
            Some(_) => {
                m.remove(&hash);
                false
            }
            None => false,
        }
    }

    /// Clears a hit-for-miss mark (a later response was storable).
    pub fn clear_hit_for_miss(&self, hash: u64) {
        self.hit_for_miss
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&hash);
    }
}
