//! The disk tier: a cache zone's second level, behind the memory store.
//!
//! **Layout: segments and an index, not a file per object.** Objects are records appended to
//! numbered segment files ([`log`]); an in-memory index maps a key's hash to (segment, offset,
//! length) ([`index`]). nginx and nuster keep one file per object: every store is a create, a
//! write and a rename, eviction is an unlink, and a restart must walk every file to rebuild the
//! index (nginx's cache loader; one nuster user reported over an hour). Segments turn stores into
//! appends, eviction into removing the oldest segment (FIFO by segment, as ATS's cyclic store),
//! and a restart into reading one index snapshot plus the bytes written after it.
//!
//! **Not `foyer` (yet measured).** The issue suggested measuring the `foyer` hybrid cache first;
//! that comparison is still owed (see the issue note). What decided for our own: the same
//! checksummed record format serves the cache tier, the key-value log and the purge log; purges
//! by prefix, host, regex and tag must persist and be checked against each object's write
//! sequence, which a generic key-value cache does not offer; and the restart should be one
//! snapshot read, whose cost we can state (bench/disk.sh). The tier is about 1,000 lines; the
//! memory tier in front of it stays weir's S3-FIFO store.
//!
//! * **Never blocking a worker**: reads go to a small thread pool ([`pool`]), answered on a
//!   oneshot; a full pool queue is a miss. Stores go to one writer thread behind a queue bounded
//!   in bytes and entries; when the disk falls behind, stores are dropped and counted, never
//!   waited for.
//! * **Admission**: while the disk is under 90% of its bound every stored object is written; past
//!   that an object is written only when its key was stored before (a doorkeeper bitmap), so
//!   one-hit wonders do not push out the rest.
//! * **Crash safety**: every record carries a CRC-32 ([`record`]); a torn tail is cut when
//!   loading, and a record that fails its check when read is dropped from the index and counted,
//!   never served.
//! * **Purges persist** ([`purges`]).
//! * **Restarts**: the index loads in the writer thread; lookups made meanwhile wait for it (up
//!   to two seconds, asynchronously) instead of missing.
//! * **One process at a time**: the directory is locked (`flock`); during a binary upgrade the
//!   new process takes the tier when the old one hands it over ([`DiskTier::close`]).
//!
//! Large bodies of records checked once go out with `sendfile` ([`file_hit`]); Vary variants
//! are written under keys of their own ([`crate::variants`]). The tier is reached through the
//! [`Storage`] seam like any other (`impl Storage for DiskTier` below).

pub mod codec;
pub mod dump;
mod file_hit;
pub mod index;
pub mod log;
pub mod pool;
pub mod purges;
pub mod record;
#[cfg(test)]
mod tier_tests;
mod writer;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

pub use file_hit::FILE_MIN;

use crate::key::CacheKey;
use crate::object::CachedObject;
use crate::storage::PurgeSelector;
use crate::storage::{Lookup, Pending, Purged, Read, Storage};
use crate::variants;

/// A disk tier's settings (`cache_zones.NAME.disk`).
#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub path: PathBuf,
    /// Bytes of segments kept.
    pub max_size: u64,
    pub segment_size: u64,
    pub io_threads: usize,
    /// Bytes of stores waiting for the writer before more are dropped.
    pub write_queue: u64,
    /// How often the index snapshot is written while it changes.
    pub snapshot_every: Duration,
    /// Bytes to leave free on the file system (nginx's `min_free`): the oldest segments are
    /// evicted before a write would go below it. 0: only a full disk (ENOSPC) evicts.
    pub min_free: u64,
}

impl DiskConfig {
    /// Defaults for a tier of `max_size` bytes at `path`.
    pub fn new(path: PathBuf, max_size: u64) -> DiskConfig {
        DiskConfig {
            path,
            max_size,
            segment_size: (max_size / 32).clamp(1 << 20, 256 << 20),
            io_threads: 2,
            write_queue: 64 << 20,
            snapshot_every: Duration::from_secs(10),
            min_free: 0,
        }
    }
}

