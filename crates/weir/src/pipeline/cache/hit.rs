//! Hits: a stored object found by the session's lookup (`lookup.rs`), from memory or a lower
//! tier, judged by RFC 9111 (`weir_cache::policy::evaluate`) and served, top to bottom:
//!
//! * [`try_fresh_hit`]: a fresh memory hit, answered before the session's future is built.
//! * [`serve_found`]: fresh or stale-allowed → served; stale-while-revalidate → served, and
//!   refreshed in the background; must revalidate → `revalidate.rs`, then the refreshed object,
//!   the new response, or (stale-if-error) the stale one.
//! * [`serve_file`]: a disk hit whose body leaves straight from the segment file (`sendfile`):
//!   a fresh stored response for a plain-TCP HTTP/1.1 GET, whole or one range. Anything else
//!   (stale, a 416, HEAD, TLS, HTTP/2, a body filter) reads the object whole and goes the
//!   usual way. Which bodies come from the file, and why the checksum still holds, is
//!   `weir_cache::disk::file_hit`.
//! * [`write_stored`]: a stored response as a `Reply` (whole, 304, 412, 206, 416), `Age` and
//!   `Cache-Status` rendered by the encoder straight into its output.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::policy::{evaluate, Freshness};
use weir_cache::store::{Lookup, Stats};
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject, Directives, FileBody};
use weir_http::conditional::{self, RangeSpec};
use weir_http::{Base, Framing, Method, Persistence, Reply};

use super::revalidate::{self, Revalidated};
use super::{bypassed, encode, key_for, pass, ttl, Stage};
use crate::cache::status::Fwd;
use crate::cache::CacheStatus;
use crate::error::Error;
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::{send_head_filtered, RequestCtx};

/// The hit path, without building the (large, boxed) future of the full phase: a fresh stored
/// response is queued at once and `true` returned; anything else is `false`, for [`super::cached`].
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
    let encodes = stage.encodes();
    let Lookup::Found(obj) = zone.store.lookup(&key, |name| {
        encode::vary_value(&stage, name, encodes, false)
    }) else {
        return false;
    };
    let age = obj.meta.clock.current_age(zone.now());
    let req_dirs = Directives::parse(head.fields().values(b"cache-control"));
    match evaluate(&obj.meta.storable, age, obj.is_invalidated(), &req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {
            serve_hit(d, ctx, stage, &obj, age, persistence);
            true
        }
        _ => false,
    }
}

/// Queues a hit: counted, `Cache-Status: hit` with the remaining TTL.
pub(super) fn serve_hit<D: Downstream>(
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

/// A stored object was found (`at`: its key and the request's directives): serve it,
/// revalidate it, or fetch anew, per RFC 9111.
pub(super) async fn serve_found<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    ((key, req_dirs), obj): ((&CacheKey, &Directives), Arc<CachedObject>),
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let zone = stage.zone;
    let age = obj.meta.clock.current_age(zone.now());
    let if_error = match evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {
            serve_hit(d, ctx, stage, &obj, age, persistence);
            return Ok(persistence);
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
            let client = crate::pipeline::client_of(d);
            revalidate::in_background(ctx, stage, route_index, key, obj, client);
            return Ok(persistence);
        }
        Freshness::Revalidate { if_error } => if_error,
    };
    Stats::bump(&zone.store.stats.stale);
    if req_dirs.only_if_cached {
        let answered = super::answers::cache_error(d, ctx, stage, "only-if-cached", persistence);
        return Ok(answered);
    }
    let revalidated = revalidate::revalidate(ctx, d.peer(), stage, key, &obj, if_error).await;
    let (obj, status) = match revalidated {
        Revalidated::NotModified { updated, own } => {
            ctx.cache = CacheState::Revalidated;
            let age = updated.meta.clock.current_age(zone.now());
            let status = CacheStatus {
                fwd: Some(Fwd::Stale),
                fwd_status: Some(304),
                ttl: Some(ttl(&updated, age)),
                stored: true,
                ..Default::default()
            };
            let stage = Stage { own: &own, ..stage };
            write_stored(d, ctx, stage, &updated, age, &status, persistence);
            return Ok(persistence);
        }
        Revalidated::Replaced { obj, status } => (obj, status),
        Revalidated::Errored | Revalidated::Failed if if_error => {
            return Ok(serve_stale_on_error(d, ctx, stage, &obj, persistence));
        }
        // Too large to revalidate in memory, or the origin failed: a plain forward answers
        // (and maps the failure to 502/503/504 as usual).
        Revalidated::Errored | Revalidated::Failed => {
            ctx.cache = CacheState::Miss;
            return pass::forward(d, ctx, stage, Fwd::Stale, None, persistence).await;
        }
    };
    ctx.cache = CacheState::Miss;
    let age = obj.meta.clock.current_age(zone.now());
    let status = CacheStatus {
        fwd: Some(Fwd::Stale),
        fwd_status: Some(status),
        stored: obj.meta.storable.lifetime > 0,
        ttl: Some(ttl(&obj, age)),
        ..Default::default()
    };
    write_stored(d, ctx, stage, &obj, age, &status, persistence);
    Ok(persistence)
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

