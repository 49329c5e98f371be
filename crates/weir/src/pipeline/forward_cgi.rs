//! The upstream phase for FastCGI upstreams (`protocol: fastcgi`), without a bridge: the
//! request goes to the application as FastCGI records written here, and its records come back
//! as the client's response, in the request's own task.
//!
//! Why apart from `forward.rs`: a FastCGI exchange buffers the request body whole before the
//! application is asked (a php-fpm child is bound to its connection from the accept: streamed
//! slow uploads held every child, the review of issue 53), frames both directions in records,
//! and reads a CGI header section, not an HTTP head. Until 2026-11-29 it went through an
//! in-memory HTTP/1.1 pipe to a task of its own (removed): an HTTP/1.1 encode and parse each
//! way, a task and a pipe per request,
//! 44.9k user-space instructions a request against 32.9k here (callgrind, `hello.php`), and
//! 5 system calls against 4 (nginx makes 5).
//!
//! What the application sees is what the HTTP path would send: the head is built as for any
//! upstream (`exchange::build_request`: the route's target, the Host it chooses, the fields the
//! filters keep, drop and add) and read back as the CGI environment (`params::Built`), so a
//! filter binds the same way whichever protocol the upstream speaks. The response head is
//! written as weir's HTTP/1.1 (`reply::write_head`) and parsed, so the cache, the filters and the
//! logs see the same head as before.
//!
//! Failures: no server or a refused connection 502 (passive health counts it), no first record
//! within `timeouts.response_header` 504, a script that dies before its header section 502; after
//! the head, the client connection is cut (`failure::aborted`). A GET or HEAD sent on a kept
//! connection that closes before any answer goes again on a new connection to the same server
//! (a php-fpm child recycled); nothing is retried on another server (`retries` does not apply:
//! the CGI environment was made for this one, and a script need not be idempotent).

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use weir_http::{BodyKind, Framing, Method, Persistence, Reply, ResponseHead};

use super::downstream::Downstream;
use super::failure::aborted;
use super::forward::{fail, Target};
use super::hooks::{Steer, UpstreamHooks};
use super::{send_head_filtered, RequestCtx};
use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::{build_request, phase_timeout, record_failure, RequestShape};
use crate::proxy::fastcgi::config::FastCgi;
use crate::proxy::fastcgi::conn::{give_buf, put_idle, take_buf, take_idle_as, Target as Server};
use crate::proxy::fastcgi::{params, record, reply, script};
use crate::proxy::per_worker::WorkerUpstream;
use crate::proxy::tls::Socket;

