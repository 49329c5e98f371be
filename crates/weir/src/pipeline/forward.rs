//! The upstream phase: relay one request to an upstream and its response back to the client.
//!
//! 1. Pick a server among those up (primaries, else backups) with the upstream's policy.
//! 2. Take an idle pooled connection or connect (`connect` timeout).
//! 3. Send the head and stream the body (`send.rs`): the client's body is decoded and
//!    re-framed as it arrives, never buffered whole (a 1 GiB upload needs no more memory than a
//!    small one).
//! 4. Read the response head (`response_header` timeout), relaying interim (1xx) responses, then
//!    stream the body back (`relay_body.rs`). An upstream that dies mid-body aborts the client connection: the
//!    client sees a truncated message, never a short one presented as complete.
//! 5. Reuse the upstream connection when both messages ended cleanly and it may be kept.
//!
//! Failures before a response head are answered with the status `error.rs` maps them to
//! (502/503/504), logged with the upstream, the server and the reason, and counted by passive
//! health. A stale pooled connection is retried on a fresh one for idempotent requests. Other
//! retries go to another server when the upstream's `retries.on` allows it, the request is
//! idempotent and has no body, and the worker's retry budget has tokens.
//!
//! Callers take part at named points ([`super::hooks::UpstreamHooks`]: the head, each body
//! piece, the end, a failure) and steer with [`Steer`] (a pinned server, validators to add);
//! this phase does not know whether a cache is present.

use bytes::BytesMut;
use tokio::time::Instant;
use weir_http::{
    BodyKind, Framing, Method, Persistence, Reply, RequestHead, ResponseHead, Version,
};

use super::downstream::Downstream;
use super::failure::described;
pub(crate) use super::hooks::{Plain, Steer, UpstreamHooks};
use super::send::{send_request, Sent};
use super::{send_head, send_head_filtered, RequestCtx};
use crate::error::{Error, ErrorKind};
use crate::filters::Client;
use crate::proxy::exchange::{
    checkout, is_interim, phase_timeout, read_response_more, record_failure, wants_upgrade,
    RequestShape, MAX_UPSTREAM_HEAD,
};
use crate::proxy::pool::UpstreamConn;
use crate::proxy::route::ProxyRoute;
use crate::proxy::upstream::Upstream;

/// Client-triggerable log lines, rate-limited (`logs/`): a client chooses how often an upstream
/// fails it. The events themselves are counted per server in `/metrics`.
static FAILURE_LOG: crate::logs::Limited = crate::logs::Limited::new();
static RETRY_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// Most interim (1xx) responses relayed for one request; more is treated as a broken upstream.
const MAX_INTERIM: usize = 32;

/// Where the exchange stands: the upstream, this worker's state for it, the request.
pub(super) struct Target<'r> {
    /// Index of `up` in the config's upstreams.
    pub(super) upstream: usize,
    pub(super) up: &'r Upstream,
    pub(super) route: &'r ProxyRoute,
    pub(super) head: &'r RequestHead,
    pub(super) client: Client,
    /// With `tracing`: the request has a trace context (`RequestCtx::trace`), sent upstream
    /// in place of the client's.
    pub(super) traced: bool,
    /// Its spans are exported: each try is recorded (`trace_spans.rs`).
    pub(super) recording: bool,
}

