//! Forwarding one request to an upstream (the `proxy` action), as part of the client
//! connection it serves.
//!
//! 1. Pick a server among those up (primaries, else backups) with the upstream's policy.
//! 2. Take an idle pooled connection or connect (`connect` timeout).
//! 3. Send the head and stream the body: the client's body is decoded and re-framed as it
//!    arrives, never buffered whole (a 1 GiB upload needs no more memory than a small one).
//! 4. Read the response head (`response_header` timeout), then stream the body back,
//!    re-chunking when the upstream delimits it by closing. An upstream that dies mid-body aborts
//!    the client connection: the client sees a truncated message, never a short one presented as
//!    complete.
//! 5. Reuse the upstream connection when both messages ended cleanly and it may be kept.
//!
//! Failures before a response head map, in one place ([`Failure::status`]), to 502 (refused,
//! reset, closed, malformed), 504 (connect or header timeout) or 503 (no server up). Each is
//! logged with the upstream, the server and the reason, and counted by passive health. A stale
//! pooled connection is retried on a fresh one for idempotent requests. Other retries go to
//! another server when the upstream's `retries.on` allows it, the request is idempotent and has no
//! body, and the worker's retry budget has tokens.
//!
//! Size: about 1,000 lines, over the project's 700, because the whole exchange is methods of the
//! client connection today. The pipeline issue (10) splits it along the `Downstream` seam:
//! upstream selection and pooling to `proxy/`, response encoding to `weir-http`'s `Reply`.

use std::io;

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};
use weir_http::response::{put_date, put_header, put_status_line_with, put_u64};
use weir_http::{BodyDecoder, BodyEvent, BodyKind, Method, RequestHead, ResponseHead, Version};

use super::conn::{Conn, ConnError, Next};
use super::worker::WorkerRuntime;
use crate::proxy::headers::forwarded_node;
use crate::proxy::pool::UpstreamConn;
use crate::proxy::route::{HostMode, ProxyRoute};
use crate::proxy::upstream::{now_ms, Upstream};
use crate::reply::{self, ConnHeader};
use weir_http::hop::{is_hop_by_hop, ConnectionTokens};

/// Largest upstream response head accepted.
const MAX_UPSTREAM_HEAD: usize = 64 * 1024;
/// Most interim (1xx) responses relayed for one request; more is treated as a broken upstream.
const MAX_INTERIM: usize = 32;
/// Request bytes gathered before a write to the upstream.
const SEND_CHUNK: usize = 64 * 1024;

/// Why an exchange with an upstream failed before a response could be relayed.
#[derive(Debug)]
pub(crate) enum Failure {
    NoServer,
    Connect(io::Error),
    ConnectTimeout,
    /// The upstream reset or closed the connection before a complete response head.
    Reset(String),
    HeaderTimeout,
    Malformed(weir_http::ParseError),
}

impl Failure {
    /// The one mapping of upstream failures to status codes.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Failure::NoServer => 503,
            Failure::ConnectTimeout | Failure::HeaderTimeout => 504,
            Failure::Connect(_) | Failure::Reset(_) | Failure::Malformed(_) => 502,
        }
    }

    pub(crate) fn reason(&self) -> String {
        match self {
            Failure::NoServer => "no server up".into(),
            Failure::Connect(e) => format!("connect failed: {e}"),
            Failure::ConnectTimeout => "connect timeout".into(),
            Failure::Reset(why) => why.clone(),
            Failure::HeaderTimeout => "response header timeout".into(),
            Failure::Malformed(e) => format!("malformed response: {e}"),
        }
    }

    /// Whether the upstream's retry conditions allow another try.
    fn retryable(&self, up: &Upstream, replayable: bool) -> bool {
        match self {
            Failure::Connect(_) | Failure::ConnectTimeout => up.retry.on_connect,
            Failure::HeaderTimeout => replayable && up.retry.on_timeout,
            Failure::Reset(_) | Failure::Malformed(_) => replayable && up.retry.on_reset,
            Failure::NoServer => false,
        }
    }
}

