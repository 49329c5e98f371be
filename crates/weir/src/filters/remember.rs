//! What authentication filters remember for a while: a verified Basic credential (bcrypt costs
//! milliseconds), an auth service's answer. Keyed by a keyed hash of the credential
//! ([`keyed::Sharded`]: SipHash under a per-process random key), never the credential itself;
//! entries expire after a TTL and a full shard drops its expired entries, then its oldest half.

use std::time::{Duration, Instant};

use super::keyed::Sharded;

/// Values by credential, for `ttl`.
#[derive(Debug)]
pub struct Remembered<V> {
    table: Sharded<(Instant, V)>,
    ttl: Duration,
    per_shard: usize,
}

const SHARDS: usize = 16;

impl<V: Clone> Remembered<V> {
    /// Remembers at most about `max` values, each for `ttl` (zero: nothing is remembered).
    pub fn new(ttl: Duration, max: usize) -> Remembered<V> {
        Remembered {
            table: Sharded::new(SHARDS),
            ttl,
            per_shard: max.div_ceil(SHARDS).max(1),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// The keyed hash of a credential made of `parts` (joined unambiguously).
    pub fn key(&self, parts: &[&[u8]]) -> u64 {
        let mut joined = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
        for p in parts {
            joined.extend_from_slice(&(p.len() as u32).to_le_bytes());
            joined.extend_from_slice(p);
        }
        self.table.hash(&joined)
    }

    /// The value remembered under `key`, if it has not expired.
    pub fn get(&self, key: u64, now: Instant) -> Option<V> {
        if !self.enabled() {
            return None;
        }
        let shard = self.table.shard(key);
        shard
            .get(&key)
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
    }

    /// Remembers `v` under `key` until `now + ttl`.
    pub fn put(&self, key: u64, v: V, now: Instant) {
        if !self.enabled() {
            return;
        }
        let mut shard = self.table.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            shard.retain(|_, (until, _)| *until > now);
            if shard.len() >= self.per_shard {
                // The oldest half goes: those expiring first.
                let mut untils: Vec<Instant> = shard.values().map(|(u, _)| *u).collect();
                untils.sort_unstable();
                let cut = untils[untils.len() / 2];
                shard.retain(|_, (until, _)| *until > cut);
            }
        }
        shard.insert(key, (now + self.ttl, v));
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries held (for tests and metrics).
    pub fn len(&self) -> usize {
        (0..SHARDS as u64)
            .map(|i| self.table.shard(i << 32).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_table_stays_bounded() {
        let r: Remembered<u8> = Remembered::new(Duration::from_secs(10), 32);
        let t0 = Instant::now();
        let k = r.key(&[b"user", b"pw"]);
        assert_ne!(
            k,
            r.key(&[b"use", b"rpw"]),
            "parts are joined unambiguously"
        );
        r.put(k, 1, t0);
        assert_eq!(r.get(k, t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(r.get(k, t0 + Duration::from_secs(10)), None);
        for i in 0..10_000u32 {
            let k = r.key(&[&i.to_le_bytes()]);
            r.put(k, 0, t0 + Duration::from_millis(u64::from(i)));
        }
        assert!(r.len() <= 32 + SHARDS, "{}", r.len());
        let off: Remembered<u8> = Remembered::new(Duration::ZERO, 32);
        off.put(k, 1, t0);
        assert_eq!(off.get(k, t0), None);
    }
}
