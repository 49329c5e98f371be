//! A server-side TLS connection on rustls' unbuffered API, owning its buffers.
//!
//! Written here rather than taken from `tokio-rustls`: rustls' buffered `ServerConnection`
//! keeps a 4 KiB receive buffer for the connection's whole life (its deframer never shrinks
//! below one read), and an idle TLS keep-alive connection held 10.01 KiB against the floors
//! issue's target of 4 (`bench/idle_memory.sh`, 2026-11-26). Here the ciphertext read from the
//! socket, the plaintext not yet read and the records not yet sent are three `Vec`s of ours,
//! empty and unallocated whenever nothing is in flight, and an idle connection can leave its
//! task with only its record keys ([`IdleTls`], parked by `server/park.rs`).
//!
//! How it runs: every step calls `process_tls_records` over the unprocessed ciphertext and acts
//! on the state rustls answers — plaintext records are delivered (into the caller's buffer
//! first, the rest kept), handshake and alert records are appended to the outgoing buffer,
//! `WriteTraffic` encrypts what the caller writes straight into the outgoing buffer — until
//! rustls needs more bytes or may write. Writes are sent at once when the socket takes them;
//! what it does not take waits in the outgoing buffer (at most [`HIGH_WATER`] before a write
//! waits), and [`ServerTls::wants_write`] says so. A read that must wait first sends what is
//! queued (handshake replies, key updates, alerts): the client may be waiting for them.
//!
//! After a connection's first park its records are sealed and opened by [`Records`]
//! (`tls/records.rs`) instead of rustls: a parked connection then keeps only its keys' bytes.
//! The buffers and the engine that runs over them are `tls/session.rs`; this file is the socket
//! side: the handshake, tokio's `AsyncRead`/`AsyncWrite`, and parking.
//!
//! The server name is read from the ClientHello before rustls sees it (`tls/hello.rs`, checked
//! as rustls checks it): the unbuffered connection does not expose it. The same bytes give
//! on-demand certificates ([`crate::tls::on_demand`]) their name and ALPN without a second
//! handshake state.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use crate::client_socket::ClientStream;
use rustls::server::UnbufferedServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::tls::hello as sni;
use crate::tls::records::Records;
use crate::tls::session::{tls_error, Engine, Send, Session, Step};

/// Unsent records past which a write waits for the socket (rustls' buffered default).
pub(crate) const HIGH_WATER: usize = 64 * 1024;
/// Most plaintext encrypted per write call: four full records.
const MAX_WRITE: usize = 4 * 16 * 1024;
/// Most unprocessed ciphertext held: a handshake message may span records up to 64 KiB
/// (rustls' own limit), plus one record (16 KiB + 2 KiB and its header).
const MAX_INCOMING: usize = 0x10000 + 16 * 1024 + 2048 + 5;
/// Outgoing buffer kept between writes once drained: one largest write's records. Zeroing it
/// again for every write of a download would cost more than keeping it; what a connection
/// parks with is none (`into_idle` drops it), and a write that queued more is let go.
const KEEP_OUT: usize = MAX_WRITE + 4 * 64;

/// A TLS connection whose handshake is done.
pub(crate) struct ServerTls {
    tcp: ClientStream,
    s: Session,
}

/// An idle TLS connection's state without its socket and buffers (`server/park.rs`): its
/// record keys, without cipher contexts.
pub(crate) struct IdleTls {
    /// Boxed once when first parked, and only the box moves (`Records`' doc).
    records: Box<Records>,
    sni: Option<String>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("tcp", &self.tcp)
            .field("incoming", &self.s.incoming.len())
            .field("plain", &(self.s.plain.len() - self.s.taken))
            .field("out", &self.s.out_left())
            .finish()
    }
}

impl std::fmt::Debug for IdleTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleTls").field("sni", &self.sni).finish()
    }
}

