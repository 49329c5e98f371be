//! The cache phase of a `proxy` route:
//!
//! ```text
//! PURGE ─────────────────────────────────────────────→ purge the key (loopback / purge_from)
//! unsafe method ──→ forward ──→ 2xx/3xx: invalidate the URI, Location, Content-Location
//! bypass rule ────→ forward (Cache-Status: fwd=bypass)
//! lookup ─ fresh / max-stale ─────────────────────────→ serve stored (304 / 206 / HEAD as asked)
//!        ─ stale-while-revalidate ─→ serve stored + background revalidation
//!        ─ must revalidate ─→ conditional fetch ─ 304 → update headers, serve
//!                                               ─ new response → store, serve
//!                                               ─ error/5xx → stale-if-error? serve stale : answer
//!        ─ miss ─ only-if-cached → 504
//!               ─ hit-for-miss → forward
//!               ─ coalesce: leader forwards (tee into the store) / followers wait, then serve
//! ```
//!
//! Hits are a [`Reply`] over the stored, pre-encoded head, with `Age` and `Cache-Status`
//! rendered by the encoder straight into the output (`Reply::render`), then the route's
//! response filters: no allocation and no intermediate buffer per hit. Building,
//! refreshing and invalidating stored objects are `weir_cache::stored`; the RFC 9111 verdicts
//! are `weir_cache::policy`. What is left here is the flow.

mod encode;
mod file_hit;
mod miss;
mod peer;
mod slice;
mod write;

use std::sync::Arc;

use weir_cache::disk::DiskRead;
use weir_cache::object::exact;
use weir_cache::policy::{evaluate, values, Freshness};
use weir_cache::store::{Lookup, Stats};
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject, Directives};
use weir_http::{Method, Persistence, RequestHead};

use super::context::CacheState;
use super::downstream::Downstream;
use super::forward::{forward, Exchange};
use super::RequestCtx;
use crate::cache::status::Fwd;
use crate::cache::zone::{FetchPhase, Role};
use crate::cache::{CacheRoute, CacheStatus, CacheZone};
use crate::error::Error;
use crate::pipeline::fetch::fetch_whole;
use crate::proxy::route::ProxyRoute;

use miss::*;
use write::*;

/// One request through the cache phase: the request, the route and its cache settings.
#[derive(Clone, Copy)]
pub(crate) struct Stage<'r> {
    pub head: &'r RequestHead,
    pub proxy: &'r ProxyRoute,
    pub cache: &'r CacheRoute,
    pub zone: &'r Arc<CacheZone>,
    /// `http` or `https`: the scheme part of the cache key, from the listener.
    pub scheme: &'static str,
    /// Field lines for this client only, never stored: the Set-Cookie of the 304 its request
    /// caused (empty otherwise).
    pub own: &'r [u8],
}

/// The request's key, with who the client is when the route keys by consumer
/// (`CacheRoute::compile`: the default on a route that authenticates): the consumer, the
/// token's issuer, and the fields an auth service had copied upstream. `None` when the route
/// keys by consumer and the authentication named nobody (a JWT without the consumer claim, a
/// `forward_auth` without `consumer_header` or copied fields): such a request bypasses the
/// cache rather than share one key with every other such client.
pub(super) fn key_for(ctx: &RequestCtx, stage: &Stage<'_>, get_class: bool) -> Option<CacheKey> {
    let spec = &stage.cache.key;
    let key = |consumer: Option<&str>| {
        if get_class {
            spec.get_key_as(stage.head, stage.scheme, consumer)
        } else {
            spec.key_as(stage.head, stage.scheme, consumer)
        }
    };
    if !spec.consumer {
        return Some(key(None));
    }
    let id = ctx.identity()?;
    let issuer = match id.claims.get("iss") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        _ => "",
    };
    if id.consumer.is_empty() && id.upstream_fields.is_empty() {
        return None;
    }
    if issuer.is_empty() && id.upstream_fields.is_empty() {
        return Some(key(Some(&id.consumer)));
    }
    // Length-prefixed parts: no consumer or issuer text can pose as another split.
    let fields = String::from_utf8_lossy(&id.upstream_fields);
    let who = format!(
        "{}:{}{}:{issuer}{fields}",
        id.consumer.len(),
        id.consumer,
        issuer.len()
    );
    Some(key(Some(&who)))
}

