//! The upstream phase for HTTP/2 upstreams (`protocol: h2`), without a bridge (issue 55 §2):
//! the request goes out as a stream of weir's own client (`proxy/h2_client/`) and its frames
//! come back as the client's response, in the request's own task.
//!
//! Why apart from `forward.rs`: that phase speaks HTTP/1.1 bytes over a connection of its own
//! (pooled, probed, framed by `Content-Length` or chunks); here a request is a stream among
//! others on a shared connection, its body DATA frames under the server's windows, its answer
//! a head, DATA and trailers. Until 2026-11-30 it went through an in-memory HTTP/1.1 pipe to
//! a task of its own and the `h2` crate: an HTTP/1.1 encode and parse of each message on each
//! side of the pipe, a task and a pipe per request.
//!
//! What the server sees is what any upstream would (`proxy/h2_upstream.rs` reads the request
//! `build_request` writes), and the answer's head is written as weir's HTTP/1.1 and parsed
//! (`relay_h2.rs`), as FastCGI's is, so the cache, the filters and the logs see the same head
//! as from any upstream. Bodies go as they come: no re-framing.
//!
//! Tries: a server picked as `forward.rs` picks, the same retries (`retries.on`, the budget,
//! backoff) on another server; a stream the server did not process (GOAWAY above it,
//! REFUSED_STREAM) goes again to the same server (after GOAWAY, on another connection), any
//! method, at most twice, while
//! what was sent of its body is held (its first 64 KiB: RFC 9113 §8.7). A gRPC call from an
//! HTTP/2 client carries its body while the answer comes (`relay_h2.rs`'s `next`), bounded by
//! the route's `stream_idle` rather than the plain HTTP timeouts, and by its `grpc-timeout`.

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;
use weir_http::{BodyKind, Method, Persistence};

use super::downstream::Downstream;
use super::forward::{fail, Target};
use super::hooks::{Steer, UpstreamHooks};
use super::relay_h2::{Call, Got};
use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::{build_request, phase_timeout, record_failure, RequestShape};
use crate::proxy::h2_client::{ClientStream, Failure, SendError};
use crate::proxy::h2_upstream;
use crate::proxy::per_worker::WorkerUpstream;

/// What is kept of a request body for sending it again.
const REPLAY: usize = 64 * 1024;

/// Most times a request the server did not process is sent again.
const RESENDS: u32 = 2;

static RETRY_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// The request body on its way out, across tries.
pub(super) struct Outgoing {
    /// The client's body is still to be read (else `ended` says how it ended).
    pub(super) open: bool,
    /// What was sent so far, while under [`REPLAY`]; `None` past it (no resend then).
    pub(super) sent: Option<Vec<u8>>,
    /// The client's trailers, once its body ended.
    pub(super) trailers: Vec<weir_http::Header>,
    /// A gRPC-Web text body: decoded from base64 on its way.
    pub(super) text: Option<crate::proxy::grpc_web::TextDecoder>,
    /// The body is carried while the answer is read (a gRPC call from an HTTP/2 client).
    pub(super) duplex: bool,
    /// A duplex piece not yet sent whole (the server's window was shut): the rest of it.
    pub(super) pending: Option<Bytes>,
    /// The request's end (END_STREAM or trailers) went on this try.
    pub(super) finished: bool,
    /// A mirror's copy has the head: a later try adds nothing (attack review: a retried or
    /// resent request's copy had two heads, and its body's tail was a request of its own
    /// at the shadow).
    pub(super) teed: bool,
}

