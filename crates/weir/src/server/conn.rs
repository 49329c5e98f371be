//! One client connection: read → parse → route → act → write, repeated while keep-alive holds.
//!
//! Hand-written because it is the hot path. The shape:
//! * Requests are parsed straight out of the read buffer ([`weir_http::parse_request`]); every
//!   complete request already buffered (pipelining) is answered in order into one output buffer,
//!   which is written when the connection needs more input: one `write` per batch of reads.
//! * Reads go through tokio's `AsyncRead`, which treats a short read as "socket drained" and
//!   skips the extra `EAGAIN` read a `try_read` loop would make.
//! * Buffers go back to a per-worker pool while a connection is idle, so 10k idle keep-alive
//!   connections cost a task and a socket each, not 16 KiB of buffers.
//! * Timeouts: `timeouts.header` from the first byte of a head to its end (a slowloris client gets
//!   408); `timeouts.keepalive` for idle connections (closed silently); `timeouts.body` between
//!   body reads (408); `timeouts.write` for a stalled client. Each wraps only the `.await` it
//!   bounds, so a read that is ready never registers a timer.
//! * Rare paths (request bodies, file streaming, lingering close) are boxed when they run, so
//!   the future every idle connection keeps stays small (≈ 0.5 KiB instead of ≈ 5 KiB).
//! * Errors: [`ConnError::status`] is the one place a connection-level failure becomes a status
//!   code. After any error response the connection is closed (framing can no longer be trusted),
//!   with a short lingering close so the client reads the response instead of a reset.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::time::{timeout, timeout_at, Instant, Sleep};
use weir_http::{parse_request, BodyDecoder, BodyEvent, BodyKind, Method, ParseError, RequestHead};

use super::client_io::ClientIo;
use super::forward::Exchange;
use super::worker::{WorkerRuntime, WorkerState};
use crate::actions::static_files::{StaticReply, INLINE_BODY};
use crate::actions::Action;
use crate::reply::{self, ConnHeader};
use crate::routes::{RouteTable, Routed};

/// Output is written once it grows past this, even mid-batch.
const FLUSH_AT: usize = 64 * 1024;
/// Bodies at least this long are queued by reference (see [`Conn::put_body`]); shorter ones are
/// copied, which is cheaper than another iovec.
const BY_REFERENCE: usize = 16 * 1024;
/// Pooled buffers larger than this are freed instead, so one big response does not pin memory.
const POOL_BUF_MAX: usize = 128 * 1024;
/// Slices per vectored write.
const IOV_MAX: usize = 32;
/// Capacity of a fresh read buffer.
const READ_BUF: usize = 8 * 1024;
/// Idle buffers kept per worker.
const POOL_MAX: usize = 256;
/// Lingering close: how long and how much unread input is drained after an error response.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