static STDERR_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// Proxies `target.head` to the FastCGI upstream `target.up` (`cfg` its settings).
#[allow(clippy::too_many_arguments)]
pub(super) async fn forward<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    target: &Target<'_>,
    cfg: &FastCgi,
    per_worker: &WorkerUpstream,
    shape: RequestShape<'_>,
    persistence: Persistence,
    (steer, hooks): (Steer<'_>, &mut dyn UpstreamHooks),
) -> Result<Persistence, Error> {
    let (up, head) = (target.up, target.head);
    let has_body = head.body != BodyKind::Empty;
    let total_deadline = up.total_timeout.map(|t| Instant::now() + t);
    let failed = |d: &mut D, ctx: &mut RequestCtx, server, e, steer, hooks| {
        fail(
            d,
            ctx,
            target,
            server,
            e,
            (persistence, has_body),
            (steer, hooks),
        )
    };
    let now = crate::clock::Mono::now();
    let Some(server) = per_worker.pick(up, target.client.ip, head, &[], now) else {
        return failed(d, ctx, None, Error::new(ErrorKind::NoServer), steer, hooks);
    };
    // The request as the application is to see it.
    let mut built = take_buf(1024);
    build_request(
        &mut built,
        head,
        target.route,
        up,
        server,
        &target.client,
        shape,
    );
    let Some(view) = params::Built::read(&built, has_body) else {
        let e = Error::with(
            ErrorKind::BadResponse,
            "an upstream head weir cannot read back",
        );
        return failed(d, ctx, Some(server), e, steer, hooks);
    };
    // The script the path names, else the fallback, else weir's own 404 (403 for a directory
    // without its index script), the application not asked.
    let script = match script::resolve(cfg, view.path) {
        Ok(s) => s,
        Err(status) => {
            let (raw, body): (&[u8], &'static [u8]) = if status == 403 {
                (
                    b"HTTP/1.1 403 \r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\n",
                    b"Forbidden\n",
                )
            } else {
                (
                    b"HTTP/1.1 404 \r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\n",
                    b"Not Found\n",
                )
            };
            let mut raw = BytesMut::from(raw);
            let resp = weir_http::parse_response(&mut raw, 1024, head.method == Method::Head)
                .ok()
                .flatten()
                .ok_or_else(|| Error::new(ErrorKind::BadResponse))?;
            // A body not read: the connection closes after the answer (and says so).
            let persistence = if has_body {
                Persistence::Close
            } else {
                persistence
            };
            let persistence = start(d, ctx, target, server, &resp, persistence, steer, hooks);
            if head.method != Method::Head {
                let body = Bytes::from_static(body);
                hooks.on_body(&body);
                super::send_body(d, ctx, &body, false);
            }
            super::finish_body(d, ctx);
            d.end_body();
            hooks.on_end(&resp);
            give_buf(built);
            return Ok(persistence);
        }
    };
    // The body whole (held to the route's `max_body_bytes` by the client side), before the
    // application is asked; its length is CGI's CONTENT_LENGTH.
    let mut body = take_buf(0);
    if has_body {
        while let Some(data) = d.body_chunk().await? {
            ctx.bytes_received += data.len() as u64;
            body.extend_from_slice(&data);
        }
    }
    let mut request_uri = take_buf(head.target.len());
    request_uri.extend_from_slice(head.path());
    if let Some(q) = head.query() {
        request_uri.extend_from_slice(b"?");
        request_uri.extend_from_slice(q);
    }
    let peer = params::Peer {
        addr: d.peer(),
        https: target.client.scheme == "https",
        request_uri: &request_uri,
    };
    let mut env = take_buf(2048);
    params::put(
        cfg,
        &view,
        &script,
        &peer,
        Some(body.len() as u64),
        &mut env,
    );
    let mut out = take_buf(env.len() + body.len() + 64);
    let id = record::next_id();
    record::put_begin(&mut out, id, cfg.keep_conn);
    record::put_params_body(&mut out, id, &env);
    record::put_stream(&mut out, record::STDIN, id, &body);
    record::put(&mut out, record::STDIN, id, &[]);
    for b in [env, body, request_uri, built] {
        give_buf(b);
    }
    // The upstream's `max_connections`, counted here as exchanges in progress (a kept idle
    // connection holds no slot: php-fpm's pool bounds those).
    let _slot = match up.limits.take(crate::proxy::limits::Cap::Connections) {
        Ok(slot) => slot,
        Err(cap) => {
            give_buf(out);
            let e = Error::with(ErrorKind::Overflow, cap.as_str());
            return failed(d, ctx, Some(server), e, steer, hooks);
        }
    };
    let rt = ctx.rt.clone();
    let gauge = rt
        .cfg
        .metrics
        .then(|| &rt.server_metrics[target.upstream][server].in_flight);
    let _active = per_worker.track_active(server, gauge);
    // A GET or HEAD without a body may go again on a new connection when a kept one turns out
    // closed before any answer (nginx's `fastcgi_next_upstream error` for idempotent requests):
    // it needs no probe of the kept connection first, one system call a request.
    let replay = matches!(head.method, Method::Get | Method::Head) && !has_body;
    let sent = send(per_worker, up, server, &out, !replay).await;
    let (sock, reused) = match sent {
        Ok(s) => s,
        Err(e) => {
            give_buf(out);
            record_failure(up, server, &e);
            return failed(d, ctx, Some(server), e, steer, hooks);
        }
    };
    let again = (replay && reused).then_some(&out[..]);
    let relayed = relay(
        d,
        ctx,
        target,
        server,
        (sock, again, id),
        (cfg, per_worker),
        total_deadline,
        persistence,
        (steer, hooks),
    )
    .await;
    give_buf(out);
    relayed
}

/// Writes `out` on an idle connection to `server` (`probe`d first, or not), else a new one
/// (once more on a new one when the idle one fails the write: the application closed it
/// meanwhile). The connection, and whether it was a kept one.
async fn send(
    per_worker: &WorkerUpstream,
    up: &crate::proxy::upstream::Upstream,
    server: usize,
    out: &[u8],
    probe: bool,
) -> Result<(Socket, bool), Error> {
    if let Some(mut sock) = take_idle_as(&per_worker.fastcgi_idle, server, probe) {
        if sock.write_all(out).await.is_ok() && sock.flush().await.is_ok() {
            return Ok((sock, true));
        }
    }
    connect_and_send(up, server, out).await.map(|s| (s, false))
}