/// Proxies `target.head` to the HTTP/2 upstream `target.up`.
pub(super) async fn forward<D: Downstream>(
    (d, ctx): (&mut D, &mut RequestCtx),
    (target, per_worker): (&Target<'_>, &WorkerUpstream),
    shape: RequestShape<'_>,
    persistence: Persistence,
    (steer, hooks): (Steer<'_>, &mut dyn UpstreamHooks),
) -> Result<Persistence, Error> {
    let (up, head, route) = (target.up, target.head, target.route);
    let has_body = head.body != BodyKind::Empty;
    let grpc = super::grpc_refusal::is_grpc(head);
    let idempotent = matches!(
        head.method,
        Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
    );
    let replayable = idempotent && !has_body;
    let total_deadline = up.total_timeout.map(|t| Instant::now() + t);
    let call_deadline = match grpc {
        true => super::grpc_timeout::deadline(head, total_deadline),
        false => None,
    };
    let duplex = grpc && has_body && d.full_duplex();
    if duplex {
        // While the call streams both ways, the client's body wait is the route's too.
        d.body_timeout(route.stream_idle);
    }
    if shape.upgrade {
        // A WebSocket over HTTP/2 is extended CONNECT (RFC 8441), not built: refused, never
        // sent on as a plain request the client would take for the upgrade's answer.
        let e = Error::with(
            ErrorKind::BadResponse,
            "an upgrade (WebSocket) to an HTTP/2 upstream: not supported",
        );
        return fail(
            d,
            ctx,
            target,
            None,
            e,
            (persistence, has_body),
            (steer, hooks),
        );
    }
    let mut out = Outgoing {
        open: has_body,
        sent: Some(Vec::new()),
        trailers: Vec::new(),
        text: None,
        duplex,
        pending: None,
        finished: false,
        teed: false,
    };
    let call = Call {
        target,
        shape,
        grpc,
        total_deadline,
        call_deadline,
    };
    let mut tried = [usize::MAX; 16];
    let mut ntried = 0usize;
    let mut retry = Retry {
        up,
        per_worker,
        count: 0,
        slot: None,
        replayable,
    };
    let mut resends = 0u32;
    let mut again_on: Option<usize> = None;
    let preferred = match steer.pin {
        Some((_, server)) => Some(server),
        None => route
            .filters
            .prefer(ctx.run_if_any().map(|r| &*r), target.upstream),
    };
    let mut built = BytesMut::with_capacity(1024);
    loop {
        let now = crate::clock::Mono::now();
        let sticky = preferred.filter(|s| {
            !tried[..ntried].contains(s) && up.is_up(*s, crate::proxy::upstream::ms_at(now))
        });
        let server = match again_on.take().or(sticky) {
            Some(s) => s,
            None => match per_worker.pick(up, target.client.ip, head, &tried[..ntried], now) {
                Some(s) => s,
                None => {
                    let e = Error::new(ErrorKind::NoServer);
                    return fail(
                        d,
                        ctx,
                        target,
                        None,
                        e,
                        (persistence, has_body),
                        (steer, hooks),
                    );
                }
            },
        };
        if !tried[..ntried].contains(&server) && ntried < tried.len() {
            tried[ntried] = server;
            ntried += 1;
        }
        if target.recording {
            super::trace_spans::try_begins(ctx, (target.upstream, server));
        }
        let rt = ctx.rt.clone();
        let gauge = rt
            .cfg
            .metrics
            .then(|| &rt.server_metrics[target.upstream][server].in_flight);
        let _active = per_worker.track_active(server, gauge);
        let tried_once = match attempt(
            (&mut *d, &mut *ctx, &mut *hooks),
            (&call, per_worker, server),
            (steer, persistence, &mut retry),
            (&mut out, &mut built),
        )
        .await
        {
            Ok(done) => return done,
            Err(t) => t,
        };
        let e = match tried_once {
            Tried::Unprocessed if resends < RESENDS && out.sent.is_some() => {
                resends += 1;
                again_on = Some(server);
                continue;
            }
            Tried::Unprocessed => Error::with(
                ErrorKind::UpstreamReset,
                "the server did not process the stream, and its body is past what is kept",
            ),
            Tried::Failed(e) => e,
            // The client's own failure (its body, its body wait): not the server's.
            Tried::Client(e) => return Err(e),
            Tried::Status(status) => {
                // A status `retries.on` names (the retry was taken): another server.
                if let Some(suppressed) = RETRY_LOG.admit() {
                    let (request, id) =
                        super::failure::described(ctx, head, Some(target.client.ip));
                    tracing::warn!(upstream = %up.name, server = %up.servers[server].name, status, request = %request, request_id = %id, suppressed, "retrying on another server");
                }
                backoff(up, retry.count).await;
                continue;
            }
        };
        if target.recording {
            super::trace_spans::try_failed(ctx, &e);
        }
        if !matches!(
            e.kind,
            ErrorKind::CallDeadline | ErrorKind::StreamIdle | ErrorKind::Overflow
        ) {
            record_failure(up, server, &e);
        }
        // A body already read cannot go to another server.
        let body_free = !has_body || (out.open && out.sent.as_ref().is_some_and(Vec::is_empty));
        if retry.take(e.retryable(&up.retry.on, replayable) && body_free) {
            backoff(up, retry.count).await;
            continue;
        }
        return fail(
            d,
            ctx,
            target,
            Some(server),
            e,
            (persistence, has_body),
            (steer, hooks),
        );
    }
}

/// How a try ended when it did not answer the client.
enum Tried {
    /// The server did not process the stream: it may go again on another connection.
    Unprocessed,
    /// A failure before the answer's head: the caller retries or answers it.
    Failed(Error),
    /// The client failed (its body was bad or too slow).
    Client(Error),
    /// An answer whose status `retries.on` names, for an idempotent request without a body.
    Status(u16),
}

/// The tries after the first: `retries.attempts`, the worker's budget, the upstream's cap on
/// retries in flight (its slot held until the next retry or the end), as `forward.rs` counts.
pub(super) struct Retry<'a> {
    up: &'a crate::proxy::upstream::Upstream,
    per_worker: &'a WorkerUpstream,
    pub(super) count: u32,
    slot: Option<crate::proxy::limits::Slot>,
    /// Idempotent and without a body: a status `retries.on` names may go elsewhere.
    pub(super) replayable: bool,
}

impl Retry<'_> {
    /// One more try when `allowed` and the attempts, the budget and the cap allow it.
    pub(super) fn take(&mut self, allowed: bool) -> bool {
        let go = allowed
            && self.count < self.up.retry.attempts
            && self.per_worker.take_budget()
            && match self.up.limits.take(crate::proxy::limits::Cap::Retries) {
                Ok(slot) => {
                    self.slot = Some(slot);
                    true
                }
                Err(_) => false,
            };
        self.count += u32::from(go);
        go
    }
}

