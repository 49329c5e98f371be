//! The receiving side of a server connection, sans-IO: bytes in, events and frames to write
//! out. It holds what RFC 9113 makes the connection's business and nothing of the requests
//! themselves: the start ([`crate::preface`]), both sides' SETTINGS, the HPACK decoder, stream
//! states and windows, header blocks split over CONTINUATION, and the flood and glitch guard.
//! Requests come out as [`Event`]s with their fields checked ([`crate::request`]); what the
//! caller answers goes out through its own writer (the response side builds on
//! [`crate::response`] and [`crate::frame`]'s encoders).
//!
//! Errors: a connection error ends the connection (`Err(reason)`: the caller writes GOAWAY
//! with [`Conn::last_stream`] and closes); a stream error resets that stream (RST_STREAM written
//! here) and the connection goes on, the reset counted as a glitch when the peer caused it.

use std::collections::VecDeque;
use std::time::Instant;

use crate::flow::{RecvWindow, SendWindow, DEFAULT_WINDOW};
use crate::frame::{self, Frame, FrameError, HEADER_LEN};
use crate::guard::{Guard, Verdict};
use crate::hpack::decoder::{Decoder, Sink};
use crate::preface::Start;
use crate::request::Pseudo;
use crate::settings::Settings;
use crate::stream::{Ending, Event as On, PeerIds, Recv, State};
use crate::Reason;

/// Fields as decoded (name, value): the simplest sink, for tests and tools; weir's server
/// gives its own ([`Conn`]'s `S`) that writes them where its request head is built.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What a connection decodes a request's regular fields into (one per header block).
pub trait FieldSink: Sink + Default + std::fmt::Debug {}

impl<S: Sink + Default + std::fmt::Debug> FieldSink for S {}

/// What the connection tells its caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<S = Fields> {
    /// A request head; `end_stream`: no body follows.
    Request {
        stream: u32,
        pseudo: Pseudo,
        fields: S,
        end_stream: bool,
    },
    /// A request's header list was over the advertised size: answer 431 (the table is in step).
    TooLarge {
        stream: u32,
    },
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    Trailers {
        stream: u32,
        fields: S,
    },
    /// The peer reset the stream.
    Reset {
        stream: u32,
        code: u32,
    },
    /// This side reset a stream whose request was given out, for the peer's error (a
    /// malformed trailer section, a window overflow): the application stops answering it.
    Aborted {
        stream: u32,
    },
    /// The peer is going away: no stream above `last_stream` will be processed by it.
    GoAway {
        last_stream: u32,
        code: u32,
    },
    /// The guard asks the connection to go away gracefully (three quarters of the glitches).
    Calm,
}

#[derive(Debug)]
struct Stream {
    id: u32,
    state: State,
    send: SendWindow,
    recv: RecvWindow,
}

/// Streams this side reset recently, whose frames in flight are ignored (§5.1 closed).
const RECENTLY_RESET: usize = 64;

/// One server connection's receiving side, decoding fields into `S`s.
#[derive(Debug)]
pub struct Conn<S = Fields> {
    start: Start,
    /// What weir advertised.
    pub local: Settings,
    /// What the peer set.
    pub peer: Settings,
    decoder: Decoder,
    guard: Guard,
    recv: RecvWindow,
    send: SendWindow,
    ids: PeerIds,
    streams: Vec<Stream>,
    reset: VecDeque<u32>,
    /// Streams that left the table lately (any way): frames on them are STREAM_CLOSED, on a
    /// lower id never opened PROTOCOL_ERROR (§5.1.1).
    closed: VecDeque<u32>,
    block: Option<Block>,
    /// What the guard said of this side's resets for the peer's errors, not yet acted on.
    verdict: Verdict,
    /// Streams this side reset for the peer's errors, over the connection's life.
    error_resets: u32,
    /// Streams reset for the peer's errors after their request was given out, not yet told.
    aborted: Vec<u32>,
    sink: std::marker::PhantomData<fn() -> S>,
}

impl<S: FieldSink> Conn<S> {
    /// A connection advertising `local`, guarded by `guard`. Write [`Conn::greeting`] first.
    pub fn new(local: Settings, guard: Guard) -> Conn<S> {
        Conn {
            start: Start::default(),
            decoder: Decoder::new(local.header_table_size as usize),
            local,
            peer: Settings::default(),
            guard,
            recv: RecvWindow::new(DEFAULT_WINDOW),
            send: SendWindow::new(DEFAULT_WINDOW),
            ids: PeerIds::default(),
            streams: Vec::new(),
            reset: VecDeque::new(),
            closed: VecDeque::new(),
            block: None,
            verdict: Verdict::Fine,
            error_resets: 0,
            aborted: Vec::new(),
            sink: std::marker::PhantomData,
        }
    }