/// What the cache stage decides when the response head arrives.
#[derive(Debug, Default)]
pub(crate) struct HeadPlan {
    /// Fields added to the client's response head (e.g. `Cache-Status`).
    pub extra: BytesMut,
    /// Keep a copy of the body, up to this many bytes, for storing.
    pub capture: Option<usize>,
    /// Publish every body chunk here too, for coalesced followers.
    pub tee: Option<std::sync::Arc<crate::cache::zone::Inflight>>,
    /// The zone whose budget for captures in flight the copy is charged to.
    pub zone: Option<std::sync::Arc<crate::cache::CacheZone>>,
}

/// The cache stage's decision at head time.
pub(crate) type PlanFn<'a> = Box<dyn FnMut(&ResponseHead) -> HeadPlan + 'a>;

/// The copy of a response body kept for the store (and published to followers), charged to the
/// zone's budget for captures in flight while it grows, and given back when it ends.
pub(crate) struct Capture {
    copy: BytesMut,
    limit: usize,
    tee: Option<std::sync::Arc<crate::cache::zone::Inflight>>,
    zone: Option<std::sync::Arc<crate::cache::CacheZone>>,
    reserved: u64,
}

impl Capture {
    /// Copies one chunk if it fits the object limit and the zone's in-flight budget (a chunk
    /// published to followers is held twice: in the copy and in their queue). `false`: stop
    /// capturing, the response will not be stored.
    fn take(&mut self, d: &bytes::Bytes) -> bool {
        if self.copy.len() + d.len() > self.limit {
            return false;
        }
        let cost = d.len() as u64 * if self.tee.is_some() { 2 } else { 1 };
        if let Some(z) = &self.zone {
            if !z.store.reserve(cost) {
                return false;
            }
            self.reserved += cost;
        }
        self.copy.extend_from_slice(d);
        if let Some(t) = &self.tee {
            t.push_chunk(d);
        }
        true
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(z) = &self.zone {
            z.store.release(self.reserved);
        }
    }
}

/// Hooks around one forward, used by the cache stage; `Exchange::default()` is a plain proxy.
#[derive(Default)]
pub(crate) struct Exchange<'a> {
    /// Called with the response head before it is relayed.
    pub plan: Option<PlanFn<'a>>,
    /// Drop the client's conditional and range fields (a cache fetches whole responses).
    pub strip_conditionals: bool,
    /// The response head relayed, once relayed.
    pub response: Option<ResponseHead>,
    /// The captured body, when capture was asked and the body completed within the limit.
    pub body: Option<BytesMut>,
    /// The status of a failure answered by weir (502/503/504), if any.
    pub failed: Option<u16>,
}

impl std::fmt::Debug for Exchange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("response", &self.response.as_ref().map(|r| r.status))
            .field("failed", &self.failed)
            .finish()
    }
}

/// Outcome of sending the request.
enum Sent {
    Ok,
    /// The upstream failed while we wrote; `stale` if nothing suggests it ever saw the request.
    Upstream(io::Error),
}

