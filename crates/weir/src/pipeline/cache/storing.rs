//! Storing: a response the policy lets the zone keep (`store_response`, for the miss leader,
//! revalidation, slices and POSTs), and RFC 9111 §4.4's invalidation after an unsafe request.

use std::sync::Arc;

use bytes::Bytes;
use weir_cache::policy::storable;
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject};
use weir_http::{Method, RequestHead, ResponseHead};

use super::Stage;
use crate::cache::CacheZone;

/// Path and query, as the request gave them.
pub(super) fn target_uri(head: &RequestHead) -> Vec<u8> {
    let mut uri = head.path().to_vec();
    if let Some(q) = head.query() {
        uri.push(b'?');
        uri.extend_from_slice(q);
    }
    uri
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
        head.headers(),
        resp.status,
        resp.headers(),
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
                &crate::filters::compress::Seen::by(|n| resp.header(n)),
                Some(body.len() as u64),
            ) =>
        {
            with_vary = resp.with_headers(stored::with_vary_on_encoding(resp.headers()));
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
    let locations = [resp.header("location"), resp.header("content-location")];
    let authority = head.authority().unwrap_or_default();
    for u in stored::invalidated_urls(authority, &target, resp.status, locations) {
        zone.invalidate(u, plain_keys);
    }
}
