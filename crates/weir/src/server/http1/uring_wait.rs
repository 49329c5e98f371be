//! The idle wait of a connection on the io_uring experiment's transport (`server/uring/`,
//! `--features uring`), beside [`Conn::wait_idle`] for epoll.

use std::time::Duration;

use super::buffers::{give_buf, read_more, take_buf};
use super::conn::Conn;
use crate::error::{Error, ErrorKind, OrErr};
use crate::server::client_io::ClientIo;

impl Conn {
    /// [`Conn::wait_idle`] on the io_uring transport (`server/uring/`): the same waits, on the
    /// ring's completions instead of epoll readiness, and never parked.
    pub(super) async fn wait_idle_uring(&mut self, wait: Duration) -> Result<Option<usize>, Error> {
        // The wait if the first read finds nothing (worked out before the socket is borrowed).
        let wait = self.after_deferral(wait);
        let ClientIo::Uring(sock) = &mut self.io else {
            return Err(Error::with(ErrorKind::ClientIo, "not an io_uring socket"));
        };
        if self.buf.capacity() == 0 {
            self.buf = take_buf();
        }
        if let Some(n) = sock
            .try_read_now(&mut self.buf)
            .or_err(ErrorKind::ClientIo, "read")?
        {
            return Ok(Some(n));
        }
        if self.state.shutting_down.get() {
            return Ok(None);
        }
        if !sock.has_input() {
            give_buf(std::mem::take(&mut self.buf));
            give_buf(std::mem::take(&mut self.out));
            self.state.set_idle(self.key, Some(wait), false);
            let ready = std::future::poll_fn(|cx| sock.poll_ready(cx)).await;
            self.state.set_idle(self.key, None, false);
            ready.or_err(ErrorKind::ClientIo, "read")?;
            self.buf = take_buf();
            self.out = take_buf();
        }
        let n = read_more(&mut self.io, &mut self.buf)
            .await
            .or_err(ErrorKind::ClientIo, "read")?;
        Ok(Some(n))
    }
}