    /// weir's SETTINGS, the server's preface.
    pub fn greeting(&self, out: &mut Vec<u8>) {
        Start::greeting(&self.local, out);
    }

    /// Whether the start is over (the peer's preface and SETTINGS arrived).
    pub fn is_open(&self) -> bool {
        self.start == Start::Open
    }

    /// The streams this side reset for the peer's errors so far (the h2 crate's
    /// `max_local_error_reset_streams`: the caller ends the connection past its limit).
    pub fn error_resets(&self) -> u32 {
        self.error_resets
    }

    /// The glitches counted so far (see [`crate::guard`]).
    pub fn glitches(&self) -> u32 {
        self.guard.glitches()
    }

    /// The request on `stream` is malformed in a way only the application sees (a body
    /// longer or shorter than its `content-length`, §8.1.1): a stream error the peer caused,
    /// RST_STREAM PROTOCOL_ERROR and a glitch. `Err` when the glitches end the connection.
    pub fn malformed(&mut self, stream: u32, out: &mut Vec<u8>) -> Result<(), Reason> {
        self.reset_stream(stream, Reason::ProtocolError, out);
        match std::mem::replace(&mut self.verdict, Verdict::Fine) {
            Verdict::Close => Err(Reason::EnhanceYourCalm),
            _ => Ok(()),
        }
    }

    /// Opens the connection's receive window to `size` (RFC 9113 §6.9.2: the connection's
    /// window starts at 65,535 whatever the SETTINGS say; a WINDOW_UPDATE on stream 0 grows it).
    pub fn open_connection_window(&mut self, size: u32, out: &mut Vec<u8>) {
        let now = self.recv.available();
        if size > now {
            frame::put_window_update(out, 0, size - now);
            self.recv = RecvWindow::new(size);
        }
    }

    /// Writes a WINDOW_UPDATE of one octet on the connection, and counts it: a frame the peer
    /// must accept and answers with nothing (weir writes it so that a TLS session that read
    /// since it last wrote has written, and owes nothing before parking).
    pub fn nudge(&mut self, out: &mut Vec<u8>) {
        if self.recv.grant(1) {
            frame::put_window_update(out, 0, 1);
        }
    }

    /// The peer's SETTINGS_MAX_FRAME_SIZE: the largest frame payload this side may send.
    pub fn peer_max_frame(&self) -> u32 {
        self.peer.max_frame_size
    }

    /// The highest stream the peer opened (GOAWAY's last-stream field).
    pub fn last_stream(&self) -> u32 {
        self.ids.last()
    }

    /// No stream in the table and no header block half received.
    pub fn idle(&self) -> bool {
        self.streams.is_empty() && self.block.is_none()
    }

    /// Gives back memory an idle connection does not need (the stream table's room, the
    /// HPACK decoder's scratch).
    pub fn shrink(&mut self) {
        if self.streams.is_empty() {
            self.streams = Vec::new();
        }
        self.decoder.shrink();
    }

    /// The streams open or half-closed.
    pub fn active(&self) -> usize {
        self.streams.iter().filter(|s| s.state.is_active()).count()
    }

