//! What the tasks of one worker share ([`WorkerState`]: the config it runs, its connection
//! slots and budgets, its counters, the shutdown signal, the idle epoll's registry) and what
//! each connection's slot holds ([`ConnSlot`]). A leaf of `server/`: every protocol takes the
//! worker's state from here, and hands its idle parts back to its slot through it
//! (`park_conn`, `park_h2`), without importing the worker (which starts them) or the module
//! that serves parked connections again (`park.rs`): issue 54's `server/` without circles.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use mio::{Interest, Token};
use slab::Slab;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::client_io::ClientIo;
use super::parked::{Park, Parked, ParkedH2, ParkedTls};
use crate::client_socket::ClientStream;
use crate::client_socket::RawClient;
use crate::metrics::CloseReason;
use crate::runtime::ListenerId;
use crate::runtime::{Published, WorkerRuntime};
use crate::tls::stream::IdleTls;
use crate::tls::TlsInfo;

/// A listening socket handed to a worker.
#[derive(Debug)]
pub(crate) struct Listening {
    pub socket: super::listener::ListenSocket,
    /// Which listener it is (found in each config by id: reloads may reorder listeners).
    pub id: ListenerId,
}

/// A listener added or removed by a reload.
#[derive(Debug)]
pub(crate) enum ListenerChange {
    Add(Listening),
    /// Stop accepting on it (its sockets close); its connections finish their request and close.
    Remove(ListenerId),
    /// Stop its HTTP/3 (a reload turned `quic` off): its QUIC connections get GOAWAY.
    RemoveQuic(ListenerId),
}

/// State shared by the tasks of one worker.
#[derive(Debug)]
pub(crate) struct WorkerState {
    pub(super) published: Arc<Published>,
    pub(super) runtime: RefCell<Rc<WorkerRuntime>>,
    pub active: Cell<usize>,
    /// Admin connections open (their own budget).
    pub(super) admin_active: Cell<usize>,
    /// Descriptors held in reserve for the descriptor limit: one to refuse a connection with,
    /// one to accept an admin connection with.
    pub(super) reserve: RefCell<[Option<std::fs::File>; 2]>,
    pub max_active: usize,
    pub shutdown: watch::Receiver<bool>,
    /// Set by the worker when shutdown begins (the watch is for the accept loops and the worker).
    pub shutting_down: Cell<bool>,
    /// One slot per open connection.
    pub conns: RefCell<Slab<ConnSlot>>,
    /// The worker's coarse clock: milliseconds since it started, moved by the sweeper.
    pub(super) clock_ms: Cell<u64>,
    /// The sweeper's period (ms).
    pub(super) tick_ms: Cell<u64>,
    /// This worker's counters (`metrics/`).
    pub metrics: Arc<crate::metrics::WorkerMetrics>,
    /// The accept loop of each listening socket, by listener.
    pub(super) accepting: RefCell<HashMap<ListenerId, Vec<AbortHandle>>>,
    /// The QUIC endpoints' accept loops, by listener.
    pub(super) quic_accepting: RefCell<HashMap<ListenerId, Vec<AbortHandle>>>,
    /// The shield's client table (the registry's, which outlives configs).
    pub shield: Arc<crate::shield::ShieldState>,
    /// The idle epoll parked connections wait in (`park.rs`).
    pub idle: mio::Registry,
}

/// What the worker knows about one connection.
#[derive(Debug)]
pub(crate) struct ConnSlot {
    pub abort: Option<AbortHandle>,
    /// Waiting for the next request, with nothing in flight, until this time on the worker's
    /// coarse clock (ms); 0 when busy.
    pub idle_until: Cell<u64>,
    /// The shield's key for the client, to release its connection count at close (0: none).
    pub shield: Cell<u64>,
    /// Parking (`park.rs`): whether this idle connection may be, is being or was parked.
    pub park: Cell<Park>,
    /// The connection itself while it is parked.
    pub parked: Option<Parked>,
}

impl ConnSlot {
    pub(super) fn new(shield: u64) -> ConnSlot {
        ConnSlot {
            abort: None,
            idle_until: Cell::new(0),
            shield: Cell::new(shield),
            park: Cell::new(Park::No),
            parked: None,
        }
    }
}

