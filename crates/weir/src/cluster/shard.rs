//! A cache zone sharded across the cluster (`cache_zones.NAME.cluster`): which member owns a
//! key, and the peers upstream requests for keys owned elsewhere go through.
//!
//! The peers upstream (`cluster-peers`, one server per other member, at its advertised
//! address) is an ordinary upstream: its pool, timeouts and passive health are the proxy's. A
//! member whose connections fail is marked down by passive health at once (`max_fails: 1`), so
//! the next keys it owns go to their alternate owner without waiting for its lease to expire.

use std::time::Duration;

use super::Cluster;
use crate::config::{model, model_cluster::ZoneCluster, CompileError};
use crate::ring::{stable_hash, Ring};

/// The name of the upstream of the other members.
pub const PEERS_UPSTREAM: &str = "cluster-peers";

/// A sharded zone's placement, compiled with the members of the moment.
#[derive(Debug)]
pub struct Shard {
    ring: Ring,
    /// Per member (ring index): its node name.
    nodes: Vec<String>,
    /// Per member (ring index): its server in the peers upstream (`None`: this node).
    servers: Vec<Option<usize>>,
    /// Per member: when it joined (Unix ms).
    since_ms: Vec<u64>,
    /// The peers upstream's index in the config's upstreams.
    pub upstream: usize,
    rampup: Duration,
    /// Seconds a hot copy (`local_hot`) is used after it was fetched.
    pub hot_ttl: u64,
}

/// Where a key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// This node: its own cache, then the origin.
    Local,
    /// The member behind this server of the peers upstream.
    Peer(usize),
}

/// The peers upstream's model: one server per other member, failing fast.
pub fn peers_upstream(cluster: &Cluster) -> Option<model::Upstream> {
    let servers: Vec<String> = cluster.peers().map(|m| format!("'{}'", m.peer)).collect();
    if servers.is_empty() {
        return None;
    }
    let yaml = format!(
        "servers: [{}]\nretries: {{ attempts: 0 }}\npassive_health: {{ max_fails: 1, window: 10s, down_for: 2s }}\ntimeouts: {{ connect: 500ms }}\n",
        servers.join(", ")
    );
    serde_yaml::from_str(&yaml).ok()
}

impl Shard {
    /// The placement of a zone with `z`'s settings over `cluster`'s members; `upstream` is the
    /// peers upstream's index.
    pub(crate) fn compile(
        z: &ZoneCluster,
        path: &str,
        cluster: &Cluster,
        upstream: usize,
    ) -> Result<Shard, CompileError> {
        if z.replicas == 0 || z.replicas > 65_536 {
            return Err((format!("{path}.replicas"), "must be 1-65536".into()));
        }
        let names: Vec<(&str, u32)> = cluster
            .members
            .iter()
            .map(|m| (m.node.as_str(), 1))
            .collect();
        let mut next = 0;
        let servers = cluster
            .members
            .iter()
            .map(|m| {
                (m.node != cluster.node).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        Ok(Shard {
            ring: Ring::new(&names, z.replicas),
            nodes: cluster.members.iter().map(|m| m.node.clone()).collect(),
            servers,
            since_ms: cluster.members.iter().map(|m| m.since_ms).collect(),
            upstream,
            rampup: z.rampup.0,
            hot_ttl: z.local_hot_ttl.0.as_secs().max(1),
        })
    }

    /// Each member's share of the keys while all are up, by node name.
    pub fn shares(&self) -> Vec<(&str, f64)> {
        self.nodes
            .iter()
            .map(String::as_str)
            .zip(self.ring.shares())
            .collect()
    }

    /// The owner of `key`: the first member along the ring that is up (this node always is),
    /// with ramp-up of new members.
    pub fn owner(&self, key: &[u8], up: impl Fn(usize) -> bool) -> Owner {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let rampup = self.rampup.as_millis() as u64;
        let ramp = |m: usize| {
            let age = now_ms.saturating_sub(self.since_ms[m]);
            if rampup == 0 || self.since_ms[m] == 0 || age >= rampup {
                1.0
            } else {
                age as f64 / rampup as f64
            }
        };
        let usable = |m: usize| self.servers[m].is_none_or(&up);
        match self.ring.pick(stable_hash(key), usable, ramp) {
            Some(m) => self.servers[m].map_or(Owner::Local, Owner::Peer),
            None => Owner::Local,
        }
    }
}
