//! The keyed tables of the traffic-control filters (rate limit, concurrency): one per process,
//! shared by every worker, behind a mutex per shard so that two keys rarely wait on each other.
//! A lookup hashes the key once and holds one shard's lock for a hash-map probe.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

/// A map from key bytes to `V` in `n` shards.
#[derive(Debug)]
pub struct Sharded<V> {
    shards: Vec<Mutex<HashMap<Vec<u8>, V>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl<V> Sharded<V> {
    pub fn new(n: usize) -> Sharded<V> {
        Sharded {
            shards: (0..n.max(1)).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
        }
    }

    /// The shard that holds `key`, locked (a panic while holding it poisons nothing here:
    /// every update is one assignment).
    pub fn shard(&self, key: &[u8]) -> MutexGuard<'_, HashMap<Vec<u8>, V>> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn shards(&self) -> usize {
        self.shards.len()
    }
}
