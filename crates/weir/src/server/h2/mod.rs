//! HTTP/2 to clients: over TLS when ALPN settles `h2`, and h2c with prior knowledge on
//! listeners with `h2c: true`, on weir's own sans-IO codec (`weir-h2`). Each stream becomes a
//! [`stream::H2Stream`], a `pipeline::Downstream` like an HTTP/1.1 connection, so routing,
//! the cache, the proxy and the actions run over it unchanged.
//!
//! Layout: [`driver`] is the connection's one task (read, weir-h2's `Conn`, the streams polled
//! inside it, frames gathered and written with vectored writes); [`slots`] is what the driver
//! and the streams share (a stream's request body and queued response); [`stream`] is the
//! `Downstream`; [`head`] turns decoded fields into weir's request head and a `Reply` into an
//! HPACK block; this file runs the timers around the driver (the start, keep-alive, shutdown)
//! and the ends (GOAWAY, the abuse counters).
//!
//! Abuse limits (settings in `http2:`): concurrent streams, header list size, frame size and
//! windows are SETTINGS weir-h2 enforces; the 2019 flood family (PING, SETTINGS, RST_STREAM,
//! PRIORITY and empty frames past `max_control_frames_per_second`), CONTINUATION floods and
//! glitches (`shield.http2_glitches`) are weir-h2's `Guard`; rapid reset (CVE-2023-44487) is
//! also `max_pending_reset_streams` streams reset before any answer in one read, and
//! MadeYouReset (CVE-2025-8671) `max_error_reset_streams` streams weir had to reset for the
//! peer's errors. Each ends the connection with GOAWAY ENHANCE_YOUR_CALM.

mod driver;
mod head;
mod lines;
pub(crate) mod park;
mod shared;
pub(crate) mod slots;
mod stored;
mod stream;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use park::{H2Io, Quiet};
use shared::ConnShared;
use weir_h2::conn::Conn;
use weir_h2::guard::Guard;
use weir_h2::settings::Settings;
use weir_h2::Reason;

use super::state::WorkerState;
use crate::metrics::CloseReason;
use crate::runtime::WorkerRuntime;
use crate::tls::TlsInfo;

/// The client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a connection closed for an error gets to flush its GOAWAY.
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// Where a connection is served: the client, its slot, the worker, the config and listener.
pub(crate) type At = (SocketAddr, usize, Rc<WorkerState>, Rc<WorkerRuntime>, usize);

/// Serves an HTTP/2 connection to its end. `prefix`: bytes read from `io` already (h2c's
/// preface, read as if it were an HTTP/1.1 request).
pub(crate) async fn serve<T: H2Io>(
    io: T,
    prefix: Bytes,
    at: At,
    tls: Option<Rc<TlsInfo>>,
) -> CloseReason {
    let cfg = &at.3.cfg;
    let h = &cfg.http2;
    let glitch_limit = cfg.shield.as_ref().map_or(0, |s| s.http2_glitches);
    let list = h.max_header_list_size.0 as u32;
    let local = Settings {
        header_table_size: 4_096,
        enable_push: false,
        max_concurrent_streams: Some(h.max_concurrent_streams),
        initial_window_size: h.initial_window_size.0 as u32,
        max_frame_size: h.max_frame_size.0 as u32,
        max_header_list_size: Some(list),
        enable_connect_protocol: false,
    };
    // A header block may take more octets than the list it decodes to (HPACK's own bytes):
    // twice the list, and never under 64 KiB, before the connection is judged a flood.
    let max_block = (list as usize).saturating_mul(2).max(64 * 1024);
    let guard = Guard::new(
        h.max_control_frames_per_second,
        glitch_limit,
        max_block,
        Instant::now(),
    );
    let conn = Conn::new(local, guard);
    let mut shared = slots::Shared::new(conn);
    {
        let slots::Shared { conn, owed, .. } = &mut shared;
        conn.greeting(owed);
        conn.open_connection_window(h.connection_window_size.0 as u32, owed);
    }
    run(io, prefix, shared, at, tls, None).await
}

/// Serves a parked HTTP/2 connection again (`park.rs`): its state as it was, no preface.
/// `left`: the keep-alive time it had left when it woke (a frame that brings no request, a
/// PING, does not buy another keep-alive period).
pub(crate) async fn serve_resumed<T: H2Io>(
    io: T,
    shared: slots::Shared,
    at: At,
    tls: Option<Rc<TlsInfo>>,
    left: Duration,
) -> CloseReason {
    run(io, Bytes::new(), shared, at, tls, Some(left)).await
}

