//! One HTTP/2 stream as a `pipeline::Downstream`: the request body comes from the stream's
//! [`Slot`] as the connection's driver fills it, the response is queued in the slot (a head as
//! an HPACK block, body bytes as the producers give them: a cache hit's stored body is not
//! copied) and leaves when the pipeline flushes, as frames within the peer's windows.
//! [`H2Stream::flush`] waits for the queue to drain (bounded by `timeouts.write` per stall)
//! rather than buffer a large body; a stream that stalls past it is reset and its queue given
//! back.

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use weir_h2::Reason;
use weir_http::{BodyKind, Persistence, Reply, RequestHead, Version};

use super::driver::Incoming;
use super::shared::ConnShared;
use super::slots::{Shared, Slot};
use crate::error::{Error, ErrorKind};
use crate::pipeline::downstream::Downstream;
use crate::runtime::WorkerRuntime;

/// One stream being answered.
#[derive(Debug)]
pub(crate) struct H2Stream {
    id: u32,
    io: Rc<RefCell<Shared>>,
    shared: Rc<ConnShared>,
    rt: Rc<WorkerRuntime>,
    /// This stream's listener in `rt`'s config.
    listener: usize,
    body_read: u64,
    /// A route's `shape` cap below `limits.max_body_bytes` (`u64::MAX`: none).
    body_cap: u64,
    /// The route's wait between body bytes, over `timeouts.body`.
    body_wait: Option<std::time::Duration>,
    /// A response head was queued: a failure now can only reset the stream.
    started: bool,
    /// The body's announced length: never more is passed on, nor a shorter body as whole (the
    /// driver resets such a stream first; this holds if it did not).
    expect: Option<u64>,
    /// The request asked for `100-continue` and it was not sent yet.
    continue_owed: bool,
}

/// A request as it starts: its head (or why it has none) on the config of the moment.
pub(crate) struct Started {
    pub head: Result<RequestHead, Error>,
    pub rt: Rc<WorkerRuntime>,
}

impl Started {
    /// The head of `incoming`, parsed on the current config, as HTTP/1.1's are.
    pub(crate) fn new(incoming: Incoming, shared: &ConnShared) -> Started {
        let mut rt = shared.state.cached();
        shared.state.refresh(&mut rt);
        let head = match incoming {
            Incoming::Head {
                pseudo,
                fields,
                has_body,
            } => super::head::request_head(&pseudo, &fields, has_body, &rt.cfg.limits.head),
            Incoming::TooLarge => Err(weir_http::ParseError::HeadTooLarge.into()),
        };
        Started { head, rt }
    }

    /// The body length the head announces (`content-length`, as the parser read it: what the
    /// origin is told), for the DATA to be held to it (RFC 9113 §8.1.1).
    pub(crate) fn declared(&self) -> Option<u64> {
        match self.head.as_ref().map(|h| h.body) {
            Ok(BodyKind::Length(n)) => Some(n),
            Ok(BodyKind::Empty) => Some(0),
            _ => None,
        }
    }
}

/// Answers one stream through the pipeline; ends early when the stream is reset.
pub(crate) async fn serve(
    id: u32,
    started: Started,
    io: Rc<RefCell<Shared>>,
    shared: Rc<ConnShared>,
) {
    let answer = answer(id, started, io.clone(), shared);
    let reset = Reset { id, io: io.clone() };
    tokio::select! {
        biased;
        () = reset => {}
        () = answer => {}
    }
    if let Some(s) = io.borrow_mut().slot(id) {
        s.done = true;
    }
}

