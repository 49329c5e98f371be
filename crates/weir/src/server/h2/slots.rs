//! What a connection's streams and its driver share: weir-h2's connection state, the frames
//! owed out, and one [`Slot`] per stream being answered, holding the request body as it
//! arrives and the response as the pipeline queues it. Everything runs in the connection's
//! one task, so the sharing is an `Rc<RefCell<_>>` borrowed for the length of one call, never
//! across an await.
//!
//! [`Shared::gather`] turns what the streams queued into frames, within the peer's windows
//! and frame size: header blocks copied into the write buffer, DATA payloads by reference
//! (a cache hit's stored body is not copied).

use std::collections::VecDeque;
use std::task::Waker;

use bytes::{Bytes, BytesMut};
use weir_h2::conn::Conn;
use weir_h2::{frame, Reason};

use crate::server::outbox::{Out, Outbox};

/// Octets waiting to be written past which no more DATA is framed (and the connection stops
/// reading: `driver`).
pub(crate) const WRITE_HIGH: usize = 256 * 1024;

/// A DATA payload up to this size is copied into the write buffer; larger ones are written
/// from their own bytes (one more iovec).
const COPY_DATA: usize = 1024;

/// What a turn's frame buffer is grown by at once ([`Writes::room`]).
const WRITE_ROOM: usize = 16 * 1024;

/// One stream being answered.
#[derive(Debug)]
pub(crate) struct Slot {
    pub id: u32,
    // The request.
    pub body: VecDeque<Bytes>,
    /// The request's body is complete (END_STREAM, or trailers).
    pub body_ended: bool,
    pub trailers: Vec<weir_http::Header>,
    /// The request's `content-length`, checked against the DATA received (§8.1.1).
    pub declared: Option<u64>,
    pub received: u64,
    /// The stream is reset (by the peer, or by this side): everything it does fails.
    pub reset: bool,
    /// The response: HPACK blocks (heads, trailers) and DATA, in order.
    pub out: Outbox<Bytes>,
    /// END_STREAM went out.
    pub finished: bool,
    /// The pipeline asked for what is queued to be written (until then it waits, so that a
    /// head and its body leave together).
    pub ready: bool,
    /// The stream's future is over.
    pub done: bool,
    /// The stream waits for the peer's window to open.
    pub window_wait: bool,
    /// The driver's read that opened it.
    pub opened_in: u64,
    /// The stream's future waits for body bytes, for its queue to drain or window to open,
    /// or for a reset.
    pub waker: Option<Waker>,
}

impl Slot {
    pub(crate) fn new(id: u32, body_ended: bool, declared: Option<u64>, opened_in: u64) -> Slot {
        Slot {
            id,
            body: VecDeque::new(),
            body_ended,
            trailers: Vec::new(),
            declared,
            received: 0,
            reset: false,
            out: Outbox::default(),
            finished: false,
            ready: false,
            done: false,
            window_wait: false,
            opened_in,
            waker: None,
        }
    }

    pub(crate) fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// A connection's state shared by its driver and its streams.
#[derive(Debug)]
pub(crate) struct Shared {
    pub conn: Conn<super::head::Lines>,
    /// Frames owed (acknowledgements, window updates, resets) not yet in the write queue.
    pub owed: Vec<u8>,
    pub slots: Vec<Slot>,
    /// A SETTINGS_HEADER_TABLE_SIZE change of the peer not yet told (RFC 7541 §4.2): weir's
    /// encoder keeps no table, but the peer's decoder expects the update at the next block.
    pub table_update: Option<u32>,
    pub peer_table: u32,
    /// Where response header blocks are encoded, then cut off for the streams' queues
    /// (one allocation for many blocks).
    pub blocks: BytesMut,
    /// Scratch for weir-h2's encoder (it writes into a `Vec`).
    pub scratch: Vec<u8>,
}

impl Shared {
    pub(crate) fn new(conn: Conn<super::head::Lines>) -> Shared {
        let peer_table = conn.peer.header_table_size;
        Shared {
            conn,
            owed: Vec::new(),
            slots: Vec::new(),
            table_update: None,
            peer_table,
            blocks: BytesMut::new(),
            scratch: Vec::new(),
        }
    }