impl Conn {
    /// Proxies `head` per `route`; `next` is the keep-alive decision made so far.
    pub(super) async fn forward(
        &mut self,
        head: &RequestHead,
        route: &ProxyRoute,
        mut next: Next,
        ex: &mut Exchange<'_>,
    ) -> Result<Next, ConnError> {
        let rt = self.rt.clone();
        let up: &Upstream = &rt.cfg.upstreams[route.upstream];
        let wu = &rt.upstreams[route.upstream];
        wu.deposit_budget(up.retry.budget);
        let has_body = head.body != BodyKind::Empty;
        let idempotent = matches!(
            head.method,
            Method::Get
                | Method::Head
                | Method::Options
                | Method::Trace
                | Method::Put
                | Method::Delete
        );
        let replayable = idempotent && !has_body;
        let upgrade = wants_upgrade(head);
        let total_deadline = up.total_timeout.map(|t| Instant::now() + t);
        // Servers tried so far (bounded: retries are few).
        let mut tried_buf = [usize::MAX; 16];
        let mut ntried = 0usize;
        let mut fresh_only: Option<usize> = None;
        let mut retries = 0u32;
        let mut interims = 0usize;

        let (server, mut uconn, resp) = loop {
            // After a stale pooled connection, retry the same server on a new connection.
            let force_fresh = fresh_only.is_some();
            let server = match fresh_only.take() {
                Some(s) => s,
                None => match wu.pick(up, self.peer.ip(), head, &tried_buf[..ntried]) {
                    Some(s) => s,
                    None => {
                        return self.fail(up, None, Failure::NoServer, head, next, has_body, ex)
                    }
                },
            };
            if !tried_buf[..ntried].contains(&server) && ntried < tried_buf.len() {
                tried_buf[ntried] = server;
                ntried += 1;
            }
            let (mut uc, reused) = match checkout(wu, up, server, !force_fresh).await {
                Ok(checked_out) => checked_out,
                Err(f) => {
                    if retries < up.retry.attempts && f.retryable(up, true) && wu.take_budget() {
                        retries += 1;
                        continue;
                    }
                    return self.fail(up, Some(server), f, head, next, has_body, ex);
                }
            };
            let _active = wu.track_active(server);
            let sent = self
                .send_request(
                    &mut uc,
                    head,
                    route,
                    up,
                    server,
                    upgrade,
                    ex.strip_conditionals,
                )
                .await?;
            let result = match sent {
                Sent::Ok => loop {
                    interims += 1;
                    if interims > MAX_INTERIM {
                        break Err(Failure::Reset("too many 1xx responses".into()));
                    }
                    let r = read_response_head(
                        &mut uc,
                        head.method == Method::Head,
                        up,
                        total_deadline,
                        Interim::Return,
                    )
                    .await;
                    match r {
                        Ok(interim) if is_interim(interim.status) => {
                            self.relay_interim(&interim, head.version).await?;
                        }
                        r => break r,
                    }
                },
                Sent::Upstream(e) => Err(Failure::Reset(format!("write failed: {e}"))),
            };
            match result {
                Ok(resp) => {
                    if retries < up.retry.attempts
                        && replayable
                        && up.retry.on_status.contains(&resp.status)
                        && wu.take_budget()
                    {
                        tracing::warn!(upstream = %up.name, server = %up.servers[server].name, status = resp.status, "retrying on another server");
                        retries += 1;
                        continue;
                    }
                    break (server, uc, resp);
                }
                // A pooled connection the upstream had closed: the request never reached it.
                Err(Failure::Reset(_)) if reused && replayable && uc.buf.is_empty() => {
                    fresh_only = Some(server);
                }
                Err(f) => {
                    record_failure(up, server, &f);
                    if retries < up.retry.attempts
                        && f.retryable(up, replayable)
                        && wu.take_budget()
                    {
                        retries += 1;
                        continue;
                    }
                    return self.fail(up, Some(server), f, head, next, has_body, ex);
                }
            }
        };

        if upgrade && resp.status == 101 {
            return self.tunnel(uconn, &resp, route).await;
        }
        let chunked_out = matches!(resp.body, BodyKind::Chunked | BodyKind::CloseDelimited);
        if chunked_out && head.version == Version::Http10 {
            // An HTTP/1.0 client understands no chunks: the close delimits the body.
            next = Next::Close;
        }
        let plan = ex.plan.as_mut().map(|f| f(&resp)).unwrap_or_default();
        let chunked = chunked_out && head.version == Version::Http11;
        self.write_response_head(&resp, route, next, head.version, chunked, &plan.extra);
        let mut capture = plan.capture.map(|limit| Capture {
            // Sized exactly when the length is known, so that the stored body holds no slack.
            copy: match resp.body {
                BodyKind::Length(n) if n <= limit as u64 => BytesMut::with_capacity(n as usize),
                _ => BytesMut::new(),
            },
            limit,
            tee: plan.tee.clone(),
            zone: plan.zone.clone(),
            reserved: 0,
        });
        let reusable = self
            .relay_body(
                &mut uconn,
                &resp,
                up,
                server,
                chunked,
                total_deadline,
                &mut capture,
            )
            .await?;
        if reusable {
            wu.pool.borrow_mut().put(server, uconn);
        }
        // The reservation ends here; the stage stores the copy right after.
        ex.body = capture.map(|mut c| std::mem::take(&mut c.copy));
        ex.response = Some(resp);
        Ok(next)
    }

