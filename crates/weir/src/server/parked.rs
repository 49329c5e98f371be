//! What a parked connection keeps in its slot (data only; `state.rs` hands connections over,
//! `park.rs` serves them again and says why parking exists).

use std::net::SocketAddr;
use std::rc::Rc;

use crate::client_socket::RawClient;
use crate::runtime::WorkerRuntime;
use crate::tls::stream::IdleTls;
use crate::tls::TlsInfo;

/// What a parked HTTP/2 connection keeps besides its socket (and TLS keys): the connection's
/// state, its buffers given back (`server/h2/park.rs`).
pub(crate) type ParkedH2 = crate::server::h2::slots::Shared;

/// Where a connection's slot stands with parking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// Busy, or idle in a way that cannot be parked (h2, TLS with a record in flight).
    No,
    /// An HTTP/1.1 connection (plain, or TLS with nothing in flight) waiting for its next
    /// request.
    Idle,
    /// Was idle at the last sweep too.
    Seen,
    /// The sweeper aborted the task to park it.
    Parking,
    /// Parked: the socket is in the slot.
    Parked,
}

/// A parked connection: everything needed to serve it again, kept in its slot (inline: a
/// small allocation per parked connection would land in the holes their freed task cells
/// left and keep those pages resident).
#[derive(Debug)]
pub(crate) struct Parked {
    pub(super) stream: RawClient,
    /// The config it last ran on and its listener's index there, as a connection waiting in
    /// its task keeps them: its next request moves to the config published then, or, when a
    /// reload removed its listener, is answered on these routes and closes.
    pub(super) rt: Rc<WorkerRuntime>,
    pub(super) listener: u32,
    pub(super) served: u64,
    pub(super) peer: SocketAddr,
    /// A TLS connection's session (boxed: most parked connections are plain).
    pub(super) tls: Option<Box<ParkedTls>>,
    /// An HTTP/2 connection's state (`server/h2/park.rs`).
    pub(super) h2: Option<Box<ParkedH2>>,
}

/// What a parked TLS connection keeps besides its socket.
#[derive(Debug)]
pub(crate) struct ParkedTls {
    pub(super) session: IdleTls,
    pub(super) info: TlsInfo,
}
