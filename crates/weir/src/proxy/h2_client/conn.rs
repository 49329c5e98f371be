//! One HTTP/2 connection to an upstream server: the socket, `weir_h2::client::Client` (the
//! sans-IO codec), and the task that drives them (reads frames into the streams' queues,
//! writes what the streams and the codec owe, pings an idle connection and closes one that
//! does not answer).
//!
//! The streams ([`super::stream::ClientStream`]) and the driver share the connection on the
//! worker's thread (`Rc`, `RefCell` never held across an await): a stream encodes its frames
//! into the connection's output and wakes the writer; the reader hands each stream its events
//! and wakes it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::Waker;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use weir_h2::client::{Client, Event};
use weir_h2::settings::Settings;
use weir_h2::Reason;

use super::Policy;
use crate::proxy::socket::Socket;

/// The receive window of a connection. It is given back as DATA arrives (queued for its
/// stream), not as clients read: the connection is shared by every client of the worker, and
/// a window given back on reading let clients that stop reading streamed answers hold it
/// whole, and every other call stall (the review of issue 55's first part). What is held is
/// bounded by the streams' windows instead: [`STREAM_WINDOW`] for each request not yet
/// relayed whole (requests in flight are capped by the upstream's `limits.max_requests`).
pub(super) const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;

/// Each stream's receive window: what an answer may have in flight before its client reads.
const STREAM_WINDOW: u32 = 128 * 1024;

/// Frames owed past this and a stream's DATA waits for the writer (the server reads slowly).
pub(super) const OUT_HIGH: usize = 256 * 1024;

/// Frames owed past this (acknowledgements the server asks for and does not read): the
/// connection is closed.
const OUT_LIMIT: usize = 4 * 1024 * 1024;

/// Largest response head or trailer section taken.
const MAX_HEADER_LIST: u32 = 64 * 1024;

/// Why a stream ended without its answer.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The server did not process it (GOAWAY above it, or REFUSED_STREAM): it may be sent
    /// again on another connection (RFC 9113 §8.7).
    Unprocessed,
    /// The server reset it.
    Reset(u32),
    /// The connection failed or closed.
    Gone(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unprocessed => f.write_str("the server did not process the stream"),
            Failure::Reset(code) => write!(f, "the stream was reset (code {code:#x})"),
            Failure::Gone(why) => write!(f, "HTTP/2 connection: {why}"),
        }
    }
}

/// A stream's side of the connection: what arrived for it, not yet taken.
pub(super) struct Slot {
    pub(super) id: u32,
    pub(super) events: VecDeque<super::stream::Incoming>,
    pub(super) failed: Option<Failure>,
    pub(super) waker: Option<Waker>,
}

pub(super) struct Inner {
    pub(super) client: Client,
    /// Frames owed to the server, written by the driver.
    pub(super) out: Vec<u8>,
    pub(super) slots: Vec<Slot>,
    /// Why the connection ended, once it did.
    pub(super) dead: Option<String>,
    /// The server's first SETTINGS came.
    settled: bool,
    /// When the last stream ended (or the connection opened): for the idle timeout.
    idle_since: Instant,
    /// Octets of `out` the reading side owes (acknowledgements, window updates, resets) since
    /// the writer last took it: past [`OUT_LIMIT`] the server asks and does not read.
    owed_by_reads: usize,
}

/// One connection, shared by the streams on it and its driver.
pub(crate) struct H2Conn {
    pub(super) inner: RefCell<Inner>,
    /// Frames are waiting in `out`.
    pub(super) writer: Notify,
    /// Send windows grew, or a stream failed: writers waiting on them look again.
    pub(super) windows: Notify,
    /// A stream ended or the connection changed state: requests waiting for room look again.
    pub(super) room: Notify,
    /// The server's SETTINGS came, or the connection ended.
    settled: Notify,
    /// The writer took what was owed.
    pub(super) drained: Notify,
    driver: RefCell<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.borrow();
        f.debug_struct("H2Conn")
            .field("active", &inner.client.active())
            .field("dead", &inner.dead)
            .finish()
    }
}

