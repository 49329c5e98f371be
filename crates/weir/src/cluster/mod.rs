//! Several weir nodes acting as one edge. weir implements no consensus or gossip of its own:
//!
//! * **etcd** ([`etcd`]): config fragments under `PREFIX/config/` (merged after the node's own
//!   file, `config/assemble.rs`), membership (each node's record under a lease at
//!   `PREFIX/members/NODE`), both watched from the revision read, with progress notifications
//!   and a full re-read after a compaction.
//! * **a sharded cache** ([`shard`], [`ring`]): a zone with `cluster:` places each key on one
//!   live member; the others fetch from it (one hop, marked with `Weir-Peer` so it cannot loop)
//!   and fall back to the origin when it cannot answer.
//! * **rate limits** (`filters/rate_limit.rs`): `cluster: members` divides a quota by the live
//!   member count; `cluster: redis` ([`redis`], `filters/rate_limit_redis.rs`) counts every
//!   node's requests in Redis.
//!
//! Membership is part of what a config is compiled from (the peers upstream, the rings): a
//! change of members reloads through the one reload path (`reload/`), like a change of text.

pub mod etcd;
mod etcd_rpc;
pub mod redis;
pub mod shard;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{model_cluster, CompileError};

/// How long a Redis connection or answer may take before a sync counts as failed.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(500);

/// The header that marks a peer-fill request: the asking node's name.
pub const PEER_HEADER: &str = "weir-peer";

/// Whether a request is a peer fill from another member: it carries `Weir-Peer` and comes
/// from a live member's address. From anyone else the field is ignored (and never forwarded):
/// a client that sent it once made a node serve and store keys it does not own.
///
/// The field must name that member (`Weir-Peer: b` from b's address): any value from any
/// address a member shares (a co-located terminator) once passed. What remains is a process
/// on a member's own address naming it: keep members' addresses to members.
pub fn is_peer_fill(
    cluster: &Cluster,
    head: &weir_http::RequestHead,
    from: std::net::IpAddr,
) -> bool {
    let Some(named) = head.header(PEER_HEADER) else {
        return false;
    };
    let named = named.trim_ascii();
    cluster
        .state
        .members()
        .iter()
        .any(|m| m.node != cluster.node && m.node.as_bytes() == named && m.peer.ip() == from)
}

/// What the etcd task tells the reload loop.
#[derive(Debug)]
pub enum Change {
    /// The config fragments changed.
    Config,
    /// The live members changed.
    Members,
    /// This node is a member again after its lease was lost (frozen, partitioned, etcd away
    /// longer than `lease_ttl`): the others dropped it meanwhile and sent it no purges, so
    /// what its zones hold may have been purged everywhere else. Answered once the zones
    /// are empty; the node registers again only then.
    Rejoined(tokio::sync::oneshot::Sender<()>),
}

/// A member as registered in etcd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub node: String,
    /// Where its listener takes peer-fill requests.
    pub peer: SocketAddr,
    /// Its admin API, for purges.
    pub admin: Option<SocketAddr>,
    /// When it registered (Unix milliseconds): ramp-up counts from here.
    pub since_ms: u64,
}

/// Cluster state that outlives a config (kept in the registry).
#[derive(Debug, Default)]
pub struct ClusterState {
    /// The live members as etcd last said (this node included once registered).
    members: Mutex<Vec<Member>>,
    /// Their number, read by rate limits on every request.
    live: std::sync::atomic::AtomicUsize,
    /// The etcd revision of the config fragments applied (0: none read).
    pub revision: AtomicI64,
    /// Whether the etcd session is up now.
    pub etcd_up: AtomicBool,
    /// Full re-reads after a compaction, and watch restarts after an error.
    pub compactions: AtomicU64,
    pub watch_restarts: AtomicU64,
    /// Peer fills answered by the owner, and those that fell back to the origin.
    pub peer_fills: AtomicU64,
    pub peer_fallbacks: AtomicU64,
    /// Requests for keys others own answered from this node's hot copies (`local_hot`).
    pub local_hot_hits: AtomicU64,
    /// Syncs of `cluster: redis` rate limits that Redis did not answer (fail open).
    pub redis_errors: AtomicU64,
}

