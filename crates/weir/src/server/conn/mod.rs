//! One HTTP/1.1 client connection: read → parse → pipeline → write, repeated while keep-alive
//! holds. The connection is the transport only: it implements `pipeline::Downstream` (request
//! body chunks, replies encoded with `weir_http::Reply::encode_h1`, flushes, tunnels) and hands
//! each request to `pipeline::handle`, which knows nothing of HTTP/1.1 framing.
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
//!   the future every connection keeps stays small (≈ 0.5 KiB instead of ≈ 5 KiB).
//! * What a connection holds (2026-11-26, DHAT and `size_of`): busy or briefly idle, its task
//!   (the task future is 864 bytes, `worker.rs` `a_plain_connection_task_stays_small` fails
//!   if it grows; tokio's cell around it is 1,024 bytes, 128-byte aligned), its reactor
//!   registration (`ScheduledIo`, 256 bytes) and its slot in the worker's slab: 1.56 KiB of
//!   RSS per idle connection. Idle at two sweeps in a row it is parked (`server/park.rs`):
//!   task and registration are freed and only its slot stays (0.10 KiB of RSS each at 10,000,
//!   `bench/idle_memory.sh`; nginx 0.54). A TLS connection parks too when no record is in
//!   flight, keeping rustls' session in its slot (5.55 KiB each, 2026-11-27; nginx 15.25).
//! * Errors: `crate::error::Error::status` is the one place a failure becomes a status code.
//!   After any error response the connection is closed (framing can no longer be trusted), with
//!   a short lingering close so the client reads the response instead of a reset.

use std::collections::VecDeque;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::time::{timeout, timeout_at, Instant};
use weir_http::reply::{put_chunk, put_last_chunk};
use weir_http::{
    parse_request, BodyDecoder, BodyEncoding, BodyEvent, BodyKind, ParseError, Persistence, Reply,
    RequestHead, Version,
};

mod buffers;
mod h2c;
mod idle;
mod output;
mod sendfile;
#[cfg(feature = "uring")]
mod uring_wait;

use buffers::{give_buf, read_more, take_buf, READ_BUF};

use super::client_io::ClientIo;
use super::state::WorkerState;
use crate::error::{Error, ErrorKind, OrErr, Side};
use crate::metrics::CloseReason;
use crate::pipeline::downstream::Downstream;
use crate::runtime::WorkerRuntime;

/// Output is written once it grows past this, even mid-batch.
const FLUSH_AT: usize = 64 * 1024;
/// Bodies at least this long are queued by reference (see [`Conn::put_body`]); shorter ones are
/// copied, which is cheaper than another iovec.
const BY_REFERENCE: usize = 16 * 1024;
/// Slices per vectored write.
const IOV_MAX: usize = 32;
/// Lingering close: how long and how much unread input is drained after an error response.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

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
    state: Rc<WorkerState>,
    /// The config the current request runs on (refreshed as each request starts).
    rt: Rc<WorkerRuntime>,
    /// Index of the listener in the config.
    listener: usize,
    served: u64,
    /// The request whose body is being read, if it has one (boxed: rare, and it would otherwise
    /// sit in every idle connection's future).
    body: Option<Box<RequestBody>>,
    /// The current request's protocol version.
    version: Version,
    /// How the current response's body is framed on the wire.
    encoding: BodyEncoding,
    /// The connection was handed to a tunnel (WebSocket) that has ended: nothing more to write.
    upgraded: bool,
    /// Slot in the worker's connection slab.
    key: usize,
    /// A reload removed this connection's listener: it closes after the current request.
    orphaned: bool,
    /// In its idle wait, where the sweeper may park it (`server/park.rs`): dropping it there
    /// hands its socket to its slot.
    parkable: bool,
    /// The keep-alive deadline (the coarse clock's ms) it was parked with, kept until a request
    /// comes (0: none): a wake that brings none does not start the keep-alive over (issue 52's
    /// audit: a lone TLS KeyUpdate did).
    idle_deadline: u64,
    /// The last request's route's keep-alive wait in ms (`limits.keepalive_timeout`; 0: the
    /// listener's `timeouts.keepalive`).
    keepalive_ms: u32,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.parkable {
            let io = std::mem::replace(&mut self.io, ClientIo::Gone);
            let on = (&self.rt, self.listener);
            self.state
                .park_conn(self.key, io, self.peer, on, self.served);
        } else if let ClientIo::Tls(t) = &mut self.io {
            // A TLS connection ends with `close_notify` (RFC 8446 §6.1) whoever ends it: an
            // idle timeout, a stalled client, the client's own `close_notify` (issue 52's
            // audit: they ended with a bare FIN). Sent if the socket takes it now; queued once.
            t.stream.queue_close_notify();
            let _ = t.stream.push();
        }
    }
}

