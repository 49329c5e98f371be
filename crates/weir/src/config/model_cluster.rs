//! `cluster:`, `reload:` and `include:`: what a node shares with others (etcd, Redis) and where
//! its config comes from besides the file itself.

use serde::Deserialize;

use super::units::{Dur, Size};

/// `cluster:` — this node as a member of several that act as one edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// This node's name, unique in the cluster (`${WEIR_NODE}`).
    pub node: String,
    /// etcd endpoints (`host:port`): config fragments, membership, purges. Without them the
    /// node is a cluster of one (rate limits with `cluster: redis` still share Redis).
    #[serde(default)]
    pub etcd: Vec<String>,
    /// The etcd key prefix: `PREFIX/config/…` holds config fragments, `PREFIX/members/NODE`
    /// this node's registration.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// The `host:port` other members reach this node's listener at for peer fill (default: the
    /// first listener's address).
    pub advertise: Option<String>,
    /// The lease this node's registration lives under: a node that stops renewing it leaves
    /// the cluster this long after its last renewal.
    #[serde(default = "default_lease")]
    pub lease_ttl: Dur,
    /// Changes from etcd arriving within this long of the first are applied as one rebuild
    /// (at least 100 ms).
    #[serde(default = "default_coalesce")]
    pub coalesce: Dur,
    /// Redis (`host:port` or `redis://…`) for rate limits with `cluster: redis`.
    pub redis: Option<String>,
    /// How often a node sends the requests it admitted to Redis and reads the cluster's count
    /// back (Kong's `sync_rate`): between two syncs each node decides alone, so a shorter
    /// interval overshoots less (at most the other nodes' quota for one interval).
    #[serde(default = "default_redis_sync")]
    pub redis_sync: Dur,
}

/// `cache_zones.NAME.cluster`: the zone is sharded across live members by the cache key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneCluster {
    /// Points per member on the hash ring (`crate::ring`: 4096 keeps three members' shares
    /// within 1.5% of a third; Varnish's shard director uses 67, which left them 30-37%).
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// A new member takes its share of keys gradually over this long.
    #[serde(default)]
    pub rampup: Dur,
    /// Bytes of a small memory store on each member for copies of keys others own, filled by
    /// peer fills and kept by S3-FIFO (only keys asked again stay): a hot key is then answered
    /// here without the hop. Purges reach it like the zone. Off when absent.
    #[serde(default)]
    pub local_hot: Option<Size>,
    /// How long a hot copy is used after it was fetched: the bound on how long an invalidation
    /// or a `PURGE` request made at the owner takes to reach the copies (admin purges reach
    /// every member at once).
    #[serde(default = "default_hot_ttl")]
    pub local_hot_ttl: Dur,
}

/// `reload:` — watching the config's files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reload {
    /// Watch the config file's directory and the included ones; reload when their content
    /// changes (editors and bind mounts replace files, so directories are watched, not inodes).
    #[serde(default)]
    pub watch: bool,
    /// Changes within this long of the first are one reload.
    #[serde(default = "default_debounce")]
    pub debounce: Dur,
}

impl Default for Reload {
    fn default() -> Reload {
        Reload {
            watch: false,
            debounce: default_debounce(),
        }
    }
}

fn default_prefix() -> String {
    "/weir".into()
}

fn default_lease() -> Dur {
    Dur(std::time::Duration::from_secs(3))
}

fn default_coalesce() -> Dur {
    Dur(std::time::Duration::from_millis(100))
}

fn default_redis_sync() -> Dur {
    Dur(std::time::Duration::from_millis(20))
}

fn default_hot_ttl() -> Dur {
    Dur(std::time::Duration::from_secs(2))
}

fn default_replicas() -> u32 {
    crate::ring::DEFAULT_CLUSTER_POINTS
}

fn default_debounce() -> Dur {
    Dur(std::time::Duration::from_millis(200))
}