impl ServerTls {
    /// Runs the handshake on `tcp` with `config`; `incoming` holds bytes already read from it
    /// (a ClientHello read for on-demand certificates). The caller bounds it in time.
    pub(crate) async fn accept(
        mut tcp: ClientStream,
        config: Arc<rustls::ServerConfig>,
        mut incoming: Vec<u8>,
    ) -> io::Result<ServerTls> {
        // The ClientHello, whole, before rustls sees it: its server name is read from it.
        let fields = loop {
            match sni::scan(&incoming, MAX_INCOMING) {
                sni::Scan::Incomplete => {}
                sni::Scan::NotTls => break None,
                sni::Scan::Done(fields) => break fields,
            }
            if read_some(&mut tcp, &mut incoming).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        let sni = fields.and_then(|f| f.name).filter(|n| is_dns_name(n));
        let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        let mut tls = ServerTls {
            tcp,
            s: Session::new(Engine::Rustls(conn), incoming, sni),
        };
        loop {
            let step = tls.s.process(None, Send::Nothing);
            // Whatever rustls queued goes out, an alert for a failed handshake included.
            std::future::poll_fn(|cx| tls.poll_send(cx)).await?;
            step?;
            if !tls.s.handshaking() {
                return Ok(tls);
            }
            if tls.s.peer_closed {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if read_some(&mut tls.tcp, &mut tls.s.incoming).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// [`Session::process`], and when it fails, the alert rustls queued is sent (best effort)
    /// before the error is returned.
    fn run(&mut self, dst: Option<&mut ReadBuf<'_>>, send: Send<'_>) -> io::Result<Step> {
        let step = self.s.process(dst, send);
        if step.is_err() {
            let _ = self.push();
        }
        step
    }

    /// The socket.
    pub(crate) fn tcp(&self) -> &ClientStream {
        &self.tcp
    }

    /// What the handshake settled, for routes and logs. Read once, after [`Self::accept`]:
    /// a connection that parked keeps it elsewhere (`server/park.rs`) and answers the default.
    pub(crate) fn info(&self) -> crate::tls::TlsInfo {
        match &self.s.conn {
            Engine::Rustls(c) => crate::tls::TlsInfo::of(c, self.sni()),
            Engine::Own(_) => crate::tls::TlsInfo::default(),
        }
    }

    /// The protocol ALPN settled (before the first park, as [`Self::info`]).
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        match &self.s.conn {
            Engine::Rustls(c) => c.alpn_protocol(),
            Engine::Own(_) => None,
        }
    }

    /// The server name the client asked for (lowercase, no trailing dot).
    pub(crate) fn sni(&self) -> Option<&str> {
        self.s.sni.as_deref()
    }

    /// Records wait for room in the socket.
    pub(crate) fn wants_write(&self) -> bool {
        self.s.out_left() > 0
    }

    /// Decrypts what was read already: `true` when plaintext waits to be read or the client
    /// closed (a read would not wait).
    pub(crate) fn readable_now(&mut self) -> io::Result<bool> {
        if self.s.plain_left() == 0 && !self.s.peer_closed && !self.s.incoming.is_empty() {
            self.run(None, Send::Nothing)?;
        }
        Ok(self.s.plain_left() > 0 || self.s.peer_closed)
    }

    /// Sends queued records without waiting: `Ok(true)` once none are left.
    pub(crate) fn push(&mut self) -> io::Result<bool> {
        while self.s.out_left() > 0 {
            match self.tcp.try_write(&self.s.out[self.s.sent..self.s.filled]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.s.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.s.sent = 0;
        self.s.filled = 0;
        if self.s.out.len() > KEEP_OUT {
            self.s.out = Vec::new();
        }
        Ok(true)
    }

    /// Encrypts what fits of `bufs` (up to [`MAX_WRITE`], as one run of records) and sends what
    /// the socket takes now; `WouldBlock` when [`HIGH_WATER`] bytes of records already wait.
    pub(crate) fn write_now(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if self.s.out_left() >= HIGH_WATER && !self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.encrypt(bufs)?;
        self.push()?;
        Ok(n)
    }

    fn encrypt(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        let (Some(first), second) = (nonempty.next(), nonempty.next()) else {
            return Ok(0);
        };
        if second.is_none() || first.len() >= MAX_WRITE {
            let n = first.len().min(MAX_WRITE);
            self.encrypt_one(&first[..n])?;
            return Ok(n);
        }
        // Several slices (an HTTP/2 frame's header and payload, a response head and body):
        // one run of records, as rustls' buffered writer makes of them.
        let mut joined = std::mem::take(&mut self.s.scratch);
        joined.clear();
        for b in bufs {
            let n = b.len().min(MAX_WRITE - joined.len());
            joined.extend_from_slice(&b[..n]);
            if joined.len() == MAX_WRITE {
                break;
            }
        }
        let done = self.encrypt_one(&joined);
        let n = joined.len();
        self.s.scratch = joined;
        done.map(|()| n)
    }

    fn encrypt_one(&mut self, data: &[u8]) -> io::Result<()> {
        match self.run(None, Send::Data(data))? {
            Step::Writable => Ok(()),
            Step::Blocked | Step::Closed => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Queues `close_notify` (once; errors mean the connection is over anyway).
    pub(crate) fn queue_close_notify(&mut self) {
        if !self.s.failed && !self.s.close_queued && !self.s.handshaking() {
            self.s.close_queued = true;
            let _ = self.run(None, Send::CloseNotify);
        }
    }

    /// Sends every queued record, waiting for the socket as needed.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.push()? {
                return Poll::Ready(Ok(()));
            }
            ready!(self.tcp.poll_write_ready(cx))?;
        }
    }

    /// Reads more ciphertext: `Ok(0)` at the socket's end. Through tokio's `AsyncRead`, which
    /// takes a short read for a drained socket and clears its readiness: the idle wait that
    /// follows a request then really waits (and may park) instead of finding the socket
    /// "ready" and waiting in a read.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        reserve_read(&mut self.s.incoming)?;
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.tcp),
            cx,
            &mut self.s.incoming
        ))?;
        if n == 0 {
            self.s.eof = true;
        }
        Poll::Ready(Ok(n))
    }

