//! The memory store: N shards, each behind its own mutex (held for a map operation, never across
//! an `.await`), a hard byte limit per shard that counts keys, heads, bodies and a fixed
//! overhead, and S3-FIFO eviction.
//!
//! S3-FIFO (Yang et al., SOSP '23) keeps a small FIFO (10% of the bytes) for new entries and a
//! main FIFO for entries that were hit while in the small one; a ghost list remembers recently
//! evicted keys so that they go straight to main when they come back. A one-off scan fills and
//! drains the small FIFO without touching the main one: scan resistant, and a hit costs one
//! saturating counter increment, no list surgery.
//!
//! Entries are per primary key and hold the Vary variants of that key. Queue slots are
//! `(hash, generation)`, so a purged or replaced entry's old slots are skipped lazily.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::key::{ByHash, CacheKey};
use crate::object::CachedObject;
pub use crate::storage::{Lookup, PurgeSelector};
use crate::storage::{Purged, Storage};
use crate::striped::Striped;

/// Counters, updated by the store and by the cache stage: striped per thread, so a hit does
/// not write a cache line every worker shares (`striped.rs`).
#[derive(Debug, Default)]
pub struct Stats {
    pub hits: Striped,
    pub misses: Striped,
    pub stale: Striped,
    pub revalidated: Striped,
    pub stores: Striped,
    pub evictions: Striped,
    pub coalesced: Striped,
    pub purged: Striped,
}

