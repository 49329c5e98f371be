//! The upstream side of an exchange, with no client attached: pick a connection (pooled or
//! new), encode the upstream request head, read a response head, and count failures against
//! passive health. `pipeline/forward.rs` relays between these and a client; [`fetch_whole`]
//! is a complete exchange for the cache's revalidations.
//!
//! Failures map to [`Error`] kinds here (connect, timeouts, resets, malformed responses), and
//! to statuses in one place (`error.rs`).

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use weir_http::hop::{ConnectionTokens, HopTest};
use weir_http::response::{put_header, put_u64};
use weir_http::{BodyKind, RequestHead, ResponseHead};

use super::per_worker::WorkerUpstream;
use super::pool::UpstreamConn;
use super::route::{HostMode, ProxyRoute};
use super::upstream::{now_ms, Upstream};
use crate::error::{Error, ErrorKind};
use crate::filters::Client;

/// Largest upstream response head accepted.
pub const MAX_UPSTREAM_HEAD: usize = 64 * 1024;

/// Counts a failure against a server's passive health, logging when it goes down.
pub fn record_failure(up: &Upstream, server: usize, e: &Error) {
    let s = &up.servers[server];
    s.health.count_failure();
    up.record_outcome(server, super::outlier::Outcome::Gateway, now_ms());
    if up.record_passive_failure(server, now_ms()) {
        tracing::warn!(upstream = %up.name, server = %s.name, reason = %e, down_for_ms = up.passive.down_ms, "server marked down (passive health)");
    }
}

/// An idle pooled connection to `server` (when `pooled` allows; idle ages as of `now`), else a
/// new one; connect failures count against the server's passive health. Returns the connection
/// and whether it was reused.
pub async fn checkout(
    per_worker: &WorkerUpstream,
    up: &Upstream,
    server: usize,
    pooled: bool,
    now: crate::clock::Mono,
) -> Result<(UpstreamConn, bool), Error> {
    if pooled {
        if let Some(c) = per_worker
            .pool
            .borrow_mut()
            .take(server, &up.servers[server].health, now)
        {
            return Ok((c, true));
        }
    }
    // FastCGI upstreams never come here: their exchange is `pipeline/forward_cgi.rs`'s; nor
    // HTTP/2 upstreams: theirs is `pipeline/forward_h2.rs`'s, on streams.
    if up.fastcgi.is_some() || up.h2 {
        return Err(Error::with(
            ErrorKind::Connect,
            "a FastCGI or HTTP/2 upstream's exchange is not a pooled connection's",
        ));
    }
    use super::limits::Cap;
    // A new connection: under the upstream's caps on connections and on requests waiting
    // for one.
    let connection = up.limits.take(Cap::Connections);
    let pending = up.limits.take(Cap::Pending);
    let caps = match (connection, pending) {
        (Ok(c), Ok(p)) => Some((c, p)),
        (Err(cap), _) | (_, Err(cap)) => {
            return Err(Error::with(ErrorKind::Overflow, cap.as_str()));
        }
    };
    // A new connection's futures are boxed (one allocation per connection): inline, their
    // ~1.5 KB made every request's boxed pipeline future too large for malloc's per-thread
    // cache, ~440 instructions per proxied request (callgrind 2026-11-27).
    let connected = Box::pin(connect(up, server)).await;
    match connected {
        Ok(mut c) => {
            // The connection keeps its slot; the wait for it is over.
            c.slot = caps.map(|(c, _)| c);
            Ok((c, false))
        }
        Err(e) => {
            record_failure(up, server, &e);
            Err(e)
        }
    }
}

pub(crate) async fn connect(up: &Upstream, server: usize) -> Result<UpstreamConn, Error> {
    let s = &up.servers[server];
    match super::socket::connect(s, up.tls.as_ref(), up.connect_timeout).await {
        Ok(stream) => Ok(UpstreamConn::new(tokio_util::either::Either::Left(stream))),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            Err(Error::new(ErrorKind::ConnectTimeout))
        }
        Err(e) => Err(Error::with(ErrorKind::Connect, e)),
    }
}

