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

use std::collections::HashMap;

use super::listener::ListenSocket;
use super::state::{reserve_fd, ListenerChange, Listening, WorkerState};
use crate::runtime::{Published, WorkerRuntime};

mod accept;
mod sweep;

use accept::{accept_loop, Accepting};

use sweep::{sweep_tick, sweeper};

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
    // Not held for the worker's life: a replaced config is let go of when the worker takes
    // the next (a queue of spans and its exporter thread stayed behind: issue 55's review).
    drop(cfg);
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

#[cfg(test)]
mod tests {
    use crate::server::spawn::{serve_plain, Boxed};

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
    /// `u32` the connection keeps between requests; parked connections do not hold it. 1,088
    /// with the request's trace context inline (`RequestCtx::trace`, issue 55 §4): boxed, its
    /// allocation was most of tracing's cost on a request not sampled (a proxied request at
    /// 1.055× its instructions with 1% sampled; 1.037× inline).
    const SERVING: usize = 1088;
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
        type Conn = super::super::http1::Conn;
        type Args = (
            &'static mut Conn,
            &'static mut RequestCtx,
            &'static RequestHead,
            &'static ProxyRoute,
            Persistence,
            &'static mut Plain,
        );
        let whole = returned(|a: Args| forward(a.0, a.1, a.2, a.3, a.4, Steer::default(), a.5));
        type Shared = (
            &'static std::rc::Rc<WorkerUpstream>,
            &'static std::sync::Arc<Upstream>,
        );
        let pooled = returned(|a: Shared| checkout(a.0, a.1, 0, true, crate::clock::Mono::now()));
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
    /// clock reading (8 bytes). 2,496 since a gRPC call's own deadline (`grpc-timeout`, 16
    /// bytes) and its full-duplex pump (a pointer: the pump itself is boxed, for calls only)
    /// are kept through the exchange (issue 55 §3). 2,504 with the upstream's trace context
    /// lines (a boxed pointer in `Target`: inline they cost 144 bytes, tracing on or off).
    /// 2,568 with a gRPC call's `stream_idle` and the traced tries (issue 55: the trace lines
    /// are written from `RequestCtx::trace` with the try's parent, no box; the block is
    /// recycled).
    const FORWARD: usize = 2568;
    const CHECKOUT: usize = 96;
}
