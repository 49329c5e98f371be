//! h2c with prior knowledge on an HTTP/1.1 connection: on listeners with `h2c: true`, the first
//! bytes tell whether the client starts with the HTTP/2 preface; if so, the connection (the
//! bytes already read included) is handed to `server/h2`. Other listeners never look.

use tokio::time::{timeout_at, Instant};

use super::buffers::{give_buf, read_more, take_buf};
use super::conn::Conn;
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
                // Neither HTTP/2's preface nor an HTTP/1 request line (RFC 9113 §3.4: an
                // invalid preface ends the connection, h2spec 3.5/2): closed, not answered.
                if not_http1(&self.buf) {
                    return Err(Error::with(
                        ErrorKind::ClientIo,
                        "neither HTTP/2 nor HTTP/1",
                    ));
                }
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
            ClientIo::Fresh(s) => match s.register() {
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
        let at = (
            self.peer,
            self.key,
            self.state.clone(),
            self.rt.clone(),
            self.listener,
        );
        crate::server::h2::serve(tcp, prefix, at, None).await
    }
}

/// Whether the first line of `buf`, once whole, cannot be an HTTP/1 request line: it does not
/// end in `HTTP/` and a version (`INVALID CONNECTION PREFACE`). A line not yet whole, or a
/// malformed HTTP/1 request, is HTTP/1.1's to answer (400, 505).
fn not_http1(buf: &[u8]) -> bool {
    let Some(end) = memchr::memmem::find(buf, b"\r\n") else {
        return false;
    };
    let line = &buf[..end];
    let Some(sp) = memchr::memrchr(b' ', line) else {
        return true;
    };
    let version = &line[sp + 1..];
    !(version.len() == 8
        && version.starts_with(b"HTTP/")
        && version[5].is_ascii_digit()
        && version[6] == b'.'
        && version[7].is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::not_http1;

    #[test]
    fn only_a_line_that_is_no_http1_request_line_is_refused() {
        assert!(not_http1(b"INVALID CONNECTION PREFACE\r\n\r\n"));
        assert!(not_http1(b"hello\r\n"));
        assert!(!not_http1(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!not_http1(b"GET / HTTP/2.0\r\n"));
        assert!(!not_http1(b"GET / HTTP/1.1"));
        assert!(!not_http1(b"INVALID CONNECTION"));
    }
}
