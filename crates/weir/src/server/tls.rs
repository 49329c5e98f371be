//! A TLS connection's start: the handshake (bounded by `timeouts.header`), then HTTP/1.1 or
//! HTTP/2 by what ALPN settled. Plain HTTP sent to a TLS port gets nginx's answer (400 "The
//! plain HTTP request was sent to HTTPS port"). Failed handshakes and plaintext are counted
//! (`weir_tls_handshakes_total{result}`) and logged at debug only: their rate is the client's
//! to choose, so they never reach the error log.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use crate::client_socket::ClientStream;
use tokio::io::AsyncWriteExt;

use super::client_io::{ClientIo, TlsConn};
use super::http1::Conn;
use super::state::WorkerState;
use crate::client_socket::RawClient;
use crate::metrics::{CloseReason, TlsOutcome};
use crate::runtime::WorkerRuntime;
use crate::tls::hello as sni;
use crate::tls::stream::ServerTls;

/// A TLS record's first byte: a handshake.
const HANDSHAKE: u8 = 0x16;

const PLAINTEXT_REPLY: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 46\r\nConnection: close\r\n\r\nThe plain HTTP request was sent to HTTPS port\n";

/// Serves one accepted connection on a TLS listener.
pub(crate) async fn serve(
    stream: RawClient,
    peer: SocketAddr,
    key: usize,
    state: Rc<WorkerState>,
    rt: Rc<WorkerRuntime>,
    listener: usize,
    config: Arc<rustls::ServerConfig>,
) -> CloseReason {
    let header = rt.cfg.timeouts.header;
    let tcp = match stream.register() {
        Ok(t) => t,
        Err(_) => return CloseReason::ClientError,
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(header, tcp.peek(&mut first)).await {
        Err(_) => {
            state.metrics.tls(TlsOutcome::Timeout);
            if let Some(shield) = &rt.cfg.shield {
                shield.handshake_failed(peer.ip());
            }
            return CloseReason::Timeout;
        }
        Ok(Ok(0)) | Ok(Err(_)) => return CloseReason::Done,
        Ok(Ok(_)) if first[0] != HANDSHAKE => {
            state.metrics.tls(TlsOutcome::Plaintext);
            tracing::debug!(%peer, "plain HTTP on a TLS port");
            Box::pin(refuse_plaintext(tcp)).await;
            return CloseReason::BadRequest;
        }
        Ok(Ok(_)) => {}
    }
    if let Some(shield) = &rt.cfg.shield {
        if shield.handshake(peer.ip()).is_err() {
            return CloseReason::ClientError;
        }
    }
    if let Some(gate) = rt.cfg.listeners[listener].on_demand.clone() {
        let handshake = Box::pin(accept_on_demand(tcp, config, gate, header, peer)).await;
        return after_handshake(handshake, peer, key, state, rt, listener).await;
    }
    // Boxed, as is what follows: rustls' connection state is large (KiBs), and a future that
    // held it inline would keep that much in every connection's task.
    let accept = Box::pin(ServerTls::accept(tcp, config, Vec::new()));
    let handshake = tokio::time::timeout(header, accept).await;
    // Moved straight into a synchronous function: a TLS stream (about 1.2 KiB) bound here would
    // be laid out in this future for the connection's whole life (`-Zprint-type-sizes`).
    after_handshake(handshake, peer, key, state, rt, listener).await
}

/// A handshake on a listener with on-demand certificates (`tls/on_demand.rs`): the ClientHello
/// is read first (within `header`); when it names a server no certificate serves yet, the
/// handshake waits for one to be obtained (up to `on_demand.wait`), then goes on (within
/// `header`) with the listener's config, whose resolver now finds it.
async fn accept_on_demand(
    tcp: ClientStream,
    config: Arc<rustls::ServerConfig>,
    gate: Arc<crate::tls::on_demand::Gate>,
    header: std::time::Duration,
    peer: SocketAddr,
) -> Handshake {
    let hello = match tokio::time::timeout(header, read_hello(&tcp)).await {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => return Ok(Err(e)),
        Err(elapsed) => return Err(elapsed),
    };
    if let sni::Scan::Done(Some(fields)) = sni::scan(&hello, usize::MAX) {
        if let Some(name) = gate.wanted(&fields) {
            gate.hold(&name, peer.ip()).await;
        }
    }
    tokio::time::timeout(header, ServerTls::accept(tcp, config, hello)).await
}

/// Reads until a whole ClientHello is in (or the bytes are not one: the handshake then fails
/// on them), up to rustls' own limit for a handshake message.
async fn read_hello(tcp: &ClientStream) -> std::io::Result<Vec<u8>> {
    let mut hello = Vec::with_capacity(2048);
    loop {
        if !matches!(sni::scan(&hello, usize::MAX), sni::Scan::Incomplete) {
            return Ok(hello);
        }
        if hello.len() > 0x10000 + 1024 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "ClientHello too large",
            ));
        }
        hello.reserve(4096);
        tcp.readable().await?;
        match tcp.try_read_buf(&mut hello) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

