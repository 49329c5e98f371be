//! One worker thread: a current-thread tokio runtime, an accept loop per listener, and one task
//! per connection that has to wait (a plain connection served within its first poll, made in
//! the accept loop, never gets one: see [`spawn_plain`]). Connection counting is per worker
//! (`max_connections / workers` each), in a `Cell`: no atomics on the accept path. At the limit
//! a new connection is accepted and closed at once (counted as
//! `refused{reason="max_connections"}`, logged at most a few times a second): a client learns
//! at once rather than waiting in the backlog. At the descriptor limit
//! (EMFILE) a reserve descriptor kept for the purpose is given up to accept and close the
//! connection (`reason="fd_limit"`), so the backlog never fills with connections nobody takes.
//!
//! The admin listener has its own budget ([`ADMIN_CONNECTIONS`] per worker, outside
//! `max_connections`) and its own reserve descriptor: the operator can still read /metrics and
//! reload when the service is full.
//!
//! Graceful shutdown without per-request cost: each connection has a slot in a per-worker slab
//! holding its abort handle and an `idle` flag it flips around its keep-alive wait (two `Cell`
//! writes). On shutdown the worker aborts the idle ones; busy ones see `shutting_down` and
//! close after their response. No timer or notifier is registered per request for this.
//!
//! Idle timeouts the same way: a connection waiting for its next request writes a deadline into
//! its slot (on the worker's coarse clock, no clock read), and one sweeper task per worker ticks
//! a few times per timeout and aborts the connections whose deadline passed. A timer per
//! connection (a boxed `Sleep`, 96 bytes, plus a timer-wheel entry) was the largest thing an idle
//! connection held after its task; the sweeper closes an idle connection between the timeout
//! and the timeout plus two ticks (a quarter of the shortest idle timeout each, at most 1 s).
//!
//! Config swaps: the server publishes the current `RuntimeConfig` (`runtime/published.rs`). Each
//! request starts with [`WorkerState::refresh`]: one atomic load and a compare of generations in
//! the steady state. When it changed, the worker builds a new
//! [`WorkerRuntime`], carrying over each upstream's per-worker state (pool, balancer, budget)
//! by name when its servers and policy are unchanged. A request keeps the `Rc<WorkerRuntime>`
//! it started with, so indices into its config stay valid to its end.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use std::collections::HashMap;

use super::client_io::ClientIo;
use super::conn::Conn;
use super::listener::ListenSocket;
use super::park::{Park, Parked};
use crate::metrics::CloseReason;
use crate::runtime::ListenerId;
use crate::runtime::{Published, WorkerRuntime};

mod accept;
mod sweep;

use accept::{accept_loop, Accepting};