impl WorkerState {
    /// Points `rt` at the config a request starting now runs on: in the steady state one
    /// atomic load and a compare.
    #[inline]
    pub(crate) fn refresh(&self, rt: &mut Rc<WorkerRuntime>) {
        let generation = self.published.generation();
        if rt.generation != generation {
            *rt = self.rebuild(generation);
        }
    }

    /// The worker's runtime for the config published at `generation` (or later), built once
    /// per published config.
    #[cold]
    fn rebuild(&self, generation: u64) -> Rc<WorkerRuntime> {
        let cached = self.runtime.borrow().clone();
        if cached.generation == generation {
            return cached;
        }
        let cfg = self.published.load();
        let fresh = Rc::new(WorkerRuntime::build(
            cfg,
            generation,
            Some(&cached),
            &self.metrics,
        ));
        *self.runtime.borrow_mut() = fresh.clone();
        fresh
    }

    /// The generation of the config published now.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.published.generation()
    }

    /// The runtime this worker built last (a new connection's first request refreshes it).
    pub(crate) fn cached(&self) -> Rc<WorkerRuntime> {
        self.runtime.borrow().clone()
    }
}

/// Frees the connection's slot when its task ends (normally or aborted), and counts why it
/// closed: an aborted task (the sweeper's idle close) never sets a reason, hence `Idle`.
///
/// 16 bytes (the slot key as `u32`): the guard sits in every connection's task, and 8 more
/// bytes pushed that task from tokio's 896-byte cell to the next 128-byte step
/// (`-Zprint-type-sizes`; 0.12 KiB more per idle connection, measured).
///
/// A parked connection (`park.rs`) keeps its slot and its count: the guard of the task it
/// left leaves them alone, and the one that closes it later (from the slot) releases them.
#[derive(Debug)]
pub(crate) struct ActiveGuard(Rc<WorkerState>, u32, CloseReason, bool);

impl ActiveGuard {
    pub(crate) fn new(state: Rc<WorkerState>, key: usize, why: CloseReason, admin: bool) -> Self {
        ActiveGuard(state, key as u32, why, admin)
    }
}

impl ActiveGuard {
    /// Why the connection closed (counted when the guard drops).
    pub(crate) fn set_reason(&mut self, why: CloseReason) {
        self.2 = why;
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let slot = {
            let mut conns = self.0.conns.borrow_mut();
            if conns
                .get(self.1 as usize)
                .is_some_and(|s| s.park.get() == Park::Parked)
            {
                return;
            }
            conns.try_remove(self.1 as usize)
        };
        self.0.metrics.closed(self.2);
        if let Some(key) = slot.map(|s| s.shield.get()).filter(|k| *k != 0) {
            self.0.shield.disconnect(key);
        }
        if self.3 {
            self.0.admin_active.set(self.0.admin_active.get() - 1);
            return;
        }
        self.0.active.set(self.0.active.get() - 1);
    }
}

/// Admin connections per worker, outside `max_connections`.
pub(crate) const ADMIN_CONNECTIONS: usize = 16;

/// Closes a connection just accepted, counted and logged (rate-limited: a client chooses how
/// often).
pub(crate) fn refuse(state: &WorkerState, stream: RawClient, why: crate::metrics::Refusal) {
    drop(stream);
    refused(state, why);
}

/// Counts and logs (rate-limited) a connection refused: `why`.
pub(crate) fn refused(state: &WorkerState, why: crate::metrics::Refusal) {
    static REFUSED: crate::logs::Limited = crate::logs::Limited::with_rate(1);
    state.metrics.refused[why as usize].inc();
    if let Some(suppressed) = REFUSED.admit() {
        tracing::warn!(reason = why.as_str(), suppressed, "connection refused");
    }
}

/// A descriptor to give up at the descriptor limit (`/dev/null`, read-only).
pub(crate) fn reserve_fd() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

impl WorkerState {
    /// Whether a new connection on a listener (admin or not) is over its budget.
    pub(crate) fn over_budget(&self, admin: bool) -> bool {
        if admin {
            self.admin_active.get() >= ADMIN_CONNECTIONS
        } else {
            self.active.get() >= self.max_active
        }
    }

    /// Counts a connection just accepted in its budget and gives it a slot: the slot's key,
    /// and the guard that frees both when its task ends.
    pub(crate) fn open_slot(self: &Rc<Self>, shield: u64, admin: bool) -> (usize, ActiveGuard) {
        let count = if admin {
            &self.admin_active
        } else {
            &self.active
        };
        count.set(count.get() + 1);
        self.metrics.accepted.inc();
        let key = self.conns.borrow_mut().insert(ConnSlot::new(shield));
        (
            key,
            ActiveGuard::new(self.clone(), key, CloseReason::Idle, admin),
        )
    }

