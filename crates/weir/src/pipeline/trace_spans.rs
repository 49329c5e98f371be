//! A sampled request's spans, recorded as the request goes (issue 55 §4): each upstream try
//! (`forward.rs`) opens a client span whose id becomes the try's `traceparent` parent, and the
//! log phase (`log.rs`) closes weir's server span and hands the request's spans to the
//! exporter (`trace/export.rs`).
//!
//! All of it only with `tracing.otlp` set and the trace sampled; every entry point is cold
//! and its caller asks one question first (`target.trace` is set, or `tracing` has an
//! exporter), so requests without tracing pay a comparison.

use std::cell::RefCell;

use weir_http::{Persistence, RequestHead};

use super::downstream::Downstream;
use super::RequestCtx;
use crate::clock::Mono;
use crate::error::Error;
use crate::trace::context::Lines;
use crate::trace::span::{Attempt, Record};

/// One upstream try, as the worker sees it (names resolved at export).
#[derive(Debug)]
pub(crate) struct Try {
    span_id: [u8; 8],
    upstream: u32,
    server: u32,
    start: Mono,
    end: Option<Mono>,
    status: u16,
    error: Option<&'static str>,
}

/// Whether this request's spans are recorded: an exporter, and a sampled trace.
fn recording(ctx: &RequestCtx) -> bool {
    ctx.rt
        .cfg
        .tracing
        .as_ref()
        .is_some_and(|t| t.export.is_some())
        && ctx
            .extra
            .as_ref()
            .and_then(|e| e.trace)
            .is_some_and(|t| t.sampled)
}

/// A try of `server` begins: its client span, made the parent in the try's `lines`.
#[cold]
pub(super) fn try_begins(
    ctx: &mut RequestCtx,
    lines: Option<&RefCell<Lines>>,
    (upstream, server): (usize, usize),
) {
    if !recording(ctx) {
        return;
    }
    let span_id = crate::trace::context::new_span_id();
    if let Some(lines) = lines {
        crate::trace::context::set_parent(&mut lines.borrow_mut(), span_id);
    }
    let extra = ctx.extra.get_or_insert_with(Default::default);
    extra.tries.push(Try {
        span_id,
        upstream: upstream as u32,
        server: server as u32,
        start: Mono::now(),
        end: None,
        status: 0,
        error: None,
    });
}

/// The current try failed with `error` (no answer).
#[cold]
pub(super) fn try_failed(ctx: &mut RequestCtx, error: &Error) {
    if let Some(t) = current(ctx) {
        t.error = Some(error.as_str());
        t.end = Some(Mono::now());
    }
}

/// The current try was answered with `status`; `ended` when weir tries again (else the try
/// lasts as long as the answer is relayed, until the request ends).
#[cold]
pub(super) fn try_answered(ctx: &mut RequestCtx, status: u16, ended: bool) {
    if let Some(t) = current(ctx) {
        t.status = status;
        if ended {
            t.end = Some(Mono::now());
        }
    }
}

fn current(ctx: &mut RequestCtx) -> Option<&mut Try> {
    ctx.extra
        .as_mut()
        .and_then(|e| e.tries.last_mut())
        .filter(|t| t.end.is_none())
}

/// The log phase: weir's server span and the tries, to the exporter.
#[cold]
pub(super) fn export<D: Downstream>(
    d: &D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    result: &Result<Persistence, Error>,
    now: Mono,
) {
    let rt = ctx.rt.clone();
    let Some(exporter) = rt.cfg.tracing.as_ref().and_then(|t| t.export.as_ref()) else {
        return;
    };
    let peer = d.peer();
    // Made now if nothing proxied asked for it (a cached or fixed answer is traced too).
    let Some(trace) = ctx.trace(head, peer.ip()) else {
        return;
    };
    if !trace.sampled {
        return;
    }
    let wall = |at: Mono| crate::access_log::since_epoch_at(at).as_nanos() as u64;
    let end = wall(now);
    let start = ctx.started.map_or(end, wall);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let tries = ctx
        .extra
        .as_mut()
        .map(|e| std::mem::take(&mut e.tries))
        .unwrap_or_default();
    let names = |u: u32, s: u32| {
        let up = &rt.cfg.upstreams[u as usize];
        (up.name.clone(), up.servers[s as usize].name.clone())
    };
    let attempts: Vec<Attempt> = tries
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (upstream, server) = names(t.upstream, t.server);
            Attempt {
                span_id: t.span_id,
                start: wall(t.start),
                end: t.end.map_or(0, wall),
                upstream,
                server,
                addr: rt.cfg.upstreams[t.upstream as usize].servers[t.server as usize].log_addr(),
                status: t.status,
                error: t.error,
                resend: i as u32,
            }
        })
        .collect();
    // Why the request failed: the connection's error, else the last try's (weir answered
    // a 502/504 for it).
    let error = match result {
        Err(e) => Some(e.as_str()),
        Ok(_) if ctx.status >= 500 => tries.last().and_then(|t| t.error),
        Ok(_) => None,
    };
    let record = Record {
        trace,
        trace_state: trace
            .continued
            .then(|| head.header("tracestate").map(text))
            .flatten(),
        start,
        end,
        method: static_method(&head.method),
        path: text(head.path()),
        query: head.query().map(text),
        host: head.host().map(text),
        scheme: if d.tls().is_some() { "https" } else { "http" },
        protocol: d.via_version(),
        client: peer,
        user_agent: head.header("user-agent").map(text),
        status: ctx.status,
        route: ctx
            .route
            .and_then(|r| rt.cfg.listeners[ctx.listener].routes.get(r as usize))
            .map(|r| r.name.clone()),
        cache: ctx.cache.as_str(),
        upstream: ctx.upstream.map(|(u, s)| names(u, s)),
        grpc_status: ctx.extra.as_ref().and_then(|e| e.grpc_status),
        error,
        attempts,
    };
    exporter.push(record);
}

/// A method's token; `_OTHER` for one outside the standard set (the conventions' name).
fn static_method(m: &weir_http::Method) -> &'static str {
    use weir_http::Method::*;
    match m {
        Get => "GET",
        Head => "HEAD",
        Post => "POST",
        Put => "PUT",
        Delete => "DELETE",
        Connect => "CONNECT",
        Options => "OPTIONS",
        Trace => "TRACE",
        Patch => "PATCH",
        Other(_) => "_OTHER",
    }
}
