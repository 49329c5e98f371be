//! The disk tier's one writer thread: takes the directory lock, loads the index (snapshot, then
//! the records after it), then appends stores, persists purges, evicts the oldest segments and
//! saves the snapshot, until it is told to stop.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};

use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use super::index::Covered;
use super::record::{self, Kind};
use super::{codec, purges, stable_hash, DiskStats, Inner, Msg};

pub(super) fn run(inner: &Inner, rx: &Receiver<Msg>) {
    // Purges made while another process holds the directory: answered once written here.
    let mut early: Vec<oneshot::Sender<bool>> = Vec::new();
    let waiting_since = Instant::now();
    let (mut said, mut said_error) = (false, false);
    let _lock = loop {
        match super::log::lock_dir(&inner.cfg.path) {
            Ok(Some(l)) => break l,
            Ok(None) => {}
            Err(e) if !said_error => {
                // Writable at open, not now: said once; the tier stays empty meanwhile.
                said_error = true;
                tracing::error!(path = %inner.cfg.path.display(), error = %e, "disk tier: cannot take the directory's lock: running without it");
            }
            Err(_) => {}
        }
        // Another process (the previous binary, during an upgrade) still has the directory.
        inner.lock_wait.store(true, Ordering::Relaxed);
        if !said && waiting_since.elapsed() >= Duration::from_secs(1) {
            said = true;
            let holder = super::log::lock_holder(&inner.cfg.path).unwrap_or(0);
            tracing::warn!(
                path = %inner.cfg.path.display(),
                pid = holder,
                "disk tier: another process holds the directory; lookups are misses and stores are dropped until it lets go"
            );
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                for done in early {
                    let _ = done.send(false);
                }
                return;
            }
            Ok(Msg::Store(_, _, cost)) => {
                inner.queued.fetch_sub(cost, Ordering::Relaxed);
                inner.queued_entries.fetch_sub(1, Ordering::Relaxed);
                DiskStats::bump(&inner.stats.write_dropped);
            }
            Ok(Msg::Purge(p, done)) => {
                // Kept in memory; persisted once the directory is ours (`load`), and answered
                // then: a purge is acknowledged only once a restart cannot undo it.
                drop(p);
                early.push(done);
            }
            Ok(Msg::Snapshot(done)) => {
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    };
    if said {
        tracing::info!(path = %inner.cfg.path.display(), "disk tier: the directory is ours now");
    }
    let started = Instant::now();
    let (mut purge_file, mut dirty, early_ok) = load(inner);
    for done in early.drain(..) {
        let _ = done.send(early_ok);
    }
    inner
        .stats
        .load_ms
        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    inner.ready.send_replace(true);
    inner.lock_wait.store(false, Ordering::Relaxed);
    let mut last_snapshot = Instant::now();
    // Purges written but not yet synced, answered together by one sync (group commit), each
    // with whether its own write went through.
    let mut unsynced: Vec<(oneshot::Sender<bool>, bool)> = Vec::new();
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => Ok(m),
            Err(TryRecvError::Empty) => {
                sync_purges(inner, &purge_file, &mut unsynced);
                rx.recv_timeout(Duration::from_millis(500))
            }
            Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok(Msg::Store(key, obj, cost)) => {
                inner.queued.fetch_sub(cost, Ordering::Relaxed);
                inner.queued_entries.fetch_sub(1, Ordering::Relaxed);
                let h = stable_hash(&key.text);
                let rec = record::encode(
                    Kind::Object,
                    inner.next_seq(),
                    h,
                    &key.text,
                    &codec::encode(&key, &obj),
                );
                match append_with_room(inner, &rec) {
                    Ok(loc) => {
                        inner.index.insert(h, loc);
                        DiskStats::bump(&inner.stats.writes);
                        inner
                            .stats
                            .bytes_written
                            .fetch_add(rec.len() as u64, Ordering::Relaxed);
                        dirty = true;
                        evict(inner);
                    }
                    Err(_) => DiskStats::bump(&inner.stats.write_errors),
                }
            }
            Ok(Msg::Purge(p, done)) => {
                let written = persist_purge(inner, &mut purge_file, &p);
                dirty = true;
                unsynced.push((done, written));
            }
            Ok(Msg::Snapshot(done)) => {
                sync_purges(inner, &purge_file, &mut unsynced);
                snapshot(inner, &mut purge_file);
                dirty = false;
                last_snapshot = Instant::now();
                let _ = done.send(());
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                sync_purges(inner, &purge_file, &mut unsynced);
                if dirty {
                    snapshot(inner, &mut purge_file);
                }
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if dirty && last_snapshot.elapsed() >= inner.cfg.snapshot_every {
            snapshot(inner, &mut purge_file);
            dirty = false;
            last_snapshot = Instant::now();
        }
    }
}

/// Appends a purge to the purge log (synced by [`sync_purges`]); a purge of everything empties
/// the disk. Returns whether the record was written whole: a torn one (a full disk) is cut
/// off again, so the next purge's record starts on a record boundary.
fn persist_purge(inner: &Inner, file: &mut Option<File>, p: &purges::Purge) -> bool {
    use std::io::Write;
    if matches!(p.sel, crate::storage::PurgeSelector::All) && !p.soft {
        inner.log.clear();
        inner.index.retain(|_| false);
    }
    let Some(f) = file else {
        return false;
    };
    let record = purges::encode(p);
    loop {
        // The file is in append mode: its length is where this record starts.
        let at = f.metadata().map(|m| m.len()).ok();
        let Err(e) = f.write_all(&record) else {
            return true;
        };
        if let Some(at) = at {
            if f.set_len(at).is_err() {
                DiskStats::bump(&inner.stats.write_errors);
            }
        }
        // A full file system: the oldest segment makes room, as for a store (a purge or an
        // invalidation lost here would come back after a restart).
        if e.raw_os_error() == Some(libc::ENOSPC) && evict_one(inner) {
            DiskStats::bump(&inner.stats.full_evictions);
            continue;
        }
        DiskStats::bump(&inner.stats.write_errors);
        return false;
    }
}

/// Syncs the purge log and answers the purges waiting for it.
fn sync_purges(
    inner: &Inner,
    file: &Option<File>,
    waiting: &mut Vec<(oneshot::Sender<bool>, bool)>,
) {
    if waiting.is_empty() {
        return;
    }
    let synced = match file {
        Some(f) => f.sync_data().is_ok(),
        None => false,
    };
    if !synced {
        DiskStats::bump(&inner.stats.write_errors);
    }
    for (done, written) in waiting.drain(..) {
        let _ = done.send(written && synced);
    }
}

/// Appends `rec`, making room first: the oldest segments go while the file system would have
/// less than `min_free` left, and again when the write finds it full (ENOSPC). A tier on a file
/// system smaller than its `max_size` once stopped storing for good at the first ENOSPC.
fn append_with_room(inner: &Inner, rec: &[u8]) -> std::io::Result<super::log::Loc> {
    let min_free = inner.cfg.min_free;
    if min_free > 0 {
        while super::log::free_bytes(&inner.cfg.path)
            .is_some_and(|free| free < min_free.saturating_add(rec.len() as u64))
        {
            if !evict_one(inner) {
                break;
            }
        }
    }
    loop {
        match inner.log.append(rec) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                DiskStats::bump(&inner.stats.full_evictions);
                if !evict_one(inner) {
                    return Err(e);
                }
            }
            other => return other,
        }
    }
}

