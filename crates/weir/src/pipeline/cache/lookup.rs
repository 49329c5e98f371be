//! The session's one lookup: a walk over the places a response can come from, in order, that
//! stops at the first that has it.
//!
//! 1. The owner, in a sharded zone where another member owns the key (`peer.rs`): a fresh hot
//!    copy of it here (`cluster.local_hot`), else the owner answers the client itself (from its
//!    cache or its origin), or, unreachable, the walk goes on here.
//! 2. The memory store (the zone's first tier), and on a compressing route the coding's
//!    variant made from a stored identity object (`encode.rs`). During a binary upgrade a miss
//!    waits briefly for the previous process's objects, then looks again.
//! 3. The zone's lower tiers, in the zone's order (`CacheZone::lookup_lower`: today the disk
//!    tier). What they find moves up to memory; a large body may come back as its place in a
//!    file, for `sendfile`.
//! 4. Slices, on a route with `cache.slice` (`slice.rs`): the answer is assembled from stored
//!    pieces and fetched ranges.
//!
//! Which tiers exist is the zone's data, not a branch here: a new tier is an implementation of
//! `weir_cache::Storage` added to the zone's list (`cache/zone.rs`, `runtime/registry.rs`).

use std::sync::Arc;

use weir_cache::{CacheKey, CachedObject, Directives, FileBody, Lookup, Read};
use weir_http::{Method, Persistence};

use super::{encode, peer, slice, Stage};
use crate::cache::status::Fwd;
use crate::error::Error;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::RequestCtx;

/// What the walk found.
pub(super) enum Found {
    /// A stored object (fresh or not: `hit.rs` judges it).
    Stored(Arc<CachedObject>),
    /// A stored object's fields and its body's place in a file.
    File(Arc<CachedObject>, FileBody),
    /// The client was answered on the way (the owner, a coded variant, the slices).
    Answered(Result<Persistence, Error>),
    /// Nothing stored: a miss of the URI, or of the request's Vary variant.
    Missing(Fwd),
}

/// Walks the sources for `key`.
pub(super) async fn find<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
    req_dirs: &Directives,
    persistence: Persistence,
) -> Found {
    let (head, zone) = (stage.head, stage.zone);
    // 1. The owner.
    if ctx
        .rt
        .cfg
        .zone_shards
        .get(stage.cache.zone)
        .is_some_and(Option::is_some)
    {
        // Boxed: only sharded zones pay for the peer exchange's state.
        let fill = peer::fill(d, ctx, stage, (key, req_dirs), persistence);
        if let Some(answered) = Box::pin(fill).await {
            return Found::Answered(answered);
        }
    }
    // 2. Memory. A compressing route: a coding's variant is made from the stored identity
    // object; failing that, the request goes on as an identity request (its answer compressed
    // as it streams).
    let encodes = stage.encodes();
    let want = encodes
        .then(|| crate::filters::compress::wanted(head))
        .flatten();
    if let Some(coding) = want {
        if encode::serve_encoded(d, ctx, stage, key, coding, persistence).await {
            return Found::Answered(Ok(persistence));
        }
    }
    let value_of = |name: &str| encode::vary_value(&stage, name, encodes, want.is_some());
    let mut found = zone.store.lookup(key, value_of);
    if zone.is_warming() && matches!(found, Lookup::Miss | Lookup::VariantMiss) {
        // A binary upgrade is handing this zone's objects over: wait for them, then look again.
        zone.wait_warm().await;
        found = zone.store.lookup(key, value_of);
    }
    // 3. The lower tiers. A plain-TCP GET whose body needs no filter may take it from a file.
    if zone.has_lower() && matches!(found, Lookup::Miss | Lookup::VariantMiss) {
        let files = d.sends_files()
            && head.method == Method::Get
            && !encodes
            && !ctx.extra.as_ref().is_some_and(|e| e.filters.transforming);
        match Box::pin(zone.lookup_lower(key, &value_of, files)).await {
            Some(Read::Whole(obj)) => return Found::Stored(obj),
            Some(Read::File(obj, body)) => return Found::File(obj, body),
            None => {}
        }
    }
    // 4. Slices.
    if let (Lookup::Miss, Some(size), false) = (&found, stage.cache.slice, encodes) {
        let ask = slice::Ask {
            key,
            value_of: &value_of,
            req_dirs,
        };
        // Boxed: the slice path's state would otherwise grow every cached request's future
        // (held per stalled HTTP/2 stream).
        let sliced = Box::pin(slice::serve(d, ctx, stage, &ask, size, persistence)).await;
        if let Some(answered) = sliced {
            return Found::Answered(answered);
        }
    }
    match found {
        Lookup::Found(obj) => Found::Stored(obj),
        Lookup::VariantMiss => Found::Missing(Fwd::VaryMiss),
        Lookup::Miss | Lookup::Later(_) => Found::Missing(Fwd::UriMiss),
    }
}

/// The object for `key` read whole from the lower tiers (after a file hit that could not be
/// served from the file).
pub(super) async fn whole(stage: Stage<'_>, key: &CacheKey) -> Option<Arc<CachedObject>> {
    let encodes = stage.encodes();
    let value_of = |name: &str| encode::vary_value(&stage, name, encodes, false);
    match stage.zone.lookup_lower(key, &value_of, false).await? {
        Read::Whole(obj) => Some(obj),
        Read::File(..) => None,
    }
}
