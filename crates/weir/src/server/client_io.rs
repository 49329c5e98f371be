//! The client socket (`crate::client_socket`: TCP or unix), registered with the reactor lazily.
//!
//! A connection is accepted unregistered (mio's `accept4(SOCK_NONBLOCK)`) and first served with
//! plain non-blocking reads and writes. Only when it must wait — no request yet, a partial
//! request, a full socket buffer, or keep-alive idling — is it handed to tokio, which costs an
//! `epoll_ctl(ADD)` now and an `epoll_ctl(DEL)` at close. A client that sends its request with
//! the handshake and asks for `Connection: close` (seed experiment 002) is therefore served with
//! `accept4`, `recvfrom`, `sendto` (response and FIN in one segment), `shutdown`, `close`.
//!
//! TLS connections are registered from the start (the handshake waits anyway) and skip both
//! fast paths: `MSG_MORE` with the FIN would hold back a `close_notify`, and there is no
//! handshake-free first read to save. Their writes are encrypted at once into the stream's
//! outgoing buffer (`tls/stream.rs`) and pushed until the socket is full:
//! [`ClientIo::has_pending`] tells the connection that records are still waiting, so a
//! response is never left in that buffer while the connection waits for a request.

use std::io::{self, IoSlice, Write};

use crate::tls::stream::ServerTls;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client_socket::{ClientStream, RawClient};

use crate::tls::TlsInfo;

/// A TLS connection after its handshake, and what the handshake settled.
#[derive(Debug)]
pub(crate) struct TlsConn {
    pub stream: ServerTls,
    pub info: TlsInfo,
}

/// A client socket, before or after registration with the reactor.
#[derive(Debug)]
pub(crate) enum ClientIo {
    /// Not yet known to epoll; every call is a plain non-blocking syscall.
    Fresh(RawClient),
    /// Registered with this worker's reactor.
    Registered(ClientStream),
    /// TLS, registered (boxed: a plain connection does not carry rustls' state in its size).
    Tls(Box<TlsConn>),
    /// Served through the worker's io_uring ring (the `uring` feature's experiment).
    #[cfg(feature = "uring")]
    Uring(super::uring::UringSock),
    /// Transient state during registration.
    Gone,
}