/// One try on `server`: the request out, the answer's head, and then (the client answered)
/// its body. `Ok` once the client was answered (or its connection must end).
async fn attempt<D: Downstream>(
    (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
    (call, per_worker, server): (&Call<'_>, &WorkerUpstream, usize),
    (steer, persistence, retry): (Steer<'_>, Persistence, &mut Retry<'_>),
    (out, built): (&mut Outgoing, &mut BytesMut),
) -> Result<Result<Persistence, Error>, Tried> {
    let (target, shape) = (call.target, call.shape);
    let (up, head) = (target.up, target.head);
    let parent = match target.traced {
        true => super::trace_spans::upstream_parent(ctx),
        false => None,
    };
    built.clear();
    build_request(
        built,
        head,
        target.route,
        up,
        server,
        (&target.client, ctx.trace.as_ref().zip(parent.as_ref())),
        shape,
    );
    let tee = target.route.filters.has(crate::filters::Phases::TEE);
    if tee && !out.teed {
        out.teed = true;
        if let Some(run) = ctx.extra.as_mut().map(|e| &mut e.filters) {
            target
                .route
                .filters
                .tee(run, built, head.body == BodyKind::Empty);
        }
    }
    let Some(upstream_head) = h2_upstream::read_back(built) else {
        let e = Error::with(
            ErrorKind::BadResponse,
            "a request head weir cannot read back",
        );
        return Err(Tried::Failed(e));
    };
    let authority = up.servers[server].authority();
    let mut web_type = Vec::new();
    let request = h2_upstream::convert(&upstream_head, up, server, &authority, &mut web_type);
    if request.web == Some(crate::proxy::grpc_web::Mode::Text) && out.text.is_none() {
        out.text = Some(Default::default());
    }
    let conn = match crate::proxy::h2_client::ready(&per_worker.pool, up, server).await {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(Tried::Failed(Error::new(ErrorKind::ConnectTimeout)))
        }
        // weir's own limit (every connection full within `timeouts.connect`): 503, the server
        // not marked.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            return Err(Tried::Failed(Error::with(
                ErrorKind::Overflow,
                crate::proxy::h2_client::FULL,
            )))
        }
        Err(e) => return Err(Tried::Failed(Error::with(ErrorKind::Connect, e))),
    };
    let empty = head.body == BodyKind::Empty;
    let stream = ClientStream::open(
        conn,
        (
            upstream_head.method.as_str().as_bytes(),
            request.scheme,
            request.authority,
            &upstream_head.target,
        ),
        request.fields.iter().copied(),
        empty,
    );
    let web = request.web;
    drop(request);
    if !empty && !out.duplex {
        send_body(d, ctx, (&stream, call), out, tee).await?;
    } else if !empty {
        // Carried while the answer is read; what an earlier try sent goes first.
        resend(&stream, out, up.send_timeout).await?;
    }
    let answered = super::relay_h2::answer(
        (d, ctx, hooks),
        (call, server, &stream, web),
        out,
        (steer, persistence, retry),
    )
    .await;
    match answered {
        Got::Relayed(r) => Ok(r),
        Got::Unprocessed => Err(Tried::Unprocessed),
        Got::Failed(e) => Err(Tried::Failed(e)),
        Got::Client(e) => Err(Tried::Client(e)),
        Got::Status(s) => Err(Tried::Status(s)),
    }
}

