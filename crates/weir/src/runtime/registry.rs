//! State that outlives one config: cache zones (their stores, in-flight and hit-for-miss tables)
//! and each upstream server's health and resolved address. Compiling a config asks the registry
//! for them by name, so the config compiled on reload finds the same zone, the same stored
//! objects and the same health as the one it replaces. Per-worker state (balancers, connection
//! pools, retry budgets) is kept by name in each worker, the same way (`server/worker.rs`).
//!
//! Keys: a zone by its name, and is kept only while its size and shard count are unchanged (a
//! resized zone starts empty: the store's shard layout is fixed at creation). A server by
//! `upstream/host:port`. After a config is published, [`Registry::retain`] forgets what it no
//! longer names; requests still running on the old config keep their `Arc`s until they end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use weir_cache::{Clock, SystemClock};

use crate::cache::CacheZone;
use crate::proxy::upstream::{Health, ServerState, SharedServers};

#[derive(Debug)]
struct Zone {
    max_size: u64,
    shards: usize,
    zone: Arc<CacheZone>,
}

/// Named state shared by every config compiled against it.
#[derive(Debug)]
pub struct Registry {
    clock: Arc<dyn Clock>,
    zones: Mutex<HashMap<String, Zone>>,
    servers: Mutex<HashMap<String, ServerState>>,
    /// Open access log destinations, by target.
    pub sinks: crate::access_log::Sinks,
    /// Every worker's counters (they outlive configs, so counters stay monotonic).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where `POST /reload` asks for a reload (set by `weir run`, which knows the file).
    pub reloader: Mutex<Option<Reloader>>,
    /// TLS ticket keys and the session cache (sessions resume across reloads).
    pub tls: crate::tls::Shared,
    /// The state of named filters (rate-limit and concurrency tables, breakers), by kind,
    /// name and the settings that shape it: a reload that keeps a filter keeps its state, as
    /// nginx keeps a `limit_req` zone of the same size.
    pub filter_state: Arc<crate::filters::state::FilterState>,
    /// The DoS shield's client table and counters (kept across reloads, as nginx keeps a
    /// `limit_conn` zone).
    pub shield: Arc<crate::shield::ShieldState>,
}

/// Asks the process to re-read its config; the answer is `Err(why)` when it kept the old one.
pub type Reloader =
    tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<Result<(), String>>>;

impl Default for Registry {
    fn default() -> Self {
        Registry::with_clock(Arc::new(SystemClock))
    }
}

impl Registry {
    /// A registry whose cache zones run on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Registry {
        Registry {
            clock,
            zones: Mutex::new(HashMap::new()),
            servers: Mutex::new(HashMap::new()),
            sinks: Default::default(),
            metrics: Default::default(),
            reloader: Mutex::new(None),
            tls: Default::default(),
            filter_state: Default::default(),
            shield: Default::default(),
        }
    }

    /// The zone named `name`: the existing one when its size and shards are unchanged.
    pub fn zone(&self, name: &str, max_size: u64, shards: usize) -> Arc<CacheZone> {
        let mut zones = lock(&self.zones);
        if let Some(z) = zones.get(name) {
            if z.max_size == max_size && z.shards == shards {
                return z.zone.clone();
            }
            tracing::warn!(zone = %name, "cache zone resized: it starts empty");
        }
        let zone = Arc::new(CacheZone::new(name, max_size, shards, self.clock.clone()));
        zones.insert(
            name.to_string(),
            Zone {
                max_size,
                shards,
                zone: zone.clone(),
            },
        );
        zone
    }

    /// Forgets zones and servers `cfg` does not name.
    pub fn retain(&self, cfg: &super::RuntimeConfig) {
        self.sinks.retain(&cfg.access_logs);
        let keys: Vec<String> = cfg
            .filters
            .iter()
            .filter_map(|c| c.state_key.clone())
            .collect();
        self.filter_state.retain(&keys);
        lock(&self.zones).retain(|name, _| cfg.cache_zones.iter().any(|z| &z.name == name));
        lock(&self.servers).retain(|key, _| {
            cfg.upstreams.iter().any(|u| {
                key.strip_prefix(u.name.as_str())
                    .and_then(|rest| rest.strip_prefix('/'))
                    .is_some_and(|s| u.servers.iter().any(|x| x.name == s))
            })
        });
    }

    /// Number of zones and servers held (for tests of `retain`).
    pub fn len(&self) -> (usize, usize) {
        (lock(&self.zones).len(), lock(&self.servers).len())
    }
}

impl SharedServers for Registry {
    fn server(&self, upstream: &str, server: &str, addr: SocketAddr) -> ServerState {
        let mut servers = lock(&self.servers);
        let state = servers
            .entry(format!("{upstream}/{server}"))
            .or_insert_with(|| ServerState {
                health: Arc::new(Health::default()),
                addr: Arc::new(ArcSwap::from_pointee(addr)),
            });
        state.addr.store(Arc::new(addr));
        state.clone()
    }
}

/// The registry's maps are only touched while compiling: a poisoned lock (a panic mid-compile)
/// leaves them consistent, so it is taken anyway.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
