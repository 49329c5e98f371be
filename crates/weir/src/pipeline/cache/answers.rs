//! The cache's own answers: a PURGE of one URL, and the 504 of `only-if-cached` when nothing
//! usable is stored.

use bytes::{Bytes, BytesMut};
use weir_cache::PurgeSelector;
use weir_http::Persistence;

use super::Stage;
use crate::cache::CacheStatus;
use crate::error::{Error, ErrorKind};
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::RequestCtx;

/// A PURGE of the request's URL: from loopback or `purge_from` only; 200 with the count,
/// 404 when nothing was stored, 503 when the purge could not be made durable.
pub(super) async fn purge<D: Downstream>(
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
    let on_disk = stage.zone.lower_contains(&get_key);
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
