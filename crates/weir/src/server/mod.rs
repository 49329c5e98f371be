//! The server: thread-per-core workers, each a tokio current-thread runtime with its own
//! SO_REUSEPORT listening sockets. A connection lives and dies on one worker, so the request path
//! takes no locks and shares nothing but the read-only compiled config.
//!
//! Lifecycle: [`start`] binds every socket on the calling thread first (so "address in use" is an
//! error at start, and port 0 resolves to one port all workers share), then spawns the workers.
//! [`ServerHandle::shutdown`] starts a graceful shutdown: workers stop accepting, idle connections
//! are closed, in-flight requests finish with `Connection: close`, and whatever is left when
//! `timeouts.shutdown` expires is cut.
//!
//! Layout (issue 54 §2; `python3 bench/tools/folder_deps.py server` checks it: no import circle
//! among these modules, and none imports back up into its folder's `mod.rs`):
//! - [`state`]: what a worker's tasks share (`WorkerState`, the connection slots, budgets) and
//!   how an idle connection hands its parts back to its slot (`park_conn`, `park_h2`). A leaf:
//!   every protocol takes the worker's state from here, never from the worker.
//! - [`parked`]: what a parked connection keeps (data only).
//! - `worker`: the worker thread (its runtime, listeners, sweeper); `worker/accept.rs` accepts
//!   and starts connections; [`spawn`] gives a connection its task.
//! - [`park`]: the idle epoll, and parked connections served again (it imports the protocols;
//!   they do not import it).
//! - Protocols: `http1/` (HTTP/1.1, plain and TLS, h2c's sniffing: the serve loop in `mod.rs`,
//!   the connection's state in `conn.rs`, its `Downstream` side in `downstream.rs`), `h2/`
//!   (HTTP/2 on weir-h2), `h3/` (HTTP/3), `tls` (handshakes, ALPN), `proxied` (PROXY headers).
//!   HTTP/2 and HTTP/3 streams queue what they send in one [`outbox`] type. A `tcp:` listener's
//!   connection, once accepted, goes to `pipeline/tcp.rs`.
//! - Sockets: a client is a `crate::client_socket` (TCP or unix, one type); `client_io` is the
//!   HTTP/1.1 connection's IO over it (lazy registration, TLS records), `uring/` its io_uring
//!   transport; `listener`, `handoff` and `reload` bind, pass and swap listening sockets.
//! - Upgrades relay through `pipeline::downstream::Tunnel` (any byte stream), and nothing here
//!   imports `proxy/`: upstream health checks are `crate::health`, started by [`start`].

mod client_io;
mod h2;
mod h3;
pub mod handoff;
mod http1;
mod listener;
mod outbox;
mod park;
mod parked;
mod proxied;
mod reload;
mod spawn;
mod state;
mod tls;
#[cfg(feature = "uring")]
mod uring;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::runtime::{ListenerConfig, ListenerId, Published, RuntimeConfig};

pub use reload::ReloadError;

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The config requests start on; swapped by [`ServerHandle::reload`].
    published: Arc<Published>,
    /// Tells the health thread the upstreams may have changed.
    reloaded: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    /// Set before `shutdown` for a drain: idle connections stay until their next request
    /// (answered with `Connection: close`) or the shutdown deadline, instead of closing at once.
    drain: Arc<AtomicBool>,
    /// A duplicate of every listening socket, with its listener and bound address: for handing
    /// them to a new process, and for the bound addresses. Emptied when shutdown begins, so that
    /// the sockets close with the workers' copies.
    sockets: SharedSockets,
    /// The bound address of each listener.
    addrs: std::sync::Mutex<Vec<(ListenerId, SocketAddr)>>,
    /// The socket files of unix listeners this server bound, with their identity: removed at
    /// shutdown (not after a hand-over: the new process serves on them) and when a reload
    /// removes their listener.
    unix_files: std::sync::Mutex<Vec<SocketFile>>,
    /// Each worker's channel for listeners added or removed by a reload.
    changes: Vec<tokio::sync::mpsc::UnboundedSender<state::ListenerChange>>,
    threads: Vec<JoinHandle<()>>,
}

/// A unix socket file's identity (device, inode).
type FileId = (u64, u64);

/// A unix listener's socket file: its listener, path and identity.
type SocketFile = (ListenerId, std::path::PathBuf, FileId);