impl ClientIo {
    /// Registers with the reactor (idempotent).
    pub(crate) fn register(&mut self) -> io::Result<&mut ClientStream> {
        if let ClientIo::Fresh(_) = self {
            let ClientIo::Fresh(s) = std::mem::replace(self, ClientIo::Gone) else {
                unreachable!()
            };
            *self = ClientIo::Registered(s.register()?);
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
        match self {
            ClientIo::Fresh(s) => match read_nonblocking(s, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            },
            #[cfg(feature = "uring")]
            ClientIo::Uring(s) => return std::future::poll_fn(|cx| s.poll_read(cx, buf)).await,
            ClientIo::Tls(t) => {
                // Records rustls queued while reading leave before the read waits (the stream
                // sends them): the client may be waiting for them (the alert refusing a TLS 1.2
                // renegotiation once never left, and the client hung).
                if buf.capacity() == buf.len() {
                    buf.reserve(4096);
                }
                let read = std::future::poll_fn(|cx| {
                    tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut t.stream), cx, buf)
                });
                return match read.await {
                    // Most clients close without `close_notify`; between requests that is a
                    // clean end, as it is for nginx.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                    other => other,
                };
            }
            _ => {}
        }
        self.register()?.read_buf(buf).await
    }

    /// The socket to wait on for a request to start, registered; `None` when there is nothing
    /// to wait for because rustls holds decrypted bytes already (TLS). Waiting on the socket
    /// reads nothing, so the caller need not hold a buffer meanwhile.
    pub(crate) fn idle_stream(&mut self) -> io::Result<Option<&ClientStream>> {
        if let ClientIo::Tls(t) = self {
            if t.stream.readable_now()? {
                return Ok(None);
            }
            return Ok(Some(t.stream.tcp()));
        }
        Ok(Some(self.register()?))
    }

    /// Whether the connection could leave its task now (`server/park.rs`): always for plain
    /// TCP, for TLS when nothing is in flight.
    pub(crate) fn parkable(&self) -> bool {
        match self {
            ClientIo::Fresh(_) | ClientIo::Registered(_) => true,
            ClientIo::Tls(t) => t.stream.is_quiet(),
            ClientIo::Gone => false,
            #[cfg(feature = "uring")]
            ClientIo::Uring(_) => false,
        }
    }

    /// Relays bytes both ways between the client and `upstream` until either side closes.
    pub(crate) async fn tunnel(
        &mut self,
        upstream: &mut dyn crate::pipeline::downstream::Tunnel,
    ) -> io::Result<()> {
        if let ClientIo::Tls(t) = self {
            tokio::io::copy_bidirectional(&mut t.stream, upstream).await?;
            return Ok(());
        }
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(s) = self {
            tokio::io::copy_bidirectional(s, upstream).await?;
            return Ok(());
        }
        tokio::io::copy_bidirectional(self.register()?, upstream).await?;
        Ok(())
    }

    /// What the TLS handshake settled; `None` on plain TCP.
    #[inline]
    pub(crate) fn tls_info(&self) -> Option<&TlsInfo> {
        match self {
            ClientIo::Tls(t) => Some(&t.info),
            _ => None,
        }
    }

    /// TLS records are still waiting in rustls' buffer for room in the socket.
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            ClientIo::Tls(t) => t.stream.wants_write(),
            _ => false,
        }
    }

    /// Pushes waiting TLS records into the socket: `Ok(true)` once none are left, `Ok(false)`
    /// when the socket is full.
    pub(crate) fn push_pending(&mut self) -> io::Result<bool> {
        match self {
            ClientIo::Tls(t) => t.stream.push(),
            _ => Ok(true),
        }
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
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(s) = self {
            return s.send(bufs, closing);
        }
        if closing {
            // A raw send on a registered socket leaves tokio's readiness as it was: at worst
            // tokio later tries a write that finds the buffer full, never the reverse.
            if !matches!(self, ClientIo::Tls(_)) {
                return self.sock()?.send_vectored_with_flags(bufs, libc::MSG_MORE);
            }
        }
        match (self, bufs) {
            (ClientIo::Gone, _) => Err(io::ErrorKind::NotConnected.into()),
            (ClientIo::Tls(t), _) => t.stream.write_now(bufs),
            (ClientIo::Fresh(s), [one]) => s.write(one),
            (ClientIo::Fresh(s), _) => s.write_vectored(bufs),
            (ClientIo::Registered(s), [one]) => s.try_write(one),
            (ClientIo::Registered(s), _) => s.try_write_vectored(bufs),
            #[cfg(feature = "uring")]
            (ClientIo::Uring(s), _) => s.send(bufs, false),
        }
    }

    /// Whether bodies can go out with `sendfile` (plain TCP; TLS encrypts in user space).
    pub(crate) fn sends_files(&self) -> bool {
        matches!(self, ClientIo::Fresh(_) | ClientIo::Registered(_))
    }

    /// One non-blocking `sendfile` of up to `count` bytes of `file` from `*offset` (advanced
    /// by what was sent). `WouldBlock` when the socket buffer is full.
    pub(crate) fn send_file(
        &mut self,
        file: &std::fs::File,
        offset: &mut i64,
        count: usize,
    ) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let mut send = |sock: i32| {
            // SAFETY: both descriptors are open for the duration of the call (`file` and the
            // socket are borrowed), and `offset` is a valid, exclusively borrowed off_t.
            #[allow(unsafe_code)]
            let n = unsafe { libc::sendfile(sock, file.as_raw_fd(), offset, count) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        };
        match self {
            ClientIo::Fresh(s) => send(s.as_raw_fd()),
            // Through tokio, so a full buffer clears its readiness and `writable` really waits.
            ClientIo::Registered(s) => {
                let fd = s.as_raw_fd();
                s.try_io(tokio::io::Interest::WRITABLE, || send(fd))
            }
            ClientIo::Tls(_) | ClientIo::Gone => Err(io::ErrorKind::Unsupported.into()),
            #[cfg(feature = "uring")]
            ClientIo::Uring(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Waits until the socket can take more bytes (registering if needed).
    pub(crate) async fn writable(&mut self) -> io::Result<()> {
        if let ClientIo::Tls(t) = self {
            return t.stream.tcp().writable().await;
        }
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(s) = self {
            return std::future::poll_fn(|cx| s.poll_writable(cx)).await;
        }
        self.register()?.writable().await
    }

    /// Half-closes the write side now, without waiting (errors mean the peer is gone already).
    /// TLS sends `close_notify` first.
    pub(crate) fn shutdown_now(&mut self) {
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(s) = self {
            s.shutdown_write();
            return;
        }
        if let ClientIo::Tls(t) = self {
            t.stream.queue_close_notify();
            let _ = t.stream.push();
        }
        if let Ok(s) = self.sock() {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }

    /// The socket for calls tokio and mio do not offer (flags, half-close), in either state.
    fn sock(&self) -> io::Result<socket2::SockRef<'_>> {
        match self {
            ClientIo::Fresh(s) => Ok(socket2::SockRef::from(s)),
            ClientIo::Registered(s) => Ok(socket2::SockRef::from(s)),
            ClientIo::Tls(t) => Ok(socket2::SockRef::from(t.stream.tcp())),
            ClientIo::Gone => Err(io::ErrorKind::NotConnected.into()),
            #[cfg(feature = "uring")]
            ClientIo::Uring(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Half-closes the write side (TLS: after `close_notify`).
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        #[cfg(feature = "uring")]
        if let ClientIo::Uring(s) = self {
            s.shutdown_write();
            return Ok(());
        }
        if let ClientIo::Tls(t) = self {
            return t.stream.shutdown().await;
        }
        self.register()?.shutdown().await
    }
}

/// One non-blocking `recv` into the spare capacity of `buf`, without zero-filling it first (a
/// zero-fill would make every pooled buffer fully resident).
#[allow(unsafe_code)]
fn read_nonblocking(s: &mut RawClient, buf: &mut BytesMut) -> io::Result<usize> {
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
