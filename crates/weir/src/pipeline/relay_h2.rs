//! An HTTP/2 upstream's answer to the client (`forward_h2.rs`'s last step): its head written
//! as weir's HTTP/1.1 and parsed, so that the cache, the response filters and the logs see
//! the head any upstream gives (as FastCGI's, `forward_cgi.rs`), then its DATA and trailers as
//! they come, the hooks seeing each piece. A gRPC-Web call's answer is relabelled, its
//! trailers sent as the body's last frame, a text call's body in base64 (`proxy/grpc_web.rs`).
//!
//! Waits: the head within `response_header` (a gRPC stream's `stream_idle`), each body piece
//! within `idle` (or `stream_idle`), all cut short by the upstream's `total` and the call's
//! `grpc-timeout`. While a gRPC call from an HTTP/2 client still sends, each wait races the
//! client's next body piece ([`next`]); only the hard deadlines hold then, and the client's
//! own body wait.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::time::Instant;
use weir_http::{BodyKind, Method, Persistence, ResponseHead};

use super::downstream::Downstream;
use super::failure::aborted;
use super::forward::{send_upstream_head, served, Target};
use super::forward_h2::{end, head_deadline, take_piece, Outgoing, Retry};
use super::hooks::{Steer, UpstreamHooks};
use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::{phase_timeout, RequestShape};
use crate::proxy::grpc_web::{self, Mode};
use crate::proxy::h2_client::{ClientStream, Failure, Incoming, SendError};

/// Most interim (1xx) heads taken for one request.
const MAX_INTERIM: usize = 32;

/// Largest answer head relayed.
const MAX_HEAD: usize = 128 * 1024;

/// One call's constants.
pub(super) struct Call<'a> {
    pub(super) target: &'a Target<'a>,
    pub(super) shape: RequestShape<'a>,
    /// A gRPC call (`grpc_refusal::is_grpc`).
    pub(super) grpc: bool,
    pub(super) total_deadline: Option<Instant>,
    /// The call's `grpc-timeout`, when sooner than the total.
    pub(super) call_deadline: Option<Instant>,
}

/// How an answer went.
pub(super) enum Got {
    /// The client was answered (or its connection must end: `Err`).
    Relayed(Result<Persistence, Error>),
    /// The server did not process the stream.
    Unprocessed,
    /// A failure before the head.
    Failed(Error),
    /// The client failed before the head.
    Client(Error),
    /// A status `retries.on` names, its retry taken.
    Status(u16),
}

/// Why a wait ended without an event.
enum Waited {
    Failure(Failure),
    Timeout,
    Client(Error),
}

