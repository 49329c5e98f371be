//! A socket to an upstream server: TCP, a unix-domain socket (`unix:/run/app.sock`, as nginx and
//! HAProxy allow), or TLS over TCP; and [`connect`], which opens the one a server names.
//!
//! An enum rather than nested `Either`s: three kinds, matched by name at the pool's probe and
//! the TCP relay. Reads and writes dispatch with one `match`, as `Either` did.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::tls::UpstreamTls;
use super::upstream::Server;

/// An open connection to an upstream server.
#[derive(Debug)]
pub enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Socket {
    /// The kernel socket under it (for `MSG_PEEK` probes).
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Unix(s) => s.as_fd(),
            Socket::Tls(s) => s.get_ref().0.as_fd(),
        }
    }

    /// Whether the worker's reactor has seen the socket readable (bytes, or the peer's FIN or
    /// reset) since a read last drained it, asked of the readiness the reactor keeps: no
    /// system call. `false` says nothing of bytes that reached the socket after the reactor
    /// last polled (see `pool.rs`).
    pub fn read_event_seen(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let ready = match self {
            Socket::Tcp(s) => s.poll_read_ready(&mut cx),
            Socket::Unix(s) => s.poll_read_ready(&mut cx),
            Socket::Tls(s) => s.get_ref().0.poll_read_ready(&mut cx),
        };
        ready.is_ready()
    }

    /// Whether bytes on the socket are the protocol itself (not TLS records).
    pub fn is_plain(&self) -> bool {
        !matches!(self, Socket::Tls(_))
    }
}

/// Connects to `server` within `within`: its unix socket, or its address with TLS when `tls`
/// is given (and the server has a TLS name).
pub async fn connect(
    server: &Server,
    tls: Option<&UpstreamTls>,
    within: Duration,
) -> io::Result<Socket> {
    connect_with(server, tls, within, &[]).await
}

/// [`connect`], sending `preamble` first (before any TLS handshake): a PROXY protocol header.
pub async fn connect_with(
    server: &Server,
    tls: Option<&UpstreamTls>,
    within: Duration,
    preamble: &[u8],
) -> io::Result<Socket> {
    match &server.unix {
        Some(path) => {
            let open = async {
                let mut s = UnixStream::connect(&**path).await?;
                if !preamble.is_empty() {
                    tokio::io::AsyncWriteExt::write_all(&mut s, preamble).await?;
                }
                Ok(Socket::Unix(s))
            };
            tokio::time::timeout(within, open)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
        }
        None => {
            let tls = tls.zip(server.tls_name.as_ref());
            super::tls::connect(**server.addr.load(), tls, within, preamble).await
        }
    }
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Socket::Tcp($s) => $e,
            Socket::Unix($s) => $e,
            Socket::Tls($s) => $e,
        }
    };
}

impl AsyncRead for Socket {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Socket {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Tcp(s) => s.is_write_vectored(),
            Socket::Unix(s) => s.is_write_vectored(),
            Socket::Tls(s) => s.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