    /// Takes what it can of `input` (whole frames; the rest waits for more bytes): events to
    /// `events`, frames this side owes (acknowledgements, resets, window updates) to `out`.
    /// The octets taken, or the connection error to end with.
    pub fn recv(
        &mut self,
        input: &[u8],
        now: Instant,
        out: &mut Vec<u8>,
        events: &mut Vec<Event<S>>,
    ) -> Result<usize, Reason> {
        let mut at = 0;
        if self.start != Start::Open {
            let step = self.start.step(input, &self.local, &mut self.peer, out)?;
            at = step.taken;
            if !step.open {
                return Ok(at);
            }
            self.apply_peer_window(DEFAULT_WINDOW)?;
        }
        while input.len() - at >= HEADER_LEN {
            let head = &input[at..at + HEADER_LEN];
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            if len > self.local.max_frame_size as usize {
                // §4.2: past the advertised SETTINGS_MAX_FRAME_SIZE.
                return Err(Reason::FrameSizeError);
            }
            if input.len() - at < HEADER_LEN + len {
                // Counted once, when whole.
                break;
            }
            match self.guard.frame(head[3], head[4], len, now) {
                Verdict::Close => return Err(Reason::EnhanceYourCalm),
                Verdict::GoAway => events.push(Event::Calm),
                Verdict::Fine => {}
            }
            match frame::decode(&input[at..], self.local.max_frame_size) {
                Ok(None) => break,
                Ok(Some((f, used))) => {
                    self.frame(f, out, events)?;
                    at += used;
                }
                Err(FrameError::Connection(r)) => return Err(r),
                Err(FrameError::Stream(stream, r)) => {
                    self.reset_stream(stream, r, out);
                    at += HEADER_LEN + len;
                }
            }
            match std::mem::replace(&mut self.verdict, Verdict::Fine) {
                Verdict::Close => return Err(Reason::EnhanceYourCalm),
                Verdict::GoAway => events.push(Event::Calm),
                Verdict::Fine => {}
            }
            events.extend(
                self.aborted
                    .drain(..)
                    .map(|stream| Event::Aborted { stream }),
            );
        }
        Ok(at)
    }