/// Proxies `head` per `route`, as `steer` says, calling `hooks` at each named point;
/// `persistence` is the keep-alive decision made so far, and the return value the one that
/// holds after the response.
pub(crate) async fn forward<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &ProxyRoute,
    mut persistence: Persistence,
    steer: Steer<'_>,
    hooks: &mut dyn UpstreamHooks,
) -> Result<Persistence, Error> {
    let rt = ctx.rt.clone();
    // A traffic split or canary filter may have chosen another upstream than the route's.
    let upstream = match steer.pin {
        Some((u, _)) => u,
        None => ctx.chosen_upstream().unwrap_or(route.upstream),
    };
    let up: &Upstream = &rt.cfg.upstreams[upstream];
    let per_worker = &rt.upstreams[upstream];
    let client = super::client_of(d);
    // With `tracing`: the request's trace context, made now (weir's `traceparent` goes
    // upstream), and whether its tries are recorded.
    let traced = rt.cfg.tracing.is_some();
    let recording = traced && super::trace_spans::begin(ctx, head, client.ip);
    let target = Target {
        upstream,
        up,
        route,
        head,
        client,
        traced,
        recording,
    };
    let has_body = head.body != BodyKind::Empty;
    // Held until the response is relayed: the upstream's cap on requests in flight.
    let _in_flight = match up.limits.take(crate::proxy::limits::Cap::Requests) {
        Ok(slot) => slot,
        Err(cap) => {
            let e = Error::with(ErrorKind::Overflow, cap.as_str());
            return fail(
                d,
                ctx,
                &target,
                None,
                e,
                (persistence, has_body),
                (steer, &mut *hooks),
            );
        }
    };
    per_worker.deposit_budget(up.retry.budget);
    let idempotent = matches!(
        head.method,
        Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
    );
    let replayable = idempotent && !has_body;
    let id = ctx.request_id(head, target.client.ip);
    let settings = &rt.cfg.request_id;
    let identity = ctx.identity();
    let shape = RequestShape {
        upgrade: route.upgrade && wants_upgrade(head),
        strip_conditionals: steer.strip_conditionals,
        extra: steer.extra,
        request_id: Some((&settings.name, &settings.prefix, &id)),
        identity: identity.as_deref(),
    };
    if let Some(cgi) = &up.fastcgi {
        // Boxed: kept out of every other request's future.
        let hooks = (steer, &mut *hooks);
        return Box::pin(super::forward_cgi::forward(
            (d, ctx),
            (&target, cgi, per_worker),
            shape,
            persistence,
            hooks,
        ))
        .await;
    }
    if up.h2 {
        // Boxed: kept out of every other request's future.
        let hooks = (steer, &mut *hooks);
        return Box::pin(super::forward_h2::forward(
            (d, ctx),
            (&target, per_worker),
            shape,
            persistence,
            hooks,
        ))
        .await;
    }
    // Asked once (a GET costs one comparison): a gRPC call's deadline bounds the exchange and
    // its status is noted. (An HTTP/1.1 upstream is not a gRPC server: a client's
    // `content-type` does not lift its timeouts to the route's `stream_idle`; attack review.)
    let grpc = super::grpc_refusal::is_grpc(head);
    let total_deadline = up.total_timeout.map(|t| Instant::now() + t);
    // A gRPC call's own deadline, when sooner than the upstream's (`grpc_timeout.rs`).
    let call_deadline = match grpc {
        true => super::grpc_timeout::deadline(head, total_deadline),
        false => None,
    };
    // Servers tried so far (bounded: retries are few).
    let mut tried_buf = [usize::MAX; 16];
    let mut ntried = 0usize;
    let mut fresh_only: Option<usize> = None;
    let retries = std::cell::Cell::new(0u32);
    // A retry in flight holds a slot under the upstream's `max_retries` until the next retry
    // or the end of the request.
    let retry_slot = std::cell::RefCell::new(None);
    // One more try when the condition allows it, attempts remain, the budget has a token and
    // the upstream's cap on retries in flight has room.
    let retry = |allowed: bool| {
        let go = allowed
            && retries.get() < up.retry.attempts
            && per_worker.take_budget()
            && match up.limits.take(crate::proxy::limits::Cap::Retries) {
                Ok(slot) => {
                    *retry_slot.borrow_mut() = Some(slot);
                    true
                }
                Err(_) => false,
            };
        retries.set(retries.get() + u32::from(go));
        go
    };

    // A sticky session's server, while it is up and not tried yet; else the balancer.
    let preferred = match steer.pin {
        Some((_, server)) => Some(server),
        None => route
            .filters
            .prefer(ctx.run_if_any().map(|r| &*r), upstream),
    };
    // The response head is parsed straight into this slot and borrowed from it: moved out
    // through the loops below, it was copied four times (~190 instructions per proxied
    // request, callgrind 2026-11-27).
    let mut resp_slot: Option<ResponseHead> = None;
    // `_active` is held until the response is relayed (least_conn and the in-flight gauge).
    let (server, mut upstream_conn, resp, _active) = loop {
        // After a stale pooled connection, retry the same server on a new connection.
        let force_fresh = fresh_only.is_some();
        // One clock read for the try: who is up, and how long pooled connections idled (each
        // read is ~25 instructions).
        let now = crate::clock::Mono::now();
        let sticky = preferred.filter(|s| {
            !tried_buf[..ntried].contains(s) && up.is_up(*s, crate::proxy::upstream::ms_at(now))
        });
        let server = match fresh_only.take().or(sticky) {
            Some(s) => s,
            None => match per_worker.pick(up, target.client.ip, head, &tried_buf[..ntried], now) {
                Some(s) => s,
                None => {
                    let e = Error::new(ErrorKind::NoServer);
                    return fail(
                        d,
                        ctx,
                        &target,
                        None,
                        e,
                        (persistence, has_body),
                        (steer, &mut *hooks),
                    );
                }
            },
        };
        if !tried_buf[..ntried].contains(&server) && ntried < tried_buf.len() {
            tried_buf[ntried] = server;
            ntried += 1;
        }
        if target.recording {
            super::trace_spans::try_begins(ctx, (upstream, server));
        }
        // A pooled connection is taken here, without the checkout's future: its state and
        // result moved through it cost ~180 instructions per proxied request (callgrind
        // 2026-11-27).
        let pooled = match force_fresh {
            true => None,
            false => per_worker
                .pool
                .borrow_mut()
                .take(server, &up.servers[server].health, now),
        };
        let (mut conn, reused) = match pooled {
            Some(conn) => (conn, true),
            None => match checkout(per_worker, up, server, false, now).await {
                Ok(checked_out) => checked_out,
                Err(e) => {
                    if target.recording {
                        super::trace_spans::try_failed(ctx, &e);
                    }
                    if retry(e.retryable(&up.retry.on, true)) {
                        backoff(up, retries.get()).await;
                        continue;
                    }
                    return fail(
                        d,
                        ctx,
                        &target,
                        Some(server),
                        e,
                        (persistence, has_body),
                        (steer, &mut *hooks),
                    );
                }
            },
        };
        let gauge = rt
            .cfg
            .metrics
            .then(|| &rt.server_metrics[upstream][server].in_flight);
        let active = per_worker.track_active(server, gauge);
        let parent = match target.traced {
            true => super::trace_spans::upstream_parent(ctx),
            false => None,
        };
        let tee = if route.filters.has(crate::filters::Phases::TEE) {
            ctx.extra.as_mut().map(|e| &mut e.filters)
        } else {
            None
        };
        let sent = send_request(
            d,
            &mut conn,
            &target,
            server,
            shape,
            (&mut ctx.bytes_received, tee, ctx.trace.as_ref().zip(parent)),
        )
        .await?;
        // Heads read on this try (interim ones relayed): the cap is per try, and a try that
        // relayed one reached the upstream, so is not replayed as a stale connection's.
        let mut interims = 0usize;
        let result = match sent {
            Sent::Ok => loop {
                interims += 1;
                if interims > MAX_INTERIM {
                    break Err(Error::with(
                        ErrorKind::UpstreamReset,
                        "too many 1xx responses",
                    ));
                }
                let head_request = head.method == Method::Head;
                // Parsed here between reads, not returned by an async fn: a head handed out of
                // a future's output is copied three times more (~120 instructions per proxied
                // request, callgrind 2026-11-27).
                let mut deadline =
                    Instant::now() + phase_timeout(up.response_header_timeout, total_deadline);
                if let Some(call) = call_deadline {
                    deadline = deadline.min(call);
                }
                let parsed = loop {
                    if !conn.buf.is_empty() {
                        match weir_http::parse_response(
                            &mut conn.buf,
                            MAX_UPSTREAM_HEAD,
                            head_request,
                        ) {
                            Ok(Some(resp)) => break Ok(&*resp_slot.insert(resp)),
                            Ok(None) => {}
                            Err(e) => break Err(Error::with(ErrorKind::BadResponse, e)),
                        }
                    }
                    if let Err(e) = read_response_more(&mut conn, deadline).await {
                        break Err(match e.kind {
                            ErrorKind::ResponseTimeout
                                if call_deadline.is_some_and(|c| Instant::now() >= c) =>
                            {
                                Error::new(ErrorKind::CallDeadline)
                            }
                            _ => e,
                        });
                    }
                };
                match parsed {
                    Ok(interim) if is_interim(interim.status) => relay_interim(d, interim).await?,
                    r => break r,
                }
            },
            // An upstream that stopped reading the body: nginx's 504 ("upstream timed out
            // while sending request").
            Sent::Upstream(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(Error::with(
                ErrorKind::ResponseTimeout,
                format!("write: {e}"),
            )),
            Sent::Upstream(e) => Err(Error::with(ErrorKind::UpstreamReset, format!("write: {e}"))),
        };
        match result {
            Ok(resp) => {
                if up.outlier.is_some() {
                    let outcome = crate::proxy::outlier::Outcome::of_status(resp.status);
                    up.record_outcome(server, outcome, crate::proxy::upstream::now_ms());
                }
                let again = retry(replayable && up.retry.on_status.contains(&resp.status));
                if target.recording {
                    super::trace_spans::try_answered(ctx, resp.status, again);
                }
                if again {
                    if let Some(suppressed) = RETRY_LOG.admit() {
                        let (request, id) = described(ctx, target.head, Some(target.client.ip));
                        tracing::warn!(upstream = %up.name, server = %up.servers[server].name, status = resp.status, request = %request, request_id = %id, suppressed, "retrying on another server");
                    }
                    backoff(up, retries.get()).await;
                    continue;
                }
                break (server, conn, resp, active);
            }
            // A pooled connection the upstream had closed: the request never reached it (no
            // byte came back, not even an interim response).
            Err(e)
                if e.kind == ErrorKind::UpstreamReset
                    && reused
                    && replayable
                    && interims <= 1
                    && conn.buf.is_empty() =>
            {
                if target.recording {
                    super::trace_spans::try_failed(ctx, &e);
                }
                fresh_only = Some(server);
            }
            Err(e) => {
                if target.recording {
                    super::trace_spans::try_failed(ctx, &e);
                }
                if !matches!(e.kind, ErrorKind::CallDeadline | ErrorKind::StreamIdle) {
                    record_failure(up, server, &e);
                }
                if retry(e.retryable(&up.retry.on, replayable)) {
                    backoff(up, retries.get()).await;
                    continue;
                }
                return fail(
                    d,
                    ctx,
                    &target,
                    Some(server),
                    e,
                    (persistence, has_body),
                    (steer, &mut *hooks),
                );
            }
        }
    };
    if resp.body == BodyKind::Chunked {
        // A body bad from its first chunk-size line is a 502, not a relayed head and a cut.
        if let Err(e) = weir_http::body::check_first_chunk(&upstream_conn.buf) {
            let e = Error::with(ErrorKind::BadResponse, format!("bad response body: {e}"));
            if target.recording {
                super::trace_spans::try_failed(ctx, &e);
            }
            record_failure(up, server, &e);
            return fail(
                d,
                ctx,
                &target,
                Some(server),
                e,
                (persistence, has_body),
                (steer, &mut *hooks),
            );
        }
    }
    served(ctx, (upstream, server), resp.status);
    if grpc {
        // A trailers-only answer carries the call's status in its head.
        super::grpc_refusal::note_status(ctx, resp.headers());
    }

    if shape.upgrade && resp.status == 101 {
        // Boxed, as the waits below: rare paths kept out of every request's future.
        Box::pin(tunnel(d, ctx, upstream_conn, resp)).await?;
        return Ok(Persistence::Close);
    }
    let filters = steer.respond.unwrap_or(&route.filters);
    persistence = send_upstream_head(d, ctx, resp, filters, &mut *hooks, persistence);
    let relayed = super::relay_body::relay_body(
        d,
        ctx,
        &mut upstream_conn,
        resp,
        (up, server, target.head),
        (total_deadline, call_deadline),
        (grpc, &mut *hooks),
    )
    .await;
    let reusable = match relayed {
        Ok(reusable) => reusable,
        Err(e) => {
            if target.recording {
                super::trace_spans::try_failed(ctx, &e);
            }
            return Err(e);
        }
    };
    if reusable {
        // A body sent anyway after one that must have none is the likely desync: asked for.
        let bodiless = target.head.method == Method::Head || matches!(resp.status, 204 | 304);
        per_worker.pool.borrow_mut().put(
            server,
            upstream_conn,
            &up.servers[server].health,
            bodiless,
        );
    }
    hooks.on_end(resp);
    Ok(persistence)
}

/// Notes which upstream server answered, and when its head came (logs, metrics, filters).
#[inline]
pub(super) fn served(ctx: &mut RequestCtx, (upstream, server): (usize, usize), status: u16) {
    ctx.upstream = Some((upstream as u32, server as u32));
    if let Some(run) = ctx.run_if_any() {
        run.served = Some((upstream, server));
    }
    ctx.upstream_head_at = Some(crate::clock::Mono::now());
    ctx.status = status;
}

/// An upstream's response head to the client: the hooks (the cache) and the response
/// `filters` see it first. HTTP and FastCGI upstreams alike.
#[inline]
pub(super) fn send_upstream_head<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    resp: &ResponseHead,
    filters: &crate::filters::Chain,
    hooks: &mut dyn UpstreamHooks,
    persistence: Persistence,
) -> Persistence {
    let mut lines = BytesMut::new();
    hooks.on_head(resp, &mut lines);
    let framing = match resp.body {
        BodyKind::Length(n) => Framing::Length(n),
        BodyKind::Chunked | BodyKind::CloseDelimited => Framing::Unknown,
        BodyKind::Empty => Framing::Given,
    };
    let mut filter_lines = BytesMut::new();
    let mut reply = Reply::new(resp.status, framing);
    reply.reason = &resp.reason;
    reply.base = resp.base();
    reply.add_lines(&lines);
    super::filter_response(ctx, filters, &mut reply, &mut filter_lines);
    send_head_filtered(d, ctx, &reply, persistence)
}