use sweep::{sweep_tick, sweeper};

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
    published: Arc<Published>,
    runtime: RefCell<Rc<WorkerRuntime>>,
    pub active: Cell<usize>,
    /// Admin connections open (their own budget).
    admin_active: Cell<usize>,
    /// Descriptors held in reserve for the descriptor limit: one to refuse a connection with,
    /// one to accept an admin connection with.
    reserve: RefCell<[Option<std::fs::File>; 2]>,
    pub max_active: usize,
    pub shutdown: watch::Receiver<bool>,
    /// Set by the worker when shutdown begins (the watch is for the accept loops and the worker).
    pub shutting_down: Cell<bool>,
    /// One slot per open connection.
    pub conns: RefCell<Slab<ConnSlot>>,
    /// The worker's coarse clock: milliseconds since it started, moved by the sweeper.
    clock_ms: Cell<u64>,
    /// The sweeper's period (ms).
    tick_ms: Cell<u64>,
    /// This worker's counters (`metrics/`).
    pub metrics: Arc<crate::metrics::WorkerMetrics>,
    /// The accept loop of each listening socket, by listener.
    accepting: RefCell<HashMap<ListenerId, Vec<AbortHandle>>>,
    /// The QUIC endpoints' accept loops, by listener.
    quic_accepting: RefCell<HashMap<ListenerId, Vec<AbortHandle>>>,
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
    fn new(shield: u64) -> ConnSlot {
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

pub(crate) fn run(
    id: usize,
    published: Arc<Published>,
    listening: Vec<Listening>,
    shutdown: watch::Receiver<bool>,
    drain: Arc<std::sync::atomic::AtomicBool>,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<ListenerChange>,
) {
    let generation = published.generation();
    let cfg = published.load();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    // The io_uring experiment submits its batch before the worker sleeps (`server/uring/`).
    #[cfg(feature = "uring")]
    let uring = super::uring::wanted();
    #[cfg(feature = "uring")]
    if uring {
        builder.on_thread_park(super::uring::before_park);
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = id, error = %e, "cannot start worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let metrics = cfg.registry.metrics.add_worker();
    let max_active = cfg
        .limits
        .max_connections
        .div_ceil(cfg.workers.max(1))
        .max(1);
    let (idle, idle_registry) = {
        let _entered = rt.enter();
        match super::park::IdlePoll::new() {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(worker = id, error = %e, "cannot create the idle epoll");
                return;
            }
        }
    };
    let state = Rc::new(WorkerState {
        idle: idle_registry,
        runtime: RefCell::new(Rc::new(WorkerRuntime::build(
            cfg.clone(),
            generation,
            None,
            &metrics,
        ))),
        metrics,
        published,
        active: Cell::new(0),
        admin_active: Cell::new(0),
        reserve: RefCell::new([reserve_fd(), reserve_fd()]),
        max_active,
        shutdown: shutdown.clone(),
        shutting_down: Cell::new(false),
        conns: RefCell::new(Slab::new()),
        clock_ms: Cell::new(0),
        tick_ms: Cell::new(sweep_tick(&cfg.timeouts).as_millis() as u64),
        accepting: RefCell::new(HashMap::new()),
        quic_accepting: RefCell::new(HashMap::new()),
        shield: cfg.registry.shield.clone(),
    });
    local.block_on(&rt, async move {
        #[cfg(feature = "uring")]
        if uring {
            match super::uring::start() {
                Ok(()) => tracing::info!(worker = id, "plain HTTP/1.1 connections on io_uring (experimental)"),
                Err(e) => tracing::error!(worker = id, error = %e, "io_uring unavailable; serving on epoll"),
            }
        }
        for l in listening {
            start_accepting(&state, l);
        }
        tokio::task::spawn_local(sweeper(state.clone()));
        tokio::task::spawn_local(super::park::unpark_loop(state.clone(), idle));
        let s = state.clone();
        tokio::task::spawn_local(async move {
            while let Some(change) = changes.recv().await {
                match change {
                    ListenerChange::Add(l) => start_accepting(&s, l),
                    ListenerChange::Remove(id) => {
                        for task in s.accepting.borrow_mut().remove(&id).unwrap_or_default() {
                            task.abort();
                        }
                        for task in s
                            .quic_accepting
                            .borrow_mut()
                            .remove(&id)
                            .unwrap_or_default()
                        {
                            task.abort();
                        }
                    }
                    ListenerChange::RemoveQuic(id) => {
                        for task in s
                            .quic_accepting
                            .borrow_mut()
                            .remove(&id)
                            .unwrap_or_default()
                        {
                            task.abort();
                        }
                    }
                }
            }
        });
        let mut rx = shutdown;
        let _ = rx.wait_for(|s| *s).await;
        state.shutting_down.set(true);
        if !drain.load(std::sync::atomic::Ordering::SeqCst) {
            state.sweep(u64::MAX);
        }
        let mut rt = state.cached();
        state.refresh(&mut rt);
        let deadline = tokio::time::Instant::now() + rt.cfg.timeouts.shutdown;
        while state.active.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if state.active.get() > 0 {
            tracing::warn!(
                worker = id,
                connections = state.active.get(),
                "shutdown deadline reached, closing connections"
            );
        }
    });
    // Dropping the LocalSet and runtime cancels what is left and closes its sockets.
}

/// Registers a listening socket and spawns its accept loop.
fn start_accepting(state: &Rc<WorkerState>, l: Listening) {
    // `AsyncFd::new` is deprecated because a caller could close the fd while it is still
    // registered; here the AsyncFd owns the listener outright and drops (deregisters and
    // closes) it in one place, so that hazard does not exist.
    let accepting = match l.socket {
        ListenSocket::Tcp(s) => Accepting::Tcp(mio::net::TcpListener::from_std(s)),
        ListenSocket::Unix(s) => Accepting::Unix(mio::net::UnixListener::from_std(s)),
        ListenSocket::Udp(s) => {
            if let Some(task) = super::h3::start(state, s, l.id) {
                state
                    .quic_accepting
                    .borrow_mut()
                    .entry(l.id)
                    .or_default()
                    .push(task);
            }
            return;
        }
    };
    #[allow(deprecated)]
    let registered = AsyncFd::new(accepting);
    match registered {
        Ok(socket) => {
            let task = tokio::task::spawn_local(accept_loop(state.clone(), socket, l.id));
            state
                .accepting
                .borrow_mut()
                .entry(l.id)
                .or_default()
                .push(task.abort_handle());
        }
        Err(e) => tracing::error!(error = %e, "cannot register listener"),
    }
}

/// Admin connections per worker, outside `max_connections`.
pub(crate) const ADMIN_CONNECTIONS: usize = 16;

/// Closes a connection just accepted, counted and logged (rate-limited: a client chooses how
/// often).
fn refuse(state: &WorkerState, stream: mio::net::TcpStream, why: crate::metrics::Refusal) {
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
fn reserve_fd() -> Option<std::fs::File> {
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
    fn take_reserve(&self, admin: bool) -> bool {
        self.reserve.borrow_mut()[usize::from(admin)]
            .take()
            .is_some()
    }

    /// Holds a reserve descriptor again (when the table has room; else at the next try).
    fn restore_reserve(&self, admin: bool) {
        let mut r = self.reserve.borrow_mut();
        if r[usize::from(admin)].is_none() {
            r[usize::from(admin)] = reserve_fd();
        }
    }
}

/// Starts serving an accepted connection on listener `index`, counted in its budget;
/// `shield`: the client's key in the shield's table, when its connection is counted there.
fn start_connection(
    state: &Rc<WorkerState>,
    rt: &Rc<WorkerRuntime>,
    index: usize,
    stream: mio::net::TcpStream,
    peer: std::net::SocketAddr,
    admin: bool,
    shield: u64,
) {
    let (key, guard) = state.open_slot(shield, admin);
    let listener = &rt.cfg.listeners[index];
    let task = match (&listener.tls, listener.proxy_protocol.is_some()) {
        (None, false) if listener.tcp.is_none() => {
            #[cfg(feature = "uring")]
            let io = if !listener.h2c && super::uring::active() {
                ClientIo::Uring(super::uring::UringSock::new(stream, rt.cfg.timeouts.write))
            } else {
                ClientIo::Fresh(stream)
            };
            #[cfg(not(feature = "uring"))]
            let io = ClientIo::Fresh(stream);
            let conn = Conn::new(io, peer, key, state.clone(), rt.clone(), index);
            return spawn_plain(state, key, conn, guard);
        }
        // TLS, a TCP listener, or a load balancer's PROXY header first: a separate task type, so that plain
        // connections keep their small future; boxed, or the task would hold the future twice
        // (as the moved-in value and as the awaited one).
        (tls, proxied) => {
            let serve: Serve = match tls {
                Some(tls) if !proxied => Box::pin(super::tls::serve(
                    stream,
                    peer,
                    key,
                    state.clone(),
                    rt.clone(),
                    index,
                    tls.clone(),
                )),
                None if !proxied => {
                    Box::pin(super::tcp::serve_plain(stream, peer, rt.clone(), index))
                }
                _ => Box::pin(super::proxied::serve(
                    stream,
                    peer,
                    key,
                    state.clone(),
                    rt.clone(),
                    index,
                )),
            };
            let mut task = Boxed { serve, guard };
            tokio::task::spawn_local(async move { task.run().await })
        }
    };
    if let Some(slot) = state.conns.borrow_mut().get_mut(key) {
        slot.abort = Some(task.abort_handle());
    }
}

/// A connection's serving future, boxed (see [`spawn_plain`] and [`start_connection`]).
pub(crate) type Serve = std::pin::Pin<Box<dyn std::future::Future<Output = CloseReason>>>;

/// Serves connection `key` with `serve` in a task of its own (an unparked HTTP/2 one).
pub(crate) fn spawn_boxed(state: &Rc<WorkerState>, key: usize, serve: Serve, guard: ActiveGuard) {
    let mut task = Boxed { serve, guard };
    let task = tokio::task::spawn_local(async move { task.run().await });
    if let Some(slot) = state.conns.borrow_mut().get_mut(key) {
        slot.abort = Some(task.abort_handle());
    }
}

/// Serves a plain connection, which the future owns once (an `async fn` taking it by value
/// would hold it twice, the argument and the binding: 1,048 bytes against 824, measured).
#[allow(clippy::manual_async_fn)]
fn serve_plain(mut conn: Conn) -> impl std::future::Future<Output = CloseReason> {
    async move { conn.serve().await }
}

/// A connection's task: its boxed future (owning the connection), then its guard, dropped in
/// that order (a connection being parked leaves its socket in its slot before the guard looks
/// at it).
struct Boxed {
    serve: Serve,
    guard: ActiveGuard,
}

impl Boxed {
    async fn run(&mut self) {
        self.guard.2 = (&mut self.serve).await;
    }
}

/// Serves plain connection `conn` in slot `key` (accepted or unparked): its first poll runs
/// here, and a task is spawned only if it must wait.
///
/// The connection's future is boxed, as TLS ones are: tokio moves a task's future by value
/// several times between spawn and completion (into its cell, and each `Stage` it writes is a
/// copy of the whole enum), and at 864 bytes those copies cost about 900 instructions per
/// connection (callgrind, `Connection: close` hello). Boxed, the task moves two pointers,
/// for one allocation and one copy of the future.
///
/// The first poll is made inline, with a no-op waker: a connection-per-request client (seed
/// experiment 002) has usually sent its request by the time it is accepted, and is then served
/// and closed within that poll, without a task. tokio allocates a task's cell 128-byte aligned,
/// which glibc serves through `_int_memalign`; with the scheduling and the abort handle that
/// was about 1,000 instructions per connection (`bench/ab_weir.sh`, close row). A future that
/// returns `Pending` has registered the no-op waker; the task's first poll, which tokio makes
/// at once, registers its own before anything can be missed (readiness is kept as state by the
/// reactor, and timers are looked at again on every poll). A panic in that poll closes this
/// connection only, as it would in its task: it is caught here, and the panic hook has
/// counted and logged it.
pub(crate) fn spawn_plain(state: &Rc<WorkerState>, key: usize, conn: Conn, guard: ActiveGuard) {
    let mut serve: Serve = Box::pin(serve_plain(conn));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::future::Future::poll(serve.as_mut(), &mut cx)
    }));
    match polled {
        Ok(std::task::Poll::Pending) => {}
        Ok(std::task::Poll::Ready(reason)) => {
            // The future (owning the connection) goes first, as in `Boxed`.
            drop(serve);
            let mut guard = guard;
            guard.2 = reason;
            return;
        }
        Err(_) => {
            drop(serve);
            return;
        }
    }
    let mut task = Boxed { serve, guard };
    let task = tokio::task::spawn_local(async move { task.run().await });
    if let Some(slot) = state.conns.borrow_mut().get_mut(key) {
        slot.abort = Some(task.abort_handle());
    }
}

