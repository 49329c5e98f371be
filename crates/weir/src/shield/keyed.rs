//! The keyed tables of the traffic-control filters (rate limit, concurrency): one per process,
//! shared by every worker, behind a mutex per shard so that two keys rarely wait on each other.
//!
//! A key is hashed once, with SipHash under a per-process random key (clients choose keys:
//! their addresses, fields and cookies, so the hash must not be predictable), and the tables
//! hold that 64-bit hash, not the key's bytes: one hash per lookup instead of three (the shard,
//! the probe, the insert cost ~480 instructions a request), and less memory per key. Two keys
//! share an entry only if their keyed hashes collide, one chance in 2^64.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

/// A hasher for keys that are hashes already.
#[derive(Debug, Default, Clone, Copy)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; anything else folds in, correctly if slowly.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// One shard's map, from key hash to value.
pub type Map<V> = HashMap<u64, V, BuildHasherDefault<Prehashed>>;

/// A map from keys (by their keyed hash) to `V` in `n` shards.
#[derive(Debug)]
pub struct Sharded<V> {
    shards: Vec<Mutex<Map<V>>>,
    hasher: std::collections::hash_map::RandomState,
    /// Per-process random keys of [`Sharded::mix`].
    mix_keys: (u64, u64),
}

impl<V> Sharded<V> {
    pub fn new(n: usize) -> Sharded<V> {
        Sharded {
            shards: (0..n.max(1)).map(|_| Mutex::new(Map::default())).collect(),
            hasher: Default::default(),
            mix_keys: (fastrand::u64(..) | 1, fastrand::u64(..)),
        }
    }

    /// A keyed hash of a small integer key (an IPv4 address): a multiply and two rotations
    /// under per-process random keys.
    pub fn mix(&self, n: u64) -> u64 {
        let (k0, k1) = self.mix_keys;
        let x = (n ^ k1).wrapping_mul(k0 | 1);
        let x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 32)
    }

    /// The key's hash.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard that holds hash `h`, locked (a panic while holding it poisons nothing here:
    /// every update is one assignment).
    pub fn shard(&self, h: u64) -> MutexGuard<'_, Map<V>> {
        // The high bits pick the shard; the map uses all of them.
        let i = ((h >> 32) as usize) % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}