    /// Answers a failure and logs it; a request whose body was not (fully) read ends the connection.
    #[allow(clippy::too_many_arguments)]
    fn fail(
        &mut self,
        up: &Upstream,
        server: Option<usize>,
        f: Failure,
        head: &RequestHead,
        next: Next,
        has_body: bool,
        ex: &mut Exchange<'_>,
    ) -> Result<Next, ConnError> {
        ex.failed = Some(f.status());
        let server_name = server.map(|s| up.servers[s].name.as_str()).unwrap_or("-");
        tracing::warn!(upstream = %up.name, server = %server_name, status = f.status(), reason = %f.reason(), "upstream failure");
        let next = if has_body { Next::Close } else { next };
        let conn = ConnHeader::for_response(next != Next::KeepAlive, head.version);
        let server_header = self.rt.cfg.server_header.clone();
        reply::error(
            &mut self.out,
            f.status(),
            server_header.as_deref(),
            &[],
            conn,
            head.method == Method::Head,
        );
        Ok(next)
    }

    /// Writes the request head and streams the body to the upstream.
    #[allow(clippy::too_many_arguments)]
    async fn send_request(
        &mut self,
        uc: &mut UpstreamConn,
        head: &RequestHead,
        route: &ProxyRoute,
        up: &Upstream,
        server: usize,
        upgrade: bool,
        strip_conditionals: bool,
    ) -> Result<Sent, ConnError> {
        let mut req = super::conn::take_buf();
        build_request(
            &mut req,
            head,
            route,
            up,
            server,
            self.peer.ip(),
            upgrade,
            strip_conditionals,
            b"",
        );
        if head.body == BodyKind::Empty {
            let sent = match uc.stream.write_all(&req).await {
                Ok(()) => Sent::Ok,
                Err(e) => Sent::Upstream(e),
            };
            super::conn::give_buf(req);
            return Ok(sent);
        }
        self.stream_request_body(uc, head, req).await
    }

    /// Streams the client's body after `req` (the head), re-framing chunked bodies.
    async fn stream_request_body(
        &mut self,
        uc: &mut UpstreamConn,
        head: &RequestHead,
        mut req: BytesMut,
    ) -> Result<Sent, ConnError> {
        let rt = self.rt.clone();
        let limit = rt.cfg.limits.max_body_bytes;
        let chunked = head.body == BodyKind::Chunked;
        let mut decoder = BodyDecoder::new(head.body);
        let mut continued = !head.expect_continue;
        loop {
            match decoder.decode(&mut self.buf).map_err(ConnError::Parse)? {
                BodyEvent::Data(d) => {
                    if decoder.consumed() > limit {
                        return Err(ConnError::Parse(weir_http::ParseError::BodyTooLarge));
                    }
                    if chunked {
                        let _ = write!(req, "{:x}\r\n", d.len());
                        req.put_slice(&d);
                        req.put_slice(b"\r\n");
                    } else {
                        req.put_slice(&d);
                    }
                    if req.len() >= SEND_CHUNK {
                        if let Err(e) = uc.stream.write_all(&req).await {
                            return Ok(Sent::Upstream(e));
                        }
                        req.clear();
                    }
                }
                BodyEvent::Done(_) => {
                    if chunked {
                        req.put_slice(b"0\r\n\r\n");
                    }
                    return Ok(match uc.stream.write_all(&req).await {
                        Ok(()) => Sent::Ok,
                        Err(e) => Sent::Upstream(e),
                    });
                }
                BodyEvent::NeedMore => {
                    if !req.is_empty() {
                        if let Err(e) = uc.stream.write_all(&req).await {
                            return Ok(Sent::Upstream(e));
                        }
                        req.clear();
                    }
                    if !continued {
                        self.out.extend_from_slice(weir_http::response::CONTINUE);
                        continued = true;
                    }
                    self.flush().await?;
                    let n = timeout(rt.cfg.timeouts.body, self.read_more())
                        .await
                        .map_err(|_| ConnError::BodyTimeout)??;
                    if n == 0 {
                        return Err(ConnError::ClosedMidRequest);
                    }
                }
            }
        }
    }

    /// Relays an interim (1xx) response to an HTTP/1.1 client at once, hop-by-hop fields dropped.
    /// Its fields are never carried into the final response, and the cache never sees it.
    /// `100 Continue` is weir's own business (it answers `Expect` itself), and HTTP/1.0 clients
    /// get no 1xx at all (RFC 9110 §15.2).
    async fn relay_interim(
        &mut self,
        resp: &ResponseHead,
        client: Version,
    ) -> Result<(), ConnError> {
        if resp.status == 100 || client == Version::Http10 {
            return Ok(());
        }
        let out = &mut self.out;
        put_status_line_with(out, resp.status, &resp.reason);
        let tokens = ConnectionTokens::of(&resp.headers);
        for h in resp
            .headers
            .iter()
            .filter(|h| !is_hop_by_hop(&h.name, &tokens))
        {
            put_header(out, &h.name, &h.value);
        }
        out.put_slice(b"\r\n");
        self.flush().await
    }