async fn run<T: H2Io>(
    io: T,
    prefix: Bytes,
    shared: slots::Shared,
    (peer, key, state, rt, listener): At,
    tls: Option<Rc<TlsInfo>>,
    left: Option<Duration>,
) -> CloseReason {
    let cfg = &rt.cfg;
    let h = &cfg.http2;
    let glitch_limit = cfg.shield.as_ref().map_or(0, |s| s.http2_glitches);
    let limits = driver::Limits {
        pending_resets: h.max_pending_reset_streams,
        error_resets: u32::try_from(h.max_error_reset_streams).unwrap_or(u32::MAX),
    };
    let mut d = driver::Driver::new(io, prefix, shared, limits);
    let conn_shared = Rc::new(ConnShared {
        peer,
        tls: tls.clone(),
        state: state.clone(),
        listener_id: cfg.listeners[listener].id,
    });
    d.park = Some(park::ParkTo {
        state: state.clone(),
        key,
        rt: rt.clone(),
        listener,
        peer,
        tls,
    });
    // Whether the slot says idle and parkable (the sweeper parks it after two sweeps).
    let mut marked = false;
    let mut quietened = false;
    let io = d.shared.clone();
    let start = |id: u32, incoming: driver::Incoming| {
        let started = stream::Started::new(incoming, &conn_shared);
        let declared = started.declared();
        let future = stream::serve(id, started, io.clone(), conn_shared.clone());
        (future, declared)
    };
    let keepalive = cfg.timeouts.keepalive;
    let header = cfg.timeouts.header;
    let write_timeout = cfg.timeouts.write;
    let mut shutdown = state.shutdown.clone();
    let now = tokio::time::Instant::now();
    let mut idle_since = match left {
        // Idle since long enough that `left` remains of the keep-alive time.
        Some(left) => now
            .checked_sub(keepalive.saturating_sub(left))
            .unwrap_or(now),
        None => now,
    };
    loop {
        let idle = d.idle();
        if d.take_active() {
            idle_since = tokio::time::Instant::now();
        }
        let open = d.open();
        if idle {
            d.release();
        }
        let going_away = d.goaway.is_some();
        let parkable = match d.parkable() {
            Quiet::Yes => true,
            Quiet::AfterWrite if !quietened => {
                // Once: a TLS session that read since it wrote writes an empty frame.
                quietened = true;
                d.quieten();
                false
            }
            _ => false,
        };
        if parkable != marked && !state.shutting_down.get() {
            // The sweeper's deadline is a tick past the keep-alive timer below, which ends
            // the connection with GOAWAY first; parked, the deadline closes it.
            let wait = parkable.then_some(keepalive.saturating_sub(idle_since.elapsed()));
            state.set_idle(key, wait, parkable);
            marked = parkable;
        }
        // A peer that stops reading: past `timeouts.write` without the socket taking a byte
        // the connection ends (its streams stalled and were reset before).
        let stalled = d.write_stalled();
        tokio::select! {
            ended = std::future::poll_fn(|cx| d.poll_drive(cx, &start)) => match ended {
                Some(driver::Ended::Done) => {
                    linger(&mut d).await;
                    return CloseReason::Done;
                }
                Some(driver::Ended::Io) => return CloseReason::ClientError,
                Some(driver::Ended::Error(reason)) => {
                    let glitches = d.shared.borrow().conn.glitches();
                    end_with(&mut d, reason, peer, glitches, glitch_limit, &state, &rt).await;
                    return CloseReason::ClientError;
                }
                // Went idle or busy: the timers below are chosen again.
                None => {}
            },
            // The start (preface and SETTINGS) within the header timeout.
            _ = tokio::time::sleep(header), if !open => return CloseReason::Timeout,
            // Idle: no stream running. The keep-alive timeout then applies, as on HTTP/1.1.
            // (Streams answered within one turn do not show as busy: the wait counts from the
            // last one's end.)
            _ = tokio::time::sleep_until(idle_since + keepalive), if open && idle && !going_away => {
                if d.take_active() {
                    idle_since = tokio::time::Instant::now();
                } else {
                    d.graceful();
                }
            }
            _ = shutdown.wait_for(|s| *s), if !going_away => d.graceful(),
            _ = tokio::time::sleep_until(stalled.map_or(idle_since, |t| t + write_timeout)), if stalled.is_some() => {
                if d.write_stalled().is_some_and(|t| t.elapsed() >= write_timeout) {
                    tracing::debug!(%peer, "HTTP/2 peer stopped reading: closed");
                    return CloseReason::Timeout;
                }
            }
        }
    }
}

/// Ends the connection for a connection error: counted when it is abuse, GOAWAY written
/// (within [`GOAWAY_GRACE`]).
async fn end_with<T, F>(
    d: &mut driver::Driver<T, F>,
    reason: Reason,
    peer: SocketAddr,
    glitches: u32,
    glitch_limit: u32,
    state: &WorkerState,
    rt: &WorkerRuntime,
) where
    T: H2Io,
    F: std::future::Future<Output = ()>,
{
    if reason == Reason::EnhanceYourCalm {
        state.metrics.h2_abuse.inc();
        match &rt.cfg.shield {
            Some(shield) if glitch_limit > 0 && glitches >= glitch_limit => {
                shield.violation(
                    peer.ip(),
                    crate::shield::Limit::Http2Glitches,
                    crate::shield::Action::Close,
                );
                tracing::debug!(%peer, "HTTP/2 glitch threshold: GOAWAY and close");
            }
            _ => tracing::debug!(%peer, "HTTP/2 flood: GOAWAY ENHANCE_YOUR_CALM"),
        }
    } else {
        tracing::debug!(%peer, ?reason, "HTTP/2 connection error");
    }
    d.fail(reason);
    let _ = tokio::time::timeout(
        GOAWAY_GRACE,
        std::future::poll_fn(|cx| d.poll_flush_all(cx)),
    )
    .await;
    linger(d).await;
}

/// The lingering close, within [`GOAWAY_GRACE`].
async fn linger<T, F>(d: &mut driver::Driver<T, F>)
where
    T: H2Io,
    F: std::future::Future<Output = ()>,
{
    let _ = tokio::time::timeout(GOAWAY_GRACE, std::future::poll_fn(|cx| d.poll_linger(cx))).await;
}
