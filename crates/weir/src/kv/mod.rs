//! The key-value store behind the `kv` route action (nuster's NoSQL mode, with PUT, HEAD,
//! conditional writes and a bound that answers 507 instead of silently evicting).
//!
//! Values live in memory (a sharded map, a hard byte bound counting keys, heads and bodies);
//! each one keeps its response head pre-encoded (`Content-Type`, `ETag`, `Last-Modified`,
//! `Content-Length`), so a GET is a map lookup and one vectored write, as a cache hit is. With
//! `disk`, every change is appended to a log ([`log`]) before the request is answered, and the
//! log is replayed at start: values survive restarts, crashes and binary upgrades. A data store
//! never evicts: a PUT that does not fit is refused with 507.
//!
//! Compare-and-set happens under the key's shard lock: `If-Match` / `If-None-Match` are checked
//! against the current value and the new one is put in the same critical section. No code path
//! holds one shard's lock while taking another's (a full store's sweep once deadlocked every
//! worker that way: issue 33 §3).
//!
//! With a log, a value is served only once it is logged: until its write is acknowledged, reads
//! see the value it replaced ([`Value::prev`]); a write that fails is undone (the client got
//! 503), so nothing a restart would lose is ever read or compared against by another client.
//!
//! ETags are versions from one counter per store that starts, at each open, above both every
//! version in the log and the wall clock in microseconds: a version is never issued twice
//! across restarts (a value deleted before a restart does not leave its version to be reused)
//! unless the clock steps back further than the store ever ran at one write a microsecond.

pub mod log;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

/// What the allocator adds to each allocation (glibc's chunk header, rounded up).
const MALLOC_OVERHEAD: usize = 16;

/// Per-value memory besides its key, head and body bytes, counted in `max_size`: the map slot
/// (key handle and `Arc`, at hashbrown's 7/8 load and one control byte), the `Arc<Value>`
/// block, and the allocator's header on each of the six allocations a value makes (key, head,
/// 304 head, ETag, body, Content-Type). Measured: `tests/kv.rs` checks RSS per key against it.
const VALUE_OVERHEAD: u64 = ((std::mem::size_of::<(Bytes, Arc<Value>)>() * 8 / 7 + 1)
    + (std::mem::size_of::<Value>() + 2 * std::mem::size_of::<usize>())
    + 7 * MALLOC_OVERHEAD) as u64;
const SHARDS: usize = 16;

/// A stored value.
#[derive(Debug)]
pub struct Value {
    /// Pre-encoded: `HTTP/1.1 200 OK`, Content-Type, ETag, Last-Modified, Content-Length
    /// (no final CRLF).
    pub head: Bytes,
    /// The 304's: status line, ETag, Last-Modified.
    pub head_304: Bytes,
    pub body: Bytes,
    pub content_type: Bytes,
    /// Its version: the ETag is `"` + hex + `"`.
    pub version: u64,
    pub etag: Bytes,
    pub modified: u64,
    /// Unix seconds after which it is gone (0: never).
    pub expires: u64,
    /// Whether its log write is acknowledged (always, without a log): only then is it read.
    logged: AtomicBool,
    /// Its log write failed and it was undone: skipped wherever it is still referenced.
    failed: AtomicBool,
    /// A deletion waiting for its log write: reads see what it replaced until it is logged,
    /// then nothing; conditions see no value.
    deleted: bool,
    /// The value it replaced, read in its place until it is logged; dropped then.
    prev: Mutex<Option<Arc<Value>>>,
}

