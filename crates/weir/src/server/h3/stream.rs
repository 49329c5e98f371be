//! One HTTP/3 request stream as a `pipeline::Downstream`. The request head becomes a
//! `weir_http::RequestHead` by the same conversion HTTP/2 uses (`convert.rs`: one
//! parser and one encoder for every protocol); the body comes from the stream's DATA frames,
//! the response goes out as HEADERS and DATA frames. Body bytes are handed to `h3` as the
//! producers give them (a cache hit's stored body is not copied); each write waits for QUIC's
//! flow control, bounded by `timeouts.write` per stall.
//!
//! Interim (1xx) responses are not sent over HTTP/3: `100 Continue` is implied (clients do not
//! wait for it over HTTP/3 in practice) and `103 Early Hints` is dropped.

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Buf, Bytes};
use h3::server::{RequestResolver, RequestStream};
use weir_http::{Persistence, Reply, RequestHead, Version};

use super::convert;
use super::shared::ConnShared;
use crate::error::{Error, ErrorKind};
use crate::pipeline::downstream::Downstream;
use crate::runtime::WorkerRuntime;
use crate::server::outbox::{Out, Outbox};

type Stream = RequestStream<super::guard::GuardedBidi, Bytes>;

/// One stream being answered.
pub(super) struct H3Stream {
    shared: Rc<ConnShared>,
    /// The client's address on the connection's current path when the request arrived: QUIC
    /// connections migrate (RFC 9000 §9), and a client that moved is judged, limited and logged
    /// by where it is now, not where it connected from (issue 52).
    peer: SocketAddr,
    /// What the handshake settled when the request was read.
    tls: Rc<crate::tls::TlsInfo>,
    rt: Rc<WorkerRuntime>,
    stream: Stream,
    /// The first body bytes, read to learn whether a body follows a head without a length.
    first: Option<Bytes>,
    /// The request body was read to its end (or there is none).
    body_done: bool,
    body_read: u64,
    /// The request's `content-length`: its body must be exactly that long (RFC 9114 §4.1.2,
    /// malformed otherwise), or the origin would wait for bytes that never come or get more
    /// than the head announced.
    declared: Option<u64>,
    /// A route's `shape` cap below `limits.max_body_bytes` (`u64::MAX`: none).
    body_cap: u64,
    /// The route's wait between body bytes, over `timeouts.body`.
    body_wait: Option<std::time::Duration>,
    /// The response, queued until the pipeline flushes.
    out: Outbox<http::Response<()>, http::HeaderMap>,
    /// The head was sent: a failure now can only reset the stream.
    started: bool,
    finished: bool,
    request_trailers: Vec<weir_http::Header>,
    /// Why the message is malformed (RFC 9114 §4.1.2: a body whose length is not its
    /// `content-length`, a connection-specific field in its head or trailers): a stream error
    /// of type H3_MESSAGE_ERROR, as `h3` treats a malformed head and HTTP/2 a malformed message,
    /// not an answer.
    malformed: Option<&'static str>,
}

impl std::fmt::Debug for H3Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Stream")
            .field("peer", &self.peer)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// Whether the request carries a field HTTP/3 forbids (RFC 9114 §4.2: connection-specific
/// fields, and `te` other than `trailers`), or more than one `host`: malformed, refused with
/// H3_MESSAGE_ERROR rather than dropped or picked from.
fn connection_specific(h: &http::HeaderMap) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| h.contains_key(*n))
        || h.get_all(http::header::TE)
            .iter()
            .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
        || h.get_all(http::header::HOST).iter().nth(1).is_some()
}

/// The `content-length` the fields say: every value (and every element of a list) the same
/// digits; `None` when they are not.
fn declared_length(h: &http::HeaderMap) -> Option<u64> {
    let mut found = None;
    for v in h.get_all(http::header::CONTENT_LENGTH) {
        for part in v.as_bytes().split(|b| *b == b',') {
            let t = part.trim_ascii();
            if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u64 = std::str::from_utf8(t).ok()?.parse().ok()?;
            if found.is_some_and(|f| f != n) {
                return None;
            }
            found = Some(n);
        }
    }
    found
}

