//! The server: thread-per-core workers, each a tokio current-thread runtime with its own
//! SO_REUSEPORT listening sockets. A connection lives and dies on one worker, so the request path
//! takes no locks and shares nothing but the read-only compiled config.
//!
//! Lifecycle: [`start`] binds every socket on the calling thread first (so "address in use" is an
//! error at start, and port 0 resolves to one port all workers share), then spawns the workers.
//! [`ServerHandle::shutdown`] starts a graceful shutdown: workers stop accepting, idle connections
//! are closed, in-flight requests finish with `Connection: close`, and whatever is left when
//! `timeouts.shutdown` expires is cut.

mod cache_stage;
mod client_io;
mod conn;
mod forward;
mod listener;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::config::RuntimeConfig;
pub(crate) use forward::up_candidates;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addrs: Vec<SocketAddr>,
    admin: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

/// Binds all listeners and starts the workers.
pub fn start(cfg: RuntimeConfig) -> io::Result<ServerHandle> {
    let cfg = Arc::new(cfg);
    let workers = cfg.workers.max(1);
    let mut per_worker: Vec<Vec<worker::Listening>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    let mut admin = None;
    for (i, l) in cfg.listeners.iter().enumerate() {
        let with_addr = |e: io::Error, a: SocketAddr| {
            io::Error::new(e.kind(), format!("cannot listen on {a}: {e}"))
        };
        let first = listener::bind(l.address, cfg.limits.backlog, l.defer_accept)
            .map_err(|e| with_addr(e, l.address))?;
        let actual = first.local_addr()?;
        if l.admin {
            admin = Some(actual);
        } else {
            addrs.push(actual);
        }
        per_worker[0].push(worker::Listening {
            socket: first,
            listener: i,
        });
        for w in per_worker.iter_mut().skip(1) {
            let socket = listener::bind(actual, cfg.limits.backlog, l.defer_accept)
                .map_err(|e| with_addr(e, actual))?;
            w.push(worker::Listening {
                socket,
                listener: i,
            });
        }
    }
    let (tx, rx) = watch::channel(false);
    let mut threads = Vec::with_capacity(workers + 1);
    if let Some(t) = crate::proxy::health::spawn(cfg.upstreams.clone(), rx.clone()) {
        threads.push(t);
    }
    for (id, listening) in per_worker.into_iter().enumerate() {
        let cfg = cfg.clone();
        let rx = rx.clone();
        let t = std::thread::Builder::new()
            .name(format!("weir-worker-{id}"))
            .spawn(move || worker::run(id, cfg, listening, rx))?;
        threads.push(t);
    }
    Ok(ServerHandle {
        addrs,
        admin,
        shutdown: tx,
        threads,
    })
}

impl ServerHandle {
    /// The bound address of each (non-admin) listener, in config order (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The bound address of the admin listener, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// Starts a graceful shutdown; returns at once.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits for every worker to finish (call [`ServerHandle::shutdown`] first).
    pub fn join(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