/// The hit path, without building the (large, boxed) future of the full phase: a fresh stored
/// response is queued at once and `true` returned; anything else is `false`, for [`cached`].
pub(crate) fn try_fresh_hit<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    persistence: Persistence,
) -> bool {
    let (head, settings, zone) = (stage.head, stage.cache, stage.zone);
    if !matches!(head.method, Method::Get | Method::Head) || bypassed(head, settings).is_some() {
        return false;
    }
    let Some(key) = key_for(ctx, &stage, false) else {
        return false;
    };
    let encodes = stage.proxy.filters.has(crate::filters::phase::ENCODES);
    let Lookup::Found(obj) = zone.store.lookup(&key, |name| {
        encode::vary_value(&stage, name, encodes, false)
    }) else {
        return false;
    };
    let age = obj.meta.clock.current_age(zone.now());
    let req_dirs = Directives::parse(values(&head.headers, "cache-control"));
    match evaluate(&obj.meta.storable, age, obj.is_invalidated(), &req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {
            serve_hit(d, ctx, stage, &obj, age, persistence);
            true
        }
        _ => false,
    }
}

/// Queues a hit: counted, `Cache-Status: hit` with the remaining TTL.
fn serve_hit<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    obj: &CachedObject,
    age: u64,
    persistence: Persistence,
) {
    Stats::bump(&stage.zone.store.stats.hits);
    ctx.cache = CacheState::Hit;
    let status = CacheStatus {
        hit: true,
        ttl: Some(ttl(obj, age)),
        ..Default::default()
    };
    write_stored(d, ctx, stage, obj, age, &status, persistence);
}

