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

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::object::exact;
use weir_cache::policy::{self, evaluate, storable, values, Freshness, NoStore};
use weir_cache::store::{Lookup, Stats};
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject, Directives, PurgeSelector};
use weir_http::conditional::{self, RangeSpec};
use weir_http::{Base, Framing, Method, Persistence, Reply, RequestHead, ResponseHead};

use super::context::CacheState;
use super::downstream::Downstream;
use super::forward::{forward, Exchange, HeadPlan, PlanFn};
use super::RequestCtx;
use crate::cache::status::Fwd;
use crate::cache::zone::{Inflight, Phase, Role, StreamHead};
use crate::cache::{CacheRoute, CacheStatus, CacheZone};
use crate::error::{Error, ErrorKind};
use crate::filters::Client;
use crate::proxy::exchange::fetch_whole;
use crate::proxy::route::ProxyRoute;

/// One request through the cache phase: the request, the route and its cache settings.
#[derive(Clone, Copy)]
pub(crate) struct Stage<'r> {
    pub head: &'r RequestHead,
    pub proxy: &'r ProxyRoute,
    pub cache: &'r CacheRoute,
    pub zone: &'r Arc<CacheZone>,
}

/// The hit path, without building the (large, boxed) future of the full phase: a fresh stored
/// response is queued at once and `true` returned; anything else is `false`, for [`cached`].
pub(crate) fn try_fresh_hit<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    persistence: Persistence,
) -> bool {
    let (head, c, zone) = (stage.head, stage.cache, stage.zone);
    if !matches!(head.method, Method::Get | Method::Head) || bypassed(head, c).is_some() {
        return false;
    }
    let key = c.key.key(head, "http");
    let Lookup::Found(obj) = zone.store.lookup(&key, |name| {
        weir_cache::vary::request_value(&head.headers, name, c.normalize_accept_encoding)
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
    let (head, p, c, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    if matches!(&head.method, Method::Other(m) if &m[..] == b"PURGE") {
        return Ok(purge_request(d, ctx, stage, persistence));
    }
    if !matches!(head.method, Method::Get | Method::Head) {
        ctx.cache = CacheState::Bypass("method");
        let store_post = c.store_post_responses && head.method == Method::Post;
        let request_time = zone.now();
        let plan = if store_post {
            post_plan(head, c, zone)
        } else {
            status_plan(Fwd::Bypass, Some("method"), c.x_cache)
        };
        let mut ex = Exchange {
            plan: Some(plan),
            ..Default::default()
        };
        let persistence = forward(d, ctx, head, p, persistence, &mut ex).await?;
        if !matches!(head.method, Method::Options | Method::Trace) {
            invalidate_after_unsafe(zone, head, ex.response.as_ref());
        }
        if let (Some(resp), Some(body)) = (ex.response.as_ref(), ex.body.take()) {
            // Only a post_plan captures: the response is reusable for GETs of this URI.
            let key = c.key.get_key(head, "http");
            store_response(stage, &key, resp, exact(body), request_time);
        }
        return Ok(persistence);
    }
    if let Some(why) = bypassed(head, c) {
        ctx.cache = CacheState::Bypass(why);
        let mut ex = Exchange {
            plan: Some(status_plan(Fwd::Bypass, Some(why), c.x_cache)),
            ..Default::default()
        };
        return forward(d, ctx, head, p, persistence, &mut ex).await;
    }
    let key = c.key.key(head, "http");
    let req_dirs = Directives::parse(values(&head.headers, "cache-control"));
    let lookup = zone.store.lookup(&key, |name| {
        weir_cache::vary::request_value(&head.headers, name, c.normalize_accept_encoding)
    });
    let fwd_on_miss = match lookup {
        Lookup::Found(obj) => {
            return serve_found(
                d,
                ctx,
                stage,
                route_index,
                &key,
                obj,
                &req_dirs,
                persistence,
            )
            .await
        }
        Lookup::VariantMiss => Fwd::VaryMiss,
        Lookup::Miss => Fwd::UriMiss,
    };
    Stats::bump(&zone.store.stats.misses);
    if req_dirs.only_if_cached {
        return Ok(cache_error(d, ctx, stage, "only-if-cached", persistence));
    }
    if zone.is_hit_for_miss(key.hash) {
        ctx.cache = CacheState::Bypass("hit-for-miss");
        let mut ex = Exchange {
            plan: Some(status_plan(fwd_on_miss, Some("hit-for-miss"), c.x_cache)),
            ..Default::default()
        };
        return forward(d, ctx, head, p, persistence, &mut ex).await;
    }
    match zone.join(key.hash) {
        Role::Leader(inflight) => {
            let guard = LeaderGuard {
                zone,
                hash: key.hash,
                inflight,
                phase: Phase::Uncacheable,
            };
            fetch_and_store(d, ctx, stage, &key, fwd_on_miss, persistence, guard).await
        }
        Role::Follower(inflight) => {
            Stats::bump(&zone.store.stats.coalesced);
            match follow(d, ctx, stage, &inflight, fwd_on_miss, persistence).await? {
                Some(persistence) => Ok(persistence),
                None => {
                    ctx.cache = CacheState::Miss;
                    let mut ex = Exchange {
                        plan: Some(status_plan(
                            fwd_on_miss,
                            Some("collapsed-uncacheable"),
                            c.x_cache,
                        )),
                        ..Default::default()
                    };
                    forward(d, ctx, head, p, persistence, &mut ex).await
                }
            }
        }
    }
}

/// A coalesced follower: streams the leader's response as it arrives. `Ok(None)`: the leader's
/// answer is not shareable (or never came within `lock_timeout`), fetch on your own.
async fn follow<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    inflight: &Inflight,
    fwd: Fwd,
    persistence: Persistence,
) -> Result<Option<Persistence>, Error> {
    let (head, p, c) = (stage.head, stage.proxy, stage.cache);
    let mut changes = inflight.subscribe();
    let head_deadline = tokio::time::Instant::now() + c.lock_timeout;
    let shared = loop {
        match inflight.snapshot(0) {
            (Phase::Uncacheable, ..) => return Ok(None),
            (Phase::Aborted, None, _) => return Ok(None),
            (_, Some(h), _) => break h,
            _ => {}
        }
        match tokio::time::timeout_at(head_deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            // Timed out, or the leader vanished: go on your own.
            _ => return Ok(None),
        }
    };
    ctx.cache = CacheState::Collapsed;
    ctx.status = shared.status;
    let idle = ctx.rt.cfg.upstreams[p.upstream].idle_read_timeout;
    let status = CacheStatus {
        fwd: Some(fwd),
        fwd_status: Some(shared.status),
        collapsed: true,
        stored: true,
        ..Default::default()
    };
    let mut lines = BytesMut::new();
    status.render(&mut lines, c.x_cache);
    // The shared head is encoded like a stored one, with its length when the upstream gave it.
    let encoded = weir_cache::object::encode_head(
        shared.status,
        &shared.reason,
        &shared.headers,
        shared.content_length,
    );
    let mut reply = Reply::new(
        shared.status,
        if shared.content_length.is_some() {
            Framing::Given
        } else {
            Framing::Unknown
        },
    );
    reply.base = Base::Encoded(&encoded);
    reply.date = false;
    reply.add_lines(b"Age: 0\r\n");
    reply.add_lines(&lines);
    p.filters.response(&mut reply);
    let persistence = d.send_head(&reply, persistence);
    if head.method == Method::Head {
        return Ok(Some(persistence));
    }
    let mut sent = 0;
    loop {
        let (phase, _, chunks) = inflight.snapshot(sent);
        sent += chunks.len();
        for chunk in chunks {
            ctx.bytes_sent += chunk.len() as u64;
            d.send_data(&chunk);
        }
        match phase {
            Phase::Complete => {
                d.end_body();
                return Ok(Some(persistence));
            }
            Phase::Aborted | Phase::Uncacheable => {
                return Err(Error::with(
                    ErrorKind::UpstreamAborted,
                    "the coalesced fetch failed",
                ))
            }
            Phase::Fetching | Phase::Streaming => {}
        }
        d.flush().await?;
        match tokio::time::timeout(idle, changes.changed()).await {
            Ok(Ok(())) => {}
            _ => {
                return Err(Error::with(
                    ErrorKind::UpstreamAborted,
                    "the coalesced fetch stalled",
                ))
            }
        }
    }
}

/// A stored response exists: serve, revalidate, or refetch per RFC 9111.
#[allow(clippy::too_many_arguments)]
async fn serve_found<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    key: &CacheKey,
    obj: Arc<CachedObject>,
    req_dirs: &Directives,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let (head, p, c, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
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
            let rt = ctx.rt.clone();
            let upstream = (&*rt.cfg.upstreams[p.upstream], &*rt.upstreams[p.upstream]);
            let validators = stored::revalidation_fields(&obj);
            let request_time = zone.now();
            let client = super::client_of(d);
            let fetched =
                fetch_whole(upstream, &client, head, p, &validators, c.max_object_size).await;
            match fetched {
                Ok((resp, _)) if resp.status == 304 => {
                    Stats::bump(&zone.store.stats.revalidated);
                    ctx.cache = CacheState::Revalidated;
                    let updated = Arc::new(stored::refreshed(
                        &obj,
                        &resp.headers,
                        (request_time, zone.now()),
                        &c.rules,
                    ));
                    zone.store.insert(key, updated.clone());
                    let age = updated.meta.clock.current_age(zone.now());
                    let status = CacheStatus {
                        fwd: Some(Fwd::Stale),
                        fwd_status: Some(304),
                        ttl: Some(ttl(&updated, age)),
                        stored: true,
                        ..Default::default()
                    };
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
                            c.normalize_accept_encoding,
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
                    let mut ex = Exchange {
                        plan: Some(status_plan(Fwd::Stale, None, c.x_cache)),
                        ..Default::default()
                    };
                    forward(d, ctx, head, p, persistence, &mut ex).await
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

/// The coalescing leader: forward, relaying to the client while copying the body, then store.
async fn fetch_and_store<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
    fwd: Fwd,
    persistence: Persistence,
    mut guard: LeaderGuard<'_>,
) -> Result<Persistence, Error> {
    let (head, p, c, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    ctx.cache = CacheState::Miss;
    let request_time = zone.now();
    let decision = std::cell::Cell::new(None);
    let inflight = guard.inflight.clone();
    let plan = |resp: &ResponseHead| {
        let verdict = storable(
            &head.method,
            &head.headers,
            resp.status,
            &resp.headers,
            &c.rules,
            zone.now(),
        );
        let mut st = CacheStatus {
            fwd: Some(fwd),
            fwd_status: Some(resp.status),
            ..Default::default()
        };
        let length = match resp.body {
            weir_http::BodyKind::Length(n) => Some(n),
            weir_http::BodyKind::Empty => Some(0),
            _ => None,
        };
        let verdict = match verdict {
            Ok(_) if length.is_some_and(|n| n > c.max_object_size as u64) => Err(NoStore::TooLarge),
            v => v,
        };
        let mut tee = None;
        let capture = match &verdict {
            Ok(_) => {
                st.stored = true;
                // Followers can share the body only of a GET (a HEAD's has none).
                if head.method == Method::Get {
                    inflight.publish_head(StreamHead {
                        status: resp.status,
                        reason: resp.reason.clone(),
                        headers: stored::stored_headers(&resp.headers),
                        content_length: length,
                    });
                    tee = Some(inflight.clone());
                }
                Some(c.max_object_size)
            }
            Err(why) => {
                st.detail = Some(why.as_str());
                None
            }
        };
        decision.set(Some(verdict.is_ok()));
        let mut lines = BytesMut::new();
        st.render(&mut lines, c.x_cache);
        HeadPlan {
            lines,
            capture,
            tee,
            zone: Some(zone.clone()),
        }
    };
    let mut ex = Exchange {
        plan: Some(Box::new(plan)),
        strip_conditionals: true,
        ..Default::default()
    };
    let persistence = forward(d, ctx, head, p, persistence, &mut ex).await?;
    let (resp, body) = (ex.response.take(), ex.body.take());
    let stored = match (resp, body, decision.get()) {
        (Some(resp), Some(body), Some(true)) => {
            // Every chunk reached the followers, stored or not.
            guard.phase = Phase::Complete;
            store_response(stage, key, &resp, exact(body), request_time).is_some()
        }
        (Some(_), _, Some(false)) => {
            zone.mark_hit_for_miss(key.hash, c.hit_for_miss);
            false
        }
        _ => false,
    };
    if stored {
        zone.clear_hit_for_miss(key.hash);
    }
    drop(guard);
    Ok(persistence)
}

/// Spawns a conditional fetch that refreshes `obj` without making anyone wait. The task owns
/// what it uses: the worker's runtime (`Rc`) and the route's index in its listener's table.
fn revalidate_in_background(
    ctx: &RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    key: &CacheKey,
    obj: Arc<CachedObject>,
    client: Client,
) {
    let zone = stage.zone;
    // Joining as leader keeps concurrent stale hits from starting more refreshes. Nothing is
    // published: a miss that follows this key fetches on its own.
    let Role::Leader(inflight) = zone.join(key.hash) else {
        return;
    };
    let (rt, zone, key, head) = (
        ctx.rt.clone(),
        zone.clone(),
        key.clone(),
        stage.head.clone(),
    );
    let listener = ctx.listener;
    tokio::task::spawn_local(async move {
        let _guard = LeaderGuard {
            zone: &zone,
            hash: key.hash,
            inflight,
            phase: Phase::Uncacheable,
        };
        let routes = &rt.cfg.listeners[listener].routes;
        let Some(crate::actions::Action::Proxy(p)) = routes.get(route_index).map(|r| &r.action)
        else {
            return;
        };
        let Some(c) = p.cache.as_ref() else { return };
        let request_time = zone.now();
        let upstream = (&*rt.cfg.upstreams[p.upstream], &*rt.upstreams[p.upstream]);
        let validators = stored::revalidation_fields(&obj);
        match fetch_whole(upstream, &client, &head, p, &validators, c.max_object_size).await {
            Ok((resp, _)) if resp.status == 304 => {
                Stats::bump(&zone.store.stats.revalidated);
                zone.store.insert(
                    &key,
                    Arc::new(stored::refreshed(
                        &obj,
                        &resp.headers,
                        (request_time, zone.now()),
                        &c.rules,
                    )),
                );
            }
            Ok((resp, body)) if resp.status < 500 => {
                let stage = Stage {
                    head: &head,
                    proxy: p,
                    cache: c,
                    zone: &zone,
                };
                store_response(stage, &key, &resp, body, request_time);
            }
            Ok(_) | Err(_) => {}
        }
    });
}

/// Queues a stored response, honouring the request's conditionals, range and method.
#[inline(always)]
fn write_stored<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    obj: &CachedObject,
    age: u64,
    status: &CacheStatus,
    persistence: Persistence,
) {
    let (head, p, c) = (stage.head, stage.proxy, stage.cache);
    // Age and Cache-Status are rendered by the encoder straight into its output.
    let render = |out: &mut BytesMut| {
        out.extend_from_slice(b"Age: ");
        out.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
        out.extend_from_slice(b"\r\n");
        status.render(out, c.x_cache);
    };
    // Conditionals and ranges apply to a stored 200 only; the rules are the static files'.
    let validators = obj.validators();
    let complete = obj.meta.status == 200;
    if complete && conditional::not_modified(head, &validators) {
        let kept = stored_fields_304(obj);
        let mut reply = Reply::new(304, Framing::Given);
        reply.base = Base::Encoded(&kept);
        reply.date = false;
        reply.render = Some(&render);
        p.filters.response(&mut reply);
        ctx.status = 304;
        d.send_head(&reply, persistence);
        return;
    }
    let head_only = head.method == Method::Head;
    let size = obj.body.len() as u64;
    match complete.then(|| conditional::range(head, size, &validators)) {
        Some(RangeSpec::Bytes(start, end)) => {
            let partial = stored_fields_206(obj);
            let range = format!("Content-Range: bytes {start}-{end}/{size}\r\n");
            let mut reply = Reply::new(206, Framing::Length(end - start + 1));
            reply.base = Base::Encoded(&partial);
            reply.date = false;
            reply.add_lines(range.as_bytes());
            reply.render = Some(&render);
            p.filters.response(&mut reply);
            ctx.status = 206;
            d.send_head(&reply, persistence);
            if !head_only {
                let body = obj.body.slice(start as usize..=end as usize);
                ctx.bytes_sent += body.len() as u64;
                d.send_data(&body);
            }
            return;
        }
        Some(RangeSpec::Unsatisfiable) => {
            let range = format!("Content-Range: bytes */{size}\r\n");
            let mut reply = Reply::new(416, Framing::Length(0));
            reply.date = false;
            reply.add_lines(range.as_bytes());
            reply.render = Some(&render);
            p.filters.response(&mut reply);
            ctx.status = 416;
            d.send_head(&reply, persistence);
            return;
        }
        Some(RangeSpec::Whole) | None => {}
    }
    let mut reply = Reply::new(obj.meta.status, Framing::Given);
    reply.base = Base::Encoded(&obj.head);
    reply.date = false;
    reply.render = Some(&render);
    p.filters.response(&mut reply);
    ctx.status = obj.meta.status;
    d.send_head(&reply, persistence);
    if !head_only {
        ctx.bytes_sent += obj.body.len() as u64;
        d.send_data(&obj.body);
    }
}

/// The status line and the fields a 304 keeps (RFC 9110 §15.4.5), encoded.
fn stored_fields_304(obj: &CachedObject) -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    weir_http::response::put_status_line(&mut out, 304);
    for h in obj.headers.iter().filter(|h| stored::keeps_on_304(&h.name)) {
        weir_http::response::put_header(&mut out, &h.name, &h.value);
    }
    out
}

/// A 206's status line and the stored fields (its own `Content-Length` follows).
fn stored_fields_206(obj: &CachedObject) -> BytesMut {
    let mut out = BytesMut::with_capacity(obj.head.len());
    weir_http::response::put_status_line(&mut out, 206);
    for h in &obj.headers {
        weir_http::response::put_header(&mut out, &h.name, &h.value);
    }
    out
}

fn purge_request<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    persistence: Persistence,
) -> Persistence {
    let head = stage.head;
    ctx.cache = CacheState::Answered;
    let peer = d.peer();
    if !stage.cache.may_purge(peer.ip()) {
        tracing::warn!(%peer, "PURGE refused");
        return super::send_error(d, ctx, head, 403, &[], persistence);
    }
    let key = stage.cache.key.key(head, "http");
    let n = stage
        .zone
        .store
        .purge(&PurgeSelector::Url(key.url().to_vec()), false);
    let body = Bytes::from(format!(r#"{{"purged":{n}}}"#));
    super::send_json(
        d,
        ctx,
        if n > 0 { 200 } else { 404 },
        &body,
        false,
        persistence,
    )
}

/// A cache-generated error (`only-if-cached` with nothing usable stored: 504).
fn cache_error<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    detail: &'static str,
    persistence: Persistence,
) -> Persistence {
    ctx.cache = CacheState::Answered;
    let mut lines = BytesMut::new();
    CacheStatus {
        detail: Some(detail),
        ..Default::default()
    }
    .render(&mut lines, stage.cache.x_cache);
    let status = Error::new(ErrorKind::NotCached).status().unwrap_or(504);
    super::send_error(d, ctx, stage.head, status, &lines, persistence)
}

/// Releases coalesced followers when the leader ends, however it ends: a leader that published a
/// head and did not complete leaves them `Aborted`, one that did not get that far `Uncacheable`.
struct LeaderGuard<'a> {
    zone: &'a CacheZone,
    hash: u64,
    inflight: Arc<Inflight>,
    phase: Phase,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        self.zone.finish(self.hash, &self.inflight, self.phase);
    }
}

/// A plan that only adds `Cache-Status` (no storing).
fn status_plan<'a>(fwd: Fwd, detail: Option<&'static str>, x_cache: bool) -> PlanFn<'a> {
    Box::new(move |resp: &ResponseHead| {
        let mut lines = BytesMut::new();
        CacheStatus {
            fwd: Some(fwd),
            fwd_status: Some(resp.status),
            detail,
            ..Default::default()
        }
        .render(&mut lines, x_cache);
        HeadPlan {
            lines,
            ..Default::default()
        }
    })
}

