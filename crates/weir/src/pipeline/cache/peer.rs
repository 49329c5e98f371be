//! Peer fill for a sharded zone (`cluster/shard.rs`): a key owned by another member is asked
//! of that member, as the client asked it (the owner applies the same route, so the key and
//! the answer are the ones it would give its own client), marked with `Weir-Peer: NODE` so
//! the owner serves it from its own cache or origin and never forwards it again. When the owner
//! cannot be reached, the request goes on here, to the origin: a member that dies costs its
//! keys one origin fetch each, never an error.

use weir_cache::CacheKey;
use weir_http::Persistence;

use super::Stage;
use crate::cluster::shard::Owner;
use crate::error::Error;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::forward::{forward, Steer, UpstreamHooks};
use crate::pipeline::RequestCtx;
use std::sync::atomic::Ordering;

/// Sends the request to `key`'s owner when that is another member. `None`: this node serves it
/// (it owns the key, a peer asked, or the owner did not answer).
pub(super) async fn fill<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    key: &CacheKey,
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
    let mark = format!("Weir-Peer: {}\r\n", cluster.node);
    let steer = Steer {
        pin: Some((shard.upstream, server)),
        fallback: true,
        extra: mark.as_bytes(),
        ..Default::default()
    };
    let route = &rt.cfg.subrequests[shard.upstream];
    let mut hooks = Unanswered(false);
    let result = forward(d, ctx, stage.head, route, persistence, steer, &mut hooks).await;
    if hooks.0 {
        cluster.state.peer_fallbacks.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    cluster.state.peer_fills.fetch_add(1, Ordering::Relaxed);
    Some(result)
}

/// Whether the owner failed before a response head (the request then goes on here).
struct Unanswered(bool);

impl UpstreamHooks for Unanswered {
    fn on_failure(&mut self, _: u16) {
        self.0 = true;
    }
}
