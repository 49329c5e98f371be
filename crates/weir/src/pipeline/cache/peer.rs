//! Peer fill for a sharded zone (`cluster/shard.rs`): a key owned by another member is asked
//! of that member, as the client asked it (the owner applies the same route, so the key and
//! the answer are the ones it would give its own client), marked with `Weir-Peer: NODE` so
//! the owner serves it from its own cache or origin and never forwards it again. When the owner
//! cannot be reached, the request goes on here, to the origin: a member that dies costs its
//! keys one origin fetch each, never an error.
//!
//! The owner answers a member raw, as its cache holds the response (its route's response
//! filters do not run for a peer fill: `pipeline::filter_response`); the member applies its own
//! route's filters to the answer, once, for its own client.
//!
//! **Hot copies** (`cluster.local_hot`): a zone may keep a small store of what owners answered
//! (storable 200s of GETs that the route's before-store filters let through, at most 1/16 of the
//! store each). It is an S3-FIFO store like any zone's, so a key asked once passes through its
//! small queue and only keys asked again stay: a hot key is answered here, without the hop,
//! while it is fresh and younger than `cluster.local_hot_ttl` (2 s by default). Admin purges,
//! sent to every member, reach the copies at once, as do purges and invalidations made on this
//! node; one made at the owner (a `PURGE` request, a POST's invalidation) reaches them when
//! they expire, within `local_hot_ttl`. The owner's `Cache-Status` is not kept. Compressing
//! routes keep none (the owner's answer may be a coding's variant).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use weir_cache::policy::{evaluate, storable, Freshness, Storable};
use weir_cache::{stored, CacheKey, Directives, Lookup, MemoryStore};
use weir_http::{BodyKind, Header, Method, Persistence, ResponseHead};

use super::Stage;
use crate::cluster::shard::Owner;
use crate::error::Error;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::forward::{forward, Steer, UpstreamHooks};
use crate::pipeline::RequestCtx;

/// Sends the request to `key`'s owner when that is another member (or answers it from a hot
/// copy). `None`: this node serves it (it owns the key, a peer asked, or the owner did not
/// answer).
pub(super) async fn fill<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    (key, req_dirs): (&CacheKey, &Directives),
    persistence: Persistence,
) -> Option<Result<Persistence, Error>> {
    let rt = ctx.rt.clone();
    let shard = rt.cfg.zone_shards.get(stage.cache.zone)?.as_ref()?;
    let cluster = rt.cfg.cluster.as_ref()?;
    if ctx.peer_fill() {
        return None;
    }
    let up = &rt.cfg.upstreams[shard.upstream];
    let now = crate::proxy::upstream::now_ms();
    let Owner::Peer(server) = shard.owner(&key.text, |s| up.is_up(s, now)) else {
        return None;
    };
    let hot = stage.zone.hot().filter(|_| !stage.encodes());
    let value_of = |name: &str| {
        weir_cache::vary::request_value(
            stage.head.headers(),
            name,
            stage.cache.normalize_accept_encoding,
        )
    };
    if let Some(hot) = &hot {
        if let Lookup::Found(obj) = hot.lookup(key, value_of) {
            let now = stage.zone.now();
            let age = obj.meta.clock.current_age(now);
            let kept_for = now.saturating_sub(obj.meta.clock.response_time);
            if kept_for < hot_ttl(ctx, stage)
                && matches!(
                    evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs),
                    Freshness::Fresh | Freshness::StaleAllowed
                )
            {
                cluster.state.local_hot_hits.fetch_add(1, Ordering::Relaxed);
                super::hit::serve_hit(d, ctx, stage, &obj, age, persistence);
                return Some(Ok(persistence));
            }
        }
    }
    let mark = format!("Weir-Peer: {}\r\n", cluster.node);
    // The owner answers raw (no response filters); this route's filters make the answer.
    let steer = Steer {
        pin: Some((shard.upstream, server)),
        fallback: true,
        extra: mark.as_bytes(),
        respond: Some(&stage.proxy.filters),
        ..Default::default()
    };
    let route = &rt.cfg.subrequests[shard.upstream];
    let request_time = stage.zone.now();
    let keep = hot
        .as_ref()
        .filter(|_| stage.head.method == Method::Get)
        .map(|h| (h.limit() / 16) as usize);
    let mut hooks = Fill {
        stage,
        keep,
        kept: None,
        failed: false,
    };
    let result = forward(d, ctx, stage.head, route, persistence, steer, &mut hooks).await;
    if hooks.failed {
        cluster.state.peer_fallbacks.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    cluster.state.peer_fills.fetch_add(1, Ordering::Relaxed);
    if let (Some(hot), Some(kept)) = (&hot, hooks.kept) {
        keep_copy(stage, hot, key, kept, request_time);
    }
    Some(result)
}