/// The plan for a POST on a route with `store_post_responses`: `Cache-Status` as for any unsafe
/// method, and a copy of the body when the response may serve later GETs (RFC 9110 §9.3.3).
fn post_plan<'a>(head: &RequestHead, c: &CacheRoute, zone: &Arc<CacheZone>) -> PlanFn<'a> {
    let zone = Some(zone.clone());
    let uri = target_uri(head);
    let authority = head.authority_bytes().unwrap_or_default();
    let (limit, x_cache) = (c.max_object_size, c.x_cache);
    Box::new(move |resp: &ResponseHead| {
        let reusable = policy::post_response_reusable(&uri, &authority, resp.status, &resp.headers);
        let mut lines = BytesMut::new();
        CacheStatus {
            fwd: Some(Fwd::Bypass),
            fwd_status: Some(resp.status),
            detail: Some("method"),
            stored: reusable,
            ..Default::default()
        }
        .render(&mut lines, x_cache);
        HeadPlan {
            lines,
            capture: reusable.then_some(limit),
            tee: None,
            zone: zone.clone(),
        }
    })
}

/// Path and query, as the request gave them.
fn target_uri(head: &RequestHead) -> Vec<u8> {
    let mut uri = head.path().to_vec();
    if let Some(q) = head.query() {
        uri.push(b'?');
        uri.extend_from_slice(q);
    }
    uri
}