    /// The response head sent to the client.
    fn write_response_head(
        &mut self,
        resp: &ResponseHead,
        route: &ProxyRoute,
        next: Next,
        client: Version,
        chunked: bool,
        extra: &[u8],
    ) {
        let out = &mut self.out;
        put_status_line_with(out, resp.status, &resp.reason);
        let tokens = ConnectionTokens::of(&resp.headers);
        let mut has_date = false;
        for h in &resp.headers {
            let n = &h.name[..];
            if is_hop_by_hop(n, &tokens) || route.response_edits.drops(n) {
                continue;
            }
            if n.eq_ignore_ascii_case(b"content-length") && resp.body != BodyKind::Empty {
                continue;
            }
            has_date |= n.eq_ignore_ascii_case(b"date");
            put_header(out, n, &h.value);
        }
        for (n, v) in route.response_edits.added() {
            put_header(out, n, v);
        }
        if route.via {
            put_header(out, b"Via", b"1.1 weir");
        }
        out.put_slice(extra);
        if !has_date {
            put_date(out);
        }
        match resp.body {
            BodyKind::Length(n) => {
                out.put_slice(b"Content-Length: ");
                put_u64(out, n);
                out.put_slice(b"\r\n");
            }
            _ if chunked => out.put_slice(b"Transfer-Encoding: chunked\r\n"),
            _ => {}
        }
        match (next, client) {
            (Next::Close, _) => out.put_slice(b"Connection: close\r\n"),
            (Next::KeepAlive, Version::Http10) => out.put_slice(b"Connection: keep-alive\r\n"),
            _ => {}
        }
        out.put_slice(b"\r\n");
    }

    /// Streams the response body; returns whether the upstream connection can be reused.
    #[allow(clippy::too_many_arguments)]
    async fn relay_body(
        &mut self,
        uc: &mut UpstreamConn,
        resp: &ResponseHead,
        up: &Upstream,
        server: usize,
        chunked: bool,
        total_deadline: Option<Instant>,
        capture: &mut Option<Capture>,
    ) -> Result<bool, ConnError> {
        let mut decoder = BodyDecoder::new(resp.body);
        loop {
            let event = decoder
                .decode(&mut uc.buf)
                .map_err(|e| self.aborted(up, server, &format!("bad response body: {e}")))?;
            match event {
                BodyEvent::Data(d) => {
                    if capture.as_mut().is_some_and(|c| !c.take(&d)) {
                        // Too large to store, or the zone's in-flight budget is spent: stop
                        // copying (followers are aborted by the stage, which sees no complete
                        // copy), keep relaying.
                        *capture = None;
                    }
                    if chunked {
                        let _ = write!(self.out, "{:x}\r\n", d.len());
                        self.out.put_slice(&d);
                        self.out.put_slice(b"\r\n");
                    } else {
                        self.out.put_slice(&d);
                    }
                    if self.out.len() >= SEND_CHUNK {
                        self.flush().await?;
                    }
                }
                BodyEvent::Done(_) => {
                    if chunked {
                        self.out.put_slice(b"0\r\n\r\n");
                    }
                    return Ok(resp.keep_alive && resp.body != BodyKind::CloseDelimited);
                }
                BodyEvent::NeedMore => {
                    self.flush().await?;
                    let deadline =
                        Instant::now() + phase_timeout(up.idle_read_timeout, total_deadline);
                    let n = match uc.read_by(deadline).await {
                        Ok(Ok(n)) => n,
                        Ok(Err(e)) => {
                            return Err(self.aborted(
                                up,
                                server,
                                &format!("read failed mid-body: {e}"),
                            ))
                        }
                        Err(_) => return Err(self.aborted(up, server, "idle timeout mid-body")),
                    };
                    if n == 0 {
                        if decoder.on_eof().is_ok() {
                            if chunked {
                                self.out.put_slice(b"0\r\n\r\n");
                            }
                            return Ok(false);
                        }
                        return Err(self.aborted(up, server, "upstream closed mid-body"));
                    }
                }
            }
        }
    }