#[cfg(test)]
mod tests {
    use super::{serve_plain, Boxed};

    /// The size of what `f` returns, without calling it.
    fn returned<A, R>(_: impl FnOnce(A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A busy plain connection's serving future (boxed, one allocation per connection while it
    /// is not parked), and its task's future (in tokio's task cell). Recorded 2026-11-26; a
    /// change that grows them must say why (and move these figures).
    #[test]
    fn a_plain_connection_stays_small() {
        let serving = returned(serve_plain);
        let task = returned(|mut t: Boxed| async move { t.run().await });
        eprintln!("plain connection: serving future {serving} bytes, task future {task} bytes");
        assert!(
            serving <= SERVING,
            "the serving future grew: {serving} > {SERVING} bytes"
        );
        assert!(task <= TASK, "the task future grew: {task} > {TASK} bytes");
    }

    /// 1,040 and 72 bytes on 2026-11-27 (the task future was 864 bytes before it was boxed).
    /// The serving future was 824 bytes until the request head kept its fields as spans
    /// (`weir_http::Fields`, 16 inline): +216 bytes per busy connection (an idle one is parked
    /// without it), for ~500 instructions less per request (no `Vec<Header>` made). 1,048 since
    /// 2026-11-29: the route's own keep-alive wait (`limits.keepalive_timeout`, issue 53 §4), a
    /// `u32` the connection keeps between requests; parked connections do not hold it.
    const SERVING: usize = 1048;
    const TASK: usize = 72;

    /// A proxied request's upstream phase, boxed once per request (`pipeline/later.rs`
    /// recycles the block), and the pooled-connection path inside it. A new connection's
    /// futures are boxed apart (`proxy::exchange::checkout`): inline, they were 1,700 of the
    /// 3,300 bytes every proxied request allocated. Recorded 2026-11-27 (test build); a change
    /// that grows them must say why and move these figures.
    #[test]
    fn a_proxied_request_future_stays_small() {
        use crate::pipeline::forward::{forward, Plain, Steer};
        use crate::pipeline::RequestCtx;
        use crate::proxy::exchange::checkout;
        use crate::proxy::per_worker::WorkerUpstream;
        use crate::proxy::route::ProxyRoute;
        use crate::proxy::upstream::Upstream;
        use weir_http::{Persistence, RequestHead};
        type Conn = super::super::conn::Conn;
        type Args = (
            &'static mut Conn,
            &'static mut RequestCtx,
            &'static RequestHead,
            &'static ProxyRoute,
            Persistence,
            &'static mut Plain,
        );
        let whole = returned(|a: Args| forward(a.0, a.1, a.2, a.3, a.4, Steer::default(), a.5));
        let pooled = returned(|a: (&'static WorkerUpstream, &'static Upstream)| {
            checkout(a.0, a.1, 0, true, crate::clock::Mono::now())
        });
        eprintln!("proxied request: upstream phase {whole} bytes, checkout {pooled} bytes");
        assert!(
            whole <= FORWARD,
            "the upstream phase grew: {whole} > {FORWARD} bytes"
        );
        assert!(
            pooled <= CHECKOUT,
            "checkout grew: {pooled} > {CHECKOUT} bytes"
        );
    }

    /// 2,864 and 88 bytes on 2026-11-27: 3,320 and 1,784 before the connect path was boxed,
    /// then 2,288 until the response head kept its fields' spans inline (`weir_http::Fields`,
    /// 128 bytes a copy, where a `Vec<Header>` was an allocation and 16 refcounts a response).
    /// 2,888 since the heads carry the parser's marks (`weir_http::fields::Marks`, 8 bytes a
    /// head; the phase holds several): the relayed lines are picked by bits, ~1,000
    /// instructions less per proxied response. The block is recycled, never allocated anew.
    /// 2,464 and 96 since the response head is parsed into a slot `forward` borrows from (not
    /// moved out of a read future, which held a second one) and the checkout takes the try's
    /// clock reading (8 bytes).
    const FORWARD: usize = 2464;
    const CHECKOUT: usize = 96;
}
