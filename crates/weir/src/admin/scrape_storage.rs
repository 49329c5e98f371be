//! The storage part of `/metrics` (`scrape.rs`): each cache zone's disk tier, one family per
//! figure, labelled by zone, and the key-value stores, labelled by store (no family for what is
//! not configured).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use weir_cache::disk::DiskStats;

use super::scrape::{counter, family, gauge, Labels};
use crate::runtime::RuntimeConfig;

type Stat = fn(&DiskStats) -> &AtomicU64;

const COUNTERS: [(&str, &str, Stat); 14] = [
    (
        "hits",
        "Lookups the disk tier answered (memory misses).",
        |s| &s.hits,
    ),
    ("misses", "Memory misses the disk tier did not have.", |s| {
        &s.misses
    }),
    ("writes", "Objects written to disk.", |s| &s.writes),
    ("written_bytes", "Bytes written to disk.", |s| {
        &s.bytes_written
    }),
    (
        "write_dropped",
        "Stores dropped because the writer was behind.",
        |s| &s.write_dropped,
    ),
    (
        "not_admitted",
        "Stores not admitted (a key seen once while the disk is nearly full).",
        |s| &s.not_admitted,
    ),
    ("write_errors", "Failed writes and syncs.", |s| {
        &s.write_errors
    }),
    (
        "read_refused",
        "Reads refused because the IO pool was busy (served as misses).",
        |s| &s.read_refused,
    ),
    ("read_errors", "Failed reads.", |s| &s.read_errors),
    (
        "corrupt",
        "Objects that failed their checksum, dropped and never served.",
        |s| &s.corrupt,
    ),
    ("torn", "Torn tails cut when the index was loaded.", |s| {
        &s.torn
    }),
    ("evicted", "Objects evicted with their segment.", |s| {
        &s.evicted
    }),
    (
        "full_evictions",
        "Writes that found the file system full (ENOSPC) and evicted the oldest segment.",
        |s| &s.full_evictions,
    ),
    (
        "file_hits",
        "Hits whose body was sent from the segment file (sendfile).",
        |s| &s.file_hits,
    ),
];

/// Encodes the disk tier and key-value families.
pub(super) fn families(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    disk(cfg, enc)?;
    kv(cfg, enc)
}

type KvStat = fn(&crate::kv::KvStats) -> &AtomicU64;

const KV_RESULTS: [(&str, KvStat); 9] = [
    ("get", |s| &s.gets),
    ("hit", |s| &s.hits),
    ("not_modified", |s| &s.not_modified),
    ("expired", |s| &s.expired),
    ("put", |s| &s.puts),
    ("delete", |s| &s.deletes),
    ("conflict", |s| &s.conflicts),
    ("too_large", |s| &s.too_large),
    ("full", |s| &s.full),
];

fn kv(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    let stores = &cfg.kv_stores;
    if stores.is_empty() {
        return Ok(());
    }
    let store = |n: &str| -> Labels { vec![("store", n.to_string())] };
    family(
        enc,
        "weir_kv_requests",
        "Key-value requests by outcome (get counts every read; hit those answered 200).",
        MetricType::Counter,
        stores.iter().flat_map(|s| {
            KV_RESULTS.iter().map(move |(result, stat)| {
                (
                    vec![("store", s.name.clone()), ("result", result.to_string())],
                    counter(stat(&s.stats).load(Relaxed)),
                )
            })
        }),
    )?;
    let usage: Vec<_> = stores.iter().map(|s| (s, s.usage())).collect();
    family(
        enc,
        "weir_kv_keys",
        "Keys held.",
        MetricType::Gauge,
        usage
            .iter()
            .map(|(s, (k, _))| (store(&s.name), gauge(*k as i64))),
    )?;
    family(
        enc,
        "weir_kv_bytes",
        "Bytes of keys and values held.",
        MetricType::Gauge,
        usage
            .iter()
            .map(|(s, (_, b))| (store(&s.name), gauge(*b as i64))),
    )?;
    family(
        enc,
        "weir_kv_max_bytes",
        "The store's max_size.",
        MetricType::Gauge,
        stores
            .iter()
            .map(|s| (store(&s.name), gauge(s.settings.max_size as i64))),
    )
}

fn disk(cfg: &RuntimeConfig, enc: &mut DescriptorEncoder) -> fmt::Result {
    let tiers: Vec<_> = cfg
        .cache_zones
        .iter()
        .filter_map(|z| z.disk.as_ref().map(|d| (z.name.clone(), d.clone())))
        .collect();
    if tiers.is_empty() {
        return Ok(());
    }
    let zone = |n: &str| -> Labels { vec![("zone", n.to_string())] };
    for (name, help, stat) in COUNTERS {
        family(
            enc,
            &format!("weir_cache_disk_{name}"),
            help,
            MetricType::Counter,
            tiers
                .iter()
                .map(|(z, d)| (zone(z), counter(stat(d.stats()).load(Relaxed)))),
        )?;
    }
    let usage: Vec<_> = tiers.iter().map(|(z, d)| (z, d.usage())).collect();
    family(
        enc,
        "weir_cache_disk_objects",
        "Objects in the disk tier's index.",
        MetricType::Gauge,
        usage.iter().map(|(z, (o, _))| (zone(z), gauge(*o as i64))),
    )?;
    family(
        enc,
        "weir_cache_disk_bytes",
        "Bytes of the disk tier's segments.",
        MetricType::Gauge,
        usage.iter().map(|(z, (_, b))| (zone(z), gauge(*b as i64))),
    )?;
    family(
        enc,
        "weir_cache_disk_max_bytes",
        "The disk tier's max_size.",
        MetricType::Gauge,
        tiers
            .iter()
            .map(|(z, d)| (zone(z), gauge(d.config().max_size as i64))),
    )?;
    family(
        enc,
        // Seconds, not milliseconds: promtool refuses non-base units (issue 33 §6).
        "weir_cache_disk_load_seconds",
        "How long the last index load took (snapshot and tail scan).",
        MetricType::Gauge,
        tiers.iter().map(|(z, d)| {
            let ms = d.stats().load_ms.load(Relaxed);
            (zone(z), ConstGauge::new(ms as f64 / 1000.0))
        }),
    )?;
    family(
        enc,
        "weir_cache_disk_ready",
        "1 once the disk tier's index is loaded.",
        MetricType::Gauge,
        tiers
            .iter()
            .map(|(z, d)| (zone(z), gauge(i64::from(d.is_ready())))),
    )
}