thread_local! {
    static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn take_buf() -> BytesMut {
    let mut b = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    // Reclaims the whole original allocation once the request heads that borrowed it are gone.
    b.reserve(READ_BUF);
    b
}

pub(super) fn give_buf(mut b: BytesMut) {
    if b.capacity() == 0 || b.capacity() > POOL_BUF_MAX {
        return;
    }
    b.clear();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// Why a connection ended early.
#[derive(Debug)]
pub(crate) enum ConnError {
    /// The request could not be parsed or framed.
    Parse(ParseError),
    /// The head did not arrive within `timeouts.header`.
    HeaderTimeout,
    /// The body stalled for `timeouts.body`.
    BodyTimeout,
    /// The client stopped reading for `timeouts.write`.
    WriteTimeout,
    /// The client closed in the middle of a request.
    ClosedMidRequest,
    /// The socket failed.
    Io(io::Error),
    /// The upstream failed after the response started: the client connection is cut.
    UpstreamAborted,
}

impl ConnError {
    /// The status to answer with before closing, if the client can still be answered.
    fn status(&self) -> Option<u16> {
        match self {
            ConnError::Parse(e) => Some(e.status()),
            ConnError::HeaderTimeout | ConnError::BodyTimeout => Some(408),
            ConnError::WriteTimeout
            | ConnError::ClosedMidRequest
            | ConnError::Io(_)
            | ConnError::UpstreamAborted => None,
        }
    }

    fn as_str(&self) -> &'static str {
        match self {
            ConnError::Parse(e) => e.as_str(),
            ConnError::HeaderTimeout => "request head timeout",
            ConnError::BodyTimeout => "request body timeout",
            ConnError::WriteTimeout => "write timeout",
            ConnError::ClosedMidRequest => "client closed mid-request",
            ConnError::Io(_) => "socket error",
            ConnError::UpstreamAborted => "upstream failed mid-response",
        }
    }
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Io(e) => write!(f, "socket error: {e}"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

/// What happens after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
    /// The connection was handed to a tunnel (WebSocket) that has ended: nothing more to write.
    Upgraded,
}

/// A client connection.
#[derive(Debug)]
pub(crate) struct Conn {
    io: ClientIo,
    pub(super) peer: SocketAddr,
    pub(super) buf: BytesMut,
    pub(super) out: BytesMut,
    /// Large bodies queued by reference ahead of `out` (cache hits): written together with `out`
    /// in one vectored write instead of being copied into it.
    segs: VecDeque<Bytes>,
    pub(super) state: Rc<WorkerState>,
    /// The config the current request runs on (refreshed as each request starts).
    pub(super) rt: Rc<WorkerRuntime>,
    /// Index of the listener in the config: its routes are `rt.cfg.listeners[listener].routes`.
    listener: usize,
    served: u64,
    /// Slot in the worker's connection slab.
    key: usize,
    /// The idle timer, created at the first idle wait and then only pushed forward (see
    /// `wait_idle`).
    idle_timer: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    pub(crate) fn new(
        stream: mio::net::TcpStream,
        peer: SocketAddr,
        key: usize,
        state: Rc<WorkerState>,
        listener: usize,
    ) -> Conn {
        Conn {
            io: ClientIo::Fresh(stream),
            peer,
            buf: BytesMut::new(),
            out: BytesMut::new(),
            segs: VecDeque::new(),
            rt: state.current(),
            state,
            listener,
            served: 0,
            key,
            idle_timer: None,
        }
    }

    /// Serves the connection to its end.
    pub(crate) async fn serve(mut self) {
        if let Err(e) = self.run().await {
            tracing::debug!(peer = %self.peer, reason = %e, "closing connection");
            if let Some(status) = e.status() {
                let server = self.rt.cfg.server_header.clone();
                reply::error(
                    &mut self.out,
                    status,
                    server.as_deref(),
                    &[],
                    ConnHeader::Close,
                    false,
                );
                if self.flush().await.is_ok() {
                    Box::pin(self.linger()).await;
                }
            }
        }
        give_buf(std::mem::take(&mut self.buf));
        give_buf(std::mem::take(&mut self.out));
    }

    async fn run(&mut self) -> Result<(), ConnError> {
        loop {
            let Some(head) = self.read_head().await? else {
                return self.flush().await;
            };
            self.served += 1;
            let next = self.handle(head).await?;
            if next == Next::Upgraded {
                return Ok(());
            }
            if next == Next::Close {
                if !self.buf.is_empty() {
                    // Pipelined requests after the last one we answer: drain, don't reset.
                    self.flush().await?;
                    Box::pin(self.linger()).await;
                } else {
                    // Nothing unread: the FIN rides on the response's last segment. The explicit
                    // half-close sends both before `close`, so bytes the client sends late (a
                    // body after `Expect`, say) cannot make `close` reset the connection and
                    // discard a response still held by MSG_MORE.
                    self.flush_with(true).await?;
                    self.io.shutdown_now();
                }
                return Ok(());
            }
            if self.out.len() >= FLUSH_AT || !self.segs.is_empty() {
                self.flush().await?;
            }
        }
    }

    /// Returns the next request head, `None` when the connection ended cleanly between requests.
    async fn read_head(&mut self) -> Result<Option<RequestHead>, ConnError> {
        self.rt = self.state.current();
        let rt = self.rt.clone();
        let cfg = &rt.cfg;
        let mut deadline = None;
        loop {
            if !self.buf.is_empty() {
                if let Some(head) =
                    parse_request(&mut self.buf, &cfg.limits.head).map_err(ConnError::Parse)?
                {
                    return Ok(Some(head));
                }
                deadline.get_or_insert_with(|| Instant::now() + cfg.timeouts.header);
            }
            self.flush().await?;
            let n = match deadline {
                Some(d) => Box::pin(timeout_at(d, read_more(&mut self.io, &mut self.buf)))
                    .await
                    .map_err(|_| ConnError::HeaderTimeout)??,
                None => {
                    let wait = if self.served == 0 {
                        cfg.timeouts.header
                    } else {
                        cfg.timeouts.keepalive
                    };
                    match self.wait_idle(wait).await? {
                        Some(n) => n,
                        None => return Ok(None),
                    }
                }
            };
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ConnError::ClosedMidRequest)
                };
            }
        }
    }

    /// Waits, without holding buffers, for the next request to start. `None`: idle timeout or
    /// shutdown.
    ///
    /// The timer is lazy: instead of registering a timer per wait, the connection keeps one
    /// `Sleep` and only moves its deadline when it fires early (the deadline of the current wait
    /// is later than when it was set) or must fire sooner. In the keep-alive steady state a
    /// request costs one clock read here, no timer-wheel operation.
    async fn wait_idle(&mut self, wait: Duration) -> Result<Option<usize>, ConnError> {
        if let ClientIo::Fresh(_) = self.io {
            // A fresh connection usually has its request already: read it without registering.
            if self.buf.capacity() == 0 {
                self.buf = take_buf();
            }
            if let Some(n) = self.io.try_read_fresh(&mut self.buf)? {
                return Ok(Some(n));
            }
        }
        if self.state.shutting_down.get() {
            return Ok(None);
        }
        give_buf(std::mem::take(&mut self.buf));
        give_buf(std::mem::take(&mut self.out));
        let deadline = Instant::now() + wait;
        let timer = match &mut self.idle_timer {
            Some(t) => {
                if t.deadline() > deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self
                .idle_timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        let stream = self.io.register()?;
        self.state.set_idle(self.key, true);
        let ready = loop {
            tokio::select! {
                biased;
                r = stream.readable() => break r,
                _ = timer.as_mut() => {
                    if Instant::now() >= deadline {
                        self.state.set_idle(self.key, false);
                        return Ok(None);
                    }
                    timer.as_mut().reset(deadline);
                }
            }
        };
        self.state.set_idle(self.key, false);
        ready?;
        self.buf = take_buf();
        self.out = take_buf();
        // A config published while this connection was idle applies to its next request.
        self.rt = self.state.current();
        Ok(Some(read_more(&mut self.io, &mut self.buf).await?))
    }

    /// Answers one request.
    async fn handle(&mut self, head: RequestHead) -> Result<Next, ConnError> {
        let rt = self.rt.clone();
        let cfg = &rt.cfg;
        let server = cfg.server_header.as_deref();
        if let BodyKind::Length(n) = head.body {
            if n > cfg.limits.max_body_bytes {
                return Err(ConnError::Parse(ParseError::BodyTooLarge));
            }
        }
        let head_only = head.method == Method::Head;
        let routes = self.routes().clone();
        let routed = routes.route(&head);
        if let Routed::Found(route) = &routed {
            if let Action::Proxy(p) = &route.action {
                let max = cfg.limits.max_requests_per_connection;
                let next = if !head.keep_alive
                    || (max > 0 && self.served >= max)
                    || self.state.shutting_down.get()
                {
                    Next::Close
                } else {
                    Next::KeepAlive
                };
                return match &p.cache {
                    Some(c) => match self.try_fresh_hit(&head, p, c, next) {
                        Some(next) => Ok(next),
                        None => Box::pin(self.cached(&head, route.index, p, c, next)).await,
                    },
                    None => Box::pin(self.forward(&head, p, next, &mut Exchange::default())).await,
                };
            }
        }
        let wants_body = matches!(&routed, Routed::Found(route) if route.action.wants_body());
        let has_body = head.body != BodyKind::Empty;
        // A client waiting for 100-continue has not sent a body we will not use: answer and close
        // rather than read it.
        let skip_body = has_body && head.expect_continue && !wants_body;
        let body = if has_body && !skip_body {
            Box::pin(self.read_body(&head, wants_body)).await?
        } else {
            BytesMut::new()
        };
        // Decided after the body is in, so a shutdown that began meanwhile is announced.
        let max = cfg.limits.max_requests_per_connection;
        let next = if skip_body
            || !head.keep_alive
            || (max > 0 && self.served >= max)
            || self.state.shutting_down.get()
        {
            Next::Close
        } else {
            Next::KeepAlive
        };
        let conn = ConnHeader::for_response(next != Next::KeepAlive, head.version);
        match routed {
            Routed::Found(route) => match &route.action {
                Action::Respond(r) => r.write(&mut self.out, head_only, conn),
                Action::Echo(e) => e.write(&mut self.out, &head, &body, server, conn),
                Action::Proxy(_) => unreachable!("dispatched above"),
                Action::Admin => {
                    let (status, json) = crate::admin::handle(&head, cfg);
                    reply::json(
                        &mut self.out,
                        status,
                        server,
                        json.as_bytes(),
                        conn,
                        head_only,
                    );
                }
                Action::Static(s) => {
                    if let StaticReply::Stream { file, offset, len } =
                        s.serve(&head, &mut self.out, server, conn)
                    {
                        Box::pin(self.stream_file(file, offset, len)).await?;
                    }
                }
            },
            Routed::MethodNotAllowed(allow) => reply::error(
                &mut self.out,
                405,
                server,
                &[(b"Allow", &allow)],
                conn,
                head_only,
            ),
            Routed::NotFound => reply::error(&mut self.out, 404, server, &[], conn, head_only),
        }
        Ok(next)
    }

    /// Reads the request body, keeping it when `keep`, enforcing `max_body_bytes`.
    async fn read_body(&mut self, head: &RequestHead, keep: bool) -> Result<BytesMut, ConnError> {
        let rt = self.rt.clone();
        let cfg = &rt.cfg;
        let limit = cfg.limits.max_body_bytes;
        let mut decoder = BodyDecoder::new(head.body);
        let mut body = BytesMut::new();
        let mut continued = !head.expect_continue;
        loop {
            match decoder.decode(&mut self.buf).map_err(ConnError::Parse)? {
                BodyEvent::Data(chunk) => {
                    if decoder.consumed() > limit {
                        return Err(ConnError::Parse(ParseError::BodyTooLarge));
                    }
                    if keep {
                        body.extend_from_slice(&chunk);
                    }
                }
                BodyEvent::Done(_trailers) => return Ok(body),
                BodyEvent::NeedMore => {
                    if !continued {
                        self.out.extend_from_slice(weir_http::response::CONTINUE);
                        continued = true;
                    }
                    self.flush().await?;
                    let n = timeout(cfg.timeouts.body, read_more(&mut self.io, &mut self.buf))
                        .await
                        .map_err(|_| ConnError::BodyTimeout)??;
                    if n == 0 {
                        return Err(ConnError::ClosedMidRequest);
                    }
                }
            }
        }
    }

    /// Streams a file range after the head already in the output buffer.
    async fn stream_file(
        &mut self,
        file: std::fs::File,
        mut offset: u64,
        mut len: u64,
    ) -> Result<(), ConnError> {
        use std::os::unix::fs::FileExt;
        while len > 0 {
            let step = len.min(INLINE_BODY) as usize;
            let start = self.out.len();
            self.out.resize(start + step, 0);
            let n = file.read_at(&mut self.out[start..], offset)?;
            if n == 0 {
                // Truncated under us after the head promised more: abort the connection.
                return Err(ConnError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while sending",
                )));
            }
            self.out.truncate(start + n);
            offset += n as u64;
            len -= n as u64;
            self.flush().await?;
        }
        Ok(())
    }

    /// The routes of this connection's listener, in the current request's config.
    pub(super) fn routes(&self) -> &Arc<RouteTable> {
        &self.rt.cfg.listeners[self.listener].routes
    }

    /// Reads more of the client's bytes into the read buffer.
    pub(super) async fn read_more(&mut self) -> io::Result<usize> {
        read_more(&mut self.io, &mut self.buf).await
    }

    /// The client socket, registered with the reactor (for tunnels).
    pub(super) fn register(&mut self) -> io::Result<&mut tokio::net::TcpStream> {
        self.io.register()
    }

    /// Writes the output: one direct write in the common case; queued bodies, or a client that
    /// is not reading fast enough, take the vectored, timed slow path.
    pub(super) async fn flush(&mut self) -> Result<(), ConnError> {
        self.flush_with(false).await
    }

    /// [`Conn::flush`]; `closing`: the socket is closed right after (see [`ClientIo::write_now`]).
    async fn flush_with(&mut self, closing: bool) -> Result<(), ConnError> {
        if self.segs.is_empty() {
            if self.out.is_empty() {
                return Ok(());
            }
            let n = self.io.write_now(&self.out, closing)?;
            if n == self.out.len() {
                self.out.clear();
                return Ok(());
            }
            let _ = self.out.split_to(n);
        }
        Box::pin(self.flush_slow(closing)).await
    }

    /// Appends a response body: copied into `out` when short, queued by reference when long (a
    /// 10 MiB cached object is sent from the store's own buffer, not copied per client).
    pub(super) fn put_body(&mut self, body: &Bytes) {
        if body.len() < BY_REFERENCE {
            self.out.extend_from_slice(body);
            return;
        }
        if !self.out.is_empty() {
            self.segs.push_back(self.out.split().freeze());
        }
        self.segs.push_back(body.clone());
    }

    /// Writes the queued segments and then `out` with vectored writes, waiting while the
    /// client's socket buffer is full. `timeouts.write` bounds each stall, not the whole
    /// transfer: a big object to a slow but steady reader is not cut.
    async fn flush_slow(&mut self, mut closing: bool) -> Result<(), ConnError> {
        if !self.out.is_empty() {
            self.segs.push_back(self.out.split().freeze());
        }
        let stall = self.rt.cfg.timeouts.write;
        while !self.segs.is_empty() {
            let mut iov = [io::IoSlice::new(&[]); IOV_MAX];
            let n = self.segs.len().min(IOV_MAX);
            for (slot, seg) in iov.iter_mut().zip(&self.segs) {
                *slot = io::IoSlice::new(seg);
            }
            match self.io.send_once(&iov[..n], closing) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(mut written) => {
                    while written > 0 {
                        let Some(front) = self.segs.front_mut() else {
                            break;
                        };
                        let step = written.min(front.len());
                        front.advance(step);
                        written -= step;
                        if front.is_empty() {
                            self.segs.pop_front();
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The rest goes without MSG_MORE (see `ClientIo::send_once`).
                    closing = false;
                    timeout(stall, self.io.writable())
                        .await
                        .map_err(|_| ConnError::WriteTimeout)??;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Half-closes and drains unread input for a moment, so the client sees our last response
    /// rather than a reset caused by data we never read.
    async fn linger(&mut self) {
        if self.io.shutdown().await.is_err() {
            return;
        }
        let Ok(stream) = self.io.register() else {
            return;
        };
        let deadline = Instant::now() + LINGER_TIME;
        let mut drained = 0;
        // Drain into the read buffer (a stack array here would live in every connection's future).
        self.buf.clear();
        self.buf.reserve(READ_BUF);
        while drained < LINGER_BYTES {
            match timeout_at(deadline, stream.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    drained += n;
                    self.buf.clear();
                }
                _ => break,
            }
        }
    }
}

/// Reads whatever is available into `buf`, growing it if it is nearly full.
async fn read_more(io: &mut ClientIo, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(READ_BUF);
    }
    io.read_buf(buf).await
}