    /// Closes the reserve descriptor for the admin listener or the others, if held.
    pub(super) fn take_reserve(&self, admin: bool) -> bool {
        self.reserve.borrow_mut()[usize::from(admin)]
            .take()
            .is_some()
    }

    /// Holds a reserve descriptor again (when the table has room; else at the next try).
    pub(super) fn restore_reserve(&self, admin: bool) {
        let mut r = self.reserve.borrow_mut();
        if r[usize::from(admin)].is_none() {
            r[usize::from(admin)] = reserve_fd();
        }
    }
}

/// Handing idle connections to their slots (`park.rs` serves them again).
impl WorkerState {
    /// Parks the HTTP/1.1 connection in slot `key`: called by `Conn`'s `Drop` when the
    /// sweeper aborted its task to park it. A connection that cannot be parked is closed (its
    /// socket dropped here) and its slot left to the task's guard, as for any close.
    pub(crate) fn park_conn(
        &self,
        key: usize,
        io: ClientIo,
        peer: SocketAddr,
        (rt, listener): (&Rc<WorkerRuntime>, usize),
        served: u64,
    ) {
        let mut conns = self.conns.borrow_mut();
        let Some(slot) = self.parking_slot(&mut conns, key) else {
            return;
        };
        let (stream, tls) = match io {
            ClientIo::Registered(stream) => (stream, None),
            ClientIo::Tls(t) => {
                let super::client_io::TlsConn { stream, info } = *t;
                let Some((tcp, session)) = stream.into_idle() else {
                    return;
                };
                (tcp, Some(Box::new(ParkedTls { session, info })))
            }
            _ => return,
        };
        let Some(stream) = self.register_idle(key, stream) else {
            return;
        };
        let parked = Parked {
            stream,
            rt: rt.clone(),
            listener: listener as u32,
            served,
            peer,
            tls,
            h2: None,
        };
        self.fill_slot(slot, parked);
    }

    /// Parks the HTTP/2 connection in slot `key` (`server/h2/park.rs`: its driver's `Drop`, the
    /// sweeper having aborted its task to park it): its socket, TLS keys and HTTP/2 state.
    pub(crate) fn park_h2(
        &self,
        key: usize,
        stream: ClientStream,
        tls: Option<(IdleTls, TlsInfo)>,
        h2: Box<ParkedH2>,
        (rt, listener): (&Rc<WorkerRuntime>, usize),
        peer: SocketAddr,
    ) {
        let mut conns = self.conns.borrow_mut();
        let Some(slot) = self.parking_slot(&mut conns, key) else {
            return;
        };
        let Some(stream) = self.register_idle(key, stream) else {
            return;
        };
        let parked = Parked {
            stream,
            rt: rt.clone(),
            listener: listener as u32,
            served: 0,
            peer,
            tls: tls.map(|(session, info)| Box::new(ParkedTls { session, info })),
            h2: Some(h2),
        };
        self.fill_slot(slot, parked);
    }

    /// Slot `key`, when the sweeper is parking its connection (and the worker is not shutting
    /// down), marked `No` meanwhile: anything but success leaves it so, and the task's guard
    /// then closes the connection as usual.
    fn parking_slot<'s>(
        &self,
        conns: &'s mut Slab<ConnSlot>,
        key: usize,
    ) -> Option<&'s mut ConnSlot> {
        let slot = conns.get_mut(key)?;
        if slot.park.get() != Park::Parking || self.shutting_down.get() {
            return None;
        }
        slot.park.set(Park::No);
        Some(slot)
    }

    /// A socket moved from tokio's reactor to the idle epoll.
    fn register_idle(&self, key: usize, stream: ClientStream) -> Option<RawClient> {
        let mut stream = stream.into_raw().ok()?;
        self.idle
            .register(&mut stream, Token(key), Interest::READABLE)
            .ok()?;
        Some(stream)
    }

    fn fill_slot(&self, slot: &mut ConnSlot, parked: Parked) {
        // The abort handle holds the ended task's cell: let it go.
        slot.abort = None;
        slot.parked = Some(parked);
        slot.park.set(Park::Parked);
        self.metrics.parked.inc();
    }
}
