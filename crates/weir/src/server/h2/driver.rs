//! The connection's one task: reads bytes into weir-h2's [`Conn`], starts a stream future
//! for each request, polls the streams inside the same task, gathers what they queued into
//! frames and writes them with vectored writes, one turn after another until nothing moves.
//! Everything the streams answer in one wake-up leaves in one write.
//!
//! Backpressure: while more than [`WRITE_HIGH`] octets wait to be written, nothing more is
//! read (a peer that does not read is not fed: its PINGs and SETTINGS owe acknowledgements).

use std::cell::RefCell;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use weir_h2::conn::Event;
use weir_h2::request::Pseudo;
use weir_h2::{frame, Reason};

use super::head::Lines;
use super::park::{H2Io, ParkTo, Quiet};
use super::slots::{Shared, Slot, Writes, WRITE_HIGH};

/// Room kept free in the read buffer before a read.
const READ_ROOM: usize = 16 * 1024;
/// Iovecs per write.
const IOVECS: usize = 64;

/// A request as the driver hands it to a new stream.
#[derive(Debug)]
pub(crate) enum Incoming {
    Head {
        pseudo: Pseudo,
        fields: Lines,
        has_body: bool,
    },
    /// Its header list was over SETTINGS_MAX_HEADER_LIST_SIZE: 431.
    TooLarge,
}

/// How the connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Both sides are done (GOAWAY and no stream left, or the peer closed).
    Done,
    /// A connection error: GOAWAY with it, then close.
    Error(Reason),
    /// The socket failed.
    Io,
}

/// The limits the driver enforces beyond weir-h2's own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Streams the peer may open and reset in one read (rapid reset, CVE-2023-44487: the
    /// `h2` crate's reset streams "pending accept").
    pub pending_resets: usize,
    /// Streams weir may reset for the peer's errors before the connection ends.
    pub error_resets: u32,
}

pub(crate) struct Driver<T: H2Io, F> {
    /// `None` once handed to a parked slot (`park.rs`).
    io: Option<T>,
    /// Where the connection parks when the sweeper asks (`None`: it does not).
    pub park: Option<ParkTo>,
    pub shared: Rc<RefCell<Shared>>,
    rbuf: BytesMut,
    w: Writes,
    /// The write side holds bytes not yet flushed (TLS).
    unflushed: bool,
    /// `rbuf` holds bytes read before the driver started (h2c's preface).
    fresh: bool,
    /// The write side was shut ([`Driver::poll_linger`]), and what was read since.
    shut: bool,
    lingered: usize,
    streams: FuturesUnordered<F>,
    events: Vec<Event<Lines>>,
    read_closed: bool,
    /// weir sent GOAWAY (graceful): the last stream it processes.
    pub goaway: Option<u32>,
    /// A stream ended since the caller last looked ([`Driver::take_active`]).
    active: bool,
    /// When the socket last took bytes, or when bytes started waiting.
    wrote_at: tokio::time::Instant,
    /// Reads so far (a stream opened and reset in the same one counts toward rapid reset).
    reads: u64,
    limits: Limits,
}