    /// Nothing is in flight either way: no partial record read, no plaintext unread, no record
    /// unsent (rustls holding no `KeyUpdate` back, `read_since_write`), and the connection is
    /// sound.
    pub(crate) fn is_quiet(&self) -> bool {
        self.settled() && !self.s.read_since_write
    }

    /// Nothing half read, unread or unsent, and the connection sound.
    fn settled(&self) -> bool {
        let s = &self.s;
        s.incoming.is_empty() && s.plain_left() == 0 && s.out_left() == 0 && !s.failed && !s.eof
    }

    /// Quiet but for a read since the last write ([`Self::is_quiet`]): one write (of anything)
    /// and it is.
    pub(crate) fn quiet_but_for_a_write(&self) -> bool {
        self.settled() && !self.s.peer_closed && !self.s.close_queued
    }

    /// The socket and the record keys, when nothing is in flight either way
    /// ([`Self::is_quiet`]); `None` (the connection dropped, hence closed) otherwise, or when
    /// rustls cannot hand its keys over. The first park turns rustls' session into
    /// [`Records`]; the cipher contexts are dropped.
    pub(crate) fn into_idle(self) -> Option<(ClientStream, IdleTls)> {
        if !self.is_quiet() || self.s.peer_closed || self.s.close_queued {
            return None;
        }
        let ServerTls { tcp, s } = self;
        let mut records = match s.conn {
            Engine::Own(r) => r,
            Engine::Rustls(conn) => {
                // What `dangerous_into_kernel_connection` refuses, checked first: it consumes
                // the session either way.
                if conn.is_handshaking() || conn.wants_write() {
                    return None;
                }
                let (secrets, kernel) = conn.dangerous_into_kernel_connection().ok()?;
                Records::boxed(secrets, kernel)?
            }
        };
        records.sleep();
        Some((
            tcp,
            IdleTls {
                records,
                sni: s.sni,
            },
        ))
    }

