//! A client's socket: one type for a connection accepted on a TCP or a unix listener (Pingora's
//! `l4::RawStream {Tcp, Unix}` is the shape), in its two states:
//!
//! * [`RawClient`]: not registered with the reactor (mio: plain non-blocking calls). A
//!   connection is accepted this way and served so while it need not wait (`server/client_io.rs`),
//!   and parked connections wait this way in the worker's idle epoll (`server/park.rs`).
//! * [`ClientStream`]: registered with the worker's tokio reactor; `AsyncRead`/`AsyncWrite`,
//!   readiness, `try_io`.
//!
//! Everything the connection path does with its socket (`recv`, `send`/`writev` with
//! `MSG_MORE`, `sendfile`, `splice`, `shutdown`, `SO_LINGER`, `MSG_PEEK`, epoll) works the same
//! on both families; what is TCP's alone (`TCP_NODELAY`) is a no-op on a unix socket instead of
//! an ignored error. Before this type, a unix connection was a `mio::net::TcpStream` built from
//! its descriptor: a socket that claimed to be TCP when it was not (issue 54 §2).
//!
//! The match per call costs a branch the predictor always gets right (a listener's sockets are
//! all of one family). `bench/ab_weir.sh` against the build before (dc9d072): hello keep-alive
//! 4,658 → 4,701 instructions per request (+0.9%, with this session's other changes), the
//! other HTTP/1.1 rows within 0.6% (`bench/results/ab-20261129-1514.md`).

use std::future::Future;
use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Runs `$e` on the socket inside either variant, bound as `$s`.
macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Self::Tcp($s) => $e,
            Self::Unix($s) => $e,
        }
    };
}

/// An accepted connection not registered with the reactor.
#[derive(Debug)]
pub enum RawClient {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl RawClient {
    /// Registers it with the current worker's reactor.
    pub fn register(self) -> io::Result<ClientStream> {
        Ok(match self {
            RawClient::Tcp(s) => ClientStream::Tcp(tokio::net::TcpStream::from_std(s.into())?),
            RawClient::Unix(s) => ClientStream::Unix(tokio::net::UnixStream::from_std(s.into())?),
        })
    }

    /// Reads what is queued without taking it (`MSG_PEEK`).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawClient::Tcp(s) => s.peek(buf),
            RawClient::Unix(s) => peek_fd(s, buf),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, RawClient::Unix(_))
    }

    /// Whether the peer ended its side (its FIN came): what is queued may still be read, but
    /// nothing more will come. One `poll(POLLRDHUP)` that does not wait, for a caller that
    /// peeks without registering (a PROXY header arriving in pieces, `server/proxied.rs`).
    pub fn read_closed(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd, exclusively borrowed for the call, and its
        // descriptor is open (owned by `self`, which is borrowed); a timeout of 0 never waits.
        #[allow(unsafe_code)]
        let n = unsafe { libc::poll(&mut fd, 1, 0) };
        n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0
    }
}

impl Read for RawClient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        each!(self, s => s.read(buf))
    }
}

impl Read for &RawClient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawClient::Tcp(s) => (&*s).read(buf),
            RawClient::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for RawClient {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        each!(self, s => s.write(buf))
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        each!(self, s => s.write_vectored(bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for RawClient {
    fn as_raw_fd(&self) -> RawFd {
        each!(self, s => s.as_raw_fd())
    }
}

impl IntoRawFd for RawClient {
    fn into_raw_fd(self) -> RawFd {
        each!(self, s => s.into_raw_fd())
    }
}

impl AsFd for RawClient {
    fn as_fd(&self) -> BorrowedFd<'_> {
        each!(self, s => s.as_fd())
    }
}

impl mio::event::Source for RawClient {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        each!(self, s => s.register(registry, token, interests))
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        each!(self, s => s.reregister(registry, token, interests))
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        each!(self, s => s.deregister(registry))
    }
}

/// A client socket registered with the worker's reactor.
#[derive(Debug)]
pub enum ClientStream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl ClientStream {
    /// Leaves the reactor (a connection about to be parked).
    pub fn into_raw(self) -> io::Result<RawClient> {
        Ok(match self {
            ClientStream::Tcp(s) => RawClient::Tcp(mio::net::TcpStream::from_std(s.into_std()?)),
            ClientStream::Unix(s) => RawClient::Unix(mio::net::UnixStream::from_std(s.into_std()?)),
        })
    }

    pub async fn readable(&self) -> io::Result<()> {
        each!(self, s => s.readable().await)
    }

    pub async fn writable(&self) -> io::Result<()> {
        each!(self, s => s.writable().await)
    }

    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_read_ready(cx))
    }

    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_write_ready(cx))
    }

    /// Runs `f` (a system call on the descriptor) and clears the readiness it found missing.
    pub fn try_io<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        each!(self, s => s.try_io(interest, f))
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        each!(self, s => s.try_read(buf))
    }

    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        each!(self, s => s.try_write(buf))
    }

    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        each!(self, s => s.try_write_vectored(bufs))
    }

    pub async fn ready(&self, interest: Interest) -> io::Result<tokio::io::Ready> {
        each!(self, s => s.ready(interest).await)
    }

    pub fn try_read_buf(&self, buf: &mut impl bytes::BufMut) -> io::Result<usize> {
        each!(self, s => s.try_read_buf(buf))
    }

    /// The address the client reached (`None` on a unix socket).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            ClientStream::Tcp(s) => s.local_addr().ok(),
            ClientStream::Unix(_) => None,
        }
    }

    /// Waits for bytes and reads them without taking them (`MSG_PEEK`).
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            ClientStream::Tcp(s) => s.peek(buf).await,
            ClientStream::Unix(s) => loop {
                s.readable().await?;
                match s.try_io(Interest::READABLE, || peek_fd(s, buf)) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            },
        }
    }

    /// `TCP_NODELAY` on a TCP socket; nothing on a unix one (it has no Nagle to turn off).
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            ClientStream::Tcp(s) => s.set_nodelay(on),
            ClientStream::Unix(_) => Ok(()),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, ClientStream::Unix(_))
    }
}

