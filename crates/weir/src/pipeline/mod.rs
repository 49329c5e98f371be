//! The request pipeline: what happens to one request, whatever protocol brought it. Start here.
//!
//! ```text
//! route ─→ request filters ─→ cache lookup ─ hit ─────────────────────────→ response filters ─→ write ─→ log
//!                                          └ miss/stale/bypass ─→ upstream ─→ response filters ─→ write ─→ log
//!        └ respond / static / echo / admin ───────────────────────────────→ write ─→ log
//! ```
//!
//! * [`handle`] (this file) routes the request, runs the route's request filters, and hands it
//!   to the route's action; the non-proxy actions are answered here.
//! * [`cache`]: the cache session of proxy routes (one lookup over the tiers, hits, misses with
//!   coalescing, revalidation, store): `cache/mod.rs` names its files.
//! * [`forward`]: the upstream phase (pick, connect, stream both ways, retries, 1xx, upgrades),
//!   with named points where the cache takes part ([`hooks`]); [`fetch`]: whole fetches
//!   (revalidations, slices) through it, to a downstream that keeps nothing.
//! * [`context::RequestCtx`]: what is known about the request as it runs (route, cache state,
//!   upstream and server, status, bytes, timings) and what the log reports at the end.
//! * [`body`]: response bodies, through body filters when one claimed the response.
//! * `refused.rs`: a filter's answer, and requests the DoS shield refuses (`shield/`).
//! * [`downstream::Downstream`]: the client protocol. Everything here is generic over it.
//! * [`tcp`]: the same for a connection on a `tcp:` listener, which is relayed whole (routing
//!   by server name, the connect, the relay, one access log line).
//!
//! Producers build a `weir_http::Reply`; only the `Downstream` encodes it. Errors are
//! `crate::error::Error`, mapped to a status and a canned reply in one place ([`send_error`]).

mod body;
pub(crate) mod cache;
mod client;
pub(crate) mod context;
pub(crate) mod downstream;
mod errors;
mod failure;
pub(crate) mod fetch;
pub(crate) mod forward;
mod forward_cgi;
mod forward_h2;
pub(crate) mod grpc_refusal;
mod grpc_timeout;
pub(crate) mod hooks;
mod kv;
mod later;
pub(crate) mod limits;
mod log;
mod refused;
mod relay_body;
mod relay_h2;
mod send;
mod trace_spans;
mod typed;
pub(crate) use errors::{error_pages, send_error, send_error_page};
use typed::send_admin;
pub(crate) use typed::send_json;
pub(crate) mod subrequest;
pub(crate) mod tcp;

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use weir_http::{Base, BodyKind, Framing, Method, Persistence, Reply, RequestHead};

use body::stream_file;
pub(crate) use body::{filter_response, finish_body, send_body};
pub(crate) use client::{client_of, scheme_of};
pub use context::CacheState;
pub(crate) use context::RequestCtx;
use downstream::Downstream;
use refused::{respond_for_filter, shield_refusal};

use crate::actions::static_files::{StaticBody, StaticReply};
use crate::actions::Action;
use crate::error::Error;
use crate::filters::{Caps, Client, Phases, Req, Run, Step};
use crate::routes::Routed;
use crate::runtime::WorkerRuntime;

/// The rest of a request that must wait for IO, boxed: the hot paths (a hit, a fixed response)
/// finish without it, and every connection's future stays small (a pipeline future inline in
/// the connection would put its largest state, the proxy's, in every idle connection). Its
/// block is recycled per worker (`later.rs`).
type Later<'a> = later::Later<'a, Result<Persistence, Error>>;

/// How far [`start`] got.
enum Started<'a> {
    Done(Result<Persistence, Error>),
    Later(Later<'a>),
}

/// Answers one request on `d`, running on `rt`, arriving on listener `listener`. Returns whether
/// the connection may serve another request.
pub(crate) async fn handle<D: Downstream>(
    d: &mut D,
    rt: Rc<WorkerRuntime>,
    listener: usize,
    head: &RequestHead,
) -> Result<Persistence, Error> {
    #[cfg(debug_assertions)]
    fault_injection(head);
    let mut ctx = RequestCtx::new(rt.clone(), listener);
    if let Some(cluster) = &rt.cfg.cluster {
        if crate::cluster::is_peer_fill(cluster, head, d.peer().ip()) {
            ctx.mark_peer_fill();
        }
    }
    let result = match shield_refusal(d, &mut ctx, &rt, head) {
        Some(refused) => refused,
        None => match start(d, &mut ctx, &rt, head) {
            Started::Done(result) => result,
            Started::Later(rest) => rest.await,
        },
    };
    log::finish(d, &mut ctx, head, &result);
    if let Some(shield) = &rt.cfg.shield {
        if !ctx.peer_fill() {
            shield.outcome(d.peer().ip(), ctx.status);
        }
    }
    result
}

