//! HTTP/3 to clients (`quic: true` on a TLS listener). Each worker runs a QUIC endpoint on its
//! own UDP socket at the listener's address (SO_REUSEPORT, as the TCP sockets); QUIC is quinn's
//! and the HTTP/3 framing and QPACK the `h3` crate's (the choice: `tls/quic.rs`). Each request
//! stream becomes a [`stream::H3Stream`], a `pipeline::Downstream` like an HTTP/1.1 connection
//! or an HTTP/2 stream, so routing, filters, the cache, the proxy and the actions run over it
//! unchanged.
//!
//! - [`accept`]: the endpoint's accept loop: the worker's connection budget, the shield's
//!   connection and handshake limits, Retry when handshakes come fast, 0-RTT when allowed.
//! - [`conn`]: one connection: its request streams polled inside its task (as HTTP/2's),
//!   GOAWAY at shutdown or reload, the reset-flood limit.
//! - [`stream`]: one request stream.
//! - [`guard`]: between quinn and `h3`, frame lengths checked before `h3` buffers a frame.
//!
//! Limits (`http3:`): concurrent request streams and receive windows are QUIC transport
//! parameters (a client cannot open a stream past the limit: the flood HTTP/2 must count does
//! not exist here); the header section size is HTTP/3's SETTINGS_MAX_FIELD_SECTION_SIZE (431
//! beyond); idle connections close at `timeouts.keepalive` (QUIC's idle timeout).

mod accept;
mod conn;
mod convert;
mod guard;
mod shared;
mod stream;
mod uni;

use std::rc::Rc;

use tokio::task::AbortHandle;

use super::state::WorkerState;
use crate::runtime::ListenerId;

/// Starts the QUIC endpoint of listener `id` on `socket` and its accept loop; `None` when the
/// listener has no QUIC (any more) or the endpoint cannot start (logged).
pub(crate) fn start(
    state: &Rc<WorkerState>,
    socket: std::net::UdpSocket,
    id: ListenerId,
) -> Option<AbortHandle> {
    // The config published now: a reload that adds the listener (or its `quic`) sends the
    // socket after publishing the config that has it.
    let mut rt = state.cached();
    state.refresh(&mut rt);
    let index = rt.cfg.listener_index(&id)?;
    let quic = rt.cfg.listeners[index].quic.clone()?;
    let endpoint = match quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(quic.server.clone()),
        socket,
        std::sync::Arc::new(quinn::TokioRuntime),
    ) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(address = %id.address, error = %e, "cannot start the QUIC endpoint");
            return None;
        }
    };
    let task = tokio::task::spawn_local(accept::accept_loop(state.clone(), endpoint, id, quic));
    Some(task.abort_handle())
}