impl Conn {
    pub(crate) fn new(
        io: ClientIo,
        peer: SocketAddr,
        key: usize,
        state: Rc<WorkerState>,
        rt: Rc<WorkerRuntime>,
        listener: usize,
    ) -> Conn {
        Conn {
            io,
            peer,
            buf: BytesMut::new(),
            out: BytesMut::new(),
            segs: VecDeque::new(),
            rt,
            state,
            listener,
            served: 0,
            body: None,
            version: Version::Http11,
            encoding: BodyEncoding::Plain,
            upgraded: false,
            key,
            orphaned: false,
            parkable: false,
            idle_deadline: 0,
            keepalive_ms: 0,
        }
    }

    /// Keeps the idle deadline `until` (ms; 0: none) it had when parked.
    pub(crate) fn keeping_deadline(mut self, until: u64) -> Conn {
        self.idle_deadline = until;
        self
    }

    /// A parked connection served again (`server/park.rs`), `served` requests into its life.
    pub(crate) fn resume(
        io: ClientIo,
        peer: SocketAddr,
        key: usize,
        state: Rc<WorkerState>,
        rt: Rc<WorkerRuntime>,
        listener: usize,
        served: u64,
    ) -> Conn {
        let mut conn = Conn::new(io, peer, key, state, rt, listener);
        conn.served = served;
        conn
    }

    /// Serves the connection to its end.
    ///
    /// Takes `&mut self`, not `self`: an `async fn` that takes the connection by value keeps it
    /// twice in its future (the argument and the binding), 232 bytes more per idle connection
    /// (`-Zprint-type-sizes`). The spawned task owns the connection instead.
    pub(crate) async fn serve(&mut self) -> CloseReason {
        // The error is dropped before the next await, so the future does not keep room for it.
        if self.rt.cfg.listeners[self.listener].h2c {
            // One boxed await with a one-byte answer: a larger value alive here would be laid
            // out in every state of this future (48 bytes more per idle connection).
            if let Some(why) = Box::pin(self.h2c()).await {
                return why;
            }
        }
        let (status, why) = match self.run().await {
            Ok(()) => (None, CloseReason::Done),
            Err(e) => {
                tracing::debug!(peer = %self.peer, reason = %e, "closing connection");
                (e.status(), close_reason(&e))
            }
        };
        if let Some(status) = status {
            self.send_canned(status);
            if self.flush().await.is_ok() {
                Box::pin(self.linger()).await;
            }
        }
        give_buf(std::mem::take(&mut self.buf));
        give_buf(std::mem::take(&mut self.out));
        why
    }