/// What an earlier try sent of the body, on `stream`, and its end when it ended.
async fn resend(
    stream: &ClientStream,
    out: &mut Outgoing,
    pause: std::time::Duration,
) -> Result<(), Tried> {
    // A piece half sent on the try before is in `sent` whole.
    out.pending = None;
    out.finished = false;
    if let Some(earlier) = out.sent.as_deref().filter(|b| !b.is_empty()) {
        stream
            .send_data(earlier, false, pause)
            .await
            .map_err(sent_error)?;
    }
    if !out.open {
        end(stream, out, pause).await.map_err(sent_error)?;
        out.finished = true;
    }
    Ok(())
}

/// The whole request body to `stream` before the answer is read (a client whose protocol
/// cannot carry both ways at once, or no gRPC call): first what an earlier try sent, then the
/// rest from the client, then its trailers or its end.
async fn send_body<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    (stream, call): (&ClientStream, &Call<'_>),
    out: &mut Outgoing,
    tee: bool,
) -> Result<(), Tried> {
    let pause = call.target.up.send_timeout;
    resend(stream, out, pause).await?;
    while out.open {
        let piece = match d.body_chunk().await {
            Ok(p) => p,
            // The client's own failure (a bad body, its body timeout): answered as such.
            Err(e) => return Err(Tried::Client(e)),
        };
        if tee {
            tee_piece(ctx, call, piece.as_ref());
        }
        let sent = match take_piece(d, ctx, (stream, call), out, piece) {
            Ok(Some(data)) => stream.send_data(&data, false, pause).await,
            Ok(None) => end(stream, out, pause).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => {}
            // The server answered and ended the stream, or answered and reset it with
            // NO_ERROR (RFC 9113 §8.1): the rest is not wanted, the answer is read.
            Err(SendError::Closed | SendError::Failed(Failure::Reset(0))) => return Ok(()),
            Err(e) => return Err(sent_error(e)),
        }
    }
    Ok(())
}