/// One listening socket of a running server.
#[derive(Debug)]
pub struct Bound {
    pub id: ListenerId,
    /// The address it is bound to (port 0 resolved; `UNIX_PEER` for a unix socket).
    pub addr: SocketAddr,
    /// The address or path, as the hand-over names it.
    pub endpoint: Endpoint,
    pub socket: ListenSocket,
}

/// The listening sockets a server can hand over (see [`ServerHandle::handoff_sockets`]).
pub type SharedSockets = Arc<std::sync::Mutex<Vec<Bound>>>;

/// Whether `addr` can be bound now (`weir check`): nothing holds it and this user may bind it.
pub fn check_bind(addr: std::net::SocketAddr) -> io::Result<()> {
    listener::check_free(addr)
}

pub use listener::{Endpoint, ListenSocket};

/// Whether unix listener `u` can be bound now (`weir check`): nobody answers on its socket file
/// and its directory exists. Nothing is created or removed.
pub fn check_bind_unix(u: &crate::runtime::UnixListen) -> io::Result<()> {
    match listener::probe_unix(&u.path)? {
        listener::Probe::Live => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "a process is listening on this socket",
        )),
        listener::Probe::Stale => Ok(()),
        listener::Probe::Free => {
            let dir = u.path.parent().unwrap_or(std::path::Path::new("/"));
            match std::fs::metadata(dir) {
                Ok(d) if d.is_dir() => Ok(()),
                _ => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("directory {} does not exist", dir.display()),
                )),
            }
        }
    }
}

/// The sockets of unix listener `l` (one, shared by the workers: SO_REUSEPORT does not apply to
/// unix sockets, so each worker polls a duplicate of the same socket and the kernel wakes one
/// of them per connection), inherited or bound now, and the identity of the socket file this
/// process may remove at shutdown: the one it bound, or the one the previous process says it
/// bound if that is still the file at the path (`None`: another file is there, left alone).
fn unix_sockets_for(
    l: &ListenerConfig,
    u: &crate::runtime::UnixListen,
    workers: usize,
    backlog: u32,
    inherited: &mut Vec<(Endpoint, ListenSocket)>,
) -> io::Result<(Vec<ListenSocket>, Option<FileId>, bool)> {
    let endpoint = Endpoint::Unix(u.path.clone(), None);
    let (theirs, rest): (Vec<_>, Vec<_>) = std::mem::take(inherited)
        .into_iter()
        .partition(|(e, _)| e.same_place(&endpoint));
    *inherited = rest;
    let sent = theirs.iter().find_map(|(e, _)| match e {
        Endpoint::Unix(_, id) => *id,
        Endpoint::Tcp(_) | Endpoint::Udp(_) => None,
    });
    let mut mine: Vec<ListenSocket> = theirs.into_iter().map(|(_, s)| s).collect();
    let fresh = mine.is_empty();
    let file = if fresh {
        let socket = listener::bind_unix(u, backlog).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: cannot listen on {endpoint}: {e}", l.origin()),
            )
        })?;
        mine.push(ListenSocket::Unix(socket));
        listener::file_id(&u.path)
    } else {
        let file = sent.filter(|id| listener::file_id(&u.path) == Some(*id));
        // The mode this config asks for (a binary upgrade may bring a new one).
        if let (Some(id), Some(mode)) = (file, u.mode) {
            listener::set_unix_mode(&u.path, id, mode);
        }
        file
    };
    while mine.len() < workers {
        let copy = mine[0].try_clone()?;
        mine.push(copy);
    }
    Ok((mine, file, fresh))
}

/// Binds all listeners and starts the workers.
pub fn start(cfg: RuntimeConfig) -> io::Result<ServerHandle> {
    start_with(cfg, Vec::new())
}

/// The sockets of listener `l`, one per worker at least: the `inherited` ones bound to its
/// address (taken out of the list), topped up with new ones; or all new, after checking that no
/// other process listens there. Returns the bound address with them.
fn sockets_for(
    l: &ListenerConfig,
    workers: usize,
    backlog: u32,
    inherited: &mut Vec<(Endpoint, ListenSocket)>,
) -> io::Result<(SocketAddr, Vec<ListenSocket>)> {
    let with_addr = |e: io::Error, a: SocketAddr| {
        io::Error::new(e.kind(), format!("cannot listen on {a}: {e}"))
    };
    let (theirs, rest): (Vec<_>, Vec<_>) = std::mem::take(inherited)
        .into_iter()
        .partition(|(a, _)| *a == Endpoint::Tcp(l.address) && l.address.port() != 0);
    *inherited = rest;
    let mut mine: Vec<ListenSocket> = theirs.into_iter().map(|(_, s)| s).collect();
    let actual = if mine.is_empty() {
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
        let first = listener::bind(l.address, backlog, l.defer_secs)
            .map_err(|e| with_addr(e, l.address))?;
        let actual = first.local_addr()?;
        mine.push(ListenSocket::Tcp(first));
        actual
    } else {
        l.address
    };
    while mine.len() < workers {
        let more =
            listener::bind(actual, backlog, l.defer_secs).map_err(|e| with_addr(e, actual))?;
        mine.push(ListenSocket::Tcp(more));
    }
    if l.quic.is_some() {
        mine.extend(udp_sockets_for(l, actual, workers, inherited)?);
    }
    Ok((actual, mine))
}

