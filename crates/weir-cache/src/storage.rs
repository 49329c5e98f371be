//! The storage seam: what a cache zone asks of each of its tiers. A zone holds its tiers as a
//! list (`weir::cache::zone`): the memory store first, then any number of lower tiers (today
//! the disk tier; a remote object store would be one more implementation of [`Storage`] and
//! one more entry in that list). The request's cache session walks the list in order
//! (`weir::pipeline::cache::lookup`).
//!
//! A lookup answers now ([`Lookup::Found`], [`Lookup::VariantMiss`], [`Lookup::Miss`]) or later
//! ([`Lookup::Later`]: a read on an IO pool, answered by a [`Pending`]). What a later read
//! brings ([`Read`]) is the object whole, or its fields and where its body lies in a file
//! ([`FileBody`], for `sendfile`). Metadata stays in memory either way (the memory store's
//! objects, the disk tier's index), so "is it there" is answered at once.
//!
//! Vary: the memory store holds a key's variants together and matches them itself. A lower tier
//! holds one object per key text: each variant is written under a key of its own as well
//! ([`crate::variants`]), and the caller that finds a variant not matching its request asks the
//! same tier again for the request's variant key.
//!
//! The hit path calls [`crate::MemoryStore::lookup`] directly (generic over the Vary closure,
//! inlined): the seam costs the 1 KiB hit nothing (callgrind A/B in bench/results, same
//! instruction count). Lower tiers are reached through `dyn Storage` on a memory miss only,
//! where one indirect call is nothing beside an IO pool hop.

use std::fs::File;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use crate::key::CacheKey;
use crate::object::CachedObject;

/// What a lookup found.
pub enum Lookup {
    Found(Arc<CachedObject>),
    /// The key is stored, but no variant matches the request's Vary values.
    VariantMiss,
    Miss,
    /// A lower tier is reading it: its object has not been matched against Vary yet.
    Later(Pending),
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lookup::Found(o) => f.debug_tuple("Found").field(o).finish(),
            Lookup::VariantMiss => f.write_str("VariantMiss"),
            Lookup::Miss => f.write_str("Miss"),
            Lookup::Later(_) => f.write_str("Later"),
        }
    }
}

/// A lookup that completes later: `None` when the record turned out gone, corrupt or purged.
pub type Pending = Pin<Box<dyn Future<Output = Option<Read>> + Send>>;

/// What a later lookup brings.
#[derive(Debug)]
pub enum Read {
    /// The object, read whole.
    Whole(Arc<CachedObject>),
    /// The object's fields (its body is empty; its head's `Content-Length` is the body's) and
    /// where the body lies, for a client that takes bodies from files (`sendfile`).
    File(Arc<CachedObject>, FileBody),
}

impl Read {
    pub fn object(&self) -> &CachedObject {
        match self {
            Read::Whole(o) | Read::File(o, _) => o,
        }
    }
}

/// A body's place in a file. The file stays open while it is sent, so that the tier dropping
/// the file meanwhile (a segment evicted and unlinked) does not cut it.
#[derive(Debug, Clone)]
pub struct FileBody {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: u64,
}

/// Which entries a purge removes.
#[derive(Debug, Clone)]
pub enum PurgeSelector {
    /// One key (`host/path?query` under a scheme).
    Exact(CacheKey),
    /// Every key whose URL is exactly `host/path?query` (whatever else the key holds).
    Url(Vec<u8>),
    /// Every URL starting with `host/prefix`.
    Prefix(Vec<u8>),
    /// Every URL of a host.
    Host(Vec<u8>),
    /// Every URL matching a regex (`host/path?query`).
    Regex(regex::bytes::Regex),
    /// Every object tagged (Surrogate-Key / Cache-Tag).
    Tag(String),
    All,
}

/// As log lines show it: `url=a.test/x`, `prefix=...`, `regex=...`, `all` (bytes as text,
/// not the byte lists `Debug` prints).
impl std::fmt::Display for PurgeSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            PurgeSelector::Exact(k) => write!(f, "key={}", text(&k.text).replace('\0', "\\0")),
            PurgeSelector::Url(u) => write!(f, "url={}", text(u)),
            PurgeSelector::Prefix(p) => write!(f, "prefix={}", text(p)),
            PurgeSelector::Host(h) => write!(f, "host={}", text(h)),
            PurgeSelector::Regex(r) => write!(f, "regex={}", r.as_str()),
            PurgeSelector::Tag(t) => write!(f, "tag={t}"),
            PurgeSelector::All => f.write_str("all"),
        }
    }
}

/// What a purge of one tier did: how many objects it took now, and, for a tier that persists
/// purges, the record being written (resolving to whether it is durable: a purge a restart
/// would forget must not be acknowledged as done).
pub struct Purged {
    pub count: u64,
    pub recorded: Option<Pin<Box<dyn Future<Output = bool> + Send>>>,
}

impl std::fmt::Debug for Purged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purged")
            .field("count", &self.count)
            .field("recorded", &self.recorded.is_some())
            .finish()
    }
}

/// One tier of a cache zone.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// For logs and metrics: `memory`, `disk`.
    fn name(&self) -> &'static str;
    /// Finds `key`'s object for the request (`value_of` gives the request's value of a Vary
    /// field). `files`: the client can take a body from a file ([`Read::File`]).
    fn lookup(
        &self,
        key: &CacheKey,
        value_of: &dyn Fn(&str) -> Option<Bytes>,
        files: bool,
    ) -> Lookup;
    /// Stores `obj` (a lower tier may queue it, or decline). Whether it was taken.
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>) -> bool;
    /// Whether the tier holds something under `key` now (it may still turn out purged or
    /// corrupt when read).
    fn contains(&self, key: &CacheKey) -> bool;
    /// Removes (or, `soft`, marks stale) what `sel` selects.
    fn purge(&self, sel: &PurgeSelector, soft: bool) -> Purged;
    /// (objects, bytes) held.
    fn usage(&self) -> (u64, u64);
    /// Whether objects found here move up to the tiers above (a hot disk object becomes a
    /// memory hit).
    fn promotes(&self) -> bool {
        true
    }
}
