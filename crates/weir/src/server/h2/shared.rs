//! What every stream of an HTTP/2 connection shares with the connection ([`ConnShared`]): the
//! client, the TLS session, the worker and the listener. A leaf: `slots.rs`, which parked
//! connections keep, imports nothing of the worker.

use std::net::SocketAddr;
use std::rc::Rc;

use crate::server::state::WorkerState;
use crate::tls::TlsInfo;

/// What every stream of a connection shares.
#[derive(Debug)]
pub(crate) struct ConnShared {
    pub peer: SocketAddr,
    pub tls: Option<Rc<TlsInfo>>,
    pub state: Rc<WorkerState>,
    pub listener_id: crate::runtime::ListenerId,
}