/// The UDP sockets of QUIC listener `l` at `actual` (its TCP address): the inherited ones, or
/// one new one per worker after checking that no other process holds the port.
pub(super) fn udp_sockets_for(
    l: &ListenerConfig,
    actual: SocketAddr,
    workers: usize,
    inherited: &mut Vec<(Endpoint, ListenSocket)>,
) -> io::Result<Vec<ListenSocket>> {
    let (theirs, rest): (Vec<_>, Vec<_>) = std::mem::take(inherited)
        .into_iter()
        .partition(|(a, _)| *a == Endpoint::Udp(actual));
    *inherited = rest;
    let mut mine: Vec<ListenSocket> = theirs.into_iter().map(|(_, s)| s).collect();
    if mine.is_empty() {
        listener::check_free_udp(actual).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: UDP {actual} (quic) cannot be bound: {e}", l.origin()),
            )
        })?;
    }
    while mine.len() < workers {
        let more = listener::bind_udp(actual)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on UDP {actual}: {e}")))?;
        mine.push(ListenSocket::Udp(more));
    }
    Ok(mine)
}

/// The socket files of unix listeners: every one this process removes at shutdown, and those
/// of them it bound itself (removed if its start fails).
#[derive(Debug, Default)]
struct Files {
    all: Vec<SocketFile>,
    bound: Vec<SocketFile>,
}

/// The sockets of listener `l`, TCP or unix (see [`sockets_for`], [`unix_sockets_for`]); a unix
/// socket file is added to `files`.
fn bind_listener(
    l: &ListenerConfig,
    workers: usize,
    backlog: u32,
    inherited: &mut Vec<(Endpoint, ListenSocket)>,
    files: &mut Files,
) -> io::Result<(SocketAddr, Vec<ListenSocket>)> {
    match &l.unix {
        None => sockets_for(l, workers, backlog, inherited),
        Some(u) => {
            let (sockets, file, fresh) = unix_sockets_for(l, u, workers, backlog, inherited)?;
            if let Some(file) = file {
                files.all.push((l.id, u.path.clone(), file));
                if fresh {
                    files.bound.push((l.id, u.path.clone(), file));
                }
            }
            Ok((l.address, sockets))
        }
    }
}

/// How the hand-over names `socket`, one of listener `l`'s (with the socket file it bound, in
/// `files`).
fn endpoint_of(
    l: &ListenerConfig,
    socket: &ListenSocket,
    actual: SocketAddr,
    files: &[SocketFile],
) -> Endpoint {
    if let ListenSocket::Udp(_) = socket {
        return Endpoint::Udp(actual);
    }
    match &l.unix {
        Some(u) => Endpoint::Unix(
            u.path.clone(),
            files
                .iter()
                .find(|(id, ..)| *id == l.id)
                .map(|(_, _, f)| *f),
        ),
        None => Endpoint::Tcp(actual),
    }
}