impl<T, F> Driver<T, F>
where
    T: H2Io,
    F: Future<Output = ()>,
{
    /// A driver over `io`, whose first bytes `prefix` were read already (h2c's preface).
    pub(crate) fn new(io: T, prefix: Bytes, shared: Shared, limits: Limits) -> Driver<T, F> {
        let mut rbuf = BytesMut::new();
        rbuf.extend_from_slice(&prefix);
        let fresh = !prefix.is_empty();
        Driver {
            io: Some(io),
            park: None,
            shared: Rc::new(RefCell::new(shared)),
            rbuf,
            w: Writes::default(),
            unflushed: false,
            fresh,
            shut: false,
            lingered: 0,
            streams: FuturesUnordered::new(),
            events: Vec::new(),
            read_closed: false,
            goaway: None,
            active: false,
            wrote_at: tokio::time::Instant::now(),
            reads: 0,
            limits,
        }
    }

    /// Whether no stream is being answered.
    pub(crate) fn idle(&self) -> bool {
        self.streams.is_empty()
    }

    /// Whether a stream ended since the last call (the keep-alive timer starts again).
    pub(crate) fn take_active(&mut self) -> bool {
        std::mem::take(&mut self.active)
    }

    /// Whether the connection's start is over.
    pub(crate) fn open(&self) -> bool {
        self.shared.borrow().conn.is_open()
    }

    /// Asks the peer to go away: GOAWAY NO_ERROR with the last stream opened; the streams
    /// open finish, later ones are refused.
    pub(crate) fn graceful(&mut self) {
        if self.goaway.is_none() {
            let mut s = self.shared.borrow_mut();
            let last = s.conn.last_stream();
            frame::put_goaway(&mut s.owed, last, Reason::NoError, b"");
            self.goaway = Some(last);
        }
    }

    /// Ends with `reason`: GOAWAY (the streams are dropped with the driver).
    pub(crate) fn fail(&mut self, reason: Reason) {
        let mut s = self.shared.borrow_mut();
        let last = s.conn.last_stream();
        frame::put_goaway(&mut s.owed, last, reason, b"");
        s.slots.clear();
        drop(s);
        self.streams = FuturesUnordered::new();
        self.goaway = Some(last);
        self.read_closed = true;
    }

    /// Gives the buffers' memory back while nothing is in flight (an idle connection).
    pub(crate) fn release(&mut self) {
        if self.rbuf.is_empty() {
            self.rbuf = BytesMut::new();
        }
        self.w.release();
        self.shared.borrow_mut().release();
    }

    /// Runs the connection: `Some` when it ended; `None` when it went from idle to busy or
    /// back, or its start ended (the caller re-arms its timers).
    pub(crate) fn poll_drive(
        &mut self,
        cx: &mut Context<'_>,
        start: &impl Fn(u32, Incoming) -> (F, Option<u64>),
    ) -> Poll<Option<Ended>> {
        let was = (self.streams.is_empty(), self.open(), self.parkable());
        loop {
            let mut progressed = false;
            if !self.read_closed && self.w.len() < WRITE_HIGH {
                match self.poll_read(cx) {
                    Poll::Ready(Ok(0)) => {
                        self.read_closed = true;
                        progressed = true;
                    }
                    Poll::Ready(Ok(_)) => {
                        progressed = true;
                        if let Err(r) = self.take_input(start) {
                            return Poll::Ready(Some(Ended::Error(r)));
                        }
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(Some(Ended::Io)),
                    Poll::Pending => {}
                }
            }
            while let Poll::Ready(Some(())) = self.streams.poll_next_unpin(cx) {
                progressed = true;
                self.active = true;
            }
            progressed |= self.shared.borrow_mut().gather(&mut self.w);
            match self.poll_write(cx) {
                Poll::Ready(Err(_)) => return Poll::Ready(Some(Ended::Io)),
                Poll::Ready(Ok(wrote)) => progressed |= wrote,
                Poll::Pending => {}
            }
            let closing = self.read_closed || self.goaway.is_some();
            if closing
                && self.streams.is_empty()
                && self.w.is_empty()
                && !self.unflushed
                && self.shared.borrow().slots.is_empty()
            {
                return Poll::Ready(Some(Ended::Done));
            }
            if !progressed {
                break;
            }
        }
        if (self.streams.is_empty(), self.open(), self.parkable()) != was {
            return Poll::Ready(None);
        }
        Poll::Pending
    }

    /// Writes what waits (a GOAWAY before closing, say).
    pub(crate) fn poll_flush_all(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.shared.borrow_mut().gather(&mut self.w);
        loop {
            match self.poll_write(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(_)) if self.w.is_empty() && !self.unflushed => {
                    return Poll::Ready(Ok(()))
                }
                Poll::Ready(Ok(true)) => {}
                Poll::Ready(Ok(false)) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Closes as a peer that may still be sending expects (nginx's lingering close): the
    /// write side shut (TLS: close_notify), then what arrives read and dropped until the peer
    /// closes, so that unread bytes do not turn the close into a reset that loses the last
    /// frames written (a GOAWAY). The caller bounds it in time; it is bounded in octets here.
    pub(crate) fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        const LINGER_BYTES: usize = 1 << 20;
        if !self.shut {
            let Some(io) = self.io.as_mut() else {
                return Poll::Ready(());
            };
            match Pin::new(io).poll_shutdown(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(_) => self.shut = true,
            }
        }
        loop {
            if self.read_closed || self.lingered > LINGER_BYTES {
                return Poll::Ready(());
            }
            self.rbuf.clear();
            match self.poll_read(cx) {
                Poll::Ready(Ok(n)) if n > 0 => self.lingered += n,
                Poll::Ready(_) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if std::mem::take(&mut self.fresh) {
            // h2c's preface, read already, is taken first.
            return Poll::Ready(Ok(self.rbuf.len()));
        }
        self.rbuf.reserve(READ_ROOM);
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        tokio_util::io::poll_read_buf(Pin::new(io), cx, &mut self.rbuf)
    }

    /// Feeds what was read to the connection and acts on its events.
    fn take_input(
        &mut self,
        start: &impl Fn(u32, Incoming) -> (F, Option<u64>),
    ) -> Result<(), Reason> {
        self.reads += 1;
        let mut sh = self.shared.borrow_mut();
        let sh = &mut *sh;
        let taken = sh
            .conn
            .recv(&self.rbuf, Instant::now(), &mut sh.owed, &mut self.events)?;
        self.rbuf.advance(taken);
        sh.note_table_size();
        let mut resets = 0;
        for e in self.events.drain(..) {
            match e {
                Event::Request {
                    stream,
                    pseudo,
                    fields,
                    end_stream,
                } => {
                    if self.goaway.is_some_and(|last| stream > last) {
                        // After GOAWAY: not processed (the peer may retry it elsewhere).
                        sh.conn.reset(stream, Reason::RefusedStream, &mut sh.owed);
                        continue;
                    }
                    if sh.slot(stream).is_some() {
                        continue;
                    }
                    let incoming = Incoming::Head {
                        pseudo,
                        fields,
                        has_body: !end_stream,
                    };
                    // The head is parsed now: its DATA is held to the length it announces,
                    // as the parser read it (what the origin will be told).
                    let (future, declared) = start(stream, incoming);
                    if end_stream && declared.is_some_and(|n| n > 0) {
                        // §8.1.1: a body of 0 octets, announced longer.
                        sh.malformed(stream)?;
                        continue;
                    }
                    sh.slots
                        .push(Slot::new(stream, end_stream, declared, self.reads));
                    self.streams.push(future);
                }
                Event::TooLarge { stream } => {
                    if sh.slot(stream).is_some() {
                        continue;
                    }
                    sh.slots.push(Slot::new(stream, false, None, self.reads));
                    self.streams.push(start(stream, Incoming::TooLarge).0);
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => {
                    let n = data.len();
                    let Some(s) = sh.slot(stream).filter(|s| !s.done && !s.reset) else {
                        // No one reads it: its window is given back at once.
                        sh.conn.consumed(stream, n as u32, &mut sh.owed);
                        continue;
                    };
                    s.received += n as u64;
                    let wrong = s
                        .declared
                        .is_some_and(|d| s.received > d || (end_stream && s.received != d));
                    if wrong {
                        sh.conn.consumed(stream, n as u32, &mut sh.owed);
                        sh.malformed(stream)?;
                        continue;
                    }
                    if n > 0 {
                        s.body.push_back(Bytes::from(data));
                    }
                    s.body_ended |= end_stream;
                    s.wake();
                }
                Event::Trailers { stream, fields } => {
                    let Some(s) = sh.slot(stream) else { continue };
                    if s.declared.is_some_and(|d| s.received != d) {
                        sh.malformed(stream)?;
                        continue;
                    }
                    s.trailers = fields.into_headers();
                    s.body_ended = true;
                    s.wake();
                }
                Event::Aborted { stream } => {
                    if let Some(s) = sh.slot(stream) {
                        s.reset = true;
                        s.out.clear();
                        s.wake();
                    }
                }
                Event::Reset { stream, .. } => {
                    if let Some(s) = sh.slot(stream) {
                        if s.opened_in == self.reads {
                            // Opened and reset in the same read: rapid reset's pattern.
                            resets += 1;
                        }
                        s.reset = true;
                        s.out.clear();
                        s.wake();
                    }
                }
                // The peer opens no more streams and closes when it is done; until then its
                // frames are answered (a PING after GOAWAY, say: h2spec 6.8/1).
                Event::GoAway { .. } => {}
                Event::Calm => {
                    if self.goaway.is_none() {
                        let last = sh.conn.last_stream();
                        frame::put_goaway(&mut sh.owed, last, Reason::NoError, b"");
                        self.goaway = Some(last);
                    }
                }
            }
        }
        if resets > self.limits.pending_resets {
            // Rapid reset (CVE-2023-44487): streams opened and reset before any answer.
            return Err(Reason::EnhanceYourCalm);
        }
        if sh.conn.error_resets() > self.limits.error_resets {
            return Err(Reason::EnhanceYourCalm);
        }
        // Window updates may have come: the streams waiting for window look again.
        for s in &mut sh.slots {
            if s.window_wait && sh.conn.send_window(s.id) > 0 {
                s.window_wait = false;
                s.wake();
            }
        }
        Ok(())
    }

    /// Since when bytes wait to be written without the socket taking any (`None`: nothing
    /// waits).
    pub(crate) fn write_stalled(&self) -> Option<tokio::time::Instant> {
        (!self.w.is_empty() || self.unflushed).then_some(self.wrote_at)
    }

    /// Writes what waits; `Ok(true)` when something was written.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>> {
        if self.w.is_empty() && !self.unflushed {
            // Nothing waited: a stall, if any, counts from now.
            self.wrote_at = tokio::time::Instant::now();
            return Poll::Ready(Ok(false));
        }
        self.w.seal();
        let mut wrote = false;
        while !self.w.segments.is_empty() {
            let mut slices = [IoSlice::new(&[]); IOVECS];
            let mut n = 0;
            for (slot, seg) in slices.iter_mut().zip(self.w.segments.iter()) {
                *slot = IoSlice::new(seg);
                n += 1;
            }
            let Some(io) = self.io.as_mut() else {
                return Poll::Ready(Err(std::io::ErrorKind::NotConnected.into()));
            };
            match Pin::new(io).poll_write_vectored(cx, &slices[..n]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(k)) => {
                    self.w.advance(k);
                    wrote = true;
                    self.unflushed = true;
                    self.wrote_at = tokio::time::Instant::now();
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Ready(Ok(wrote)),
            }
        }
        if self.unflushed {
            let Some(io) = self.io.as_mut() else {
                return Poll::Ready(Err(std::io::ErrorKind::NotConnected.into()));
            };
            match Pin::new(io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        Poll::Ready(Ok(wrote))
    }
}

/// Parking (`park.rs`).
impl<T: H2Io, F> Driver<T, F> {
    /// Whether the connection could be parked now: no stream, nothing to write or half read,
    /// open and not going away, and its transport quiet (or quiet after one write).
    pub(crate) fn parkable(&self) -> Quiet {
        let idle = self.streams.is_empty()
            && self.w.is_empty()
            && !self.unflushed
            && self.rbuf.is_empty()
            && !self.fresh
            && !self.read_closed
            && self.goaway.is_none()
            && self.park.is_some();
        let Some(io) = self.io.as_ref() else {
            return Quiet::No;
        };
        if !idle {
            return Quiet::No;
        }
        let sh = self.shared.borrow();
        if !sh.slots.is_empty() || !sh.owed.is_empty() || !sh.conn.is_open() || !sh.conn.idle() {
            return Quiet::No;
        }
        io.quiet()
    }

    /// Writes a frame the peer answers with nothing (a one-octet WINDOW_UPDATE), so that the
    /// TLS session owes nothing.
    pub(crate) fn quieten(&mut self) {
        let mut sh = self.shared.borrow_mut();
        let Shared { conn, owed, .. } = &mut *sh;
        conn.nudge(owed);
    }

    /// What parks (the sweeper aborted the task to park it, and it is idle): the transport and
    /// the connection's state. `None` otherwise.
    pub(crate) fn take_for_park(&mut self) -> Option<(ParkTo, T, Box<Shared>)> {
        if self.parkable() != Quiet::Yes {
            return None;
        }
        let to = self.park.take()?;
        if !to.state.parking(to.key) {
            self.park = Some(to);
            return None;
        }
        let io = self.io.take()?;
        let mut shared = self.shared.borrow_mut();
        let parked = std::mem::replace(&mut *shared, Shared::placeholder());
        Some((to, io, Box::new(parked)))
    }

    /// Closes the transport (TLS: `close_notify` if the socket takes it).
    pub(crate) fn close_io(&mut self) {
        if let Some(io) = self.io.as_mut() {
            io.close_now();
        }
    }
}

/// A driver dropped while its connection parks hands it to its slot (`park.rs`); else the
/// transport closes.
impl<T: H2Io, F> Drop for Driver<T, F> {
    fn drop(&mut self) {
        match self.take_for_park() {
            Some((to, io, shared)) => {
                let Some((tcp, idle)) = io.into_parked() else {
                    return;
                };
                let tls = match (idle, &to.tls) {
                    (Some(idle), Some(info)) => Some((idle, crate::tls::TlsInfo::clone(info))),
                    (None, None) => None,
                    _ => return,
                };
                let on = (&to.rt, to.listener);
                to.state.park_h2(to.key, tcp, tls, shared, on, to.peer);
            }
            None => self.close_io(),
        }
    }
}
