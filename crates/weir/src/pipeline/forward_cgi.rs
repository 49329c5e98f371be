//! The upstream phase for FastCGI upstreams (`protocol: fastcgi`), without a bridge: the
//! request goes to the application as FastCGI records written here, and its records come back
//! as the client's response, in the request's own task.
//!
//! Why apart from `forward.rs`: a FastCGI exchange buffers the request body whole before the
//! application is asked (a php-fpm child is bound to its connection from the accept: streamed
//! slow uploads held every child, the review of issue 53), frames both directions in records,
//! and reads a CGI header section, not an HTTP head. Until 2026-11-29 it went through an
//! in-memory HTTP/1.1 pipe to a task of its own (removed): an HTTP/1.1 encode and parse each
//! way, a task and a pipe per request: 44.9k user-space instructions a request against 32.2k
//! here (callgrind, `hello.php`), and 5 system calls against 4 (nginx makes 5). The socket side
//! (sending, reading records) is `proxy/fastcgi/conn.rs`.
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
use tokio::time::Instant;
use weir_http::{BodyKind, Method, Persistence, ResponseHead};

use super::downstream::Downstream;
use super::failure::aborted;
use super::forward::{fail, send_upstream_head, served, Target};
use super::hooks::{Steer, UpstreamHooks};
use super::RequestCtx;
use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::{build_request, phase_timeout, record_failure, RequestShape};
use crate::proxy::fastcgi::config::FastCgi;
use crate::proxy::fastcgi::conn::{
    connect_and_send, give_buf, next_record, put_idle, send, take_buf, Next,
};
use crate::proxy::fastcgi::{params, record, reply, script};
use crate::proxy::per_worker::WorkerUpstream;
use crate::proxy::tls::Socket;

static STDERR_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// One FastCGI exchange: what each of its steps needs.
struct Cgi<'a> {
    target: &'a Target<'a>,
    cfg: &'a FastCgi,
    per_worker: &'a WorkerUpstream,
    steer: Steer<'a>,
    /// The keep-alive decision made so far.
    persistence: Persistence,
    has_body: bool,
    total_deadline: Option<Instant>,
}

