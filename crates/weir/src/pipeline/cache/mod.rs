//! The cache session of a `proxy` route: everything the cache does for one request, from the
//! key to what goes back to the client. [`cached`] below is the whole flow; each branch is one
//! file, read top to bottom:
//!
//! ```text
//! PURGE ──────────────────────────────────────────────→ answers.rs   (loopback / purge_from)
//! unsafe method, bypass rule, no consumer ────────────→ pass.rs      (forward, Cache-Status,
//!                                                                     invalidate after 2xx/3xx)
//! key ─→ lookup.rs: one walk over the sources, in order
//!          owner (sharded zone) → memory (+ coded variants) → the zone's lower tiers → slices
//!        ─ a stored object ─→ hit.rs: fresh / max-stale ─→ serve (304 / 206 / 416 / HEAD)
//!                                     stale-while-revalidate ─→ serve + revalidate.rs, in the background
//!                                     must revalidate ─→ revalidate.rs ─ 304 → refreshed, served
//!                                                                      ─ new → stored, served
//!                                                                      ─ error → stale-if-error?
//!        ─ a body in a file ─→ hit.rs (sendfile)
//!        ─ answered by the owner or the slices ─→ done (peer.rs, slice.rs)
//!        ─ nothing ─→ miss.rs: only-if-cached → 504; hit-for-miss → pass.rs;
//!                              coalesce: leader forwards with hooks.rs (copy, tee) and stores /
//!                                        followers stream the leader's copy
//! ```
//!
//! The upstream phase (`pipeline/forward.rs`) knows nothing of this: the cache takes part at its
//! named points through `hooks.rs`. Building, refreshing and invalidating stored objects are
//! `weir_cache::stored`, the RFC 9111 verdicts `weir_cache::policy`, the tiers
//! `weir_cache::storage` (the zone holds them as a list: `cache/zone.rs`).
//!
//! Hits are a [`weir_http::Reply`] over the stored, pre-encoded head, with `Age` and
//! `Cache-Status` rendered by the encoder straight into the output, then the route's response
//! filters: no allocation and no intermediate buffer per hit. A fresh memory hit is answered
//! before this future is even built ([`try_fresh_hit`]).

mod answers;
mod capture;
mod encode;
mod hit;
mod hooks;
mod lookup;
mod miss;
mod pass;
mod peer;
mod revalidate;
mod slice;
mod storing;

use std::sync::Arc;

use weir_cache::{CacheKey, CachedObject, Directives};
use weir_http::{Method, Persistence, RequestHead};

use super::context::CacheState;
use super::downstream::Downstream;
use super::RequestCtx;
use crate::cache::status::Fwd;
use crate::cache::{CacheRoute, CacheZone};
use crate::error::Error;
use crate::proxy::route::ProxyRoute;

pub(crate) use hit::try_fresh_hit;
use lookup::Found;

/// One request through the cache session: the request, the route and its cache settings.
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

impl Stage<'_> {
    /// Whether the route's filters compress (its stored objects are identity variants, coded
    /// variants made from them: `encode.rs`).
    fn encodes(&self) -> bool {
        self.proxy.filters.can(crate::filters::Caps::ENCODES)
    }
}

/// Serves the request through the cache session.
pub(crate) async fn cached<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    route_index: usize,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let head = stage.head;
    if matches!(&head.method, Method::Other(m) if &m[..] == b"PURGE") {
        return Ok(answers::purge(d, ctx, stage, persistence).await);
    }
    if !matches!(head.method, Method::Get | Method::Head) {
        return pass::unsafe_method(d, ctx, stage, persistence).await;
    }
    if let Some(why) = bypassed(head, stage.cache) {
        ctx.cache = CacheState::Bypass(why);
        return pass::forward(d, ctx, stage, Fwd::Bypass, Some(why), persistence).await;
    }
    let Some(key) = key_for(ctx, &stage, false) else {
        ctx.cache = CacheState::Bypass("no-consumer");
        let why = Some("no-consumer");
        return pass::forward(d, ctx, stage, Fwd::Bypass, why, persistence).await;
    };
    let req_dirs = Directives::parse(head.fields().values(b"cache-control"));
    let found = lookup::find(d, ctx, stage, &key, &req_dirs, persistence).await;
    let at = (&key, &req_dirs);
    match found {
        Found::Answered(answered) => answered,
        Found::Stored(obj) => {
            hit::serve_found(d, ctx, stage, route_index, (at, obj), persistence).await
        }
        Found::File(obj, body) => {
            let served = hit::serve_file(d, ctx, stage, (&obj, &body), &req_dirs, persistence);
            if let Some(answered) = Box::pin(served).await {
                return answered;
            }
            // Not fresh, or a range the file does not answer: the object whole, the usual way.
            match Box::pin(lookup::whole(stage, &key)).await {
                Some(obj) => {
                    hit::serve_found(d, ctx, stage, route_index, (at, obj), persistence).await
                }
                None => miss::miss(d, ctx, stage, at, Fwd::UriMiss, persistence).await,
            }
        }
        Found::Missing(fwd) => miss::miss(d, ctx, stage, at, fwd, persistence).await,
    }
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

/// Seconds of freshness left (negative: stale), for `Cache-Status: ttl`.
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