    /// Logs an upstream failure after the response started: the client connection is cut.
    fn aborted(&self, up: &Upstream, server: usize, why: &str) -> ConnError {
        let s = &up.servers[server];
        up.record_passive_failure(server, now_ms());
        tracing::warn!(upstream = %up.name, server = %s.name, reason = %why, "upstream failed mid-response, aborting the client connection");
        ConnError::UpstreamAborted
    }

    /// After a 101: relay the response head, then bytes both ways until either side closes.
    async fn tunnel(
        &mut self,
        mut uc: UpstreamConn,
        resp: &ResponseHead,
        route: &ProxyRoute,
    ) -> Result<Next, ConnError> {
        self.out.put_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
        for h in &resp.headers {
            let n = &h.name[..];
            if n.eq_ignore_ascii_case(b"connection")
                || n.eq_ignore_ascii_case(b"keep-alive")
                || route.response_edits.drops(n)
            {
                continue;
            }
            put_header(&mut self.out, n, &h.value);
        }
        self.out.put_slice(b"Connection: upgrade\r\n\r\n");
        // Bytes the upstream sent after its head belong to the tunnel.
        self.out.put_slice(&uc.buf);
        uc.buf.clear();
        self.flush().await?;
        if !self.buf.is_empty() {
            uc.stream.write_all(&self.buf).await?;
            self.buf.clear();
        }
        let client = self.register()?;
        let _ = tokio::io::copy_bidirectional(client, &mut uc.stream).await;
        Ok(Next::Upgraded)
    }
}

/// One whole exchange with no client attached, for the cache's revalidations (inline and in the
/// background): pick a server, send `head` (client conditionals dropped) plus `extra` fields,
/// read the whole response. Bodies over `max_body` fail: the caller falls back to a plain forward.
pub(crate) async fn fetch_whole(
    rt: &WorkerRuntime,
    peer: std::net::IpAddr,
    head: &RequestHead,
    route: &ProxyRoute,
    extra: &[u8],
    max_body: usize,
) -> Result<(ResponseHead, bytes::Bytes), Failure> {
    let up: &Upstream = &rt.cfg.upstreams[route.upstream];
    let wu = &rt.upstreams[route.upstream];
    let mut stale_retry = true;
    loop {
        let server = wu.pick(up, peer, head, &[]).ok_or(Failure::NoServer)?;
        let (mut uc, reused) = checkout(wu, up, server, stale_retry).await?;
        let _active = wu.track_active(server);
        let mut req = BytesMut::with_capacity(512);
        build_request(&mut req, head, route, up, server, peer, false, true, extra);
        if let Err(e) = uc.stream.write_all(&req).await {
            if reused && stale_retry {
                stale_retry = false;
                continue;
            }
            return Err(Failure::Reset(format!("write failed: {e}")));
        }
        let resp = match read_response_head(
            &mut uc,
            head.method == Method::Head,
            up,
            None,
            Interim::Skip,
        )
        .await
        {
            Ok(r) => r,
            Err(Failure::Reset(_)) if reused && stale_retry && uc.buf.is_empty() => {
                stale_retry = false;
                continue;
            }
            Err(f) => {
                record_failure(up, server, &f);
                return Err(f);
            }
        };
        let mut decoder = BodyDecoder::new(resp.body);
        let mut body = BytesMut::new();
        loop {
            match decoder.decode(&mut uc.buf) {
                Err(e) => return Err(Failure::Malformed(e)),
                Ok(BodyEvent::Data(d)) => {
                    if body.len() + d.len() > max_body {
                        return Err(Failure::Reset(
                            "response larger than max_object_size".into(),
                        ));
                    }
                    body.extend_from_slice(&d);
                }
                Ok(BodyEvent::Done(_)) => break,
                Ok(BodyEvent::NeedMore) => {
                    let deadline = Instant::now() + up.idle_read_timeout;
                    match uc.read_by(deadline).await {
                        Ok(Ok(0)) if decoder.on_eof().is_ok() => break,
                        Ok(Ok(0)) => return Err(Failure::Reset("closed mid-body".into())),
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(Failure::Reset(format!("read failed: {e}"))),
                        Err(()) => return Err(Failure::HeaderTimeout),
                    }
                }
            }
        }
        if resp.keep_alive && resp.body != BodyKind::CloseDelimited {
            wu.pool.borrow_mut().put(server, uc);
        }
        return Ok((resp, weir_cache::object::exact(body)));
    }
}