/// Queues a response head: the one way the pipeline sends one, so the status and the fields
/// the access log reports are noted in one place.
/// The route's response filters run here, on every answer of the route (hits, weir's own
/// replies, a filter's answer).
#[inline(always)]
pub(crate) fn send_head<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    reply: &Reply<'_>,
    persistence: Persistence,
) -> Persistence {
    if ctx.phases.has(Phases::RESPONSE) {
        return send_filtered(d, ctx, reply, persistence);
    }
    ctx.sent(reply);
    d.send_head(reply, persistence)
}

/// [`send_head`] for a reply the caller already ran through the route's response filters:
/// the proxy's and the cache's replies, whose filters (borrowed from the route, which outlives
/// the reply) are applied where the reply is built, without the copy `send_filtered` makes.
#[inline(always)]
pub(crate) fn send_head_filtered<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    reply: &Reply<'_>,
    persistence: Persistence,
) -> Persistence {
    ctx.sent(reply);
    d.send_head(reply, persistence)
}

/// Queues the head of a reply built for `route`, running the route's response filters on it
/// in place (their parts borrow the route, which outlives the reply: no copy).
#[inline(always)]
fn send_route_head<'r, D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    route: &'r crate::routes::Route,
    reply: &mut Reply<'r>,
    lines: &'r mut BytesMut,
    persistence: Persistence,
) -> Persistence {
    if ctx.phases.has(Phases::RESPONSE) {
        route.filters().response(reply, ctx.response_run(), lines);
    }
    send_head_filtered(d, ctx, reply, persistence)
}

/// [`send_head`] through the route's response filters.
#[cold]
fn send_filtered<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    reply: &Reply<'_>,
    persistence: Persistence,
) -> Persistence {
    let rt = ctx.rt.clone();
    let chain = ctx
        .route
        .and_then(|r| rt.cfg.listeners[ctx.listener].routes.get(r as usize));
    let Some(route) = chain else {
        ctx.sent(reply);
        return d.send_head(reply, persistence);
    };
    let mut lines = BytesMut::new();
    // A copy (`Reply` is covariant: the copy may borrow the filters' parts, which live shorter
    // than the caller's reply). Replies on the hot paths skip this: `send_head_filtered`.
    let mut filtered: Reply<'_> = reply.clone();
    route
        .filters()
        .response(&mut filtered, ctx.response_run(), &mut lines);
    ctx.sent(&filtered);
    d.send_head(&filtered, persistence)
}

/// Routes the request, runs its request filters, and what can run without waiting: a fresh
/// hit, a fixed response, a static file read whole.
fn start<'a, D: Downstream>(
    d: &'a mut D,
    ctx: &'a mut RequestCtx,
    rt: &'a WorkerRuntime,
    head: &'a RequestHead,
) -> Started<'a> {
    let routes = &rt.cfg.listeners[ctx.listener].routes;
    let routed = routes.route(head, d.tls(), &|| d.peer().ip());
    if let Routed::Found(route) = routed {
        ctx.route = Some(route.index as u32);
        ctx.log = route.access_log.map(|s| s as u32);
        if let (Some(wait), false) = (route.body_timeout, head.body == BodyKind::Empty) {
            d.body_timeout(wait);
        }
        if let Some(wait) = route.keepalive_timeout {
            d.keepalive(wait);
        }
        match limits::route_body_limit(head, route, &rt.cfg.limits) {
            Ok(None) => {}
            Ok(Some(max)) => d.cap_body(max),
            Err(()) => {
                let persistence = d.persistence(head);
                return Started::Done(Ok(send_error(d, ctx, head, 413, &[], persistence)));
            }
        }
        let chain = route.filters();
        ctx.phases = chain.phases();
        if chain.has(Phases::REQUEST) {
            if !matches!(head.body, BodyKind::Empty | BodyKind::Length(_)) {
                if let Some(cap) = chain.body_cap() {
                    d.cap_body(cap);
                }
            }
            let mut client = client_of(d);
            client.member = ctx.peer_fill();
            let mut local = Run::default();
            let subrequests = chain
                .can(Caps::FETCH)
                .then(|| subrequest::Subrequests::new(ctx, d.peer()));
            let step = chain.request(
                &request_of(&client, head, route, subrequests.as_ref()),
                run_for(chain, ctx, &mut local),
                0,
            );
            match step {
                Step::Continue => {}
                Step::Respond(a) => return Started::Done(Ok(respond_for_filter(d, ctx, head, a))),
                wait @ Step::Wait(..) => {
                    return Started::Later(Later::new(async move {
                        let mut local = Run::default();
                        let req = request_of(&client, head, route, subrequests.as_ref());
                        let run = run_for(chain, ctx, &mut local);
                        if let Some(a) = chain.request_async(&req, run, wait).await {
                            return Ok(respond_for_filter(d, ctx, head, a));
                        }
                        match act(d, ctx, rt, head, Routed::Found(route)) {
                            Started::Done(result) => result,
                            Started::Later(rest) => rest.await,
                        }
                    }));
                }
            }
        }
    }
    act(d, ctx, rt, head, routed)
}

