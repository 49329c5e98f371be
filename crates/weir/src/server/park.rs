//! Idle keep-alive connections parked outside their task.
//!
//! An idle plain HTTP/1.1 connection waiting in its task holds a tokio task cell (1,024 bytes:
//! the connection future, 128-byte aligned) and a reactor registration (`ScheduledIo`, 256
//! bytes, cache-padded): 1.56 KiB of RSS per idle connection on 2026-11-26
//! (`bench/idle_memory.sh`, DHAT: those two allocations are all an idle connection allocates),
//! against nginx's 0.55. Once a connection has been idle at two sweeps in a row (one to two
//! sweeper ticks, at most 2 s), the sweeper parks it: its task ends, its socket leaves tokio's
//! epoll for this worker's idle epoll, and what is left of it is its slot in the worker's
//! connection slab ([`Parked`]: the socket, the client's address, the config it ran on and its
//! listener there, and its request count; about 100 bytes). When the client sends its next
//! request (or closes), the idle epoll wakes one task per worker, [`unpark_loop`], which starts
//! the connection again in a new task, unregistered (its first read is a plain `read`, as for a
//! connection just accepted; a TLS one is registered at once).
//!
//! What a request pays for this: a few instructions in the idle wait (whether the connection
//! may park, one more `Cell` write; hello keep-alive measured 0.99× cc12ae0's instructions with
//! it, ab-20261126-1600). A connection busy enough never stays idle across two sweeps; the ones
//! that do pay two `epoll_ctl` and a task spawn once per idle period, which nginx pays none of
//! but which buys back more than a kilobyte each. The sweeper's `malloc_trim` (after many
//! connections left their tasks) hands the freed cells back to the system.
//!
//! How the handover works: the sweeper marks the slot [`Park::Parking`] and aborts the task,
//! as it does for an idle timeout. Dropping the task drops the connection (`Conn`'s `Drop`),
//! which, when it was waiting in its idle wait and its slot says `Parking`, moves the socket
//! into the slot ([`park`]) instead of closing it. The task's [`super::worker::ActiveGuard`]
//! drops after the connection (they are fields of one struct, in that order) and leaves a
//! parked slot alone. Idle timeouts and shutdown close parked connections from their slots
//! ([`super::worker::WorkerState::sweep`]). Nothing is parked once shutdown or a drain has
//! begun: an idle connection then answers one more request (drain) or closes (shutdown) in its
//! task, as before.
//!
//! A TLS HTTP/1.1 connection parks the same way, with nothing in flight (no partial record read,
//! no record unsent): its slot then also holds its record keys, sequence numbers and rustls'
//! key schedule, and no buffer and no cipher context ([`ParkedTls`], 840 bytes, with the key
//! schedule's own allocation; `tls/records.rs`). At its first park rustls hands the keys over,
//! and from then on its records are sealed and opened by `tls/records.rs`. It resumes
//! registered. 2.84 KiB of RSS per parked TLS connection (idle-20261127-0651, nginx 15.24).
//! An HTTP/2 connection parks too, with no stream open (`server/h2/park.rs`): its slot also
//! holds the connection's HTTP/2 state ([`crate::server::h2::park::ParkedH2`]: the HPACK
//! decoder's table, settings, windows), and it resumes in [`resume_h2`]. HTTP/1.1 connections
//! on an h2c listener are not parked (their first bytes are sniffed for HTTP/2's preface).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use mio::{Events, Poll};
use tokio::io::unix::AsyncFd;

use super::client_io::ClientIo;
use super::http1::Conn;
use super::parked::{Park, Parked, ParkedH2, ParkedTls};
use super::spawn::{spawn_boxed, spawn_plain, Serve};
use super::state::{ActiveGuard, WorkerState};
use crate::client_socket::RawClient;
use crate::metrics::CloseReason;
use crate::runtime::WorkerRuntime;
use crate::tls::stream::ServerTls;

