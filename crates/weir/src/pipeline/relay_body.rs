//! The upstream's response body to the client (the upstream phase's last step,
//! `forward.rs`): decoded and re-framed piece by piece, the hooks (the cache) seeing each. The
//! waits are the upstream's `idle`, bounded by the total and the call's deadline; an upstream
//! that dies mid-body aborts the client's connection. (HTTP/2 upstreams: `relay_h2.rs`.)

use tokio::time::Instant;
use weir_http::{BodyKind, RequestHead, ResponseHead};

use super::downstream::Downstream;
use super::failure::aborted;
use super::hooks::UpstreamHooks;
use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::phase_timeout;
use crate::proxy::pool::UpstreamConn;
use crate::proxy::upstream::Upstream;

/// Streams the response body; returns whether the upstream connection can be reused: not
/// after a HEAD unless the upstream says `keepalive.reuse_after_head` (an origin that sends a
/// body anyway, or sends it late, would have those bytes read as the next request's response:
/// issue 33 §3; a HEAD-only run costs 67 µs of CPU per request against 18 µs reused), nor with
/// bytes left over past the response's end (a Content-Length the origin overran). What remains
/// is an overrun that arrives after this check and before the next request: the pool's check
/// at reuse (`proxy/pool.rs`).
pub(super) async fn relay_body<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    conn: &mut UpstreamConn,
    resp: &ResponseHead,
    (up, server, head): (&Upstream, usize, &RequestHead),
    (total_deadline, call_deadline): (Option<Instant>, Option<Instant>),
    (grpc, hooks): (bool, &mut dyn UpstreamHooks),
) -> Result<bool, Error> {
    let aborted = |ctx: &mut RequestCtx, why: &str| aborted(ctx, (up, server, head), why);
    let idle = up.idle_read_timeout;
    let mut decoder = weir_http::BodyDecoder::new(resp.body);
    loop {
        let event = decoder
            .decode(&mut conn.buf)
            .map_err(|e| aborted(ctx, &format!("bad response body: {e}")))?;
        match event {
            weir_http::BodyEvent::Data(data) => {
                hooks.on_body(&data);
                super::send_body(d, ctx, &data, false);
                if d.should_flush() {
                    d.flush().await?;
                }
            }
            weir_http::BodyEvent::Done(trailers) => {
                if grpc && !trailers.is_empty() {
                    super::grpc_refusal::note_status(ctx, &trailers);
                }
                super::finish_body(d, ctx);
                d.send_trailers(&trailers);
                d.end_body();
                return Ok(resp.keep_alive
                    && resp.body != BodyKind::CloseDelimited
                    && (head.method != weir_http::Method::Head || up.reuse_after_head)
                    && conn.buf.is_empty());
            }
            weir_http::BodyEvent::NeedMore => {
                d.flush().await?;
                let deadline =
                    Instant::now() + phase_timeout(idle, call_deadline.or(total_deadline));
                let read = conn.read_by(deadline).await;
                let n = match read {
                    Ok(Ok(n)) => n,
                    Ok(Err(e)) => return Err(aborted(ctx, &format!("read failed mid-body: {e}"))),
                    // The client's deadline, not the server's failure: the stream is cut, the
                    // server not marked.
                    Err(_) if call_deadline.is_some_and(|c| Instant::now() >= c) => {
                        ctx.extra.get_or_insert_with(Default::default).client_ended = true;
                        return Err(Error::with(
                            ErrorKind::UpstreamAborted,
                            "the call's grpc-timeout passed mid-response",
                        ));
                    }
                    Err(_) => return Err(aborted(ctx, "idle timeout mid-body")),
                };
                if n == 0 {
                    if decoder.on_eof().is_ok() {
                        super::finish_body(d, ctx);
                        d.end_body();
                        return Ok(false);
                    }
                    return Err(aborted(ctx, "upstream closed mid-body"));
                }
            }
        }
    }
}
