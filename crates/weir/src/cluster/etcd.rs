//! etcd as config source and membership registry.
//!
//! One task per node, on the control loop's runtime:
//!
//! 1. connect; register `PREFIX/members/NODE` (this node's [`Member`] as JSON) under a lease of
//!    `lease_ttl`, renewed every third of it;
//! 2. read `PREFIX/` whole (config fragments and members) at one revision;
//! 3. watch `PREFIX/` from that revision + 1, with progress notifications (so the revision
//!    held stays current even when nothing changes, and a resumed watch starts near the head);
//! 4. apply events to the key → value maps held here; changes arriving within `coalesce` of the
//!    first are one update: the fragments (sorted by key) go to the reloader, which rebuilds
//!    only if the merged texts differ (`reload/`), and membership to the registry.
//!
//! On reconnecting, a node first renews the lease it held: etcd still having it means the
//! others never saw the node leave. A node whose lease is gone (frozen or partitioned past
//! `lease_ttl` while etcd was up) was dropped by the others and missed the purges made
//! meanwhile: before registering again it tells the control loop ([`Change::Rejoined`]), which
//! empties its cache zones.
//!
//! A node that stops (not one handing over to a new binary, which registers itself) revokes
//! its lease ([`Session::leave`]): the others see it leave at once rather than `lease_ttl`
//! later. On any error the task reconnects with backoff, resuming the watch at the last revision seen;
//! if etcd compacted past it, the watch is cancelled with the compaction revision and the task
//! reads everything again, swapping only what changed. While etcd is unreachable the node keeps
//! the last config and members it had (the listeners never depend on etcd being up).
//!
//! The calls go over etcd's gRPC API (`etcd_rpc.rs`: leases with keep-alive streams, watches
//! with progress notify and compaction reporting), not its JSON gateway, which would mean a
//! hand-written HTTP streaming client.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::etcd_rpc::{self as rpc, Client, WatchResponse};

use super::{Change, Cluster, Member};
use crate::config::assemble::Fragment;

/// How long a connection attempt or a single request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Log lines about etcd being unreachable: at most one per interval.
static DOWN_LOG: crate::logs::Limited = crate::logs::Limited::new();

const OPTIONS: rpc::Options = rpc::Options {
    request: REQUEST_TIMEOUT,
    keep_alive: Duration::from_secs(2),
};

fn endpoints(cluster: &Cluster) -> Vec<String> {
    cluster
        .etcd
        .iter()
        .map(|e| {
            if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            }
        })
        .collect()
}

/// Reads the config fragments once, before the node serves (bounded by `within`). An
/// unreachable etcd is not fatal: the node starts on its file and catches up later.
pub async fn read_fragments(cluster: &Cluster, within: Duration) -> Result<Vec<Fragment>, String> {
    let read = async {
        let mut client = Client::connect(&endpoints(cluster), OPTIONS).await?;
        let prefix = cluster.config_prefix();
        let resp = client.get_prefix(prefix.as_bytes(), within).await?;
        let mut map = BTreeMap::new();
        for kv in resp.kvs {
            map.insert(kv.key, kv.value);
        }
        if let Some(h) = resp.header {
            cluster.state.revision.store(h.revision, Ordering::Relaxed);
        }
        Ok(fragments_of(&map))
    };
    tokio::time::timeout(within, read)
        .await
        .map_err(|_| format!("no answer from etcd within {within:?}"))?
}