/// The worker's idle epoll: its registry (where [`park`] puts sockets) lives in the worker's
/// state; the `Poll` itself, registered with tokio's reactor as one descriptor, belongs to
/// [`unpark_loop`].
#[derive(Debug)]
pub(crate) struct IdlePoll(AsyncFd<PollFd>);

#[derive(Debug)]
struct PollFd(Poll);

impl AsRawFd for PollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Parked connections woken per turn of [`unpark_loop`].
const WAKE_BATCH: usize = 64;

impl IdlePoll {
    /// The idle epoll and a handle to register sockets in it. Needs the worker's runtime
    /// entered (it registers with its reactor).
    pub(crate) fn new() -> io::Result<(IdlePoll, mio::Registry)> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        #[allow(unsafe_code)]
        // SAFETY: the `AsyncFd` owns the `Poll` outright and drops (deregisters, then closes)
        // its descriptor in one place; nothing else closes it while it is registered.
        let fd = unsafe {
            AsyncFd::register_with_interest(PollFd(poll), tokio::io::Interest::READABLE)
                .map_err(io::Error::from)?
        };
        Ok((IdlePoll(fd), registry))
    }
}

/// Takes a parked connection out of its slot (the slot stays, marked busy: its idle deadline
/// is cleared, or the sweeper would cut the request that woke it); `None` if the slot holds
/// none.
fn take(state: &WorkerState, key: usize) -> Option<(Parked, u64)> {
    let mut conns = state.conns.borrow_mut();
    let slot = conns.get_mut(key)?;
    let parked = slot.parked.take()?;
    slot.park.set(Park::No);
    let until = slot.idle_until.replace(0);
    state.metrics.parked.dec();
    Some((parked, until))
}

/// Closes the parked connection in slot `key` (idle timeout, shutdown), counted as `reason`.
pub(crate) fn close(state: &Rc<WorkerState>, key: usize, reason: CloseReason) {
    let Some((mut parked, _)) = take(state, key) else {
        return;
    };
    let admin = parked.rt.cfg.listeners[parked.listener as usize].admin;
    // A TLS connection says `close_notify` before its FIN, if its socket takes it now.
    if let Some(tls) = parked.tls.as_mut() {
        if let Some(alert) = ServerTls::close_notify(&mut tls.session) {
            let _ = std::io::Write::write(&mut parked.stream, &alert);
        }
    }
    // Closing the socket takes it out of the idle epoll too.
    drop(parked);
    drop(ActiveGuard::new(state.clone(), key, reason, admin));
}

/// Wakes parked connections whose client sent something (or closed), serving each in a new task.
pub(crate) async fn unpark_loop(state: Rc<WorkerState>, mut idle: IdlePoll) {
    let mut events = Events::with_capacity(WAKE_BATCH);
    let mut woken = Vec::with_capacity(WAKE_BATCH);
    loop {
        let Ok(mut ready) = idle.0.readable_mut().await else {
            tracing::error!("idle connections' epoll failed; parked connections stay parked");
            return;
        };
        woken.clear();
        if ready
            .get_inner_mut()
            .0
            .poll(&mut events, Some(std::time::Duration::ZERO))
            .is_err()
        {
            continue;
        }
        woken.extend(events.iter().map(|e| e.token().0));
        if woken.len() < WAKE_BATCH {
            ready.clear_ready();
        }
        drop(ready);
        for &key in &woken {
            resume(&state, key);
        }
        // Many woken at once: let their tasks run before the next batch.
        tokio::task::yield_now().await;
    }
}