/// Serves `obj` with its body from `body`. `None`: not fresh, or a range it does not answer
/// from the file; nothing was sent.
pub(super) async fn serve_file<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    (obj, body): (&CachedObject, &FileBody),
    req_dirs: &Directives,
    persistence: Persistence,
) -> Option<Result<Persistence, Error>> {
    let zone = stage.zone;
    let age = obj.meta.clock.current_age(zone.now());
    match evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {}
        _ => return None,
    }
    let complete = obj.meta.status == 200;
    let range = if complete {
        conditional::range(stage.head, body.len, &obj.validators())
    } else {
        RangeSpec::Whole
    };
    if range == RangeSpec::Unsatisfiable {
        return None;
    }
    Stats::bump(&zone.store.stats.hits);
    ctx.cache = CacheState::Hit;
    let status = CacheStatus {
        hit: true,
        ttl: Some(ttl(obj, age)),
        ..Default::default()
    };
    let x_cache = stage.cache.x_cache;
    let render = |out: &mut BytesMut| put_age_and_status(out, age, &status, x_cache);
    if complete && answered_precondition(d, ctx, stage, obj, &render, persistence) {
        return Some(Ok(persistence));
    }
    let partial;
    let content_range;
    let (mut reply, from, len) = match range {
        RangeSpec::Bytes(a, b) => {
            partial = stored_fields_206(obj);
            content_range = format!("Content-Range: bytes {a}-{b}/{}\r\n", body.len);
            let mut reply = Reply::new(206, Framing::Length(b - a + 1));
            reply.base = Base::Encoded(&partial);
            reply.add_lines(content_range.as_bytes());
            (reply, a, b - a + 1)
        }
        _ => {
            let mut reply = Reply::new(obj.meta.status, Framing::Given);
            reply.base = Base::Encoded(&obj.head);
            (reply, 0, body.len)
        }
    };
    reply.date = false;
    reply.render = Some(&render);
    if !stage.own.is_empty() {
        reply.add_lines(stage.own);
    }
    let mut filter_lines = BytesMut::new();
    crate::pipeline::filter_response(ctx, &stage.proxy.filters, &mut reply, &mut filter_lines);
    let persistence = send_head_filtered(d, ctx, &reply, persistence);
    ctx.bytes_sent += len;
    Some(
        d.send_file(&body.file, body.offset + from, len)
            .await
            .map(|()| persistence),
    )
}

