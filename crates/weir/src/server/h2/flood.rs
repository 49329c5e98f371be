//! The IO under every HTTP/2 connection: it gathers small writes (see the `AsyncWrite` impl)
//! and counts the frames of the 2019 HTTP/2 flood family (CVE-2019-9512 ping, -9514 reset,
//! -9515 settings, -9516 and -9518 empty frames) as they arrive, below the `h2` crate, which
//! answers them without limit. Only frame headers are looked at: 9 bytes per frame, no copy.
//!
//! Beside the per-second flood count, the shield's glitch counter (`shield.http2_glitches`,
//! HAProxy's `glitches-threshold`) counts anomalies over the connection's life: streams the
//! client resets (rapid reset, CVE-2023-44487), empty DATA or HEADERS frames that do not end a
//! stream, empty CONTINUATION frames. At 75% of the threshold the connection is asked to go
//! away (graceful GOAWAY), at 100% it is closed (GOAWAY ENHANCE_YOUR_CALM) and the violation
//! goes to the shield.

use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;

/// Writes smaller than this (together) are gathered rather than written at once.
const COALESCE: usize = 16 * 1024;

/// Reads through to `io`, counting flood frames per second; past the limit it stops reading
/// and wakes [`FloodGuard::tripped`]'s waiter, which closes the connection with GOAWAY.
#[derive(Debug)]
pub(crate) struct FloodGuard<T> {
    io: T,
    /// Preface bytes still to skip (the client's preface is not framed).
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to skip.
    payload_left: usize,
    limit: u32,
    count: u32,
    window: Instant,
    tripped: Rc<Notify>,
    stopped: bool,
    /// The glitch threshold (0: none), the glitches so far, and the signals.
    glitch_limit: u32,
    glitches: u32,
    glitch: Rc<Glitches>,
    /// Writes gathered until `h2` reads again (see the `AsyncWrite` impl).
    wbuf: Vec<u8>,
    /// The inner stream was written since its last flush.
    dirty: bool,
    /// The last read found nothing to read: `h2` has finished this turn's reading, and its next
    /// flush is the one before it sleeps (see the `AsyncWrite` impl).
    read_idle: bool,
    /// The last write-out found the socket full: the task is woken when it drains, not before
    /// (a flush then must not wake it again, or a slow reader's connection would spin).
    blocked: bool,
}

/// What the glitch counter tells the connection.
#[derive(Debug, Default)]
pub(crate) struct Glitches {
    /// Notified once at 75% of the threshold: send GOAWAY and finish the streams.
    pub warn: Notify,
    /// Set when the threshold (not the flood limit) tripped the guard.
    pub over: std::cell::Cell<bool>,
}

impl<T> FloodGuard<T> {
    pub(crate) fn new(io: T, limit: u32, glitch_limit: u32) -> FloodGuard<T> {
        FloodGuard {
            io,
            preface_left: super::PREFACE.len(),
            head: [0; 9],
            head_len: 0,
            payload_left: 0,
            limit,
            count: 0,
            window: Instant::now(),
            tripped: Rc::new(Notify::new()),
            stopped: false,
            glitch_limit,
            glitches: 0,
            glitch: Rc::default(),
            wbuf: Vec::new(),
            dirty: false,
            read_idle: false,
            blocked: false,
        }
    }

    /// The glitch counter's signals.
    pub(crate) fn glitches(&self) -> Rc<Glitches> {
        self.glitch.clone()
    }

    /// Notified once when the limit is passed.
    pub(crate) fn tripped(&self) -> Rc<Notify> {
        self.tripped.clone()
    }

    /// Follows the frame boundaries through `bytes`; `false` once the limit is passed.
    fn scan(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len < 9 {
                break;
            }
            self.head_len = 0;
            let len = u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize;
            let (kind, flags) = (self.head[3], self.head[4]);
            self.payload_left = len;
            if counted(kind, flags, len) && !self.count_one() {
                return false;
            }
            if self.glitch_limit > 0 && glitch(kind, flags, len) && !self.glitch_one() {
                return false;
            }
        }
        true
    }

    fn count_one(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.count = 0;
        }
        self.count += 1;
        self.count <= self.limit
    }
}

impl<T> FloodGuard<T> {
    /// Counts a glitch; `false` at the threshold.
    fn glitch_one(&mut self) -> bool {
        self.glitches += 1;
        if u64::from(self.glitches) * 4 == u64::from(self.glitch_limit) * 3
            || (self.glitch_limit < 4 && self.glitches == 1)
        {
            self.glitch.warn.notify_one();
        }
        if self.glitches >= self.glitch_limit {
            self.glitch.over.set(true);
            return false;
        }
        true
    }
}

/// Whether a frame is a glitch (see the module doc).
fn glitch(kind: u8, flags: u8, len: usize) -> bool {
    match kind {
        RST_STREAM => true,
        DATA | HEADERS => len == 0 && flags & END_STREAM == 0,
        CONTINUATION => len == 0,
        _ => false,
    }
}

