//! Misses, top to bottom: nothing stored answers the request.
//!
//! ```text
//! only-if-cached ─→ 504 (answers.rs)
//! hit-for-miss (a recent answer was not storable) ─→ pass.rs
//! join the key's fetch ─ leader ─→ forward with the `Leader` hooks (hooks.rs): the store
//!                                  decision at head time, the body copied and teed to the
//!                                  followers as it is relayed; then stored, or marked
//!                                  hit-for-miss
//!                      ─ follower ─→ stream the leader's head and chunks as they come; an
//!                                    answer that is not shared (or late) → pass.rs
//! ```

use std::sync::Arc;

use bytes::BytesMut;
use weir_cache::object::exact;
use weir_cache::store::Stats;
use weir_cache::{CacheKey, Directives};
use weir_http::{Base, Framing, Method, Persistence, Reply};

use super::hooks::Leader;
use super::storing::store_response;
use super::{pass, Stage};
use crate::cache::status::Fwd;
use crate::cache::zone::{FetchPhase, Inflight, Role};
use crate::cache::{CacheStatus, CacheZone};
use crate::error::{Error, ErrorKind};
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::forward::{forward, Steer};
use crate::pipeline::{send_head_filtered, RequestCtx};

/// Nothing stored answers the request (`fwd`: a miss of the URI or of its Vary variant).
pub(super) async fn miss<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    (key, req_dirs): (&CacheKey, &Directives),
    fwd: Fwd,
    persistence: Persistence,
) -> Result<Persistence, Error> {
    let zone = stage.zone;
    Stats::bump(&zone.store.stats.misses);
    if req_dirs.only_if_cached {
        let answered = super::answers::cache_error(d, ctx, stage, "only-if-cached", persistence);
        return Ok(answered);
    }
    if zone.is_hit_for_miss(key.hash) {
        ctx.cache = CacheState::Bypass("hit-for-miss");
        return pass::forward(d, ctx, stage, fwd, Some("hit-for-miss"), persistence).await;
    }
    match zone.join(key.hash) {
        Role::Leader(inflight) => {
            let guard = LeaderGuard {
                zone,
                hash: key.hash,
                inflight,
                phase: FetchPhase::Uncacheable,
            };
            lead(d, ctx, stage, key, fwd, persistence, guard).await
        }
        Role::Follower(inflight) => {
            Stats::bump(&zone.store.stats.coalesced);
            match follow(d, ctx, stage, &inflight, fwd, persistence).await? {
                Some(persistence) => Ok(persistence),
                None => {
                    ctx.cache = CacheState::Miss;
                    let detail = Some("collapsed-uncacheable");
                    pass::forward(d, ctx, stage, fwd, detail, persistence).await
                }
            }
        }
    }
}

/// The coalescing leader: forward, relaying to the client while copying the body (and teeing
/// it to the followers), then store.
async fn lead<D: Downstream>(
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
    let mut hooks = Leader::new(stage, fwd, guard.inflight.clone());
    let steer = Steer {
        strip_conditionals: true,
        ..Default::default()
    };
    let persistence = forward(d, ctx, head, proxy, persistence, steer, &mut hooks).await?;
    if hooks.teed {
        // Every chunk reached the followers, stored or not.
        guard.phase = FetchPhase::Complete;
    }
    let stored = match (hooks.response.take(), hooks.body.take(), hooks.verdict) {
        (Some(resp), Some(body), Some(true)) => {
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
    let (head, proxy, settings) = (stage.head, stage.proxy, stage.cache);
    let mut changes = inflight.subscribe();
    let head_deadline = tokio::time::Instant::now() + settings.lock_timeout;
    let shared = loop {
        match inflight.snapshot(0) {
            (FetchPhase::Uncacheable, ..) => return Ok(None),
            // Ended without a head to share (a HEAD leads: its answer has no body to stream).
            (FetchPhase::Aborted | FetchPhase::Complete, None, _) => return Ok(None),
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
    crate::pipeline::filter_response(ctx, &proxy.filters, &mut reply, &mut filter_lines);
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
