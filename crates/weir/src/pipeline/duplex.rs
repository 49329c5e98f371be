//! Full-duplex gRPC calls (issue 55 §3): the request body is carried to the upstream while the
//! response is read, not before it. A bidirectional call that answers each message before the
//! client sends the next (grpc-go's ping-pong) waited forever when the upstream phase sent the
//! whole body first: the client's second message never came, the answer to its first sat
//! unread.
//!
//! Only where both sides carry the two directions at once: a gRPC call with a body, from a
//! client whose protocol reads the body without loss when a read is abandoned
//! ([`Downstream::full_duplex`]: HTTP/2), to an HTTP/2 upstream (its bridge,
//! `proxy/h2_upstream.rs`, relays both ways too). Every other request keeps the plain order.
//!
//! Each wait for the upstream becomes a race between its bytes and the client's next body
//! piece; a piece that wins is written to the upstream and the wait goes on. The client's
//! body wait (`timeouts.body`) restarts with each upstream read: a stream is cut only when
//! both sides are idle.

use std::time::Duration;

use bytes::BytesMut;
use tokio::time::Instant;
use weir_http::{BodyKind, RequestHead};

use super::downstream::Downstream;
use super::forward::Target;
use super::send::put_body_end;
use crate::error::Error;
use crate::proxy::exchange::RequestShape;
use crate::proxy::pool::UpstreamConn;
use crate::proxy::upstream::Upstream;

/// The request body still to carry during the exchange.
pub(super) struct Pump<'t> {
    target: &'t Target<'t>,
    shape: RequestShape<'t>,
    chunked: bool,
    open: bool,
    out: BytesMut,
}

impl<'t> Pump<'t> {
    /// A pump when `head` is a call to carry both ways at once (see the module doc).
    /// `grpc`: the request is a gRPC call (`grpc_refusal::is_grpc`).
    pub(super) fn for_call<D: Downstream>(
        d: &D,
        (up, grpc): (&Upstream, bool),
        target: &'t Target<'t>,
        shape: RequestShape<'t>,
    ) -> Option<Box<Pump<'t>>> {
        let head: &RequestHead = target.head;
        (grpc
            && up.h2
            && head.body != BodyKind::Empty
            && d.full_duplex()
            && !target.route.filters.has(crate::filters::Phases::TEE))
        // Boxed: a pointer in every proxied request's future, the rest only in a call's.
        .then(|| {
            Box::new(Pump {
                target,
                shape,
                chunked: head.body == BodyKind::Chunked,
                open: true,
                out: BytesMut::new(),
            })
        })
    }
}

/// Whether a request body is still being carried (else reads are plain ones).
#[inline]
pub(super) fn is_open(pump: &Option<Box<Pump<'_>>>) -> bool {
    pump.as_ref().is_some_and(|p| p.open)
}

/// One read of the upstream (as [`UpstreamConn::read_by`]), carrying the request body
/// meanwhile when `pump` is open. `Err` is the client's failure (its body, or its body wait:
/// `timeouts.body`).
///
/// The upstream's `phase` timeout (`response_header`, `idle`) runs only once the request is
/// whole, as for a request sent before its answer is read: while the client still sends, the
/// upstream's silence is no failure of its own (a client-streaming call's server answers at
/// the end), and a stream quiet both ways ends on the client's body wait, not against the
/// server (the review of issue 55: quiet bidirectional calls marked a healthy server down).
/// `hard` (the call's deadline, the upstream's `total`) always holds, also over a write the
/// upstream does not take.
pub(super) async fn read_by<D: Downstream>(
    d: &mut D,
    conn: &mut UpstreamConn,
    pump: &mut Option<Box<Pump<'_>>>,
    (phase, hard): (Duration, Option<Instant>),
    received: &mut u64,
) -> Result<Result<std::io::Result<usize>, ()>, Error> {
    loop {
        let by_phase = Instant::now() + phase;
        let Some(p) = pump.as_mut().filter(|p| p.open) else {
            return Ok(conn
                .read_by(hard.map_or(by_phase, |h| h.min(by_phase)))
                .await);
        };
        let far = hard.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        let piece = tokio::select! {
            biased;
            r = conn.read_by(far) => return Ok(r),
            piece = d.body_chunk() => piece?,
        };
        p.out.clear();
        match piece {
            Some(data) => {
                *received += data.len() as u64;
                p.out.reserve(data.len() + 16);
                if p.chunked {
                    weir_http::reply::put_chunk(&mut p.out, &data);
                } else {
                    p.out.extend_from_slice(&data);
                }
            }
            None => {
                if p.chunked {
                    put_body_end(d, &mut p.out, p.target, p.shape);
                }
                p.open = false;
            }
        }
        // An upstream that takes nothing more holds this write: bounded as its silence is.
        let send = crate::proxy::exchange::send(&mut conn.stream, &p.out);
        match tokio::time::timeout_at(hard.map_or(by_phase, |h| h.min(by_phase)), send).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                // The upstream's side of the pipe is gone: its answer (or its failure) is
                // what the read says next.
                tracing::debug!(error = %e, "request body not carried whole");
                p.open = false;
            }
            Err(_) => return Ok(Err(())),
        }
    }
}
