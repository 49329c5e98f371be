//! Revalidation, one implementation for both callers: a conditional fetch of a stale stored
//! object (its validators: `weir_cache::stored::revalidation_fields`), whose answer refreshes
//! it (304), replaces it (a new response, stored when it may be), or leaves it (an error).
//!
//! * In the foreground (`hit.rs`): the request waits and is served what this brings.
//! * In the background ([`in_background`], stale-while-revalidate): the stale object was
//!   served already; a task of its own refreshes it, joined as the key's coalescing leader so
//!   that concurrent stale hits start no more refreshes.

use std::sync::Arc;
use weir_cache::store::Stats;
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject};

use super::miss::LeaderGuard;
use super::storing::store_response;
use super::Stage;
use crate::cache::zone::{FetchPhase, Role};
use crate::filters::Client;
use crate::pipeline::fetch::fetch_whole;
use crate::pipeline::RequestCtx;

/// What a revalidation brought.
pub(super) enum Revalidated {
    /// 304: the object refreshed and stored again; `own`: the 304's fields meant for this
    /// client only (its Set-Cookie), never stored.
    NotModified {
        updated: Arc<CachedObject>,
        own: Vec<u8>,
    },
    /// A new response, stored when it may be; `obj` is it as a stored object either way (one
    /// nobody else sees when it was not stored).
    Replaced { obj: Arc<CachedObject>, status: u16 },
    /// The origin answered with a server error and the caller keeps the stale object
    /// (`keep_on_error`): nothing was stored.
    Errored,
    /// No answer: the upstream failed (logged by the upstream phase), or the response was too
    /// large to fetch whole.
    Failed,
}

/// Revalidates `obj`, stored under `key`. `keep_on_error`: a 5xx leaves the stored object
/// alone (stale-if-error, or a background refresh) instead of replacing it.
pub(super) async fn revalidate(
    ctx: &mut RequestCtx,
    peer: std::net::SocketAddr,
    stage: Stage<'_>,
    key: &CacheKey,
    obj: &Arc<CachedObject>,
    keep_on_error: bool,
) -> Revalidated {
    let (head, settings, zone) = (stage.head, stage.cache, stage.zone);
    let validators = stored::revalidation_fields(obj);
    let request_time = zone.now();
    let limit = settings.max_object_size;
    let (resp, body) = match fetch_whole(ctx, peer, head, stage.proxy, &validators, limit).await {
        Ok(fetched) => fetched,
        Err(_) => return Revalidated::Failed,
    };
    if resp.status == 304 {
        Stats::bump(&zone.store.stats.revalidated);
        let updated = Arc::new(stored::refreshed(
            obj,
            resp.headers(),
            (request_time, zone.now()),
            &settings.rules,
        ));
        zone.store_object(key, &updated);
        let own = stored::own_fields_of_304(resp.headers(), &settings.rules);
        return Revalidated::NotModified { updated, own };
    }
    if resp.status >= 500 && keep_on_error {
        return Revalidated::Errored;
    }
    let stored = store_response(stage, key, &resp, body.clone(), request_time);
    let obj = stored.unwrap_or_else(|| {
        Arc::new(stored::build(
            head.headers(),
            &resp,
            body,
            (request_time, zone.now()),
            settings.normalize_accept_encoding,
            None,
        ))
    });
    Revalidated::Replaced {
        obj,
        status: resp.status,
    }
}

/// Spawns a revalidation of `obj` that makes no one wait. The task owns what it uses: the
/// worker's runtime (`Rc`) and the route's index in its listener's table.
pub(super) fn in_background(
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
            phase: FetchPhase::Uncacheable,
        };
        let routes = &rt.cfg.listeners[listener].routes;
        let Some(crate::actions::Action::Proxy(proxy)) = routes.get(route_index).map(|r| &r.action)
        else {
            return;
        };
        let Some(settings) = proxy.cache.as_ref() else {
            return;
        };
        let stage = Stage {
            head: &head,
            proxy,
            cache: settings,
            zone: &zone,
            scheme: client.scheme,
            own: b"",
        };
        // A context of its own: the request that started it has ended.
        let mut ctx = RequestCtx::new(rt.clone(), listener);
        let peer = std::net::SocketAddr::new(client.ip, 0);
        revalidate(&mut ctx, peer, stage, &key, &obj, true).await;
    });
}