/// Waits before a retry (exponential backoff with full jitter, `RetryPolicy::backoff`).
async fn backoff(up: &Upstream, retries: u32) {
    let wait = up.retry.backoff(retries);
    if !wait.is_zero() {
        Box::pin(tokio::time::sleep(wait)).await;
    }
}

/// Answers a failure and logs it; a request whose body was not (fully) read ends the connection.
/// `(persistence, has_body)`: the keep-alive decision so far, and whether the request had a
/// body (then the connection closes: the body may not have been read). With
/// `Steer::fallback` only the hooks hear of it.
pub(super) fn fail<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    target: &Target<'_>,
    server: Option<usize>,
    e: Error,
    (persistence, has_body): (Persistence, bool),
    (steer, hooks): (Steer<'_>, &mut dyn UpstreamHooks),
) -> Result<Persistence, Error> {
    let up = target.up;
    let server_name = server.map(|s| up.servers[s].name.as_str()).unwrap_or("-");
    let status = e.status().unwrap_or(502);
    if let Some(suppressed) = FAILURE_LOG.admit() {
        let (request, id) = described(ctx, target.head, Some(target.client.ip));
        tracing::warn!(upstream = %up.name, server = %server_name, status, reason = %e, request = %request, request_id = %id, suppressed, "upstream failure");
    }
    hooks.on_failure(status);
    if steer.fallback {
        return Ok(persistence);
    }
    // A call's own deadline is not the upstream's failure, nor its success (the circuit
    // breaker reads both).
    let extra = ctx.extra.get_or_insert_with(Default::default);
    extra.client_ended = matches!(e.kind, ErrorKind::CallDeadline | ErrorKind::StreamIdle);
    extra.upstream_failed = !extra.client_ended;
    if let Some(s) = server {
        ctx.upstream = Some((target.upstream as u32, s as u32));
    }
    let persistence = if has_body {
        Persistence::Close
    } else {
        persistence
    };
    Ok(super::send_error(
        d,
        ctx,
        target.head,
        status,
        &[],
        persistence,
    ))
}

