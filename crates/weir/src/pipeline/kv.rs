//! The `kv` action over HTTP: the request path is the key.
//!
//! * `GET` / `HEAD`: 200 with the stored Content-Type, ETag, Last-Modified; 304 for a matching
//!   `If-None-Match` / `If-Modified-Since`; 404 when absent or expired. Answered inline, as a
//!   cache hit is (no boxed future), once the store is loaded.
//! * `PUT` / `POST`: stores the body and its Content-Type, with a TTL from `X-TTL` (seconds) or
//!   the store's `default_ttl`; 201 when new, 204 when replaced, with the new ETag.
//!   `If-Match` / `If-None-Match: *` make it a compare-and-set: 412 on conflict. 413 over
//!   `max_value_size`, 507 when the store is full, 503 when its log is behind.
//! * `DELETE`: 204, or 404 when there was nothing (nuster answers 200 to every DELETE); 412 when
//!   `If-Match` does not hold.
//!
//! With a log, a change is answered once it is written (synced with `sync: true`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_http::conditional::{self, Precondition};
use weir_http::reply::{Base, Framing, Reply};
use weir_http::{BodyKind, Method, Persistence, RequestHead};

use super::downstream::Downstream;
use super::{send_body, send_error, send_route_head, RequestCtx};
use crate::error::Error;
use crate::kv::{bump, Cond, KvStore, Refused};
use crate::routes::Route;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A GET or HEAD answered now: `None` when it must wait (the store is still loading, or the
/// request has a body to drain).
pub(super) fn try_read<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &Route,
    kv: &KvStore,
    persistence: Persistence,
) -> Option<Persistence> {
    if !matches!(head.method, Method::Get | Method::Head)
        || !kv.is_ready()
        || kv.is_closed()
        || head.body != BodyKind::Empty
    {
        return None;
    }
    Some(read(d, ctx, head, route, kv, persistence))
}

fn read<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &Route,
    kv: &KvStore,
    persistence: Persistence,
) -> Persistence {
    bump(&kv.stats.gets);
    let Some(value) = kv.get(head.path(), now()) else {
        return send_error(d, ctx, head, 404, &[], persistence);
    };
    let rt = ctx.rt.clone();
    let mut filter_lines = BytesMut::new();
    if conditional::evaluate(head, &value.validators()) == Precondition::NotModified {
        bump(&kv.stats.not_modified);
        let mut reply = Reply::new(304, Framing::Given);
        reply.base = Base::Encoded(&value.head_304);
        reply.add_lines(&rt.cfg.server_line);
        return send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
    }
    bump(&kv.stats.hits);
    let mut reply = Reply::new(200, Framing::Given);
    reply.base = Base::Encoded(&value.head);
    reply.add_lines(&rt.cfg.server_line);
    let persistence = send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
    if head.method != Method::Head {
        send_body(d, ctx, &value.body, true);
    }
    persistence
}