    /// The application took `n` octets of `stream`'s body: WINDOW_UPDATEs when due.
    pub fn consumed(&mut self, stream: u32, n: u32, out: &mut Vec<u8>) {
        if let Some(inc) = self.recv.taken(n) {
            frame::put_window_update(out, 0, inc);
        }
        if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
            if s.state.peer_may_send() {
                if let Some(inc) = s.recv.taken(n) {
                    frame::put_window_update(out, stream, inc);
                }
            }
        }
    }

    fn frame(
        &mut self,
        f: Frame<'_>,
        out: &mut Vec<u8>,
        events: &mut Vec<Event<S>>,
    ) -> Result<(), Reason> {
        // §6.10: nothing but CONTINUATION for the block's stream until the block ends.
        if let Some(b) = &self.block {
            match &f {
                Frame::Continuation { stream, .. } if *stream == b.stream => {}
                _ => return Err(Reason::ProtocolError),
            }
        }
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow,
            } => {
                self.recv.receive(flow)?;
                // Padding is taken at once; the data when the application takes it.
                let padding = flow - data.len() as u32;
                let s = match self.stream(stream) {
                    Ok(s) => s,
                    Err(e) => {
                        self.consumed(0, flow, out);
                        return self.data_on(e, stream, out);
                    }
                };
                match self.streams[s].state.recv(On::Data { end_stream }) {
                    Recv::To(next) => {
                        if self.streams[s].recv.receive(flow).is_err() {
                            self.consumed(0, flow, out);
                            self.reset_stream(stream, Reason::FlowControlError, out);
                            return Ok(());
                        }
                        self.streams[s].state = next;
                        if padding > 0 {
                            self.consumed(stream, padding, out);
                        }
                        events.push(Event::Data {
                            stream,
                            data: data.to_vec(),
                            end_stream,
                        });
                        self.forget_if_done(s);
                    }
                    r => {
                        self.consumed(0, flow, out);
                        return self.on_refusal(r, stream, out);
                    }
                }
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                priority,
                block,
            } => {
                if priority.is_some_and(|p| p.depends_on == stream) {
                    // §5.3.1: a stream cannot depend on itself. Its block is still decoded:
                    // the table must stay in step.
                    if self.ids.is_idle(stream) {
                        self.ids.open(stream)?;
                    }
                    self.reset_stream(stream, Reason::ProtocolError, out);
                    return self.decode_only(block, end_headers, stream, end_stream);
                }
                let known = self.streams.iter().any(|s| s.id == stream);
                let mut refused = false;
                if !known {
                    if !self.ids.is_idle(stream) {
                        // A stream closed before: its HEADERS is STREAM_CLOSED (§5.1).
                        if self.reset.contains(&stream) {
                            return self.decode_only(block, end_headers, stream, end_stream);
                        }
                        if self.closed.contains(&stream) {
                            return Err(Reason::StreamClosed);
                        }
                        if self.ids.never_opened(stream) {
                            // §5.1.1: a new stream below one already opened.
                            return Err(Reason::ProtocolError);
                        }
                        // Closed so long ago it is forgotten (trailers after weir's reset,
                        // say): ignored, as a reset stream's would be, and counted.
                        self.glitch_for_peer();
                        return self.decode_only(block, end_headers, stream, end_stream);
                    }
                    self.ids.open(stream)?;
                    let max = self.local.max_concurrent_streams.unwrap_or(u32::MAX) as usize;
                    refused = self.active() >= max;
                    if !refused {
                        self.streams.push(Stream {
                            id: stream,
                            state: State::Idle,
                            send: SendWindow::new(self.peer.initial_window_size),
                            recv: RecvWindow::new(self.local.initial_window_size),
                        });
                    }
                }
                if end_headers {
                    // A whole block (the usual case) is decoded where it lies.
                    self.block_done(stream, end_stream, refused, block, out, events)?;
                } else {
                    self.block = Some(Block {
                        stream,
                        end_stream,
                        bytes: block.to_vec(),
                        refused,
                        discard: false,
                    });
                }
            }
            Frame::Continuation {
                end_headers, block, ..
            } => {
                let Some(b) = &mut self.block else {
                    return Err(Reason::ProtocolError);
                };
                b.bytes.extend_from_slice(block);
                if end_headers {
                    if let Some(b) = self.block.take() {
                        if b.discard {
                            self.discard_block(&b.bytes)?;
                        } else {
                            self.block_done(
                                b.stream,
                                b.end_stream,
                                b.refused,
                                &b.bytes,
                                out,
                                events,
                            )?;
                        }
                    }
                }
            }
            Frame::Priority { stream, priority } => {
                if priority.depends_on == stream {
                    self.reset_stream(stream, Reason::ProtocolError, out);
                }
            }
            Frame::RstStream { stream, code } => {
                if self.ids.is_idle(stream) {
                    return Err(Reason::ProtocolError);
                }
                if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
                    self.forget(i);
                    events.push(Event::Reset { stream, code });
                }
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Settings { ack: false, params } => {
                let old = self.peer.apply(params)?;
                self.apply_peer_window(old)?;
                frame::put_settings_ack(out);
            }
            Frame::Ping { ack: false, data } => frame::put_ping(out, true, data),
            Frame::Ping { ack: true, .. } => {}
            Frame::GoAway {
                last_stream, code, ..
            } => events.push(Event::GoAway { last_stream, code }),
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => self.send.credit(increment)?,
            Frame::WindowUpdate { stream, increment } => {
                if self.ids.is_idle(stream) {
                    return Err(Reason::ProtocolError);
                }
                if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    if let Err(r) = s.send.credit(increment) {
                        self.reset_stream(stream, r, out);
                    }
                }
            }
            // A client never pushes (§8.4).
            Frame::PushPromise { .. } => return Err(Reason::ProtocolError),
            Frame::Unknown { .. } => {}
        }
        Ok(())
    }

    /// The index of `stream` in the table, or what to do about a frame on a stream not there.
    fn stream(&self, stream: u32) -> Result<usize, Missing> {
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            return Ok(i);
        }
        if self.ids.is_idle(stream) {
            return Err(Missing::Idle);
        }
        if self.reset.contains(&stream) {
            return Err(Missing::ResetHere);
        }
        if self.closed.contains(&stream) {
            return Err(Missing::Closed);
        }
        if self.ids.never_opened(stream) {
            return Err(Missing::NeverOpened);
        }
        Err(Missing::Forgotten)
    }

    /// A frame the peer should not have sent, ignored: a glitch.
    fn glitch_for_peer(&mut self) {
        match self.guard.reset_for_peer() {
            Verdict::Fine => {}
            v => self.verdict = v,
        }
    }

    fn on_refusal(&mut self, r: Recv, stream: u32, out: &mut Vec<u8>) -> Result<(), Reason> {
        match r {
            Recv::To(_) | Recv::Ignore => Ok(()),
            Recv::StreamError(reason) => {
                self.reset_stream(stream, reason, out);
                Ok(())
            }
            Recv::ConnectionError(reason) => Err(reason),
        }
    }

    /// Resets `stream` for the peer's error: RST_STREAM, the stream forgotten (its late frames
    /// ignored), a glitch counted.
    fn reset_stream(&mut self, stream: u32, reason: Reason, out: &mut Vec<u8>) {
        self.error_resets = self.error_resets.saturating_add(1);
        frame::put_rst_stream(out, stream, reason);
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            if self.streams[i].state != State::Idle {
                self.aborted.push(stream);
            }
            self.forget(i);
        }
        self.remember_reset(stream);
        self.glitch_for_peer();
    }

    /// `stream` was reset by this side: its frames in flight are ignored.
    fn remember_reset(&mut self, stream: u32) {
        if self.reset.len() == RECENTLY_RESET {
            self.reset.pop_front();
        }
        self.reset.push_back(stream);
    }

    /// A stream both sides ended leaves the table.
    fn forget_if_done(&mut self, i: usize) {
        if matches!(self.streams[i].state, State::Closed(_)) {
            self.forget(i);
        }
    }

    /// Stream `i` leaves the table, remembered as closed for a while.
    fn forget(&mut self, i: usize) {
        let id = self.streams.swap_remove(i).id;
        if self.closed.len() == RECENTLY_RESET {
            self.closed.pop_front();
        }
        self.closed.push_back(id);
    }

    /// The peer's initial window changed from `old`: every stream's send window moves.
    fn apply_peer_window(&mut self, old: u32) -> Result<(), Reason> {
        let new = self.peer.initial_window_size;
        if new == old {
            return Ok(());
        }
        for s in &mut self.streams {
            s.send.resize(old, new)?;
        }
        Ok(())
    }

    /// The send windows of `stream` and the connection: what may be written now.
    pub fn send_window(&self, stream: u32) -> usize {
        let s = self
            .streams
            .iter()
            .find(|s| s.id == stream)
            .map_or(0, |s| s.send.available());
        s.min(self.send.available())
    }

    /// Takes `n` octets of both windows for DATA on `stream` (at most [`Conn::send_window`]).
    pub fn sent_data(&mut self, stream: u32, n: usize, end_stream: bool) {
        self.send.take(n);
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            self.streams[i].send.take(n);
            if let Some(next) = self.streams[i].state.send(On::Data { end_stream }) {
                self.streams[i].state = next;
            }
            self.forget_if_done(i);
        }
    }

    /// This side sent HEADERS on `stream` (a response head, or trailers).
    pub fn sent_headers(&mut self, stream: u32, end_stream: bool) {
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            if let Some(next) = self.streams[i].state.send(On::Headers { end_stream }) {
                self.streams[i].state = next;
            }
            self.forget_if_done(i);
        }
    }

    /// This side resets `stream` on its own account (the application gave up): not a glitch.
    pub fn cancel(&mut self, stream: u32, out: &mut Vec<u8>) {
        self.reset(stream, Reason::Cancel, out);
    }

    /// This side resets `stream` with `reason` on its own account (not a glitch): CANCEL when
    /// the application gave up, NO_ERROR when the response is complete and the request's body
    /// is not wanted (§8.1), REFUSED_STREAM after GOAWAY.
    pub fn reset(&mut self, stream: u32, reason: Reason, out: &mut Vec<u8>) {
        if let Some(i) = self.streams.iter().position(|s| s.id == stream) {
            frame::put_rst_stream(out, stream, reason);
            self.streams[i].state = State::Closed(Ending::ResetLocal);
            self.forget(i);
            self.remember_reset(stream);
        }
    }
}

