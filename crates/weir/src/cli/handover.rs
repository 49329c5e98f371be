//! Memory-only cache zones across a binary upgrade. A zone with a disk tier crosses through it
//! (`Registry::hand_over_disks`); one without is written by the draining old process to a file
//! beside the upgrade socket (`SOCKET.ZONE.cache`, hottest first, `weir_cache::disk::dump`), and
//! the new process, which started serving at once with an empty zone, waits for that file in a
//! thread, loads it (objects it fetched meanwhile are kept: they are newer) and deletes it.
//! Until then its misses on those zones wait (at most 2 s, `CacheZone::wait_warm`), so the few
//! milliseconds of the hand-over do not send a burst of requests to the origin.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_cache::disk::dump;

use crate::runtime::Registry;

/// How long the new process waits for the old one's file.
const WAIT: Duration = Duration::from_secs(30);

fn dump_path(socket: &Path, zone: &str) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(format!(".{zone}.cache"));
    PathBuf::from(p)
}

/// A fresh start (not an upgrade): files a failed upgrade left are not this run's.
pub(super) fn forget_stale(registry: &Registry, socket: &Path) {
    for (name, _) in registry.memory_zones() {
        let _ = std::fs::remove_file(dump_path(socket, &name));
    }
}

/// The old process, draining: writes each memory-only zone for the new one.
pub(super) fn write(registry: &Registry, socket: &Path) {
    for (name, zone) in registry.memory_zones() {
        let started = Instant::now();
        let objects = zone.store.by_heat();
        match dump::write(&dump_path(socket, &name), &objects) {
            Ok(n) => tracing::info!(
                zone = %name,
                objects = n,
                ms = started.elapsed().as_millis() as u64,
                "memory cache written for the new process"
            ),
            Err(e) => tracing::warn!(zone = %name, error = %e, "memory cache not handed over"),
        }
    }
}

/// The new process: loads each memory-only zone's file once the old process has written it.
pub(super) fn read_in_background(registry: Arc<Registry>, socket: PathBuf) {
    let mut pending = registry.memory_zones();
    if pending.is_empty() {
        return;
    }
    for (_, zone) in &pending {
        zone.set_warm(false);
    }
    let spawned = std::thread::Builder::new()
        .name("weir-handover".into())
        .spawn(move || {
            let deadline = Instant::now() + WAIT;
            while !pending.is_empty() && Instant::now() < deadline {
                pending.retain(|(name, zone)| {
                    let path = dump_path(&socket, name);
                    if !path.exists() {
                        return true;
                    }
                    load(name, zone, &path);
                    let _ = std::fs::remove_file(&path);
                    zone.set_warm(true);
                    false
                });
                std::thread::sleep(Duration::from_millis(10));
            }
            for (name, zone) in pending {
                zone.set_warm(true);
                tracing::warn!(zone = %name, "no memory cache came from the previous process");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "memory caches of the previous process not awaited");
    }
}

/// Inserts a file's objects, coldest first (the hottest end up the most recently inserted),
/// skipping keys the zone holds already.
fn load(name: &str, zone: &crate::cache::CacheZone, path: &Path) {
    let started = Instant::now();
    let objects = match dump::read(path) {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(zone = %name, error = %e, "memory cache of the previous process unreadable");
            return;
        }
    };
    let mut n = 0;
    for (key, obj) in objects.into_iter().rev() {
        let value_of = |field: &str| {
            obj.meta
                .vary
                .iter()
                .find(|(v, _)| v == field)
                .and_then(|(_, value)| value.clone())
        };
        if matches!(
            zone.store.lookup(&key, value_of),
            weir_cache::store::Lookup::Found(_)
        ) {
            continue;
        }
        n += u64::from(zone.store.insert(&key, Arc::new(obj)));
    }
    tracing::info!(
        zone = %name,
        objects = n,
        ms = started.elapsed().as_millis() as u64,
        "memory cache taken over from the previous process"
    );
}