/// Reads the body up to `max` bytes: `None` (and the rest drained or the connection closed)
/// beyond it.
async fn body_within<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    max: u64,
) -> Result<Option<Bytes>, Error> {
    d.cap_body(max);
    let mut body = BytesMut::new();
    while let Some(chunk) = d.body_chunk().await? {
        ctx.bytes_received += chunk.len() as u64;
        if (body.len() + chunk.len()) as u64 > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    // A value is kept: no spare capacity from the buffer's doubling kept with it.
    if body.capacity() > body.len() + body.len() / 8 + 64 {
        return Ok(Some(Bytes::copy_from_slice(&body)));
    }
    Ok(Some(body.freeze()))
}

/// Every other request: writes, deletes, and reads that had to wait for the store.
pub(super) async fn serve<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &Route,
    kv: &KvStore,
) -> Result<Persistence, Error> {
    let busy = |d: &mut D, ctx: &mut RequestCtx| {
        let retry = b"Retry-After: 1\r\n";
        Ok(send_error(d, ctx, head, 503, retry, Persistence::Close))
    };
    if kv.is_closed() || !kv.wait_ready(Duration::from_secs(5)).await {
        // Closed: this process is handing over to a new one (the client's retry reaches it).
        return busy(d, ctx);
    }
    let header = |name: &str| head.header(name);
    let cond = Cond {
        if_match: header("if-match"),
        if_none_match: header("if-none-match"),
    };
    match head.method {
        Method::Get | Method::Head => {
            let persistence = d.persistence(head);
            Ok(read(d, ctx, head, route, kv, persistence))
        }
        Method::Put | Method::Post => {
            let max = kv.settings.max_value_size;
            let declared = match head.body {
                BodyKind::Length(n) => n,
                _ => 0,
            };
            if declared > max {
                bump(&kv.stats.too_large);
                return Ok(send_error(d, ctx, head, 413, &[], Persistence::Close));
            }
            let Some(body) = body_within(d, ctx, max).await? else {
                bump(&kv.stats.too_large);
                return Ok(send_error(d, ctx, head, 413, &[], Persistence::Close));
            };
            let persistence = d.persistence(head);
            let content_type = head
                .header("content-type")
                .map_or(&b"application/octet-stream"[..], |v| v);
            let ttl = match header("x-ttl") {
                None => kv.settings.default_ttl,
                Some(v) => match std::str::from_utf8(v)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                {
                    Some(t) => t,
                    None => return Ok(send_error(d, ctx, head, 400, &[], persistence)),
                },
            };
            let path = head.path().to_vec();
            match kv.put(&path, body, content_type, ttl, cond, now()) {
                Ok((created, value, ack)) => {
                    if let Some(ack) = ack {
                        if !matches!(ack.await, Ok(true)) {
                            // Not on disk: undone, so no one reads what a restart would lose.
                            kv.undo_put(&path, &value);
                            return busy(d, ctx);
                        }
                        value.mark_logged();
                    }
                    bump(&kv.stats.puts);
                    let mut lines = BytesMut::new();
                    weir_http::response::put_header(&mut lines, b"ETag", &value.etag);
                    let status = if created { 201 } else { 204 };
                    Ok(empty(d, ctx, route, status, &lines, persistence))
                }
                Err(why) => Ok(refused(d, ctx, head, kv, why, persistence)),
            }
        }
        Method::Delete => {
            let persistence = d.persistence(head);
            match kv.delete(head.path(), cond, now()) {
                Ok(None) => Ok(send_error(d, ctx, head, 404, &[], persistence)),
                Ok(Some((deletion, ack))) => {
                    if let Some(ack) = ack {
                        if !matches!(ack.await, Ok(true)) {
                            // Not on disk: the value stays, as a restart would have it.
                            kv.undo_put(head.path(), &deletion);
                            return busy(d, ctx);
                        }
                        kv.finish_delete(head.path(), &deletion);
                    }
                    bump(&kv.stats.deletes);
                    Ok(empty(d, ctx, route, 204, b"", persistence))
                }
                Err(why) => Ok(refused(d, ctx, head, kv, why, persistence)),
            }
        }
        // The route's method list answered the others with 405 and Allow.
        _ => Ok(send_error(d, ctx, head, 405, b"", Persistence::Close)),
    }
}

fn refused<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    kv: &KvStore,
    why: Refused,
    persistence: Persistence,
) -> Persistence {
    let (status, counter) = match why {
        Refused::Precondition => (412, &kv.stats.conflicts),
        Refused::Full => (507, &kv.stats.full),
        Refused::Busy => (503, &kv.stats.full),
    };
    bump(counter);
    send_error(d, ctx, head, status, &[], persistence)
}

/// A 201 or 204 with `lines` and no body.
fn empty<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    route: &Route,
    status: u16,
    lines: &[u8],
    persistence: Persistence,
) -> Persistence {
    let rt = ctx.rt.clone();
    let framing = if status == 204 {
        Framing::Given
    } else {
        Framing::Length(0)
    };
    let mut reply = Reply::new(status, framing);
    reply.add_lines(&rt.cfg.server_line);
    reply.add_lines(lines);
    let mut filter_lines = BytesMut::new();
    let persistence = send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
    d.end_body();
    persistence
}