/// The coding whose precompressed sibling a static route may serve this request.
fn precompressed(
    route: &crate::routes::Route,
    head: &RequestHead,
) -> Option<crate::filters::codec::Coding> {
    route
        .filters()
        .compression()
        .filter(|s| s.precompressed)
        .and_then(|_| crate::filters::compress::wanted(head))
}

/// What the request phase sees of a request.
fn request_of<'a>(
    client: &'a Client,
    head: &'a RequestHead,
    route: &'a crate::routes::Route,
    subrequests: Option<&'a subrequest::Subrequests>,
) -> Req<'a> {
    Req {
        client,
        head,
        route: &route.name,
        regex: route.regex(),
        identity: None,
        fetch: subrequests.map(|s| s as &dyn crate::filters::Fetcher),
    }
}

/// Where the request phase keeps its state: the context's run when a filter keeps state,
/// chooses an upstream or names the client (they outlive the phase), else `local`, which
/// allocates nothing.
fn run_for<'r>(
    chain: &crate::filters::Chain,
    ctx: &'r mut RequestCtx,
    local: &'r mut Run,
) -> &'r mut Run {
    if chain.can(Caps::STATE | Caps::UPSTREAM_CHOICE | Caps::IDENTITY) {
        ctx.run()
    } else {
        local
    }
}