/// Whether a frame counts towards the flood limit.
fn counted(kind: u8, flags: u8, len: usize) -> bool {
    match kind {
        PING | SETTINGS | RST_STREAM | PRIORITY => true,
        DATA | HEADERS => len == 0 && flags & END_STREAM == 0,
        CONTINUATION => len == 0,
        _ => false,
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for FloodGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // What `h2` flushed goes out before it waits for the peer.
        ready!(self.write_out(cx))?;
        if self.stopped {
            // Read nothing more: the connection is closing with GOAWAY.
            self.read_idle = true;
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        self.read_idle = r.is_pending();
        if let Poll::Ready(Ok(())) = r {
            let this = &mut *self;
            if !this.scan(&buf.filled()[before..]) {
                this.stopped = true;
                self.tripped.notify_one();
                return Poll::Pending;
            }
        }
        r
    }
}

/// Writes are gathered and go out in one system call per turn of the connection. The `h2`
/// crate flushes after nearly every frame: serving 10 streams of 1 KiB responses made 10
/// `sendto` calls per read (`strace`), about half the worker's time. Here a flush in the middle
/// of a turn (while reads still return data) only marks the data as due: it is written when
/// `h2` next reads, when 16 KiB have gathered, or at shutdown. The flush `h2` makes after its
/// read found nothing (`Connection::poll` then calls `poll_complete` and sleeps) wakes the task
/// when something is due: its next poll reads, and so writes, before anything else. The frames
/// queued in that turn (a PING ACK, a SETTINGS ACK, a WINDOW_UPDATE, the responses of streams
/// polled in [`super::drive`]) thus never wait for the client to send again (they once did: a
/// PING on an idle connection went unanswered, and 4 of 20 1 MB uploads stalled on a
/// WINDOW_UPDATE until the body timeout), and still leave together. Writing at that flush
/// instead (78d18ae) made one `writev` per response under `h2load -c100 -m10` over TLS (50,442
/// for 50,000 requests against 5,482 before it) and doubled the CPU per request (issue 35 §4).
/// Declaring no vectored writes makes `h2` copy payloads up to 1 KiB into its own buffer too.
impl<T: AsyncWrite + Unpin> AsyncWrite for FloodGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.wbuf.len() + data.len() <= COALESCE {
            if this.wbuf.capacity() == 0 {
                // Once per turn, not a doubling per frame.
                this.wbuf.reserve_exact(COALESCE);
            }
            this.wbuf.extend_from_slice(data);
            return Poll::Ready(Ok(data.len()));
        }
        this.dirty = true;
        let r = this.write_through(cx, data);
        this.blocked = r.is_pending();
        r
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.read_idle && !self.blocked && (!self.wbuf.is_empty() || self.dirty) {
            // The flush before `h2` sleeps: what is due leaves on the task's next poll, which
            // this wake-up makes sure of (its first read writes, see `poll_read`), so the
            // frames other streams queue in this turn go out in the same write. Not while the
            // socket is full: its readiness wakes the task then.
            cx.waker().wake_by_ref();
        }
        // Mid-turn: due, not written (see `poll_read`).
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.write_out(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: AsyncWrite + Unpin> FloodGuard<T> {
    /// What gathered and then `data`, through to the inner stream (16 KiB have gathered).
    fn write_through(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        loop {
            if self.wbuf.is_empty() {
                return Pin::new(&mut self.io).poll_write(cx, data);
            }
            let iov = [
                std::io::IoSlice::new(&self.wbuf),
                std::io::IoSlice::new(data),
            ];
            let n = ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &iov))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            if n >= self.wbuf.len() {
                let of_data = n - self.wbuf.len();
                self.wbuf.clear();
                if of_data > 0 {
                    return Poll::Ready(Ok(of_data));
                }
            } else {
                self.wbuf.drain(..n);
            }
        }
    }

    /// Writes what gathered, and flushes the inner stream (a TLS stream's records).
    fn write_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = self.write_all_due(cx);
        self.blocked = r.is_pending();
        r
    }

    fn write_all_due(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.wbuf.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.wbuf))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.wbuf.drain(..n);
            self.dirty = true;
        }
        if self.wbuf.capacity() > COALESCE / 2 {
            // An idle connection does not keep a large buffer.
            self.wbuf = Vec::new();
        }
        if self.dirty {
            ready!(Pin::new(&mut self.io).poll_flush(cx))?;
            self.dirty = false;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn frame(kind: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.resize(9 + len, 0);
        f
    }

    #[test]
    fn counts_control_and_empty_frames_across_split_reads() {
        let mut g = FloodGuard::new((), 3, 0);
        let mut wire = crate::server::h2::PREFACE.to_vec();
        wire.extend(frame(DATA, 0, 100)); // not counted
        wire.extend(frame(DATA, END_STREAM, 0)); // an empty last frame: legitimate
        wire.extend(frame(PING, 0, 8));
        wire.extend(frame(DATA, 0, 0)); // empty, not last: counted
        wire.extend(frame(SETTINGS, 0, 0));
        // Fed a few bytes at a time: frame headers split across reads are followed.
        for piece in wire.chunks(5) {
            assert!(g.scan(piece));
        }
        assert_eq!(g.count, 3);
        assert!(
            !g.scan(&frame(RST_STREAM, 0, 4)),
            "the fourth passes the limit"
        );
    }

    #[test]
    fn glitches_warn_at_three_quarters_and_trip_at_the_threshold() {
        let mut g = FloodGuard::new((), 1000, 8);
        let signals = g.glitches();
        let mut wire = crate::server::h2::PREFACE.to_vec();
        wire.extend(frame(HEADERS, 0, 10)); // a request: not a glitch
        wire.extend(frame(DATA, END_STREAM, 0)); // not a glitch
        for _ in 0..5 {
            wire.extend(frame(RST_STREAM, 0, 4));
        }
        assert!(g.scan(&wire));
        assert_eq!(g.glitches, 5);
        assert!(!signals.over.get());
        assert!(g.scan(&frame(DATA, 0, 0)), "the sixth: 75%, still read");
        assert!(
            signals.warn.notified().now_or_never().is_some(),
            "GOAWAY asked at 6 of 8"
        );
        assert!(g.scan(&frame(CONTINUATION, 0, 0)));
        assert!(!g.scan(&frame(RST_STREAM, 0, 4)), "the eighth closes");
        assert!(signals.over.get());
    }
}