/// A mirror's copy of one piece of the body (`None`: its end), framed as the request head
/// `build_request` wrote says.
fn tee_piece(ctx: &mut RequestCtx, call: &Call<'_>, piece: Option<&Bytes>) {
    let Some(run) = ctx.extra.as_mut().map(|e| &mut e.filters) else {
        return;
    };
    let filters = &call.target.route.filters;
    let chunked = call.target.head.body == BodyKind::Chunked;
    let mut framed = BytesMut::new();
    match (piece, chunked) {
        (Some(p), true) => weir_http::reply::put_chunk(&mut framed, p),
        (Some(p), false) => framed.extend_from_slice(p),
        (None, true) => weir_http::reply::put_last_chunk(&mut framed),
        (None, false) => {}
    }
    filters.tee(run, &framed, piece.is_none());
}

/// One piece of the client's body (`None`: its end), counted, decoded (gRPC-Web text) and
/// kept for a resend while small: what to send (`None` at the end, when the client's
/// trailers, filtered as the head's fields are, are in `out`).
pub(super) fn take_piece<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    (stream, call): (&ClientStream, &Call<'_>),
    out: &mut Outgoing,
    piece: Option<Bytes>,
) -> Result<Option<Bytes>, SendError> {
    match piece {
        Some(mut data) => {
            ctx.bytes_received += data.len() as u64;
            if let Some(t) = out.text.as_mut() {
                data = match t.push(&data) {
                    Ok(d) => d,
                    Err(_) => {
                        stream.cancel();
                        return Err(SendError::Bad("gRPC-Web text body: not base64"));
                    }
                };
            }
            // Kept before it goes: a piece the server did not process goes again too.
            if let Some(kept) = out.sent.as_mut() {
                if kept.len() + data.len() <= REPLAY {
                    kept.extend_from_slice(&data);
                } else {
                    out.sent = None;
                }
            }
            Ok(Some(data))
        }
        None => {
            out.open = false;
            if out.text.as_ref().is_some_and(|t| t.finish().is_err()) {
                stream.cancel();
                return Err(SendError::Bad("gRPC-Web text body: a cut base64 group"));
            }
            out.trailers = super::send::relayed_trailers(d, call.target, call.shape);
            Ok(None)
        }
    }
}

/// Ends the request on `stream`: its trailers, or END_STREAM.
pub(super) async fn end(
    stream: &ClientStream,
    out: &Outgoing,
    pause: std::time::Duration,
) -> Result<(), SendError> {
    if out.trailers.is_empty() {
        return stream.send_data(&[], true, pause).await;
    }
    stream.send_trailers(
        out.trailers
            .iter()
            .filter(|h| !h2_upstream::forbidden(&h.name))
            .map(|h| (&h.name[..], &h.value[..])),
    );
    Ok(())
}

/// A send's failure as a try's.
fn sent_error(e: SendError) -> Tried {
    match e {
        SendError::Bad(why) => Tried::Client(bad_body(why)),
        SendError::Failed(Failure::Unprocessed) => Tried::Unprocessed,
        SendError::Stalled(_) => Tried::Failed(Error::with(
            ErrorKind::ResponseTimeout,
            format!("write: {e}"),
        )),
        e => Tried::Failed(Error::with(ErrorKind::UpstreamReset, format!("write: {e}"))),
    }
}

/// The client's body is not one (a gRPC-Web text body that is not base64): 400.
pub(super) fn bad_body(why: &'static str) -> Error {
    Error::new(ErrorKind::BadRequest(weir_http::ParseError::BadRequest(
        why,
    )))
}

/// Waits before a retry (`forward.rs`'s backoff).
async fn backoff(up: &crate::proxy::upstream::Upstream, retries: u32) {
    let wait = up.retry.backoff(retries);
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// The head wait of a try: `response_header` (a gRPC stream's `stream_idle`), cut short by
/// the exchange's total and the call's deadline.
pub(super) fn head_deadline(call: &Call<'_>) -> Instant {
    let up = call.target.up;
    let wait = match call.grpc {
        true => call.target.route.stream_idle,
        false => up.response_header_timeout,
    };
    let mut deadline = Instant::now() + phase_timeout(wait, call.total_deadline);
    if let Some(c) = call.call_deadline {
        deadline = deadline.min(c);
    }
    deadline
}