/// A frame's stream is not in the table.
enum Missing {
    /// Never opened: only HEADERS and PRIORITY may name it.
    Idle,
    /// Reset by this side: frames in flight are ignored.
    ResetHere,
    /// Closed otherwise, lately.
    Closed,
    /// Below the last stream opened, and skipped: never opened itself (§5.1.1).
    NeverOpened,
    /// Closed so long ago that it is no longer remembered how.
    Forgotten,
}

impl<S: FieldSink> Conn<S> {
    /// What DATA on a stream not in the table does (§5.1, §6.1). A closed stream's gets one
    /// RST_STREAM STREAM_CLOSED, counted as this side's reset for the peer's error (the
    /// stream is then "reset here": its further frames are ignored, not answered each).
    fn data_on(&mut self, m: Missing, stream: u32, out: &mut Vec<u8>) -> Result<(), Reason> {
        match m {
            Missing::Idle | Missing::NeverOpened => Err(Reason::ProtocolError),
            Missing::ResetHere => Ok(()),
            Missing::Closed => {
                self.reset_stream(stream, Reason::StreamClosed, out);
                Ok(())
            }
            Missing::Forgotten => {
                self.glitch_for_peer();
                Ok(())
            }
        }
    }
}

#[path = "conn_blocks.rs"]
mod blocks;
use blocks::Block;

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