/// Serves the request through the cache phase.
pub(crate) async fn cached<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let (head, proxy, settings, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    if matches!(&head.method, Method::Other(m) if &m[..] == b"PURGE") {
        return Ok(purge_request(d, ctx, stage, persistence).await);
    }
    if !matches!(head.method, Method::Get | Method::Head) {
        ctx.cache = CacheState::Bypass("method");
        let store_post = settings.store_post_responses && head.method == Method::Post;
        let request_time = zone.now();
        let plan = if store_post {
            post_plan(head, settings, zone)
        } else {
            status_plan(Fwd::Bypass, Some("method"), settings.x_cache)
        };
        let mut ex = Exchange {
            plan: Some(plan),
            ..Default::default()
        };
        let persistence = forward(d, ctx, head, proxy, persistence, &mut ex).await?;
        if !matches!(head.method, Method::Options | Method::Trace) {
            invalidate_after_unsafe(zone, &settings.key, head, ex.response.as_ref());
        }
        if let (Some(resp), Some(body)) = (ex.response.as_ref(), ex.body.take()) {
            // Only a post_plan captures: the response is reusable for GETs of this URI.
            if let Some(key) = key_for(ctx, &stage, true) {
                store_response(stage, &key, resp, exact(body), request_time);
            }
        }
        return Ok(persistence);
    }
    if let Some(why) = bypassed(head, settings) {
        ctx.cache = CacheState::Bypass(why);
        return forward_uncached(d, ctx, stage, Fwd::Bypass, Some(why), persistence).await;
    }
    let Some(key) = key_for(ctx, &stage, false) else {
        ctx.cache = CacheState::Bypass("no-consumer");
        return forward_uncached(d, ctx, stage, Fwd::Bypass, Some("no-consumer"), persistence)
            .await;
    };
    if ctx
        .rt
        .cfg
        .zone_shards
        .get(settings.zone)
        .is_some_and(Option::is_some)
    {
        // Boxed: only sharded zones pay for the peer exchange's state.
        if let Some(r) = Box::pin(peer::fill(d, ctx, stage, &key, persistence)).await {
            return r;
        }
    }
    let req_dirs = Directives::parse(values(&head.headers, "cache-control"));
    // A compressing route: a coding's variant is made from the stored identity object; failing
    // that, the request goes on as an identity request (its answer compressed as it streams).
    let encodes = stage.proxy.filters.has(crate::filters::phase::ENCODES);
    let want = encodes
        .then(|| crate::filters::compress::wanted(head))
        .flatten();
    if let Some(coding) = want {
        if encode::serve_encoded(d, ctx, stage, &key, coding, persistence).await {
            return Ok(persistence);
        }
    }
    let value_of = |name: &str| encode::vary_value(&stage, name, encodes, want.is_some());
    let mut lookup = zone.store.lookup(&key, value_of);
    if zone.is_warming() && matches!(lookup, Lookup::Miss | Lookup::VariantMiss) {
        // A binary upgrade is handing this zone's objects over: wait for them, then look again.
        zone.wait_warm().await;
        lookup = zone.store.lookup(&key, value_of);
    }
    if zone.disk.is_some() && matches!(lookup, Lookup::Miss | Lookup::VariantMiss) {
        // A plain-TCP GET whose body needs no filter may take it straight from the file.
        let files = d.sends_files()
            && head.method == Method::Get
            && !encodes
            && !ctx.extra.as_ref().is_some_and(|e| e.filters.transforming);
        let read = if files {
            Box::pin(zone.lookup_disk_file(&key, &value_of)).await
        } else {
            Box::pin(zone.lookup_disk(&key, &value_of))
                .await
                .map(DiskRead::Whole)
        };
        match read {
            Some(DiskRead::Whole(obj)) => lookup = Lookup::Found(obj),
            Some(DiskRead::File(obj, body)) => {
                let found = (&*obj, &body);
                let served = Box::pin(file_hit::serve(
                    d,
                    ctx,
                    stage,
                    found,
                    &req_dirs,
                    persistence,
                ))
                .await;
                if let Some(r) = served {
                    return r;
                }
                if let Some(obj) = Box::pin(zone.lookup_disk(&key, &value_of)).await {
                    lookup = Lookup::Found(obj);
                }
            }
            None => {}
        }
    }
    if let (Lookup::Miss, Some(size), false) = (&lookup, settings.slice, encodes) {
        let ask = slice::Ask {
            key: &key,
            value_of: &value_of,
            req_dirs: &req_dirs,
        };
        // Boxed: the slice path's state would otherwise grow every cached request's future
        // (held per stalled HTTP/2 stream).
        let sliced = Box::pin(slice::serve(d, ctx, stage, &ask, size, persistence)).await;
        if let Some(answered) = sliced {
            return answered;
        }
    }
    let fwd_on_miss = match lookup {
        Lookup::Found(obj) => {
            return serve_found(
                d,
                ctx,
                stage,
                route_index,
                (&key, obj),
                &req_dirs,
                persistence,
            )
            .await
        }
        Lookup::VariantMiss => Fwd::VaryMiss,
        Lookup::Miss | Lookup::Later(_) => Fwd::UriMiss,
    };
    Stats::bump(&zone.store.stats.misses);
    if req_dirs.only_if_cached {
        return Ok(cache_error(d, ctx, stage, "only-if-cached", persistence));
    }
    if zone.is_hit_for_miss(key.hash) {
        ctx.cache = CacheState::Bypass("hit-for-miss");
        return forward_uncached(
            d,
            ctx,
            stage,
            fwd_on_miss,
            Some("hit-for-miss"),
            persistence,
        )
        .await;
    }
    match zone.join(key.hash) {
        Role::Leader(inflight) => {
            let guard = LeaderGuard {
                zone,
                hash: key.hash,
                inflight,
                phase: FetchPhase::Uncacheable,
            };
            fetch_and_store(d, ctx, stage, &key, fwd_on_miss, persistence, guard).await
        }
        Role::Follower(inflight) => {
            Stats::bump(&zone.store.stats.coalesced);
            match follow(d, ctx, stage, &inflight, fwd_on_miss, persistence).await? {
                Some(persistence) => Ok(persistence),
                None => {
                    ctx.cache = CacheState::Miss;
                    let detail = Some("collapsed-uncacheable");
                    forward_uncached(d, ctx, stage, fwd_on_miss, detail, persistence).await
                }
            }
        }
    }
}

