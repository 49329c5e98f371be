//! A connection on a `proxy_protocol` listener: the load balancer's PROXY header (v1 or v2)
//! first, then HTTP or TLS as on any listener, with the client the header names as the peer
//! (logs, filters, `X-Forwarded-For`, the shield's accounting). Only trusted sources get here
//! (`worker.rs` closes the others in the accept loop).
//!
//! The header is peeked at (`MSG_PEEK`) and then exactly its bytes are read, so what follows it
//! is left in the socket for the HTTP parser or rustls. A header split across segments is
//! peeked at again after a short sleep (1 ms doubling to 64 ms), bounded by `timeouts.header`;
//! load balancers send it in the connection's first segment, so the sleep is the rare path.

use std::io::Read;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use super::client_io::ClientIo;
use super::http1::Conn;
use super::state::WorkerState;
use crate::client_socket::RawClient;
use crate::metrics::CloseReason;
use crate::runtime::WorkerRuntime;
use crate::shield::proxy_protocol::{self, Parsed};
use crate::shield::{Action, Limit};

/// Serves a connection from a trusted load balancer at `peer`.
pub(crate) async fn serve(
    stream: RawClient,
    peer: SocketAddr,
    key: usize,
    state: Rc<WorkerState>,
    rt: Rc<WorkerRuntime>,
    listener: usize,
) -> CloseReason {
    let client = match read_header(&stream, rt.cfg.timeouts.header).await {
        Ok(client) => client.unwrap_or(peer),
        Err(why) => {
            state.shield.counted(Limit::ProxyProtocol, Action::Close);
            static BAD: crate::logs::Limited = crate::logs::Limited::new();
            if let Some(suppressed) = BAD.admit() {
                tracing::warn!(%peer, reason = why, suppressed, "PROXY protocol header refused");
            }
            return CloseReason::BadRequest;
        }
    };
    if let Some(shield) = &rt.cfg.shield {
        match shield.connect(client.ip()) {
            Ok(k) => {
                if let Some(slot) = state.conns.borrow().get(key) {
                    slot.shield.set(k);
                }
            }
            Err(_) => return CloseReason::ClientError,
        }
    }
    match rt.cfg.listeners[listener].tls.clone() {
        Some(tls) => super::tls::serve(stream, client, key, state, rt, listener, tls).await,
        None if rt.cfg.listeners[listener].tcp.is_some() => {
            Box::pin(crate::pipeline::tcp::serve_plain(
                stream, client, rt, listener,
            ))
            .await
        }
        None => {
            let io = ClientIo::Fresh(stream);
            let mut conn = Box::new(Conn::new(io, client, key, state, rt, listener));
            conn.serve().await
        }
    }
}

/// Reads the PROXY header: the client it names (`None`: a LOCAL or UNKNOWN header).
async fn read_header(
    stream: &RawClient,
    within: Duration,
) -> Result<Option<SocketAddr>, &'static str> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; proxy_protocol::MAX];
    let mut pause = Duration::from_millis(1);
    loop {
        match stream.peek(&mut buf) {
            Ok(0) => return Err("closed before the header"),
            Ok(n) => match proxy_protocol::parse(&buf[..n])? {
                Parsed::Done { len, client } => {
                    // Peeked whole: this read takes exactly the header.
                    let mut s = stream;
                    return match s.read(&mut buf[..len]) {
                        Ok(got) if got == len => Ok(client),
                        _ => Err("header read failed"),
                    };
                }
                Parsed::Incomplete if n == buf.len() => return Err("header too long"),
                // Part of a header and then the client's FIN: the rest never comes (it was
                // held until `timeouts.header`: review of issue 54, finding 3).
                Parsed::Incomplete if stream.read_closed() => {
                    return Err("closed inside the header")
                }
                Parsed::Incomplete => {}
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err("socket error"),
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Err("no complete header within timeouts.header");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(64));
    }
}