/// Starts the workers on `inherited` listening sockets where their address is a listener's
/// (a binary upgrade: see [`handoff`]), binding the others. Every inherited socket of a
/// listener is served (several per worker when there are more sockets than workers), so no
/// accept queue of the old process is left unread; inherited sockets no listener names are
/// closed.
pub fn start_with(
    cfg: RuntimeConfig,
    mut inherited: Vec<(Endpoint, ListenSocket)>,
) -> io::Result<ServerHandle> {
    crate::logs::install_panic_hook();
    let cfg = Arc::new(cfg);
    cfg.acme.iter().for_each(|a| a.start());
    let workers = cfg.workers.max(1);
    let mut per_worker: Vec<Vec<state::Listening>> = (0..workers).map(|_| Vec::new()).collect();
    let mut sockets = Vec::new();
    let mut addrs = Vec::new();
    let mut unix_files = Files::default();
    for l in &cfg.listeners {
        let bound = bind_listener(
            l,
            workers,
            cfg.limits.backlog,
            &mut inherited,
            &mut unix_files,
        );
        let (actual, mine) = match bound {
            Ok(b) => b,
            Err(e) => {
                // The socket files bound for the listeners before this one go with the failure
                // (inherited ones stay: the previous process still serves on them).
                unlink_all(&unix_files.bound);
                return Err(e);
            }
        };
        addrs.push((l.id, actual));
        for (n, socket) in mine.into_iter().enumerate() {
            sockets.push(Bound {
                id: l.id,
                addr: actual,
                endpoint: endpoint_of(l, &socket, actual, &unix_files.all),
                socket: socket.try_clone()?,
            });
            per_worker[n % workers].push(state::Listening { socket, id: l.id });
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
    threads.push(crate::health::spawn(
        move || current.load().upstreams.clone(),
        generation,
        rx.clone(),
    )?);
    let mut changes = Vec::with_capacity(workers);
    for (id, listening) in per_worker.into_iter().enumerate() {
        let published = published.clone();
        let rx = rx.clone();
        let drain = drain.clone();
        let (change_tx, change_rx) = tokio::sync::mpsc::unbounded_channel();
        changes.push(change_tx);
        let t = std::thread::Builder::new()
            .name(format!("weir-worker-{id}"))
            .spawn(move || worker::run(id, published, listening, rx, drain, change_rx))?;
        threads.push(t);
    }
    Ok(ServerHandle {
        published,
        reloaded,
        shutdown: tx,
        drain,
        sockets: Arc::new(std::sync::Mutex::new(sockets)),
        addrs: std::sync::Mutex::new(addrs),
        unix_files: std::sync::Mutex::new(unix_files.all),
        changes,
        threads,
    })
}

/// Removes the unix socket files in `files` that are still the ones bound.
fn unlink_all(files: &[SocketFile]) {
    for (_, path, file) in files {
        listener::unlink_unix(path, *file);
    }
}

impl ServerHandle {
    /// The registry the running config was compiled against: compile a new config against it
    /// (`runtime::compile_str`) to [`ServerHandle::reload`] it.
    pub fn registry(&self) -> Arc<crate::runtime::Registry> {
        self.published.load().registry.clone()
    }

    /// The config requests start on now.
    pub fn config(&self) -> Arc<RuntimeConfig> {
        self.published.load()
    }

    /// The bound address of each (non-admin) listener, in the running config's order (port 0
    /// resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        let cfg = self.published.load();
        let addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        cfg.listeners
            .iter()
            .filter(|l| !l.admin)
            .filter_map(|l| addrs.iter().find(|(id, _)| *id == l.id).map(|(_, a)| *a))
            .collect()
    }

    /// The URL of each listener but the admin one: `https://` on TLS listeners, `tcp://` (or
    /// `tls://`, terminating) on TCP listeners.
    pub fn local_urls(&self) -> Vec<String> {
        let cfg = self.published.load();
        let addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        cfg.listeners
            .iter()
            .filter(|l| !l.admin)
            .filter_map(|l| {
                let (_, a) = addrs.iter().find(|(id, _)| *id == l.id)?;
                if l.unix.is_some() {
                    let kind = match (l.tcp.is_some(), l.tls.is_some()) {
                        (true, false) => "tcp",
                        (true, true) => "tls",
                        (false, true) => "https",
                        (false, false) => "http",
                    };
                    return Some(format!("{} ({kind})", l.shown()));
                }
                Some(match (l.tcp.is_some(), l.tls.is_some()) {
                    (true, false) => format!("tcp://{a}"),
                    (true, true) => format!("tls://{a}"),
                    (false, true) => format!("https://{a}/"),
                    (false, false) => format!("http://{a}/"),
                })
            })
            .collect()
    }

    /// The bound address of the admin listener, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        let addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        addrs.iter().find(|(id, _)| id.admin).map(|(_, a)| *a)
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
        // Certificate work in progress ends with the server (see `tls/acme_threads.rs`).
        let registry = self.published.load().registry.clone();
        registry
            .acme_threads
            .stop(std::time::Duration::from_secs(5));
        // After a hand-over the new process serves on these files.
        if !self.drain.load(Ordering::SeqCst) {
            unlink_all(&self.unix_files.lock().unwrap_or_else(|e| e.into_inner()));
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