/// Counters of a disk tier (exported in /metrics).
#[derive(Debug, Default)]
pub struct DiskStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub writes: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Stores dropped because the writer queue was full.
    pub write_dropped: AtomicU64,
    /// Stores not admitted (a key seen once while the disk is nearly full).
    pub not_admitted: AtomicU64,
    pub write_errors: AtomicU64,
    /// Reads refused because the IO pool's queue was full (served as misses).
    pub read_refused: AtomicU64,
    pub read_errors: AtomicU64,
    /// Records that failed their checksum (or did not parse), dropped.
    pub corrupt: AtomicU64,
    /// Torn tails cut when loading.
    pub torn: AtomicU64,
    /// Objects dropped with evicted segments.
    pub evicted: AtomicU64,
    /// Writes that found the file system full (ENOSPC) and evicted to make room.
    pub full_evictions: AtomicU64,
    /// Objects found purged when read.
    pub purged_on_read: AtomicU64,
    /// Hits answered with the body's place in the segment file (`file_hit.rs`).
    pub file_hits: AtomicU64,
    /// Milliseconds the last index load took.
    pub load_ms: AtomicU64,
}

enum Msg {
    Store(CacheKey, Arc<CachedObject>, u64),
    /// Persist a purge (already in the in-memory list) and answer when it is synced: whether
    /// it is on disk (a purge that could not be written is in force until a restart only).
    Purge(purges::Purge, oneshot::Sender<bool>),
    /// Write the index snapshot now and answer.
    Snapshot(oneshot::Sender<()>),
    /// Snapshot, release the directory and stop.
    Stop,
}

struct Inner {
    cfg: DiskConfig,
    log: log::Log,
    index: index::Index,
    purges: RwLock<Vec<purges::Purge>>,
    /// Bumped by every purge: a read that raced one is checked again before it is promoted.
    purge_gen: AtomicU64,
    seq: AtomicU64,
    ready: watch::Sender<bool>,
    /// Another process holds the directory (an upgrade's old binary, or a second weir on the
    /// same path): lookups are misses at once rather than waits for a load that may not come.
    lock_wait: AtomicBool,
    stats: DiskStats,
    queued: AtomicU64,
    queued_entries: AtomicU64,
    door: Vec<AtomicU64>,
    door_set: AtomicU64,
    closed: AtomicBool,
    /// Records of large bodies whose checksum held when read whole (`file_hit.rs`).
    checked: file_hit::Checked,
}

/// A disk tier.
pub struct DiskTier {
    inner: Arc<Inner>,
    tx: Mutex<Option<Sender<Msg>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    pool: pool::IoPool,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("path", &self.inner.cfg.path)
            .finish()
    }
}

const DOOR_BITS: usize = 1 << 20;
/// Entries waiting for the writer, whatever their bytes.
const QUEUE_ENTRIES: u64 = 4096;