impl ClusterState {
    /// The members now, sorted by name.
    pub fn members(&self) -> Vec<Member> {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the member list; `true` when it changed.
    pub fn set_members(&self, mut members: Vec<Member>) -> bool {
        members.sort_by(|a, b| a.node.cmp(&b.node));
        let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if *m == members {
            return false;
        }
        self.live.store(members.len(), Ordering::Relaxed);
        *m = members;
        true
    }
}

/// The compiled `cluster:` section.
#[derive(Debug)]
pub struct Cluster {
    pub node: String,
    pub etcd: Vec<String>,
    pub prefix: String,
    /// This node's record.
    pub me: Member,
    pub lease_ttl: Duration,
    pub coalesce: Duration,
    /// `cluster.redis`, checked (a `redis://` URL).
    pub redis: Option<String>,
    pub redis_sync: Duration,
    /// The members this config was compiled with (this node always among them).
    pub members: Vec<Member>,
    pub state: Arc<ClusterState>,
}

impl Cluster {
    /// Compiles `cluster:`; `listen` is the first listener's address, `admin` the admin's.
    pub(crate) fn compile(
        c: model_cluster::Cluster,
        listen: Option<SocketAddr>,
        admin: Option<SocketAddr>,
        state: &Arc<ClusterState>,
    ) -> Result<Cluster, CompileError> {
        let node = c.node.trim().to_string();
        if node.is_empty() || node.contains(['/', ' ']) {
            return Err((
                "cluster.node".into(),
                "must be a non-empty name without `/` or spaces".into(),
            ));
        }
        let peer = match &c.advertise {
            Some(a) => a.parse::<SocketAddr>().map_err(|e| {
                ("cluster.advertise".to_string(), format!("{a:?}: {e} (give ip:port)"))
            })?,
            None => listen.filter(|a| a.port() != 0).ok_or_else(|| {
                (
                    "cluster.advertise".to_string(),
                    "give the ip:port peers reach this node at (the first listener's port is 0 or absent)".to_string(),
                )
            })?,
        };
        if c.coalesce.0 < Duration::from_millis(100) {
            return Err(("cluster.coalesce".into(), "must be at least 100ms".into()));
        }
        if c.lease_ttl.0 < Duration::from_secs(1) {
            return Err(("cluster.lease_ttl".into(), "must be at least 1s".into()));
        }
        let redis = match &c.redis {
            Some(url) => Some(
                self::redis::Redis::open(url, REDIS_TIMEOUT)
                    .map_err(|e| ("cluster.redis".to_string(), e))?
                    .url,
            ),
            None => None,
        };
        if !(Duration::from_millis(5)..=Duration::from_secs(10)).contains(&c.redis_sync.0) {
            return Err((
                "cluster.redis_sync".into(),
                "must be between 5ms and 10s".into(),
            ));
        }
        let prefix = c.prefix.trim_end_matches('/').to_string();
        // An admin bound to all addresses is reached at the address peers use for this node.
        let admin = admin.map(|a| match a.ip().is_unspecified() {
            true => SocketAddr::new(peer.ip(), a.port()),
            false => a,
        });
        let me = Member {
            node: node.clone(),
            peer,
            admin,
            since_ms: 0,
        };
        // This node is a member from the start, even before etcd says so (or when it cannot).
        let mut members = state.members();
        if !members.iter().any(|m| m.node == node) {
            members.push(me.clone());
            members.sort_by(|a, b| a.node.cmp(&b.node));
        }
        Ok(Cluster {
            node,
            etcd: c.etcd,
            prefix,
            me,
            lease_ttl: c.lease_ttl.0,
            coalesce: c.coalesce.0,
            redis,
            redis_sync: c.redis_sync.0,
            members,
            state: state.clone(),
        })
    }

    /// The members other than this node.
    pub fn peers(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.node != self.node)
    }

    /// Live members now (at least 1: this node, before etcd lists it or without etcd).
    pub fn live_count(&self) -> usize {
        self.state.live.load(Ordering::Relaxed).max(1)
    }

    /// `PREFIX/config/`.
    pub fn config_prefix(&self) -> String {
        format!("{}/config/", self.prefix)
    }

    /// `PREFIX/members/`.
    pub fn members_prefix(&self) -> String {
        format!("{}/members/", self.prefix)
    }
}

/// The etcd revision applied, for /metrics and the admin API.
pub fn revision(state: &ClusterState) -> i64 {
    state.revision.load(Ordering::Relaxed)
}
