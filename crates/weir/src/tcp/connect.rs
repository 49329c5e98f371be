//! A server for a TCP connection: picked by the upstream's balancing policy among the servers
//! that are up, connected within the upstream's `connect` timeout, tried again on the next server
//! after a failure (`retries.attempts`), each failure counted against the server's passive
//! health as HTTP requests count them. The connection holds a place under the upstream's
//! `limits.max_connections` for its whole life. With `send_proxy`, the PROXY header goes first.

use std::net::SocketAddr;

use crate::error::{Error, ErrorKind};
use crate::proxy::exchange::record_failure;
use crate::proxy::limits::{Cap, Slot};
use crate::proxy::per_worker::WorkerUpstream;
use crate::proxy::tls::Socket;
use crate::proxy::upstream::Upstream;

use super::{ProxyVersion, TcpConfig};

/// A connected upstream server.
#[derive(Debug)]
pub struct Connected {
    pub server: usize,
    pub socket: Socket,
    /// Its place under `limits.max_connections`, given back when dropped.
    pub slot: Slot,
}

/// Connects a client at `client`, who reached weir at `local`, to a server of `up`.
pub async fn connect(
    cfg: &TcpConfig,
    up: &Upstream,
    per_worker: &WorkerUpstream,
    client: SocketAddr,
    local: SocketAddr,
) -> Result<Connected, Error> {
    let slot = up
        .limits
        .take(Cap::Connections)
        .map_err(|cap| Error::with(ErrorKind::Overflow, cap.as_str()))?;
    let mut tried: Vec<usize> = Vec::new();
    let mut last = Error::new(ErrorKind::NoServer);
    for attempt in 0..=up.retry.attempts {
        let Some(server) = per_worker.pick(
            up,
            client.ip(),
            &cfg.pick_head,
            &tried,
            crate::clock::Mono::now(),
        ) else {
            break;
        };
        if attempt > 0 {
            let wait = up.retry.backoff(attempt);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        tried.push(server);
        let s = &up.servers[server];
        // The PROXY header goes first, in clear, before a TLS server's handshake.
        let header = match cfg.send_proxy {
            Some(v) => crate::shield::proxy_protocol::encode(v == ProxyVersion::V2, client, local),
            None => Vec::new(),
        };
        let connecting =
            crate::proxy::socket::connect_with(s, up.tls.as_ref(), up.connect_timeout, &header);
        match connecting.await {
            Ok(socket) => {
                // A success ends a run of failures (outlier detection counts them in a row).
                up.record_outcome(
                    server,
                    crate::proxy::outlier::Outcome::Success,
                    crate::proxy::upstream::now_ms(),
                );
                return Ok(Connected {
                    server,
                    socket,
                    slot,
                });
            }
            Err(e) => {
                let e = if e.kind() == std::io::ErrorKind::TimedOut {
                    Error::new(ErrorKind::ConnectTimeout)
                } else {
                    Error::with(ErrorKind::Connect, e)
                };
                record_failure(up, server, &e);
                last = e;
            }
        }
    }
    Err(last)
}
