//! The accept loop of a TCP or unix listening socket: `accept4(SOCK_NONBLOCK)` in batches,
//! the worker's budget, the shield's first word on the client, and the hand-off to
//! [`start_connection`]. (QUIC listeners accept in `server/h3/accept.rs`.)

use std::rc::Rc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::client_socket::RawClient;
use crate::runtime::WorkerRuntime;
use crate::runtime::{ListenerId, UNIX_PEER};
use crate::server::client_io::ClientIo;
use crate::server::http1::Conn;
use crate::server::spawn::{spawn_boxed, spawn_plain, Serve};
use crate::server::state::{refuse, WorkerState};

/// The shield's word on a connection just accepted from `peer` on listener `index`:
/// `Some(key)` to serve it (the client's key when its connections are counted, else 0),
/// `None` to close it now. A `proxy_protocol` listener takes only its trusted sources here (on a
/// unix socket, every client);
/// their clients are known (and checked) once the PROXY header is read (`proxied.rs`).
#[inline]
pub(super) fn admit(
    state: &WorkerState,
    rt: &WorkerRuntime,
    index: usize,
    peer: std::net::SocketAddr,
) -> Option<u64> {
    let l = &rt.cfg.listeners[index];
    if let Some(trusted) = &l.proxy_protocol {
        // On a unix socket the file's permissions decide who may connect.
        if l.unix.is_some() || trusted.contains(peer.ip()) {
            return Some(0);
        }
        state.shield.counted(
            crate::shield::Limit::ProxyProtocol,
            crate::shield::Action::Close,
        );
        static UNTRUSTED: crate::logs::Limited = crate::logs::Limited::new();
        if let Some(suppressed) = UNTRUSTED.admit() {
            tracing::warn!(%peer, suppressed, "PROXY protocol listener: source not trusted, closed");
        }
        return None;
    }
    match &rt.cfg.shield {
        // Unix clients have no address to count by: they are local processes the socket
        // file's permissions let in.
        Some(shield) if !l.admin && l.unix.is_none() => shield.connect(peer.ip()).ok(),
        _ => Some(0),
    }
}

/// A registered listening socket.
#[derive(Debug)]
pub(super) enum Accepting {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

impl std::os::fd::AsRawFd for Accepting {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Accepting::Tcp(l) => l.as_raw_fd(),
            Accepting::Unix(l) => l.as_raw_fd(),
        }
    }
}

impl Accepting {
    /// One `accept4(SOCK_NONBLOCK)`: the connection and its peer ([`UNIX_PEER`] on a unix
    /// socket: the peer is never asked of it).
    #[inline]
    fn accept(&self) -> std::io::Result<(RawClient, std::net::SocketAddr)> {
        match self {
            Accepting::Tcp(l) => l.accept().map(|(s, peer)| (RawClient::Tcp(s), peer)),
            Accepting::Unix(l) => l.accept().map(|(s, _)| (RawClient::Unix(s), UNIX_PEER)),
        }
    }
}

/// Connections accepted in one turn of an accept loop before it yields (see [`accept_loop`]).
const ACCEPT_BATCH: usize = 16;