/// What a `splice` relay needs of a registered socket (`tcp/relay.rs`): its descriptor and
/// its readiness. A client's [`ClientStream`] and an upstream's `tokio::net::TcpStream` both
/// have them.
pub trait Registered: AsRawFd + AsFd {
    fn readable(&self) -> impl Future<Output = io::Result<()>>;
    fn writable(&self) -> impl Future<Output = io::Result<()>>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

impl Registered for ClientStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> {
        ClientStream::readable(self)
    }
    fn writable(&self) -> impl Future<Output = io::Result<()>> {
        ClientStream::writable(self)
    }
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        ClientStream::try_io(self, interest, f)
    }
}

impl Registered for tokio::net::TcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> {
        tokio::net::TcpStream::readable(self)
    }
    fn writable(&self) -> impl Future<Output = io::Result<()>> {
        tokio::net::TcpStream::writable(self)
    }
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        tokio::net::TcpStream::try_io(self, interest, f)
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self.get_mut(), s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self.get_mut(), s => Pin::new(s).poll_shutdown(cx))
    }
}

impl AsRawFd for ClientStream {
    fn as_raw_fd(&self) -> RawFd {
        each!(self, s => s.as_raw_fd())
    }
}

impl AsFd for ClientStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        each!(self, s => s.as_fd())
    }
}

/// `recv(MSG_PEEK)` on a stream socket (mio and tokio offer `peek` on TCP streams only).
fn peek_fd(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let len = buf.len();
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the slice is only written by
    // `recv` with bytes it received (never with uninitialised memory), so `buf` stays
    // initialised; the length is the original's.
    #[allow(unsafe_code)]
    let uninit =
        unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<MaybeUninit<u8>>(), len) };
    socket2::SockRef::from(fd).peek(uninit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both families peek, read and write through the one type, and `TCP_NODELAY` is
    /// TCP's alone.
    #[test]
    fn tcp_and_unix_clients_behave_alike() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tcp_peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (tcp, _) = l.accept().unwrap();
        tcp.set_nonblocking(true).unwrap();
        let (unix, mut unix_peer) = std::os::unix::net::UnixStream::pair().unwrap();
        unix.set_nonblocking(true).unwrap();
        let clients = [
            RawClient::Tcp(mio::net::TcpStream::from_std(tcp)),
            RawClient::Unix(mio::net::UnixStream::from_std(unix)),
        ];
        tcp_peer.write_all(b"hello").unwrap();
        unix_peer.write_all(b"hello").unwrap();
        for mut c in clients {
            let mut buf = [0u8; 16];
            let n = loop {
                match c.peek(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    r => break r.unwrap(),
                }
            };
            assert_eq!(&buf[..n], b"hello", "peeked");
            assert_eq!(
                c.read(&mut buf).unwrap(),
                5,
                "the peeked bytes are still there"
            );
            assert_eq!(c.write(b"back").unwrap(), 4);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let unix = c.is_unix();
            rt.block_on(async move {
                let s = c.register().unwrap();
                assert_eq!(s.is_unix(), unix);
                s.set_nodelay(true).unwrap();
                let raw = s.into_raw().unwrap();
                assert_eq!(raw.is_unix(), unix, "parked and back, the family stays");
            });
        }
        let mut got = [0u8; 4];
        std::io::Read::read_exact(&mut tcp_peer, &mut got).unwrap();
        assert_eq!(&got, b"back");
        std::io::Read::read_exact(&mut unix_peer, &mut got).unwrap();
        assert_eq!(&got, b"back");
    }
}