/// [`send`], each pause bounded by `pause` (the upstream's `timeouts.send`, nginx's
/// `proxy_send_timeout`, which bounds the time between two writes, not the whole): an upstream
/// that stops reading is an error of kind `TimedOut`, one that reads slowly is waited for.
pub async fn send_paced<S>(stream: &mut S, mut bytes: &[u8], pause: Duration) -> std::io::Result<()>
where
    S: tokio::io::AsyncWrite + Unpin,
{
    let stalled = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the upstream read nothing of the request for {pause:?} (timeouts.send)"),
        )
    };
    while !bytes.is_empty() {
        match tokio::time::timeout(pause, stream.write(bytes)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(stalled()),
        }
    }
    tokio::time::timeout(pause, stream.flush())
        .await
        .map_err(|_| stalled())?
}

/// Writes `bytes` to an upstream connection and flushes them (a TLS stream may otherwise keep
/// the last records in rustls' buffer).
pub async fn send<S>(stream: &mut S, bytes: &[u8]) -> std::io::Result<()>
where
    S: tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// A phase's timeout, cut short by the exchange's total deadline.
pub fn phase_timeout(phase: Duration, total_deadline: Option<Instant>) -> Duration {
    match total_deadline {
        Some(d) => phase.min(d.saturating_duration_since(Instant::now())),
        None => phase,
    }
}

/// What [`read_response_head`] does with an interim (1xx, not 101) response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interim {
    /// Return it: the caller relays it to its client and reads again.
    Return,
    /// Drop it (no client to relay to).
    Skip,
}

/// A 1xx other than 101 (which is the final answer to an Upgrade).
pub fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// When the response head must have come: `response_header` from now, cut short by the
/// exchange's total deadline.
pub fn response_deadline(up: &Upstream, total: Option<Instant>) -> Instant {
    Instant::now() + phase_timeout(up.response_header_timeout, total)
}

/// Reads a response head by `deadline` ([`response_deadline`]).
pub async fn read_response_head(
    uc: &mut UpstreamConn,
    head_request: bool,
    deadline: Instant,
    interim: Interim,
) -> Result<ResponseHead, Error> {
    loop {
        // Nothing read yet (the usual case right after the request went out): straight to the
        // read, no parse of an empty buffer.
        if !uc.buf.is_empty() {
            match weir_http::parse_response(&mut uc.buf, MAX_UPSTREAM_HEAD, head_request) {
                Ok(Some(resp)) if is_interim(resp.status) && interim == Interim::Skip => continue,
                Ok(Some(resp)) => return Ok(resp),
                Ok(None) => {}
                Err(e) => return Err(Error::with(ErrorKind::BadResponse, e)),
            }
        }
        read_response_more(uc, deadline).await?;
    }
}

/// One read of more of a response head, by `deadline`; an upstream that closes first is an
/// error.
pub async fn read_response_more(uc: &mut UpstreamConn, deadline: Instant) -> Result<(), Error> {
    more_of(uc.read_by(deadline).await)
}

/// What a read of a response head says ([`UpstreamConn::read_by`]'s result): more bytes, or
/// the error.
pub fn more_of(read: Result<std::io::Result<usize>, ()>) -> Result<(), Error> {
    match read {
        Err(_) => Err(Error::new(ErrorKind::ResponseTimeout)),
        Ok(Err(e)) => Err(Error::with(ErrorKind::UpstreamReset, format!("read: {e}"))),
        Ok(Ok(0)) => Err(Error::with(
            ErrorKind::UpstreamReset,
            "closed before a response",
        )),
        Ok(Ok(_)) => Ok(()),
    }
}

/// Fields that make a request conditional or partial.
fn is_conditional(name: &[u8]) -> bool {
    [
        &b"if-none-match"[..],
        b"if-modified-since",
        b"if-match",
        b"if-unmodified-since",
        b"if-range",
        b"range",
    ]
    .iter()
    .any(|c| name.eq_ignore_ascii_case(c))
}

/// Whether the request asks for a protocol upgrade (WebSocket) that is relayed upstream.
///
/// Never `h2c`: a client that upgraded to cleartext HTTP/2 through the proxy would speak to the
/// upstream directly, past every route and filter after the first request (the "h2c smuggling"
/// hole). Its `Upgrade` is then dropped as the hop-by-hop field it is, with `HTTP2-Settings`.
pub fn wants_upgrade(head: &RequestHead) -> bool {
    // `Connection: upgrade` lists a token besides `close` and `keep-alive`, which the parser
    // notes: without one, no field is looked up (~60 instructions per proxied request).
    if !head.fields().connection().other {
        return false;
    }
    let Some(upgrade) = head.header("upgrade") else {
        return false;
    };
    let h2c = upgrade.split(|b| *b == b',').any(|token| {
        let token = token.trim_ascii();
        let name = token.split(|b| *b == b'/').next().unwrap_or(token);
        name.eq_ignore_ascii_case(b"h2c")
    });
    !h2c && ConnectionTokens::of_fields(head.fields()).contains(b"upgrade")
}

