//! Requests the cache passes to the origin without storing what comes back (a bypass rule, a
//! request naming no consumer, hit-for-miss, an uncacheable coalesced answer, a failed
//! revalidation), and unsafe methods: forwarded, then a successful answer invalidates the URI,
//! `Location` and `Content-Location` (RFC 9111 §4.4). On a route with
//! `store_post_responses`, a POST's answer that may serve later GETs is stored under the GET key.

use weir_cache::object::exact;
use weir_http::{Method, Persistence};

use super::hooks::{PostStore, Status};
use super::storing::{invalidate_after_unsafe, store_response};
use super::{key_for, Stage};
use crate::cache::status::Fwd;
use crate::error::Error;
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::forward::{self, Steer};
use crate::pipeline::RequestCtx;

/// Forwards without storing: the response only gets its `Cache-Status` (`fwd`, `detail`).
pub(super) async fn forward<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    fwd: Fwd,
    detail: Option<&'static str>,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let mut hooks = Status::new(fwd, detail, stage.cache.x_cache);
    let steer = Steer::default();
    forward::forward(
        d,
        ctx,
        stage.head,
        stage.proxy,
        persistence,
        steer,
        &mut hooks,
    )
    .await
}

/// POST, PUT, DELETE and the other unsafe methods (OPTIONS and TRACE too, which invalidate
/// nothing).
pub(super) async fn unsafe_method<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let (head, proxy, settings, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
    ctx.cache = CacheState::Bypass("method");
    let steer = Steer::default();
    let post = settings.store_post_responses && head.method == Method::Post;
    let request_time = zone.now();
    let mut status = Status::new(Fwd::Bypass, Some("method"), settings.x_cache);
    let mut store = PostStore::new(stage);
    let hooks: &mut dyn forward::UpstreamHooks = if post { &mut store } else { &mut status };
    let persistence = forward::forward(d, ctx, head, proxy, persistence, steer, hooks).await?;
    let resp = if post {
        store.response.as_ref()
    } else {
        status.response.as_ref()
    };
    if !matches!(head.method, Method::Options | Method::Trace) {
        invalidate_after_unsafe(zone, &settings.key, head, resp);
    }
    if let (Some(resp), Some(body)) = (store.response.as_ref(), store.body.take()) {
        // Only a POST the route stores captures: its answer is reusable for GETs of this URI.
        if let Some(key) = key_for(ctx, &stage, true) {
            store_response(stage, &key, resp, exact(body), request_time);
        }
    }
    Ok(persistence)
}
