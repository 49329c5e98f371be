//! Bodies sent straight from the segment file (`sendfile`), for plain-TCP clients.
//!
//! A disk hit read whole costs a copy into memory, a CRC pass over it and a copy out to the
//! socket; nginx sends its cache files with `sendfile` and pays none of those. Measured with
//! `bench/disk.sh` before this (disk-20261124-1021), a 64 KiB disk hit cost 41.9 µs against
//! nginx's 19.5 µs, and 1 MiB 436 µs against 204 µs.
//!
//! The checksum still guards every byte served: a record is read whole, checked and served the
//! usual way the first time; its place is then remembered ([`Checked`]), and later hits read
//! only the start of the record again (its fields, up to [`HEAD_READ`] bytes) and hand the
//! body's place in the file to the connection. Bit rot after that first check is not caught
//! (the page cache is what sendfile reads, as nginx's and Varnish's file storage do); a record
//! is never served from the file before its checksum held once in this process.
//!
//! Only bodies of at least [`FILE_MIN`] bytes take this path: below it one read and one write
//! cost less than the extra syscalls.
//!
//! **Known fields.** The fields decoded for a file hit are kept in memory ([`Checked`]'s
//! `known`, at most [`KNOWN_MAX`] records), so the next hit of the same record is answered on
//! the worker itself, without a hop to the IO pool or a read: the index still says where the
//! key lies, the record there is the one remembered, and no purge came since (every purge
//! forgets them all; an evicted segment forgets its own). Before this a 64 KiB disk hit cost
//! 1.21× nginx's CPU and a 1 MiB one 1.35× (bench/results/disk-20261124-1110.md): the pool's
//! thread wake-up, an 8 KiB read and a decode per hit.
//!
//! **Reads without the pool.** A worker first tries the read itself from the page cache
//! (`preadv2` with `RWF_NOWAIT`, `log::Wait::No`): a record of at most [`NOWAIT_MAX`] bytes
//! whole, or a large one's fields; only what is not cached (or larger) goes to the IO pool, so
//! a worker never waits for a disk. A warm 1 KiB disk hit cost 0.90× nginx's CPU with the hop
//! (bench/results/disk-20261126-1145.md).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{codec, log, record, Blocked, DiskStats, Inner};
use crate::key::CacheKey;
use crate::object::CachedObject;
use crate::storage::{FileBody, Read as DiskRead};

/// Smallest body sent from the file.
pub const FILE_MIN: usize = 32 * 1024;
/// How much of a record is read again to find its fields (a head larger than this is read
/// whole, as usual).
const HEAD_READ: usize = 8 * 1024;
/// Most records whose decoded fields are kept (a few hundred bytes each).
pub const KNOWN_MAX: usize = 4096;
/// Largest record a worker reads whole itself from the page cache (`RWF_NOWAIT`); a larger one
/// is copied on the IO pool, off the worker.
pub const NOWAIT_MAX: usize = 64 * 1024;

/// Records (segment, offset) whose checksum held when read whole in this process, and the
/// decoded fields of those served from the file since.
#[derive(Debug, Default)]
pub(super) struct Checked(Mutex<Records>);

#[derive(Debug, Default)]
struct Records {
    checked: HashSet<(u32, u32)>,
    known: HashMap<u64, Known>,
}

/// A record served from the file: where it lies, its key, its fields and its body's place.
#[derive(Debug)]
struct Known {
    loc: log::Loc,
    text: Bytes,
    obj: Arc<CachedObject>,
    body: FileBody,
}

impl Checked {
    fn has(&self, loc: log::Loc) -> bool {
        self.lock().checked.contains(&(loc.seg, loc.off))
    }

    fn add(&self, loc: log::Loc) {
        self.lock().checked.insert((loc.seg, loc.off));
    }

    /// The remembered fields of the record at `loc` for `text`, if it was served from the file.
    pub(super) fn known(
        &self,
        h: u64,
        loc: log::Loc,
        text: &[u8],
    ) -> Option<(Arc<CachedObject>, FileBody)> {
        let records = self.lock();
        let k = records.known.get(&h)?;
        (k.loc == loc && k.text == text).then(|| (k.obj.clone(), k.body.clone()))
    }