impl Stats {
    #[inline]
    pub fn bump(counter: &Striped) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

struct Entry {
    key: CacheKey,
    variants: Vec<Arc<CachedObject>>,
    bytes: u64,
    freq: u8,
    in_main: bool,
    generation: u64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Entry, ByHash>,
    small: VecDeque<(u64, u64)>,
    main: VecDeque<(u64, u64)>,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64, ByHash>,
    bytes: u64,
    small_bytes: u64,
    next_generation: u64,
    tags: HashMap<String, HashSet<u64>>,
}

/// The memory store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Vec<Mutex<Shard>>,
    shard_limit: u64,
    /// Bytes of responses being captured for storing right now ([`MemoryStore::reserve`]).
    in_flight: AtomicU64,
    pub stats: Stats,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("entries", &self.map.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl MemoryStore {
    /// A store of at most `limit` bytes in `shards` shards.
    pub fn new(limit: u64, shards: usize) -> MemoryStore {
        let shards = shards.max(1);
        MemoryStore {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            shard_limit: limit / shards as u64,
            in_flight: AtomicU64::new(0),
            stats: Stats::default(),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        let i = (hash % self.shards.len() as u64) as usize;
        // A poisoned shard only means a panic elsewhere mid-update; the data is still usable.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds the variant of `key` whose Vary values match (`value_of(name)` gives the request's).
    pub fn lookup(&self, key: &CacheKey, value_of: impl Fn(&str) -> Option<Bytes>) -> Lookup {
        let mut shard = self.shard(key.hash);
        let Some(e) = shard.map.get_mut(&key.hash) else {
            return Lookup::Miss;
        };
        if e.key.text != key.text {
            return Lookup::Miss;
        }
        e.freq = (e.freq + 1).min(3);
        match e.variants.iter().find(|v| v.vary_matches(&value_of)) {
            Some(v) => Lookup::Found(v.clone()),
            None => Lookup::VariantMiss,
        }
    }

    /// Reserves `n` bytes for a response being captured to be stored. Captures in flight may hold
    /// at most half the limit together; past that this says no, and the caller passes the
    /// response through without storing it. Inserts evict down to the limit minus what is in
    /// flight, so stored objects and captures together stay within the limit: without this, 50
    /// concurrent misses of 1 MiB objects held 50 MiB beyond an 8 MiB zone.
    pub fn reserve(&self, n: u64) -> bool {
        let cap = self.limit() / 2;
        self.in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
                (cur + n <= cap).then_some(cur + n)
            })
            .is_ok()
    }

    /// Gives back bytes taken with [`MemoryStore::reserve`].
    pub fn release(&self, n: u64) {
        self.in_flight.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes reserved by captures in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Stores `obj` under `key`, replacing the variant with the same Vary values. Returns false
    /// if the object alone exceeds a shard's share of the limit.
    pub fn insert(&self, key: &CacheKey, obj: Arc<CachedObject>) -> bool {
        let size = obj.size() + key.text.len() as u64;
        if size > self.shard_limit {
            return false;
        }
        let mut evicted = 0;
        let mut shard = self.shard(key.hash);
        let s = &mut *shard;
        if let Some(e) = s.map.get_mut(&key.hash).filter(|e| e.key.text == key.text) {
            let before = e.bytes;
            e.variants.retain(|v| !same_vary(v, &obj));
            e.variants.push(obj.clone());
            e.bytes = entry_bytes(&e.key, &e.variants);
            s.bytes = s.bytes - before + e.bytes;
            if !e.in_main {
                s.small_bytes = s.small_bytes - before + e.bytes;
            }
        } else {
            if let Some(old) = s.map.remove(&key.hash) {
                // A different key with the same hash: the newcomer replaces it.
                s.forget(key.hash, &old);
            }
            let generation = s.next_generation;
            s.next_generation += 1;
            let to_main = s.ghost_set.remove(&key.hash);
            let variants = vec![obj.clone()];
            let bytes = entry_bytes(key, &variants);
            s.map.insert(
                key.hash,
                Entry {
                    // The request's key text may sit in a larger buffer: keep an exact copy.
                    key: key.compact(),
                    variants,
                    bytes,
                    freq: 0,
                    in_main: to_main,
                    generation,
                },
            );
            if to_main {
                s.main.push_back((key.hash, generation));
            } else {
                s.small.push_back((key.hash, generation));
                s.small_bytes += bytes;
            }
            s.bytes += bytes;
        }
        for t in &obj.meta.tags {
            s.tags.entry(t.clone()).or_default().insert(key.hash);
        }
        // Room for the captures in flight too (their share of this shard).
        let limit = self
            .shard_limit
            .saturating_sub(self.in_flight() / self.shards.len() as u64);
        while s.bytes > limit {
            if !s.evict_one(limit) {
                break;
            }
            evicted += 1;
        }
        drop(shard);
        self.stats.evictions.fetch_add(evicted, Ordering::Relaxed);
        Stats::bump(&self.stats.stores);
        true
    }

    /// Removes one key entirely.
    pub fn remove(&self, key: &CacheKey) -> bool {
        let mut shard = self.shard(key.hash);
        let s = &mut *shard;
        match s.map.get(&key.hash) {
            Some(e) if e.key.text == key.text => {
                if let Some(old) = s.map.remove(&key.hash) {
                    s.forget(key.hash, &old);
                }
                true
            }
            _ => false,
        }
    }

    /// Purges what `sel` selects; `soft` marks objects stale (to be revalidated) instead of
    /// removing them. Returns the number of keys affected.
    pub fn purge(&self, sel: &PurgeSelector, soft: bool) -> u64 {
        if let PurgeSelector::Exact(k) = sel {
            let n = if soft {
                let shard = self.shard(k.hash);
                match shard.map.get(&k.hash).filter(|e| e.key.text == k.text) {
                    Some(e) => {
                        e.variants.iter().for_each(|v| v.invalidate());
                        1
                    }
                    None => 0,
                }
            } else {
                u64::from(self.remove(k))
            };
            self.stats.purged.fetch_add(n, Ordering::Relaxed);
            return n;
        }
        let mut n = 0;
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            let s = &mut *shard;
            let victims: Vec<u64> = match sel {
                PurgeSelector::Tag(t) => s
                    .tags
                    .get(t)
                    .map(|set| set.iter().copied().collect())
                    .unwrap_or_default(),
                _ => s
                    .map
                    .iter()
                    .filter(|(_, e)| selects(sel, e))
                    .map(|(h, _)| *h)
                    .collect(),
            };
            for h in victims {
                if soft {
                    if let Some(e) = s.map.get(&h) {
                        e.variants.iter().for_each(|v| v.invalidate());
                        n += 1;
                    }
                } else if let Some(old) = s.map.remove(&h) {
                    s.forget(h, &old);
                    n += 1;
                }
            }
        }
        self.stats.purged.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Every stored object with its key, hottest first (entries that earned the main queue,
    /// then by recent hits): what a binary upgrade hands to the disk tier.
    pub fn by_heat(&self) -> Vec<(CacheKey, Arc<CachedObject>)> {
        let mut all = Vec::new();
        for shard in &self.shards {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            for e in s.map.values() {
                let heat = u8::from(e.in_main) * 4 + e.freq;
                for v in &e.variants {
                    all.push((heat, e.key.clone(), v.clone()));
                }
            }
        }
        all.sort_by_key(|e| std::cmp::Reverse(e.0));
        all.into_iter().map(|(_, k, v)| (k, v)).collect()
    }

    /// (keys, bytes) stored now.
    pub fn usage(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(k, b), s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            (k + s.map.len() as u64, b + s.bytes)
        })
    }

    /// The byte limit (all shards).
    pub fn limit(&self) -> u64 {
        self.shard_limit * self.shards.len() as u64
    }
}

fn same_vary(a: &CachedObject, b: &CachedObject) -> bool {
    a.meta.vary == b.meta.vary
}

fn entry_bytes(key: &CacheKey, variants: &[Arc<CachedObject>]) -> u64 {
    key.text.len() as u64 + variants.iter().map(|v| v.size()).sum::<u64>()
}

fn selects(sel: &PurgeSelector, e: &Entry) -> bool {
    sel.matches(&e.key, |t| {
        e.variants
            .iter()
            .any(|v| v.meta.tags.iter().any(|x| x == t))
    })
}

impl PurgeSelector {
    /// Whether this purge removes `key` (whose objects carry a tag when `has_tag(tag)`).
    pub fn matches(&self, key: &CacheKey, has_tag: impl Fn(&str) -> bool) -> bool {
        let url = key.url();
        match self {
            PurgeSelector::Prefix(p) => url.starts_with(p),
            PurgeSelector::Url(u) => url == &u[..],
            PurgeSelector::Host(h) => {
                let host_end = url.iter().position(|b| *b == b'/').unwrap_or(url.len());
                url[..host_end].eq_ignore_ascii_case(h)
            }
            PurgeSelector::Regex(r) => r.is_match(url),
            PurgeSelector::All => true,
            PurgeSelector::Exact(k) => key.text == k.text,
            PurgeSelector::Tag(t) => has_tag(t),
        }
    }
}

impl Shard {
    /// Accounting and tag cleanup for an entry already removed from the map.
    fn forget(&mut self, hash: u64, old: &Entry) {
        self.bytes -= old.bytes;
        if !old.in_main {
            self.small_bytes -= old.bytes;
        }
        for v in &old.variants {
            for t in &v.meta.tags {
                if let Some(set) = self.tags.get_mut(t) {
                    set.remove(&hash);
                    if set.is_empty() {
                        self.tags.remove(t);
                    }
                }
            }
        }
    }

    /// Evicts (or demotes) until one entry has left; false when nothing is left to evict.
    fn evict_one(&mut self, limit: u64) -> bool {
        loop {
            let from_small =
                !self.small.is_empty() && (self.small_bytes > limit / 10 || self.main.is_empty());
            let slot = if from_small {
                self.small.pop_front()
            } else {
                self.main.pop_front()
            };
            let Some((hash, generation)) = slot else {
                return false;
            };
            let live = self
                .map
                .get(&hash)
                .is_some_and(|e| e.generation == generation && e.in_main != from_small);
            if !live {
                continue;
            }
            let Some(e) = self.map.get_mut(&hash) else {
                continue;
            };
            if from_small {
                if e.freq > 0 {
                    // Hit while new: promote.
                    e.freq = 0;
                    e.in_main = true;
                    self.small_bytes -= e.bytes;
                    self.main.push_back((hash, generation));
                    continue;
                }
                let old = self.map.remove(&hash);
                if let Some(old) = old {
                    self.forget(hash, &old);
                }
                self.ghost.push_back(hash);
                self.ghost_set.insert(hash);
                while self.ghost.len() > self.map.len().max(64) {
                    if let Some(g) = self.ghost.pop_front() {
                        self.ghost_set.remove(&g);
                    }
                }
                return true;
            }
            if e.freq > 0 {
                e.freq -= 1;
                self.main.push_back((hash, generation));
                continue;
            }
            if let Some(old) = self.map.remove(&hash) {
                self.forget(hash, &old);
            }
            return true;
        }
    }
}

/// The first tier of every zone. The hit path calls [`MemoryStore::lookup`] directly (generic
/// over the Vary closure); the trait serves the zone's walk over its tiers and purges.
impl Storage for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn lookup(
        &self,
        key: &CacheKey,
        value_of: &dyn Fn(&str) -> Option<Bytes>,
        _files: bool,
    ) -> Lookup {
        MemoryStore::lookup(self, key, value_of)
    }
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>) -> bool {
        MemoryStore::insert(self, key, obj.clone())
    }
    fn contains(&self, key: &CacheKey) -> bool {
        let shard = self.shard(key.hash);
        shard
            .map
            .get(&key.hash)
            .is_some_and(|e| e.key.text == key.text)
    }
    fn purge(&self, sel: &PurgeSelector, soft: bool) -> Purged {
        Purged {
            count: MemoryStore::purge(self, sel, soft),
            recorded: None,
        }
    }
    fn usage(&self) -> (u64, u64) {
        MemoryStore::usage(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(
        body_len: usize,
        tags: &[&str],
        vary: Vec<(String, Option<Bytes>)>,
    ) -> Arc<CachedObject> {
        let mut meta = crate::object::tests::meta(None);
        meta.vary = vary;
        meta.tags = tags.iter().map(|t| t.to_string()).collect();
        Arc::new(CachedObject::new(
            meta,
            Bytes::new(),
            Vec::new(),
            Bytes::from(vec![b'x'; body_len]),
        ))
    }

    fn key(url: &str) -> CacheKey {
        CacheKey::from_url("http", url)
    }

    #[test]
    fn bytes_never_exceed_the_limit_and_evicted_objects_are_gone() {
        let store = MemoryStore::new(64 * 1024, 4);
        for i in 0..2000 {
            assert!(store.insert(&key(&format!("h/{i}")), obj(500 + i % 700, &[], vec![])));
            let (_, bytes) = store.usage();
            assert!(bytes <= store.limit(), "{bytes} > {}", store.limit());
        }
        let (keys, _) = store.usage();
        assert!(keys > 20 && keys < 200, "{keys}");
        let evictions = store.stats.evictions.load(Ordering::Relaxed);
        assert_eq!(evictions + keys, 2000);
        let found = (0..2000)
            .filter(|i| {
                matches!(
                    store.lookup(&key(&format!("h/{i}")), |_| None),
                    Lookup::Found(_)
                )
            })
            .count();
        assert_eq!(found as u64, keys, "evicted objects are really gone");
        assert!(
            !store.insert(&key("huge"), obj(1 << 20, &[], vec![])),
            "bigger than a shard"
        );
    }

    #[test]
    fn scan_resistance_keeps_hot_keys() {
        let store = MemoryStore::new(200 * 1024, 1);
        for i in 0..50 {
            store.insert(&key(&format!("hot/{i}")), obj(1000, &[], vec![]));
        }
        for _ in 0..3 {
            for i in 0..50 {
                let _ = store.lookup(&key(&format!("hot/{i}")), |_| None);
            }
        }
        // A one-off scan five times the size of the cache.
        for i in 0..800 {
            store.insert(&key(&format!("scan/{i}")), obj(1000, &[], vec![]));
        }
        let hot = (0..50)
            .filter(|i| {
                matches!(
                    store.lookup(&key(&format!("hot/{i}")), |_| None),
                    Lookup::Found(_)
                )
            })
            .count();
        assert!(hot >= 45, "only {hot} of 50 hot keys survived the scan");
    }

    #[test]
    fn vary_variants_and_purges() {
        let store = MemoryStore::new(1 << 20, 2);
        let gz = vec![(
            "accept-encoding".to_string(),
            Some(Bytes::from_static(b"gzip")),
        )];
        let plain = vec![("accept-encoding".to_string(), None)];
        store.insert(&key("a.test/x"), obj(10, &["product-1"], gz));
        store.insert(&key("a.test/x"), obj(20, &["product-1"], plain));
        let found = |v: Option<&'static [u8]>| match store
            .lookup(&key("a.test/x"), move |_| v.map(Bytes::from_static))
        {
            Lookup::Found(o) => o.body.len(),
            Lookup::VariantMiss => 1,
            Lookup::Miss | Lookup::Later(_) => 0,
        };
        assert_eq!(
            (found(Some(b"gzip")), found(None), found(Some(b"br"))),
            (10, 20, 1)
        );
        store.insert(&key("a.test/y"), obj(10, &["product-2"], vec![]));
        store.insert(&key("b.test/y"), obj(10, &[], vec![]));
        store.insert(&key("a.test/z/1"), obj(10, &[], vec![]));
        assert_eq!(
            store.purge(&PurgeSelector::Tag("product-1".into()), false),
            1
        );
        assert_eq!(found(None), 0);
        assert_eq!(
            store.purge(&PurgeSelector::Prefix(b"a.test/z".to_vec()), false),
            1
        );
        assert_eq!(
            store.purge(
                &PurgeSelector::Regex(regex::bytes::Regex::new("^b\\.test/").unwrap()),
                true
            ),
            1
        );
        match store.lookup(&key("b.test/y"), |_| None) {
            Lookup::Found(o) => assert!(o.is_invalidated(), "soft purge keeps the object, stale"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            store.purge(&PurgeSelector::Host(b"a.test".to_vec()), false),
            1
        );
        assert_eq!(
            store.purge(&PurgeSelector::Exact(key("b.test/y")), false),
            1
        );
        assert_eq!(store.usage(), (0, 0));
        store.insert(&key("c/1"), obj(1, &[], vec![]));
        assert_eq!(store.purge(&PurgeSelector::All, false), 1);
    }

    #[test]
    fn captures_in_flight_take_room_from_stored_objects() {
        let store = MemoryStore::new(100_000, 1);
        for i in 0..50 {
            store.insert(&key(&format!("/{i}")), obj(1000, &[], vec![]));
        }
        let full = store.usage().1;
        assert!(full > 80_000, "{full}");
        assert!(store.reserve(40_000));
        assert!(
            !store.reserve(20_000),
            "in flight may take at most half the limit"
        );
        store.insert(&key("/new"), obj(1000, &[], vec![]));
        assert!(store.usage().1 + store.in_flight() <= store.limit());
        store.release(40_000);
        assert_eq!(store.in_flight(), 0);
        assert!(store.reserve(50_000));
    }
}