/// Queues a stored response, honouring the request's conditionals, range and method.
#[inline(always)]
pub(super) fn write_stored<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    obj: &CachedObject,
    age: u64,
    status: &CacheStatus,
    persistence: Persistence,
) {
    let (head, settings, own) = (stage.head, stage.cache, stage.own);
    // Age and Cache-Status are rendered by the encoder straight into its output.
    let render = |out: &mut BytesMut| put_age_and_status(out, age, status, settings.x_cache);
    // Conditionals and ranges apply to a stored 200 only; the rules are the static files'.
    let validators = obj.validators();
    let complete = obj.meta.status == 200;
    if complete && answered_precondition(d, ctx, stage, obj, &render, persistence) {
        return;
    }
    let head_only = head.method == Method::Head;
    let size = obj.body.len() as u64;
    match complete.then(|| conditional::range(head, size, &validators)) {
        Some(RangeSpec::Bytes(start, end)) => {
            let partial = stored_fields_206(obj);
            let range = format!("Content-Range: bytes {start}-{end}/{size}\r\n");
            let mut filter_lines = BytesMut::new();
            let mut reply = Reply::new(206, Framing::Length(end - start + 1));
            reply.base = Base::Encoded(&partial);
            reply.date = false;
            reply.add_lines(range.as_bytes());
            reply.render = Some(&render);
            if !own.is_empty() {
                reply.add_lines(own);
            }
            crate::pipeline::filter_response(
                ctx,
                &stage.proxy.filters,
                &mut reply,
                &mut filter_lines,
            );
            send_head_filtered(d, ctx, &reply, persistence);
            if !head_only {
                let body = obj.body.slice(start as usize..=end as usize);
                ctx.bytes_sent += body.len() as u64;
                d.send_data(&body);
            }
            return;
        }
        Some(RangeSpec::Unsatisfiable) => {
            let range = format!("Content-Range: bytes */{size}\r\n");
            let mut filter_lines = BytesMut::new();
            let mut reply = Reply::new(416, Framing::Length(0));
            reply.date = false;
            reply.add_lines(range.as_bytes());
            reply.render = Some(&render);
            if !own.is_empty() {
                reply.add_lines(own);
            }
            crate::pipeline::filter_response(
                ctx,
                &stage.proxy.filters,
                &mut reply,
                &mut filter_lines,
            );
            send_head_filtered(d, ctx, &reply, persistence);
            return;
        }
        Some(RangeSpec::Whole) | None => {}
    }
    let mut filter_lines = BytesMut::new();
    let mut reply = Reply::new(obj.meta.status, Framing::Given);
    reply.base = Base::Encoded(&obj.head);
    reply.date = false;
    reply.render = Some(&render);
    if !own.is_empty() {
        reply.add_lines(own);
    }
    crate::pipeline::filter_response(ctx, &stage.proxy.filters, &mut reply, &mut filter_lines);
    send_head_filtered(d, ctx, &reply, persistence);
    if !head_only {
        crate::pipeline::send_body(d, ctx, &obj.body, true);
    }
}

/// `Age` and `Cache-Status` (and `X-Cache`) of a stored answer, rendered by the encoder
/// straight into its output.
#[inline(always)]
pub(super) fn put_age_and_status(
    out: &mut BytesMut,
    age: u64,
    status: &CacheStatus,
    x_cache: bool,
) {
    out.extend_from_slice(b"Age: ");
    out.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
    out.extend_from_slice(b"\r\n");
    status.render(out, x_cache);
}

/// Answers a failed precondition (412) or a 304 for `obj` (a complete stored response, or the
/// representation sliced pieces belong to); `false`: go on and serve it.
#[inline(always)]
pub(super) fn answered_precondition<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    obj: &CachedObject,
    render: &dyn Fn(&mut BytesMut),
    persistence: Persistence,
) -> bool {
    let (head, own) = (stage.head, stage.own);
    let verdict = conditional::evaluate(head, &obj.validators());
    if verdict == conditional::Precondition::Failed {
        let body = crate::error::canned_body(412);
        let mut filter_lines = BytesMut::new();
        let mut reply = crate::error::canned(412, body.len(), b"");
        reply.render = Some(render);
        crate::pipeline::filter_response(ctx, &stage.proxy.filters, &mut reply, &mut filter_lines);
        send_head_filtered(d, ctx, &reply, persistence);
        if head.method != Method::Head {
            ctx.bytes_sent += body.len() as u64;
            d.send_data(&Bytes::from(body));
        }
        return true;
    }
    if verdict == conditional::Precondition::NotModified {
        let kept = stored_fields_304(obj);
        let mut filter_lines = BytesMut::new();
        let mut reply = Reply::new(304, Framing::Given);
        reply.base = Base::Encoded(&kept);
        reply.date = false;
        reply.render = Some(render);
        if !own.is_empty() {
            reply.add_lines(own);
        }
        crate::pipeline::filter_response(ctx, &stage.proxy.filters, &mut reply, &mut filter_lines);
        send_head_filtered(d, ctx, &reply, persistence);
        return true;
    }
    false
}

/// The status line and the fields a 304 keeps (RFC 9110 §15.4.5), encoded.
pub(super) fn stored_fields_304(obj: &CachedObject) -> BytesMut {
    let mut out = BytesMut::with_capacity(256);
    weir_http::response::put_status_line(&mut out, 304);
    for h in obj.headers.iter().filter(|h| stored::keeps_on_304(&h.name)) {
        weir_http::response::put_header(&mut out, &h.name, &h.value);
    }
    out
}

/// A 206's status line and the stored fields (its own `Content-Length` follows).
pub(super) fn stored_fields_206(obj: &CachedObject) -> BytesMut {
    let mut out = BytesMut::with_capacity(obj.head.len());
    weir_http::response::put_status_line(&mut out, 206);
    for h in &obj.headers {
        weir_http::response::put_header(&mut out, &h.name, &h.value);
    }
    out
}
