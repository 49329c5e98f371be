//! A guard between quinn and the `h3` crate: it reads the HTTP/3 frame headers of every stream
//! a client opens as the bytes pass, and refuses a frame whose announced length is past what
//! weir accepts before `h3` starts buffering it.
//!
//! Why: `h3` 0.0.8 decodes a frame only once its whole payload is buffered, and keeps reading
//! the stream meanwhile (which reopens QUIC's flow-control windows). A HEADERS frame announced
//! as 2^40 bytes, or a reserved frame type on the control stream, therefore grew the server's
//! memory without bound: 85 MiB for 80 MiB sent, in an outside review's probe. DATA payloads
//! are streamed by `h3` and pass unchecked here (the body limits are the pipeline's).
//!
//! Limits: a HEADERS frame (request head or trailers) up to twice
//! `http3.max_field_section_size`, and at least 64 KiB (a section somewhat past the setting
//! still reaches `h3`, which answers it 431; QPACK-encoded fields are seldom larger than the
//! decoded size the setting counts); any other frame up to [`OTHER`]. A stream past them is
//! stopped with H3_EXCESSIVE_LOAD; on the control stream `h3` then closes the connection. The
//! cost is a few instructions per frame header and none per payload byte.
//!
//! It also answers what `h3` 0.0.8 lets pass (issue 52: weir answered 75 of 85 cases of a
//! probe set of RFC 9114/9204 errors) with the connection errors the RFCs name: a push stream
//! from the client (H3_STREAM_CREATION_ERROR), a MAX_PUSH_ID that decreases (H3_ID_ERROR), and
//! the client's QPACK streams, which `h3` never reads: weir advertises no dynamic table, so any
//! encoder instruction but a capacity of 0 is QPACK_ENCODER_STREAM_ERROR, an Insert Count
//! Increment or a Section Acknowledgment QPACK_DECODER_STREAM_ERROR, a second one of either
//! H3_STREAM_CREATION_ERROR, and one that ends H3_CLOSED_CRITICAL_STREAM (`uni.rs`). Each is
//! read by a task of its own, so that a request pays nothing for it (reading them as `h3`
//! polled the connection cost the HTTP/3 row 3.5% more instructions per request).
//!
//! It also keeps the GOAWAY's promise ([`GoAway`]): `h3` 0.0.8 sends the last stream it
//! accepted as the GOAWAY's id (RFC 9114 §5.2: the first stream *not* processed) and goes on
//! accepting a request on that id, which a client retries elsewhere (a POST run twice). The
//! connection sends GOAWAY with the next id instead, and every request stream at or above it
//! is refused here with H3_REQUEST_REJECTED before `h3` sees it.

use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};

use super::uni::{close, varint, varint_len, watch_qpack, Qpack, QpackKind, Typing, UniStreams};

/// H3_EXCESSIVE_LOAD (RFC 9114 §8.1).
const EXCESSIVE_LOAD: u64 = 0x107;
/// H3_REQUEST_REJECTED (RFC 9114 §8.1): the request was not processed, retry it elsewhere.
const REQUEST_REJECTED: u64 = 0x10B;
/// Connection errors (RFC 9114 §8.1, RFC 9204 §6).
const STREAM_CREATION_ERROR: u64 = 0x103;
const ID_ERROR: u64 = 0x108;

/// What a stream's bytes broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Violation {
    /// A frame past its length limit: the stream is stopped.
    TooLong,
    /// A connection error with this code.
    Connection(u64),
}

/// The request streams a connection accepted and, once it sent GOAWAY, the first it refuses.
#[derive(Debug, Default)]
pub(super) struct GoAway {
    /// The next client-initiated bidirectional stream id after the last one accepted.
    next: std::cell::Cell<u64>,
    /// The GOAWAY's id: streams at or above it are refused.
    refused_from: std::cell::Cell<Option<u64>>,
}

