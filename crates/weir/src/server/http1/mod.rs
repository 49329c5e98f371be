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

use tokio::time::{timeout_at, Instant};
use weir_http::{parse_request, BodyDecoder, BodyKind, Persistence, RequestHead};

mod buffers;
mod conn;
mod downstream;
mod h2c;
mod idle;
mod output;
mod sendfile;
#[cfg(feature = "uring")]
mod uring_wait;

pub(crate) use conn::Conn;

use buffers::{give_buf, read_more};
use conn::{too_many_reads, HeadWait, RequestBody, FLUSH_AT};

use crate::error::{Error, ErrorKind, OrErr, Side};
use crate::metrics::CloseReason;

impl Conn {
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
