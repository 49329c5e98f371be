//! Compressed variants on a cached route whose filters compress (`filters/compress.rs`).
//!
//! The origin is asked for identity and its response is stored as the identity variant, under
//! `Vary: Accept-Encoding` with no value for the field. A request for coding C (`br`, `zstd`,
//! `gzip`: the four buckets of `weir_cache::key::normalize_accept_encoding`) looks up C's
//! variant first: a fresh one is a plain hit (the hit path is the same as any stored object's,
//! from its pre-encoded head). Without one, a fresh identity variant is compressed into C once,
//! stored beside it, and served as a hit ([`serve_encoded`]); later requests for C never
//! compress. When the identity variant is missing or stale, the request goes through the
//! cache phase as an identity request (fetch or revalidate the identity variant) and its own
//! answer is compressed as it streams, by the filter's body phase.
//!
//! Every variant of a URL sits under one key: a purge, a ban or an eviction takes them all.
//! Identity clients are served the stored identity body. Decoding a stored compressed body
//! for them instead would save memory but cost every such hit a decompression (the bench's
//! figure: bench/README.md, "compression"); weir stores identity.

use std::sync::Arc;

use bytes::Bytes;
use weir_cache::policy::{evaluate, Freshness};
use weir_cache::store::Lookup;
use weir_cache::{CacheKey, CachedObject, Directives};
use weir_http::{Header, Persistence, RequestHead};

use super::hit::serve_hit;
use super::Stage;
use crate::filters::codec::{encode_all, Coding};
use crate::filters::compress::Settings;
use crate::pipeline::context::RequestCtx;
use crate::pipeline::downstream::Downstream;

/// Bodies larger than this are compressed on the blocking pool, not on the worker.
const INLINE_MAX: usize = 256 * 1024;

/// The route's compression, if its filters compress.
pub(super) fn settings<'s>(stage: &Stage<'s>) -> Option<&'s Arc<Settings>> {
    stage.proxy.filters.compression()
}

/// The request's value of a Vary field, as the cache compares it. On a compressing route,
/// `identity` looks the request up as if it accepted no coding.
pub(super) fn vary_value(
    stage: &Stage<'_>,
    name: &str,
    encodes: bool,
    identity: bool,
) -> Option<Bytes> {
    if encodes && name == "accept-encoding" && identity {
        return None;
    }
    weir_cache::vary::request_value(
        stage.head.headers(),
        name,
        encodes || stage.cache.normalize_accept_encoding,
    )
}

/// The request fields a stored response's Vary values are taken from: on a compressing route
/// without `Accept-Encoding` (what is stored from the origin is the identity variant).
pub(super) fn request_fields_for_store<'h>(
    head: &'h RequestHead,
    encodes: bool,
) -> std::borrow::Cow<'h, [Header]> {
    if !encodes {
        return std::borrow::Cow::Borrowed(head.headers());
    }
    std::borrow::Cow::Owned(
        head.headers()
            .iter()
            .filter(|h| !h.name.eq_ignore_ascii_case(b"accept-encoding"))
            .cloned()
            .collect(),
    )
}

/// Whether a stored identity object may have compressed variants.
pub(super) fn compressible(s: &Settings, obj: &CachedObject) -> bool {
    let seen = crate::filters::compress::Seen::by(|n| obj.header(n).map(|v| &v[..]));
    s.compressible(obj.meta.status, &seen, Some(obj.body.len() as u64))
}

/// Serves coding `coding`'s variant made from a fresh stored identity object, storing it;
/// `false` when there is no fresh, compressible identity object (the caller goes on as for
/// an identity request).
pub(super) async fn serve_encoded<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
    coding: Coding,
    persistence: Persistence,
) -> bool {
    let Some(settings) = settings(&stage) else {
        return false;
    };
    let zone = stage.zone;
    let Lookup::Found(base) = zone
        .store
        .lookup(key, |name| vary_value(&stage, name, true, true))
    else {
        return false;
    };
    let req_dirs = Directives::parse(stage.head.fields().values(b"cache-control"));
    let age = base.meta.clock.current_age(zone.now());
    if !matches!(
        evaluate(&base.meta.storable, age, base.is_invalidated(), &req_dirs),
        Freshness::Fresh
    ) || !compressible(settings, &base)
    {
        return false;
    }
    let levels = settings.levels;
    let body = base.body.clone();
    let encoded = if body.len() <= INLINE_MAX {
        encode_all(coding, &levels, &body)
    } else {
        match tokio::task::spawn_blocking(move || encode_all(coding, &levels, &body)).await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    };
    let Ok(encoded) = encoded else {
        return false;
    };
    let variant = Arc::new(weir_cache::stored::encoded_variant(
        &base,
        coding.as_str(),
        Bytes::from(encoded),
    ));
    zone.store.insert(key, variant.clone());
    let age = variant.meta.clock.current_age(zone.now());
    serve_hit(d, ctx, stage, &variant, age, persistence);
    true
}