/// A stored response exists (`found`: its key and the object): serve, revalidate, or refetch
/// per RFC 9111.
async fn serve_found<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    (key, obj): (&CacheKey, Arc<CachedObject>),
    req_dirs: &Directives,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let (head, proxy, settings, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    let now = zone.now();
    let age = obj.meta.clock.current_age(now);
    match evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {
            serve_hit(d, ctx, stage, &obj, age, persistence);
            Ok(persistence)
        }
        Freshness::StaleWhileRevalidate => {
            Stats::bump(&zone.store.stats.hits);
            Stats::bump(&zone.store.stats.stale);
            ctx.cache = CacheState::StaleWhileRevalidate;
            let status = CacheStatus {
                hit: true,
                ttl: Some(ttl(&obj, age)),
                detail: Some("stale-while-revalidate"),
                ..Default::default()
            };
            write_stored(d, ctx, stage, &obj, age, &status, persistence);
            revalidate_in_background(ctx, stage, route_index, key, obj, super::client_of(d));
            Ok(persistence)
        }
        Freshness::Revalidate { if_error } => {
            Stats::bump(&zone.store.stats.stale);
            if req_dirs.only_if_cached {
                return Ok(cache_error(d, ctx, stage, "only-if-cached", persistence));
            }
            let validators = stored::revalidation_fields(&obj);
            let request_time = zone.now();
            let fetched = fetch_whole(
                ctx,
                d.peer(),
                head,
                proxy,
                &validators,
                settings.max_object_size,
            )
            .await;
            match fetched {
                Ok((resp, _)) if resp.status == 304 => {
                    Stats::bump(&zone.store.stats.revalidated);
                    ctx.cache = CacheState::Revalidated;
                    let updated = Arc::new(stored::refreshed(
                        &obj,
                        &resp.headers,
                        (request_time, zone.now()),
                        &settings.rules,
                    ));
                    zone.store_object(key, &updated);
                    let age = updated.meta.clock.current_age(zone.now());
                    let status = CacheStatus {
                        fwd: Some(Fwd::Stale),
                        fwd_status: Some(304),
                        ttl: Some(ttl(&updated, age)),
                        stored: true,
                        ..Default::default()
                    };
                    let own = stored::own_fields_of_304(&resp.headers, &settings.rules);
                    let stage = Stage { own: &own, ..stage };
                    write_stored(d, ctx, stage, &updated, age, &status, persistence);
                    Ok(persistence)
                }
                Ok((resp, _)) if resp.status >= 500 && if_error => {
                    Ok(serve_stale_on_error(d, ctx, stage, &obj, persistence))
                }
                Ok((resp, body)) => {
                    ctx.cache = CacheState::Miss;
                    let fresh = store_response(stage, key, &resp, body.clone(), request_time);
                    let obj = fresh.unwrap_or_else(|| {
                        // Not storable: serve it once, as a stored object nobody else sees.
                        Arc::new(stored::build(
                            &head.headers,
                            &resp,
                            body,
                            (request_time, zone.now()),
                            settings.normalize_accept_encoding,
                            None,
                        ))
                    });
                    let age = obj.meta.clock.current_age(zone.now());
                    let status = CacheStatus {
                        fwd: Some(Fwd::Stale),
                        fwd_status: Some(resp.status),
                        stored: obj.meta.storable.lifetime > 0,
                        ttl: Some(ttl(&obj, age)),
                        ..Default::default()
                    };
                    write_stored(d, ctx, stage, &obj, age, &status, persistence);
                    Ok(persistence)
                }
                Err(_) if if_error => Ok(serve_stale_on_error(d, ctx, stage, &obj, persistence)),
                // Too large to revalidate in memory, or the origin failed: a plain forward
                // answers (and maps the failure to 502/503/504 as usual).
                Err(_) => {
                    ctx.cache = CacheState::Miss;
                    forward_uncached(d, ctx, stage, Fwd::Stale, None, persistence).await
                }
            }
        }
    }
}

fn serve_stale_on_error<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    obj: &Arc<CachedObject>,
    persistence: Persistence,
) -> Persistence {
    Stats::bump(&stage.zone.store.stats.hits);
    ctx.cache = CacheState::StaleIfError;
    let age = obj.meta.clock.current_age(stage.zone.now());
    let status = CacheStatus {
        hit: true,
        ttl: Some(ttl(obj, age)),
        detail: Some("stale-if-error"),
        ..Default::default()
    };
    write_stored(d, ctx, stage, obj, age, &status, persistence);
    persistence
}

/// Forwards without storing: the response only gets its `Cache-Status` (`fwd`, `detail`).
async fn forward_uncached<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    fwd: Fwd,
    detail: Option<&'static str>,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let mut ex = Exchange {
        plan: Some(status_plan(fwd, detail, stage.cache.x_cache)),
        ..Default::default()
    };
    forward(d, ctx, stage.head, stage.proxy, persistence, &mut ex).await
}