/// The fragments of a key → value map, in key order.
fn fragments_of(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<Fragment> {
    map.iter()
        .map(|(k, v)| Fragment {
            name: format!("etcd:{}", String::from_utf8_lossy(k)),
            text: String::from_utf8_lossy(v).into_owned(),
            overrides: true,
        })
        .collect()
}

/// What the task holds between connections.
struct Mirror {
    cluster: Arc<Cluster>,
    config: BTreeMap<Vec<u8>, Vec<u8>>,
    members: BTreeMap<String, Member>,
    /// The last revision seen (0: nothing read yet).
    revision: i64,
    fragments: Arc<Mutex<Vec<Fragment>>>,
    tx: UnboundedSender<Change>,
    /// The lease this node's registration lives under now (0: none).
    lease: Arc<AtomicI64>,
}

/// The etcd task of a node.
#[derive(Debug)]
pub struct Session {
    task: tokio::task::JoinHandle<()>,
    lease: Arc<AtomicI64>,
    cluster: Arc<Cluster>,
}

impl Session {
    /// Stops the task, keeping the registration until its lease expires (a binary upgrade:
    /// the new process registers the same node).
    pub fn stop(&self) {
        self.task.abort();
    }

    /// Stops the task and leaves the cluster now: the lease is revoked, which deletes the
    /// registration (at most 1 s is spent; etcd down, the lease expires on its own).
    pub async fn leave(self) {
        self.task.abort();
        let lease = self.lease.load(Ordering::Relaxed);
        if lease == 0 {
            return;
        }
        let revoke = async {
            let mut client = Client::connect(&endpoints(&self.cluster), OPTIONS).await?;
            client.lease_revoke(lease, REQUEST_TIMEOUT).await
        };
        match tokio::time::timeout(Duration::from_secs(1), revoke).await {
            Ok(Ok(_)) => tracing::info!(node = %self.cluster.node, "left the cluster"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not leave the cluster: the lease expires on its own")
            }
            Err(_) => tracing::warn!("etcd did not answer within 1s: the lease expires on its own"),
        }
    }
}

/// Starts the etcd task for `cluster` on the current runtime; `fragments` is the reloader's.
pub fn spawn(
    cluster: Arc<Cluster>,
    fragments: Arc<Mutex<Vec<Fragment>>>,
    tx: UnboundedSender<Change>,
) -> Session {
    let lease = Arc::new(AtomicI64::new(0));
    let mut m = Mirror {
        cluster: cluster.clone(),
        config: BTreeMap::new(),
        members: BTreeMap::new(),
        revision: 0,
        fragments,
        tx,
        lease: lease.clone(),
    };
    let task = tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        loop {
            match m.session().await {
                Ok(()) => backoff = Duration::from_millis(200),
                Err(e) => {
                    m.cluster.state.etcd_up.store(false, Ordering::Relaxed);
                    if let Some(suppressed) = DOWN_LOG.admit() {
                        tracing::warn!(error = %e, suppressed, "etcd unreachable: keeping the last config and members");
                    }
                }
            }
            m.cluster
                .state
                .watch_restarts
                .fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
    Session {
        task,
        lease,
        cluster,
    }
}

impl Mirror {
    /// One connection: register, (re)read if needed, watch until an error.
    async fn session(&mut self) -> Result<(), String> {
        let c = self.cluster.clone();
        let mut client = Client::connect(&endpoints(&c), OPTIONS)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // The lease this node held before this connection, if etcd still has it: then the
        // others never saw this node leave and no purge skipped it (an etcd outage alone
        // loses no lease: etcd renews them when it comes back).
        let held = self.lease.load(Ordering::Relaxed);
        let mut kept = None;
        if held != 0 {
            if let Ok((keeper, mut acks)) = client.lease_keep_alive(held, REQUEST_TIMEOUT).await {
                let ack = tokio::time::timeout(REQUEST_TIMEOUT, rpc::next(&mut acks, "keep-alive"));
                if let Ok(Ok(Some(a))) = ack.await {
                    if a.ttl > 0 {
                        kept = Some((keeper, acks));
                    }
                }
            }
        }
        let (lease, keeper, mut acks) = match kept {
            Some((keeper, acks)) => (held, keeper, acks),
            None => {
                if held != 0 {
                    // Out of the cluster long enough for the others to drop this node (frozen,
                    // partitioned): what its zones hold may have been purged meanwhile. Said
                    // before registering again.
                    tracing::warn!(node = %c.node, "rejoining the cluster after losing its lease: purges made meanwhile did not reach this node, emptying its cache zones");
                    let (done, emptied) = tokio::sync::oneshot::channel();
                    let _ = self.tx.send(Change::Rejoined(done));
                    let _ = tokio::time::timeout(Duration::from_secs(5), emptied).await;
                }
                let lease = client
                    .lease_grant(c.lease_ttl.as_secs().max(1) as i64, REQUEST_TIMEOUT)
                    .await?;
                let (keeper, acks) = client.lease_keep_alive(lease, REQUEST_TIMEOUT).await?;
                (lease, keeper, acks)
            }
        };
        self.lease.store(lease, Ordering::Relaxed);
        let mut me = c.me.clone();
        me.since_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let record = serde_json::to_vec(&me).map_err(|e| e.to_string())?;
        client
            .put(
                format!("{}{}", c.members_prefix(), c.node).into_bytes(),
                record,
                lease,
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| format!("register: {e}"))?;
        c.state.etcd_up.store(true, Ordering::Relaxed);
        if self.revision == 0 {
            self.read_all(&mut client).await?;
        }
        let prefix = format!("{}/", c.prefix);
        let (_watcher, mut stream) = client
            .watch_prefix(prefix.as_bytes(), self.revision + 1, REQUEST_TIMEOUT)
            .await?;
        let mut renew = tokio::time::interval((c.lease_ttl / 3).max(Duration::from_millis(300)));
        let mut pending: Option<(bool, bool)> = None;
        let coalesce = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(coalesce);
        loop {
            tokio::select! {
                msg = rpc::next(&mut stream, "watch") => {
                    let resp = msg?.ok_or_else(|| "watch ended".to_string())?;
                    if resp.canceled {
                        if resp.compact_revision > 0 {
                            // Events were compacted away: read everything at the head again.
                            c.state.compactions.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(compacted = resp.compact_revision, "etcd compacted past the watch: re-reading");
                            self.read_all(&mut client).await?;
                        }
                        return Err(format!("watch cancelled: {}", resp.cancel_reason));
                    }
                    let changed = self.apply(&resp);
                    if changed != (false, false) {
                        if pending.is_none() {
                            coalesce.as_mut().reset(tokio::time::Instant::now() + c.coalesce);
                        }
                        let p = pending.get_or_insert((false, false));
                        p.0 |= changed.0;
                        p.1 |= changed.1;
                    }
                }
                () = &mut coalesce, if pending.is_some() => {
                    if let Some((config, members)) = pending.take() {
                        self.publish(config, members);
                    }
                }
                _ = renew.tick() => keeper.keep_alive()?,
                ack = rpc::next(&mut acks, "keep-alive") => {
                    match ack? {
                        Some(a) if a.ttl > 0 => {}
                        Some(_) => return Err("the lease expired".into()),
                        None => return Err("keep-alive stream ended".into()),
                    }
                }
            }
        }
    }

    /// Reads `PREFIX/` whole and publishes what changed.
    async fn read_all(&mut self, client: &mut Client) -> Result<(), String> {
        let c = self.cluster.clone();
        let resp = client
            .get_prefix(format!("{}/", c.prefix).as_bytes(), REQUEST_TIMEOUT)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let (config_prefix, members_prefix) = (c.config_prefix(), c.members_prefix());
        let mut config = BTreeMap::new();
        let mut members = BTreeMap::new();
        for kv in resp.kvs {
            if kv.key.starts_with(config_prefix.as_bytes()) {
                config.insert(kv.key, kv.value);
            } else if let Some(node) = kv.key.strip_prefix(members_prefix.as_bytes()) {
                if let Ok(m) = serde_json::from_slice::<Member>(&kv.value) {
                    members.insert(String::from_utf8_lossy(node).into_owned(), m);
                }
            }
        }
        self.revision = resp.header.map_or(self.revision, |h| h.revision);
        let config_changed = config != self.config;
        let members_changed = members != self.members;
        self.config = config;
        self.members = members;
        self.publish(config_changed, members_changed);
        Ok(())
    }

    /// Applies a watch response to the maps: (config changed, members changed).
    fn apply(&mut self, resp: &WatchResponse) -> (bool, bool) {
        if let Some(h) = &resp.header {
            // A progress notification carries only this: the revision the watch has reached.
            self.revision = self.revision.max(h.revision);
        }
        let c = &self.cluster;
        let (config_prefix, members_prefix) = (c.config_prefix(), c.members_prefix());
        let mut changed = (false, false);
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            self.revision = self.revision.max(kv.mod_revision);
            let put = ev.kind != rpc::EVENT_DELETE;
            if kv.key.starts_with(config_prefix.as_bytes()) {
                let key = kv.key.clone();
                let before = self.config.get(&key).cloned();
                if put {
                    self.config.insert(key, kv.value.clone());
                } else {
                    self.config.remove(&key);
                }
                changed.0 |= before.as_deref() != (put.then_some(&kv.value[..]));
            } else if let Some(node) = kv.key.strip_prefix(members_prefix.as_bytes()) {
                let node = String::from_utf8_lossy(node).into_owned();
                let m = put
                    .then(|| serde_json::from_slice::<Member>(&kv.value).ok())
                    .flatten();
                let before = self.members.get(&node).cloned();
                match &m {
                    Some(m) => self.members.insert(node, m.clone()),
                    None => self.members.remove(&node),
                };
                changed.1 |= before != m;
            }
        }
        changed
    }

    /// Hands the maps on: fragments to the reloader, members to the registry.
    fn publish(&mut self, config: bool, members: bool) {
        let state = &self.cluster.state;
        if config {
            *self.fragments.lock().unwrap_or_else(|e| e.into_inner()) = fragments_of(&self.config);
        }
        state.revision.store(self.revision, Ordering::Relaxed);
        let members = members && state.set_members(self.members.values().cloned().collect());
        if config {
            let _ = self.tx.send(Change::Config);
        }
        if members {
            let _ = self.tx.send(Change::Members);
        }
    }
}