    /// A header block encoded by `encode` (into a scratch `Vec`), as `Bytes`.
    pub(crate) fn block(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Bytes {
        self.scratch.clear();
        encode(&mut self.scratch);
        if self.blocks.capacity() - self.blocks.len() < self.scratch.len() {
            self.blocks.reserve(self.scratch.len().max(4096));
        }
        self.blocks.extend_from_slice(&self.scratch);
        self.blocks.split().freeze()
    }

    /// An empty stand-in, for the moment a connection's state leaves for its parked slot.
    pub(crate) fn placeholder() -> Shared {
        let guard = weir_h2::guard::Guard::new(0, 0, 0, std::time::Instant::now());
        Shared::new(Conn::new(weir_h2::settings::Settings::default(), guard))
    }

    /// Gives the buffers' memory back (an idle connection).
    pub(crate) fn release(&mut self) {
        if self.slots.is_empty() {
            self.slots = Vec::new();
        }
        if self.owed.is_empty() {
            self.owed = Vec::new();
        }
        self.blocks = BytesMut::new();
        self.scratch = Vec::new();
        self.conn.shrink();
    }

    pub(crate) fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.id == id)
    }

    /// The peer's SETTINGS may have changed its table size: remember to tell its decoder.
    pub(crate) fn note_table_size(&mut self) {
        let now = self.conn.peer.header_table_size;
        if now != self.peer_table {
            self.table_update = Some(self.table_update.map_or(now, |p| p.min(now)));
            self.peer_table = now;
        }
    }

    /// Resets `id` on this side's account (the stream gave up, or its request was refused).
    pub(crate) fn reset(&mut self, id: u32, reason: Reason) {
        self.conn.reset(id, reason, &mut self.owed);
        if let Some(s) = self.slot(id) {
            s.reset = true;
            s.out.clear();
            s.wake();
        }
    }

    /// The request on `id` broke its own framing (§8.1.1): a stream error the peer caused.
    pub(crate) fn malformed(&mut self, id: u32) -> Result<(), Reason> {
        let r = self.conn.malformed(id, &mut self.owed);
        if let Some(s) = self.slot(id) {
            s.reset = true;
            s.out.clear();
            s.wake();
        }
        r
    }

    /// Moves what the streams queued into `w` as frames, as far as windows allow; wakes the
    /// streams whose queue drained; forgets the streams that are over. Whether anything moved.
    pub(crate) fn gather(&mut self, w: &mut Writes) -> bool {
        if self.slots.iter().any(|s| s.ready) {
            w.room();
        }
        // What the input owes first: a SETTINGS acknowledgement goes before the DATA the new
        // settings allowed (h2spec 6.9.2/1 reads them in that order).
        let mut moved = self.take_owed(w);
        let max_frame = self.conn.peer_max_frame() as usize;
        let mut i = 0;
        while i < self.slots.len() {
            let s = &mut self.slots[i];
            if s.ready && !s.reset {
                let id = s.id;
                loop {
                    let last_item = s.out.front_is_last();
                    let Some(front) = s.out.front_mut() else {
                        break;
                    };
                    match front {
                        Out::Head {
                            head: block,
                            interim,
                        } => {
                            let end = !*interim && last_item;
                            let update = if *interim {
                                None
                            } else {
                                self.table_update.take()
                            };
                            put_block(&mut w.buf, id, block, update, end, max_frame);
                            self.conn.sent_headers(id, end);
                            s.finished |= end;
                        }
                        Out::Data(data) => {
                            let room = self.conn.send_window(id).min(max_frame);
                            // Not past the window, and not while the socket is backed up
                            // (the stream then waits, and its stall timer runs).
                            if (room == 0 || w.len() >= WRITE_HIGH) && !data.is_empty() {
                                break;
                            }
                            let piece = data.split_to(room.min(data.len()));
                            let rest = !data.is_empty();
                            let end = last_item && !rest;
                            w.buf
                                .extend_from_slice(&frame::data_header(id, piece.len(), end));
                            s.out.sent(piece.len());
                            self.conn.sent_data(id, piece.len(), end);
                            w.data(piece);
                            s.finished |= end;
                            if rest {
                                moved = true;
                                continue;
                            }
                        }
                        Out::Trailers(block) => {
                            put_block(&mut w.buf, id, block, None, true, max_frame);
                            self.conn.sent_headers(id, true);
                            s.finished = true;
                        }
                    }
                    s.out.pop_front();
                    moved = true;
                }
                if s.out.is_empty() {
                    if s.out.ended() && !s.finished {
                        w.buf.extend_from_slice(&frame::data_header(id, 0, true));
                        self.conn.sent_data(id, 0, true);
                        s.finished = true;
                        moved = true;
                    }
                    s.ready = false;
                    s.wake();
                }
            }
            let s = &self.slots[i];
            if s.done && (s.finished || s.reset || s.out.is_empty()) {
                let (id, finished, reset, body_ended) = (s.id, s.finished, s.reset, s.body_ended);
                self.slots.swap_remove(i);
                if !finished && !reset {
                    // The stream gave up before its response ended.
                    self.conn.reset(id, Reason::Cancel, &mut self.owed);
                } else if finished && !body_ended {
                    // §8.1: the response is complete; the rest of the request is not wanted.
                    self.conn.reset(id, Reason::NoError, &mut self.owed);
                }
                moved = true;
                continue;
            }
            i += 1;
        }
        moved | self.take_owed(w)
    }