type Handshake = Result<std::io::Result<ServerTls>, tokio::time::error::Elapsed>;

/// Counts the handshake's outcome and returns what serves the connection next: HTTP/2 or
/// HTTP/1.1, as ALPN settled.
fn after_handshake(
    handshake: Handshake,
    peer: SocketAddr,
    key: usize,
    state: Rc<WorkerState>,
    rt: Rc<WorkerRuntime>,
    listener: usize,
) -> Pin<Box<dyn Future<Output = CloseReason>>> {
    if handshake.as_ref().map_or(true, |r| r.is_err()) {
        if let Some(shield) = &rt.cfg.shield {
            shield.handshake_failed(peer.ip());
        }
    }
    let stream = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            state.metrics.tls(TlsOutcome::Failed);
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return Box::pin(std::future::ready(CloseReason::ClientError));
        }
        Err(_) => {
            state.metrics.tls(TlsOutcome::Timeout);
            tracing::debug!(%peer, "TLS handshake timed out");
            return Box::pin(std::future::ready(CloseReason::Timeout));
        }
    };
    let info = stream.info();
    state.metrics.tls(if info.resumed {
        TlsOutcome::Resumed
    } else {
        TlsOutcome::Full
    });
    // The protocol ALPN settled. A TLS-ALPN-01 validation ends with its handshake (RFC 8737).
    let alpn = stream.alpn();
    if alpn == Some(crate::tls::acme::ACME_TLS_ALPN) {
        return Box::pin(std::future::ready(CloseReason::Done));
    }
    if rt.cfg.listeners[listener].tcp.is_some() {
        let client = crate::pipeline::tcp::Client::Tls(Box::new(stream));
        return Box::pin(crate::pipeline::tcp::serve(
            client,
            Some(Box::new(info)),
            peer,
            rt,
            listener,
        ));
    }
    if alpn == Some(b"h2") {
        let info = Some(Rc::new(info));
        return Box::pin(super::h2::serve(
            stream,
            bytes::Bytes::new(),
            (peer, key, state, rt, listener),
            info,
        ));
    }
    let io = ClientIo::Tls(Box::new(TlsConn { stream, info }));
    let mut conn = Box::new(Conn::new(io, peer, key, state, rt, listener));
    Box::pin(async move { conn.serve().await })
}

/// Answers plain HTTP on a TLS port as nginx does, then drains the request for a moment so
/// that closing does not reset the answer away.
async fn refuse_plaintext(mut tcp: ClientStream) {
    let _ = tcp.write_all(PLAINTEXT_REPLY).await;
    let _ = tcp.shutdown().await;
    let mut sink = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
    while let Ok(Ok(n)) =
        tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(&mut tcp, &mut sink)).await
    {
        if n == 0 {
            break;
        }
    }
}
