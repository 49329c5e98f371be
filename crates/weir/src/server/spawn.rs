//! Starting a connection's task: its serving future boxed with its slot's guard
//! ([`spawn_boxed`]), or a plain connection's first poll made inline ([`spawn_plain`]). Used by
//! the worker (accepted connections) and `park.rs` (parked ones served again).

use std::rc::Rc;

use super::http1::Conn;
use super::state::{ActiveGuard, WorkerState};
use crate::metrics::CloseReason;

/// A connection's serving future, boxed (see [`spawn_plain`] and the worker's
/// `start_connection`).
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
pub(crate) fn serve_plain(mut conn: Conn) -> impl std::future::Future<Output = CloseReason> {
    async move { conn.serve().await }
}

/// A connection's task: its boxed future (owning the connection), then its guard, dropped in
/// that order (a connection being parked leaves its socket in its slot before the guard looks
/// at it).
pub(crate) struct Boxed {
    pub serve: Serve,
    pub guard: ActiveGuard,
}

impl Boxed {
    pub(crate) async fn run(&mut self) {
        let reason = (&mut self.serve).await;
        self.guard.set_reason(reason);
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
            guard.set_reason(reason);
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
