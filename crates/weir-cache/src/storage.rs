//! The storage seam: what the cache phase asks of a store. A lookup answers now (the memory
//! store: found, a variant miss, a miss) or later (the disk tier: [`Lookup::Later`], a read on
//! its IO pool); metadata stays in memory either way (the memory store's objects, the disk
//! tier's index). A zone is a memory store with, optionally, a disk tier behind it.
//!
//! The hit path calls [`MemoryStore::lookup`] directly (generic over the Vary closure, inlined):
//! the seam costs the 1 KiB hit nothing (callgrind A/B in bench/results, same instruction
//! count). Lower tiers are reached through the trait on a memory miss only.

use std::sync::Arc;

use bytes::Bytes;

use crate::disk::DiskTier;
use crate::key::CacheKey;
use crate::object::CachedObject;
use crate::store::{Lookup, MemoryStore};

/// A store of cached objects.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Finds `key`'s variant matching the request (`value_of` gives the request's value of a
    /// Vary field). A [`Lookup::Later`] object has not been matched against Vary yet.
    fn lookup(&self, key: &CacheKey, value_of: &dyn Fn(&str) -> Option<Bytes>) -> Lookup;
    /// Stores `obj` (a lower tier may queue it, or decline).
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>);
    /// (objects, bytes) held.
    fn usage(&self) -> (u64, u64);
}

impl Storage for MemoryStore {
    fn lookup(&self, key: &CacheKey, value_of: &dyn Fn(&str) -> Option<Bytes>) -> Lookup {
        MemoryStore::lookup(self, key, value_of)
    }
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>) {
        MemoryStore::insert(self, key, obj.clone());
    }
    fn usage(&self) -> (u64, u64) {
        MemoryStore::usage(self)
    }
}

impl Storage for DiskTier {
    fn lookup(&self, key: &CacheKey, _value_of: &dyn Fn(&str) -> Option<Bytes>) -> Lookup {
        DiskTier::lookup(self, key).map_or(Lookup::Miss, Lookup::Later)
    }
    fn insert(&self, key: &CacheKey, obj: &Arc<CachedObject>) {
        self.store(key, obj);
    }
    fn usage(&self) -> (u64, u64) {
        DiskTier::usage(self)
    }
}
