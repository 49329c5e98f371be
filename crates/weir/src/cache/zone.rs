//! A cache zone: its tiers (the memory store first, then the lower tiers as a list of
//! `weir_cache::Storage`: today the disk tier, when configured), the table of in-flight misses
//! used for request coalescing, and the hit-for-miss marks. Shared by all workers (`Arc`), with short `Mutex` sections only. The two
//! tables are sharded like the store (by key hash, one mutex per shard), so workers missing on
//! different keys do not queue on one lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::watch;
use weir_cache::store::{Lookup, PurgeSelector};
use weir_cache::{variants, CacheKey, CachedObject, Clock, DiskTier, MemoryStore, Read, Storage};
use weir_http::Header;

/// Where a coalesced fetch stands, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchPhase {
    /// No response head yet.
    Fetching,
    /// The head is published and body chunks are arriving.
    Streaming,
    /// Every chunk is published (and the response stored if it could be).
    Complete,
    /// Not storable, or the fetch failed before a head: fetch on your own.
    Uncacheable,
    /// The upstream failed mid-body: abort, as the leader's client is aborted.
    Aborted,
}

/// The head a leader publishes for its followers (fields as they would be stored).
#[derive(Debug, Clone)]
pub struct StreamHead {
    pub status: u16,
    pub reason: Bytes,
    pub headers: Vec<Header>,
    /// Known body length, if the upstream framed it by Content-Length.
    pub content_length: Option<u64>,
}

#[derive(Debug)]
struct Progress {
    phase: FetchPhase,
    head: Option<StreamHead>,
    chunks: Vec<Bytes>,
}

/// One in-flight miss: what the leader has received so far, for its followers to stream.
#[derive(Debug)]
pub struct Inflight {
    progress: Mutex<Progress>,
    changed: watch::Sender<u64>,
}

impl Inflight {
    fn new() -> Inflight {
        Inflight {
            progress: Mutex::new(Progress {
                phase: FetchPhase::Fetching,
                head: None,
                chunks: Vec::new(),
            }),
            changed: watch::channel(0).0,
        }
    }

    fn update(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.progress.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_modify(|v| *v += 1);
    }

    /// Leader: the response head, once it is known to be storable.
    pub fn publish_head(&self, head: StreamHead) {
        self.update(|p| {
            p.head = Some(head);
            p.phase = FetchPhase::Streaming;
        });
    }

    /// Leader: one more piece of the body.
    pub fn push_chunk(&self, chunk: &Bytes) {
        self.update(|p| p.chunks.push(chunk.clone()));
    }

    /// Follower: a receiver woken on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Where the fetch stands.
    pub fn phase(&self) -> FetchPhase {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .phase
    }

    /// Follower: the phase, the head, and the chunks from index `from` on.
    pub fn snapshot(&self, from: usize) -> (FetchPhase, Option<StreamHead>, Vec<Bytes>) {
        let p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        (
            p.phase,
            p.head.clone(),
            p.chunks
                .get(from..)
                .map(<[Bytes]>::to_vec)
                .unwrap_or_default(),
        )
    }

    fn end(&self, phase: FetchPhase) {
        self.update(|p| {
            // A fetch that published a head but never completed failed mid-body.
            p.phase = if p.head.is_some() && phase != FetchPhase::Complete {
                FetchPhase::Aborted
            } else {
                phase
            };
        });
    }
}

/// A map from key hashes split in shards, each behind its own mutex.
#[derive(Debug)]
struct Sharded<V> {
    shards: Box<[Mutex<HashMap<u64, V>>]>,
}