    fn take_owed(&mut self, w: &mut Writes) -> bool {
        if self.owed.is_empty() {
            return false;
        }
        w.buf.extend_from_slice(&self.owed);
        self.owed.clear();
        true
    }
}

/// A header block as HEADERS and CONTINUATION frames, written where they go, a table size
/// update first when due.
fn put_block(
    buf: &mut BytesMut,
    id: u32,
    block: &[u8],
    update: Option<u32>,
    end: bool,
    max_frame: usize,
) {
    let with_update;
    let block = match update {
        Some(size) => {
            let mut b = Vec::with_capacity(block.len() + 5);
            weir_h2::hpack::encoder::integer(&mut b, size as usize, 5, 0x20);
            b.extend_from_slice(block);
            with_update = b;
            &with_update[..]
        }
        None => block,
    };
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut flags = if end { frame::flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        flags |= frame::flag::END_HEADERS;
    }
    buf.extend_from_slice(&frame::header(first.len(), frame::kind::HEADERS, flags, id));
    buf.extend_from_slice(first);
    while let Some(c) = chunks.next() {
        let f = if chunks.peek().is_none() {
            frame::flag::END_HEADERS
        } else {
            0
        };
        buf.extend_from_slice(&frame::header(c.len(), frame::kind::CONTINUATION, f, id));
        buf.extend_from_slice(c);
    }
}

/// What waits to be written to the socket: frames in a buffer, DATA payloads by reference,
/// in order.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    /// Frames not yet cut into `segments`.
    pub buf: BytesMut,
    pub segments: VecDeque<Bytes>,
    /// Octets in `segments`.
    in_segments: usize,
}

impl Writes {
    /// A DATA payload after its frame header.
    pub(crate) fn data(&mut self, piece: Bytes) {
        if piece.len() <= COPY_DATA {
            self.buf.extend_from_slice(&piece);
            return;
        }
        self.seal();
        self.in_segments += piece.len();
        self.segments.push_back(piece);
    }

    /// Room for a turn's frames in one allocation: appended one by one, they grew the buffer
    /// (a `realloc` and a copy each time) several times per response, ~1,600 instructions a
    /// request in callgrind (h2load -m 10 over TLS, 1 KiB hits). Once the frames before were
    /// written, the same allocation is taken back (`BytesMut::reserve` reclaims it).
    pub(crate) fn room(&mut self) {
        if self.buf.capacity() - self.buf.len() < WRITE_ROOM / 4 {
            self.buf.reserve(WRITE_ROOM);
        }
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty() && self.segments.is_empty()
    }

    /// Octets waiting.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() + self.in_segments
    }

    /// The frames written so far cut into a segment, so that `segments` holds everything.
    pub(crate) fn seal(&mut self) {
        if !self.buf.is_empty() {
            self.in_segments += self.buf.len();
            self.segments.push_back(self.buf.split().freeze());
        }
    }

    /// `n` octets were written.
    pub(crate) fn advance(&mut self, mut n: usize) {
        self.in_segments -= n.min(self.in_segments);
        while n > 0 {
            let Some(front) = self.segments.front_mut() else {
                return;
            };
            if front.len() > n {
                bytes::Buf::advance(front, n);
                return;
            }
            n -= front.len();
            self.segments.pop_front();
        }
    }

    /// Gives the buffers' memory back (an idle connection).
    pub(crate) fn release(&mut self) {
        if self.is_empty() {
            self.buf = BytesMut::new();
            self.segments = VecDeque::new();
        }
    }
}
