//! The disk tier's index: stable key hash → [`Loc`], in memory, sharded, and its snapshot file.
//!
//! An entry is a `u64` hash and a 12-byte location in a `HashMap` (24 bytes a slot, about 40 a
//! key at the map's usual load): a million objects on disk cost about 40 MB of memory, and the
//! key text, fields and body stay on disk. The snapshot (`index.snap`) is those entries, the
//! length of each segment they cover and the next sequence number, checksummed: loading it is
//! one sequential read and a map insert per object (no walk over a million files, as nginx's
//! cache loader does), then only the bytes appended after it are scanned.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use super::codec::{In, Out};
use super::log::Loc;

const SHARDS: usize = 64;
const MAGIC: &[u8; 8] = b"WEIRIDX1";

/// The index.
#[derive(Debug)]
pub struct Index {
    shards: Vec<Mutex<HashMap<u64, Loc>>>,
}

/// What a snapshot holds besides the entries.
#[derive(Debug, Default)]
pub struct Covered {
    /// (segment, bytes of it the entries cover).
    pub segments: Vec<(u32, u64)>,
    pub next_seq: u64,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl Index {
    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Loc>> {
        self.shards[(hash % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, hash: u64) -> Option<Loc> {
        self.shard(hash).get(&hash).copied()
    }

    pub fn insert(&self, hash: u64, loc: Loc) {
        self.shard(hash).insert(hash, loc);
    }

    /// Removes `hash`; only if it still points at `at` when given (a newer record may have
    /// replaced the one found corrupt or purged).
    pub fn remove(&self, hash: u64, at: Option<Loc>) -> bool {
        let mut s = self.shard(hash);
        match (s.get(&hash), at) {
            (Some(cur), Some(at)) if *cur != at => false,
            (Some(_), _) => s.remove(&hash).is_some(),
            (None, _) => false,
        }
    }

    /// Drops the entries of segment `seg` (removed by eviction); how many.
    pub fn drop_segment(&self, seg: u32) -> u64 {
        self.retain(|loc| loc.seg != seg)
    }

    /// Keeps the entries `keep` accepts; how many were dropped.
    pub fn retain(&self, keep: impl Fn(&Loc) -> bool) -> u64 {
        let mut n = 0;
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            let before = s.len();
            s.retain(|_, loc| keep(loc));
            n += (before - s.len()) as u64;
        }
        n
    }

    pub fn len(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the snapshot to `path` (through a temporary file, synced, then renamed).
    pub fn save(&self, path: &Path, covered: &Covered) -> io::Result<()> {
        let mut o = Out(Vec::with_capacity(self.len() as usize * 20 + 64));
        o.0.extend_from_slice(MAGIC);
        o.u64(covered.next_seq);
        o.u32(covered.segments.len() as u32);
        for (seg, len) in &covered.segments {
            o.u32(*seg);
            o.u64(*len);
        }
        let count_at = o.0.len();
        o.u64(0);
        let mut count = 0u64;
        for s in &self.shards {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            for (hash, loc) in s.iter() {
                o.u64(*hash);
                o.u32(loc.seg);
                o.u32(loc.off);
                o.u32(loc.len);
                count += 1;
            }
        }
        o.0[count_at..count_at + 8].copy_from_slice(&count.to_le_bytes());
        let crc = crc32fast::hash(&o.0);
        o.u32(crc);
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&o.0)?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Loads a snapshot into this (empty) index; `None` if there is none or it is damaged (then
    /// the segments are scanned from their start).
    pub fn load(&self, path: &Path) -> Option<Covered> {
        let b = std::fs::read(path).ok()?;
        if b.len() < MAGIC.len() + 4 || &b[..MAGIC.len()] != MAGIC {
            return None;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut i = In {
            b: &body[MAGIC.len()..],
        };
        let next_seq = i.u64()?;
        let mut segments = Vec::new();
        for _ in 0..i.u32()? {
            segments.push((i.u32()?, i.u64()?));
        }
        let count = i.u64()?;
        if i.b.len() as u64 != count * 20 {
            return None;
        }
        let mut maps: Vec<HashMap<u64, Loc>> = (0..SHARDS)
            .map(|_| HashMap::with_capacity(count as usize / SHARDS + 1))
            .collect();
        for _ in 0..count {
            let hash = i.u64()?;
            let loc = Loc {
                seg: i.u32()?,
                off: i.u32()?,
                len: i.u32()?,
            };
            maps[(hash % SHARDS as u64) as usize].insert(hash, loc);
        }
        for (s, m) in self.shards.iter().zip(maps) {
            *s.lock().unwrap_or_else(|e| e.into_inner()) = m;
        }
        Some(Covered { segments, next_seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trip_and_damage_is_refused() {
        let dir = crate::disk::tests::tempdir("index");
        let idx = Index::default();
        for h in 0..1000u64 {
            idx.insert(
                h * 7919,
                Loc {
                    seg: (h % 3) as u32 + 1,
                    off: h as u32,
                    len: 100,
                },
            );
        }
        let path = dir.join("index.snap");
        let covered = Covered {
            segments: vec![(1, 10), (2, 20), (3, 30)],
            next_seq: 99,
        };
        idx.save(&path, &covered).unwrap();
        let back = Index::default();
        let c = back.load(&path).unwrap();
        assert_eq!(
            (c.segments, c.next_seq, back.len()),
            (covered.segments, 99, 1000)
        );
        assert_eq!(back.get(7919 * 5).unwrap().off, 5);
        assert_eq!(back.drop_segment(1), 334);
        let mut b = std::fs::read(&path).unwrap();
        b[40] ^= 1;
        std::fs::write(&path, b).unwrap();
        assert!(Index::default().load(&path).is_none(), "damaged snapshot");
    }
}
