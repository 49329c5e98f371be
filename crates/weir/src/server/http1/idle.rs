//! A connection's idle wait between requests on epoll (`server/park.rs` parks it from
//! here), and the keep-alive deadline a wake that brings no request keeps.

use std::time::Duration;

use super::buffers::{give_buf, read_more, take_buf};
use super::conn::Conn;
use crate::error::{Error, ErrorKind, OrErr};
use crate::server::client_io::ClientIo;

impl Conn {
    /// Waits, without holding buffers, for the next request to start. `None`: idle timeout or
    /// shutdown.
    ///
    /// No timer of its own: the wait's deadline goes into the worker's slot for the connection,
    /// and the worker's sweeper aborts the task when it passes (`worker.rs`). A request costs
    /// two `Cell` writes here, no clock read and no timer-wheel operation.
    pub(super) async fn wait_idle(&mut self, mut wait: Duration) -> Result<Option<usize>, Error> {
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(_) = self.io {
            return self.wait_idle_uring(wait).await;
        }
        if let ClientIo::Fresh(_) = self.io {
            // A fresh connection usually has its request already: read it without registering.
            if self.buf.capacity() == 0 {
                self.buf = take_buf();
            }
            if let Some(n) = self
                .io
                .try_read_fresh(&mut self.buf)
                .or_err(ErrorKind::ClientIo, "read")?
            {
                return Ok(Some(n));
            }
            wait = self.after_deferral(wait);
        }
        if self.state.shutting_down.get() {
            return Ok(None);
        }
        give_buf(std::mem::take(&mut self.buf));
        give_buf(std::mem::take(&mut self.out));
        // Not h2c (its sniffing state lives in the task), and TLS only with nothing in flight
        // (`server/park.rs`; waiting on the socket reads nothing, so that stays true).
        let parkable =
            self.io.parkable() && !self.orphaned && !self.rt.cfg.listeners[self.listener].h2c;
        // Bound first: an `if let` on the `?` expression would keep its temporary (16 bytes)
        // across the wait, in every idle connection's future.
        let stream = self.io.idle_stream().or_err(ErrorKind::ClientIo, "read")?;
        if let Some(stream) = stream {
            self.state.set_idle(self.key, Some(wait), parkable);
            if self.idle_deadline != 0 {
                self.state.cap_idle(self.key, self.idle_deadline);
            }
            self.parkable = parkable;
            // The registration's reader slot, not `readable()`: that future links a waiter
            // into the socket's list and unlinks it again, about 150 instructions a request
            // more (callgrind, hello keep-alive).
            let ready = std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await;
            self.parkable = false;
            if matches!(self.io, ClientIo::Tls(_)) && self.served > 0 {
                // Kept for a wake that brings no request (below).
                self.idle_deadline = self.state.idle_deadline(self.key);
            }
            self.state.set_idle(self.key, None, false);
            ready.or_err(ErrorKind::ClientIo, "read")?;
        }
        self.buf = take_buf();
        self.out = take_buf();
        let tls = matches!(self.io, ClientIo::Tls(_));
        if tls {
            // Readable is not yet a request over TLS: half a record, or a lone key update,
            // decrypts to nothing and the read would wait with no deadline. The sweeper closes
            // the connection if no plaintext comes within `timeouts.header`, or by the
            // keep-alive deadline it had, whichever is first.
            let header = self.rt.cfg.timeouts.header;
            self.state.set_idle(self.key, Some(header), false);
            if self.idle_deadline != 0 {
                self.state.cap_idle(self.key, self.idle_deadline);
            }
        }
        let n = read_more(&mut self.io, &mut self.buf)
            .await
            .or_err(ErrorKind::ClientIo, "read")?;
        if tls {
            self.state.set_idle(self.key, None, false);
        }
        Ok(Some(n))
    }

    /// The first wait of a connection accepted with nothing to read on a deferring listener:
    /// the kernel already held it for the whole deferral (it queues a connection early only
    /// when data came), so that much less.
    #[inline]
    pub(super) fn after_deferral(&self, wait: Duration) -> Duration {
        let defer = self.rt.cfg.listeners[self.listener].defer_secs;
        if self.served == 0 && defer > 0 {
            return wait
                .saturating_sub(Duration::from_secs(defer.into()))
                .max(Duration::from_millis(100));
        }
        wait
    }
}
