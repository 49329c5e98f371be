//! One worker thread: a current-thread tokio runtime, an accept loop per listener, and one task
//! per connection. Connection counting is per worker (`max_connections / workers` each), in a
//! `Cell`: no atomics on the accept path. At the limit the worker stops accepting and new
//! connections wait in the kernel's backlog, as nginx and HAProxy do.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use super::conn::Conn;
use crate::config::RuntimeConfig;

/// A listening socket handed to a worker.
#[derive(Debug)]
pub(crate) struct Listening {
    pub socket: std::net::TcpListener,
    /// Index into `cfg.listeners`.
    pub listener: usize,
}

/// State shared by the tasks of one worker.
#[derive(Debug)]
pub(crate) struct WorkerState {
    pub cfg: Arc<RuntimeConfig>,
    pub active: Cell<usize>,
    pub max_active: usize,
    pub slot_freed: Notify,
    pub shutdown: watch::Receiver<bool>,
}

/// Decrements the worker's connection count when a connection task ends.
#[derive(Debug)]
pub(crate) struct ActiveGuard(Rc<WorkerState>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get() - 1);
        self.0.slot_freed.notify_one();
    }
}

pub(crate) fn run(
    id: usize,
    cfg: Arc<RuntimeConfig>,
    listening: Vec<Listening>,
    shutdown: watch::Receiver<bool>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = id, error = %e, "cannot start worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let max_active = cfg
        .limits
        .max_connections
        .div_ceil(cfg.workers.max(1))
        .max(1);
    let state = Rc::new(WorkerState {
        cfg: cfg.clone(),
        active: Cell::new(0),
        max_active,
        slot_freed: Notify::new(),
        shutdown: shutdown.clone(),
    });
    local.block_on(&rt, async move {
        for l in listening {
            match TcpListener::from_std(l.socket) {
                Ok(socket) => {
                    tokio::task::spawn_local(accept_loop(state.clone(), socket, l.listener));
                }
                Err(e) => tracing::error!(worker = id, error = %e, "cannot register listener"),
            }
        }
        let mut rx = shutdown;
        let _ = rx.wait_for(|s| *s).await;
        let deadline = tokio::time::Instant::now() + cfg.timeouts.shutdown;
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

async fn accept_loop(state: Rc<WorkerState>, listener: TcpListener, index: usize) {
    let mut shutdown = state.shutdown.clone();
    let routes = state.cfg.listeners[index].routes.clone();
    loop {
        while state.active.get() >= state.max_active {
            tokio::select! {
                _ = state.slot_freed.notified() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                state.active.set(state.active.get() + 1);
                let guard = ActiveGuard(state.clone());
                let conn = Conn::new(stream, peer, state.clone(), routes.clone());
                tokio::task::spawn_local(async move {
                    conn.serve().await;
                    drop(guard);
                });
            }
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: back off instead of spinning on a full table.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
