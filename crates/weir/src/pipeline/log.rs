//! The log phase, after the response is queued: the request's counters (`metrics/`), its
//! access log line (`access_log/`), and a `trace` event when tracing is that verbose.
//!
//! Cost on the hot path with metrics on (the default): one clock read at the start of the
//! request (`RequestCtx::new`), one here, and three single-writer counter increments (seven
//! for a proxied request: the server's class, histogram and bytes). With an
//! access log, the line is rendered into the worker's buffer; the write happens elsewhere.

use std::time::Duration;

use weir_http::RequestHead;

use super::downstream::Downstream;
use super::RequestCtx;
use crate::access_log::Entry;
use crate::clock::Mono;
use crate::error::Error;
use weir_http::Persistence;

pub(super) fn finish<D: Downstream>(
    d: &D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    result: &Result<Persistence, Error>,
) {
    let now = ctx.started.map(|t| (t, Mono::now()));
    let elapsed = now.map(|(t, now)| now.since(t));
    // Borrowed, not cloned: a reference count up and down per request for nothing.
    let rt = &ctx.rt;
    if rt.cfg.metrics {
        let nanos = now.map_or(0, |(t, now)| now.nanos_since(t));
        let route = &rt.route_metrics[ctx.listener][ctx.route.map_or(0, |r| r as usize + 1)];
        route.record(ctx.status, nanos);
        if let Some(code) = ctx.extra.as_ref().and_then(|e| e.grpc_status) {
            route.record_grpc(code);
        }
        if let Some((u, s)) = ctx.upstream {
            rt.server_metrics[u as usize][s as usize].record(
                ctx.status,
                nanos,
                ctx.bytes_sent,
                ctx.bytes_received,
            );
        }
    }
    if ctx.phases.has(crate::filters::Phases::LOG) {
        log_filters(ctx, elapsed);
    }
    if let Some(slot) = ctx.log.map(|s| s as usize) {
        let now = now.map_or_else(Mono::now, |(_, now)| now);
        access_line(d, ctx, head, slot, elapsed, now);
    }
    // Spans for a sampled trace (or one not made yet: a request that never reached an
    // upstream is traced too).
    if ctx.trace.is_none_or(|t| t.sampled)
        && ctx
            .rt
            .cfg
            .tracing
            .as_ref()
            .is_some_and(|t| t.export.is_some())
    {
        let now = now.map_or_else(Mono::now, |(_, now)| now);
        super::trace_spans::export(d, ctx, head, result, now);
    }
    tracing::trace!(
        method = head.method.as_str(),
        path = %String::from_utf8_lossy(head.path()),
        status = ctx.status,
        route = ?ctx.route,
        cache = ctx.cache.as_str(),
        upstream = ?ctx.upstream,
        bytes = ctx.bytes_sent,
        micros = elapsed.map(|e| e.as_micros() as u64),
        error = result.as_ref().err().map(|e| e.as_str()),
        "request"
    );
}

/// The route's log filters (a circuit breaker counting outcomes).
#[cold]
fn log_filters(ctx: &mut RequestCtx, elapsed: Option<Duration>) {
    let done = crate::filters::Done {
        status: ctx.status,
        upstream_failed: ctx.extra.as_ref().is_some_and(|e| e.upstream_failed),
        client_ended: ctx.extra.as_ref().is_some_and(|e| e.client_ended),
        bytes_sent: ctx.bytes_sent,
        elapsed,
        upstream_time: ctx
            .started
            .zip(ctx.upstream_head_at)
            .map(|(s, t)| t.since(s)),
    };
    let rt = ctx.rt.clone();
    if let Some(route) = ctx
        .route
        .and_then(|r| rt.cfg.listeners[ctx.listener].routes.get(r as usize))
    {
        route.filters().log(&done, ctx.run_if_any());
    }
}

#[cold]
fn access_line<D: Downstream>(
    d: &D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    slot: usize,
    elapsed: Option<Duration>,
    now: Mono,
) {
    let rt = ctx.rt.clone();
    let log = &rt.cfg.access_logs[slot];
    let peer = d.peer();
    // Made now if nothing proxied asked for it (a fixed response still has a trace).
    let trace = ctx.trace(head, peer.ip());
    let request_id = if log.uses_request_id {
        Some(ctx.request_id(head, peer.ip()))
    } else {
        ctx.known_request_id()
    };
    let route = ctx
        .route
        .and_then(|r| rt.cfg.listeners[ctx.listener].routes.get(r as usize))
        .map_or("-", |r| r.name.as_str());
    let upstream_addr = ctx
        .upstream
        .and_then(|(u, s)| rt.cfg.upstreams[u as usize].servers[s as usize].log_addr());
    let upstream_time = ctx
        .started
        .zip(ctx.upstream_head_at)
        .map(|(s, t)| t.since(s));
    let request_field = |name: &str| head.header(name);
    let sent: &[(usize, bytes::Bytes)] = ctx.extra.as_ref().map_or(&[], |e| &e.sent_fields);
    let response_field = |name: &str| {
        let i = log.response_fields.iter().position(|n| n == name)?;
        sent.iter().find(|(j, _)| *j == i).map(|(_, v)| &v[..])
    };
    let time = crate::access_log::wall_at(now);
    let identity = ctx.identity();
    let entry = Entry {
        time,
        client: peer,
        method: head.method.as_str(),
        path: head.path(),
        query: head.query(),
        protocol: d.protocol(),
        status: ctx.status,
        bytes_sent: ctx.bytes_sent,
        bytes_received: ctx.bytes_received,
        request_time: elapsed,
        upstream_time,
        upstream_addr,
        cache: ctx.cache.as_str(),
        route,
        tls: d.tls(),
        request_id: request_id.as_deref(),
        grpc_status: ctx.extra.as_ref().and_then(|e| e.grpc_status),
        trace,
        identity: identity.as_deref(),
        request_field: &request_field,
        response_field: &response_field,
    };
    rt.logs[slot].append(time.0, |time_local, out| {
        log.format.render(&entry, time_local, out)
    });
}
