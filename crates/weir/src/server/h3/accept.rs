//! A QUIC endpoint's accept loop. Each client's first packet is an `Incoming` that costs
//! nothing yet; it is refused, dropped, sent a Retry, or accepted here, before any TLS work:
//!
//! - over the worker's connection budget (`limits.max_connections`, shared with TCP):
//!   refused (CONNECTION_REFUSED), counted as `refused{reason="max_connections"}`;
//! - refused by the shield (connections per client, connection rate, blocked clients) or
//!   past the client's handshake rate (`shield.tls_rate`): dropped without an answer, as a
//!   TCP connection is reset;
//! - past `http3.retry_above` new handshakes per second on this worker: answered with a
//!   Retry unless the client's address was validated by one already, so that a flood from
//!   spoofed addresses costs a stateless packet each and no handshake;
//! - otherwise accepted: a connection task (`conn.rs`) with a slot in the worker's table,
//!   counted like a TCP connection.
//!
//! A reload that changes the listener's certificates or limits swaps the endpoint's server
//! config: new connections take it, open ones keep theirs.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::QuicEvent;
use crate::runtime::{ListenerId, QuicListen};
use crate::server::state::WorkerState;

/// New handshakes counted per second on one worker.
#[derive(Debug)]
struct Rate {
    since: Instant,
    count: u32,
}

impl Rate {
    /// Counts one; the count in the current second.
    fn tick(&mut self, now: Instant) -> u32 {
        if now.duration_since(self.since) >= Duration::from_secs(1) {
            self.since = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count
    }
}

pub(super) async fn accept_loop(
    state: Rc<WorkerState>,
    endpoint: quinn::Endpoint,
    id: ListenerId,
    mut quic: Arc<QuicListen>,
) {
    // However this loop ends (shutdown, or aborted when a reload removes the listener or its
    // `quic`), the endpoint takes no new connection; open ones drain, and the socket closes
    // once they are gone.
    let _closing = RefuseNew(endpoint.clone());
    let mut shutdown = state.shutdown.clone();
    let mut rt = state.cached();
    let mut rate = Rate {
        since: Instant::now(),
        count: 0,
    };
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        if rt.generation != state.generation() {
            state.refresh(&mut rt);
        }
        let Some(index) = rt.cfg.listener_index(&id) else {
            // Removed by a reload an instant ago: this loop is about to be stopped.
            state.metrics.quic(QuicEvent::Refused);
            incoming.refuse();
            continue;
        };
        let listener = &rt.cfg.listeners[index];
        let Some(now_quic) = &listener.quic else {
            state.metrics.quic(QuicEvent::Refused);
            incoming.refuse();
            continue;
        };
        if !Arc::ptr_eq(now_quic, &quic) {
            quic = now_quic.clone();
            endpoint.set_server_config(Some(quic.server.clone()));
        }
        let peer = incoming.remote_address();
        if state.shutting_down.get() {
            state.metrics.quic(QuicEvent::Refused);
            incoming.refuse();
            continue;
        }
        if state.over_budget(false) {
            state.metrics.quic(QuicEvent::Refused);
            incoming.refuse();
            crate::server::state::refused(&state, crate::metrics::Refusal::MaxConnections);
            continue;
        }
        let retry_above = rt.cfg.http3.retry_above;
        let fast = rate.tick(Instant::now()) > retry_above || retry_above == 0;
        if fast && !incoming.remote_address_validated() && incoming.may_retry() {
            // Stateless: the client comes back with a token proving its address.
            state.metrics.quic(QuicEvent::Retry);
            let _ = incoming.retry();
            continue;
        }
        let shield_key = match &rt.cfg.shield {
            Some(shield) => match shield.connect(peer.ip()) {
                Ok(key) => {
                    if shield.handshake(peer.ip()).is_err() {
                        if key != 0 {
                            shield.state.disconnect(key);
                        }
                        state.metrics.quic(QuicEvent::Shield);
                        incoming.ignore();
                        continue;
                    }
                    key
                }
                Err(_) => {
                    state.metrics.quic(QuicEvent::Shield);
                    incoming.ignore();
                    continue;
                }
            },
            None => 0,
        };
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "QUIC connection not accepted");
                if let Some(shield) = rt.cfg.shield.as_ref().filter(|_| shield_key != 0) {
                    shield.state.disconnect(shield_key);
                }
                continue;
            }
        };
        state.metrics.quic(QuicEvent::Accepted);
        let (key, guard) = state.open_slot(shield_key, false);
        let task = tokio::task::spawn_local(super::conn::serve(
            connecting,
            peer,
            state.clone(),
            rt.clone(),
            id,
            guard,
        ));
        if let Some(slot) = state.conns.borrow_mut().get_mut(key) {
            slot.abort = Some(task.abort_handle());
        }
    }
}

/// Refuses new connections on the endpoint when dropped.
struct RefuseNew(quinn::Endpoint);

impl Drop for RefuseNew {
    fn drop(&mut self) {
        tracing::debug!(
            open = self.0.open_connections(),
            "QUIC endpoint takes no new connections"
        );
        self.0.set_server_config(None);
    }
}