/// A new connection to `server`, `out` written on it.
async fn connect_and_send(
    up: &crate::proxy::upstream::Upstream,
    server: usize,
    out: &[u8],
) -> Result<Socket, Error> {
    let s = &up.servers[server];
    let to = Server {
        addr: s.addr.clone(),
        unix: s.unix.clone(),
        within: up.connect_timeout,
    };
    let mut sock = to.connect().await.map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => Error::new(ErrorKind::ConnectTimeout),
        _ => Error::with(ErrorKind::Connect, e),
    })?;
    let wrote = async {
        sock.write_all(out).await?;
        sock.flush().await
    };
    wrote
        .await
        .map_err(|e| Error::with(ErrorKind::UpstreamReset, format!("write: {e}")))?;
    Ok(sock)
}

/// Reads the next record into `rbuf` from `sock`, waiting until `deadline` for more bytes.
async fn next_record(
    sock: &mut Socket,
    rbuf: &mut BytesMut,
    deadline: Instant,
) -> Result<record::Record, Next> {
    loop {
        match record::next(rbuf) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(e) => return Err(Next::Bad(e.0)),
        }
        match tokio::time::timeout_at(deadline, sock.read_buf(rbuf)).await {
            Err(_) => return Err(Next::Timeout),
            Ok(Ok(0)) => return Err(Next::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Next::Io(e)),
        }
    }
}