/// The answer on `stream` from `server`, to the client.
pub(super) async fn answer<D: Downstream>(
    (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
    (call, server, stream, web): (&Call<'_>, usize, &ClientStream, Option<Mode>),
    out: &mut Outgoing,
    (steer, persistence, retry): (Steer<'_>, Persistence, &mut Retry<'_>),
) -> Got {
    let target = call.target;
    let (up, head) = (target.up, target.head);
    let mut interims = 0;
    let (status, fields, end_stream) = loop {
        let phase = head_deadline(call);
        match next(d, ctx, (stream, call), out, phase).await {
            Ok(Incoming::Head(status, fields, end)) => break (status, fields, end),
            Ok(Incoming::Interim) if interims < MAX_INTERIM => interims += 1,
            Ok(Incoming::Interim) => {
                return Got::Failed(Error::with(
                    ErrorKind::UpstreamReset,
                    "too many 1xx responses",
                ))
            }
            Ok(_) => {
                return Got::Failed(Error::with(
                    ErrorKind::BadResponse,
                    "a body before the head",
                ))
            }
            Err(Waited::Failure(Failure::Unprocessed)) => return Got::Unprocessed,
            Err(Waited::Failure(f)) => {
                return Got::Failed(Error::with(ErrorKind::UpstreamReset, f.to_string()))
            }
            Err(Waited::Timeout) if call.call_deadline.is_some_and(|c| Instant::now() >= c) => {
                return Got::Failed(Error::new(ErrorKind::CallDeadline))
            }
            Err(Waited::Timeout) => return Got::Failed(Error::new(ErrorKind::ResponseTimeout)),
            Err(Waited::Client(e)) => return Got::Client(e),
        }
    };
    let bodyless = head.method == Method::Head;
    let web = web.filter(|_| {
        let ct = fields.iter().find(|(n, _)| n == b"content-type");
        grpc_web::is_grpc_answer(ct.map(|(_, v)| v.as_slice()))
    });
    let resp = match head_of(status, &fields, (end_stream, call.grpc), web, bodyless) {
        Some(r) => r,
        None => {
            let e = Error::with(ErrorKind::BadResponse, "an answer head weir cannot relay");
            return Got::Failed(e);
        }
    };
    if up.outlier.is_some() {
        let outcome = crate::proxy::outlier::Outcome::of_status(status);
        up.record_outcome(server, outcome, crate::proxy::upstream::now_ms());
    }
    let again = retry.take(retry.replayable && up.retry.on_status.contains(&status));
    if target.recording {
        super::trace_spans::try_answered(ctx, status, again);
    }
    if again {
        return Got::Status(status);
    }
    served(ctx, (target.upstream, server), status);
    if call.grpc {
        // A trailers-only answer carries the call's status in its head.
        super::grpc_refusal::note_status(ctx, resp.headers());
    }
    let filters = steer.respond.unwrap_or(&target.route.filters);
    let persistence = send_upstream_head(d, ctx, &resp, filters, hooks, persistence);
    let relayed = relay(
        (d, ctx, hooks),
        (call, server, stream, web),
        out,
        (&resp, end_stream),
    )
    .await;
    if let (Err(e), true) = (&relayed, target.recording) {
        super::trace_spans::try_failed(ctx, e);
    }
    Got::Relayed(relayed.map(|()| {
        hooks.on_end(&resp);
        persistence
    }))
}

/// The answer's body and trailers, after its head.
async fn relay<D: Downstream>(
    (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
    (call, server, stream, web): (&Call<'_>, usize, &ClientStream, Option<Mode>),
    out: &mut Outgoing,
    (resp, mut ended): (&ResponseHead, bool),
) -> Result<(), Error> {
    let (up, head) = (call.target.up, call.target.head);
    let fail = |ctx: &mut RequestCtx, why: &str| aborted(ctx, (up, server, head), why);
    let with_body = resp.body != BodyKind::Empty;
    let expected = match resp.body {
        BodyKind::Length(n) => Some(n),
        _ => None,
    };
    let stream_idle = (call.grpc && up.h2).then_some(call.target.route.stream_idle);
    let idle = stream_idle.unwrap_or(up.idle_read_timeout);
    let mut got = 0u64;
    let mut trailers = None;
    while !ended {
        let next_event = match stream.try_next() {
            Some(e) => e.map_err(Waited::Failure),
            None => {
                d.flush().await?;
                let hard = call.call_deadline.or(call.total_deadline);
                let phase = Instant::now() + phase_timeout(idle, hard);
                next(d, ctx, (stream, call), out, phase).await
            }
        };
        match next_event {
            Ok(Incoming::Data(chunk, end)) => {
                stream.release(chunk.len());
                ended = end;
                got += chunk.len() as u64;
                // Never an octet past the answer's length (RFC 9113 §8.1.1): on to an
                // HTTP/1.1 client it would be read as the next answer (attack review).
                if with_body && expected.is_some_and(|n| got > n) {
                    return Err(fail(ctx, "a body longer than its content-length"));
                }
                // A body where none may be (an answer to HEAD, a 204): not relayed.
                if !with_body || chunk.is_empty() {
                    continue;
                }
                let data = match web {
                    Some(Mode::Text) => Bytes::from(grpc_web::encode_text(&chunk)),
                    _ => Bytes::from(chunk),
                };
                hooks.on_body(&data);
                super::send_body(d, ctx, &data, false);
                if d.should_flush() {
                    d.flush().await?;
                }
            }
            Ok(Incoming::Trailers(fields)) => {
                trailers = Some(fields);
                ended = true;
            }
            Ok(_) => return Err(fail(ctx, "a second head")),
            Err(Waited::Client(e)) => return Err(e),
            Err(Waited::Failure(f)) => return Err(fail(ctx, &f.to_string())),
            // The client's deadline, not the server's failure: the stream is cut, the server
            // not marked.
            Err(Waited::Timeout) if call.call_deadline.is_some_and(|c| Instant::now() >= c) => {
                ctx.extra.get_or_insert_with(Default::default).client_ended = true;
                return Err(Error::with(
                    ErrorKind::UpstreamAborted,
                    "the call's grpc-timeout passed mid-response",
                ));
            }
            Err(Waited::Timeout) if stream_idle.is_some() => {
                ctx.extra.get_or_insert_with(Default::default).client_ended = true;
                return Err(Error::new(ErrorKind::StreamIdle));
            }
            Err(Waited::Timeout) => return Err(fail(ctx, "idle timeout mid-body")),
        }
    }
    if with_body && expected.is_some_and(|n| n != got) {
        return Err(fail(ctx, "a body other than its content-length"));
    }
    let trailers: Vec<weir_http::Header> = trailers
        .unwrap_or_default()
        .into_iter()
        .map(|(n, v)| weir_http::Header {
            name: n.into(),
            value: v.into(),
        })
        .collect();
    if call.grpc && !trailers.is_empty() {
        super::grpc_refusal::note_status(ctx, &trailers);
    }
    match web {
        // gRPC-Web: the trailers are the body's last frame.
        Some(mode) if with_body && !trailers.is_empty() => {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = trailers
                .iter()
                .map(|h| (h.name.to_vec(), h.value.to_vec()))
                .collect();
            let mut frame = BytesMut::new();
            grpc_web::trailer_frame(&pairs, &mut frame);
            let frame = match mode {
                Mode::Text => Bytes::from(grpc_web::encode_text(&frame)),
                Mode::Binary => frame.freeze(),
            };
            hooks.on_body(&frame);
            super::send_body(d, ctx, &frame, false);
            super::finish_body(d, ctx);
        }
        _ => {
            super::finish_body(d, ctx);
            d.send_trailers(&trailers);
        }
    }
    d.end_body();
    Ok(())
}

/// The next event on `stream` by `phase`, cut short by the hard deadlines. While a call
/// carries its body both ways, the wait races the client's next piece and the server's
/// windows: a piece goes as far as the windows allow and its rest when they open, and the wait
/// goes on, so the answer is read while the request waits (a server that answers each
/// message before reading the next, with more than a window of answer, deadlocked a send that
/// waited: the second attack review). Only the hard deadlines hold then (a client-streaming
/// call's server answers at the end: its silence is no failure while the client sends), and
/// `timeouts.send` for a window that stays shut.
async fn next<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    (stream, call): (&ClientStream, &Call<'_>),
    out: &mut Outgoing,
    phase: Instant,
) -> Result<Incoming, Waited> {
    let hard = call.call_deadline.or(call.total_deadline);
    let pause = call.target.up.send_timeout;
    loop {
        if out.duplex && !out.finished {
            let (windows, drained) = stream.writable();
            tokio::pin!(windows);
            tokio::pin!(drained);
            windows.as_mut().enable();
            drained.as_mut().enable();
            if let Some(piece) = out.pending.take() {
                match stream.try_send(&piece) {
                    Ok(n) if n < piece.len() => out.pending = Some(piece.slice(n..)),
                    Ok(_) => {}
                    Err(SendError::Failed(Failure::Unprocessed)) => {
                        return Err(Waited::Failure(Failure::Unprocessed))
                    }
                    // The server's side is closed: its answer (or its failure) says the rest.
                    Err(e) => {
                        tracing::debug!(error = %e, "request body not carried whole");
                        out.open = false;
                        out.finished = true;
                        continue;
                    }
                }
            }
            if out.pending.is_none() && !out.open {
                out.finished = true;
                match end(stream, out, pause).await {
                    Ok(()) => {}
                    Err(SendError::Failed(Failure::Unprocessed)) => {
                        return Err(Waited::Failure(Failure::Unprocessed))
                    }
                    Err(e) => tracing::debug!(error = %e, "request end not sent"),
                }
                continue;
            }
            let far =
                hard.unwrap_or_else(|| Instant::now() + std::time::Duration::from_secs(86_400));
            let waiting = out.pending.is_some();
            let piece = tokio::select! {
                biased;
                r = stream.next() => return r.map_err(Waited::Failure),
                p = d.body_chunk(), if !waiting => Some(p),
                _ = &mut windows, if waiting => None,
                _ = &mut drained, if waiting => None,
                _ = tokio::time::sleep(pause), if waiting => return Err(Waited::Timeout),
                _ = tokio::time::sleep_until(far) => return Err(Waited::Timeout),
            };
            if let Some(p) = piece {
                let p = p.map_err(Waited::Client)?;
                match take_piece(d, ctx, (stream, call), out, p) {
                    Ok(data) => out.pending = data.filter(|d| !d.is_empty()),
                    Err(SendError::Bad(why)) => {
                        return Err(Waited::Client(super::forward_h2::bad_body(why)))
                    }
                    Err(e) => return Err(Waited::Failure(Failure::Gone(e.to_string()))),
                }
            }
            continue;
        }
        let by = hard.map_or(phase, |h| h.min(phase));
        return match tokio::time::timeout_at(by, stream.next()).await {
            Ok(r) => r.map_err(Waited::Failure),
            Err(_) => Err(Waited::Timeout),
        };
    }
}

/// The answer's head as weir's HTTP/1.1, parsed: a gRPC-Web call's relabelled (its content
/// type the call's family, no length), the body framed by the server's `content-length` when
/// it gave one (checked at the end), else chunked; none after END_STREAM.
fn head_of(
    status: u16,
    fields: &[(Vec<u8>, Vec<u8>)],
    (end_stream, grpc): (bool, bool),
    web: Option<Mode>,
    bodyless: bool,
) -> Option<ResponseHead> {
    // A final answer only (HTTP/2 has no 101: a `101` relayed would switch an HTTP/1.1
    // client's connection to a tunnel the server never opened).
    if status < 200 {
        return None;
    }
    let size: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    let mut h1 = BytesMut::with_capacity(size + 64);
    h1.put_slice(b"HTTP/1.1 ");
    h1.put_slice(status.to_string().as_bytes());
    h1.put_slice(b" \r\n");
    let mut length = false;
    for (n, v) in fields {
        let is_length = n == b"content-length";
        // A gRPC answer goes chunked whatever its length, or an HTTP/1.1 client would lose
        // its trailers (its status).
        if (is_length && grpc) || (web.is_some() && (is_length || n == b"content-type")) {
            continue;
        }
        length |= is_length;
        weir_http::response::put_header(&mut h1, n, v);
    }
    if let Some(mode) = web {
        let upstream = fields
            .iter()
            .find(|(n, _)| n == b"content-type")
            .map(|(_, v)| v.as_slice());
        weir_http::response::put_header(
            &mut h1,
            b"content-type",
            &grpc_web::client_type(mode, upstream),
        );
    }
    let no_body = bodyless || matches!(status, 204 | 304) || (100..200).contains(&status);
    if !no_body && !length {
        match end_stream && web.is_none() {
            true => h1.put_slice(b"content-length: 0\r\n"),
            false => h1.put_slice(b"transfer-encoding: chunked\r\n"),
        }
    }
    h1.put_slice(b"\r\n");
    weir_http::parse_response(&mut h1, MAX_HEAD, bodyless)
        .ok()
        .flatten()
}