/// Runs the route's action (after its request filters).
fn act<'a, D: Downstream>(
    d: &'a mut D,
    ctx: &'a mut RequestCtx,
    rt: &'a WorkerRuntime,
    head: &'a RequestHead,
    routed: Routed<'a>,
) -> Started<'a> {
    if let Routed::Found(route) = &routed {
        if let (Action::Respond(r), true) = (&route.action, head.body == BodyKind::Empty) {
            // The fixed response, inline: the hello-world path.
            let persistence = d.persistence(head);
            return Started::Done(Ok(respond(d, ctx, head, route, r, persistence)));
        }
        if let Action::Kv(kv) = &route.action {
            let persistence = d.persistence(head);
            if let Some(p) = kv::try_read(d, ctx, head, route, kv, persistence) {
                return Started::Done(Ok(p));
            }
            return Started::Later(Later::new(kv::serve(d, ctx, head, route, kv)));
        }
        if let Action::Static(s) = &route.action {
            // Files, else the application (`try_files ... @app`).
            if let Some(app) = s.app_for(head) {
                let persistence = d.persistence(head);
                return Started::Later(Later::new(async move {
                    let steer = forward::Steer::default();
                    forward::forward(d, ctx, head, app, persistence, steer, &mut forward::Plain)
                        .await
                }));
            }
            // A file answers GET and HEAD only (the route takes any method for its application).
            if s.has_app() && !matches!(head.method, Method::Get | Method::Head) {
                let persistence = d.persistence(head);
                let mut lines = BytesMut::new();
                weir_http::response::put_header(&mut lines, b"Allow", b"GET, HEAD");
                return Started::Done(Ok(send_error(d, ctx, head, 405, &lines, persistence)));
            }
        }
        if let Action::Proxy(proxy) = &route.action {
            let persistence = d.persistence(head);
            return match &proxy.cache {
                Some(settings) => {
                    let stage = cache::Stage {
                        head,
                        proxy,
                        cache: settings,
                        zone: &rt.cfg.cache_zones[settings.zone],
                        scheme: scheme_of(d),
                        own: b"",
                    };
                    if cache::try_fresh_hit(d, ctx, stage, persistence) {
                        Started::Done(Ok(persistence))
                    } else {
                        Started::Later(Later::new(cache::cached(
                            d,
                            ctx,
                            stage,
                            route.index,
                            persistence,
                        )))
                    }
                }
                None => Started::Later(Later::new(async move {
                    let steer = forward::Steer::default();
                    forward::forward(d, ctx, head, proxy, persistence, steer, &mut forward::Plain)
                        .await
                })),
            };
        }
    }
    if let Routed::Found(route) = &routed {
        if matches!(route.action, Action::Admin) {
            let rt = ctx.rt.clone();
            if let Some(refused) = rt
                .cfg
                .admin
                .as_ref()
                .and_then(|a| crate::admin::guard::refuse(a, head))
            {
                let persistence = if head.body == BodyKind::Empty {
                    d.persistence(head)
                } else {
                    Persistence::Close
                };
                let head_only = head.method == Method::Head;
                return Started::Done(Ok(send_admin(d, ctx, refused, head_only, persistence)));
            }
        }
        if matches!(route.action, Action::Admin) && crate::admin::waits(head, &ctx.rt.cfg) {
            return Started::Later(Later::new(async move {
                // A body, if any, is not used: drained so the connection stays usable.
                read_body(d, ctx, false).await?;
                let rt = ctx.rt.clone();
                let reply = crate::admin::answer_later(head, &rt.cfg).await;
                let persistence = d.persistence(head);
                Ok(send_admin(d, ctx, reply, false, persistence))
            }));
        }
    }
    let wants_body = matches!(&routed, Routed::Found(route) if route.action.wants_body());
    let has_body = head.body != BodyKind::Empty;
    // A client waiting for 100-continue has not sent a body we will not use: answer and close
    // rather than read it.
    let skip_body = has_body && head.expect_continue && !wants_body;
    if has_body && !skip_body {
        return Started::Later(Later::new(async move {
            let body = read_body(d, ctx, wants_body).await?;
            // Decided after the body is in, so a shutdown that began meanwhile is announced.
            let persistence = d.persistence(head);
            match answer(d, ctx, head, routed, &body, persistence) {
                Answered::Done(persistence) => Ok(persistence),
                Answered::Stream(persistence, body) => {
                    stream_file(d, ctx, body).await?;
                    Ok(persistence)
                }
            }
        }));
    }
    let persistence = if skip_body {
        Persistence::Close
    } else {
        d.persistence(head)
    };
    match answer(d, ctx, head, routed, &[], persistence) {
        Answered::Done(persistence) => Started::Done(Ok(persistence)),
        Answered::Stream(persistence, body) => Started::Later(Later::new(async move {
            stream_file(d, ctx, body).await?;
            Ok(persistence)
        })),
    }
}

/// What [`answer`] left to do.
enum Answered {
    Done(Persistence),
    /// Stream the file's bytes after the head.
    Stream(Persistence, crate::actions::static_files::FileBody),
}

