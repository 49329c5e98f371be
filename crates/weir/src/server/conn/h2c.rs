//! h2c with prior knowledge on an HTTP/1.1 connection: on listeners with `h2c: true`, the first
//! bytes tell whether the client starts with the HTTP/2 preface; if so, the connection (the
//! bytes already read included) is handed to `server/h2`. Other listeners never look.

use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::{give_buf, read_more, take_buf, Conn};
use crate::error::{Error, ErrorKind, OrErr};
use crate::metrics::CloseReason;
use crate::server::client_io::ClientIo;
use crate::server::h2::PREFACE;

impl Conn {
    /// On an `h2c` listener: serves HTTP/2 to its end if the client starts with its preface
    /// (`Some`), else leaves the bytes read for HTTP/1.1 (`None`).
    pub(super) async fn h2c(&mut self) -> Option<CloseReason> {
        match self.sniff_h2c().await {
            Ok(true) => Some(self.serve_h2().await),
            Ok(false) => None,
            Err(_) => Some(CloseReason::ClientError),
        }
    }

    /// On an `h2c` listener: reads until the first bytes show whether the client starts with
    /// the HTTP/2 preface (`true`) or speaks HTTP/1.1 (`false`, the bytes stay in `buf`).
    async fn sniff_h2c(&mut self) -> Result<bool, Error> {
        let deadline = Instant::now() + self.rt.cfg.timeouts.header;
        if self.buf.capacity() == 0 {
            self.buf = take_buf();
        }
        loop {
            let n = self.buf.len().min(PREFACE.len());
            if self.buf[..n] != PREFACE[..n] {
                return Ok(false);
            }
            if n == PREFACE.len() {
                return Ok(true);
            }
            let read = timeout_at(deadline, read_more(&mut self.io, &mut self.buf)).await;
            if read
                .map_err(|_| Error::new(ErrorKind::HeaderTimeout))?
                .or_err(ErrorKind::ClientIo, "read")?
                == 0
            {
                return Ok(false);
            }
        }
    }

    /// Hands the connection to HTTP/2 (h2c with prior knowledge), preface included.
    async fn serve_h2(&mut self) -> CloseReason {
        let tcp = match std::mem::replace(&mut self.io, ClientIo::Gone) {
            ClientIo::Fresh(s) => match TcpStream::from_std(std::net::TcpStream::from(s)) {
                Ok(t) => t,
                Err(_) => return CloseReason::ClientError,
            },
            ClientIo::Registered(s) => s,
            ClientIo::Tls(_) | ClientIo::Gone => return CloseReason::ClientError,
            #[cfg(feature = "uring")]
            ClientIo::Uring(_) => return CloseReason::ClientError,
        };
        let prefix = self.buf.split().freeze();
        give_buf(std::mem::take(&mut self.buf));
        give_buf(std::mem::take(&mut self.out));
        let io = crate::server::h2::Rewind::new(prefix, tcp);
        let (state, rt) = (self.state.clone(), self.rt.clone());
        crate::server::h2::serve(io, self.peer, state, rt, self.listener, None).await
    }
}
