//! The client socket, registered with the reactor lazily.
//!
//! A connection is accepted unregistered (mio's `accept4(SOCK_NONBLOCK)`) and first served with
//! plain non-blocking reads and writes. Only when it must wait — no request yet, a partial
//! request, a full socket buffer, or keep-alive idling — is it handed to tokio, which costs an
//! `epoll_ctl(ADD)` now and an `epoll_ctl(DEL)` at close. A client that sends its request with
//! the handshake and asks for `Connection: close` (seed experiment 002) is therefore served with
//! `accept4`, `recvfrom`, `sendto` (response and FIN in one segment), `shutdown`, `close`.

use std::io::{self, IoSlice, Write};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client socket, before or after registration with the reactor.
#[derive(Debug)]
pub(crate) enum ClientIo {
    /// Not yet known to epoll; every call is a plain non-blocking syscall.
    Fresh(mio::net::TcpStream),
    /// Registered with this worker's reactor.
    Registered(TcpStream),
    /// Transient state during registration.
    Gone,
}

impl ClientIo {
    /// Registers with the reactor (idempotent).
    pub(crate) fn register(&mut self) -> io::Result<&mut TcpStream> {
        if let ClientIo::Fresh(_) = self {
            let ClientIo::Fresh(s) = std::mem::replace(self, ClientIo::Gone) else {
                unreachable!()
            };
            *self = ClientIo::Registered(TcpStream::from_std(std::net::TcpStream::from(s))?);
        }
        match self {
            ClientIo::Registered(s) => Ok(s),
            _ => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "socket lost during registration",
            )),
        }
    }

    /// Reads what is available; waits (registering if needed) when nothing is.
    pub(crate) async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if let ClientIo::Fresh(s) = self {
            match read_nonblocking(s, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
        self.register()?.read_buf(buf).await
    }

    /// Whether a fresh socket has bytes right now (consumes them into `buf`): `Ok(Some(n))` read
    /// `n` (0 = EOF), `Ok(None)` nothing yet or already registered.
    pub(crate) fn try_read_fresh(&mut self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match self {
            ClientIo::Fresh(s) => match read_nonblocking(s, buf) {
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            },
            _ => Ok(None),
        }
    }

    /// Writes as much as the socket takes right now without waiting; returns the bytes written.
    ///
    /// `closing`: these are the connection's last bytes and the socket is closed right after.
    /// They are sent with `MSG_MORE`, so the kernel holds them for the `close` and sends data and
    /// FIN in one segment (`tcp_send_fin` tacks the FIN onto an unsent tail). The client then
    /// sees the end of the connection together with the response: one packet and one wake-up
    /// fewer per connection, and its side closes passively, so a connection-per-request client
    /// does not pile up TIME_WAIT sockets (seed experiment 002).
    pub(crate) fn write_now(&mut self, mut data: &[u8], closing: bool) -> io::Result<usize> {
        let total = data.len();
        while !data.is_empty() {
            match self.send_once(&[IoSlice::new(data)], closing) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(total - data.len())
    }

    /// One non-blocking `send` (one slice) or `writev` (several); `closing` as in
    /// [`ClientIo::write_now`]. `WouldBlock` when the socket buffer is full.
    pub(crate) fn send_once(&mut self, bufs: &[IoSlice<'_>], closing: bool) -> io::Result<usize> {
        if closing {
            // A raw send on a registered socket leaves tokio's readiness as it was: at worst
            // tokio later tries a write that finds the buffer full, never the reverse.
            return self.sock()?.send_vectored_with_flags(bufs, libc::MSG_MORE);
        }
        match (self, bufs) {
            (ClientIo::Gone, _) => Err(io::ErrorKind::NotConnected.into()),
            (ClientIo::Fresh(s), [one]) => s.write(one),
            (ClientIo::Fresh(s), _) => s.write_vectored(bufs),
            (ClientIo::Registered(s), [one]) => s.try_write(one),
            (ClientIo::Registered(s), _) => s.try_write_vectored(bufs),
        }
    }

    /// Waits until the socket can take more bytes (registering if needed).
    pub(crate) async fn writable(&mut self) -> io::Result<()> {
        self.register()?.writable().await
    }

    /// Half-closes the write side now, without waiting (errors mean the peer is gone already).
    pub(crate) fn shutdown_now(&mut self) {
        if let Ok(s) = self.sock() {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }

    /// The socket for calls tokio and mio do not offer (flags, half-close), in either state.
    fn sock(&self) -> io::Result<socket2::SockRef<'_>> {
        match self {
            ClientIo::Fresh(s) => Ok(socket2::SockRef::from(s)),
            ClientIo::Registered(s) => Ok(socket2::SockRef::from(s)),
            ClientIo::Gone => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// Half-closes the write side.
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        self.register()?.shutdown().await
    }
}

/// One non-blocking `recv` into the spare capacity of `buf`, without zero-filling it first (a
/// zero-fill would make every pooled buffer fully resident).
#[allow(unsafe_code)]
fn read_nonblocking(s: &mut mio::net::TcpStream, buf: &mut BytesMut) -> io::Result<usize> {
    use bytes::BufMut;
    if buf.capacity() == buf.len() {
        buf.reserve(4096);
    }
    let sock = socket2::SockRef::from(&*s);
    let spare = buf.chunk_mut();
    // SAFETY: `as_uninit_slice_mut` only exposes the spare capacity as `MaybeUninit<u8>`, which
    // `recv` writes into without reading; no uninitialised byte is ever read through it.
    let n = loop {
        match sock.recv(unsafe { spare.as_uninit_slice_mut() }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => break r?,
        }
    };
    // SAFETY: `recv` returned `n`, so the first `n` bytes of the spare capacity were initialised
    // by the kernel; `n` is at most the length of the slice it was given.
    unsafe { buf.advance_mut(n) };
    Ok(n)
}