impl<V> Sharded<V> {
    fn new(shards: usize) -> Sharded<V> {
        Sharded {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }

    /// The shard holding `hash` (a poisoned lock only means a panic elsewhere mid-update).
    fn lock(&self, hash: u64) -> std::sync::MutexGuard<'_, HashMap<u64, V>> {
        let i = (hash % self.shards.len() as u64) as usize;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hit-for-miss marks kept per shard before expired ones are swept on insert: marks for keys
/// never asked again would otherwise pile up.
const HIT_FOR_MISS_SWEEP: usize = 4096;

/// Shards of a store of hot copies (it is small).
const HOT_SHARDS: usize = 4;

/// How long a purge waits for the disk tier to record it before it is answered as not done.
pub const PURGE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One zone.
#[derive(Debug)]
pub struct CacheZone {
    pub name: String,
    /// The first tier. The hit path calls it directly (its lookup is generic and inlined).
    pub store: MemoryStore,
    /// The tiers below memory, in lookup order. A store goes to every tier; a purge too.
    lower: Vec<Arc<dyn Storage>>,
    /// The disk tier (also in `lower`), for what only it does: metrics, its snapshot, the
    /// hand-over of a binary upgrade, the budget of its write queue.
    pub disk: Option<Arc<DiskTier>>,
    /// With a disk tier: bytes of responses being captured to be stored (bounded by the
    /// tier's write queue, not by the memory store, so objects larger than memory are stored).
    captures: std::sync::atomic::AtomicU64,
    inflight: Sharded<Arc<Inflight>>,
    hit_for_miss: Sharded<u64>,
    /// The clock the zone's freshness runs on (the registry's: see `runtime/registry.rs`).
    clock: Arc<dyn Clock>,
    /// Copies of keys other members own (`cluster.local_hot`), filled by peer fills. Not a
    /// tier: nothing is stored here but what an owner answered, and only this node reads it.
    hot: arc_swap::ArcSwapOption<MemoryStore>,
    /// `false` while the previous process's memory objects are expected (binary upgrade of a
    /// zone without a disk tier, `cli/handover.rs`): misses wait for them, briefly.
    warm: watch::Sender<bool>,
}

/// The role a request gets for a missing key.
#[derive(Debug)]
pub enum Role {
    /// Fetch it, publish progress, and call [`CacheZone::finish`].
    Leader(Arc<Inflight>),
    /// Follow the leader's progress.
    Follower(Arc<Inflight>),
}

impl CacheZone {
    pub fn new(name: &str, limit: u64, shards: usize, clock: Arc<dyn Clock>) -> CacheZone {
        CacheZone::with_disk(name, limit, shards, clock, None)
    }

    /// A zone with a disk tier behind its memory store.
    pub fn with_disk(
        name: &str,
        limit: u64,
        shards: usize,
        clock: Arc<dyn Clock>,
        disk: Option<Arc<DiskTier>>,
    ) -> CacheZone {
        CacheZone {
            name: name.to_string(),
            store: MemoryStore::new(limit, shards),
            lower: disk.iter().map(|d| d.clone() as Arc<dyn Storage>).collect(),
            disk,
            captures: std::sync::atomic::AtomicU64::new(0),
            warm: watch::channel(true).0,
            hot: arc_swap::ArcSwapOption::empty(),
            inflight: Sharded::new(shards),
            hit_for_miss: Sharded::new(shards),
            clock,
        }
    }

    /// Unix seconds, as the cache sees them.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Stores `obj` in every tier (a lower tier may queue it). False if none took it (too
    /// large for a memory shard, and no lower tier).
    pub fn store_object(&self, key: &CacheKey, obj: &Arc<CachedObject>) -> bool {
        let mut taken = false;
        for tier in &self.lower {
            taken |= tier.insert(key, obj);
        }
        self.store.insert(key, obj.clone()) || taken
    }

    /// Sets the size of the store of hot copies (`None`: none). The same size keeps what it
    /// holds; another starts empty.
    pub fn set_hot(&self, limit: Option<u64>) {
        let same = match (self.hot.load().as_deref(), limit) {
            (None, None) => true,
            (Some(h), Some(l)) => h.limit() == l / HOT_SHARDS as u64 * HOT_SHARDS as u64,
            _ => false,
        };
        if !same {
            self.hot
                .store(limit.map(|l| Arc::new(MemoryStore::new(l, HOT_SHARDS))));
        }
    }

    /// The store of hot copies of keys other members own, if the zone keeps one.
    pub fn hot(&self) -> Option<Arc<MemoryStore>> {
        self.hot.load_full()
    }

    /// Purges the hot copies too (a purge reaches every copy this node holds).
    fn purge_hot(&self, sel: &PurgeSelector, soft: bool) -> u64 {
        self.hot.load().as_ref().map_or(0, |h| h.purge(sel, soft))
    }

    /// Whether the zone has tiers below memory.
    pub fn has_lower(&self) -> bool {
        !self.lower.is_empty()
    }

    /// Whether a tier below memory holds `key` now.
    pub fn lower_contains(&self, key: &CacheKey) -> bool {
        self.lower.iter().any(|t| t.contains(key))
    }

    /// Reserves `n` bytes for a response being captured to be stored (see
    /// [`MemoryStore::reserve`]); with a disk tier, from a budget of the tier's write queue.
    pub fn reserve(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match &self.disk {
            None => self.store.reserve(n),
            Some(d) => {
                let cap = d.config().write_queue;
                self.captures
                    .fetch_update(Relaxed, Relaxed, |c| (c + n <= cap).then_some(c + n))
                    .is_ok()
            }
        }
    }

    /// Gives back bytes taken with [`CacheZone::reserve`].
    pub fn release(&self, n: u64) {
        match &self.disk {
            None => self.store.release(n),
            Some(_) => {
                self.captures
                    .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// After a memory miss: the first lower tier's object for `key` whose Vary values match the
    /// request, moved up to memory when read whole (the next hit is a memory hit). `files`: the
    /// client can take a large body from a file (`Read::File`: not moved up; the page cache
    /// holds it, as nginx's files are held). Waits for the reads (never blocks the thread).
    pub async fn lookup_lower(
        &self,
        key: &CacheKey,
        value_of: &dyn Fn(&str) -> Option<Bytes>,
        files: bool,
    ) -> Option<Read> {
        for tier in &self.lower {
            let Some(mut read) = read_from(&**tier, key, value_of, files).await else {
                continue;
            };
            if !read.object().vary_matches(value_of) {
                // Another variant: under its own key (`weir_cache::variants`).
                let variant = variants::for_request(key, read.object(), value_of);
                match read_from(&**tier, &variant, value_of, files).await {
                    Some(r) if r.object().vary_matches(value_of) => read = r,
                    _ => continue,
                }
            }
            if let (Read::Whole(obj), true) = (&read, tier.promotes()) {
                self.store.insert(key, obj.clone());
            }
            return Some(read);
        }
        None
    }

    /// Marks the zone as expecting (`false`) or having received (`true`) the previous
    /// process's memory objects.
    pub fn set_warm(&self, warm: bool) {
        self.warm.send_replace(warm);
    }

    /// Whether a miss must wait for the previous process's objects ([`CacheZone::wait_warm`]).
    pub fn is_warming(&self) -> bool {
        !*self.warm.borrow()
    }

    /// Waits until the previous process's objects are in (at most 2 s: a miss is then served as
    /// one).
    pub async fn wait_warm(&self) {
        let mut rx = self.warm.subscribe();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), rx.wait_for(|w| *w)).await;
    }

    /// Purges every tier; a tier that persists purges has recorded it durably before this
    /// returns. `Err` when one could not (a full disk) or not within [`PURGE_WAIT`] (another
    /// process still holds the directory): the purge holds in this process, but a restart
    /// would serve the objects again, so it must not be acknowledged as done.
    pub async fn purge(&self, sel: &PurgeSelector, soft: bool) -> Result<u64, String> {
        // Lower tiers first: a read racing the purge must not move an object up to memory
        // after memory was purged.
        let lower: Vec<_> = self
            .lower
            .iter()
            .map(|t| (t.name(), t.purge(sel, soft)))
            .collect();
        let mut n = self.store.purge(sel, soft).max(self.purge_hot(sel, soft));
        for (tier, purged) in lower {
            n = n.max(purged.count);
            let Some(recorded) = purged.recorded else {
                continue;
            };
            match tokio::time::timeout(PURGE_WAIT, recorded).await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(format!(
                        "zone {}: the {tier} tier could not record the purge (disk full?): it holds until a restart only",
                        self.name
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "zone {}: the {tier} tier did not record the purge within {PURGE_WAIT:?}",
                        self.name
                    ))
                }
            }
        }
        Ok(n)
    }

    /// Purges every tier without waiting for lower tiers to record it (it is in force for
    /// their reads at once, and recorded within milliseconds): for the cache's own
    /// invalidations, which no client is told are done.
    pub fn purge_now(&self, sel: &PurgeSelector, soft: bool) -> u64 {
        for tier in &self.lower {
            drop(tier.purge(sel, soft));
        }
        self.purge_hot(sel, soft);
        self.store.purge(sel, soft)
    }

    /// Invalidates `url` (RFC 9111 §4.4, after an unsafe request). `plain_keys`: the route keys
    /// by URL alone, so a lower tier that lacks the URL's plain GET key (either scheme) holds
    /// nothing of it and no purge is recorded there: every POST to a new URL once added one to
    /// the disk tier, for as long as older segments lived (24 MB of `purges.log` for 3000
    /// POSTs).
    pub fn invalidate(&self, url: Vec<u8>, plain_keys: bool) -> u64 {
        let text = String::from_utf8_lossy(&url).into_owned();
        let sel = PurgeSelector::Url(url);
        for tier in &self.lower {
            let held = !plain_keys
                || ["http", "https"]
                    .iter()
                    .any(|scheme| tier.contains(&CacheKey::from_url(scheme, &text)));
            if held {
                drop(tier.purge(&sel, false));
            }
        }
        self.purge_hot(&sel, false);
        self.store.purge(&sel, false)
    }

    /// Becomes the leader for `hash`, or a follower of the request already fetching it.
    pub fn join(&self, hash: u64) -> Role {
        let mut table = self.inflight.lock(hash);
        if let Some(f) = table.get(&hash) {
            return Role::Follower(f.clone());
        }
        let f = Arc::new(Inflight::new());
        table.insert(hash, f.clone());
        Role::Leader(f)
    }

    /// Ends a leader's fetch with `phase` and releases its followers.
    pub fn finish(&self, hash: u64, inflight: &Inflight, phase: FetchPhase) {
        self.inflight.lock(hash).remove(&hash);
        inflight.end(phase);
    }

    /// Marks `hash` hit-for-miss until `now + secs`.
    pub fn mark_hit_for_miss(&self, hash: u64, secs: u64) {
        if secs > 0 {
            let now = self.now();
            let mut marks = self.hit_for_miss.lock(hash);
            if marks.len() >= HIT_FOR_MISS_SWEEP {
                marks.retain(|_, until| *until > now);
            }
            marks.insert(hash, now + secs);
        }
    }

    /// Whether `hash` is marked hit-for-miss now (expired marks are dropped).
    pub fn is_hit_for_miss(&self, hash: u64) -> bool {
        let now = self.now();
        let mut m = self.hit_for_miss.lock(hash);
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
        self.hit_for_miss.lock(hash).remove(&hash);
    }
}

/// One lookup in `tier`, waited for when it completes later.
async fn read_from(
    tier: &dyn Storage,
    key: &CacheKey,
    value_of: &dyn Fn(&str) -> Option<Bytes>,
    files: bool,
) -> Option<Read> {
    match tier.lookup(key, value_of, files) {
        Lookup::Found(obj) => Some(Read::Whole(obj)),
        Lookup::Later(pending) => pending.await,
        Lookup::VariantMiss | Lookup::Miss => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing_and_marks_are_per_key_across_shards() {
        let clock = Arc::new(weir_cache::ManualClock::new());
        let zone = CacheZone::new("z", 1 << 20, 4, clock.clone());
        for hash in 0..16u64 {
            assert!(matches!(zone.join(hash), Role::Leader(_)), "{hash}");
            assert!(matches!(zone.join(hash), Role::Follower(_)), "{hash}");
        }
        if let Role::Follower(f) = zone.join(3) {
            zone.finish(3, &f, FetchPhase::Complete);
        }
        assert!(
            matches!(zone.join(3), Role::Leader(_)),
            "a finished key leads again"
        );
        zone.mark_hit_for_miss(7, 10);
        assert!(zone.is_hit_for_miss(7) && !zone.is_hit_for_miss(8));
        clock.advance(11);
        assert!(!zone.is_hit_for_miss(7), "expired");
    }

    #[test]
    fn expired_hit_for_miss_marks_are_swept() {
        let clock = Arc::new(weir_cache::ManualClock::new());
        let zone = CacheZone::new("z", 1 << 20, 1, clock.clone());
        for hash in 0..HIT_FOR_MISS_SWEEP as u64 {
            zone.mark_hit_for_miss(hash, 1);
        }
        clock.advance(5);
        zone.mark_hit_for_miss(u64::MAX, 1);
        assert_eq!(
            zone.hit_for_miss.lock(0).len(),
            1,
            "expired marks were swept"
        );
    }
}