/// Why no record came.
enum Next {
    Timeout,
    Closed,
    Bad(&'static str),
    Io(std::io::Error),
}

impl Next {
    fn describe(&self) -> String {
        match self {
            Next::Timeout => "no record in time".into(),
            Next::Closed => {
                "the application closed the connection before its response ended".into()
            }
            Next::Bad(why) => format!("bad record: {why}"),
            Next::Io(e) => format!("read: {e}"),
        }
    }
}

/// The application's response: its header section, then its body, to the client.
#[allow(clippy::too_many_arguments)]
async fn relay<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    target: &Target<'_>,
    server: usize,
    (mut sock, mut again, id): (Socket, Option<&[u8]>, u16),
    (cfg, per_worker): (&FastCgi, &WorkerUpstream),
    total_deadline: Option<Instant>,
    persistence: Persistence,
    (steer, hooks): (Steer<'_>, &mut dyn UpstreamHooks),
) -> Result<Persistence, Error> {
    let (up, head) = (target.up, target.head);
    let has_body = head.body != BodyKind::Empty;
    let bodyless = head.method == Method::Head;
    let mut rbuf = take_buf(4096);
    let mut section = BytesMut::new();
    // The header section.
    let deadline = Instant::now() + phase_timeout(up.response_header_timeout, total_deadline);
    let (resp, rest) = loop {
        let rec = match next_record(&mut sock, &mut rbuf, deadline).await {
            Ok(r) => r,
            // A kept connection closed before any answer: once more on a new one.
            Err(Next::Closed | Next::Io(_)) if again.is_some() && rbuf.is_empty() => {
                let out = again.take().unwrap_or_default();
                match connect_and_send(up, server, out).await {
                    Ok(s) => sock = s,
                    Err(e) => {
                        record_failure(up, server, &e);
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
                continue;
            }
            Err(n) => {
                let e = match n {
                    Next::Timeout => Error::new(ErrorKind::ResponseTimeout),
                    Next::Bad(_) => Error::with(ErrorKind::BadResponse, n.describe()),
                    _ => Error::with(ErrorKind::UpstreamReset, n.describe()),
                };
                record_failure(up, server, &e);
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
        };
        if rec.id != id {
            // Another request's record: the kept connection is out of step (an application
            // that wrote after its END_REQUEST). Dropped; a GET or HEAD goes again on a new
            // connection, anything else is a 502 (it may have run).
            if let (Some(out), true) = (again.take(), section.is_empty()) {
                rbuf.clear();
                match connect_and_send(up, server, out).await {
                    Ok(s) => sock = s,
                    Err(e) => {
                        record_failure(up, server, &e);
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
                continue;
            }
            let e = Error::with(
                ErrorKind::BadResponse,
                "a record of another request: the connection is out of step",
            );
            record_failure(up, server, &e);
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
        again = None;
        match rec.kind {
            record::STDOUT => {
                // Only the new bytes (and the 3 before them) can complete the blank line.
                let from = section.len().saturating_sub(3);
                section.extend_from_slice(&rec.content);
                if let Some(end) = reply::head_end(&section[from..]).map(|e| e + from) {
                    let mut h1 = BytesMut::with_capacity(end + 128);
                    let parsed = reply::write_head(&section[..end], bodyless, &mut h1)
                        .map_err(|e| e.0)
                        .and_then(|_| {
                            weir_http::parse_response(&mut h1, reply::MAX_HEAD * 2, bodyless)
                                .ok()
                                .flatten()
                                .ok_or("a CGI header section weir cannot relay")
                        });
                    match parsed {
                        Ok(resp) => break (resp, section.split_off(end).freeze()),
                        Err(why) => {
                            let e = Error::with(ErrorKind::BadResponse, why);
                            record_failure(up, server, &e);
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
                }
                if section.len() > reply::MAX_HEAD {
                    let e = Error::with(ErrorKind::BadResponse, "a CGI header section past 64 KiB");
                    record_failure(up, server, &e);
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
            record::STDERR => stderr(&rec.content),
            record::END_REQUEST => {
                let e = Error::with(
                    ErrorKind::BadResponse,
                    "the application ended its response without a header section",
                );
                record_failure(up, server, &e);
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
            _ => {}
        }
    };
    if up.outlier.is_some() {
        let outcome = crate::proxy::outlier::Outcome::of_status(resp.status);
        up.record_outcome(server, outcome, crate::proxy::upstream::now_ms());
    }
    let persistence = start(d, ctx, target, server, &resp, persistence, steer, hooks);
    let with_body = resp.body != BodyKind::Empty;
    if with_body && !rest.is_empty() {
        hooks.on_body(&rest);
        super::send_body(d, ctx, &rest, false);
    }
    // The body, as the application writes it (its `flush()` reaches the client at once).
    loop {
        if rbuf.len() < 8 {
            d.flush().await?;
        }
        let deadline = Instant::now() + phase_timeout(up.idle_read_timeout, total_deadline);
        let rec = match next_record(&mut sock, &mut rbuf, deadline).await {
            Ok(r) => r,
            Err(n) => return Err(aborted(ctx, (up, server, head), &n.describe())),
        };
        if rec.id != id {
            let why = "a record of another request: the connection is out of step";
            return Err(aborted(ctx, (up, server, head), why));
        }
        match rec.kind {
            record::STDOUT if with_body && !rec.content.is_empty() => {
                hooks.on_body(&rec.content);
                super::send_body(d, ctx, &rec.content, false);
                if d.should_flush() {
                    d.flush().await?;
                }
            }
            record::STDERR => stderr(&rec.content),
            record::END_REQUEST => {
                super::finish_body(d, ctx);
                d.end_body();
                let complete = record::end_status(&rec.content).is_some_and(|(_, p)| p == 0);
                let whole = rbuf.is_empty();
                drop(rec);
                give_buf(rbuf);
                if cfg.keep_conn && complete && whole {
                    put_idle(&per_worker.fastcgi_idle, server, sock, up.max_idle);
                }
                hooks.on_end(&resp);
                return Ok(persistence);
            }
            _ => {}
        }
    }
}

/// The response head to the client, through the hooks and the route's response filters.
#[allow(clippy::too_many_arguments)]
fn start<D: Downstream>(
    d: &mut D,
    ctx: &mut RequestCtx,
    target: &Target<'_>,
    server: usize,
    resp: &ResponseHead,
    persistence: Persistence,
    steer: Steer<'_>,
    hooks: &mut dyn UpstreamHooks,
) -> Persistence {
    ctx.upstream = Some((target.upstream as u32, server as u32));
    if let Some(run) = ctx.run_if_any() {
        run.served = Some((target.upstream, server));
    }
    ctx.upstream_head_at = Some(crate::clock::Mono::now());
    ctx.status = resp.status;
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
    let filters = steer.respond.unwrap_or(&target.route.filters);
    super::filter_response(ctx, filters, &mut reply, &mut filter_lines);
    send_head_filtered(d, ctx, &reply, persistence)
}

/// The application's stderr, logged (rate-limited: a client chooses how often a script fails).
fn stderr(content: &[u8]) {
    if let Some(suppressed) = STDERR_LOG.admit() {
        // Control bytes escaped: a script's message cannot forge a line of weir's log.
        let text = String::from_utf8_lossy(&content[..content.len().min(512)]);
        let text = text.trim_end().escape_debug();
        tracing::warn!(message = %text, suppressed, "FastCGI stderr");
    }
}