/// Drops the oldest segment (never the one written to): whether there was one.
fn evict_one(inner: &Inner) -> bool {
    let Some(seg) = inner.log.drop_oldest() else {
        return false;
    };
    let n = inner.index.drop_segment(seg);
    inner.checked.drop_segment(seg);
    inner.stats.evicted.fetch_add(n, Ordering::Relaxed);
    true
}

/// Removes the oldest segments while the log is over its bound.
fn evict(inner: &Inner) {
    while inner.log.bytes() > inner.cfg.max_size {
        if !evict_one(inner) {
            return;
        }
    }
}

/// Saves the index snapshot (segments synced first), then forgets purges no longer needed.
fn snapshot(inner: &Inner, purge_file: &mut Option<File>) {
    if inner.log.sync().is_err() {
        DiskStats::bump(&inner.stats.write_errors);
        return;
    }
    let covered = Covered {
        segments: inner.log.segments(),
        next_seq: inner.seq.load(Ordering::Relaxed),
    };
    if inner
        .index
        .save(&inner.cfg.path.join("index.snap"), &covered)
        .is_err()
    {
        DiskStats::bump(&inner.stats.write_errors);
        return;
    }
    let oldest = covered.segments.first().map_or(u32::MAX, |s| s.0);
    let mut list = inner.purges.write().unwrap_or_else(|e| e.into_inner());
    let before = list.len();
    list.retain(|p| p.needed(covered.next_seq, oldest));
    let path = inner.cfg.path.join("purges.log");
    // Rewritten when purges were forgotten, or when repeated ones left the file far longer
    // than the list.
    let long = std::fs::metadata(&path).is_ok_and(|m| m.len() > 4096 + 2 * 128 * list.len() as u64);
    if list.len() != before || long {
        match purges::rewrite(&path, &list) {
            Ok(f) => *purge_file = Some(f),
            Err(_) => DiskStats::bump(&inner.stats.write_errors),
        }
    }
}

