//! The miss side of the cache phase: the coalescing leader (fetch, tee to followers, store),
//! its followers, background revalidation, and the plans made when a response head arrives.

use std::sync::Arc;

use bytes::BytesMut;
use weir_cache::object::exact;
use weir_cache::policy::{self, storable, NoStore};
use weir_cache::store::Stats;
use weir_cache::stored;
use weir_cache::{CacheKey, CachedObject};
use weir_http::{Base, Framing, Method, Persistence, Reply, RequestHead, ResponseHead};

use crate::cache::status::Fwd;
use crate::cache::zone::{FetchPhase, Inflight, Role, StreamHead};
use crate::cache::{CacheRoute, CacheStatus, CacheZone};
use crate::error::{Error, ErrorKind};
use crate::filters::Client;
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::fetch::fetch_whole;
use crate::pipeline::forward::{forward, Exchange, HeadPlan, PlanFn};
use crate::pipeline::{send_head_filtered, RequestCtx};

use super::write::*;
use super::Stage;

/// A coalesced follower: streams the leader's response as it arrives. `Ok(None)`: the leader's
/// answer is not shareable (or never came within `lock_timeout`), fetch on your own.
pub(super) async fn follow<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    inflight: &Inflight,
    fwd: Fwd,
    persistence: Persistence,
) -> Result<Option<Persistence>, Error> {
    let (head, proxy, settings) = (stage.head, stage.proxy, stage.cache);
    let mut changes = inflight.subscribe();
    let head_deadline = tokio::time::Instant::now() + settings.lock_timeout;
    let shared = loop {
        match inflight.snapshot(0) {
            (FetchPhase::Uncacheable, ..) => return Ok(None),
            (FetchPhase::Aborted, None, _) => return Ok(None),
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
    let idle = ctx.rt.cfg.upstreams[proxy.upstream].idle_read_timeout;
    let status = CacheStatus {
        fwd: Some(fwd),
        fwd_status: Some(shared.status),
        collapsed: true,
        stored: true,
        ..Default::default()
    };
    let mut lines = BytesMut::new();
    status.render(&mut lines, settings.x_cache);
    // The shared head is encoded like a stored one, with its length when the upstream gave it.
    let encoded = weir_cache::object::encode_head(
        shared.status,
        &shared.reason,
        &shared.headers,
        shared.content_length,
    );
    let mut filter_lines = BytesMut::new();
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
    proxy
        .filters
        .response(&mut reply, ctx.response_run(), &mut filter_lines);
    let persistence = send_head_filtered(d, ctx, &reply, persistence);
    if head.method == Method::Head {
        return Ok(Some(persistence));
    }
    let mut sent = 0;
    loop {
        let (phase, _, chunks) = inflight.snapshot(sent);
        sent += chunks.len();
        for chunk in chunks {
            crate::pipeline::send_body(d, ctx, &chunk, false);
        }
        match phase {
            FetchPhase::Complete => {
                crate::pipeline::finish_body(d, ctx);
                d.end_body();
                return Ok(Some(persistence));
            }
            FetchPhase::Aborted | FetchPhase::Uncacheable => {
                return Err(Error::with(
                    ErrorKind::UpstreamAborted,
                    "the coalesced fetch failed",
                ))
            }
            FetchPhase::Fetching | FetchPhase::Streaming => {}
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

/// The coalescing leader: forward, relaying to the client while copying the body, then store.
pub(super) async fn fetch_and_store<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
    fwd: Fwd,
    persistence: Persistence,
    mut guard: LeaderGuard<'_>,
) -> Result<Persistence, Error> {
    let (head, proxy, settings, zone) = (stage.head, stage.proxy, stage.cache, stage.zone);
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
            &settings.rules,
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
            Ok(_) if length.is_some_and(|n| n > settings.max_object_size as u64) => {
                Err(NoStore::TooLarge)
            }
            Ok(_) if !proxy.filters.before_store(resp) => Err(NoStore::Filter),
            v => v,
        };
        // A body of known length is paid for now, whole, from the zone's budget for captures
        // in flight (held twice when followers share it): refused up front, not dropped under
        // way with followers streaming it.
        let shares = head.method == Method::Get;
        let mut reserved = 0;
        let verdict = match (verdict, length) {
            (Ok(s), Some(n)) if n > 0 => {
                let cost = n * if shares { 2 } else { 1 };
                if zone.reserve(cost) {
                    reserved = cost;
                    Ok(s)
                } else {
                    Err(NoStore::Busy)
                }
            }
            (v, _) => v,
        };
        let mut tee = None;
        let capture = match &verdict {
            Ok(_) => {
                st.stored = true;
                // Followers can share the body only of a GET (a HEAD's has none).
                if shares {
                    inflight.publish_head(StreamHead {
                        status: resp.status,
                        reason: resp.reason.clone(),
                        headers: stored::stored_headers(&resp.headers),
                        content_length: length,
                    });
                    tee = Some(inflight.clone());
                }
                Some(settings.max_object_size)
            }
            Err(why) => {
                st.detail = Some(why.as_str());
                None
            }
        };
        // A spent budget is no verdict on the response: no hit-for-miss mark.
        decision.set((verdict != Err(NoStore::Busy)).then_some(verdict.is_ok()));
        let mut lines = BytesMut::new();
        st.render(&mut lines, settings.x_cache);
        HeadPlan {
            lines,
            capture,
            tee,
            zone: Some(zone.clone()),
            reserved,
        }
    };
    let mut ex = Exchange {
        plan: Some(Box::new(plan)),
        strip_conditionals: true,
        ..Default::default()
    };
    let persistence = forward(d, ctx, head, proxy, persistence, &mut ex).await?;
    if ex.teed {
        // Every chunk reached the followers, stored or not.
        guard.phase = FetchPhase::Complete;
    }
    let (resp, body) = (ex.response.take(), ex.body.take());
    let stored = match (resp, body, decision.get()) {
        (Some(resp), Some(body), Some(true)) => {
            // Every chunk reached the followers, stored or not.
            guard.phase = FetchPhase::Complete;
            store_response(stage, key, &resp, exact(body), request_time).is_some()
        }
        (Some(_), _, Some(false)) => {
            zone.mark_hit_for_miss(key.hash, settings.hit_for_miss);
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
pub(super) fn revalidate_in_background(
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
        let request_time = zone.now();
        let validators = stored::revalidation_fields(&obj);
        // A context of its own: the request that started it has ended.
        let mut ctx = RequestCtx::new(rt.clone(), listener);
        let peer = std::net::SocketAddr::new(client.ip, 0);
        match fetch_whole(
            &mut ctx,
            peer,
            &head,
            proxy,
            &validators,
            settings.max_object_size,
        )
        .await
        {
            Ok((resp, _)) if resp.status == 304 => {
                Stats::bump(&zone.store.stats.revalidated);
                zone.store_object(
                    &key,
                    &Arc::new(stored::refreshed(
                        &obj,
                        &resp.headers,
                        (request_time, zone.now()),
                        &settings.rules,
                    )),
                );
            }
            Ok((resp, body)) if resp.status < 500 => {
                let stage = Stage {
                    head: &head,
                    proxy,
                    cache: settings,
                    zone: &zone,
                    scheme: client.scheme,
                    own: b"",
                };
                store_response(stage, &key, &resp, body, request_time);
            }
            Ok(_) | Err(_) => {}
        }
    });
}

/// Releases coalesced followers when the leader ends, however it ends: a leader that published a
/// head and did not complete leaves them `Aborted`, one that did not get that far `Uncacheable`.
pub(super) struct LeaderGuard<'a> {
    pub(super) zone: &'a CacheZone,
    pub(super) hash: u64,
    pub(super) inflight: Arc<Inflight>,
    pub(super) phase: FetchPhase,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        self.zone.finish(self.hash, &self.inflight, self.phase);
    }
}
/// A plan that only adds `Cache-Status` (no storing).
pub(super) fn status_plan<'a>(fwd: Fwd, detail: Option<&'static str>, x_cache: bool) -> PlanFn<'a> {
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
pub(super) fn post_plan<'a>(
    head: &RequestHead,
    settings: &CacheRoute,
    zone: &Arc<CacheZone>,
) -> PlanFn<'a> {
    let zone = Some(zone.clone());
    let uri = target_uri(head);
    let authority = head.authority_bytes().unwrap_or_default();
    let (limit, x_cache) = (settings.max_object_size, settings.x_cache);
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
            reserved: 0,
        }
    })
}