/// The stable hash of a key text on disk (FNV-1a with a final mix): the index outlives the
/// process, and the process's own key hash is randomly seeded.
pub fn stable_hash(text: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl DiskTier {
    /// Opens the tier at `cfg.path` (created if needed). The index loads in the background
    /// (after the directory lock is taken); lookups wait for it.
    pub fn open(cfg: DiskConfig) -> std::io::Result<DiskTier> {
        let log = log::Log::open(&cfg.path, cfg.segment_size)?;
        // A directory this process cannot write is refused now (`weir check` and `run` say
        // so), not waited for: its lock would never come.
        std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(cfg.path.join("lock"))?;
        let pool = pool::IoPool::new("weir-disk-io", cfg.io_threads, 1024)?;
        let inner = Arc::new(Inner {
            log,
            index: index::Index::default(),
            purges: RwLock::new(Vec::new()),
            purge_gen: AtomicU64::new(0),
            seq: AtomicU64::new(1),
            ready: watch::channel(false).0,
            stats: DiskStats::default(),
            queued: AtomicU64::new(0),
            queued_entries: AtomicU64::new(0),
            door: (0..DOOR_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
            door_set: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            lock_wait: AtomicBool::new(false),
            checked: file_hit::Checked::default(),
            cfg,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let w = inner.clone();
        let writer = std::thread::Builder::new()
            .name("weir-disk-writer".into())
            .spawn(move || writer::run(&w, &rx))?;
        Ok(DiskTier {
            inner,
            tx: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
            pool,
        })
    }

    pub fn config(&self) -> &DiskConfig {
        &self.inner.cfg
    }

    pub fn stats(&self) -> &DiskStats {
        &self.inner.stats
    }

    /// Whether the index is loaded.
    pub fn is_ready(&self) -> bool {
        *self.inner.ready.borrow()
    }

    /// Waits (asynchronously) until the index is loaded, at most `limit`.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let mut rx = self.inner.ready.subscribe();
        let loaded = tokio::time::timeout(limit, rx.wait_for(|r| *r))
            .await
            .is_ok();
        loaded
    }

    /// (objects, bytes) on disk.
    pub fn usage(&self) -> (u64, u64) {
        (self.inner.index.len(), self.inner.log.bytes())
    }

    fn send(&self, msg: Msg) -> bool {
        match &*self.tx.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }

    /// Queues `obj` to be written; never waits. Dropped (and counted) when the writer is behind
    /// or the key is not admitted.
    pub fn store(&self, key: &CacheKey, obj: &Arc<CachedObject>) {
        let inner = &self.inner;
        if inner.closed.load(Ordering::Relaxed) {
            return;
        }
        let h = stable_hash(&key.text);
        if !self.admit(h) {
            DiskStats::bump(&inner.stats.not_admitted);
            return;
        }
        self.queue(key.compact(), obj);
        if let Some(variant) = variants::of_object(key, obj) {
            self.queue(variant, obj);
        }
    }

    /// Queues one write, or drops it (counted) when the writer is behind.
    fn queue(&self, key: CacheKey, obj: &Arc<CachedObject>) {
        let inner = &self.inner;
        let cost = obj.size();
        let queued = inner.queued.load(Ordering::Relaxed);
        if queued + cost > inner.cfg.write_queue
            || inner.queued_entries.load(Ordering::Relaxed) >= QUEUE_ENTRIES
        {
            DiskStats::bump(&inner.stats.write_dropped);
            return;
        }
        inner.queued.fetch_add(cost, Ordering::Relaxed);
        inner.queued_entries.fetch_add(1, Ordering::Relaxed);
        if !self.send(Msg::Store(key, obj.clone(), cost)) {
            inner.queued.fetch_sub(cost, Ordering::Relaxed);
            inner.queued_entries.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Writes `objects` (a memory store's, hottest first) that the disk does not hold yet,
    /// whatever the admission and queue bounds, then closes the tier: a binary upgrade or a
    /// stop hands the memory cache to the next process this way. Blocking.
    pub fn hand_over(&self, objects: Vec<(CacheKey, Arc<CachedObject>)>) -> u64 {
        let mut n = 0;
        for (key, obj) in objects {
            let variant = variants::of_object(&key, &obj);
            let held = variant.as_ref().unwrap_or(&key);
            if obj.is_invalidated() || self.contains(held) {
                continue;
            }
            for k in std::iter::once(key).chain(variant) {
                let cost = obj.size();
                self.inner.queued.fetch_add(cost, Ordering::Relaxed);
                self.inner.queued_entries.fetch_add(1, Ordering::Relaxed);
                if self.send(Msg::Store(k, obj.clone(), cost)) {
                    n += 1;
                }
            }
        }
        self.close();
        n
    }

    /// Doorkeeper admission: everything while the disk has room, else keys stored before.
    fn admit(&self, h: u64) -> bool {
        let inner = &self.inner;
        let bit = (h as usize) % DOOR_BITS;
        let (word, mask) = (&inner.door[bit / 64], 1u64 << (bit % 64));
        let seen = word.fetch_or(mask, Ordering::Relaxed) & mask != 0;
        if !seen && inner.door_set.fetch_add(1, Ordering::Relaxed) > DOOR_BITS as u64 / 2 {
            // Half the bits set: start a new window.
            inner
                .door
                .iter()
                .for_each(|w| w.store(0, Ordering::Relaxed));
            inner.door_set.store(0, Ordering::Relaxed);
        }
        seen || inner.log.bytes() < inner.cfg.max_size / 10 * 9
    }

    /// Looks `key` up on disk: `None` when it is not there (known now), else the read, which
    /// answers `None` too if the record is gone, corrupt or purged. `files`: a large body whose
    /// record was checked whole once may come back as its place in the segment file
    /// ([`crate::Read::File`]), only the start of the record being read again.
    pub fn read(&self, key: &CacheKey, files: bool) -> Option<Pending> {
        let inner = self.inner.clone();
        if inner.closed.load(Ordering::Relaxed) {
            return None;
        }
        let h = stable_hash(&key.text);
        let ready = self.is_ready();
        if !ready && inner.lock_wait.load(Ordering::Relaxed) {
            DiskStats::bump(&inner.stats.misses);
            return None;
        }
        if ready {
            let Some(loc) = inner.index.get(h) else {
                DiskStats::bump(&inner.stats.misses);
                return None;
            };
            // A record served from the file before, with no purge since: its fields are known,
            // and the hit is answered here, without the IO pool (`file_hit`).
            if let Some((obj, body)) = files
                .then(|| inner.checked.known(h, loc, &key.text))
                .flatten()
            {
                DiskStats::bump(&inner.stats.file_hits);
                DiskStats::bump(&inner.stats.hits);
                return Some(Box::pin(std::future::ready(Some(Read::File(obj, body)))));
            }
            // What the page cache holds is read here, without a hop to the IO pool (a small
            // record whole, or a large one's fields).
            let gen = inner.purge_gen.load(Ordering::Acquire);
            if let Ok(read) = inner.read_any(h, loc, &key.text, (files, gen, log::Wait::No)) {
                let got = read.map(|(_, _, got)| got);
                if got.is_some() {
                    DiskStats::bump(&inner.stats.hits);
                }
                return Some(Box::pin(std::future::ready(got)));
            }
        }
        let text = key.text.clone();
        let waiter = (!ready).then(|| inner.ready.subscribe());
        let pool = self.pool.sender();
        Some(Box::pin(async move {
            if let Some(mut rx) = waiter {
                let loaded = tokio::time::timeout(Duration::from_secs(2), rx.wait_for(|r| *r))
                    .await
                    .is_ok();
                if !loaded {
                    return None;
                }
            }
            let Some(loc) = inner.index.get(h) else {
                DiskStats::bump(&inner.stats.misses);
                return None;
            };
            let gen = inner.purge_gen.load(Ordering::Acquire);
            let read = inner.clone();
            let wait = (files, gen, log::Wait::Yes);
            let Some(rx) = pool.run(move || read.read_any(h, loc, &text, wait).ok().flatten())
            else {
                DiskStats::bump(&inner.stats.read_refused);
                return None;
            };
            let (seq, key, got) = rx.await.ok()??;
            // A purge that came in while reading: judge the object again.
            if inner.purge_gen.load(Ordering::Acquire) != gen
                && !inner.judge(h, loc, seq, &key, got.object())
            {
                return None;
            }
            DiskStats::bump(&inner.stats.hits);
            Some(got)
        }))
    }

    /// Whether the index has `key` (its record may still turn out purged or corrupt).
    pub fn contains(&self, key: &CacheKey) -> bool {
        self.inner.index.get(stable_hash(&key.text)).is_some()
    }

    /// Records a purge: in force for reads at once, persisted before the future resolves (on
    /// the writer thread; the caller awaits). It resolves to whether the purge is on disk:
    /// `false` when its record could not be written or synced (a full disk), or the tier is
    /// closed; the purge then holds until a restart only, and must not be acknowledged as done.
    /// While another process holds the directory (an upgrade), it resolves once this one
    /// takes it. Exact keys also leave the index.
    pub fn purge(&self, sel: &PurgeSelector, soft: bool) -> impl Future<Output = bool> + Send {
        let inner = &self.inner;
        let purge = purges::Purge {
            seq: inner.seq.fetch_add(1, Ordering::Relaxed),
            soft,
            sel: sel.clone(),
            seg: inner.log.segments().last().map_or(0, |s| s.0),
        };
        {
            let mut list = inner.purges.write().unwrap_or_else(|e| e.into_inner());
            // The same purge again (an invalidation after every POST to a URL): the newer one
            // replaces it, so the list holds distinct purges only.
            list.retain(|p| p.soft != soft || !purges::same(&p.sel, sel));
            list.push(purge.clone());
        }
        inner.purge_gen.fetch_add(1, Ordering::Release);
        inner.checked.forget_known();
        if let (PurgeSelector::Exact(k), false) = (sel, soft) {
            inner.index.remove(stable_hash(&k.text), None);
        }
        let (done, answered) = oneshot::channel();
        let sent = self.send(Msg::Purge(purge, done));
        async move { sent && answered.await.unwrap_or(false) }
    }

    /// Writes the index snapshot now (tests, and before an upgrade hands the tier over).
    pub async fn snapshot(&self) {
        let (done, answered) = oneshot::channel();
        if self.send(Msg::Snapshot(done)) {
            let _ = answered.await;
        }
    }

    /// Stops using the directory: pending stores are written, the snapshot saved and the lock
    /// released, for the next process (a binary upgrade) to take. Blocking; lookups and stores
    /// after this are misses and no-ops.
    pub fn close(&self) {
        if self.inner.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        self.send(Msg::Stop);
        *self.tx.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Some(w) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = w.join();
        }
    }
}

impl Storage for DiskTier {
    fn name(&self) -> &'static str {
        "disk"
    }
    fn lookup(
        &self,
        key: &CacheKey,
        _value_of: &dyn Fn(&str) -> Option<bytes::Bytes>,
        files: bool,
    ) -> Lookup {
        self.read(key, files).map_or(Lookup::Miss, Lookup::Later)
    }
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>) -> bool {
        self.store(key, obj);
        true
    }
    fn contains(&self, key: &CacheKey) -> bool {
        DiskTier::contains(self, key)
    }
    fn purge(&self, sel: &PurgeSelector, soft: bool) -> Purged {
        Purged {
            count: 0,
            recorded: Some(Box::pin(DiskTier::purge(self, sel, soft))),
        }
    }
    fn usage(&self) -> (u64, u64) {
        DiskTier::usage(self)
    }
}

impl Drop for DiskTier {
    fn drop(&mut self) {
        self.close();
    }
}

/// A read's result: the record's sequence number, its key and the object.
type ReadResult = Option<(u64, CacheKey, Arc<CachedObject>)>;

/// A read without waiting ([`log::Wait::No`]) that would have had to wait for the disk.
#[derive(Debug)]
pub(super) struct Blocked;

impl DiskStats {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Inner {
    /// Reads and checks one record (IO pool thread): `None` when gone, corrupt, for another
    /// key, or purged since it was written.
    fn read(
        &self,
        h: u64,
        loc: log::Loc,
        text: &[u8],
        wait: log::Wait,
    ) -> Result<ReadResult, Blocked> {
        let bytes = match self.log.read_at(loc, loc.len as usize, wait) {
            Ok((_, b)) => b,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && wait == log::Wait::No => {
                return Err(Blocked)
            }
            Err(_) => {
                DiskStats::bump(&self.stats.read_errors);
                self.index.remove(h, Some(loc));
                return Ok(None);
            }
        };
        // The body stays in the buffer it was read into: one copy (the read), not two.
        let bytes = bytes::Bytes::from(bytes);
        let decoded = record::decode(&bytes)
            .filter(|r| r.kind == record::Kind::Object)
            .and_then(|r| Some((r.seq, codec::decode(Some(&bytes), r.key, r.payload)?)));
        let Some((seq, (key, obj))) = decoded else {
            DiskStats::bump(&self.stats.corrupt);
            self.index.remove(h, Some(loc));
            return Ok(None);
        };
        if key.text != text {
            // Another key with the same stable hash: a miss for this one.
            return Ok(None);
        }
        let obj = Arc::new(obj);
        Ok(self
            .judge(h, loc, seq, &key, &obj)
            .then_some((seq, key, obj)))
    }

    /// Applies the purges made after `seq`: false (and out of the index) when one removes the
    /// object; a soft one marks it stale.
    fn judge(&self, h: u64, loc: log::Loc, seq: u64, key: &CacheKey, obj: &CachedObject) -> bool {
        let purges = self.purges.read().unwrap_or_else(|e| e.into_inner());
        match purges::verdict(&purges, seq, key, &obj.meta.tags) {
            None => true,
            Some(true) => {
                obj.invalidate();
                true
            }
            Some(false) => {
                drop(purges);
                DiskStats::bump(&self.stats.purged_on_read);
                self.index.remove(h, Some(loc));
                false
            }
        }
    }

    /// Next sequence number.
    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// A fresh directory under the system's temporary directory.
    pub(crate) fn tempdir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "weir-disk-{name}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        dir
    }
}
