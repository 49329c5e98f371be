//! The server: thread-per-core workers, each a tokio current-thread runtime with its own
//! SO_REUSEPORT listening sockets. A connection lives and dies on one worker, so the request path
//! takes no locks and shares nothing but the read-only compiled config.
//!
//! Lifecycle: [`start`] binds every socket on the calling thread first (so "address in use" is an
//! error at start, and port 0 resolves to one port all workers share), then spawns the workers.
//! [`ServerHandle::shutdown`] starts a graceful shutdown: workers stop accepting, idle connections
//! are closed, in-flight requests finish with `Connection: close`, and whatever is left when
//! `timeouts.shutdown` expires is cut.

mod client_io;
mod conn;
pub mod handoff;
mod listener;
mod worker;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::runtime::{Published, RuntimeConfig};

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The config requests start on; swapped by [`ServerHandle::reload`].
    published: Arc<Published>,
    /// Tells the health thread the upstreams may have changed.
    reloaded: watch::Sender<u64>,
    addrs: Vec<SocketAddr>,
    admin: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    /// Set before `shutdown` for a drain: idle connections stay until their next request
    /// (answered with `Connection: close`) or the shutdown deadline, instead of closing at once.
    drain: Arc<AtomicBool>,
    /// A duplicate of every listening socket, for handing them to a new process; emptied when
    /// shutdown begins, so that the sockets close with the workers' copies.
    sockets: SharedSockets,
    threads: Vec<JoinHandle<()>>,
}

/// The listening sockets a server can hand over (see [`ServerHandle::handoff_sockets`]).
pub type SharedSockets = Arc<std::sync::Mutex<Vec<(SocketAddr, TcpListener)>>>;

/// Binds all listeners and starts the workers.
pub fn start(cfg: RuntimeConfig) -> io::Result<ServerHandle> {
    start_with(cfg, Vec::new())
}

/// Starts the workers on `inherited` listening sockets where their address is a listener's
/// (a binary upgrade: see [`handoff`]), binding the others. Every inherited socket of a
/// listener is served (several per worker when there are more sockets than workers), so no
/// accept queue of the old process is left unread; inherited sockets no listener names are
/// closed.
pub fn start_with(
    cfg: RuntimeConfig,
    mut inherited: Vec<(SocketAddr, TcpListener)>,
) -> io::Result<ServerHandle> {
    let cfg = Arc::new(cfg);
    let workers = cfg.workers.max(1);
    let mut per_worker: Vec<Vec<worker::Listening>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    let mut admin = None;
    let mut sockets = Vec::new();
    for (i, l) in cfg.listeners.iter().enumerate() {
        let with_addr = |e: io::Error, a: SocketAddr| {
            io::Error::new(e.kind(), format!("cannot listen on {a}: {e}"))
        };
        let (theirs, rest): (Vec<_>, Vec<_>) = inherited
            .into_iter()
            .partition(|(a, _)| *a == l.address && l.address.port() != 0);
        inherited = rest;
        if !theirs.is_empty() {
            let actual = l.address;
            if l.admin {
                admin = Some(actual);
            } else {
                addrs.push(actual);
            }
            let mut mine: Vec<TcpListener> = theirs.into_iter().map(|(_, s)| s).collect();
            while mine.len() < workers {
                mine.push(
                    listener::bind(actual, cfg.limits.backlog, l.defer_accept)
                        .map_err(|e| with_addr(e, actual))?,
                );
            }
            for (n, socket) in mine.into_iter().enumerate() {
                sockets.push((actual, socket.try_clone()?));
                per_worker[n % workers].push(worker::Listening {
                    socket,
                    listener: i,
                });
            }
            continue;
        }
        listener::check_free(l.address).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::AddrInUse {
                "is in use by another process (another weir? stop it first: two processes \
                 sharing a port would each get a share of its connections)"
                    .to_string()
            } else {
                format!("cannot be bound: {e}")
            };
            io::Error::new(e.kind(), format!("{}: {} {why}", l.origin(), l.address))
        })?;
        let first = listener::bind(l.address, cfg.limits.backlog, l.defer_accept)
            .map_err(|e| with_addr(e, l.address))?;
        let actual = first.local_addr()?;
        if l.admin {
            admin = Some(actual);
        } else {
            addrs.push(actual);
        }
        sockets.push((actual, first.try_clone()?));
        per_worker[0].push(worker::Listening {
            socket: first,
            listener: i,
        });
        for w in per_worker.iter_mut().skip(1) {
            let socket = listener::bind(actual, cfg.limits.backlog, l.defer_accept)
                .map_err(|e| with_addr(e, actual))?;
            sockets.push((actual, socket.try_clone()?));
            w.push(worker::Listening {
                socket,
                listener: i,
            });
        }
    }
    for (addr, _) in &inherited {
        tracing::warn!(%addr, "a handed-over socket matches no listener: closed");
    }
    drop(inherited);
    let drain = Arc::new(AtomicBool::new(false));
    let (tx, rx) = watch::channel(false);
    let (reloaded, generation) = watch::channel(0u64);
    let published = Arc::new(Published::new(cfg));
    let mut threads = Vec::with_capacity(workers + 1);
    let current = published.clone();
    threads.push(crate::proxy::health::spawn(
        move || current.load().upstreams.clone(),
        generation,
        rx.clone(),
    )?);
    for (id, listening) in per_worker.into_iter().enumerate() {
        let published = published.clone();
        let rx = rx.clone();
        let drain = drain.clone();
        let t = std::thread::Builder::new()
            .name(format!("weir-worker-{id}"))
            .spawn(move || worker::run(id, published, listening, rx, drain))?;
        threads.push(t);
    }
    Ok(ServerHandle {
        published,
        reloaded,
        addrs,
        admin,
        shutdown: tx,
        drain,
        sockets: Arc::new(std::sync::Mutex::new(sockets)),
        threads,
    })
}