    async fn run(&mut self) -> Result<(), Error> {
        loop {
            // The head lives only across `handle`: a local alive across more than one await is
            // laid out beside every state of the future, the idle read included (208 bytes
            // per idle connection, `-Zprint-type-sizes`).
            let answered = {
                // Parsed here, between awaits of one read step, not returned by an async fn:
                // a 392-byte head handed out of a future's output is copied four times more
                // (~250 instructions per request, callgrind 2026-11-27).
                let mut next = None;
                {
                    let mut wait = HeadWait::default();
                    loop {
                        if !self.buf.is_empty() {
                            match parse_request(&mut self.buf, &self.rt.cfg.limits.head) {
                                Ok(None) => {}
                                Ok(head) => {
                                    next = head;
                                    break;
                                }
                                Err(e) => return Err(e.into()),
                            }
                            self.head_incomplete(&mut wait)?;
                        }
                        if !self.read_for_head(wait.deadline).await? {
                            break;
                        }
                    }
                }
                match &next {
                    None => None,
                    Some(head) => {
                        // The request runs on the config published when it arrived.
                        self.refresh_config();
                        self.served += 1;
                        Some(self.handle(head).await?)
                    }
                }
            };
            let Some(persistence) = answered else {
                return self.flush().await;
            };
            if self.upgraded {
                return Ok(());
            }
            if persistence == Persistence::Close {
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

    /// Notes a read that left the head incomplete: the head's deadline starts at its first
    /// bytes, and the shield counts the reads it takes.
    #[inline]
    fn head_incomplete(&mut self, wait: &mut HeadWait) -> Result<(), Error> {
        let cfg = &self.rt.cfg;
        wait.deadline
            .get_or_insert_with(|| Instant::now() + cfg.timeouts.header);
        wait.reads += 1;
        if let Some(shield) = &cfg.shield {
            too_many_reads(
                shield,
                self.peer,
                wait.reads,
                shield.head_reads,
                ErrorKind::HeaderTimeout,
            )?;
        }
        Ok(())
    }

    /// One read towards the next request head, after writing what is owed: by `deadline` once a
    /// head has begun, else within the idle wait. `false`: the connection ended cleanly between
    /// requests.
    async fn read_for_head(&mut self, deadline: Option<Instant>) -> Result<bool, Error> {
        self.flush().await?;
        let n = match deadline {
            Some(d) => Box::pin(timeout_at(d, read_more(&mut self.io, &mut self.buf)))
                .await
                .map_err(|_| Error::new(ErrorKind::HeaderTimeout))?
                .or_err(ErrorKind::ClientIo, "read")?,
            None => {
                let wait = if self.served == 0 {
                    self.rt.cfg.timeouts.header
                } else if self.keepalive_ms > 0 {
                    std::time::Duration::from_millis(u64::from(self.keepalive_ms))
                } else {
                    self.rt.cfg.timeouts.keepalive
                };
                let n = match self.wait_idle(wait).await? {
                    Some(n) => n,
                    None => return Ok(false),
                };
                // A request came (or the end): the next idle wait starts its own keep-alive.
                self.idle_deadline = 0;
                n
            }
        };
        if n == 0 {
            return if self.buf.is_empty() {
                Ok(false)
            } else {
                Err(Error::new(ErrorKind::ClientClosed))
            };
        }
        Ok(true)
    }

    /// Moves to the config published now, finding this connection's listener in it (a reload
    /// may reorder listeners). A listener the new config removed keeps its connection on the
    /// config it had, to answer this request and close.
    #[inline]
    fn refresh_config(&mut self) {
        if self.rt.generation == self.state.generation() {
            return;
        }
        let mut next = self.rt.clone();
        self.state.refresh(&mut next);
        let id = self.rt.cfg.listeners[self.listener].id;
        match next.cfg.listener_index(&id) {
            Some(i) => {
                self.listener = i;
                self.rt = next;
            }
            None => self.orphaned = true,
        }
    }

    /// Answers one request through the pipeline.
    /// Takes the head by reference: an `async fn` keeps a by-value argument twice in its future
    /// (`-Zprint-type-sizes`: 208 bytes each), and that future's size is paid by every idle
    /// connection.
    async fn handle(&mut self, head: &RequestHead) -> Result<Persistence, Error> {
        crate::pipeline::limits::check_declared_length(head, &self.rt.cfg.limits)?;
        self.version = head.version;
        self.keepalive_ms = 0;
        self.body = (head.body != BodyKind::Empty).then(|| {
            Box::new(RequestBody {
                decoder: BodyDecoder::new(head.body),
                continued: !head.expect_continue,
                trailers: Vec::new(),
                limit: self.rt.cfg.limits.body_ceiling,
                reads: 0,
                timeout: None,
            })
        });
        let rt = self.rt.clone();
        let listener = self.listener;
        let persistence = crate::pipeline::handle(self, rt, listener, head).await?;
        // A body the pipeline did not read makes the next request's framing unknowable.
        let unread = self.body.take().is_some_and(|b| !b.decoder.is_done());
        Ok(if unread {
            Persistence::Close
        } else {
            persistence
        })
    }

    /// A canned error response after a connection-level failure (the connection closes).
    fn send_canned(&mut self, status: u16) {
        let body = crate::error::canned_body(status);
        let rt = self.rt.clone();
        let reply = crate::error::canned(status, body.len(), &rt.cfg.server_line);
        self.encoding = reply.encode_h1(&mut self.out, self.version, Persistence::Close);
        self.out.extend_from_slice(body.as_bytes());
    }
}

/// The request body being read: its decoder, and whether `100 Continue` was sent (or not needed).
#[derive(Debug)]
struct RequestBody {
    decoder: BodyDecoder,
    continued: bool,
    /// The trailer section of a chunked body, once read.
    trailers: Vec<weir_http::Header>,
    /// Most bytes it may have (`limits.max_body_bytes`, or a route's `shape` below it).
    limit: u64,
    /// Reads it took so far (the shield's `reads.body`).
    reads: u32,
    /// The route's wait between body bytes, over `timeouts.body`.
    timeout: Option<std::time::Duration>,
}

impl Downstream for Conn {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn version(&self) -> Version {
        self.version
    }

    fn persistence(&self, head: &RequestHead) -> Persistence {
        let max = self.rt.cfg.limits.max_requests_per_connection;
        if !head.keep_alive
            || (max > 0 && self.served >= max)
            || self.state.shutting_down.get()
            || self.orphaned
        {
            Persistence::Close
        } else {
            Persistence::KeepAlive
        }
    }

    fn shutting_down(&self) -> bool {
        self.state.shutting_down.get() || self.orphaned
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.io.tls_info()
    }

    fn cap_body(&mut self, max: u64) {
        if let Some(b) = self.body.as_mut() {
            b.limit = b.limit.min(max);
        }
    }

    fn keepalive(&mut self, wait: std::time::Duration) {
        self.keepalive_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).max(1);
    }

    fn body_timeout(&mut self, wait: std::time::Duration) {
        if let Some(b) = self.body.as_mut() {
            b.timeout = Some(wait);
        }
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let body_timeout = self
            .body
            .as_ref()
            .and_then(|b| b.timeout)
            .unwrap_or(self.rt.cfg.timeouts.body);
        loop {
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            match body.decoder.decode(&mut self.buf)? {
                BodyEvent::Data(chunk) => {
                    if body.decoder.consumed() > body.limit {
                        return Err(ParseError::BodyTooLarge.into());
                    }
                    return Ok(Some(chunk));
                }
                BodyEvent::Done(trailers) => {
                    body.trailers = trailers;
                    return Ok(None);
                }
                BodyEvent::NeedMore => {
                    body.reads += 1;
                    if let Some(shield) = &self.rt.cfg.shield {
                        let max = shield.body_reads;
                        too_many_reads(shield, self.peer, body.reads, max, ErrorKind::BodyTimeout)?;
                    }
                    if !body.continued {
                        body.continued = true;
                        self.out.extend_from_slice(weir_http::response::CONTINUE);
                    }
                    self.flush().await?;
                    let n = timeout(body_timeout, read_more(&mut self.io, &mut self.buf))
                        .await
                        .map_err(|_| Error::new(ErrorKind::BodyTimeout))?
                        .or_err(ErrorKind::ClientIo, "read")?;
                    if n == 0 {
                        return Err(Error::new(ErrorKind::ClientClosed));
                    }
                }
            }
        }
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        self.body
            .as_mut()
            .map(|b| std::mem::take(&mut b.trailers))
            .unwrap_or_default()
    }

    async fn send_interim(&mut self, reply: &Reply<'_>) -> Result<(), Error> {
        reply.encode_h1(&mut self.out, self.version, Persistence::KeepAlive);
        self.flush().await
    }

    #[inline]
    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence {
        if self.out.capacity() == 0 {
            // A fresh connection answers before it ever waited: take a pooled buffer rather
            // than grow an empty one field by field.
            self.out = take_buf();
        }
        self.encoding = reply.encode_h1(&mut self.out, self.version, persistence);
        if let Some(quic) = &self.rt.cfg.listeners[self.listener].quic {
            // `Alt-Svc: h3=":PORT"` before the blank line that ends the head.
            if !quic.alt_svc.is_empty() {
                self.out.truncate(self.out.len() - 2);
                self.out.extend_from_slice(&quic.alt_svc);
                self.out.extend_from_slice(b"\r\n");
            }
        }
        if self.encoding == BodyEncoding::UntilClose {
            Persistence::Close
        } else {
            persistence
        }
    }

    #[inline(always)]
    fn send_data(&mut self, data: &Bytes) {
        match self.encoding {
            BodyEncoding::Chunked => put_chunk(&mut self.out, data),
            BodyEncoding::Plain | BodyEncoding::UntilClose => self.put_body(data),
        }
    }

    fn send_trailers(&mut self, fields: &[weir_http::Header]) {
        if self.encoding != BodyEncoding::Chunked || fields.is_empty() {
            return;
        }
        // The last chunk with the trailer section; `end_body` then has nothing to add.
        self.out.extend_from_slice(b"0\r\n");
        for h in fields {
            weir_http::response::put_header(&mut self.out, &h.name, &h.value);
        }
        self.out.extend_from_slice(b"\r\n");
        self.encoding = BodyEncoding::Plain;
    }

    fn end_body(&mut self) {
        if self.encoding == BodyEncoding::Chunked {
            put_last_chunk(&mut self.out);
        }
    }

    fn sends_files(&self) -> bool {
        self.io.sends_files()
    }

    async fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        self.send_file_body(file, offset, len).await
    }

    fn should_flush(&self) -> bool {
        self.out.len() >= FLUSH_AT || !self.segs.is_empty()
    }

    async fn flush(&mut self) -> Result<(), Error> {
        Conn::flush(self).await
    }

    async fn tunnel(
        &mut self,
        upstream: &mut dyn crate::pipeline::downstream::Tunnel,
        early: &[u8],
    ) -> Result<(), Error> {
        // Bytes the upstream sent after its head belong to the tunnel.
        self.out.extend_from_slice(early);
        Conn::flush(self).await?;
        self.upgraded = true;
        if !self.buf.is_empty() {
            upstream
                .write_all(&self.buf)
                .await
                .or_err(ErrorKind::UpstreamReset, "tunnel write")?;
            self.buf.clear();
        }
        let _ = self.io.tunnel(upstream).await;
        Ok(())
    }
}

/// Where the reading of one request head stands.
struct HeadWait {
    /// Set at the head's first bytes (`timeouts.header`).
    deadline: Option<Instant>,
    /// The read that brought the head's first bytes, and each one after it.
    reads: u32,
}

impl Default for HeadWait {
    fn default() -> HeadWait {
        HeadWait {
            deadline: None,
            reads: 1,
        }
    }
}

/// The shield's cap on the reads a head or body may take (Tempesta's chunk counts): a client
/// dribbling its request a few bytes at a time gets 408 (`kind`), and is blocked when the
/// shield's action is `block`.
#[cold]
fn too_many_reads(
    shield: &crate::shield::Shield,
    peer: SocketAddr,
    reads: u32,
    max: u32,
    kind: ErrorKind,
) -> Result<(), Error> {
    if max == 0 || reads <= max {
        return Ok(());
    }
    let limit = if kind == ErrorKind::HeaderTimeout {
        crate::shield::Limit::HeadReads
    } else {
        crate::shield::Limit::BodyReads
    };
    shield.violation(peer.ip(), limit, crate::shield::Action::Reply);
    Err(Error::with(kind, format_args!("more than {max} reads")))
}

/// The `reason` label of `weir_connections_closed_total` for a connection ended by `e`.
fn close_reason(e: &Error) -> CloseReason {
    match e.kind {
        ErrorKind::HeaderTimeout | ErrorKind::BodyTimeout | ErrorKind::WriteTimeout => {
            CloseReason::Timeout
        }
        ErrorKind::BadRequest(_) => CloseReason::BadRequest,
        _ => match e.side() {
            Side::Upstream => CloseReason::UpstreamError,
            Side::Client | Side::Internal => CloseReason::ClientError,
        },
    }
}
