//! The seam between the request pipeline and a client protocol. An HTTP/1.1 connection, plain
//! or TLS (`server/http1/`), and an HTTP/2 stream (`server/h2/stream.rs`) implement it, and every
//! producer (proxy, cache, actions) works over either unchanged.
//!
//! Generic, not `dyn`: the pipeline is monomorphised per protocol, so a cache hit over HTTP/1.1
//! costs what it cost when it wrote into the connection's buffer itself (the methods inline).
//!
//! The protocol owns the encoding: producers hand it a [`Reply`] and body bytes; it decides the
//! status line, the framing (length, chunks, or the close) and the `Connection` field.

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use weir_http::{Persistence, Reply, RequestHead, Version};

use crate::error::Error;

/// What an upgraded exchange relays to: the upstream connection, as any byte stream (so the
/// client side, `server/`, does not name the proxy's socket type; issue 54 §2).
pub(crate) trait Tunnel: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> Tunnel for T {}

/// A client a response is written to, and the request body is read from.
pub(crate) trait Downstream {
    /// The client's address.
    fn peer(&self) -> SocketAddr;

    /// The protocol version the client speaks (HTTP/1.0 gets no chunks and no 1xx).
    fn version(&self) -> Version;

    /// The protocol as logs name it (`HTTP/1.1`, `HTTP/2.0`).
    fn protocol(&self) -> &'static str {
        match self.version() {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }

    /// The protocol as `Via` names it (`1.0`, `1.1`, `2`): filters see it in `Client`.
    fn via_version(&self) -> &'static str {
        match self.version() {
            Version::Http10 => "1.0",
            Version::Http11 => "1.1",
        }
    }

    /// Whether the connection may serve another request after this one, given the request:
    /// the client asked for it, the per-connection limit allows it, the server is not shutting
    /// down.
    fn persistence(&self, head: &RequestHead) -> Persistence;

    /// Whether the server is shutting down or draining (a health route then answers 503, so
    /// that a load balancer stops sending here).
    fn shutting_down(&self) -> bool;

    /// What the TLS handshake settled (SNI, protocol, cipher, client certificate); `None` over
    /// plain TCP.
    fn tls(&self) -> Option<&crate::tls::TlsInfo>;

    /// The next piece of the request body; `None` once it is complete. The first call sends
    /// `100 Continue` when the client waits for it.
    fn body_chunk(&mut self) -> impl Future<Output = Result<Option<Bytes>, Error>>;

    /// Whether the request body may be read while the response is relayed (`duplex.rs`): the
    /// protocol carries both at once and [`Downstream::body_chunk`] loses nothing when its
    /// future is dropped before it is ready. HTTP/2 streams.
    fn full_duplex(&self) -> bool {
        false
    }

    /// Holds this request's body to `max` bytes (413 beyond), below `limits.max_body_bytes`.
    fn cap_body(&mut self, _max: u64) {}

    /// Waits at most `wait` between this request's body bytes (its route's
    /// `limits.body_timeout`), instead of `timeouts.body`.
    fn body_timeout(&mut self, _wait: std::time::Duration) {}

    /// Waits at most `wait` for the connection's next request once this one is answered (its
    /// route's `limits.keepalive_timeout`), instead of `timeouts.keepalive`. HTTP/1.1 only: a
    /// multiplexed connection's idle wait is not one request's.
    fn keepalive(&mut self, _wait: std::time::Duration) {}

    /// The request's trailer fields, once its body has been read to the end (a chunked
    /// HTTP/1.1 body's trailer section, or an HTTP/2 stream's trailing HEADERS); empty when it
    /// had none. Taken: a second call returns nothing.
    fn request_trailers(&mut self) -> Vec<weir_http::Header>;

    /// Sends an interim (1xx) response at once.
    fn send_interim(&mut self, reply: &Reply<'_>) -> impl Future<Output = Result<(), Error>>;

    /// Queues the response head. `persistence` may be turned into `Close` by the protocol (an
    /// HTTP/1.0 client and a body of unknown length); the returned value is what holds.
    fn send_head(&mut self, reply: &Reply<'_>, persistence: Persistence) -> Persistence;

    /// Queues body bytes (framed as the head said: as is, or as a chunk).
    fn send_data(&mut self, data: &Bytes);

    /// Queues trailer fields, before [`Downstream::end_body`] (gRPC's `grpc-status`). HTTP/1.1
    /// sends them after the last chunk when the body is chunked, and drops them otherwise.
    fn send_trailers(&mut self, fields: &[weir_http::Header]);

    /// Ends the body (the last chunk, when chunked).
    fn end_body(&mut self);

    /// Whether a body can be sent straight from a file ([`Downstream::send_file`]): plain-TCP
    /// HTTP/1.1.
    fn sends_files(&self) -> bool {
        false
    }

    /// Sends what is queued (the head), then `len` bytes of `file` from `offset` as the body
    /// (`sendfile`). Only when [`Downstream::sends_files`], after a head with a known length.
    fn send_file(
        &mut self,
        _file: &std::fs::File,
        _offset: u64,
        _len: u64,
    ) -> impl Future<Output = Result<(), Error>> {
        async {
            Err(Error::with(
                crate::error::ErrorKind::ClientIo,
                "this connection cannot send files",
            ))
        }
    }

    /// How many body bytes (up to `want`) the client can take at once, without waiting: `want`
    /// for HTTP/1.1 (the socket's buffer absorbs them), an HTTP/2 stream's send window. A
    /// producer that reads its body as it goes (a file) reads no more than this.
    fn room_now(&mut self, want: usize) -> usize {
        want
    }

    /// Waits (within `timeouts.write`) until the client can take some body bytes; how many,
    /// up to `want`.
    fn room(&mut self, want: usize) -> impl Future<Output = Result<usize, Error>> {
        std::future::ready(Ok(want))
    }

    /// Whether enough is queued that it should be written before reading more upstream.
    fn should_flush(&self) -> bool;

    /// Writes what is queued, waiting (bounded by `timeouts.write` per stall) for a slow client.
    fn flush(&mut self) -> impl Future<Output = Result<(), Error>>;

    /// After a `101 Switching Protocols` head was queued: relay bytes both ways between the
    /// client and `upstream` until either side closes. `early` is what the upstream sent after
    /// its head. Protocols without upgrades (HTTP/2) refuse with an error.
    fn tunnel(
        &mut self,
        upstream: &mut dyn Tunnel,
        early: &[u8],
    ) -> impl Future<Output = Result<(), Error>>;
}