impl Cgi<'_> {
    /// Answers a failure before the response head (`forward::fail`).
    fn fail<D: Downstream>(
        &self,
        (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
        server: Option<usize>,
        e: Error,
    ) -> Result<Persistence, Error> {
        let p = (self.persistence, self.has_body);
        fail(d, ctx, self.target, server, e, p, (self.steer, hooks))
    }

    /// [`Cgi::fail`] for a failure of `server`'s, counted against its passive health.
    fn give_up<D: Downstream>(
        &self,
        io: (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
        server: usize,
        e: Error,
    ) -> Result<Persistence, Error> {
        record_failure(self.target.up, server, &e);
        self.fail(io, Some(server), e)
    }

    /// The response head to the client, through the hooks and the response filters.
    fn start<D: Downstream>(
        &self,
        (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
        server: usize,
        resp: &ResponseHead,
        persistence: Persistence,
    ) -> Persistence {
        served(ctx, (self.target.upstream, server), resp.status);
        let filters = self.steer.respond.unwrap_or(&self.target.route.filters);
        send_upstream_head(d, ctx, resp, filters, hooks, persistence)
    }
}

/// Proxies `target.head` to the FastCGI upstream `target.up` (`cfg` its settings).
pub(super) async fn forward<D: Downstream>(
    (d, ctx): (&mut D, &mut RequestCtx),
    (target, cfg, per_worker): (&Target<'_>, &FastCgi, &WorkerUpstream),
    shape: RequestShape<'_>,
    persistence: Persistence,
    (steer, hooks): (Steer<'_>, &mut dyn UpstreamHooks),
) -> Result<Persistence, Error> {
    let (up, head) = (target.up, target.head);
    let has_body = head.body != BodyKind::Empty;
    let x = Cgi {
        target,
        cfg,
        per_worker,
        steer,
        persistence,
        has_body,
        total_deadline: up.total_timeout.map(|t| Instant::now() + t),
    };
    let now = crate::clock::Mono::now();
    let Some(server) = per_worker.pick(up, target.client.ip, head, &[], now) else {
        return x.fail((d, ctx, hooks), None, Error::new(ErrorKind::NoServer));
    };
    // The request as the application is to see it.
    let mut built = take_buf(1024);
    build_request(
        &mut built,
        head,
        target.route,
        up,
        server,
        (&target.client, None),
        shape,
    );
    let Some(view) = params::Built::read(&built, has_body) else {
        let e = Error::with(
            ErrorKind::BadResponse,
            "an upstream head weir cannot read back",
        );
        return x.fail((d, ctx, hooks), Some(server), e);
    };
    // The script the path names, else the fallback, else weir's own 404 (403 for a directory
    // without its index script), the application not asked.
    let script = match script::resolve(cfg, view.path) {
        Ok(s) => s,
        Err(status) => {
            let answered = refuse(&x, (d, ctx, hooks), server, status);
            give_buf(built);
            return answered;
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
            return x.fail((d, ctx, hooks), Some(server), e);
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
    let (sock, reused) = match send(per_worker, up, server, &out, !replay).await {
        Ok(s) => s,
        Err(e) => {
            give_buf(out);
            return x.give_up((d, ctx, hooks), server, e);
        }
    };
    let again = (replay && reused).then_some(&out[..]);
    let relayed = relay(&x, (d, ctx, hooks), server, (sock, again, id)).await;
    give_buf(out);
    relayed
}

/// weir's own answer for a script that is not there (404) or a directory without its index
/// (403), through the hooks and filters as the application's would go.
fn refuse<D: Downstream>(
    x: &Cgi<'_>,
    (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
    server: usize,
    status: u16,
) -> Result<Persistence, Error> {
    let head = x.target.head;
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
    let persistence = if x.has_body {
        Persistence::Close
    } else {
        x.persistence
    };
    let persistence = x.start(
        (&mut *d, &mut *ctx, &mut *hooks),
        server,
        &resp,
        persistence,
    );
    if head.method != Method::Head {
        let body = Bytes::from_static(body);
        hooks.on_body(&body);
        super::send_body(d, ctx, &body, false);
    }
    super::finish_body(d, ctx);
    d.end_body();
    hooks.on_end(&resp);
    Ok(persistence)
}

/// The application's response: its header section, then its body, to the client.
async fn relay<D: Downstream>(
    x: &Cgi<'_>,
    (d, ctx, hooks): (&mut D, &mut RequestCtx, &mut dyn UpstreamHooks),
    server: usize,
    (mut sock, mut again, id): (Socket, Option<&[u8]>, u16),
) -> Result<Persistence, Error> {
    let (up, head) = (x.target.up, x.target.head);
    let bodyless = head.method == Method::Head;
    let mut rbuf = take_buf(4096);
    let mut section = BytesMut::new();
    // The header section.
    let deadline = Instant::now() + phase_timeout(up.response_header_timeout, x.total_deadline);
    let (resp, rest) = loop {
        let rec = match next_record(&mut sock, &mut rbuf, deadline).await {
            Ok(r) if r.id == id => r,
            // A kept connection closed before any answer, or out of step (another request's
            // record: an application that wrote after its END_REQUEST): a GET or HEAD goes
            // once more on a new connection; anything else is a 502 (it may have run).
            Ok(_) | Err(Next::Closed | Next::Io(_)) if again.is_some() && section.is_empty() => {
                rbuf.clear();
                let out = again.take().unwrap_or_default();
                match connect_and_send(up, server, out).await {
                    Ok(s) => sock = s,
                    Err(e) => return x.give_up((d, ctx, hooks), server, e),
                }
                continue;
            }
            Ok(_) => {
                let why = "a record of another request: the connection is out of step";
                let e = Error::with(ErrorKind::BadResponse, why);
                return x.give_up((d, ctx, hooks), server, e);
            }
            Err(n) => {
                let e = match n {
                    Next::Timeout => Error::new(ErrorKind::ResponseTimeout),
                    Next::Bad(_) => Error::with(ErrorKind::BadResponse, n.describe()),
                    _ => Error::with(ErrorKind::UpstreamReset, n.describe()),
                };
                return x.give_up((d, ctx, hooks), server, e);
            }
        };
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
                            return x.give_up((d, ctx, hooks), server, e);
                        }
                    }
                }
                if section.len() > reply::MAX_HEAD {
                    let e = Error::with(ErrorKind::BadResponse, "a CGI header section past 64 KiB");
                    return x.give_up((d, ctx, hooks), server, e);
                }
            }
            record::STDERR => stderr(&rec.content),
            record::END_REQUEST => {
                let why = "the application ended its response without a header section";
                let e = Error::with(ErrorKind::BadResponse, why);
                return x.give_up((d, ctx, hooks), server, e);
            }
            _ => {}
        }
    };
    if up.outlier.is_some() {
        let outcome = crate::proxy::outlier::Outcome::of_status(resp.status);
        up.record_outcome(server, outcome, crate::proxy::upstream::now_ms());
    }
    let persistence = x.start(
        (&mut *d, &mut *ctx, &mut *hooks),
        server,
        &resp,
        x.persistence,
    );
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
        let deadline = Instant::now() + phase_timeout(up.idle_read_timeout, x.total_deadline);
        let rec = match next_record(&mut sock, &mut rbuf, deadline).await {
            Ok(r) if r.id == id => r,
            Ok(_) => {
                let why = "a record of another request: the connection is out of step";
                return Err(aborted(ctx, (up, server, head), why));
            }
            Err(n) => return Err(aborted(ctx, (up, server, head), &n.describe())),
        };
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
                if x.cfg.keep_conn && complete && whole {
                    put_idle(&x.per_worker.fastcgi_idle, server, sock, up.max_idle);
                }
                hooks.on_end(&resp);
                return Ok(persistence);
            }
            _ => {}
        }
    }
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