/// Counts a failure against a server's passive health, logging when it goes down.
fn record_failure(up: &Upstream, server: usize, f: &Failure) {
    let s = &up.servers[server];
    if up.record_passive_failure(server, now_ms()) {
        tracing::warn!(upstream = %up.name, server = %s.name, reason = %f.reason(), down_for_ms = up.passive.down_ms, "server marked down (passive health)");
    }
}

/// Encodes the upstream request head: rewritten target, Host per the route, the client's fields
/// minus hop-by-hop ones (and conditionals when `strip_conditionals`), forwarding fields, edits,
/// `Via`, framing, and `extra` fields (pre-rendered lines).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_request(
    req: &mut BytesMut,
    head: &RequestHead,
    route: &ProxyRoute,
    up: &Upstream,
    server: usize,
    peer: std::net::IpAddr,
    upgrade: bool,
    strip_conditionals: bool,
    extra: &[u8],
) {
    req.put_slice(head.method.as_str().as_bytes());
    req.put_u8(b' ');
    route.upstream_target(head, req);
    req.put_slice(b" HTTP/1.1\r\n");
    let tokens = ConnectionTokens::of(&head.headers);
    let trusted = route.trusts(peer);
    // The validated, normalised authority: an absolute-form target's wins over the received Host
    // (RFC 9112 §3.2.2), which is never forwarded as received.
    let client_host = head.authority();
    match (&route.host, client_host) {
        (HostMode::Preserve, Some(h)) => put_header(req, b"Host", h),
        // An HTTP/1.0 request without Host still needs one upstream (RFC 9112 §3.2).
        (HostMode::Upstream, _) | (HostMode::Preserve, None) => {
            let s = &up.servers[server];
            put_header(req, b"Host", format!("{}:{}", s.host, s.port).as_bytes());
        }
        (HostMode::Fixed(v), _) => put_header(req, b"Host", v),
    }
    let mut prior_xff: Option<Vec<u8>> = None;
    let mut prior_fwd: Option<Vec<u8>> = None;
    for h in &head.headers {
        let n = &h.name[..];
        if is_hop_by_hop(n, &tokens)
            || n.eq_ignore_ascii_case(b"host")
            || n.eq_ignore_ascii_case(b"content-length")
            || n.eq_ignore_ascii_case(b"expect")
            || route.request_edits.drops(n)
            || (strip_conditionals && is_conditional(n))
        {
            continue;
        }
        if route.x_forwarded && n.eq_ignore_ascii_case(b"x-forwarded-for") {
            if trusted {
                append_list(&mut prior_xff, &h.value);
            }
            continue;
        }
        if route.x_forwarded
            && (n.eq_ignore_ascii_case(b"x-forwarded-proto")
                || n.eq_ignore_ascii_case(b"x-forwarded-host"))
            && !trusted
        {
            continue;
        }
        if route.forwarded && n.eq_ignore_ascii_case(b"forwarded") {
            if trusted {
                append_list(&mut prior_fwd, &h.value);
            }
            continue;
        }
        put_header(req, n, &h.value);
    }
    if route.x_forwarded {
        let mut ip = [0u8; 64];
        append_list(&mut prior_xff, format_ip(peer, &mut ip));
        put_header(
            req,
            b"X-Forwarded-For",
            prior_xff.as_deref().unwrap_or_default(),
        );
        if !trusted || head.header("x-forwarded-proto").is_none() {
            put_header(req, b"X-Forwarded-Proto", b"http");
        }
        if let (false, Some(h)) = (
            trusted && head.header("x-forwarded-host").is_some(),
            client_host,
        ) {
            put_header(req, b"X-Forwarded-Host", h);
        }
    }
    if route.forwarded {
        let mut element = format!("for={};proto=http", forwarded_node(peer));
        if let Some(h) = client_host.and_then(|h| std::str::from_utf8(h).ok()) {
            element.push_str(&format!(";host=\"{h}\""));
        }
        append_list(&mut prior_fwd, element.as_bytes());
        put_header(req, b"Forwarded", prior_fwd.as_deref().unwrap_or_default());
    }
    for (n, v) in route.request_edits.added() {
        put_header(req, n, v);
    }
    if route.via {
        put_header(req, b"Via", b"1.1 weir");
    }
    match head.body {
        BodyKind::Length(n) => {
            req.put_slice(b"Content-Length: ");
            put_u64(req, n);
            req.put_slice(extra);
            req.put_slice(b"\r\n");
        }
        BodyKind::Chunked => req.put_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyKind::Empty if head.header("content-length").is_some() => {
            req.put_slice(b"Content-Length: 0\r\n")
        }
        _ => {}
    }
    if upgrade {
        req.put_slice(b"Connection: upgrade\r\n");
        if let Some(u) = head.header("upgrade") {
            put_header(req, b"Upgrade", u);
        }
    }
    req.put_slice(extra);
    req.put_slice(b"\r\n");
}