/// Serves the connection parked in slot `key` again, in a new task, on the config it last ran
/// on (its first request moves to the current one, as any request does: `Conn::refresh_config`).
fn resume(state: &Rc<WorkerState>, key: usize) {
    let Some((mut parked, idle_until)) = take(state, key) else {
        return;
    };
    let _ = state.idle.deregister(&mut parked.stream);
    let Parked {
        stream,
        rt,
        listener,
        served,
        peer,
        tls,
        h2,
    } = parked;
    let admin = rt.cfg.listeners[listener as usize].admin;
    if let Some(h2) = h2 {
        // The keep-alive time left goes on, as for HTTP/1.1 below: a wake that brings no
        // request (a PING) does not buy another keep-alive period.
        let left =
            std::time::Duration::from_millis(idle_until.saturating_sub(state.clock_ms.get()));
        return resume_h2(
            state,
            key,
            stream,
            tls,
            h2,
            (rt, listener as usize),
            (peer, left),
        );
    }
    let io = match tls {
        None => ClientIo::Fresh(stream),
        Some(tls) => {
            let ParkedTls { session, info } = *tls;
            // Registered at once: TLS reads go through the reactor (`client_io.rs`).
            let tcp = match stream.register() {
                Ok(tcp) => tcp,
                Err(_) => {
                    drop(ActiveGuard::new(
                        state.clone(),
                        key,
                        CloseReason::ClientError,
                        admin,
                    ));
                    return;
                }
            };
            let stream = ServerTls::from_idle(tcp, session);
            ClientIo::Tls(Box::new(super::client_io::TlsConn { stream, info }))
        }
    };
    // The keep-alive deadline it was parked with goes on: a wake that brings no request (a
    // lone TLS KeyUpdate) does not buy the connection another keep-alive period.
    let conn = Conn::resume(io, peer, key, state.clone(), rt, listener as usize, served)
        .keeping_deadline(idle_until);
    let guard = ActiveGuard::new(state.clone(), key, CloseReason::Idle, admin);
    spawn_plain(state, key, conn, guard);
}

/// Serves a parked HTTP/2 connection again (see [`resume`]).
fn resume_h2(
    state: &Rc<WorkerState>,
    key: usize,
    stream: RawClient,
    tls: Option<Box<ParkedTls>>,
    h2: Box<ParkedH2>,
    (rt, listener): (Rc<WorkerRuntime>, usize),
    (peer, left): (SocketAddr, std::time::Duration),
) {
    let admin = rt.cfg.listeners[listener].admin;
    let guard = ActiveGuard::new(state.clone(), key, CloseReason::Idle, admin);
    let Ok(tcp) = stream.register() else {
        let mut guard = guard;
        guard.set_reason(CloseReason::ClientError);
        return;
    };
    let at = (peer, key, state.clone(), rt, listener);
    let serve: Serve = match tls {
        Some(tls) => {
            let ParkedTls { session, info } = *tls;
            let io = ServerTls::from_idle(tcp, session);
            Box::pin(crate::server::h2::serve_resumed(
                io,
                *h2,
                at,
                Some(Rc::new(info)),
                left,
            ))
        }
        None => Box::pin(crate::server::h2::serve_resumed(tcp, *h2, at, None, left)),
    };
    spawn_boxed(state, key, serve, guard);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parked connection keeps inline in its slot, and what a parked TLS connection
    /// keeps in its one allocation besides the key schedule rustls boxed (its record keys and
    /// rustls' kernel connection). Recorded 2026-11-27;
    /// a change that grows them must say why (and move these figures).
    #[test]
    fn a_parked_connection_stays_small() {
        let slot = std::mem::size_of::<Parked>();
        let tls = std::mem::size_of::<ParkedTls>();
        eprintln!("parked: {slot} bytes in the slot, {tls} bytes more for TLS");
        assert!(
            slot <= PARKED,
            "the parked slot grew: {slot} > {PARKED} bytes"
        );
        assert!(
            tls <= PARKED_TLS,
            "parked TLS grew: {tls} > {PARKED_TLS} bytes"
        );
    }

    /// 80, then 88 with HTTP/2's parked state (issue 54: a box of its own, as TLS's), then 96
    /// since a client socket is one type for TCP and unix (`crate::client_socket`: the family
    /// is a tag beside the descriptor, where a unix socket used to pass for a TCP one): 8 bytes
    /// per parked connection, 78 KiB at 10,000.
    const PARKED: usize = 96;
    const PARKED_TLS: usize = 840;
}