/// Loads the index: the snapshot, then every record appended after it (torn tails cut), and
/// the purge log. Returns the purge log opened for appending, whether the snapshot is out of
/// date (records were found after it), and whether the purges made before the directory was
/// ours are on disk.
fn load(inner: &Inner) -> (Option<File>, bool, bool) {
    let covered = inner
        .index
        .load(&inner.cfg.path.join("index.snap"))
        .unwrap_or_default();
    let segments = inner.log.segments();
    let lens: HashMap<u32, u64> = segments.iter().copied().collect();
    // Entries into segments gone or cut since the snapshot.
    inner.index.retain(|loc| {
        lens.get(&loc.seg)
            .is_some_and(|len| u64::from(loc.off) + u64::from(loc.len) <= *len)
    });
    let covered_len: HashMap<u32, u64> = covered.segments.iter().copied().collect();
    let mut next_seq = covered.next_seq.max(1);
    let mut found_after = false;
    for (id, len) in segments {
        let from = covered_len
            .get(&id)
            .copied()
            .filter(|c| *c <= len)
            .unwrap_or(0);
        let end = inner.log.scan(id, from, |loc, bytes| {
            if let Some(r) = record::decode(bytes) {
                next_seq = next_seq.max(r.seq + 1);
                found_after = true;
                if r.kind == Kind::Object {
                    inner.index.insert(r.hash, loc);
                }
            }
        });
        match end {
            Ok(end) if end < len => {
                // A torn or corrupt tail (a crash mid-append): never served, cut.
                DiskStats::bump(&inner.stats.torn);
                if inner.log.truncate(id, end).is_err() {
                    DiskStats::bump(&inner.stats.write_errors);
                }
            }
            Ok(_) => {}
            Err(_) => DiskStats::bump(&inner.stats.read_errors),
        }
    }
    let path = inner.cfg.path.join("purges.log");
    let (list, file) = match purges::load(&path) {
        Ok((list, file)) => (list, Some(file)),
        Err(_) => {
            DiskStats::bump(&inner.stats.write_errors);
            (Vec::new(), None)
        }
    };
    if let Some(max) = list.iter().map(|p| p.seq).max() {
        next_seq = next_seq.max(max + 1);
    }
    let mut held = inner.purges.write().unwrap_or_else(|e| e.into_inner());
    // Purges made by this process while the directory was not yet ours come after those.
    let made_here = std::mem::replace(&mut *held, list);
    inner.seq.fetch_max(next_seq, Ordering::Relaxed);
    let mut file = file;
    let mut early_ok = true;
    for mut p in made_here {
        p.seq = inner.next_seq();
        early_ok &= persist_purge(inner, &mut file, &p);
        held.push(p);
    }
    early_ok &= file.as_ref().is_some_and(|f| f.sync_data().is_ok());
    (file, found_after, early_ok)
}
