//! The request's way to the upstream (the upstream phase's step 3, `forward.rs`): the head
//! built by `proxy::exchange::build_request`, then the body decoded from the client and
//! re-framed as it arrives, in the connection's own write buffer; a chunked body ends with the
//! client's trailer section, filtered as the head's fields are.

use bytes::BytesMut;
use weir_http::reply::{put_chunk, put_last_chunk};
use weir_http::BodyKind;

use super::downstream::Downstream;
use super::forward::Target;
use crate::error::Error;
use crate::proxy::exchange::{build_request, RequestShape};
use crate::proxy::pool::UpstreamConn;

/// Request bytes gathered before a write to the upstream.
const SEND_CHUNK: usize = 64 * 1024;

/// Outcome of sending the request.
pub(super) enum Sent {
    Ok,
    /// The upstream failed while we wrote.
    Upstream(std::io::Error),
}

/// What a send counts and reads from the request's context: the body bytes received, the
/// filters' tee, and the trace context (its parent for this try).
pub(super) type Counted<'a> = (
    &'a mut u64,
    Option<&'a mut crate::filters::Run>,
    Option<(&'a crate::trace::context::TraceContext, [u8; 8])>,
);

/// Writes the request head and streams the body to the upstream, in the connection's own
/// write buffer (reused from one request to the next).
pub(super) async fn send_request<D: Downstream>(
    d: &mut D,
    conn: &mut UpstreamConn,
    target: &Target<'_>,
    server: usize,
    shape: RequestShape<'_>,
    counted: Counted<'_>,
) -> Result<Sent, Error> {
    let mut req = std::mem::take(&mut conn.out);
    req.clear();
    let sent = write_request(d, conn, &mut req, target, server, shape, counted).await;
    if req.capacity() <= SEND_CHUNK * 2 {
        conn.out = req;
    }
    sent
}

async fn write_request<D: Downstream>(
    d: &mut D,
    conn: &mut UpstreamConn,
    req: &mut BytesMut,
    target: &Target<'_>,
    server: usize,
    shape: RequestShape<'_>,
    (received, mut tee, traced): Counted<'_>,
) -> Result<Sent, Error> {
    let head = target.head;
    let filters = &target.route.filters;
    build_request(
        req,
        head,
        target.route,
        target.up,
        server,
        (&target.client, traced.as_ref().map(|(t, p)| (*t, p))),
        shape,
    );
    if head.body == BodyKind::Empty {
        if let Some(run) = tee.as_deref_mut() {
            filters.tee(run, req, true);
        }
        return Ok(
            match crate::proxy::exchange::send(&mut conn.stream, req).await {
                Ok(()) => Sent::Ok,
                Err(e) => Sent::Upstream(e),
            },
        );
    }
    let chunked = head.body == BodyKind::Chunked;
    // A body's writes are paced (`timeouts.send`), boxed: their timer kept out of every
    // proxied request's future (32 bytes more of it, `server/worker.rs`'s size test).
    while let Some(data) = d.body_chunk().await? {
        *received += data.len() as u64;
        if chunked {
            put_chunk(req, &data);
        } else {
            req.extend_from_slice(&data);
        }
        if req.len() >= SEND_CHUNK {
            if let Some(run) = tee.as_deref_mut() {
                filters.tee(run, req, false);
            }
            if let Err(e) = Box::pin(crate::proxy::exchange::send_paced(
                &mut conn.stream,
                req,
                target.up.send_timeout,
            ))
            .await
            {
                return Ok(Sent::Upstream(e));
            }
            req.clear();
        }
    }
    if chunked {
        put_body_end(d, req, target, shape);
    }
    if let Some(run) = tee {
        filters.tee(run, req, true);
    }
    Ok(
        match Box::pin(crate::proxy::exchange::send_paced(
            &mut conn.stream,
            req,
            target.up.send_timeout,
        ))
        .await
        {
            Ok(()) => Sent::Ok,
            Err(e) => Sent::Upstream(e),
        },
    )
}

/// Ends a chunked request body in `req`: the client's trailer section (gRPC-style metadata),
/// else the plain last chunk. Fields a trailer section must not carry are dropped (RFC 9110
/// §6.5.1).
pub(super) fn put_body_end<D: Downstream>(
    d: &mut D,
    req: &mut BytesMut,
    target: &Target<'_>,
    shape: RequestShape<'_>,
) {
    let trailers = relayed_trailers(d, target, shape);
    if trailers.is_empty() {
        put_last_chunk(req);
    } else {
        req.extend_from_slice(b"0\r\n");
        for h in &trailers {
            weir_http::response::put_header(req, &h.name, &h.value);
        }
        req.extend_from_slice(b"\r\n");
    }
}

/// The client's trailer section as the upstream may see it: fields a trailer section must not
/// carry dropped (RFC 9110 §6.5.1), and those the route would not relay in the head.
pub(super) fn relayed_trailers<D: Downstream>(
    d: &mut D,
    target: &Target<'_>,
    shape: RequestShape<'_>,
) -> Vec<weir_http::Header> {
    let filters = &target.route.filters;
    let mut trailers = d.request_trailers();
    // Nor, in a trailer, a field the route would not relay in the head, under any alias: an
    // application that merges trailers into its fields would read a client's
    // `X-User-Id: admin` beside the auth service's (the attack review of issue 33).
    let request_id = shape.request_id.map(|(id, _, _)| id.as_bytes());
    trailers.retain(|h| {
        !weir_http::hop::not_in_trailers(&h.name)
            && !filters.drops_upstream(&target.client, &h.name)
            && !request_id.is_some_and(|id| crate::filters::aliases::folds_to(&h.name, id))
            && !h
                .name
                .eq_ignore_ascii_case(crate::cluster::PEER_HEADER.as_bytes())
            && memchr::memchr(b'_', &h.name).is_none()
            // With `tracing`, the trace context is weir's, in the head (review of issue 55).
            && (!target.traced || !crate::trace::context::is_trace_field(&h.name))
    });
    trailers
}
