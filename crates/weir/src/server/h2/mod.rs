//! HTTP/2 to clients: over TLS when ALPN settles `h2`, and h2c with prior knowledge on
//! listeners with `h2c: true`. The framing, HPACK and flow control are the `h2` crate's; each
//! stream becomes a [`stream::H2Stream`], a `pipeline::Downstream` like an HTTP/1.1 connection,
//! so routing, the cache, the proxy and the actions run over it unchanged.
//!
//! Abuse limits (settings in `http2:`): concurrent streams, header list size and windows are
//! SETTINGS the `h2` crate enforces; rapid reset (CVE-2023-44487) is its pending-accept reset
//! limit, which answers GOAWAY ENHANCE_YOUR_CALM. The 2019 flood family (PING, SETTINGS,
//! RST_STREAM, PRIORITY and empty-frame floods) is [`flood::FloodGuard`]'s: it counts those
//! frames on the way in and closes the connection with GOAWAY ENHANCE_YOUR_CALM past
//! `max_control_frames_per_second`.
//!
//! Cost (measured with h2load, 100 connections x 10 streams, 1 KiB responses, one core): the
//! `h2` crate flushes after nearly every frame, and the streams ran as tasks of their own, so a
//! response cost a wake-up and a `sendto`: 12.7 µs per request. Polling the streams inside the
//! connection's task ([`drive`]), handing small complete bodies to `h2` without a window wait,
//! and gathering writes until `h2` reads again (`FloodGuard`'s `AsyncWrite`) make it one
//! `sendto` per `recvfrom`: 5.7 µs per request over TLS with a cache hit (bench/tls.sh), 0.29x
//! nginx's and 0.84x HAProxy's in the same run.

pub(crate) mod convert;
mod flood;
mod stream;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::worker::WorkerState;
use crate::metrics::CloseReason;
use crate::runtime::WorkerRuntime;
use crate::tls::TlsInfo;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Per-stream send buffer: what a stream may queue beyond the client's window.
const SEND_BUFFER: usize = 256 * 1024;

/// How long a connection closed for abuse gets to flush its GOAWAY.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// What every stream of a connection shares.
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub peer: SocketAddr,
    pub tls: Option<Rc<TlsInfo>>,
    pub state: Rc<WorkerState>,
    pub listener_id: crate::runtime::ListenerId,
}

/// Serves an HTTP/2 connection to its end.
pub(crate) async fn serve<T>(
    io: T,
    peer: SocketAddr,
    state: Rc<WorkerState>,
    rt: Rc<WorkerRuntime>,
    listener: usize,
    tls: Option<Rc<TlsInfo>>,
) -> CloseReason
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let cfg = &rt.cfg;
    let h = &cfg.http2;
    let glitch_limit = cfg.shield.as_ref().map_or(0, |s| s.http2_glitches);
    let guard = flood::FloodGuard::new(io, h.max_control_frames_per_second, glitch_limit);
    let tripped = guard.tripped();
    let glitches = guard.glitches();
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(h.max_concurrent_streams)
        .max_header_list_size(h.max_header_list_size.0 as u32)
        .initial_window_size(h.initial_window_size.0 as u32)
        .initial_connection_window_size(h.connection_window_size.0 as u32)
        .max_frame_size(h.max_frame_size.0 as u32)
        .max_pending_accept_reset_streams(h.max_pending_reset_streams)
        .max_local_error_reset_streams(Some(h.max_error_reset_streams))
        .max_send_buffer_size(SEND_BUFFER);
    let mut conn = match tokio::time::timeout(cfg.timeouts.header, builder.handshake(guard)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "HTTP/2 handshake failed");
            return CloseReason::BadRequest;
        }
        Err(_) => return CloseReason::Timeout,
    };
    let shared = Rc::new(ConnShared {
        peer,
        tls,
        state: state.clone(),
        listener_id: cfg.listeners[listener].id,
    });
    let keepalive = cfg.timeouts.keepalive;
    let mut streams = FuturesUnordered::new();
    let mut shutdown = state.shutdown.clone();
    let mut going_away = false;
    loop {
        // Idle: no stream running. The keep-alive timeout then applies, as on HTTP/1.1.
        let idle = streams.is_empty();
        tokio::select! {
            ended = std::future::poll_fn(|cx| {
                drive(cx, &mut conn, &mut streams, |request, respond| {
                    stream::serve(request, respond, shared.clone())
                })
            }) => {
                match ended {
                    Some(Ok(())) => return CloseReason::Done,
                    Some(Err(e)) => {
                        if e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) {
                            state.metrics.h2_abuse.inc();
                        }
                        tracing::debug!(%peer, error = %e, "HTTP/2 connection error");
                        return CloseReason::ClientError;
                    }
                    // Went idle or busy: the timers below are chosen again.
                    None => {}
                }
            }
            _ = tokio::time::sleep(keepalive), if idle && !going_away => {
                conn.graceful_shutdown();
                going_away = true;
            }
            _ = glitches.warn.notified(), if !going_away => {
                tracing::debug!(%peer, "HTTP/2 glitches at 75% of the threshold: GOAWAY");
                conn.graceful_shutdown();
                going_away = true;
            }
            _ = tripped.notified() => {
                state.metrics.h2_abuse.inc();
                match (&cfg.shield, glitches.over.get()) {
                    (Some(shield), true) => {
                        shield.violation(peer.ip(), crate::shield::Limit::Http2Glitches, crate::shield::Action::Close);
                        tracing::debug!(%peer, "HTTP/2 glitch threshold: GOAWAY and close");
                    }
                    _ => tracing::debug!(%peer, "HTTP/2 control frame flood: GOAWAY"),
                }
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                let _ = tokio::time::timeout(GOAWAY_GRACE, conn.accept()).await;
                return CloseReason::ClientError;
            }
            _ = shutdown.wait_for(|s| *s), if !going_away => {
                conn.graceful_shutdown();
                going_away = true;
            }
        }
    }
}

/// Drives the connection and its streams: accepts every request that is ready, runs the
/// streams, and loops while they made progress, so that the frames they queued are flushed
/// together by the next accept. `Some` when the connection ended; `None` when it went from
/// idle to busy or back (the caller re-arms its idle timer).
///
/// The streams being answered are polled inside the connection's task (not a task each), so
/// every response they queue in one wake-up leaves in one write; they are held unboxed (`F` is
/// `stream::serve`'s future), one allocation per stream fewer.
fn drive<T, F>(
    cx: &mut Context<'_>,
    conn: &mut h2::server::Connection<T, Bytes>,
    streams: &mut FuturesUnordered<F>,
    start: impl Fn(http::Request<h2::RecvStream>, h2::server::SendResponse<Bytes>) -> F,
) -> Poll<Option<Result<(), h2::Error>>>
where
    T: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = ()>,
{
    let was_idle = streams.is_empty();
    loop {
        let mut progressed = false;
        loop {
            match conn.poll_accept(cx) {
                Poll::Ready(Some(Ok((request, respond)))) => {
                    streams.push(start(request, respond));
                    progressed = true;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(Some(Ok(()))),
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    if streams.is_empty() != was_idle {
        return Poll::Ready(None);
    }
    Poll::Pending
}

/// A stream whose first bytes were already read (the h2c preface, read as if it were an
/// HTTP/1.1 request): they are read again first.
#[derive(Debug)]
pub(crate) struct Rewind<T> {
    prefix: Bytes,
    io: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(prefix: Bytes, io: T) -> Rewind<T> {
        Rewind { prefix, io }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