/// Whether `method` may be served from 0-RTT early data (RFC 8470 §3: safe methods only).
fn safe(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// Reads the request on one stream and answers it through the pipeline. `true` when the
/// stream failed before a request was read (reset, malformed, too large): the connection
/// counts those.
pub(super) async fn serve(
    resolver: RequestResolver<super::guard::Guarded, Bytes>,
    shared: Rc<ConnShared>,
) -> bool {
    let mut rt = shared.state.cached();
    shared.state.refresh(&mut rt);
    let resolved = tokio::time::timeout(rt.cfg.timeouts.header, resolver.resolve_request()).await;
    let (request, mut stream) = match resolved {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::debug!(peer = %shared.peer, error = %e, "HTTP/3 request not read");
            return !e.is_h3_no_error();
        }
        Err(_) => return true,
    };
    let early = shared.early();
    let Some(listener) = rt.cfg.listener_index(&shared.listener_id) else {
        stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
        return false;
    };
    shared.state.metrics.h3_requests.inc();
    let (mut parts, ()) = request.into_parts();
    let mut d = H3Stream {
        tls: shared.tls(early),
        peer: shared.current_peer(),
        shared,
        rt: rt.clone(),
        stream,
        first: None,
        body_done: false,
        body_read: 0,
        declared: None,
        body_cap: u64::MAX,
        body_wait: None,
        out: Outbox::default(),
        started: false,
        finished: false,
        request_trailers: Vec::new(),
        malformed: None,
    };
    let result = match d.has_body(&parts).await {
        Err(e) => Err(e),
        Ok(_) if connection_specific(&parts.headers) => {
            Err(d.mark_malformed("connection-specific field in an HTTP/3 request"))
        }
        Ok(_) if early && !safe(&parts.method) => Err(Error::with(
            ErrorKind::TooEarly,
            "unsafe method in 0-RTT early data",
        )),
        Ok(has_body) => {
            if early {
                // RFC 8470 §5.1: the origin learns the request came in early data.
                parts
                    .headers
                    .insert("early-data", http::HeaderValue::from_static("1"));
            } else {
                parts.headers.remove("early-data");
            }
            match convert::request_head(&parts, has_body, &rt.cfg.limits.head) {
                Ok(head) => {
                    match crate::pipeline::limits::check_declared_length(&head, &rt.cfg.limits) {
                        Ok(()) => crate::pipeline::handle(&mut d, rt.clone(), listener, &head)
                            .await
                            .map(drop),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        }
    };
    if let Some(why) = d.malformed {
        // Whatever the pipeline made of the failed read, a malformed message is a stream
        // error: nothing it queued goes out.
        tracing::debug!(peer = %d.shared.peer, reason = why, "HTTP/3 message malformed");
        d.stream.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
        d.stream.stop_stream(h3::error::Code::H3_MESSAGE_ERROR);
        // Counted as a failed stream, as `h3`'s own refusals are: a client resetting
        // stream after stream this way meets the connection's reset limit.
        return true;
    }
    if let Err(e) = result {
        tracing::debug!(peer = %d.shared.peer, reason = %e, "HTTP/3 stream failed");
        match e.status() {
            Some(status) if !d.started => d.send_canned(status),
            _ => {
                d.stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return false;
            }
        }
    }
    d.out.end();
    if d.flush().await.is_err() {
        d.stream.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
    }
    false
}

impl H3Stream {
    /// Whether a body follows the head: its `content-length`, or else whether the stream
    /// ends (a GET's FIN comes with its HEADERS) or brings data (kept for `body_chunk`).
    async fn has_body(&mut self, parts: &http::request::Parts) -> Result<bool, Error> {
        if parts.headers.contains_key(http::header::CONTENT_LENGTH) {
            // The length the codec would frame the body by (`3, 3` is 3, RFC 9110 §8.6): a
            // value it refuses, or values that differ, are malformed here (issue 52's review:
            // a separate parse that failed on `3,3` left the body unchecked and smuggled).
            self.declared = match declared_length(&parts.headers) {
                Some(n) => Some(n),
                None => return Err(self.mark_malformed("content-length not one length")),
            };
            if self.declared != Some(0) {
                return Ok(true);
            }
            // `content-length: 0` and then DATA is malformed: the stream's end (or its first
            // bytes) settles it before the request is served, as for a head without a length.
            while let Some(data) = self.next_data().await? {
                if !data.is_empty() {
                    return Err(self.mark_malformed("DATA after content-length: 0"));
                }
            }
            return Ok(false);
        }
        match self.next_data().await? {
            None => Ok(false),
            Some(first) => {
                self.first = Some(first);
                Ok(true)
            }
        }
    }

    /// The next body bytes from the stream (within `timeouts.body`), or `None` at its end,
    /// once its trailers (if any) are read.
    async fn next_data(&mut self) -> Result<Option<Bytes>, Error> {
        let wait = self.body_wait.unwrap_or(self.rt.cfg.timeouts.body);
        match tokio::time::timeout(wait, self.stream.recv_data()).await {
            Err(_) => Err(Error::new(ErrorKind::BodyTimeout)),
            Ok(Err(e)) => Err(h3_error(e)),
            Ok(Ok(None)) => {
                self.read_trailers().await?;
                self.body_done = true;
                Ok(None)
            }
            Ok(Ok(Some(mut data))) => Ok(Some(data.copy_to_bytes(data.remaining()))),
        }
    }

    async fn read_trailers(&mut self) -> Result<(), Error> {
        let wait = self.body_wait.unwrap_or(self.rt.cfg.timeouts.body);
        let map = match tokio::time::timeout(wait, self.stream.recv_trailers()).await {
            Ok(Ok(map)) => map,
            // `h3` refuses pseudo-header fields in trailers (vendor/h3/WEIR-PATCH.md).
            Ok(Err(h3::error::StreamError::StreamError { code, .. }))
                if code == h3::error::Code::H3_MESSAGE_ERROR =>
            {
                return Err(self.mark_malformed("malformed HTTP/3 trailers"));
            }
            // Reset, connection lost, or no end in time: the body did not end, and nothing
            // may go on as if it had (the review of issue 52: a cancelled upload reached the
            // origin as complete).
            Ok(Err(e)) => return Err(h3_error(e)),
            Err(_) => return Err(Error::new(ErrorKind::BodyTimeout)),
        };
        if let Some(map) = map {
            if connection_specific(&map) {
                return Err(self.mark_malformed("connection-specific field in HTTP/3 trailers"));
            }
            self.request_trailers = map
                .iter()
                .map(|(n, v)| weir_http::Header {
                    name: Bytes::copy_from_slice(n.as_str().as_bytes()),
                    value: Bytes::copy_from_slice(v.as_bytes()),
                })
                .collect();
        }
        Ok(())
    }

    /// Marks the message malformed: the stream is refused with H3_MESSAGE_ERROR.
    fn mark_malformed(&mut self, why: &'static str) -> Error {
        self.malformed = Some(why);
        weir_http::ParseError::BadRequest(why).into()
    }

    /// The canned response for `status`, when nothing was sent yet.
    fn send_canned(&mut self, status: u16) {
        let body = crate::error::canned_body(status);
        let reply = crate::error::canned(status, body.len(), &self.rt.cfg.server_line);
        let head = convert::response_head(&reply);
        drop(reply);
        self.out.clear();
        self.out.head(head, false);
        self.out.data(Bytes::from(body));
        self.out.end();
    }

    fn count_body(&mut self, n: usize) -> Result<(), Error> {
        let limit = self.rt.cfg.limits.body_ceiling.min(self.body_cap);
        self.body_read += n as u64;
        if self.body_read > limit {
            return Err(weir_http::ParseError::BodyTooLarge.into());
        }
        if self.declared.is_some_and(|d| self.body_read > d) {
            return Err(self.mark_malformed("body longer than content-length"));
        }
        Ok(())
    }

    /// The body ended (FIN): it must be as long as `content-length` said.
    fn check_end(&mut self) -> Result<(), Error> {
        match self.declared {
            Some(d) if self.body_read != d => {
                Err(self.mark_malformed("body shorter than content-length"))
            }
            _ => Ok(()),
        }
    }
}

/// An `h3` stream error as the pipeline sees it: the client went away.
fn h3_error(e: h3::error::StreamError) -> Error {
    Error::with(ErrorKind::ClientClosed, e)
}

/// Runs one write, bounded by `timeouts.write`.
async fn timed<T>(
    stall: std::time::Duration,
    write: impl std::future::Future<Output = Result<T, h3::error::StreamError>>,
) -> Result<T, Error> {
    match tokio::time::timeout(stall, write).await {
        Err(_) => Err(Error::new(ErrorKind::WriteTimeout)),
        Ok(r) => r.map_err(h3_error),
    }
}

impl Downstream for H3Stream {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn version(&self) -> Version {
        // Framing of unknown length is available, as with HTTP/1.1 (DATA frames until FIN).
        Version::Http11
    }

    fn protocol(&self) -> &'static str {
        "HTTP/3"
    }

    fn via_version(&self) -> &'static str {
        "3"
    }

    fn persistence(&self, _head: &RequestHead) -> Persistence {
        Persistence::KeepAlive
    }

    fn shutting_down(&self) -> bool {
        self.shared.state.shutting_down.get()
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        Some(&self.tls)
    }

    fn cap_body(&mut self, max: u64) {
        self.body_cap = self.body_cap.min(max);
    }

    fn body_timeout(&mut self, wait: std::time::Duration) {
        self.body_wait = Some(wait);
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        if let Some(first) = self.first.take() {
            self.count_body(first.len())?;
            return Ok(Some(first));
        }
        if self.body_done {
            return Ok(None);
        }
        match self.next_data().await? {
            None => {
                self.check_end()?;
                Ok(None)
            }
            Some(chunk) => {
                self.count_body(chunk.len())?;
                Ok(Some(chunk))
            }
        }
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        std::mem::take(&mut self.request_trailers)
    }

    async fn send_interim(&mut self, _reply: &Reply<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence {
        self.out.head(convert::response_head(reply), false);
        persistence
    }

    fn send_data(&mut self, data: &Bytes) {
        self.out.data(data.clone());
    }

    fn send_trailers(&mut self, fields: &[weir_http::Header]) {
        let map = weir_http::header_map(fields);
        if !map.is_empty() {
            self.out.trailers(map);
        }
    }

    fn end_body(&mut self) {
        self.out.end();
    }

    fn should_flush(&self) -> bool {
        self.out.should_flush()
    }

    async fn flush(&mut self) -> Result<(), Error> {
        if self.finished {
            return Ok(());
        }
        let stall = self.rt.cfg.timeouts.write;
        while let Some(item) = self.out.pop_front() {
            match item {
                // HTTP/3 interim responses are not sent (`send_interim`).
                Out::Head { head, .. } => {
                    self.started = true;
                    timed(stall, self.stream.send_response(head)).await?;
                }
                Out::Data(data) => timed(stall, self.stream.send_data(data)).await?,
                Out::Trailers(t) => timed(stall, self.stream.send_trailers(t)).await?,
            }
        }
        if self.out.ended() && self.started {
            timed(stall, self.stream.finish()).await?;
            self.finished = true;
        }
        Ok(())
    }

    async fn tunnel(
        &mut self,
        _upstream: &mut dyn crate::pipeline::downstream::Tunnel,
        _early: &[u8],
    ) -> Result<(), Error> {
        // Upgrades do not exist in HTTP/3 (RFC 9114 §4.5); the proxy strips `Upgrade`.
        Err(Error::with(
            ErrorKind::UpstreamAborted,
            "upstream switched protocols on an HTTP/3 stream",
        ))
    }
}
