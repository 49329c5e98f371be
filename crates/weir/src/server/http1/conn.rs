//! The HTTP/1.1 connection's state: what a [`Conn`] holds between requests and during one,
//! how it is made (new or resumed from its parked slot), and what it hands back when dropped
//! (its socket, to the slot, while it waits idle). The serve loop is `mod.rs`, the
//! `Downstream` side `downstream.rs`, the writes `output.rs`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;
use weir_http::{BodyDecoder, BodyEncoding, Version};

use crate::error::{Error, ErrorKind};
use crate::runtime::WorkerRuntime;
use crate::server::client_io::ClientIo;
use crate::server::state::WorkerState;

/// Output is written once it grows past this, even mid-batch.
pub(super) const FLUSH_AT: usize = 64 * 1024;
/// Bodies at least this long are queued by reference (see [`Conn::put_body`]); shorter ones are
/// copied, which is cheaper than another iovec.
pub(super) const BY_REFERENCE: usize = 16 * 1024;
/// Slices per vectored write.
pub(super) const IOV_MAX: usize = 32;
/// Lingering close: how long and how much unread input is drained after an error response.
pub(super) const LINGER_TIME: Duration = Duration::from_secs(2);
pub(super) const LINGER_BYTES: usize = 1 << 20;

/// A client connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(super) io: ClientIo,
    pub(super) peer: SocketAddr,
    pub(super) buf: BytesMut,
    pub(super) out: BytesMut,
    /// Large bodies queued by reference ahead of `out` (cache hits): written together with `out`
    /// in one vectored write instead of being copied into it.
    pub(super) segs: VecDeque<Bytes>,
    pub(super) state: Rc<WorkerState>,
    /// The config the current request runs on (refreshed as each request starts).
    pub(super) rt: Rc<WorkerRuntime>,
    /// Index of the listener in the config.
    pub(super) listener: usize,
    pub(super) served: u64,
    /// The request whose body is being read, if it has one (boxed: rare, and it would otherwise
    /// sit in every idle connection's future).
    pub(super) body: Option<Box<RequestBody>>,
    /// The current request's protocol version.
    pub(super) version: Version,
    /// How the current response's body is framed on the wire.
    pub(super) encoding: BodyEncoding,
    /// The connection was handed to a tunnel (WebSocket) that has ended: nothing more to write.
    pub(super) upgraded: bool,
    /// Slot in the worker's connection slab.
    pub(super) key: usize,
    /// A reload removed this connection's listener: it closes after the current request.
    pub(super) orphaned: bool,
    /// In its idle wait, where the sweeper may park it (`server/park.rs`): dropping it there
    /// hands its socket to its slot.
    pub(super) parkable: bool,
    /// The keep-alive deadline (the coarse clock's ms) it was parked with, kept until a request
    /// comes (0: none): a wake that brings none does not start the keep-alive over (issue 52's
    /// audit: a lone TLS KeyUpdate did).
    pub(super) idle_deadline: u64,
    /// The last request's route's keep-alive wait in ms (`limits.keepalive_timeout`; 0: the
    /// listener's `timeouts.keepalive`).
    pub(super) keepalive_ms: u32,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.parkable {
            let io = std::mem::replace(&mut self.io, ClientIo::Gone);
            let on = (&self.rt, self.listener);
            self.state
                .park_conn(self.key, io, self.peer, on, self.served);
        } else if let ClientIo::Tls(t) = &mut self.io {
            // A TLS connection ends with `close_notify` (RFC 8446 §6.1) whoever ends it: an
            // idle timeout, a stalled client, the client's own `close_notify` (issue 52's
            // audit: they ended with a bare FIN). Sent if the socket takes it now; queued once.
            t.stream.queue_close_notify();
            let _ = t.stream.push();
        }
    }
}

impl Conn {
    pub(crate) fn new(
        io: ClientIo,
        peer: SocketAddr,
        key: usize,
        state: Rc<WorkerState>,
        rt: Rc<WorkerRuntime>,
        listener: usize,
    ) -> Conn {
        Conn {
            io,
            peer,
            buf: BytesMut::new(),
            out: BytesMut::new(),
            segs: VecDeque::new(),
            rt,
            state,
            listener,
            served: 0,
            body: None,
            version: Version::Http11,
            encoding: BodyEncoding::Plain,
            upgraded: false,
            key,
            orphaned: false,
            parkable: false,
            idle_deadline: 0,
            keepalive_ms: 0,
        }
    }

    /// Keeps the idle deadline `until` (ms; 0: none) it had when parked.
    pub(crate) fn keeping_deadline(mut self, until: u64) -> Conn {
        self.idle_deadline = until;
        self
    }

    /// A parked connection served again (`server/park.rs`), `served` requests into its life.
    pub(crate) fn resume(
        io: ClientIo,
        peer: SocketAddr,
        key: usize,
        state: Rc<WorkerState>,
        rt: Rc<WorkerRuntime>,
        listener: usize,
        served: u64,
    ) -> Conn {
        let mut conn = Conn::new(io, peer, key, state, rt, listener);
        conn.served = served;
        conn
    }
}

/// The request body being read: its decoder, and whether `100 Continue` was sent (or not needed).
#[derive(Debug)]
pub(super) struct RequestBody {
    pub(super) decoder: BodyDecoder,
    pub(super) continued: bool,
    /// The trailer section of a chunked body, once read.
    pub(super) trailers: Vec<weir_http::Header>,
    /// Most bytes it may have (`limits.max_body_bytes`, or a route's `shape` below it).
    pub(super) limit: u64,
    /// Reads it took so far (the shield's `reads.body`).
    pub(super) reads: u32,
    /// The route's wait between body bytes, over `timeouts.body`.
    pub(super) timeout: Option<std::time::Duration>,
}

/// Where the reading of one request head stands.
pub(super) struct HeadWait {
    /// Set at the head's first bytes (`timeouts.header`).
    pub(super) deadline: Option<Instant>,
    /// The read that brought the head's first bytes, and each one after it.
    pub(super) reads: u32,
}

impl Default for HeadWait {
    fn default() -> HeadWait {
        HeadWait {
            deadline: None,
            reads: 1,
        }
    }
}

/// The shield's cap on the reads a head or body may take (Tempesta's chunk counts): a client
/// dribbling its request a few bytes at a time gets 408 (`kind`), and is blocked when the
/// shield's action is `block`.
#[cold]
pub(super) fn too_many_reads(
    shield: &crate::shield::Shield,
    peer: SocketAddr,
    reads: u32,
    max: u32,
    kind: ErrorKind,
) -> Result<(), Error> {
    if max == 0 || reads <= max {
        return Ok(());
    }
    let limit = if kind == ErrorKind::HeaderTimeout {
        crate::shield::Limit::HeadReads
    } else {
        crate::shield::Limit::BodyReads
    };
    shield.violation(peer.ip(), limit, crate::shield::Action::Reply);
    Err(Error::with(kind, format_args!("more than {max} reads")))
}
