//! A client socket on the ring (`server/uring/mod.rs`): what `ClientIo` calls to read, write
//! and wait, and `AsyncRead`/`AsyncWrite` for tunnels.

use std::io::{self, IoSlice};
use std::os::fd::{IntoRawFd, RawFd};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;

use super::consts::SEND_MAX;
use super::driver::{with, Sock, DRIVER};
use crate::client_socket::RawClient;

/// A client socket served through this worker's ring.
#[derive(Debug)]
pub(crate) struct UringSock {
    slot: usize,
    fd: RawFd,
    /// Nothing was submitted for it yet: a read may still be a plain `recv` (a fresh
    /// connection usually has its request already, as on the epoll path).
    fresh: bool,
}

impl UringSock {
    /// Takes over an accepted socket (this worker must have a ring: [`active`]); `stall`: how
    /// long its sends may stall once the connection is gone (`timeouts.write`).
    pub(crate) fn new(stream: RawClient, stall: Duration) -> UringSock {
        let fd = stream.into_raw_fd();
        let slot = with(|d| {
            d.socks.insert(Sock {
                fd,
                stall,
                ..Sock::default()
            })
        });
        UringSock {
            slot,
            fd,
            fresh: true,
        }
    }

    /// One plain non-blocking `recv` while nothing was submitted for the socket: `Ok(None)`
    /// when there is nothing yet (reads go through the ring from then on).
    pub(crate) fn try_read_now(&mut self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        if !self.fresh {
            return Ok(None);
        }
        use bytes::BufMut;
        if buf.capacity() == buf.len() {
            buf.reserve(4096);
        }
        let spare = buf.chunk_mut();
        // SAFETY: `fd` is open (closed only after this socket is dropped); `recv` writes at most
        // `spare.len()` bytes into the spare capacity and reads none of it.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recv(
                self.fd,
                spare.as_mut_ptr().cast(),
                spare.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                self.fresh = false;
                return Ok(None);
            }
            return Err(e);
        }
        // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
        #[allow(unsafe_code)]
        unsafe {
            buf.advance_mut(n as usize)
        };
        Ok(Some(n as usize))
    }

    /// Whether received bytes (or the end) are waiting to be read.
    pub(crate) fn has_input(&self) -> bool {
        with(|d| {
            let s = &d.socks[self.slot];
            s.chunk.is_some() || s.eof || s.error.is_some()
        })
    }

    /// Ready once bytes, the end or an error wait to be read.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.fresh = false;
        with(|d| {
            let s = &mut d.socks[self.slot];
            if s.chunk.is_some() || s.eof || s.error.is_some() {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.reader, cx);
            d.arm_recv(self.slot);
            Poll::Pending
        })
    }

    /// Copies up to `room` bytes of what was received to `out`; `None` when nothing waits
    /// (the receive is then armed and the waker kept).
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        room: usize,
        out: impl FnOnce(&[u8]),
    ) -> Poll<io::Result<usize>> {
        self.fresh = false;
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some((bid, len)) = s.chunk {
                let bytes = &d.bufs.bytes(bid, len as usize)[s.offset..];
                let n = bytes.len().min(room);
                out(&bytes[..n]);
                s.offset += n;
                if s.offset == len as usize {
                    s.chunk = None;
                    d.give(bid);
                    d.bufs.publish();
                    d.unpublished = false;
                    d.feed_starved();
                }
                return Poll::Ready(Ok(n));
            }
            if let Some(e) = s.error.take() {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            if s.eof {
                return Poll::Ready(Ok(0));
            }
            set_waker(&mut s.reader, cx);
            d.arm_recv(self.slot);
            Poll::Pending
        })
    }

    /// Reads what was received into `buf` (the whole chunk, growing `buf` if needed).
    pub(crate) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        if self.fresh {
            match self.try_read_now(buf) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.poll_take(cx, usize::MAX, |b| buf.extend_from_slice(b))
    }

    /// Queues `bufs` for sending (copied; up to [`SEND_MAX`] bytes in flight and as many
    /// behind); `more`: hold them for what follows (`MSG_MORE`, the response before a
    /// half-close). `WouldBlock` when the queue is full.
    pub(crate) fn send(&mut self, bufs: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some(e) = s.send_error {
                return Err(io::Error::from_raw_os_error(e));
            }
            let (into, in_send) = if s.in_send {
                s.queued_more = more;
                (&mut s.queued, true)
            } else {
                s.more = more;
                (&mut s.sending, false)
            };
            let room = SEND_MAX.saturating_sub(into.len());
            if room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(room - n);
                into.extend_from_slice(&b[..take]);
                n += take;
                if n == room {
                    break;
                }
            }
            if !in_send && n > 0 {
                d.send_rest(self.slot);
            }
            Ok(n)
        })
    }

    /// Ready once a write would take bytes again (or the sends failed); `all`: once every
    /// queued byte has gone.
    fn poll_sent(&mut self, cx: &mut Context<'_>, all: bool) -> Poll<io::Result<()>> {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if let Some(e) = s.send_error {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            if !s.in_send || (!all && s.queued.len() < SEND_MAX) {
                return Poll::Ready(Ok(()));
            }
            set_waker(&mut s.writer, cx);
            Poll::Pending
        })
    }

    /// Ready once a write would take bytes again (or the sends failed).
    pub(crate) fn poll_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_sent(cx, false)
    }

    /// Half-closes the write side once what was queued has gone.
    pub(crate) fn shutdown_write(&mut self) {
        with(|d| {
            let s = &mut d.socks[self.slot];
            if s.in_send {
                s.shut_after_send = true;
            } else {
                // SAFETY: `fd` is open while this socket lives.
                #[allow(unsafe_code)]
                unsafe {
                    libc::shutdown(s.fd, libc::SHUT_WR);
                }
            }
        })
    }
}

/// For tunnels (`ClientIo::tunnel`, an upgraded connection relayed to its upstream).
impl tokio::io::AsyncRead for UringSock {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        self.get_mut()
            .poll_take(cx, room, |b| buf.put_slice(b))
            .map_ok(|_| ())
    }
}

impl tokio::io::AsyncWrite for UringSock {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        loop {
            match me.send(&[IoSlice::new(data)], false) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(me.poll_sent(cx, false))?;
                }
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_sent(cx, true)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        std::task::ready!(me.poll_sent(cx, true))?;
        me.shutdown_write();
        Poll::Ready(Ok(()))
    }
}

impl Drop for UringSock {
    fn drop(&mut self) {
        // The ring lives in a thread-local: gone only at the thread's exit, after the
        // worker's sockets (they are dropped with its `LocalSet`).
        let _ = DRIVER.try_with(|d| {
            if let Ok(mut d) = d.try_borrow_mut() {
                if let Some(d) = d.as_mut() {
                    d.release(self.slot);
                    return;
                }
            }
            tracing::error!("io_uring: a socket outlived its ring or was dropped inside it; its descriptor leaks");
        });
    }
}

fn set_waker(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}
