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

/// Whether two disk tier settings are the same (the tier is kept across a reload).
fn same_disk(a: Option<&weir_cache::DiskConfig>, b: Option<&weir_cache::DiskConfig>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            (
                &a.path,
                a.max_size,
                a.segment_size,
                a.io_threads,
                a.write_queue,
                a.min_free,
            ) == (
                &b.path,
                b.max_size,
                b.segment_size,
                b.io_threads,
                b.write_queue,
                b.min_free,
            )
        }
        _ => false,
    }
}

/// Named state shared by every config compiled against it.
#[derive(Debug)]
pub struct Registry {
    clock: Arc<dyn Clock>,
    zones: Mutex<HashMap<String, Zone>>,
    kv: Mutex<HashMap<String, Arc<crate::kv::KvStore>>>,
    servers: Mutex<HashMap<String, ServerState>>,
    /// Each upstream's live counts under its caps, by name (kept across reloads).
    limit_counts: Mutex<HashMap<String, crate::proxy::limits::Counts>>,
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
    /// Cluster membership and counters (kept across reloads).
    pub cluster: Arc<crate::cluster::ClusterState>,
    /// This process: when it started, what it was started with (`GET /status`).
    pub process: ProcessInfo,
    /// The dashboard's last minutes of counters (sampled once an admin listener exists).
    pub history: Arc<crate::metrics::history::History>,
    /// ACME challenge answers in progress, and each `acme:` section's certificate state.
    pub acme_challenges: Arc<crate::tls::acme::Challenges>,
    acme: Mutex<Vec<Arc<crate::tls::acme::AcmeCerts>>>,
    /// The threads that obtain certificates: stopped and waited for when the server stops.
    pub acme_threads: Arc<crate::tls::acme_threads::AcmeThreads>,
    /// A probe's ([`Registry::probe`]): disk tiers and key-value logs are not opened.
    probe: bool,
}

/// What `GET /status` and `weir status` say of the process.
#[derive(Debug)]
pub struct ProcessInfo {
    pub started: std::time::Instant,
    /// Unix seconds at start.
    pub started_unix: u64,
    /// The config file and pid file `weir run` was given (set once, at start).
    pub config_file: std::sync::OnceLock<String>,
    pub pid_file: std::sync::OnceLock<String>,
}

