//! The cluster part of `/metrics` (`scrape.rs`): the etcd revision applied, the live members,
//! peer fills and the fail-open count of Redis rate limits. Nothing without `cluster:`.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::scrape::{counter, family, gauge, Labels};
use crate::runtime::RuntimeConfig;

/// Encodes the cluster families.
pub(super) fn families(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(c) = &cfg.cluster else {
        return Ok(());
    };
    let s = &c.state;
    let node = || -> Labels { vec![("node", c.node.clone())] };
    let gauges = [
        (
            "weir_cluster_config_revision",
            "The etcd revision of the config this node applied (0: none read).",
            s.revision.load(Relaxed),
        ),
        (
            "weir_cluster_members",
            "Live members as this node sees them (itself included).",
            c.live_count() as i64,
        ),
        (
            "weir_cluster_etcd_up",
            "1 while the etcd session is up.",
            i64::from(s.etcd_up.load(Relaxed)),
        ),
    ];
    for (name, help, v) in gauges {
        family(enc, name, help, MetricType::Gauge, [(node(), gauge(v))])?;
    }
    let counters = [
        (
            "weir_cluster_peer_fills",
            "Requests of a sharded zone answered by the key's owner.",
            &s.peer_fills,
        ),
        (
            "weir_cluster_peer_fallbacks",
            "Requests whose owner did not answer, served from the origin here.",
            &s.peer_fallbacks,
        ),
        (
            "weir_cluster_local_hot_hits",
            "Requests for keys other members own answered from this node's hot copies (local_hot).",
            &s.local_hot_hits,
        ),
        (
            "weir_cluster_etcd_compactions",
            "Full re-reads of etcd after a compaction passed the watch.",
            &s.compactions,
        ),
        (
            "weir_cluster_etcd_watch_restarts",
            "etcd sessions restarted after an error.",
            &s.watch_restarts,
        ),
        (
            "weir_cluster_redis_errors",
            "Syncs of `cluster: redis` rate limits Redis did not answer (each node then limits alone, to its share).",
            &s.redis_errors,
        ),
    ];
    for (name, help, v) in counters {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            [(node(), counter(v.load(Relaxed)))],
        )?;
    }
    Ok(())
}

/// `GET /cluster`: this node, the revision applied, etcd's state and the members.
pub(super) fn status(cfg: &RuntimeConfig) -> (u16, String) {
    let Some(c) = &cfg.cluster else {
        return (
            404,
            serde_json::json!({"error": "this node has no cluster: section"}).to_string(),
        );
    };
    let s = &c.state;
    // Each sharded zone's placement: every member's share of its keys (`crate::ring`).
    let zones: serde_json::Map<String, serde_json::Value> = cfg
        .zone_shards
        .iter()
        .zip(&cfg.cache_zones)
        .filter_map(|(shard, zone)| {
            let shares: serde_json::Map<String, serde_json::Value> = shard
                .as_ref()?
                .shares()
                .into_iter()
                .map(|(node, share)| {
                    (
                        node.to_string(),
                        serde_json::json!((share * 1e4).round() / 1e4),
                    )
                })
                .collect();
            Some((zone.name.clone(), serde_json::json!({ "shares": shares })))
        })
        .collect();
    let body = serde_json::json!({
        "node": c.node,
        "sharded_zones": zones,
        "revision": s.revision.load(Relaxed),
        "etcd_up": s.etcd_up.load(Relaxed),
        "members": s.members(),
        "peer_fills": s.peer_fills.load(Relaxed),
        "peer_fallbacks": s.peer_fallbacks.load(Relaxed),
        "local_hot_hits": s.local_hot_hits.load(Relaxed),
        "redis_errors": s.redis_errors.load(Relaxed),
    });
    (200, body.to_string())
}