/// How long a hot copy is used after it was fetched (`cluster.local_hot_ttl`): the bound on how
/// long an invalidation or a `PURGE` request made at the owner takes to reach the copies of the
/// other members (admin purges reach every member at once).
fn hot_ttl(ctx: &RequestCtx, stage: Stage<'_>) -> u64 {
    ctx.rt
        .cfg
        .zone_shards
        .get(stage.cache.zone)
        .and_then(Option::as_ref)
        .map_or(0, |s| s.hot_ttl)
}

/// The owner's answer, kept for the hot copies.
struct Kept {
    resp: Option<ResponseHead>,
    storable: Storable,
    body: BytesMut,
}

/// The hooks of a peer fill: whether the owner failed before a head (the request then goes
/// on here), and the copy of a storable answer for the hot copies.
struct Fill<'s> {
    stage: Stage<'s>,
    /// Keep answers of at most this many bytes (`None`: keep nothing).
    keep: Option<usize>,
    kept: Option<Kept>,
    failed: bool,
}

impl UpstreamHooks for Fill<'_> {
    fn on_head(&mut self, resp: &ResponseHead, _: &mut BytesMut) {
        let Some(limit) = self.keep else { return };
        let (head, settings) = (self.stage.head, self.stage.cache);
        let length = match resp.body {
            BodyKind::Length(n) => n,
            _ => return,
        };
        if resp.status != 200 || length > limit as u64 {
            return;
        }
        let Ok(s) = storable(
            &head.method,
            head.headers(),
            resp.status,
            resp.headers(),
            &settings.rules,
            self.stage.zone.now(),
        ) else {
            return;
        };
        // What the route keeps out of the store (`no_store` and kin) stays out of the copies.
        if !self.stage.proxy.filters.before_store(resp) {
            return;
        }
        self.kept = Some(Kept {
            resp: None,
            storable: s,
            body: BytesMut::with_capacity(length as usize),
        });
    }

    fn on_body(&mut self, chunk: &Bytes) {
        if let Some(k) = &mut self.kept {
            k.body.extend_from_slice(chunk);
        }
    }

    fn on_end(&mut self, resp: &ResponseHead) {
        if let Some(k) = &mut self.kept {
            k.resp = Some(resp.clone());
        }
    }

    fn on_failure(&mut self, _: u16) {
        self.failed = true;
        self.kept = None;
    }
}

/// Stores the owner's whole answer among the hot copies, without the owner's own cache fields.
fn keep_copy(stage: Stage<'_>, hot: &MemoryStore, key: &CacheKey, kept: Kept, request_time: u64) {
    let Some(resp) = kept.resp else { return };
    let ours = |h: &Header| {
        h.name.eq_ignore_ascii_case(b"cache-status") || h.name.eq_ignore_ascii_case(b"x-cache")
    };
    let resp = resp.with_headers(
        resp.headers()
            .iter()
            .filter(|h| !ours(h))
            .cloned()
            .collect(),
    );
    let obj = stored::build(
        stage.head.headers(),
        &resp,
        weir_cache::object::exact(kept.body),
        (request_time, stage.zone.now()),
        stage.cache.normalize_accept_encoding,
        Some(kept.storable),
    );
    hot.insert(key, Arc::new(obj));
}