impl Value {
    pub fn new(
        body: Bytes,
        content_type: Bytes,
        version: u64,
        modified: u64,
        expires: u64,
    ) -> Value {
        let etag = Bytes::from(format!("\"{version:x}\""));
        let mut head = BytesMut::with_capacity(160 + content_type.len());
        weir_http::response::put_status_line_with(&mut head, 200, b"");
        weir_http::response::put_header(&mut head, b"Content-Type", &content_type);
        weir_http::response::put_header(&mut head, b"ETag", &etag);
        let date = httpdate::fmt_http_date(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(modified),
        );
        weir_http::response::put_header(&mut head, b"Last-Modified", date.as_bytes());
        weir_http::response::put_content_length(&mut head, body.len() as u64);
        let mut head_304 = BytesMut::with_capacity(120);
        weir_http::response::put_status_line(&mut head_304, 304);
        weir_http::response::put_header(&mut head_304, b"ETag", &etag);
        weir_http::response::put_header(&mut head_304, b"Last-Modified", date.as_bytes());
        Value {
            head: head.freeze(),
            head_304: head_304.freeze(),
            body,
            content_type,
            version,
            etag,
            modified,
            expires,
            logged: AtomicBool::new(true),
            failed: AtomicBool::new(false),
            deleted: false,
            prev: Mutex::new(None),
        }
    }

    /// The value reads see in this one's place: itself once logged, else the one it replaced
    /// (the same rule down the chain), else none.
    fn visible(self: &Arc<Value>) -> Option<Arc<Value>> {
        let mut v = self.clone();
        loop {
            if v.logged.load(Ordering::Acquire) {
                return Some(v);
            }
            let prev = v.prev.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
            v = prev;
        }
    }

    /// Its log write is acknowledged: read from now on, and what it replaced is let go.
    pub fn mark_logged(&self) {
        self.logged.store(true, Ordering::Release);
        self.prev.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn cost(&self, key: &[u8]) -> u64 {
        (key.len()
            + self.head.len()
            + self.head_304.len()
            + self.body.len()
            + self.content_type.len()
            + self.etag.len()) as u64
            + VALUE_OVERHEAD
    }

    pub fn live(&self, now: u64) -> bool {
        self.expires == 0 || now < self.expires
    }

    /// What conditionals compare against.
    pub fn validators(&self) -> weir_http::conditional::Validators<'_> {
        weir_http::conditional::Validators {
            etag: Some(&self.etag),
            last_modified_text: None,
            modified: Some(self.modified),
        }
    }
}

/// The wall clock in microseconds: where a store's version counter starts (module doc).
fn clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
        .max(1)
}

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// 412: the precondition did not hold.
    Precondition,
    /// 507: the store is full.
    Full,
    /// 503: the log is behind (writes queued beyond its bound).
    Busy,
}

/// A write's precondition, evaluated against the current value under its lock.
#[derive(Debug, Clone, Copy)]
pub struct Cond<'a> {
    /// `If-Match`: a list of entity tags or `*`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`: a list of entity tags or `*`.
    pub if_none_match: Option<&'a [u8]>,
}

fn list_matches(list: &[u8], etag: &[u8], strong: bool) -> bool {
    let weak = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
    list.split(|b| *b == b',').map(<[u8]>::trim_ascii).any(|t| {
        t == b"*"
            || if strong {
                !t.starts_with(b"W/") && t == etag
            } else {
                weak(t) == weak(etag)
            }
    })
}

impl Cond<'_> {
    /// RFC 9110 §13.1.1–2 for a state-changing request: `If-Match` needs a current value that
    /// matches; `If-None-Match` needs none that matches (`*`: none at all).
    fn holds(&self, current: Option<&Value>) -> bool {
        if let Some(list) = self.if_match {
            match current {
                Some(v) if list_matches(list, &v.etag, true) => {}
                _ => return false,
            }
        }
        if let Some(list) = self.if_none_match {
            if current.is_some_and(|v| list_matches(list, &v.etag, false)) {
                return false;
            }
        }
        true
    }
}

/// Counters (exported in /metrics).
#[derive(Debug, Default)]
pub struct KvStats {
    pub gets: AtomicU64,
    pub hits: AtomicU64,
    pub not_modified: AtomicU64,
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub conflicts: AtomicU64,
    pub too_large: AtomicU64,
    pub full: AtomicU64,
    pub expired: AtomicU64,
}

pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Settings (`kv_stores.NAME`).
#[derive(Debug, Clone, PartialEq)]
pub struct KvSettings {
    pub max_size: u64,
    pub max_value_size: u64,
    /// Seconds a value lives when the PUT gives no `X-TTL` (0: forever).
    pub default_ttl: u64,
    pub disk: Option<log::LogSettings>,
}

/// A store.
#[derive(Debug)]
pub struct KvStore {
    pub name: String,
    pub settings: KvSettings,
    shards: Vec<Mutex<HashMap<Bytes, Arc<Value>>>>,
    bytes: AtomicU64,
    version: AtomicU64,
    /// The `now` (unix seconds) of the last sweep of expired values: values expire on whole
    /// seconds, so a second sweep within the same second would find nothing.
    swept_at: AtomicU64,
    log: std::sync::OnceLock<log::KvLog>,
    /// Whether the values are loaded (from the log, when there is one).
    ready: tokio::sync::watch::Sender<bool>,
    closed: AtomicBool,
    pub stats: KvStats,
}

impl KvStore {
    /// A store; with a log, its values are loaded in the background (requests wait for them).
    pub fn open(name: &str, settings: KvSettings) -> std::io::Result<Arc<KvStore>> {
        let store = Arc::new(KvStore {
            name: name.to_string(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            bytes: AtomicU64::new(0),
            version: AtomicU64::new(clock_micros()),
            swept_at: AtomicU64::new(0),
            log: std::sync::OnceLock::new(),
            ready: tokio::sync::watch::channel(settings.disk.is_none()).0,
            closed: AtomicBool::new(false),
            stats: KvStats::default(),
            settings,
        });
        let Some(disk) = store.settings.disk.clone() else {
            return Ok(store);
        };
        let log = log::KvLog::open(disk, Arc::downgrade(&store))?;
        let _ = store.log.set(log);
        Ok(store)
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, HashMap<Bytes, Arc<Value>>> {
        let h = weir_cache::key::hash_bytes(key);
        self.shards[(h % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Waits (asynchronously) for the values to be loaded, at most `limit`.
    pub async fn wait_ready(&self, limit: std::time::Duration) -> bool {
        let mut rx = self.ready.subscribe();
        let ok = tokio::time::timeout(limit, rx.wait_for(|r| *r))
            .await
            .is_ok();
        ok
    }

    /// The live value of `key` (the last one logged, with a log).
    pub fn get(&self, key: &[u8], now: u64) -> Option<Arc<Value>> {
        let v = self.shard(key).get(key).cloned()?.visible()?;
        if v.deleted {
            return None;
        }
        if v.live(now) {
            Some(v)
        } else {
            bump(&self.stats.expired);
            None
        }
    }

    /// (keys, bytes).
    pub fn usage(&self) -> (u64, u64) {
        let keys = self
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
            .sum();
        (keys, self.bytes.load(Ordering::Relaxed))
    }

    /// Puts a value if `cond` holds and it fits; returns whether the key was new, the value, and
    /// the log's acknowledgement to await (when there is a log): then call
    /// [`Value::mark_logged`] on success, [`KvStore::undo_put`] on failure.
    pub fn put(
        &self,
        key: &[u8],
        body: Bytes,
        content_type: &[u8],
        ttl: u64,
        cond: Cond<'_>,
        now: u64,
    ) -> Result<(bool, Arc<Value>, Option<log::Ack>), Refused> {
        if self.log.get().is_some_and(|l| !l.has_room()) {
            return Err(Refused::Busy);
        }
        let version = self.version.fetch_add(1, Ordering::Relaxed);
        // `X-TTL: 18446744073709551615` is "for as long as there is", not a wrap to the past.
        let expires = if ttl == 0 { 0 } else { now.saturating_add(ttl) };
        // Copied: a slice of the request's head would pin its whole read buffer.
        let content_type = Bytes::copy_from_slice(content_type);
        let mut value = Value::new(body, content_type, version, now, expires);
        let logging = self.log.get().is_some();
        if logging {
            *value.logged.get_mut() = false;
        }
        let value = Arc::new(value);
        let cost = value.cost(key);
        let mut swept = false;
        loop {
            let mut shard = self.shard(key);
            let head = shard.get(key).cloned();
            // Conditions hold against the newest write, logged or still pending (a pending
            // one that fails is undone; until then it is the newest).
            let current = head.clone().filter(|v| !v.deleted && v.live(now));
            if !cond.holds(current.as_deref()) {
                return Err(Refused::Precondition);
            }
            let old = head.as_ref().map_or(0, |v| v.cost(key));
            let fits = self
                .bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    let after = b - old + cost;
                    (after <= self.settings.max_size).then_some(after)
                })
                .is_ok();
            if fits {
                let created = current.is_none();
                if logging {
                    *value.prev.lock().unwrap_or_else(|e| e.into_inner()) = head;
                }
                let ack = self.log.get().map(|l| l.put(key, &value));
                shard.insert(Bytes::copy_from_slice(key), value.clone());
                return Ok((created, value, ack));
            }
            if swept {
                return Err(Refused::Full);
            }
            // Expired values still hold room until read or replaced: sweep them (one shard
            // at a time, this one's lock let go first), then try once more.
            drop(shard);
            self.sweep(now);
            swept = true;
        }
    }

    /// Undoes a put whose log write failed (the client was told 503): the key goes back to
    /// what it held before, unless another write came on top (which reads skip this one in).
    pub fn undo_put(&self, key: &[u8], value: &Arc<Value>) {
        value.failed.store(true, Ordering::Release);
        let mut shard = self.shard(key);
        let Some(head) = shard.get(key) else { return };
        if !Arc::ptr_eq(head, value) {
            return;
        }
        // What the key held before, skipping writes refused too (they may be undone in any
        // order); a write still pending stays, as its own acknowledgement decides it.
        let mut prev = value.prev.lock().unwrap_or_else(|e| e.into_inner()).take();
        while let Some(p) = prev.take_if(|p| p.failed.load(Ordering::Acquire)) {
            prev = p.prev.lock().unwrap_or_else(|e| e.into_inner()).clone();
        }
        self.bytes.fetch_sub(value.cost(key), Ordering::Relaxed);
        match prev {
            Some(p) => {
                self.bytes.fetch_add(p.cost(key), Ordering::Relaxed);
                shard.insert(Bytes::copy_from_slice(key), p);
            }
            None => {
                shard.remove(key);
            }
        }
    }

    /// Drops expired values, one shard at a time (the caller holds no shard lock); at most
    /// once per second of `now`.
    fn sweep(&self, now: u64) {
        if self.swept_at.swap(now, Ordering::Relaxed) == now {
            return;
        }
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|k, v| {
                if !v.live(now) {
                    self.bytes.fetch_sub(v.cost(k), Ordering::Relaxed);
                    bump(&self.stats.expired);
                }
                v.live(now)
            });
        }
    }

    /// Deletes `key` if `cond` holds: `Ok(None)` when there was no live value. With a log, the
    /// deletion is a pending value (`deleted`) until it is logged, so that reads keep seeing
    /// the value until then and a refused deletion is undone as a refused put is (a reader once
    /// saw 404, then the value again): the caller calls [`KvStore::finish_delete`] or
    /// [`KvStore::undo_put`] with what this returns.
    #[allow(clippy::type_complexity)]
    pub fn delete(
        &self,
        key: &[u8],
        cond: Cond<'_>,
        now: u64,
    ) -> Result<Option<(Arc<Value>, Option<log::Ack>)>, Refused> {
        let mut shard = self.shard(key);
        let head = shard.get(key).cloned();
        let current = head.clone().filter(|v| !v.deleted && v.live(now));
        if !cond.holds(current.as_deref()) {
            return Err(Refused::Precondition);
        }
        let Some(current) = current else {
            // Nothing live: an expired value goes now (a pending deletion stays).
            if head.is_some_and(|h| !h.deleted) {
                if let Some(old) = shard.remove(key) {
                    self.bytes.fetch_sub(old.cost(key), Ordering::Relaxed);
                }
            }
            return Ok(None);
        };
        let Some(log) = self.log.get() else {
            if let Some(old) = shard.remove(key) {
                self.bytes.fetch_sub(old.cost(key), Ordering::Relaxed);
            }
            return Ok(Some((current, None)));
        };
        let version = self.version.fetch_add(1, Ordering::Relaxed);
        let mut tomb = Value::new(Bytes::new(), Bytes::new(), version, now, 0);
        tomb.deleted = true;
        *tomb.logged.get_mut() = false;
        *tomb.prev.get_mut().unwrap_or_else(|e| e.into_inner()) = head.clone();
        let tomb = Arc::new(tomb);
        let old = head.map_or(0, |h| h.cost(key));
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((b + tomb.cost(key)).saturating_sub(old))
            })
            .ok();
        shard.insert(Bytes::copy_from_slice(key), tomb.clone());
        let ack = log.delete(key);
        Ok(Some((tomb, Some(ack))))
    }

    /// A deletion is logged: the key is gone (unless written since).
    pub fn finish_delete(&self, key: &[u8], tomb: &Arc<Value>) {
        tomb.mark_logged();
        let mut shard = self.shard(key);
        if shard.get(key).is_some_and(|h| Arc::ptr_eq(h, tomb)) {
            shard.remove(key);
            self.bytes.fetch_sub(tomb.cost(key), Ordering::Relaxed);
        }
    }

    /// Loads a value read back from the log (the writer thread, before `ready`).
    fn restore(&self, key: Bytes, value: Option<Value>) {
        self.version.fetch_max(
            value.as_ref().map_or(0, |v| v.version + 1),
            Ordering::Relaxed,
        );
        let mut shard = self.shard(&key);
        if let Some(old) = shard.remove(&key) {
            self.bytes.fetch_sub(old.cost(&key), Ordering::Relaxed);
        }
        if let Some(v) = value {
            self.bytes.fetch_add(v.cost(&key), Ordering::Relaxed);
            shard.insert(key, Arc::new(v));
        }
    }

    /// Every logged value (for the log's compaction: a value whose write is still pending or
    /// failed is not written there either).
    fn all(&self) -> Vec<(Bytes, Arc<Value>)> {
        let mut out = Vec::new();
        for s in &self.shards {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(
                s.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.visible()?)))
                    .filter(|(_, v)| !v.deleted),
            );
        }
        out
    }

    /// Stops taking requests and hands the log over (a binary upgrade or a stop): pending
    /// writes are written and the directory unlocked for the next process. Blocking.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        if let Some(l) = self.log.get() {
            l.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(max: u64) -> Arc<KvStore> {
        KvStore::open(
            "t",
            KvSettings {
                max_size: max,
                max_value_size: 1 << 20,
                default_ttl: 0,
                disk: None,
            },
        )
        .unwrap()
    }

    const ANY: Cond<'static> = Cond {
        if_match: None,
        if_none_match: None,
    };

    #[test]
    fn compare_and_set_expiry_and_the_bound() {
        let s = store(2000);
        let ct = Bytes::from_static(b"text/plain");
        let (created, v1, _) = s
            .put(b"/k", Bytes::from_static(b"one"), &ct, 0, ANY, 100)
            .unwrap();
        assert!(created);
        let create_only = Cond {
            if_match: None,
            if_none_match: Some(b"*"),
        };
        assert_eq!(
            s.put(b"/k", Bytes::new(), &ct, 0, create_only, 100).err(),
            Some(Refused::Precondition)
        );
        let stale = Cond {
            if_match: Some(b"\"ffff\""),
            if_none_match: None,
        };
        assert_eq!(
            s.put(b"/k", Bytes::new(), &ct, 0, stale, 100).err(),
            Some(Refused::Precondition)
        );
        let fresh = Cond {
            if_match: Some(&v1.etag),
            if_none_match: None,
        };
        let (created, v2, _) = s
            .put(b"/k", Bytes::from_static(b"two"), &ct, 0, fresh, 100)
            .unwrap();
        assert!(!created && v2.etag != v1.etag);
        assert_eq!(&s.get(b"/k", 100).unwrap().body[..], b"two");
        // TTL.
        s.put(b"/t", Bytes::from_static(b"x"), &ct, 10, ANY, 100)
            .unwrap();
        assert!(s.get(b"/t", 109).is_some() && s.get(b"/t", 110).is_none());
        // The bound: refused, never evicted.
        let big = Bytes::from(vec![b'x'; 1500]);
        assert_eq!(
            s.put(b"/big", big, &ct, 0, ANY, 100).err(),
            Some(Refused::Full)
        );
        assert!(s.get(b"/k", 100).is_some());
        assert!(matches!(s.delete(b"/k", ANY, 100), Ok(Some(_))));
        assert!(matches!(s.delete(b"/k", ANY, 100), Ok(None)));
        let before = s.usage().1;
        s.delete(b"/t", ANY, 200).unwrap();
        assert!(s.usage().1 < before);
    }

    /// With a log, a deletion is read only once logged: until then the value is served (a
    /// refused deletion is undone and the value never disappeared for a moment).
    #[test]
    fn a_deletion_is_read_only_once_logged() {
        let dir = std::env::temp_dir().join(format!("weir-kv-unit-del-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = KvStore::open(
            "t",
            KvSettings {
                max_size: 1 << 20,
                max_value_size: 1 << 20,
                default_ttl: 0,
                disk: Some(log::LogSettings {
                    path: dir.clone(),
                    sync: false,
                }),
            },
        )
        .unwrap();
        let start = std::time::Instant::now();
        while !s.is_ready() {
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (_, v, ack) = s
            .put(b"/k", Bytes::from_static(b"v"), b"", 0, ANY, 100)
            .unwrap();
        assert!(s.get(b"/k", 100).is_none(), "not yet logged");
        assert!(ack.unwrap().blocking_recv().unwrap());
        v.mark_logged();
        let (tomb, ack) = s.delete(b"/k", ANY, 100).unwrap().unwrap();
        assert_eq!(
            &s.get(b"/k", 100).unwrap().body[..],
            b"v",
            "served until logged"
        );
        assert!(ack.unwrap().blocking_recv().unwrap());
        s.finish_delete(b"/k", &tomb);
        assert!(s.get(b"/k", 100).is_none());
        assert_eq!(s.usage().0, 0);
        // A refused deletion: undone, the value as it was.
        let (_, v, ack) = s
            .put(b"/k", Bytes::from_static(b"w"), b"", 0, ANY, 100)
            .unwrap();
        assert!(ack.unwrap().blocking_recv().unwrap());
        v.mark_logged();
        let (tomb, _ack) = s.delete(b"/k", ANY, 100).unwrap().unwrap();
        s.undo_put(b"/k", &tomb);
        assert_eq!(&s.get(b"/k", 100).unwrap().body[..], b"w");
        s.close();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expired_values_give_their_room_back() {
        let s = store(5000);
        let ct = Bytes::new();
        let v = Bytes::from(vec![b'x'; 1000]);
        for i in 0..3 {
            s.put(format!("/e{i}").as_bytes(), v.clone(), &ct, 5, ANY, 100)
                .unwrap();
        }
        assert_eq!(
            s.put(b"/late", v.clone(), &ct, 0, ANY, 101).err(),
            Some(Refused::Full)
        );
        assert!(
            s.put(b"/late", v, &ct, 0, ANY, 106).is_ok(),
            "expired swept"
        );
        assert_eq!(s.usage().0, 1);
    }
}
