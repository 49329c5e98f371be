//! A sampled request's spans, recorded as the request goes (issue 55 §4): each upstream try
//! (`forward.rs`) opens a client span whose id becomes the try's `traceparent` parent, and the
//! log phase (`log.rs`) closes weir's server span and hands the request's spans to the
//! exporter (`trace/export.rs`).
//!
//! All of it only with `tracing.otlp` set and the trace sampled; every entry point is cold
//! and its caller asks one question first (`Target::recording`, or `tracing` has an
//! exporter), so requests without tracing pay a comparison.

use weir_http::{Persistence, RequestHead};

use super::downstream::Downstream;
use super::RequestCtx;
use crate::clock::Mono;
use crate::error::Error;
use crate::trace::span::{Attempt, Fields, Record, Text};

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

/// Makes the request's trace context (with `tracing`): whether its spans are recorded (an
/// exporter, and a sampled trace).
#[cold]
pub(super) fn begin(ctx: &mut RequestCtx, head: &RequestHead, peer: std::net::IpAddr) -> bool {
    let sampled = ctx.trace(head, peer).is_some_and(|t| t.sampled);
    sampled
        && ctx
            .rt
            .cfg
            .tracing
            .as_ref()
            .is_some_and(|t| t.export.is_some())
}

/// The parent the upstream is told of: the current try's client span when spans are
/// recorded, else weir's span.
pub(super) fn upstream_parent(ctx: &RequestCtx) -> Option<[u8; 8]> {
    let trace = ctx.trace.as_ref()?;
    Some(
        ctx.extra
            .as_ref()
            .and_then(|e| e.tries.last())
            .map_or(trace.span_id, |t| t.span_id),
    )
}

/// A try of `server` begins: its client span, the upstream's parent for this try
/// ([`upstream_parent`]).
#[cold]
pub(super) fn try_begins(ctx: &mut RequestCtx, (upstream, server): (usize, usize)) {
    let span_id = crate::trace::context::new_span_id();
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
    let peer = d.peer();
    // Made now if nothing proxied asked for it (a cached or fixed answer is traced too).
    let Some(trace) = ctx.trace(head, peer.ip()) else {
        return;
    };
    if !trace.sampled {
        return;
    }
    let rt = ctx.rt.clone();
    let Some(exporter) = rt.cfg.tracing.as_ref().and_then(|t| t.export.as_deref()) else {
        return;
    };
    let wall = |at: Mono| crate::access_log::since_epoch_at(at).as_nanos() as u64;
    let end = wall(now);
    let start = ctx.started.map_or(end, wall);
    let tries = ctx
        .extra
        .as_mut()
        .map(|e| std::mem::take(&mut e.tries))
        .unwrap_or_default();
    // Why the request failed: the connection's error, else the last try's (weir answered
    // a 502/504 for it).
    let error = match result {
        Err(e) => Some(e.as_str()),
        Ok(_) if ctx.status >= 500 => tries.last().and_then(|t| t.error),
        Ok(_) => None,
    };
    let attempts = tries
        .iter()
        .map(|t| Attempt {
            span_id: t.span_id,
            start: wall(t.start),
            end: t.end.map_or(0, wall),
            upstream: t.upstream,
            server: t.server,
            addr: rt.cfg.upstreams[t.upstream as usize].servers[t.server as usize].log_addr(),
            status: t.status,
            error: t.error,
        })
        .collect();
    // As the upstream was sent it.
    let state = trace.client_state(head);
    let (path, query, host, ua) = (
        head.path(),
        head.query(),
        head.host(),
        head.header("user-agent"),
    );
    let room = path.len()
        + query.map_or(0, <[u8]>::len)
        + host.map_or(0, <[u8]>::len)
        + ua.map_or(0, <[u8]>::len)
        + state.as_ref().map_or(0, |s| s.len());
    let mut record = Record::new(
        Fields {
            names: exporter.names(|| names_of(&rt.cfg)),
            trace,
            start,
            end,
            method: static_method(&head.method),
            scheme: if d.tls().is_some() { "https" } else { "http" },
            protocol: d.via_version(),
            client: peer,
            status: ctx.status,
            listener: ctx.listener as u32,
            route: ctx.route,
            cache: ctx.cache.as_str(),
            upstream: ctx.upstream,
            grpc_status: ctx.extra.as_ref().and_then(|e| e.grpc_status),
            error,
            attempts,
        },
        room,
    );
    // In `Text`'s order.
    record.set_text(Text::Path, path);
    for (which, v) in [
        (Text::Query, query),
        (Text::Host, host),
        (Text::UserAgent, ua),
        (Text::TraceState, state.as_deref()),
    ] {
        if let Some(v) = v {
            record.set_text(which, v);
        }
    }
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

/// The names spans give routes, upstreams and servers, from the config.
fn names_of(cfg: &crate::runtime::RuntimeConfig) -> crate::trace::span::Names {
    crate::trace::span::Names::new(
        cfg.listeners
            .iter()
            .map(|l| l.routes.iter().map(|r| r.name.clone()).collect())
            .collect(),
        cfg.upstreams
            .iter()
            .map(|u| {
                (
                    u.name.clone(),
                    u.servers.iter().map(|s| s.name.clone()).collect(),
                )
            })
            .collect(),
    )
}