impl H2Conn {
    /// Starts the connection over `socket` and waits (within `within`) for the server's
    /// SETTINGS: a server that speaks no HTTP/2 is a connect failure, not a failed request.
    pub(super) async fn start(
        socket: Socket,
        policy: &Policy,
        within: Duration,
    ) -> io::Result<Rc<H2Conn>> {
        let local = Settings {
            initial_window_size: STREAM_WINDOW,
            max_header_list_size: Some(MAX_HEADER_LIST),
            ..Settings::default()
        };
        let mut client = Client::new(local, policy.max_streams);
        let mut out = Vec::with_capacity(256);
        client.greeting(CONNECTION_WINDOW, &mut out);
        let conn = Rc::new(H2Conn {
            inner: RefCell::new(Inner {
                client,
                out,
                slots: Vec::new(),
                dead: None,
                settled: false,
                idle_since: Instant::now(),
                owed_by_reads: 0,
            }),
            writer: Notify::new(),
            windows: Notify::new(),
            room: Notify::new(),
            settled: Notify::new(),
            drained: Notify::new(),
            driver: RefCell::new(None),
        });
        conn.writer.notify_one();
        let task = tokio::task::spawn_local(drive(conn.clone(), socket, *policy));
        *conn.driver.borrow_mut() = Some(task);
        // Closed if this wait is given up (a health check's own deadline, a client gone):
        // a server that never sent SETTINGS kept the socket for the ping's 40 s (second
        // attack review).
        let mut unsettled = Unsettled(Some(conn.clone()));
        let settled = async {
            loop {
                let wait = conn.settled.notified();
                {
                    let inner = conn.inner.borrow();
                    if let Some(why) = &inner.dead {
                        return Err(io::Error::other(format!("HTTP/2 handshake: {why}")));
                    }
                    if inner.settled {
                        return Ok(());
                    }
                }
                wait.await;
            }
        };
        let r = tokio::time::timeout(within, settled).await;
        if matches!(r, Ok(Ok(()))) {
            unsettled.0 = None;
        }
        match r {
            Ok(Ok(())) => Ok(conn),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                conn.close();
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "HTTP/2 handshake timed out (no SETTINGS from the server)",
                ))
            }
        }
    }

    /// Whether a new stream may start here now.
    pub(super) fn has_room(&self) -> bool {
        let inner = self.inner.borrow();
        inner.dead.is_none() && inner.client.may_open()
    }

    /// Whether the connection can never take a stream again (ended, or going away).
    pub(super) fn is_spent(&self) -> bool {
        let inner = self.inner.borrow();
        inner.dead.is_some() || inner.client.is_draining()
    }

    /// The server went away (or this side did) and no stream is left: nothing more to do.
    fn finished(&self) -> bool {
        let inner = self.inner.borrow();
        inner.client.is_draining() && inner.client.active() == 0 && inner.slots.is_empty()
    }

    /// Streams open on it.
    pub(super) fn active(&self) -> usize {
        self.inner.borrow().client.active()
    }

    /// Takes no new stream (GOAWAY to the server); closes once the streams in flight end.
    pub(crate) fn retire(&self) {
        let mut inner = self.inner.borrow_mut();
        let Inner { client, out, .. } = &mut *inner;
        client.go_away(Reason::NoError, out);
        drop(inner);
        self.writer.notify_one();
        self.room.notify_waiters();
    }

    /// Ends the connection now (the upstream left the config, or the handshake failed):
    /// its streams fail.
    pub(crate) fn close(&self) {
        if let Some(task) = self.driver.borrow_mut().take() {
            task.abort();
        }
        fail_all(self, "closed".into());
    }
}

/// Closes a connection whose start was not seen through.
struct Unsettled(Option<Rc<H2Conn>>);

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.close();
        }
    }
}