/// Answers a request routed to anything but a proxy (or to nothing).
fn answer<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    routed: Routed<'_>,
    body: &[u8],
    persistence: Persistence,
) -> Answered {
    let head_only = head.method == Method::Head;
    let route = match routed {
        Routed::Found(route) => route,
        Routed::MethodNotAllowed(allow) => {
            let mut lines = BytesMut::new();
            weir_http::response::put_header(&mut lines, b"Allow", &allow);
            return Answered::Done(send_error(d, ctx, head, 405, &lines, persistence));
        }
        Routed::NotFound => return Answered::Done(send_error(d, ctx, head, 404, &[], persistence)),
    };
    let persistence = match &route.action {
        Action::Respond(r) => respond(d, ctx, head, route, r, persistence),
        Action::Echo(e) => {
            let (content_type, payload) = e.render(head, body);
            let rt = ctx.rt.clone();
            let mut filter_lines = BytesMut::new();
            let mut reply = Reply::new(200, Framing::Length(payload.len() as u64));
            reply.add_lines(&rt.cfg.server_line);
            reply.add_lines(content_type);
            let persistence =
                send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
            if !head_only {
                send_body(d, ctx, &Bytes::from(payload), true);
            }
            persistence
        }
        Action::Health(only) => {
            let rt = ctx.rt.clone();
            let (status, body) = if d.shutting_down() {
                (503, r#"{"ready":false,"shutting_down":true}"#.to_string())
            } else {
                crate::admin::readiness(&rt.cfg, only.as_deref())
            };
            let body = Bytes::from(body);
            send_json(d, ctx, status, &body, head_only, persistence)
        }
        Action::Admin => {
            let rt = ctx.rt.clone();
            let reply = crate::admin::handle(head, &rt.cfg, rt.generation);
            send_admin(d, ctx, reply, head_only, persistence)
        }
        Action::NotFound => send_error(d, ctx, head, 404, &[], persistence),
        Action::AcmeChallenge(c) => {
            let (status, body) = crate::actions::acme_answer(c, head.path());
            let (content_type, lines) = (&b"text/plain"[..], Vec::new());
            let reply = crate::admin::AdminReply {
                status,
                content_type,
                body,
                lines,
            };
            send_admin(d, ctx, reply, head_only, persistence)
        }
        Action::Static(s) => match s.serve(head, precompressed(route, head)) {
            StaticReply::Canned { status, lines } => {
                send_error(d, ctx, head, status, &lines, persistence)
            }
            StaticReply::File {
                status,
                lines,
                framing,
                body,
            } => {
                let rt = ctx.rt.clone();
                let mut filter_lines = BytesMut::new();
                let mut reply = Reply::new(status, framing);
                reply.add_lines(&rt.cfg.server_line);
                reply.add_lines(&lines);
                let persistence =
                    send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
                match body {
                    StaticBody::None => {}
                    StaticBody::Inline(data) => {
                        send_body(d, ctx, &data, true);
                    }
                    StaticBody::Stream(body) => return Answered::Stream(persistence, body),
                }
                persistence
            }
        },
        Action::Proxy(_) | Action::Kv(_) => unreachable!("dispatched in start"),
    };
    Answered::Done(persistence)
}

/// A fixed response from config: its pre-encoded head, `Date`, the connection field, the body.
#[inline(always)]
fn respond<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &crate::routes::Route,
    r: &crate::actions::respond::Respond,
    persistence: Persistence,
) -> Persistence {
    if let Some(dynamic) = &r.dynamic {
        return respond_rendered(d, ctx, head, route, r, dynamic, persistence);
    }
    let mut filter_lines = BytesMut::new();
    let mut reply = Reply::new(r.status, Framing::Given);
    reply.base = Base::Encoded(r.head());
    let persistence = send_route_head(d, ctx, route, &mut reply, &mut filter_lines, persistence);
    if head.method != Method::Head {
        send_body(d, ctx, r.body(), true);
    }
    persistence
}

/// A response that uses request variables, rendered for this request.
#[cold]
fn respond_rendered<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    head: &RequestHead,
    route: &crate::routes::Route,
    r: &crate::actions::respond::Respond,
    dynamic: &crate::actions::respond::Dynamic,
    persistence: Persistence,
) -> Persistence {
    let client = client_of(d);
    let identity = ctx.identity();
    let env = crate::vars::Env {
        head,
        scheme: client.scheme,
        client: client.ip,
        route: &route.name,
        regex: route.regex(),
        identity: identity.as_deref(),
    };
    let rendered = match r.render(dynamic, &env) {
        Ok(rendered) => rendered,
        Err(why) => {
            if let Some(suppressed) = RENDER_LOG.admit() {
                tracing::warn!(route = %route.name, suppressed, "respond: {why}");
            }
            return send_error(d, ctx, head, 500, &[], persistence);
        }
    };
    let bodyless = matches!(rendered.status, 204 | 304);
    let framing = if bodyless {
        Framing::Given
    } else {
        Framing::Length(rendered.body.len() as u64)
    };
    let mut reply = Reply::new(rendered.status, framing);
    reply.add_lines(&rendered.lines);
    let persistence = send_head(d, ctx, &reply, persistence);
    if head.method != Method::Head && !bodyless {
        send_body(d, ctx, &rendered.body, true);
    }
    persistence
}

/// Responses whose variables rendered to something unsendable: logged at most so often.
static RENDER_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// Debug builds only, and only with `WEIR_FAULT_INJECTION` set in the environment: a request
/// for `/__weir_fault/panic` panics, so tests can prove that a panic closes one connection and
/// no worker (`tests/panics.rs`). Compiled out of release builds.
#[cfg(debug_assertions)]
fn fault_injection(head: &RequestHead) {
    if head.path() == b"/__weir_fault/panic" && std::env::var_os("WEIR_FAULT_INJECTION").is_some() {
        panic!("fault injection: a panic while serving a request");
    }
}

/// Reads the request body, keeping it when `keep` (echo), draining it otherwise.
async fn read_body<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    keep: bool,
) -> Result<BytesMut, Error> {
    let mut body = BytesMut::new();
    while let Some(chunk) = d.body_chunk().await? {
        ctx.bytes_received += chunk.len() as u64;
        if keep {
            body.extend_from_slice(&chunk);
        }
    }
    Ok(body)
}