async fn answer(id: u32, started: Started, io: Rc<RefCell<Shared>>, shared: Rc<ConnShared>) {
    let Started { head, rt } = started;
    let Some(listener) = rt.cfg.listener_index(&shared.listener_id) else {
        io.borrow_mut().reset(id, Reason::RefusedStream);
        return;
    };
    let expect = match head.as_ref().map(|h| h.body) {
        Ok(BodyKind::Length(n)) => Some(n),
        _ => None,
    };
    let continue_owed = head.as_ref().is_ok_and(|h| h.expect_continue);
    let mut d = H2Stream {
        id,
        io,
        shared,
        rt: rt.clone(),
        listener,
        body_read: 0,
        body_cap: u64::MAX,
        body_wait: None,
        started: false,
        expect,
        continue_owed,
    };
    // A gRPC call's kind of content type: weir's own refusals of it are gRPC statuses.
    let grpc = head
        .as_ref()
        .ok()
        .and_then(crate::pipeline::grpc_refusal::kind);
    let result = match head {
        Ok(head) => match crate::pipeline::limits::check_declared_length(&head, &rt.cfg.limits) {
            Ok(()) => crate::pipeline::handle(&mut d, rt.clone(), listener, &head).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::debug!(peer = %d.shared.peer, reason = %e, "HTTP/2 stream failed");
        match e.status() {
            Some(status) if !d.started => d.send_canned(status, grpc),
            _ => {
                d.io.borrow_mut().reset(id, Reason::InternalError);
                return;
            }
        }
    }
    d.end_body();
    if d.flush().await.is_err() {
        d.io.borrow_mut().reset(id, Reason::Cancel);
    }
}

/// Ready when the stream is reset (by the peer, or by the connection's end).
struct Reset {
    id: u32,
    io: Rc<RefCell<Shared>>,
}

impl Future for Reset {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut io = self.io.borrow_mut();
        match io.slot(self.id) {
            Some(s) if !s.reset => {
                // The stream's one waker: the answer's own waits share it (one task).
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

impl H2Stream {
    /// Runs `f` on this stream's slot (`Err` when it is gone or reset).
    fn with_slot<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Result<R, Error> {
        let mut io = self.io.borrow_mut();
        match io.slot(self.id) {
            Some(s) if !s.reset => Ok(f(s)),
            _ => Err(Error::new(ErrorKind::ClientClosed)),
        }
    }

    /// The canned response for `status`, when nothing was sent yet.
    /// `grpc`: the call's kind of content type, for a gRPC call (a trailers-only gRPC status
    /// instead, `pipeline/grpc_refusal.rs`).
    fn send_canned(&mut self, status: u16, grpc: Option<u8>) {
        if let Some(kind) = grpc {
            use crate::pipeline::grpc_refusal;
            let fields = grpc_refusal::fields(status, kind);
            let reply = grpc_refusal::reply(&self.rt.cfg.server_line, &fields);
            let block = self
                .io
                .borrow_mut()
                .block(|b| super::head::response_block(&reply, &[], b));
            let _ = self.with_slot(|s| {
                s.out.clear();
                s.out.head(block, false);
            });
            self.started = true;
            return;
        }
        let body = crate::error::canned_body(status);
        let reply = crate::error::canned(status, body.len(), &self.rt.cfg.server_line);
        let block = self
            .io
            .borrow_mut()
            .block(|b| super::head::response_block(&reply, &[], b));
        drop(reply);
        let _ = self.with_slot(|s| {
            s.out.clear();
            s.out.head(block, false);
            s.out.data(Bytes::from(body));
        });
        self.started = true;
    }

    /// `100 Continue` for a request that asked for it (RFC 9110 §10.1.1), when its body is
    /// first read and nothing of it came yet, as HTTP/1.1 sends it: a client may hold the body
    /// back until then (curl waits a second; some clients wait for good).
    fn send_continue(&mut self) -> Result<(), Error> {
        self.continue_owed = false;
        let block = self
            .io
            .borrow_mut()
            .block(|b| weir_h2::response::put_status(100, b));
        self.with_slot(|s| {
            if s.body.is_empty() && !s.body_ended && s.received == 0 {
                s.out.head(block, true);
                s.ready = true;
            }
        })
    }

    /// What the peer's windows let this stream send now beyond what it queued.
    fn window(&self) -> Result<usize, Error> {
        let mut io = self.io.borrow_mut();
        let room = io.conn.send_window(self.id);
        match io.slot(self.id) {
            Some(s) if !s.reset => Ok(room.saturating_sub(s.out.queued())),
            _ => Err(Error::new(ErrorKind::ClientClosed)),
        }
    }
}

/// Waits for `ready` (given the slot and the stream's send window) to say `Some`, waking on
/// the slot's events, at most `stall`.
async fn wait_slot<R>(
    d: &H2Stream,
    stall: std::time::Duration,
    timeout_kind: ErrorKind,
    mut ready: impl FnMut(&mut Slot, usize) -> Option<R>,
) -> Result<R, Error> {
    let wait = std::future::poll_fn(|cx| {
        let mut io = d.io.borrow_mut();
        let window = io.conn.send_window(d.id);
        match io.slot(d.id) {
            Some(s) if !s.reset => match ready(s, window) {
                Some(r) => Poll::Ready(Ok(r)),
                None => {
                    s.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            },
            _ => Poll::Ready(Err(Error::new(ErrorKind::ClientClosed))),
        }
    });
    match tokio::time::timeout(stall, wait).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(timeout_kind)),
    }
}

impl Downstream for H2Stream {
    fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    fn version(&self) -> Version {
        // Chunked framing and 1xx are available, as with HTTP/1.1.
        Version::Http11
    }

    fn protocol(&self) -> &'static str {
        "HTTP/2.0"
    }

    fn via_version(&self) -> &'static str {
        "2"
    }

    fn persistence(&self, _head: &RequestHead) -> Persistence {
        Persistence::KeepAlive
    }

    fn shutting_down(&self) -> bool {
        self.shared.state.shutting_down.get()
    }

    fn tls(&self) -> Option<&crate::tls::TlsInfo> {
        self.shared.tls.as_deref()
    }

    fn cap_body(&mut self, max: u64) {
        self.body_cap = self.body_cap.min(max);
    }

    fn body_timeout(&mut self, wait: std::time::Duration) {
        self.body_wait = Some(wait);
    }

    fn full_duplex(&self) -> bool {
        // `body_chunk` takes a chunk from the slot only in the poll that returns it.
        true
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, Error> {
        let limit = self.rt.cfg.limits.body_ceiling.min(self.body_cap);
        let wait = self.body_wait.unwrap_or(self.rt.cfg.timeouts.body);
        if self.continue_owed {
            self.send_continue()?;
        }
        let chunk = wait_slot(self, wait, ErrorKind::BodyTimeout, |s, _| {
            match s.body.pop_front() {
                Some(b) => Some(Some(b)),
                None if s.body_ended => Some(None),
                None => None,
            }
        })
        .await?;
        let Some(chunk) = chunk else {
            if self.expect.is_some_and(|n| self.body_read != n) {
                return Err(
                    weir_http::ParseError::BadRequest("body shorter than its length").into(),
                );
            }
            return Ok(None);
        };
        {
            let mut io = self.io.borrow_mut();
            let Shared { conn, owed, .. } = &mut *io;
            conn.consumed(self.id, chunk.len() as u32, owed);
        }
        self.body_read += chunk.len() as u64;
        if self.body_read > limit {
            return Err(weir_http::ParseError::BodyTooLarge.into());
        }
        if self.expect.is_some_and(|n| self.body_read > n) {
            return Err(weir_http::ParseError::BadRequest("body longer than its length").into());
        }
        Ok(Some(chunk))
    }

    fn request_trailers(&mut self) -> Vec<weir_http::Header> {
        self.with_slot(|s| std::mem::take(&mut s.trailers))
            .unwrap_or_default()
    }

    async fn send_interim(&mut self, reply: &Reply<'_>) -> Result<(), Error> {
        let block = self
            .io
            .borrow_mut()
            .block(|b| super::head::response_block(reply, &[], b));
        self.with_slot(|s| {
            s.out.head(block, true);
            s.ready = true;
        })
    }

    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence {
        let alt_svc = self.rt.cfg.listeners[self.listener]
            .quic
            .as_ref()
            .and_then(|q| q.alt_svc_value());
        let block = self.io.borrow_mut().block(|b| match alt_svc {
            Some(v) => super::head::response_block(reply, &[(b"alt-svc", v)], b),
            None => super::head::response_block(reply, &[], b),
        });
        let _ = self.with_slot(|s| s.out.head(block, false));
        self.started = true;
        persistence
    }

    fn send_data(&mut self, data: &Bytes) {
        if !data.is_empty() {
            let _ = self.with_slot(|s| s.out.data(data.clone()));
        }
    }

    fn send_trailers(&mut self, fields: &[weir_http::Header]) {
        let block = self
            .io
            .borrow_mut()
            .block(|b| super::lines::trailer_block(fields, b));
        if !block.is_empty() {
            let _ = self.with_slot(|s| s.out.trailers(block));
        }
    }

    fn end_body(&mut self) {
        let _ = self.with_slot(|s| s.out.end());
    }

    fn room_now(&mut self, want: usize) -> usize {
        self.window().map_or(want, |w| w.min(want))
    }

    async fn room(&mut self, want: usize) -> Result<usize, Error> {
        let stall = self.rt.cfg.timeouts.write;
        // Past `timeouts.write` without window the stream is reset (by `answer`, on the
        // error): a client that never opens its window holds nothing for long.
        wait_slot(self, stall, ErrorKind::WriteTimeout, |s, window| {
            // What is queued goes first; then the window beyond it.
            s.ready |= s.out.queued() > 0;
            let room = window.saturating_sub(s.out.queued());
            s.window_wait = room == 0;
            (room > 0).then(|| room.min(want))
        })
        .await
    }

    fn should_flush(&self) -> bool {
        self.with_slot(|s| s.out.should_flush()).unwrap_or(false)
    }

    async fn flush(&mut self) -> Result<(), Error> {
        let stall = self.rt.cfg.timeouts.write;
        // The end of a response the windows take whole: the driver writes it in its next
        // turn (and resets the stream if the connection stalls), so the stream need not wait
        // (a timer per response was a tenth of a small response's cost).
        let fits = {
            let mut io = self.io.borrow_mut();
            let window = io.conn.send_window(self.id);
            match io.slot(self.id) {
                Some(s) if !s.reset => {
                    s.ready = true;
                    s.out.ended() && s.out.queued() <= window
                }
                _ => return Err(Error::new(ErrorKind::ClientClosed)),
            }
        };
        if fits {
            return Ok(());
        }
        loop {
            let before = self.with_slot(|s| {
                s.ready = true;
                s.out.queued()
            })?;
            let drained = wait_slot(self, stall, ErrorKind::WriteTimeout, |s, _| {
                if s.out.is_empty() && (s.finished || !s.out.ended()) {
                    Some(true)
                } else if s.out.queued() < before {
                    // Moving, if slowly: the stall timer starts again.
                    Some(false)
                } else {
                    s.window_wait = true;
                    None
                }
            })
            .await?;
            if drained {
                return Ok(());
            }
        }
    }

    async fn tunnel(
        &mut self,
        _upstream: &mut dyn crate::pipeline::downstream::Tunnel,
        _early: &[u8],
    ) -> Result<(), Error> {
        // Upgrades do not exist in HTTP/2 (RFC 9113 §8.6); the proxy strips `Upgrade`.
        Err(Error::with(
            ErrorKind::UpstreamAborted,
            "upstream switched protocols on an HTTP/2 stream",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn returned<A, R>(_: impl FnOnce(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A stream's future, moved into the connection's `FuturesUnordered` when the stream opens
    /// (one allocation and one copy of this size per request: ~1,200 instructions of `memcpy`
    /// per h2c hello in callgrind, 2026-11-29). 2,216 bytes then (test build); 2,256 with the
    /// request's trace context inline (`RequestCtx::trace`, issue 55 §4: see `SERVING` in
    /// `server/worker.rs`). A change that
    /// grows it must say why and move this figure.
    #[test]
    fn a_stream_future_stays_small() {
        type Args = (u32, Started, Rc<RefCell<Shared>>, Rc<ConnShared>);
        let size = returned(|a: Args| serve(a.0, a.1, a.2, a.3));
        eprintln!("HTTP/2 stream future: {size} bytes");
        assert!(
            size <= STREAM,
            "the stream future grew: {size} > {STREAM} bytes"
        );
    }

    const STREAM: usize = 2256;
}