/// Relays an interim (1xx) response to an HTTP/1.1 client at once, hop-by-hop fields dropped.
/// Its fields are never carried into the final response, and the cache never sees it.
/// `100 Continue` is weir's own business (it answers `Expect` itself), and HTTP/1.0 clients
/// get no 1xx at all (RFC 9110 §15.2).
async fn relay_interim<D: Downstream>(d: &mut D, resp: &ResponseHead) -> Result<(), Error> {
    if resp.status == 100 || d.version() == Version::Http10 {
        return Ok(());
    }
    let mut reply = Reply::new(resp.status, Framing::Given);
    reply.reason = &resp.reason;
    reply.base = resp.base();
    reply.drop_fields(&no_length);
    reply.date = false;
    d.send_interim(&reply).await
}

/// A 1xx response carries no `Content-Length` (RFC 9110 §8.6: a server must not send one); an
/// origin's is not relayed (an HTTP/2 client resets the stream over it).
fn no_length(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"content-length")
}

/// After a 101: relay the response head, then bytes both ways until either side closes.
async fn tunnel<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    mut conn: UpstreamConn,
    resp: &ResponseHead,
) -> Result<(), Error> {
    // The hop-by-hop `Upgrade` and `Connection` are this exchange's business: relayed here.
    let mut lines = BytesMut::new();
    if let Some(u) = resp.header("upgrade") {
        weir_http::response::put_header(&mut lines, b"Upgrade", u);
    }
    lines.extend_from_slice(b"Connection: upgrade\r\n");
    let mut reply = Reply::new(101, Framing::Given);
    reply.reason = &resp.reason;
    reply.base = resp.base();
    reply.drop_fields(&no_length);
    reply.date = false;
    reply.add_lines(&lines);
    send_head(d, ctx, &reply, Persistence::KeepAlive);
    let early = std::mem::take(&mut conn.buf);
    d.tunnel(&mut conn.stream, &early).await
}
