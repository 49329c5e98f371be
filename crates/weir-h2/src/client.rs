//! The client side of a connection, sans-IO (issue 55 §2): what weir's upstream connections
//! speak to HTTP/2 servers. Requests go out as header blocks and DATA written into the
//! caller's buffer; bytes in become [`Event`]s per stream, with the frames this side owes
//! (SETTINGS and PING acknowledgements, WINDOW_UPDATEs, resets) written out as they fall due.
//!
//! It holds what RFC 9113 makes the connection's business: the preface and both sides'
//! SETTINGS, the HPACK decoder (and the stateless encoder, [`crate::hpack::encoder`]), stream
//! identifiers and states ([`crate::stream`]), both directions' windows ([`crate::flow`]),
//! header blocks split over CONTINUATION, SETTINGS_MAX_CONCURRENT_STREAMS and GOAWAY. What a
//! stream carries, and which connection of a pool a request takes, is the caller's.
//!
//! A response head is checked as it decodes (RFC 9113 §8.3.2: `:status` alone and first; §8.2:
//! names lower-case tokens, values without CR, LF, NUL or surrounding whitespace, no
//! connection-specific field); a malformed one resets its stream with
//! PROTOCOL_ERROR, and the caller hears [`Event::Reset`] with that code, as for a peer's reset.
//!
//! Errors: a connection error is `Err(reason)` from [`Client::recv`]; the caller writes GOAWAY
//! ([`Client::go_away`]) and closes, and every stream it had fails.

use std::collections::VecDeque;

use crate::conn::Fields;
use crate::flow::{RecvWindow, SendWindow, DEFAULT_WINDOW};
use crate::frame::{self, Frame, FrameError, HEADER_LEN, PREFACE};
use crate::hpack::decoder::Decoder;
use crate::hpack::encoder::{put_field, Encoder};
use crate::settings::Settings;
use crate::stream::{Event as On, Recv, State};
use crate::Reason;

/// What the connection tells its caller, per stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The final response head; `end_stream`: no body follows.
    Head {
        stream: u32,
        status: u16,
        fields: Fields,
        end_stream: bool,
    },
    /// An interim (1xx) response head.
    Interim {
        stream: u32,
        status: u16,
        fields: Fields,
    },
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    Trailers {
        stream: u32,
        fields: Fields,
    },
    /// The stream ended abnormally: the peer reset it (`code` is the peer's), or this side
    /// did for the peer's error (a malformed head, a window overflow).
    Reset {
        stream: u32,
        code: u32,
    },
    /// The peer is going away: streams above `last_stream` were not processed, and may be
    /// sent again on another connection (§6.8); no new stream may be opened here.
    GoAway {
        last_stream: u32,
        code: u32,
    },
    /// The acknowledgement of this side's PING.
    PingAck {
        data: [u8; 8],
    },
    /// Send windows grew (a WINDOW_UPDATE or a larger initial window): writers waiting on
    /// them may go on.
    WindowOpened,
    /// The peer's SETTINGS changed (SETTINGS_MAX_CONCURRENT_STREAMS may allow more streams).
    Settings,
}

/// A stream this side opened.
#[derive(Debug)]
struct Stream {
    id: u32,
    state: State,
    send: SendWindow,
    recv: RecvWindow,
    /// The final response head has come (a HEADERS after it is trailers).
    answered: bool,
    /// Interim (1xx) heads so far: past [`MAX_INTERIM`] the stream is reset.
    pub(super) interims: u8,
}

/// Most interim heads on one stream.
pub(super) const MAX_INTERIM: u8 = 32;

/// Frames that carry nothing (an empty DATA without END_STREAM) in a row: past this the
/// connection ends (ENHANCE_YOUR_CALM): they cost a read each and say nothing.
const MAX_EMPTY: u32 = 10_000;

/// A header block arriving over CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
    /// The stream is gone already: decoded for the HPACK table only.
    discard: bool,
}

/// Streams closed lately, whose frames in flight are ignored (§5.1).
const RECENTLY_CLOSED: usize = 128;