impl GoAway {
    /// The id a GOAWAY sent now carries (the first request stream not processed), from now on
    /// refused.
    pub(super) fn close_at_next(&self) -> u64 {
        let id = self.next.get();
        self.refused_from.set(Some(id));
        id
    }
}
/// The longest frame of a type other than DATA and HEADERS (SETTINGS, GOAWAY, PRIORITY_UPDATE,
/// reserved and unknown types): real ones are tens of bytes.
const OTHER: u64 = 16 * 1024;

/// The frame lengths weir accepts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// HEADERS frames.
    pub headers: u64,
}

impl Limits {
    pub(super) fn new(max_field_section_size: u64) -> Limits {
        Limits {
            headers: max_field_section_size.saturating_mul(2).max(64 * 1024),
        }
    }
}

/// Where a stream's parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A unidirectional stream's type (RFC 9114 §6.2).
    StreamType,
    FrameType,
    FrameLen {
        ty: u64,
    },
    Payload {
        left: u64,
    },
    /// A MAX_PUSH_ID frame's push id.
    PushId,
    /// Not framed (QPACK's streams, unknown stream types `h3` discards): passed as is.
    Unframed,
}

/// The frame headers of one stream, read as its bytes pass.
#[derive(Debug)]
struct Frames {
    state: State,
    limits: Limits,
    varint: [u8; 8],
    have: usize,
    /// The largest MAX_PUSH_ID the client sent (it may not decrease); 0 before any (a first
    /// one of 0 is not a decrease either).
    max_push: u64,
}

impl Frames {
    fn request(limits: Limits) -> Frames {
        Frames::at(State::FrameType, limits)
    }

    fn unidirectional(limits: Limits) -> Frames {
        Frames::at(State::StreamType, limits)
    }

    fn at(state: State, limits: Limits) -> Frames {
        Frames {
            state,
            limits,
            varint: [0; 8],
            have: 0,
            max_push: 0,
        }
    }

    /// Reads `data`; `Err` at a frame longer than its limit, or a connection error.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), Violation> {
        while !data.is_empty() {
            match self.state {
                State::Unframed => return Ok(()),
                State::Payload { left } => {
                    let n = (data.len() as u64).min(left);
                    data = &data[n as usize..];
                    self.state = if left == n {
                        State::FrameType
                    } else {
                        State::Payload { left: left - n }
                    };
                }
                _ => {
                    // A QUIC variable-length integer: its first two bits give its length.
                    let need = 1usize << (self.varint_first(data) >> 6);
                    let take = (need - self.have).min(data.len());
                    self.varint[self.have..self.have + take].copy_from_slice(&data[..take]);
                    self.have += take;
                    data = &data[take..];
                    if self.have < need {
                        return Ok(());
                    }
                    let mut v = u64::from(self.varint[0] & 0x3f);
                    for b in &self.varint[1..need] {
                        v = (v << 8) | u64::from(*b);
                    }
                    self.have = 0;
                    self.state = self.next(v)?;
                }
            }
        }
        Ok(())
    }

    /// The first byte of the integer being read (buffered, or `data`'s first).
    fn varint_first(&self, data: &[u8]) -> u8 {
        if self.have > 0 {
            self.varint[0]
        } else {
            data[0]
        }
    }

    /// The state after reading integer `v`.
    fn next(&mut self, v: u64) -> Result<State, Violation> {
        Ok(match self.state {
            // The control stream is framed; unknown types are not (QPACK's never get here).
            State::StreamType if v == 0x00 => State::FrameType,
            State::StreamType if v == 0x01 => {
                return Err(Violation::Connection(STREAM_CREATION_ERROR))
            }
            State::StreamType => State::Unframed,
            State::FrameType => State::FrameLen { ty: v },
            State::FrameLen { ty } => {
                let limit = match ty {
                    0x00 => u64::MAX,
                    0x01 => self.limits.headers,
                    _ => OTHER,
                };
                if v > limit {
                    return Err(Violation::TooLong);
                }
                match (ty, v) {
                    (_, 0) => State::FrameType,
                    (0x0D, 1..=8) => State::PushId,
                    _ => State::Payload { left: v },
                }
            }
            State::PushId => {
                if v < self.max_push {
                    return Err(Violation::Connection(ID_ERROR));
                }
                self.max_push = v;
                State::FrameType
            }
            s => s,
        })
    }
}