/// Writes an IP address into `buf` without allocating; returns the text.
fn format_ip(ip: std::net::IpAddr, buf: &mut [u8; 64]) -> &[u8] {
    use std::io::Write as _;
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cur, "{ip}");
    let n = cur.position() as usize;
    &buf[..n]
}

/// Appends `item` to a comma-separated field value being built.
fn append_list(list: &mut Option<Vec<u8>>, item: &[u8]) {
    let v = list.get_or_insert_with(Vec::new);
    if !v.is_empty() {
        v.extend_from_slice(b", ");
    }
    v.extend_from_slice(item);
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

/// Whether the request asks for a protocol upgrade (WebSocket).
fn wants_upgrade(head: &RequestHead) -> bool {
    head.header("upgrade").is_some() && ConnectionTokens::of(&head.headers).contains(b"upgrade")
}

/// An idle pooled connection to `server` (when `pooled` allows), else a new one; connect failures
/// count against the server's passive health. Returns the connection and whether it was reused.
async fn checkout(
    wu: &crate::proxy::local::WorkerUpstream,
    up: &Upstream,
    server: usize,
    pooled: bool,
) -> Result<(UpstreamConn, bool), Failure> {
    if pooled {
        if let Some(c) = wu.pool.borrow_mut().take(server) {
            return Ok((c, true));
        }
    }
    match connect(up, server).await {
        Ok(c) => Ok((c, false)),
        Err(f) => {
            record_failure(up, server, &f);
            Err(f)
        }
    }
}

async fn connect(up: &Upstream, server: usize) -> Result<UpstreamConn, Failure> {
    let addr = **up.servers[server].addr.load();
    match timeout(up.connect_timeout, TcpStream::connect(addr)).await {
        Err(_) => Err(Failure::ConnectTimeout),
        Ok(Err(e)) => Err(Failure::Connect(e)),
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(UpstreamConn::new(stream))
        }
    }
}

fn phase_timeout(
    phase: std::time::Duration,
    total_deadline: Option<Instant>,
) -> std::time::Duration {
    match total_deadline {
        Some(d) => phase.min(d.saturating_duration_since(Instant::now())),
        None => phase,
    }
}

/// What `read_response_head` does with an interim (1xx, not 101) response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interim {
    /// Return it: the caller relays it to its client and reads again.
    Return,
    /// Drop it (no client to relay to).
    Skip,
}

/// A 1xx other than 101 (which is the final answer to an Upgrade).
fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

async fn read_response_head(
    uc: &mut UpstreamConn,
    head_request: bool,
    up: &Upstream,
    total: Option<Instant>,
    interim: Interim,
) -> Result<ResponseHead, Failure> {
    let deadline = Instant::now() + phase_timeout(up.response_header_timeout, total);
    loop {
        match weir_http::parse_response(&mut uc.buf, MAX_UPSTREAM_HEAD, head_request) {
            Ok(Some(resp)) if is_interim(resp.status) && interim == Interim::Skip => continue,
            Ok(Some(resp)) => return Ok(resp),
            Ok(None) => {}
            Err(e) => return Err(Failure::Malformed(e)),
        }
        match uc.read_by(deadline).await {
            Err(_) => return Err(Failure::HeaderTimeout),
            Ok(Err(e)) => return Err(Failure::Reset(format!("read failed: {e}"))),
            Ok(Ok(0)) => return Err(Failure::Reset("closed before a response".into())),
            Ok(Ok(_)) => {}
        }
    }
}