impl Default for ProcessInfo {
    fn default() -> Self {
        ProcessInfo {
            started: std::time::Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            config_file: Default::default(),
            pid_file: Default::default(),
        }
    }
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
            kv: Mutex::new(HashMap::new()),
            servers: Mutex::new(HashMap::new()),
            limit_counts: Mutex::new(HashMap::new()),
            sinks: Default::default(),
            metrics: Default::default(),
            reloader: Mutex::new(None),
            tls: Default::default(),
            filter_state: Default::default(),
            shield: Default::default(),
            cluster: Default::default(),
            process: Default::default(),
            history: Default::default(),
            acme_challenges: Default::default(),
            acme: Mutex::new(Vec::new()),
            acme_threads: Default::default(),
            probe: false,
        }
    }

    /// A registry to compile a config against only to learn whether it compiles (the
    /// Kubernetes provider's checks of its fragment merged with the file): it shares nothing
    /// with the running one, whose state a compile changes (a key-value store whose settings
    /// changed is closed, a cache zone replaced, a server's address stored), and it opens no
    /// disk tier or key-value log, which the running config holds.
    pub fn probe() -> Registry {
        Registry {
            probe: true,
            ..Registry::default()
        }
    }

    /// The zone named `name`: the existing one when its size, shards and disk tier are
    /// unchanged. A resized memory store starts empty; an unchanged disk tier is kept with it.
    /// `Err` when a new disk tier cannot be opened.
    pub fn zone(
        &self,
        name: &str,
        max_size: u64,
        shards: usize,
        disk: Option<weir_cache::DiskConfig>,
    ) -> Result<Arc<CacheZone>, String> {
        let disk = disk.filter(|_| !self.probe);
        let mut zones = lock(&self.zones);
        let old = zones.get(name);
        let old_disk = old.and_then(|z| z.zone.disk.clone());
        let same = same_disk(old_disk.as_ref().map(|d| d.config()), disk.as_ref());
        if let Some(z) = old {
            if z.max_size == max_size && z.shards == shards && same {
                return Ok(z.zone.clone());
            }
            tracing::warn!(zone = %name, "cache zone resized: its memory starts empty");
        }
        let tier = match (disk, same) {
            (None, _) => None,
            (Some(_), true) => old_disk,
            (Some(cfg), false) => {
                let shown = cfg.path.display().to_string();
                let tier = weir_cache::DiskTier::open(cfg)
                    .map_err(|e| format!("cannot open the disk tier at {shown}: {e}"))?;
                Some(Arc::new(tier))
            }
        };
        let zone = Arc::new(CacheZone::with_disk(
            name,
            max_size,
            shards,
            self.clock.clone(),
            tier,
        ));
        zones.insert(
            name.to_string(),
            Zone {
                max_size,
                shards,
                zone: zone.clone(),
            },
        );
        Ok(zone)
    }

    /// The key-value store named `name`: the existing one when its settings are unchanged
    /// (a changed store is opened again: its log is replayed, or it starts empty without one).
    pub fn kv_store(
        &self,
        name: &str,
        settings: crate::kv::KvSettings,
    ) -> Result<Arc<crate::kv::KvStore>, String> {
        let settings = match self.probe {
            true => crate::kv::KvSettings {
                disk: None,
                ..settings
            },
            false => settings,
        };
        let mut stores = lock(&self.kv);
        if let Some(s) = stores.get(name).filter(|s| s.settings == settings) {
            return Ok(s.clone());
        }
        if let Some(old) = stores.remove(name) {
            // Its log is ours again only once it is closed.
            old.close();
        }
        let shown = settings
            .disk
            .as_ref()
            .map(|d| d.path.display().to_string())
            .unwrap_or_default();
        let store = crate::kv::KvStore::open(name, settings)
            .map_err(|e| format!("cannot open the kv log at {shown}: {e}"))?;
        stores.insert(name.to_string(), store.clone());
        Ok(store)
    }

    /// Hands every disk tier over (binary upgrade, stop): the memory objects not on disk yet
    /// written (hottest first), pending stores written, snapshots saved, directories unlocked
    /// for the next process. Returns the objects written.
    pub fn hand_over_disks(&self) -> u64 {
        let zones: Vec<_> = lock(&self.zones).values().map(|z| z.zone.clone()).collect();
        let mut n = 0;
        for z in zones {
            if let Some(t) = &z.disk {
                n += t.hand_over(z.store.by_heat());
            }
        }
        for s in lock(&self.kv).values() {
            s.close();
        }
        n
    }

    /// The zones without a disk tier, by name (they cross an upgrade through a file:
    /// `cli/handover.rs`).
    pub fn memory_zones(&self) -> Vec<(String, Arc<CacheZone>)> {
        lock(&self.zones)
            .iter()
            .filter(|(_, z)| z.zone.disk.is_none())
            .map(|(name, z)| (name.clone(), z.zone.clone()))
            .collect()
    }

    /// Forgets zones and servers `cfg` does not name.
    pub fn retain(&self, cfg: &super::RuntimeConfig) {
        lock(&self.acme).retain(|a| cfg.acme.iter().any(|b| Arc::ptr_eq(a, b)));
        self.sinks.retain(&cfg.access_logs);
        let keys: Vec<String> = cfg
            .filters
            .iter()
            .filter_map(|c| c.state_key.clone())
            .collect();
        self.filter_state.retain(&keys);
        lock(&self.zones).retain(|name, _| cfg.cache_zones.iter().any(|z| &z.name == name));
        lock(&self.kv).retain(|name, s| {
            let kept = cfg.kv_stores.iter().any(|k| &k.name == name);
            if !kept {
                s.close();
            }
            kept
        });
        lock(&self.servers).retain(|key, _| {
            cfg.upstreams.iter().any(|u| {
                key.strip_prefix(u.name.as_str())
                    .and_then(|rest| rest.strip_prefix('/'))
                    .is_some_and(|s| u.servers.iter().any(|x| x.name == s))
            })
        });
    }

    /// The certificate state of an `acme:` section: the existing one when the section and its
    /// paths are unchanged (its thread goes on), else a new one, loaded from storage (its
    /// thread is started by the server that serves the config: `AcmeCerts::start`).
    pub fn acme(
        &self,
        settings: &crate::config::model::Acme,
        storage: std::path::PathBuf,
        directory_ca: Option<std::path::PathBuf>,
    ) -> Arc<crate::tls::acme::AcmeCerts> {
        let mut all = lock(&self.acme);
        if let Some(a) = all.iter().find(|a| {
            &a.settings == settings && a.storage == storage && a.directory_ca == directory_ca
        }) {
            return a.clone();
        }
        // On-demand state goes on with a section whose settings changed, for the same storage
        // and CA: a reload neither refills its bucket nor forgets its names and refusals.
        let carried = all
            .iter()
            .filter(|a| a.storage == storage && a.settings.directory == settings.directory)
            .find_map(|a| a.on_demand.as_ref().map(|od| od.state.clone()));
        let a = Arc::new(crate::tls::acme::AcmeCerts::carrying(
            settings.clone(),
            storage,
            directory_ca,
            self.acme_challenges.clone(),
            self.acme_threads.clone(),
            carried.filter(|_| settings.on_demand.is_some()),
        ));
        all.push(a.clone());
        a
    }

    /// Starts sampling the counters for the dashboard (once; the thread ends with the registry).
    pub fn start_history(self: &Arc<Self>) {
        let registry = Arc::downgrade(self);
        self.history.start(move || {
            let r = registry.upgrade()?;
            let zones = lock(&r.zones)
                .iter()
                .map(|(name, z)| {
                    let counts = crate::metrics::history::ZoneCounts::of(&z.zone.store.stats);
                    (name.clone(), counts)
                })
                .collect();
            Some(crate::metrics::history::Sample::of(
                &r.metrics.totals(),
                zones,
            ))
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

    fn limit_counts(&self, upstream: &str) -> crate::proxy::limits::Counts {
        lock(&self.limit_counts)
            .entry(upstream.to_string())
            .or_default()
            .clone()
    }
}

/// The registry's maps are only touched while compiling: a poisoned lock (a panic mid-compile)
/// leaves them consistent, so it is taken anyway.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
