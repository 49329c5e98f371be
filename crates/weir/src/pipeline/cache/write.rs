//! Writing stored responses (whole, 304, 206, 416) as `Reply`s, the cache's own answers
//! (PURGE, `only-if-cached`), and storing and invalidating responses.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::policy::storable;
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject, PurgeSelector};
use weir_http::conditional::{self, RangeSpec};
use weir_http::{Base, Framing, Method, Persistence, Reply, RequestHead, ResponseHead};

use crate::cache::{CacheRoute, CacheStatus, CacheZone};
use crate::error::{Error, ErrorKind};
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::{send_head_filtered, RequestCtx};

use super::Stage;

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
            stage
                .proxy
                .filters
                .response(&mut reply, ctx.response_run(), &mut filter_lines);
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
            stage
                .proxy
                .filters
                .response(&mut reply, ctx.response_run(), &mut filter_lines);
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
    stage
        .proxy
        .filters
        .response(&mut reply, ctx.response_run(), &mut filter_lines);
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
        stage
            .proxy
            .filters
            .response(&mut reply, ctx.response_run(), &mut filter_lines);
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
        stage
            .proxy
            .filters
            .response(&mut reply, ctx.response_run(), &mut filter_lines);
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

pub(super) async fn purge_request<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    persistence: Persistence,
) -> Persistence {
    let head = stage.head;
    ctx.cache = CacheState::Answered;
    let peer = d.peer();
    let client = stage.proxy.client_ip(peer.ip(), head);
    if !stage.cache.may_purge(client) {
        static REFUSED: crate::logs::Limited = crate::logs::Limited::new();
        if let Some(suppressed) = REFUSED.admit() {
            tracing::warn!(%peer, %client, suppressed, "PURGE refused");
        }
        return crate::pipeline::send_error(d, ctx, head, 403, &[], persistence);
    }
    // A purge selects by URL: the consumer part of a key never matters to it.
    let key = stage.cache.key.key(head, stage.scheme);
    // Only on disk (not in memory): still there to purge (stored under the GET key).
    let get_key = super::key_for(ctx, &stage, true)
        .unwrap_or_else(|| stage.cache.key.get_key(head, stage.scheme));
    let on_disk = stage
        .zone
        .disk
        .as_ref()
        .is_some_and(|d| d.contains(&get_key));
    let n = match stage
        .zone
        .purge(&PurgeSelector::Url(key.url().to_vec()), false)
        .await
    {
        Ok(n) => n.max(u64::from(on_disk)),
        Err(why) => {
            static NOT_RECORDED: crate::logs::Limited = crate::logs::Limited::new();
            if let Some(suppressed) = NOT_RECORDED.admit() {
                tracing::warn!(suppressed, "PURGE not acknowledged: {why}");
            }
            let body = Bytes::from(format!(
                "{{\"purged\":null,\"error\":{}}}\n",
                serde_json::Value::String(why)
            ));
            return crate::pipeline::send_json(d, ctx, 503, &body, false, persistence);
        }
    };
    let body = Bytes::from(format!(r#"{{"purged":{n}}}"#));
    crate::pipeline::send_json(
        d,
        ctx,
        if n > 0 { 200 } else { 404 },
        &body,
        false,
        persistence,
    )
}

/// A cache-generated error (`only-if-cached` with nothing usable stored: 504).
pub(super) fn cache_error<D: Downstream>(
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
    crate::pipeline::send_error(d, ctx, stage.head, status, &lines, persistence)
}

/// Path and query, as the request gave them.
pub(super) fn target_uri(head: &RequestHead) -> Vec<u8> {
    let mut uri = head.path().to_vec();
    if let Some(q) = head.query() {
        uri.push(b'?');
        uri.extend_from_slice(q);
    }
    uri
}

pub(super) fn ttl(obj: &CachedObject, age: u64) -> i64 {
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
pub(super) fn bypassed(head: &RequestHead, settings: &CacheRoute) -> Option<&'static str> {
    if settings.bypass_get || (settings.bypass_head && head.method == Method::Head) {
        return Some("bypass-method");
    }
    if settings
        .bypass_headers
        .iter()
        .any(|h| head.header(h).is_some())
    {
        return Some("bypass-header");
    }
    if settings
        .bypass_cookies
        .iter()
        .any(|name| head.cookie(name).is_some())
    {
        return Some("bypass-cookie");
    }
    None
}

/// Stores a response if the policy allows; returns the stored object.
pub(super) fn store_response(
    stage: Stage<'_>,
    key: &CacheKey,
    resp: &ResponseHead,
    body: Bytes,
    request_time: u64,
) -> Option<Arc<CachedObject>> {
    let (head, settings, zone) = (stage.head, stage.cache, stage.zone);
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
        &settings.rules,
        now,
    )
    .ok()?;
    if body.len() > settings.max_object_size
        || head.method == Method::Head
        || !stage.proxy.filters.before_store(resp)
    {
        return None;
    }
    // On a compressing route the origin's answer is the identity variant (`encode.rs`).
    let compression = super::encode::settings(&stage);
    let with_vary;
    let resp = match compression {
        Some(c)
            if c.compressible(
                resp.status,
                &crate::filters::compress::Seen::by(|n| resp.header(n).map(|v| &v[..])),
                Some(body.len() as u64),
            ) =>
        {
            with_vary = ResponseHead {
                headers: stored::with_vary_on_encoding(&resp.headers),
                ..resp.clone()
            };
            &with_vary
        }
        _ => resp,
    };
    let fields = super::encode::request_fields_for_store(head, compression.is_some());
    let obj = Arc::new(stored::build(
        &fields,
        resp,
        body,
        (request_time, now),
        settings.normalize_accept_encoding || compression.is_some(),
        Some(s),
    ));
    zone.store_object(key, &obj).then_some(obj)
}

/// RFC 9111 §4.4: a successful unsafe request invalidates the target URI and the same-origin
/// Location and Content-Location (`weir_cache::stored::invalidated_urls`).
pub(super) fn invalidate_after_unsafe(
    zone: &CacheZone,
    key: &weir_cache::key::KeySpec,
    head: &RequestHead,
    resp: Option<&ResponseHead>,
) {
    let plain_keys = key.headers.is_empty()
        && key.cookies.is_empty()
        && key.query_params.is_none()
        && !key.sort_query
        && !key.consumer;
    let Some(resp) = resp else { return };
    let target = target_uri(head);
    let locations = [
        resp.header("location").map(|v| &v[..]),
        resp.header("content-location").map(|v| &v[..]),
    ];
    let authority = head.authority().unwrap_or_default();
    for u in stored::invalidated_urls(authority, &target, resp.status, locations) {
        zone.invalidate(u, plain_keys);
    }
}