/// Why a new config was not swapped in (the running one stays).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadError(pub String);

impl std::fmt::Display for ReloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReloadError {}

impl ServerHandle {
    /// Swaps in `cfg`, compiled against [`ServerHandle::registry`]: requests that start from
    /// now on run on it; requests in flight finish on the config they began with. Cache zones,
    /// their objects and upstream health carry over by name (`runtime/registry.rs`).
    ///
    /// Listeners and the worker count are bound at start: a config that changes them is
    /// refused, and the running config stays.
    pub fn reload(&self, cfg: RuntimeConfig) -> Result<(), ReloadError> {
        let old = self.published.load();
        if !Arc::ptr_eq(&cfg.registry, &old.registry) {
            return Err(ReloadError(
                "the new config was not compiled against this server's registry".into(),
            ));
        }
        if cfg.workers != old.workers {
            return Err(ReloadError(format!(
                "workers: changing it ({} → {}) needs a restart",
                old.workers, cfg.workers
            )));
        }
        let same_listeners = cfg.listeners.len() == old.listeners.len()
            && cfg
                .listeners
                .iter()
                .zip(&old.listeners)
                .all(|(a, b)| a.address == b.address && a.admin == b.admin);
        if !same_listeners {
            return Err(ReloadError(
                "listeners: adding, removing or moving a listener needs a restart".into(),
            ));
        }
        let registry = cfg.registry.clone();
        let cfg = Arc::new(cfg);
        self.published.store(cfg.clone());
        registry.retain(&cfg);
        self.reloaded.send_modify(|g| *g += 1);
        tracing::info!("configuration reloaded");
        Ok(())
    }

    /// The registry the running config was compiled against: compile a new config against it
    /// (`runtime::compile_str`) to [`ServerHandle::reload`] it.
    pub fn registry(&self) -> Arc<crate::runtime::Registry> {
        self.published.load().registry.clone()
    }

    /// The config requests start on now.
    pub fn config(&self) -> Arc<RuntimeConfig> {
        self.published.load()
    }

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
        self.sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.shutdown.send_replace(true);
    }

    /// Starts a drain, for when another process took over the listening sockets: stop
    /// accepting, let every idle connection serve one more request with `Connection: close`
    /// (closing idle ones at once would race with requests clients are sending on them), and
    /// cut what is left at `timeouts.shutdown`. Returns at once.
    pub fn drain(&self) {
        self.drain.store(true, Ordering::SeqCst);
        self.shutdown();
    }

    /// Every listening socket (one per listener and worker), for [`handoff::send`]; empty once
    /// shutdown began. Hold the lock while sending: shutdown closes them under it.
    pub fn handoff_sockets(&self) -> SharedSockets {
        self.sockets.clone()
    }

    /// Waits for every worker to finish (call [`ServerHandle::shutdown`] first), then for the
    /// access log writers to write what the workers handed them.
    pub fn join(mut self) {
        self.join_threads();
    }

    fn join_threads(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for sink in self.published.load().registry.sinks.all() {
            sink.sync(std::time::Duration::from_secs(2));
        }
    }

    /// Waits until the access log lines of requests answered so far are written (up to `wait`
    /// per log): the workers hand over their buffers at least once per sweeper tick.
    pub fn sync_logs(&self, wait: std::time::Duration) {
        for sink in self.published.load().registry.sinks.all() {
            sink.sync(wait);
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
        self.join_threads();
    }
}
