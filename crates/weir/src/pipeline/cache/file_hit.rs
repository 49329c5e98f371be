//! Disk hits whose body leaves straight from the segment file (`sendfile`): a fresh stored
//! response for a plain-TCP HTTP/1.1 GET, whole or one range, its head written as any hit's.
//! Anything else (stale, a 416, HEAD, TLS, HTTP/2, a body filter) reads the object whole and
//! goes the usual way. Which bodies come from the file, and why the checksum still holds, is
//! `weir_cache::disk::file_hit`.

use bytes::BytesMut;
use weir_cache::disk::FileBody;
use weir_cache::policy::{evaluate, Freshness};
use weir_cache::store::Stats;
use weir_cache::{CachedObject, Directives};
use weir_http::conditional::{self, RangeSpec};
use weir_http::{Base, Framing, Persistence, Reply};

use super::write::{answered_precondition, put_age_and_status, stored_fields_206, ttl};
use super::Stage;
use crate::cache::CacheStatus;
use crate::error::Error;
use crate::pipeline::context::CacheState;
use crate::pipeline::downstream::Downstream;
use crate::pipeline::{send_head_filtered, RequestCtx};

/// Serves `obj` with its body from `body`. `None`: not fresh, or a range it does not answer
/// from the file; nothing was sent.
pub(super) async fn serve<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    stage: Stage<'_>,
    (obj, body): (&CachedObject, &FileBody),
    req_dirs: &Directives,
    persistence: Persistence,
) -> Option<Result<Persistence, Error>> {
    let zone = stage.zone;
    let age = obj.meta.clock.current_age(zone.now());
    match evaluate(&obj.meta.storable, age, obj.is_invalidated(), req_dirs) {
        Freshness::Fresh | Freshness::StaleAllowed => {}
        _ => return None,
    }
    let complete = obj.meta.status == 200;
    let range = if complete {
        conditional::range(stage.head, body.len, &obj.validators())
    } else {
        RangeSpec::Whole
    };
    if range == RangeSpec::Unsatisfiable {
        return None;
    }
    Stats::bump(&zone.store.stats.hits);
    ctx.cache = CacheState::Hit;
    let status = CacheStatus {
        hit: true,
        ttl: Some(ttl(obj, age)),
        ..Default::default()
    };
    let x_cache = stage.cache.x_cache;
    let render = |out: &mut BytesMut| put_age_and_status(out, age, &status, x_cache);
    if complete && answered_precondition(d, ctx, stage, obj, &render, persistence) {
        return Some(Ok(persistence));
    }
    let partial;
    let content_range;
    let (mut reply, from, len) = match range {
        RangeSpec::Bytes(a, b) => {
            partial = stored_fields_206(obj);
            content_range = format!("Content-Range: bytes {a}-{b}/{}\r\n", body.len);
            let mut reply = Reply::new(206, Framing::Length(b - a + 1));
            reply.base = Base::Encoded(&partial);
            reply.add_lines(content_range.as_bytes());
            (reply, a, b - a + 1)
        }
        _ => {
            let mut reply = Reply::new(obj.meta.status, Framing::Given);
            reply.base = Base::Encoded(&obj.head);
            (reply, 0, body.len)
        }
    };
    reply.date = false;
    reply.render = Some(&render);
    if !stage.own.is_empty() {
        reply.add_lines(stage.own);
    }
    let mut filter_lines = BytesMut::new();
    stage
        .proxy
        .filters
        .response(&mut reply, ctx.response_run(), &mut filter_lines);
    let persistence = send_head_filtered(d, ctx, &reply, persistence);
    ctx.bytes_sent += len;
    Some(
        d.send_file(&body.file, body.offset + from, len)
            .await
            .map(|()| persistence),
    )
}