/// The largest stream identifier (§5.1.1): past it, a new connection.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// One client connection.
#[derive(Debug)]
pub struct Client {
    /// What this side advertised.
    pub local: Settings,
    /// What the peer set.
    pub peer: Settings,
    /// The peer's first SETTINGS came (§3.4: it must be the first frame).
    settled: bool,
    decoder: Decoder,
    encoder: Encoder,
    recv: RecvWindow,
    send: SendWindow,
    next_id: u32,
    streams: Vec<Stream>,
    closed: VecDeque<u32>,
    block: Option<Block>,
    /// The peer's GOAWAY: the last stream it processes.
    goaway: Option<u32>,
    /// The most streams this side opens at once, whatever the peer allows.
    cap: u32,
    /// Empty frames in a row ([`MAX_EMPTY`]).
    empty: u32,
}

impl Client {
    /// A connection advertising `local` (ENABLE_PUSH is always off: a proxy takes no push),
    /// opening at most `cap` streams at once. Write [`Client::greeting`] first.
    pub fn new(mut local: Settings, cap: u32) -> Client {
        local.enable_push = false;
        Client {
            decoder: Decoder::new(local.header_table_size as usize),
            local,
            peer: Settings::default(),
            settled: false,
            encoder: Encoder::new(),
            recv: RecvWindow::new(DEFAULT_WINDOW),
            send: SendWindow::new(DEFAULT_WINDOW),
            next_id: 1,
            streams: Vec::new(),
            closed: VecDeque::new(),
            block: None,
            goaway: None,
            cap: cap.max(1),
            empty: 0,
        }
    }

    /// The client's preface: the magic octets, SETTINGS, and the connection's receive window
    /// opened to `window` (§6.9.2: it starts at 65,535 whatever SETTINGS say).
    pub fn greeting(&mut self, window: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(PREFACE);
        self.local.put(out);
        let now = self.recv.available();
        if window > now {
            frame::put_window_update(out, 0, window - now);
            self.recv = RecvWindow::new(window);
        }
    }

    /// Whether a new stream may be opened now: no GOAWAY, identifiers left, and fewer streams
    /// active than the peer's SETTINGS_MAX_CONCURRENT_STREAMS and this side's cap.
    pub fn may_open(&self) -> bool {
        let max = self
            .peer
            .max_concurrent_streams
            .unwrap_or(u32::MAX)
            .min(self.cap) as usize;
        self.goaway.is_none() && self.next_id <= MAX_STREAM_ID && self.active() < max
    }