/// A receiving stream whose frame headers are checked.
pub(super) struct GuardedRecv {
    inner: h3_quinn::RecvStream,
    frames: Frames,
    /// A unidirectional stream's extras (boxed: request streams, one per request, have none).
    uni: Option<Box<UniRecv>>,
    /// The stream's id, kept: h3-quinn 0.0.10 holds the stream inside a read in flight and
    /// unwraps it for `recv_id` and `stop_sending`, so a read that was cancelled (a timed-out
    /// wait) made either panic, and the panic closed the connection (the review of issue 52).
    id: StreamId,
    /// A read was started and has not finished: the stream is inside it.
    reading: bool,
}

impl GuardedRecv {
    fn new(inner: h3_quinn::RecvStream, frames: Frames, uni: Option<Box<UniRecv>>) -> Self {
        let id = quic::RecvStream::recv_id(&inner);
        GuardedRecv {
            inner,
            frames,
            uni,
            id,
            reading: false,
        }
    }
}

/// What a unidirectional stream's guard keeps besides its frames.
struct UniRecv {
    /// Bytes read from it already (its type, read here to learn it), given to `h3` first.
    replay: Option<Bytes>,
    /// The connection, to close on a connection error.
    conn: quinn::Connection,
}

impl quic::RecvStream for GuardedRecv {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let r = match self.uni.as_mut().and_then(|u| u.replay.take()) {
            Some(b) => Ok(Some(b)),
            None => {
                self.reading = true;
                let r = ready!(self.inner.poll_data(cx));
                self.reading = false;
                r
            }
        };
        if let Ok(Some(data)) = &r {
            match self.frames.scan(data) {
                Ok(()) => {}
                Err(Violation::TooLong) => {
                    self.inner.stop_sending(EXCESSIVE_LOAD);
                    return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                        error_code: EXCESSIVE_LOAD,
                    }));
                }
                Err(Violation::Connection(code)) => {
                    if let Some(u) = &self.uni {
                        close(&u.conn, code);
                    }
                    return Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
                        connection_error: ConnectionErrorIncoming::ApplicationClose {
                            error_code: code,
                        },
                    }));
                }
            }
        }
        Poll::Ready(r)
    }

    fn stop_sending(&mut self, error_code: u64) {
        // Inside a cancelled read the stream cannot be reached: the peer learns of the error
        // from the reset of the sending half (and the stream is dropped with the request).
        if !self.reading {
            self.inner.stop_sending(error_code)
        }
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

/// A request stream: quinn's sending half, and the receiving half guarded.
pub(super) struct GuardedBidi {
    send: h3_quinn::SendStream<Bytes>,
    recv: GuardedRecv,
}

impl quic::SendStream<Bytes> for GuardedBidi {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

impl quic::RecvStream for GuardedBidi {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl quic::BidiStream<Bytes> for GuardedBidi {
    type SendStream = h3_quinn::SendStream<Bytes>;
    type RecvStream = GuardedRecv;

    fn split(self) -> (Self::SendStream, Self::RecvStream) {
        (self.send, self.recv)
    }
}

/// Opens a bidirectional stream on `opener`, guarded (`h3` asks only for the types: a server
/// opens none).
fn open_bidi<O>(
    opener: &mut O,
    cx: &mut Context<'_>,
    limits: Limits,
) -> Poll<Result<GuardedBidi, StreamErrorIncoming>>
where
    O: quic::OpenStreams<Bytes, BidiStream = h3_quinn::BidiStream<Bytes>>,
{
    let b = ready!(opener.poll_open_bidi(cx))?;
    Poll::Ready(Ok(guard_bidi(b, limits)))
}

fn guard_bidi(b: h3_quinn::BidiStream<Bytes>, limits: Limits) -> GuardedBidi {
    let (send, recv) = quic::BidiStream::split(b);
    GuardedBidi {
        send,
        recv: GuardedRecv::new(recv, Frames::request(limits), None),
    }
}

/// quinn's connection for `h3`, with every stream the client opens guarded.
pub(super) struct Guarded {
    inner: h3_quinn::Connection,
    conn: quinn::Connection,
    limits: Limits,
    goaway: std::rc::Rc<GoAway>,
    /// Boxed: the connection's futures hold this struct, and most connections open only the
    /// usual three unidirectional streams.
    uni: Box<UniStreams>,
}

impl Guarded {
    pub(super) fn new(
        conn: quinn::Connection,
        limits: Limits,
        goaway: std::rc::Rc<GoAway>,
    ) -> Guarded {
        Guarded {
            inner: h3_quinn::Connection::new(conn.clone()),
            conn,
            limits,
            goaway,
            uni: Box::default(),
        }
    }

    /// A connection error: the connection closed with `code`, and the error `h3` gets.
    fn fail(&self, code: u64) -> Poll<Result<GuardedRecv, ConnectionErrorIncoming>> {
        close(&self.conn, code);
        Poll::Ready(Err(ConnectionErrorIncoming::ApplicationClose {
            error_code: code,
        }))
    }
}

impl quic::Connection<Bytes> for Guarded {
    type RecvStream = GuardedRecv;
    type OpenStreams = Opener;

    /// New unidirectional streams, each handed to `h3` once its type is read here (with the
    /// bytes read so far); the client's QPACK streams are kept and checked here instead.
    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<GuardedRecv, ConnectionErrorIncoming>> {
        loop {
            match quic::Connection::<Bytes>::poll_accept_recv(&mut self.inner, cx) {
                Poll::Ready(Ok(stream)) => self.uni.typing.push(Typing {
                    stream,
                    read: Vec::new(),
                }),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        let mut i = 0;
        while i < self.uni.typing.len() {
            let t = &mut self.uni.typing[i];
            let ty = loop {
                if let Some(ty) = varint(&t.read) {
                    break Some(ty);
                }
                match quic::RecvStream::poll_data(&mut t.stream, cx) {
                    Poll::Ready(Ok(Some(data))) => t.read.extend_from_slice(&data),
                    // Closed before its type: tolerated (RFC 9114 §6.2).
                    Poll::Ready(Ok(None) | Err(_)) => break None,
                    Poll::Pending => {
                        i += 1;
                        break Some(u64::MAX);
                    }
                }
            };
            match ty {
                Some(u64::MAX) => continue,
                None => {
                    self.uni.typing.swap_remove(i);
                }
                Some(0x01) => return self.fail(STREAM_CREATION_ERROR),
                Some(ty @ (0x02 | 0x03)) => {
                    let kind = if ty == 0x02 {
                        QpackKind::Encoder
                    } else {
                        QpackKind::Decoder
                    };
                    let seen = match kind {
                        QpackKind::Encoder => &mut self.uni.encoder,
                        QpackKind::Decoder => &mut self.uni.decoder,
                    };
                    if std::mem::replace(seen, true) {
                        return self.fail(STREAM_CREATION_ERROR);
                    }
                    let t = self.uni.typing.swap_remove(i);
                    let mut q = Qpack {
                        stream: t.stream,
                        kind,
                        in_integer: false,
                        integer_bytes: 0,
                    };
                    let len = varint_len(&t.read);
                    if let Err(code) = q.check(&t.read[len..]) {
                        return self.fail(code);
                    }
                    tokio::task::spawn_local(watch_qpack(q, self.conn.clone()));
                }
                Some(_) => {
                    let t = self.uni.typing.swap_remove(i);
                    return Poll::Ready(Ok(GuardedRecv::new(
                        t.stream,
                        Frames::unidirectional(self.limits),
                        Some(Box::new(UniRecv {
                            replay: Some(Bytes::from(t.read)),
                            conn: self.conn.clone(),
                        })),
                    )));
                }
            }
        }
        Poll::Pending
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<GuardedBidi, ConnectionErrorIncoming>> {
        loop {
            let mut b = ready!(quic::Connection::<Bytes>::poll_accept_bidi(
                &mut self.inner,
                cx
            ))?;
            let id = quic::SendStream::<Bytes>::send_id(&b).into_inner();
            if self
                .goaway
                .refused_from
                .get()
                .is_some_and(|from| id >= from)
            {
                quic::RecvStream::stop_sending(&mut b, REQUEST_REJECTED);
                quic::SendStream::<Bytes>::reset(&mut b, REQUEST_REJECTED);
                continue;
            }
            if id >= self.goaway.next.get() {
                self.goaway.next.set(id + 4);
            }
            return Poll::Ready(Ok(guard_bidi(b, self.limits)));
        }
    }

    fn opener(&self) -> Opener {
        Opener {
            inner: quic::Connection::<Bytes>::opener(&self.inner),
            limits: self.limits,
        }
    }
}

impl quic::OpenStreams<Bytes> for Guarded {
    type BidiStream = GuardedBidi;
    type SendStream = h3_quinn::SendStream<Bytes>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<GuardedBidi, StreamErrorIncoming>> {
        open_bidi(&mut self.inner, cx, self.limits)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<Bytes>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<Bytes>::close(&mut self.inner, code, reason)
    }
}

/// Opens the server's own streams (its control and QPACK streams) for `h3`.
pub(super) struct Opener {
    inner: h3_quinn::OpenStreams,
    limits: Limits,
}

impl quic::OpenStreams<Bytes> for Opener {
    type BidiStream = GuardedBidi;
    type SendStream = h3_quinn::SendStream<Bytes>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<GuardedBidi, StreamErrorIncoming>> {
        open_bidi(&mut self.inner, cx, self.limits)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<Bytes>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<Bytes>::close(&mut self.inner, code, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u8, len: u64) -> Vec<u8> {
        let mut v = vec![ty];
        // An 8-byte varint: 0b11 prefix.
        let mut l = len.to_be_bytes();
        l[0] |= 0xc0;
        v.extend_from_slice(&l);
        v
    }

    #[test]
    fn frame_lengths_are_checked_across_any_split() {
        let limits = Limits::new(32 * 1024);
        assert_eq!(limits.headers, 64 * 1024);
        // DATA of any length, a HEADERS frame within its limit, its payload, then a DATA
        // frame: accepted, whatever the chunking.
        let mut stream = frame(0x01, 100);
        stream.extend(std::iter::repeat_n(7u8, 100));
        stream.extend(frame(0x00, 1 << 40));
        stream.extend(std::iter::repeat_n(1u8, 500));
        for split in 1..stream.len() {
            let mut f = Frames::request(limits);
            assert!(f.scan(&stream[..split]).is_ok(), "split {split}");
            assert!(f.scan(&stream[split..]).is_ok(), "split {split}");
        }
        // A HEADERS frame past the limit, a reserved frame past 16 KiB: refused, byte by byte.
        for bad in [
            frame(0x01, 64 * 1024 + 1),
            frame(0x21, 1 << 40),
            frame(0x04, 20_000),
        ] {
            let mut f = Frames::request(limits);
            let refused = bad.iter().any(|b| f.scan(std::slice::from_ref(b)).is_err());
            assert!(refused, "{bad:?}");
        }
        // The control stream (type 0) is framed; a QPACK stream (type 2) is not.
        let mut control = vec![0x00];
        control.extend(frame(0x21, 1 << 40));
        assert!(Frames::unidirectional(limits).scan(&control).is_err());
        let mut qpack = vec![0x02];
        qpack.extend(frame(0x21, 1 << 40));
        assert!(Frames::unidirectional(limits).scan(&qpack).is_ok());
        // One-byte varints too.
        assert!(Frames::request(limits).scan(&[0x01, 0x3f]).is_ok());
    }
}