/// Every stream fails with `why`; the connection takes no more.
fn fail_all(conn: &H2Conn, why: String) {
    let mut inner = conn.inner.borrow_mut();
    if inner.dead.is_none() {
        inner.dead = Some(why.clone());
    }
    for slot in &mut inner.slots {
        if slot.failed.is_none() {
            slot.failed = Some(Failure::Gone(why.clone()));
        }
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
    drop(inner);
    conn.windows.notify_waiters();
    conn.drained.notify_waiters();
    conn.room.notify_waiters();
    conn.settled.notify_waiters();
}

/// The connection's task: reads and writes until either fails, the server goes away and every
/// stream ended, or the connection idled past its timeout.
async fn drive(conn: Rc<H2Conn>, socket: Socket, policy: Policy) {
    let (mut rd, mut wr) = tokio::io::split(socket);
    let why = tokio::select! {
        why = read_loop(&conn, &mut rd, &policy) => why,
        why = write_loop(&conn, &mut wr) => why,
    };
    // Frames owed (a GOAWAY) go out before the socket closes, within a bound.
    let owed = std::mem::take(&mut conn.inner.borrow_mut().out);
    if !owed.is_empty() {
        let _ = tokio::time::timeout(Duration::from_secs(1), wr.write_all(&owed)).await;
    }
    tracing::debug!(reason = %why, "HTTP/2 upstream connection ended");
    fail_all(&conn, why);
}

async fn write_loop(conn: &H2Conn, wr: &mut tokio::io::WriteHalf<Socket>) -> String {
    let mut spare = Vec::with_capacity(16 * 1024);
    loop {
        let pending = {
            let mut inner = conn.inner.borrow_mut();
            std::mem::swap(&mut inner.out, &mut spare);
            inner.owed_by_reads = 0;
            !spare.is_empty()
        };
        if !pending {
            if conn.finished() {
                return "the server went away and every stream ended".into();
            }
            conn.writer.notified().await;
            continue;
        }
        if let Err(e) = wr.write_all(&spare).await {
            return format!("write: {e}");
        }
        if let Err(e) = wr.flush().await {
            return format!("write: {e}");
        }
        spare.clear();
        conn.drained.notify_waiters();
        if spare.capacity() > 256 * 1024 {
            spare = Vec::with_capacity(16 * 1024);
        }
    }
}

async fn read_loop(conn: &H2Conn, rd: &mut tokio::io::ReadHalf<Socket>, policy: &Policy) -> String {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut events = Vec::new();
    let mut last_read = Instant::now();
    // A PING this side sent and awaits: its payload and when it went.
    let mut ping: Option<([u8; 8], Instant)> = None;
    let mut pings = 0u64;
    loop {
        let now = Instant::now();
        let next = match ping {
            Some((_, sent)) => sent + policy.ping_timeout,
            None => last_read + policy.ping_interval,
        };
        let idle_at = {
            let inner = conn.inner.borrow();
            (inner.slots.is_empty() && inner.client.active() == 0)
                .then_some(inner.idle_since + idle_limit(&inner, policy))
        };
        let wake = idle_at.map_or(next, |i| i.min(next));
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        let read = tokio::select! {
            r = rd.read_buf(&mut buf) => Some(r),
            _ = tokio::time::sleep_until(wake.max(now)) => None,
        };
        match read {
            Some(Ok(0)) => return "the server closed the connection".into(),
            Some(Err(e)) => return format!("read: {e}"),
            Some(Ok(_)) => last_read = Instant::now(),
            None => {
                let now = Instant::now();
                let idle = {
                    let inner = conn.inner.borrow();
                    inner.slots.is_empty()
                        && inner.client.active() == 0
                        && now >= inner.idle_since + idle_limit(&inner, policy)
                };
                if idle {
                    let mut inner = conn.inner.borrow_mut();
                    let Inner { client, out, .. } = &mut *inner;
                    client.go_away(Reason::NoError, out);
                    return "idle past keepalive.idle_timeout".into();
                }
                match ping {
                    Some((_, sent)) if now >= sent + policy.ping_timeout => {
                        return format!(
                            "no PING acknowledgement within {:?} (http2.ping_timeout)",
                            policy.ping_timeout
                        );
                    }
                    Some(_) => {}
                    None if now >= last_read + policy.ping_interval => {
                        pings += 1;
                        let data = pings.to_be_bytes();
                        let mut inner = conn.inner.borrow_mut();
                        let Inner { client, out, .. } = &mut *inner;
                        client.ping(data, out);
                        ping = Some((data, now));
                        drop(inner);
                        conn.writer.notify_one();
                    }
                    None => {}
                }
                continue;
            }
        }
        let mut inner = conn.inner.borrow_mut();
        let active_before = inner.client.active();
        let Inner { client, out, .. } = &mut *inner;
        let owed_before = out.len();
        let taken = match client.recv(&buf, out, &mut events) {
            Ok(n) => n,
            Err(reason) => {
                client.go_away(reason, out);
                return format!("the server broke the protocol ({reason:?})");
            }
        };
        let _ = buf.split_to(taken);
        let owed_now = out.len().saturating_sub(owed_before);
        inner.owed_by_reads += owed_now;
        if inner.owed_by_reads > OUT_LIMIT {
            return "the server sends and does not read what it asks for".into();
        }
        let owed = !inner.out.is_empty();
        let mut windows = false;
        // A stream the server ended or reset frees room, whether or not its reader is done
        // (second attack review: a waiting request was not woken).
        let mut room = inner.client.active() < active_before;
        for e in events.drain(..) {
            match e {
                Event::PingAck { data } => {
                    if ping.is_some_and(|(p, _)| p == data) {
                        ping = None;
                    }
                }
                Event::WindowOpened => windows = true,
                // SETTINGS_MAX_CONCURRENT_STREAMS may have grown: requests waiting look again.
                Event::Settings => room = true,
                Event::GoAway { last_stream, code } => {
                    room = true;
                    tracing::debug!(last_stream, code, "HTTP/2 upstream going away");
                    for slot in inner.slots.iter_mut().filter(|s| s.id > last_stream) {
                        slot.failed.get_or_insert(Failure::Unprocessed);
                        if let Some(w) = slot.waker.take() {
                            w.wake();
                        }
                    }
                }
                e => {
                    use super::stream::Incoming;
                    let (id, got) = match e {
                        Event::Head {
                            stream,
                            status,
                            fields,
                            end_stream,
                        } => (stream, Ok(Incoming::Head(status, fields, end_stream))),
                        Event::Interim { stream, .. } => (stream, Ok(Incoming::Interim)),
                        Event::Data {
                            stream,
                            data,
                            end_stream,
                        } => {
                            // The connection's window back at once (see CONNECTION_WINDOW).
                            let Inner { client, out, .. } = &mut *inner;
                            client.received(data.len() as u32, out);
                            (stream, Ok(Incoming::Data(data, end_stream)))
                        }
                        Event::Trailers { stream, fields } => {
                            (stream, Ok(Incoming::Trailers(fields)))
                        }
                        Event::Reset { stream, code } => (
                            stream,
                            Err(match code {
                                c if c == Reason::RefusedStream as u32 => Failure::Unprocessed,
                                c => Failure::Reset(c),
                            }),
                        ),
                        _ => continue,
                    };
                    if let Some(slot) = inner.slots.iter_mut().find(|s| s.id == id) {
                        match got {
                            Err(f) => {
                                slot.failed.get_or_insert(f);
                                windows = true;
                            }
                            // Body pieces in a row are one: what is queued is bounded by the
                            // stream's window in octets, whatever the frames' count.
                            Ok(Incoming::Data(more, end)) => match slot.events.back_mut() {
                                Some(Incoming::Data(queued, false)) => {
                                    queued.extend_from_slice(&more);
                                    if end {
                                        let whole = std::mem::take(queued);
                                        slot.events.pop_back();
                                        slot.events.push_back(Incoming::Data(whole, true));
                                    }
                                }
                                _ => slot.events.push_back(Incoming::Data(more, end)),
                            },
                            Ok(incoming) => slot.events.push_back(incoming),
                        }
                        if let Some(w) = slot.waker.take() {
                            w.wake();
                        }
                    }
                }
            }
        }
        let over =
            inner.client.is_draining() && inner.client.active() == 0 && inner.slots.is_empty();
        if !inner.settled && inner.client.peer_settled() {
            inner.settled = true;
            conn.settled.notify_waiters();
        }
        drop(inner);
        if owed {
            conn.writer.notify_one();
        }
        if windows {
            conn.windows.notify_waiters();
        }
        if room {
            conn.room.notify_waiters();
        }
        if over {
            return "the server went away and every stream ended".into();
        }
    }
}

/// How long the connection may stay without streams: `keepalive.idle_timeout`, nothing when
/// it is going away.
fn idle_limit(inner: &Inner, policy: &Policy) -> Duration {
    match inner.client.is_draining() {
        true => Duration::ZERO,
        false => policy.idle_timeout,
    }
}

/// A stream left the connection: its slot goes; an idle connection starts its idle clock.
pub(super) fn stream_ended(conn: &H2Conn, id: u32) {
    let mut inner = conn.inner.borrow_mut();
    let mut owed = false;
    if let Some(i) = inner.slots.iter().position(|s| s.id == id) {
        inner.slots.swap_remove(i);
    }
    if inner.client.has(id) {
        let Inner { client, out, .. } = &mut *inner;
        client.cancel(id, out);
        owed = true;
    }
    if inner.slots.is_empty() {
        inner.idle_since = Instant::now();
    }
    // A connection going away ends with its last stream: the writer looks.
    let last = inner.client.is_draining() && inner.slots.is_empty();
    drop(inner);
    if owed || last {
        conn.writer.notify_one();
    }
    conn.room.notify_waiters();
}
