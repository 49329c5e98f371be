//! The connection's output: writing what the pipeline queued (one direct write in the common
//! case, vectored and timed when the client reads slowly or large bodies are queued by
//! reference), and the lingering close after an error response.

use std::io;

use bytes::{Buf, Bytes};
use tokio::time::{timeout, timeout_at, Instant};

use super::buffers::READ_BUF;
use super::conn::{Conn, BY_REFERENCE, IOV_MAX, LINGER_BYTES, LINGER_TIME};
use crate::error::{Error, ErrorKind, OrErr};

impl Conn {
    /// Writes the output: one direct write in the common case; queued bodies, or a client that
    /// is not reading fast enough, take the vectored, timed slow path.
    pub(super) async fn flush(&mut self) -> Result<(), Error> {
        self.flush_with(false).await
    }

    /// [`Conn::flush`]; `closing`: the socket is closed right after (see [`ClientIo::write_now`]).
    pub(super) async fn flush_with(&mut self, closing: bool) -> Result<(), Error> {
        if self.segs.is_empty() {
            if self.out.is_empty() {
                return Ok(());
            }
            let n = self
                .io
                .write_now(&self.out, closing)
                .or_err(ErrorKind::ClientIo, "write")?;
            if n == self.out.len() {
                self.out.clear();
                if !self.io.has_pending() {
                    return Ok(());
                }
            } else {
                let _ = self.out.split_to(n);
            }
        }
        Box::pin(self.flush_slow(closing)).await
    }

    /// Appends a response body: copied into `out` when short, queued by reference when long (a
    /// 10 MiB cached object is sent from the store's own buffer, not copied per client).
    #[inline(always)]
    pub(super) fn put_body(&mut self, body: &Bytes) {
        if body.len() < BY_REFERENCE {
            self.out.extend_from_slice(body);
            return;
        }
        if !self.out.is_empty() {
            self.segs.push_back(self.out.split().freeze());
        }
        self.segs.push_back(body.clone());
    }

    /// Writes the queued segments and then `out` with vectored writes, waiting while the
    /// client's socket buffer is full. `timeouts.write` bounds each stall, not the whole
    /// transfer: a big object to a slow but steady reader is not cut.
    pub(super) async fn flush_slow(&mut self, mut closing: bool) -> Result<(), Error> {
        if !self.out.is_empty() {
            self.segs.push_back(self.out.split().freeze());
        }
        let stall = self.rt.cfg.timeouts.write;
        while !self.segs.is_empty() {
            let mut iov = [io::IoSlice::new(&[]); IOV_MAX];
            let n = self.segs.len().min(IOV_MAX);
            for (slot, seg) in iov.iter_mut().zip(&self.segs) {
                *slot = io::IoSlice::new(seg);
            }
            match self.io.send_once(&iov[..n], closing) {
                Ok(0) => return Err(Error::with(ErrorKind::ClientIo, "write: wrote nothing")),
                Ok(mut written) => {
                    while written > 0 {
                        let Some(front) = self.segs.front_mut() else {
                            break;
                        };
                        let step = written.min(front.len());
                        front.advance(step);
                        written -= step;
                        if front.is_empty() {
                            self.segs.pop_front();
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The rest goes without MSG_MORE (see `ClientIo::send_once`).
                    closing = false;
                    timeout(stall, self.io.writable())
                        .await
                        .map_err(|_| Error::new(ErrorKind::WriteTimeout))?
                        .or_err(ErrorKind::ClientIo, "write")?;
                }
                Err(e) => return Err(Error::with(ErrorKind::ClientIo, format_args!("write: {e}"))),
            }
        }
        // TLS records rustls could not write yet.
        while !self
            .io
            .push_pending()
            .or_err(ErrorKind::ClientIo, "write")?
        {
            timeout(stall, self.io.writable())
                .await
                .map_err(|_| Error::new(ErrorKind::WriteTimeout))?
                .or_err(ErrorKind::ClientIo, "write")?;
        }
        Ok(())
    }

    /// Half-closes and drains unread input for a moment, so the client sees our last response
    /// rather than a reset caused by data we never read.
    pub(super) async fn linger(&mut self) {
        if self.io.shutdown().await.is_err() {
            return;
        }
        let deadline = Instant::now() + LINGER_TIME;
        let mut drained = 0;
        // Drain into the read buffer (a stack array here would live in every connection's future).
        self.buf.clear();
        self.buf.reserve(READ_BUF);
        while drained < LINGER_BYTES {
            match timeout_at(deadline, self.io.read_buf(&mut self.buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    drained += n;
                    self.buf.clear();
                }
                _ => break,
            }
        }
    }
}