fn ttl(obj: &CachedObject, age: u64) -> i64 {
    let lifetime = if obj.is_invalidated() {
        0
    } else {
        obj.meta.storable.lifetime
    };
    if lifetime == u64::MAX {
        return i64::MAX;
    }
    lifetime as i64 - age as i64
}

/// Why a request skips the cache, if it does.
fn bypassed(head: &RequestHead, c: &CacheRoute) -> Option<&'static str> {
    if c.bypass_get || (c.bypass_head && head.method == Method::Head) {
        return Some("bypass-method");
    }
    if c.bypass_headers.iter().any(|h| head.header(h).is_some()) {
        return Some("bypass-header");
    }
    if c.bypass_cookies
        .iter()
        .any(|name| head.cookie(name).is_some())
    {
        return Some("bypass-cookie");
    }
    None
}

/// Stores a response if the policy allows; returns the stored object.
fn store_response(
    stage: Stage<'_>,
    key: &CacheKey,
    resp: &ResponseHead,
    body: Bytes,
    request_time: u64,
) -> Option<Arc<CachedObject>> {
    let (head, c, zone) = (stage.head, stage.cache, stage.zone);
    let now = zone.now();
    // A POST gets here only when its response was found reusable for GETs (`post_plan`): it
    // is then judged as the GET it will answer.
    let method = match head.method {
        Method::Post => &Method::Get,
        ref m => m,
    };
    let s = storable(
        method,
        &head.headers,
        resp.status,
        &resp.headers,
        &c.rules,
        now,
    )
    .ok()?;
    if body.len() > c.max_object_size || head.method == Method::Head {
        return None;
    }
    let obj = Arc::new(stored::build(
        &head.headers,
        resp,
        body,
        (request_time, now),
        c.normalize_accept_encoding,
        Some(s),
    ));
    zone.store.insert(key, obj.clone()).then_some(obj)
}

/// RFC 9111 §4.4: a successful unsafe request invalidates the target URI and the same-origin
/// Location and Content-Location (`weir_cache::stored::invalidated_urls`).
fn invalidate_after_unsafe(zone: &CacheZone, head: &RequestHead, resp: Option<&ResponseHead>) {
    let Some(resp) = resp else { return };
    let target = target_uri(head);
    let locations = [
        resp.header("location").map(|v| &v[..]),
        resp.header("content-location").map(|v| &v[..]),
    ];
    let authority = head.authority().unwrap_or_default();
    for u in stored::invalidated_urls(authority, &target, resp.status, locations) {
        zone.store.purge(&PurgeSelector::Url(u), false);
    }
}