/// Closes a connection the shield refused with a reset (`SO_LINGER` 0), as HAProxy's `tcp-request
/// connection reject` does: the socket is freed at once, with no FIN exchange and no TIME_WAIT
/// kept by weir for a client it does not want to hear from.
fn abort(stream: RawClient) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Accepts with `accept4(SOCK_NONBLOCK)` into sockets not yet registered with the reactor (see
/// `client_io.rs`), draining the backlog on each readiness event.
pub(super) async fn accept_loop(
    state: Rc<WorkerState>,
    listener: AsyncFd<Accepting>,
    id: ListenerId,
) {
    let mut shutdown = state.shutdown.clone();
    // The listener's index in the current config, looked up again when the config changes.
    let mut rt = state.cached();
    let mut index = rt.cfg.listener_index(&id);
    loop {
        let mut guard = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            r = listener.readable() => match r {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!(error = %e, "listener failed");
                    return;
                }
            },
        };
        state.restore_reserve(id.admin);
        let mut taken = 0usize;
        loop {
            // A flood fills the backlog faster than it drains: after a batch, let the
            // connections already served run (a legitimate client's request must not wait
            // behind a whole backlog of attackers being refused), then come back.
            taken += 1;
            if taken > ACCEPT_BATCH {
                drop(guard);
                tokio::task::yield_now().await;
                break;
            }
            match guard.try_io(|l| l.get_ref().accept()) {
                Ok(Ok((stream, _))) if state.over_budget(id.admin) => {
                    refuse(&state, stream, crate::metrics::Refusal::MaxConnections);
                }
                Ok(Ok((stream, peer))) => {
                    if rt.generation != state.generation() {
                        state.refresh(&mut rt);
                        index = rt.cfg.listener_index(&id);
                    }
                    // `None`: removed by a reload an instant ago; this loop is about to stop.
                    if let Some(index) = index {
                        // The shield, before anything is allocated for the connection.
                        let Some(shield) = admit(&state, &rt, index, peer) else {
                            abort(stream);
                            continue;
                        };
                        start_connection(&state, &rt, index, stream, peer, id.admin, shield);
                    }
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                Ok(Err(e))
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && state.take_reserve(id.admin) =>
                {
                    // A descriptor was given up for this: take the connection, then refuse it
                    // (or, on the admin listener, serve it) and hold a reserve again. (EMFILE
                    // comes before the backlog is looked at: it may be empty.)
                    match listener.get_ref().accept() {
                        Ok((stream, peer)) => match index {
                            Some(index) if id.admin => {
                                start_connection(&state, &rt, index, stream, peer, true, 0);
                            }
                            _ => refuse(&state, stream, crate::metrics::Refusal::FdLimit),
                        },
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            state.restore_reserve(id.admin);
                            guard.clear_ready();
                            break;
                        }
                        Err(_) => {}
                    }
                    state.restore_reserve(id.admin);
                }
                Ok(Err(e)) => {
                    // ENOBUFS, or EMFILE with no reserve left: back off instead of spinning.
                    static ACCEPT_FAILED: crate::logs::Limited = crate::logs::Limited::new();
                    if let Some(suppressed) = ACCEPT_FAILED.admit() {
                        tracing::warn!(error = %e, suppressed, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    break;
                }
                // Backlog drained; readiness cleared.
                Err(_would_block) => break,
            }
        }
    }
}

/// Starts serving an accepted connection on listener `index`, counted in its budget;
/// `shield`: the client's key in the shield's table, when its connection is counted there.
pub(super) fn start_connection(
    state: &Rc<WorkerState>,
    rt: &Rc<WorkerRuntime>,
    index: usize,
    stream: RawClient,
    peer: std::net::SocketAddr,
    admin: bool,
    shield: u64,
) {
    let (key, guard) = state.open_slot(shield, admin);
    let listener = &rt.cfg.listeners[index];
    match (&listener.tls, listener.proxy_protocol.is_some()) {
        (None, false) if listener.tcp.is_none() => {
            #[cfg(feature = "uring")]
            let io = if !listener.h2c && crate::server::uring::active() {
                ClientIo::Uring(crate::server::uring::UringSock::new(
                    stream,
                    rt.cfg.timeouts.write,
                ))
            } else {
                ClientIo::Fresh(stream)
            };
            #[cfg(not(feature = "uring"))]
            let io = ClientIo::Fresh(stream);
            let conn = Conn::new(io, peer, key, state.clone(), rt.clone(), index);
            spawn_plain(state, key, conn, guard);
        }
        // TLS, a TCP listener, or a load balancer's PROXY header first: a separate task type, so that plain
        // connections keep their small future; boxed, or the task would hold the future twice
        // (as the moved-in value and as the awaited one).
        (tls, proxied) => {
            let serve: Serve = match tls {
                Some(tls) if !proxied => Box::pin(crate::server::tls::serve(
                    stream,
                    peer,
                    key,
                    state.clone(),
                    rt.clone(),
                    index,
                    tls.clone(),
                )),
                None if !proxied => Box::pin(crate::pipeline::tcp::serve_plain(
                    stream,
                    peer,
                    rt.clone(),
                    index,
                )),
                _ => Box::pin(crate::server::proxied::serve(
                    stream,
                    peer,
                    key,
                    state.clone(),
                    rt.clone(),
                    index,
                )),
            };
            spawn_boxed(state, key, serve, guard);
        }
    }
}