    /// The `close_notify` a parked connection sends when weir closes it (an idle timeout,
    /// shutdown): one alert record, sealed under its current key.
    pub(crate) fn close_notify(idle: &mut IdleTls) -> Option<Vec<u8>> {
        let mut out = vec![0u8; idle.records.sealed_len(2)];
        let n = idle
            .records
            .seal_alert(1, crate::tls::records::CLOSE_NOTIFY, &mut out)
            .ok()?;
        idle.records.sleep();
        out.truncate(n);
        Some(out)
    }

    /// A parked connection's socket and record keys together again.
    pub(crate) fn from_idle(tcp: ClientStream, idle: IdleTls) -> ServerTls {
        ServerTls {
            tcp,
            s: Session::new(Engine::Own(idle.records), Vec::new(), idle.sni),
        }
    }
}

/// Makes room to read at the end of `incoming` (no zero-fill: `try_read_buf` writes into spare
/// capacity); an error when a record or handshake message would outgrow [`MAX_INCOMING`].
fn reserve_read(incoming: &mut Vec<u8>) -> io::Result<()> {
    let spare = incoming.capacity() - incoming.len();
    if spare >= 2048 {
        return Ok(());
    }
    if incoming.len() >= MAX_INCOMING {
        return Err(tls_error("TLS message buffer full"));
    }
    let want = (incoming.len().max(8192)).min(MAX_INCOMING - incoming.len());
    incoming.reserve(want.max(2048));
    Ok(())
}

/// Reads once from `tcp` into `incoming`, waiting for bytes: `Ok(0)` at the end. Through
/// `AsyncRead`, whose short read clears readiness: the next read waits instead of trying a
/// `recv` that finds nothing (one system call per handshake, `bench/ab_weir.sh`).
async fn read_some(tcp: &mut ClientStream, incoming: &mut Vec<u8>) -> io::Result<usize> {
    reserve_read(incoming)?;
    std::future::poll_fn(|cx| {
        tokio_util::io::poll_read_buf(Pin::new(&mut *tcp), cx, &mut *incoming)
    })
    .await
}

/// A server name rustls accepts as one (not an IP address, valid DNS syntax).
fn is_dns_name(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_err() && rustls::pki_types::DnsName::try_from(name).is_ok()
}

impl AsyncRead for ServerTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.s.plain_left() > 0 {
                this.s.take_plain(buf);
                return Poll::Ready(Ok(()));
            }
            if this.s.peer_closed {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            if !this.s.incoming.is_empty() {
                this.run(Some(buf), Send::Nothing)?;
                if buf.filled().len() > before {
                    return Poll::Ready(Ok(()));
                }
                if this.s.plain_left() > 0 || this.s.peer_closed {
                    continue;
                }
            }
            if this.s.eof {
                // Most clients close without `close_notify`; at a record boundary that is a
                // clean end (as for nginx), inside a record it is not.
                return Poll::Ready(if this.s.incoming.is_empty() {
                    Ok(())
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                });
            }
            // Records rustls queued while reading (a key update, an alert refusing a TLS 1.2
            // renegotiation) leave before the read waits: the client may be waiting for them.
            this.push()?;
            if ready!(this.poll_fill(cx))? == 0 {
                continue;
            }
        }
    }
}

impl AsyncWrite for ServerTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        while this.s.out_left() >= HIGH_WATER {
            if this.push()? {
                break;
            }
            ready!(this.tcp.poll_write_ready(cx))?;
        }
        let n = this.encrypt(bufs)?;
        this.push()?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_send(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.queue_close_notify();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}