    /// The peer said GOAWAY (or identifiers ran out): this connection takes no new stream.
    pub fn is_draining(&self) -> bool {
        self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// Whether the server's SETTINGS (its preface) came.
    pub fn peer_settled(&self) -> bool {
        self.settled
    }

    /// Streams open or half-closed.
    pub fn active(&self) -> usize {
        self.streams.len()
    }

    /// Whether `stream` is still in the table.
    pub fn has(&self, stream: u32) -> bool {
        self.streams.iter().any(|s| s.id == stream)
    }

    /// Opens a stream with a request head: the pseudo-fields, then `fields` (names as given;
    /// the encoder lower-cases them; the caller leaves out what HTTP/2 forbids). The stream's
    /// identifier. Call only when [`Client::may_open`].
    pub fn open<'a>(
        &mut self,
        (method, scheme, authority, path): (&[u8], &[u8], &[u8], &[u8]),
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
        out: &mut Vec<u8>,
    ) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(2);
        let mut block = Vec::with_capacity(256);
        self.encoder.begin(&mut block);
        put_field(b":method", method, &mut block);
        put_field(b":scheme", scheme, &mut block);
        put_field(b":authority", authority, &mut block);
        put_field(b":path", path, &mut block);
        for (n, v) in fields {
            put_field(n, v, &mut block);
        }
        frame::put_headers(out, id, &block, end_stream, self.peer.max_frame_size);
        let state = State::Idle
            .send(On::Headers { end_stream })
            .unwrap_or(State::Open);
        self.streams.push(Stream {
            id,
            state,
            send: SendWindow::new(self.peer.initial_window_size),
            recv: RecvWindow::new(self.local.initial_window_size),
            answered: false,
            interims: 0,
        });
        id
    }

    /// What may be sent on `stream` now: both windows' room (0 when it may not send).
    pub fn send_window(&self, stream: u32) -> usize {
        self.streams
            .iter()
            .find(|s| s.id == stream && s.state.may_send())
            .map_or(0, |s| s.send.available().min(self.send.available()))
    }

    /// Writes as much of `data` as the windows allow as DATA on `stream` (frames of at most
    /// the peer's SETTINGS_MAX_FRAME_SIZE), END_STREAM on the last when `end_stream` and all
    /// of it went. The octets taken.
    pub fn data(&mut self, stream: u32, data: &[u8], end_stream: bool, out: &mut Vec<u8>) -> usize {
        let room = self.send_window(stream);
        if room == 0 && !(data.is_empty() && end_stream && self.may_send(stream)) {
            return 0;
        }
        let n = room.min(data.len());
        let max = self.peer.max_frame_size as usize;
        let all = n == data.len();
        let mut at = 0;
        loop {
            let len = (n - at).min(max);
            let last = at + len == n;
            frame::put_data_header(out, stream, len, last && all && end_stream);
            out.extend_from_slice(&data[at..at + len]);
            at += len;
            if last {
                break;
            }
        }
        self.send.take(n);
        if let Some(i) = self.index(stream) {
            self.streams[i].send.take(n);
            if all && end_stream {
                self.sent(i, On::Data { end_stream: true });
            }
        }
        n
    }

    /// Ends `stream`'s request with trailers.
    pub fn trailers<'a>(
        &mut self,
        stream: u32,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        let Some(i) = self
            .index(stream)
            .filter(|i| self.streams[*i].state.may_send())
        else {
            return;
        };
        let mut block = Vec::with_capacity(64);
        self.encoder.begin(&mut block);
        for (n, v) in fields {
            put_field(n, v, &mut block);
        }
        frame::put_headers(out, stream, &block, true, self.peer.max_frame_size);
        self.sent(i, On::Headers { end_stream: true });
    }

    /// The caller took `n` octets of `stream`'s response body: WINDOW_UPDATEs when due.
    pub fn consumed(&mut self, stream: u32, n: u32, out: &mut Vec<u8>) {
        self.received(n, out);
        self.released(stream, n, out);
    }

    /// `n` octets of DATA are held by the caller (queued for a stream): the connection's
    /// window is given back at once, so that streams whose readers are slow hold their own
    /// windows, never the connection's; what is held is bounded by the streams' windows.
    pub fn received(&mut self, n: u32, out: &mut Vec<u8>) {
        if let Some(inc) = self.recv.taken(n) {
            frame::put_window_update(out, 0, inc);
        }
    }

    /// The caller took `n` octets of `stream`'s body: its window, when due.
    pub fn released(&mut self, stream: u32, n: u32, out: &mut Vec<u8>) {
        if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
            if s.state.peer_may_send() {
                if let Some(inc) = s.recv.taken(n) {
                    frame::put_window_update(out, stream, inc);
                }
            }
        }
    }

    /// The caller gave `stream` up: RST_STREAM CANCEL when it is still open.
    pub fn cancel(&mut self, stream: u32, out: &mut Vec<u8>) {
        if let Some(i) = self.index(stream) {
            frame::put_rst_stream(out, stream, Reason::Cancel);
            self.forget(i);
        }
    }

    /// A PING carrying `data` (liveness: the peer owes its acknowledgement).
    pub fn ping(&self, data: [u8; 8], out: &mut Vec<u8>) {
        frame::put_ping(out, false, data);
    }

    /// GOAWAY: this side opens nothing more and takes no pushed stream (last stream 0).
    pub fn go_away(&mut self, reason: Reason, out: &mut Vec<u8>) {
        frame::put_goaway(out, 0, reason, b"");
        self.next_id = MAX_STREAM_ID + 2;
    }

    /// Takes what it can of `input` (whole frames; the rest waits for more bytes): events to
    /// `events`, frames this side owes to `out`. The octets taken, or the connection error.
    pub fn recv(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<usize, Reason> {
        let mut at = 0;
        while input.len() - at >= HEADER_LEN {
            let head = &input[at..at + HEADER_LEN];
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            if len > self.local.max_frame_size as usize {
                return Err(Reason::FrameSizeError);
            }
            if input.len() - at < HEADER_LEN + len {
                break;
            }
            match frame::decode(&input[at..], self.local.max_frame_size) {
                Ok(None) => break,
                Ok(Some((f, used))) => {
                    self.frame(f, out, events)?;
                    at += used;
                }
                Err(FrameError::Connection(r)) => return Err(r),
                Err(FrameError::Stream(stream, r)) => {
                    self.reset_for_error(stream, r, out, events);
                    at += HEADER_LEN + len;
                }
            }
        }
        Ok(at)
    }

    fn frame(
        &mut self,
        f: Frame<'_>,
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<(), Reason> {
        // §3.4: the server's preface is a SETTINGS frame.
        if !self.settled && !matches!(f, Frame::Settings { ack: false, .. }) {
            return Err(Reason::ProtocolError);
        }
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
                let padding = flow - data.len() as u32;
                let Some(i) = self.index(stream) else {
                    self.consumed(0, flow, out);
                    return self.missing(stream);
                };
                if !self.streams[i].answered {
                    // §8.1: DATA before the response head.
                    self.consumed(0, flow, out);
                    self.reset_for_error(stream, Reason::ProtocolError, out, events);
                    return Ok(());
                }
                match self.streams[i].state.recv(On::Data { end_stream }) {
                    Recv::To(next) => {
                        if self.streams[i].recv.receive(flow).is_err() {
                            self.consumed(0, flow, out);
                            self.reset_for_error(stream, Reason::FlowControlError, out, events);
                            return Ok(());
                        }
                        self.streams[i].state = next;
                        if padding > 0 {
                            self.consumed(stream, padding, out);
                        }
                        if data.is_empty() && !end_stream {
                            // Nothing to tell (padding alone, or nothing): counted.
                            self.empty += 1;
                            if self.empty > MAX_EMPTY {
                                return Err(Reason::EnhanceYourCalm);
                            }
                            return Ok(());
                        }
                        self.empty = 0;
                        events.push(Event::Data {
                            stream,
                            data: data.to_vec(),
                            end_stream,
                        });
                        self.forget_if_done(i);
                    }
                    r => {
                        self.consumed(0, flow, out);
                        return self.refused(r, stream, out, events);
                    }
                }
            }
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                let discard = match self.index(stream) {
                    Some(_) => false,
                    None => {
                        self.missing(stream)?;
                        true
                    }
                };
                if end_headers {
                    self.block_done(stream, end_stream, discard, block, out, events)?;
                } else {
                    self.block = Some(Block {
                        stream,
                        end_stream,
                        bytes: block.to_vec(),
                        discard,
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
                if b.bytes.len() > (self.local.max_header_list_size.unwrap_or(1 << 20) as usize) * 2
                {
                    // A block far past what this side takes: a flood, not a head.
                    return Err(Reason::EnhanceYourCalm);
                }
                if end_headers {
                    if let Some(b) = self.block.take() {
                        self.block_done(b.stream, b.end_stream, b.discard, &b.bytes, out, events)?;
                    }
                }
            }
            Frame::Priority { .. } | Frame::Unknown { .. } => {}
            Frame::RstStream { stream, code } => {
                if stream >= self.next_id || stream.is_multiple_of(2) {
                    return Err(Reason::ProtocolError);
                }
                if let Some(i) = self.index(stream) {
                    self.forget(i);
                    events.push(Event::Reset { stream, code });
                }
            }
            Frame::Settings { ack: true, .. } => {}
            Frame::Settings { ack: false, params } => {
                self.settled = true;
                let old = self.peer.apply(params)?;
                let table = self.peer.header_table_size as usize;
                if table < 4_096 {
                    self.encoder.set_peer_table_size(table);
                }
                let new = self.peer.initial_window_size;
                if new != old {
                    for s in &mut self.streams {
                        s.send.resize(old, new)?;
                    }
                    events.push(Event::WindowOpened);
                }
                events.push(Event::Settings);
                frame::put_settings_ack(out);
            }
            Frame::Ping { ack: false, data } => frame::put_ping(out, true, data),
            Frame::Ping { ack: true, data } => events.push(Event::PingAck { data }),
            Frame::GoAway {
                last_stream, code, ..
            } => {
                let last = self.goaway.map_or(last_stream, |l| l.min(last_stream));
                self.goaway = Some(last);
                events.push(Event::GoAway {
                    last_stream: last,
                    code,
                });
            }
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => {
                self.send.credit(increment)?;
                events.push(Event::WindowOpened);
            }
            Frame::WindowUpdate { stream, increment } => {
                if stream >= self.next_id {
                    return Err(Reason::ProtocolError);
                }
                if let Some(i) = self.index(stream) {
                    match self.streams[i].send.credit(increment) {
                        Ok(()) => events.push(Event::WindowOpened),
                        Err(r) => self.reset_for_error(stream, r, out, events),
                    }
                }
            }
            // ENABLE_PUSH is 0 (§8.4: a PUSH_PROMISE is then a connection error).
            Frame::PushPromise { .. } => return Err(Reason::ProtocolError),
        }
        Ok(())
    }

    /// A frame on a stream not in the table: ignored when it closed lately or long ago (frames
    /// in flight), a connection error when it was never opened, or is a server's (§5.1.1).
    fn missing(&self, stream: u32) -> Result<(), Reason> {
        if stream == 0 || stream.is_multiple_of(2) || stream >= self.next_id {
            return Err(Reason::ProtocolError);
        }
        Ok(())
    }

    fn refused(
        &mut self,
        r: Recv,
        stream: u32,
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) -> Result<(), Reason> {
        match r {
            Recv::To(_) | Recv::Ignore => Ok(()),
            Recv::StreamError(reason) => {
                self.reset_for_error(stream, reason, out, events);
                Ok(())
            }
            Recv::ConnectionError(reason) => Err(reason),
        }
    }

    /// Resets `stream` for the peer's error; the caller hears [`Event::Reset`] with the code.
    fn reset_for_error(
        &mut self,
        stream: u32,
        reason: Reason,
        out: &mut Vec<u8>,
        events: &mut Vec<Event>,
    ) {
        if let Some(i) = self.index(stream) {
            frame::put_rst_stream(out, stream, reason);
            self.forget(i);
            events.push(Event::Reset {
                stream,
                code: reason as u32,
            });
        }
    }

    fn may_send(&self, stream: u32) -> bool {
        self.streams
            .iter()
            .any(|s| s.id == stream && s.state.may_send())
    }

    fn index(&self, stream: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == stream)
    }

    /// Stream `i` sent `e`: its new state, and out of the table when both sides ended.
    fn sent(&mut self, i: usize, e: On) {
        if let Some(next) = self.streams[i].state.send(e) {
            self.streams[i].state = next;
        }
        self.forget_if_done(i);
    }

    fn forget_if_done(&mut self, i: usize) {
        if matches!(self.streams[i].state, State::Closed(_)) {
            self.forget(i);
        }
    }

    fn forget(&mut self, i: usize) {
        let id = self.streams.swap_remove(i).id;
        if self.closed.len() == RECENTLY_CLOSED {
            self.closed.pop_front();
        }
        self.closed.push_back(id);
    }

    /// Whether `stream` ended lately (for callers telling a late frame from a new one).
    pub fn closed_lately(&self, stream: u32) -> bool {
        self.closed.contains(&stream)
    }
}

#[path = "client_blocks.rs"]
mod blocks;

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
