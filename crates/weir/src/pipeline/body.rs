//! Responses through the route's filters on their way out: the head's fields
//! ([`filter_response`]), then the body as it is, or through the route's body filters when one
//! claimed the response (`filters::Phases::BODY`); and static files streamed as the client's
//! window allows.

use bytes::{Bytes, BytesMut};

use weir_http::Reply;

use super::downstream::Downstream;
use super::RequestCtx;
use crate::actions::static_files::INLINE_BODY;
use crate::error::{Error, ErrorKind, OrErr};

/// Runs `filters`' response phase on `reply`, unless the request is a member's peer fill: the
/// owner of a sharded key answers those raw, and the member that asked applies its own route's
/// filters to the answer, once (`cache/peer.rs`: a hot copy kept from it is then as raw as a
/// stored object).
pub(crate) fn filter_response<'a>(
    ctx: &mut RequestCtx,
    filters: &'a crate::filters::Chain,
    reply: &mut Reply<'a>,
    lines: &'a mut BytesMut,
) {
    if !ctx.peer_fill() {
        filters.response(reply, ctx.response_run(), lines);
    }
}

/// Queues body bytes of the response (`end`: the last of them), through the route's body
/// filters when one claimed the response in its response phase; else as they are. A claimed
/// response's length is unknown (chunked): its end is written here at `end`. Streams that end
/// their bodies themselves (the relay, coalesced followers) pass `false` and call
/// [`finish_body`] before their end.
#[inline(always)]
pub(crate) fn send_body<D: Downstream>(d: &mut D, ctx: &mut RequestCtx, data: &Bytes, end: bool) {
    if ctx.extra.as_ref().is_some_and(|e| e.filters.transforming) {
        send_transformed(d, ctx, data, end);
        if end {
            d.end_body();
        }
        return;
    }
    ctx.bytes_sent += data.len() as u64;
    d.send_data(data);
}

/// [`send_body`] through the body filters.
#[cold]
fn send_transformed<D: Downstream>(d: &mut D, ctx: &mut RequestCtx, data: &Bytes, end: bool) {
    let rt = ctx.rt.clone();
    let Some(route) = ctx
        .route
        .and_then(|r| rt.cfg.listeners[ctx.listener].routes.get(r as usize))
    else {
        return;
    };
    let Some(run) = ctx.run_if_any() else { return };
    let out = route.filters().body(run, data, end);
    ctx.bytes_sent += out.len() as u64;
    if !out.is_empty() {
        d.send_data(&out);
    }
}

/// Ends a streamed body: what body filters held back goes out.
#[inline(always)]
pub(crate) fn finish_body<D: Downstream>(d: &mut D, ctx: &mut RequestCtx) {
    if ctx.extra.as_ref().is_some_and(|e| e.filters.transforming) {
        send_transformed(d, ctx, &Bytes::new(), true);
    }
}

/// Streams a file range after its head.
pub(super) async fn stream_file<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    mut body: crate::actions::static_files::FileBody,
) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    while body.len > 0 {
        // Read only what the client can take now (an HTTP/2 stream's window): a stalled
        // stream holds no buffer, and while it waits, no open file either.
        let want = body.len.min(INLINE_BODY) as usize;
        let step = match d.room_now(want) {
            0 => {
                body.file = None;
                d.room(want).await?
            }
            n => n,
        };
        let offset = body.offset;
        let mut data = BytesMut::zeroed(step);
        let n = body
            .open()
            .or_err(ErrorKind::File, "read file")?
            .read_at(&mut data, offset)
            .or_err(ErrorKind::File, "read file")?;
        if n == 0 {
            // Truncated under us after the head promised more: abort the connection.
            return Err(Error::with(
                ErrorKind::ClientIo,
                "file shrank while sending",
            ));
        }
        data.truncate(n);
        body.offset += n as u64;
        body.len -= n as u64;
        send_body(d, ctx, &data.freeze(), body.len == 0);
        d.flush().await?;
    }
    Ok(())
}