/// How the upstream request differs from the client's.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestShape<'a> {
    /// Relay `Upgrade` and ask for it (`Connection: upgrade`).
    pub upgrade: bool,
    /// Drop the client's conditional and range fields (a cache fetches whole responses).
    pub strip_conditionals: bool,
    /// Pre-rendered field lines added last (a revalidation's validators).
    pub extra: &'a [u8],
    /// The request id: the field's lowercase name (the client's is not relayed), and the
    /// line sent in its place as its start (`Name: `) and the id (written straight into the
    /// request: joining them first cost ~220 instructions per proxied request).
    pub request_id: Option<(&'a str, &'a [u8], &'a [u8])>,
    /// Who an authentication filter said the client is (for the filters' templates).
    pub identity: Option<&'a crate::vars::Identity>,
}

/// Encodes the upstream request head: rewritten target, Host per the route, the client's fields
/// minus hop-by-hop ones, framing, and those the route's filters drop; then the filters' fields
/// (forwarding, edits, `Via`), the framing and `extra`.
pub fn build_request(
    req: &mut BytesMut,
    head: &RequestHead,
    route: &ProxyRoute,
    up: &Upstream,
    server: usize,
    (client, trace): (
        &Client,
        Option<(&crate::trace::context::TraceContext, &[u8; 8])>,
    ),
    shape: RequestShape<'_>,
) {
    req.put_slice(head.method.as_str().as_bytes());
    req.put_u8(b' ');
    route.upstream_target(head, req);
    req.put_slice(b" HTTP/1.1\r\n");
    let hop = HopTest::of_fields(head.fields());
    // The validated, normalised authority: an absolute-form target's wins over the received Host
    // (RFC 9112 §3.2.2), which is never forwarded as received.
    match (&route.host, head.authority()) {
        (HostMode::Preserve, Some(h)) => put_header(req, b"Host", h),
        // An HTTP/1.0 request without Host still needs one upstream (RFC 9112 §3.2).
        (HostMode::Upstream, _) | (HostMode::Preserve, None) => {
            let s = &up.servers[server];
            put_header(req, b"Host", s.authority().as_bytes());
        }
        (HostMode::Fixed(v), _) => put_header(req, b"Host", v),
    }
    for (n, value) in head.fields().iter() {
        if hop.is_hop_by_hop(n)
            || n.eq_ignore_ascii_case(b"host")
            || n.eq_ignore_ascii_case(b"content-length")
            || n.eq_ignore_ascii_case(b"expect")
            // weir's own mark: added by a peer fill (`extra`), never relayed from a client.
            || n.eq_ignore_ascii_case(crate::cluster::PEER_HEADER.as_bytes())
            || (shape.strip_conditionals && is_conditional(n))
            || route.filters.drops_upstream(client, n)
            || shape
                .request_id
                .is_some_and(|(id, _, _)| crate::filters::aliases::folds_to(n, id.as_bytes()))
            || (trace.is_some() && crate::trace::context::is_trace_field(n))
        {
            continue;
        }
        put_header(req, n, value);
    }
    let up = crate::filters::Upward {
        client,
        head,
        identity: shape.identity,
    };
    route.filters.upstream_fields(&up, req);
    if let Some(id) = shape.identity {
        req.put_slice(&id.upstream_fields);
    }
    if let Some((_, start, id)) = shape.request_id {
        req.put_slice(start);
        req.put_slice(id);
        req.put_slice(b"\r\n");
    }
    // With `tracing`: weir's `traceparent` (and the client's `tracestate`), in place of the
    // client's.
    if let Some((t, parent)) = trace {
        t.put_upstream_lines(parent, head, req);
    }
    match head.body {
        BodyKind::Length(n) => {
            req.put_slice(b"Content-Length: ");
            put_u64(req, n);
            req.put_slice(b"\r\n");
        }
        BodyKind::Chunked => req.put_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyKind::Empty if head.header("content-length").is_some() => {
            req.put_slice(b"Content-Length: 0\r\n")
        }
        _ => {}
    }
    if shape.upgrade {
        req.put_slice(b"Connection: upgrade\r\n");
        if let Some(u) = head.header("upgrade") {
            put_header(req, b"Upgrade", u);
        }
    }
    req.put_slice(shape.extra);
    req.put_slice(b"\r\n");
}