    /// Remembers a record served from the file, unless a purge came since the read began
    /// (`gen`, against `now`): a purge bumps the generation and then forgets under this lock.
    fn remember(&self, h: u64, known: Known, gen: u64, now: &AtomicU64) {
        let mut records = self.lock();
        if now.load(Ordering::Acquire) != gen {
            return;
        }
        if records.known.len() >= KNOWN_MAX && !records.known.contains_key(&h) {
            // Any one goes: the next hit of it reads its fields again.
            if let Some(victim) = records.known.keys().next().copied() {
                records.known.remove(&victim);
            }
        }
        records.known.insert(h, known);
    }

    /// Forgets every remembered record (a purge: any of them may be what it removes).
    pub(super) fn forget_known(&self) {
        self.lock().known.clear();
    }

    /// Forgets an evicted segment's records.
    pub(super) fn drop_segment(&self, seg: u32) {
        let mut records = self.lock();
        records.checked.retain(|(s, _)| *s != seg);
        records.known.retain(|_, k| k.loc.seg != seg);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A record's sequence number, key and fields (its body empty), and where its body lies.
type Fields = (u64, CacheKey, Arc<CachedObject>, FileBody);

impl Inner {
    /// One record for a lookup (IO pool thread): from the file when `files` allows and the
    /// record was checked before, else read whole (and remembered as checked when large).
    /// `gen`: the purge generation when the lookup began (fields served from the file are
    /// remembered only if no purge came since).
    ///
    /// With [`log::Wait::No`] (a worker) it reads only what the page cache holds, and only a
    /// record's fields or a whole record of at most [`NOWAIT_MAX`] bytes: `Err(Blocked)` when
    /// that is not possible, for the IO pool to do.
    pub(super) fn read_any(
        &self,
        h: u64,
        loc: log::Loc,
        text: &[u8],
        (files, gen, wait): (bool, u64, log::Wait),
    ) -> Result<Option<(u64, CacheKey, DiskRead)>, Blocked> {
        let large = loc.len as usize >= FILE_MIN + HEAD_READ;
        if files && large && self.checked.has(loc) {
            if let Some((seq, key, obj, body)) = self.read_head(loc, text, wait)? {
                DiskStats::bump(&self.stats.file_hits);
                if !self.judge(h, loc, seq, &key, &obj) {
                    return Ok(None);
                }
                let known = Known {
                    loc,
                    text: key.text.clone(),
                    obj: obj.clone(),
                    body: body.clone(),
                };
                self.checked.remember(h, known, gen, &self.purge_gen);
                return Ok(Some((seq, key, DiskRead::File(obj, body))));
            }
        }
        if wait == log::Wait::No && loc.len as usize > NOWAIT_MAX {
            return Err(Blocked);
        }
        let Some((seq, key, obj)) = self.read(h, loc, text, wait)? else {
            return Ok(None);
        };
        if large {
            self.checked.add(loc);
        }
        Ok(Some((seq, key, DiskRead::Whole(obj))))
    }

    /// The start of a checked record: its fields, and where its body lies. `None` when the
    /// fields run past [`HEAD_READ`] or anything is off (the whole read then decides).
    fn read_head(
        &self,
        loc: log::Loc,
        text: &[u8],
        wait: log::Wait,
    ) -> Result<Option<Fields>, Blocked> {
        let (file, bytes) = match self.log.read_at(loc, HEAD_READ, wait) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && wait == log::Wait::No => {
                return Err(Blocked)
            }
            Err(_) => {
                DiskStats::bump(&self.stats.read_errors);
                return Ok(None);
            }
        };
        Ok(Self::fields_of(loc, text, file, &bytes))
    }

    /// The fields at the start of a record (`bytes`) and where its body lies in `file`.
    fn fields_of(
        loc: log::Loc,
        text: &[u8],
        file: Arc<std::fs::File>,
        bytes: &[u8],
    ) -> Option<Fields> {
        let r = record::decode_prefix(bytes, loc.len as usize)
            .filter(|r| r.kind == record::Kind::Object && r.key == text)?;
        let payload_at = bytes.len() - r.payload.len();
        let head = codec::decode_head(r.key, r.payload)?;
        let body_at = (payload_at + head.body_at) as u64;
        if body_at + head.body_len as u64 != u64::from(loc.len) {
            return None;
        }
        let obj = CachedObject::with_length(
            head.meta,
            head.reason,
            head.headers,
            Bytes::new(),
            head.body_len as u64,
        );
        let body = FileBody {
            file,
            offset: u64::from(loc.off) + body_at,
            len: head.body_len as u64,
        };
        Some((r.seq, head.key, Arc::new(obj), body))
    }
}
