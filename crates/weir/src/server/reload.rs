//! A reload: the new config swapped in, with the listeners it adds bound first and the ones
//! it removes stopped, kept listeners following changed socket options, and a kept
//! listener's HTTP/3 (`quic`) started or stopped.

use std::net::SocketAddr;
use std::sync::Arc;

use super::listener::{self, ListenSocket};
use super::{bind_listener, endpoint_of, state, unlink_all, Bound, Files, ServerHandle};
use crate::runtime::{ListenerId, RuntimeConfig};

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
    /// Listeners are matched by address (and admin or not): new ones are bound first (a
    /// failure refuses the whole reload, naming the listener, and nothing changes), and start
    /// accepting once the config is swapped; removed ones stop accepting, and their open
    /// connections answer the request they are on with `Connection: close`. The worker count
    /// is fixed at start: a config that changes it is refused.
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
        let workers = self.changes.len();
        let mut added: Vec<(ListenerId, SocketAddr, Vec<ListenSocket>, Files)> = Vec::new();
        for l in cfg
            .listeners
            .iter()
            .filter(|l| old.listener_index(&l.id).is_none())
        {
            let mut files = Files::default();
            let bound = bind_listener(l, workers, cfg.limits.backlog, &mut Vec::new(), &mut files);
            // A unix socket file bound for a listener added earlier in this loop goes when a
            // later one fails: the reload changes nothing.
            let (addr, sockets) = match bound {
                Ok(b) => b,
                Err(e) => {
                    for (_, _, _, files) in &added {
                        unlink_all(&files.bound);
                    }
                    return Err(ReloadError(format!("new listener: {e}")));
                }
            };
            added.push((l.id, addr, sockets, files));
        }
        let removed: Vec<ListenerId> = old
            .listeners
            .iter()
            .filter(|l| cfg.listener_index(&l.id).is_none())
            .map(|l| l.id)
            .collect();
        // Kept listeners whose `quic` changed: UDP sockets bound now for those turning it on
        // (a failure refuses the reload), and those turning it off, stopped below.
        let (quic_on, quic_off) = self.quic_changes(&old, &cfg, workers)?;
        let registry = cfg.registry.clone();
        let cfg = Arc::new(cfg);
        cfg.acme.iter().for_each(|a| a.start());
        self.published.store(cfg.clone());
        registry.retain(&cfg);
        {
            let mut bound = self.sockets.lock().unwrap_or_else(|e| e.into_inner());
            let mut addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
            // Kept listeners follow a changed `timeouts.header` or `defer_accept`.
            for b in bound
                .iter()
                .filter(|b| !matches!(b.socket, ListenSocket::Udp(_)))
            {
                let (Some(was), Some(now)) = (
                    old.listener_index(&b.id)
                        .map(|i| old.listeners[i].defer_secs),
                    cfg.listener_index(&b.id)
                        .map(|i| cfg.listeners[i].defer_secs),
                ) else {
                    continue;
                };
                if was != now {
                    if let Err(e) = listener::set_defer_accept(&b.socket, now) {
                        tracing::warn!(addr = %b.addr, error = %e, "cannot change TCP_DEFER_ACCEPT");
                    }
                }
            }
            // Kept unix listeners follow a changed `unix_mode` (their file, if still theirs).
            let files = self.unix_files.lock().unwrap_or_else(|e| e.into_inner());
            for (id, path, file) in files.iter() {
                let mode = |c: &RuntimeConfig| {
                    c.listener_index(id)
                        .and_then(|i| c.listeners[i].unix.as_ref().and_then(|u| u.mode))
                };
                if let (Some(now), true) = (mode(&cfg), mode(&cfg) != mode(&old)) {
                    listener::set_unix_mode(path, *file, now);
                }
            }
            drop(files);
            bound.retain(|b| !removed.contains(&b.id));
            bound.retain(|b| {
                !(quic_off.contains(&b.id) && matches!(b.socket, ListenSocket::Udp(_)))
            });
            for id in &quic_off {
                tracing::info!(address = %id.address, "HTTP/3 turned off: its QUIC endpoint stops");
                for w in &self.changes {
                    let _ = w.send(state::ListenerChange::RemoveQuic(*id));
                }
            }
            for (id, addr, sockets) in quic_on {
                tracing::info!(address = %addr, "HTTP/3 turned on");
                for (n, socket) in sockets.into_iter().enumerate() {
                    if let Ok(copy) = socket.try_clone() {
                        bound.push(Bound {
                            id,
                            addr,
                            endpoint: super::listener::Endpoint::Udp(addr),
                            socket: copy,
                        });
                    }
                    let _ = self.changes[n % workers]
                        .send(state::ListenerChange::Add(state::Listening { socket, id }));
                }
            }
            addrs.retain(|(id, _)| !removed.contains(id));
            for id in &removed {
                let shown = old
                    .listener_index(id)
                    .map_or_else(|| id.address.to_string(), |i| old.listeners[i].shown());
                tracing::info!(address = %shown, "listener removed: it stops accepting");
                for w in &self.changes {
                    let _ = w.send(state::ListenerChange::Remove(*id));
                }
            }
            let mut unix_files = self.unix_files.lock().unwrap_or_else(|e| e.into_inner());
            for (_, path, file) in unix_files.iter().filter(|(id, ..)| removed.contains(id)) {
                listener::unlink_unix(path, *file);
            }
            unix_files.retain(|(id, ..)| !removed.contains(id));
            for (id, addr, sockets, files) in added {
                let l = &cfg.listeners[cfg.listener_index(&id).unwrap_or_default()];
                if let Some(first) = sockets.first() {
                    let endpoint = endpoint_of(l, first, addr, &files.all);
                    tracing::info!(address = %endpoint, "listener added");
                }
                addrs.push((id, addr));
                for (n, socket) in sockets.into_iter().enumerate() {
                    if let Ok(copy) = socket.try_clone() {
                        bound.push(Bound {
                            id,
                            addr,
                            endpoint: endpoint_of(l, &socket, addr, &files.all),
                            socket: copy,
                        });
                    }
                    let _ = self.changes[n % workers]
                        .send(state::ListenerChange::Add(state::Listening { socket, id }));
                }
                unix_files.extend(files.all);
            }
        }
        self.reloaded.send_modify(|g| *g += 1);
        tracing::info!("configuration reloaded");
        Ok(())
    }

    /// The kept listeners whose `quic` a reload from `old` to `new` turns on, with their new
    /// UDP sockets, and those it turns off.
    #[allow(clippy::type_complexity)]
    fn quic_changes(
        &self,
        old: &RuntimeConfig,
        new: &RuntimeConfig,
        workers: usize,
    ) -> Result<
        (
            Vec<(ListenerId, SocketAddr, Vec<ListenSocket>)>,
            Vec<ListenerId>,
        ),
        ReloadError,
    > {
        let addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut on = Vec::new();
        let mut off = Vec::new();
        for l in &new.listeners {
            let Some(was) = old.listener_index(&l.id).map(|i| &old.listeners[i]) else {
                continue;
            };
            match (was.quic.is_some(), l.quic.is_some()) {
                (false, true) => {
                    let addr = addrs
                        .iter()
                        .find(|(id, _)| *id == l.id)
                        .map_or(l.address, |(_, a)| *a);
                    let sockets = super::udp_sockets_for(l, addr, workers, &mut Vec::new())
                        .map_err(|e| ReloadError(format!("quic: {e}")))?;
                    on.push((l.id, addr, sockets));
                }
                (true, false) => off.push(l.id),
                _ => {}
            }
        }
        Ok((on, off))
    }
}
