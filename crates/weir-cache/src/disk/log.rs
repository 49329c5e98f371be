//! An append-only log of records in numbered segment files (`00000001.seg`, ...), each at most
//! `segment_size` bytes. One writer appends (with `pwrite` at the end of the newest segment);
//! any thread reads a record with one `pread` at its [`Loc`]. The oldest segment is removed as a
//! whole when the log is over its bound (FIFO, like ATS's cyclic store): no per-object file to
//! unlink, no free-space map. Readers hold the segment's file by `Arc`, so a segment removed
//! under a read finishes that read.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::record;

/// Takes an exclusive `flock` on `dir/lock`: `Ok(None)` while another process (or another
/// open store in this one) holds it, `Err` when the file cannot be opened for writing (a
/// read-only directory: the lock will never come). Held until the file is dropped; the
/// holder's pid is written in it, for the messages of the processes that wait.
pub fn lock_dir(dir: &Path) -> io::Result<Option<File>> {
    let mut f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    if !try_flock(&f) {
        return Ok(None);
    }
    use std::io::Write;
    let _ = f.set_len(0);
    let _ = writeln!(f, "{}", std::process::id());
    Ok(Some(f))
}

fn try_flock(f: &File) -> bool {
    // SAFETY: `flock` on a descriptor the caller owns; no memory is passed.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    rc == 0
}

/// The pid of the process holding `dir/lock`, when another does (as it wrote it there; 0 when
/// it wrote none). `None` when the lock is free (it is taken and let go again to find out).
pub fn lock_holder(dir: &Path) -> Option<u32> {
    let f = File::options()
        .read(true)
        .write(true)
        .open(dir.join("lock"))
        .ok()?;
    if try_flock(&f) {
        return None;
    }
    let text = std::fs::read_to_string(dir.join("lock")).unwrap_or_default();
    Some(text.trim().parse().unwrap_or(0))
}

/// Bytes free for unprivileged writers on the file system holding `dir` (`statvfs`), `None`
/// when it cannot be read.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `st` points to
    // writable memory of `statvfs`'s size, which the call fills when it returns 0.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `statvfs` returned 0, so it initialised `st`.
    #[allow(unsafe_code)]
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Where a record lies: its segment, offset and length (12 bytes, so that an index of a million
/// objects stays small).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    pub off: u32,
    pub len: u32,
}

#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    len: u64,
}

/// The segments of one directory.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    segment_size: u64,
    segments: RwLock<BTreeMap<u32, Segment>>,
}

fn seg_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:08}.seg"))
}

impl Log {
    /// Opens (creating) the log in `dir`, with the segments already there.
    pub fn open(dir: &Path, segment_size: u64) -> io::Result<Log> {
        std::fs::create_dir_all(dir)?;
        let mut segments = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path())?;
            let len = file.metadata()?.len();
            segments.insert(
                id,
                Segment {
                    file: Arc::new(file),
                    len,
                },
            );
        }
        Ok(Log {
            dir: dir.to_path_buf(),
            segment_size: segment_size.clamp(1 << 16, u32::MAX as u64),
            segments: RwLock::new(segments),
        })
    }

    fn read_segments(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<u32, Segment>> {
        self.segments.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_segments(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u32, Segment>> {
        self.segments.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one encoded record (writer thread only).
    pub fn append(&self, rec: &[u8]) -> io::Result<Loc> {
        let (id, file, off) = {
            let mut segs = self.write_segments();
            let last = segs.iter().next_back().map(|(id, s)| (*id, s.len));
            let id = match last {
                Some((id, len)) if len + rec.len() as u64 <= self.segment_size || len == 0 => id,
                _ => self.new_segment(&mut segs)?,
            };
            let seg = segs
                .get_mut(&id)
                .ok_or_else(|| io::Error::other("segment"))?;
            let off = seg.len;
            if off + rec.len() as u64 > u32::MAX as u64 {
                return Err(io::Error::other("record beyond a segment's 4 GiB"));
            }
            seg.len += rec.len() as u64;
            (id, seg.file.clone(), off)
        };
        if let Err(e) = file.write_all_at(rec, off) {
            // Nothing of it counts: the next append overwrites the torn bytes.
            if let Some(seg) = self.write_segments().get_mut(&id) {
                seg.len = off;
            }
            return Err(e);
        }
        Ok(Loc {
            seg: id,
            off: off as u32,
            len: rec.len() as u32,
        })
    }

    /// Starts a new segment: the next append goes there. Its id (every older segment's is
    /// lower), for a compaction that rewrites the live records and then drops the older ones.
    pub fn roll(&self) -> io::Result<u32> {
        self.new_segment(&mut self.write_segments())
    }

    /// Creates the next segment (empty) in `segs`; its id.
    fn new_segment(&self, segs: &mut BTreeMap<u32, Segment>) -> io::Result<u32> {
        let id = segs.keys().next_back().map_or(1, |id| id + 1);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(seg_path(&self.dir, id))?;
        segs.insert(
            id,
            Segment {
                file: Arc::new(file),
                len: 0,
            },
        );
        Ok(id)
    }

    /// Removes the segments older than `id`.
    pub fn drop_before(&self, id: u32) {
        let mut segs = self.write_segments();
        let old: Vec<u32> = segs.range(..id).map(|(k, _)| *k).collect();
        for k in old {
            segs.remove(&k);
            let _ = std::fs::remove_file(seg_path(&self.dir, k));
        }
    }

    /// Reads the record at `loc` (any thread; blocking).
    pub fn read(&self, loc: Loc) -> io::Result<Vec<u8>> {
        Ok(self.read_at(loc, loc.len as usize, Wait::Yes)?.1)
    }

    /// The first `n` bytes of the record at `loc` (all of it when shorter), and its segment's
    /// file (open: it stays readable while a body is sent from it, even once evicted).
    pub fn read_prefix(&self, loc: Loc, n: usize) -> io::Result<(Arc<File>, Vec<u8>)> {
        self.read_at(loc, n, Wait::Yes)
    }

    /// The first `n` bytes of the record at `loc` and its segment's file. With [`Wait::No`]
    /// only from the page cache (`preadv2` with `RWF_NOWAIT`): `WouldBlock` when some of the
    /// bytes are not there (or the file system cannot tell), and nothing is read.
    pub fn read_at(&self, loc: Loc, n: usize, wait: Wait) -> io::Result<(Arc<File>, Vec<u8>)> {
        let file = self
            .read_segments()
            .get(&loc.seg)
            .map(|s| s.file.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "segment removed"))?;
        let mut buf = vec![0; n.min(loc.len as usize)];
        match wait {
            Wait::Yes => file.read_exact_at(&mut buf, loc.off as u64)?,
            Wait::No => read_cached(&file, &mut buf, loc.off as u64)?,
        }
        Ok((file, buf))
    }

    /// Bytes in all segments.
    pub fn bytes(&self) -> u64 {
        self.read_segments().values().map(|s| s.len).sum()
    }

    /// (id, length) of every segment, oldest first.
    pub fn segments(&self) -> Vec<(u32, u64)> {
        self.read_segments()
            .iter()
            .map(|(id, s)| (*id, s.len))
            .collect()
    }

    /// Removes the oldest segment (never the only one); its id.
    pub fn drop_oldest(&self) -> Option<u32> {
        let mut segs = self.write_segments();
        if segs.len() < 2 {
            return None;
        }
        let (id, _) = segs.pop_first()?;
        drop(segs);
        let _ = std::fs::remove_file(seg_path(&self.dir, id));
        Some(id)
    }

    /// Removes every segment (a purge of everything).
    pub fn clear(&self) {
        let mut segs = self.write_segments();
        for id in segs.keys() {
            let _ = std::fs::remove_file(seg_path(&self.dir, *id));
        }
        segs.clear();
    }

    /// Cuts segment `id` at `len` (a torn tail found when loading).
    pub fn truncate(&self, id: u32, len: u64) -> io::Result<()> {
        let mut segs = self.write_segments();
        if let Some(s) = segs.get_mut(&id) {
            s.file.set_len(len)?;
            s.len = len;
        }
        Ok(())
    }

    /// Makes the newest segment's data durable (`fdatasync`), before an index snapshot that
    /// points into it.
    pub fn sync(&self) -> io::Result<()> {
        let files: Vec<Arc<File>> = self
            .read_segments()
            .values()
            .map(|s| s.file.clone())
            .collect();
        // Older segments were synced when the log moved past them; syncing them again is cheap.
        for f in files.iter().rev().take(2) {
            f.sync_data()?;
        }
        Ok(())
    }

    /// Every valid record of segment `id` from byte `from` on, as (offset, bytes); stops at the
    /// first torn or corrupt one and returns the offset where the valid records end.
    pub fn scan(&self, id: u32, from: u64, mut each: impl FnMut(Loc, &[u8])) -> io::Result<u64> {
        let Some((file, len)) = self
            .read_segments()
            .get(&id)
            .map(|s| (s.file.clone(), s.len))
        else {
            return Ok(from);
        };
        let mut at = from;
        let mut reader = io::BufReader::with_capacity(1 << 20, ReadAt { file: &file, at });
        let mut head = [0u8; record::HEADER];
        let mut buf = Vec::new();
        while at + record::HEADER as u64 <= len {
            if io::Read::read_exact(&mut reader, &mut head).is_err() {
                break;
            }
            let Some(rlen) = record::claimed_len(&head) else {
                break;
            };
            if at + rlen as u64 > len {
                break;
            }
            buf.clear();
            buf.extend_from_slice(&head);
            buf.resize(rlen, 0);
            if io::Read::read_exact(&mut reader, &mut buf[record::HEADER..]).is_err()
                || record::decode(&buf).is_none()
            {
                break;
            }
            each(
                Loc {
                    seg: id,
                    off: at as u32,
                    len: rlen as u32,
                },
                &buf,
            );
            at += rlen as u64;
        }
        Ok(at)
    }
}

/// `Read` over a file from an offset, with `pread` (the log's file is shared with readers).
struct ReadAt<'f> {
    file: &'f File,
    at: u64,
}

impl io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// How a read may go: waiting for the disk (an IO pool thread), or not at all (a worker
/// thread, which must never wait for a disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Yes,
    No,
}

/// Fills `buf` from `file` at `off` from the page cache only: one `preadv2(RWF_NOWAIT)`, and
/// `WouldBlock` unless it brought every byte (a short read means the rest is not cached).
fn read_cached(file: &File, buf: &mut [u8], off: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let off =
        libc::off_t::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `iov` describes `buf`, which is valid for writes of its length and exclusively
    // borrowed for the call; the descriptor is open (`file` is borrowed).
    #[allow(unsafe_code)]
    let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    match n {
        n if n == buf.len() as isize => Ok(()),
        n if n >= 0 => Err(io::ErrorKind::WouldBlock.into()),
        // Not cached, a file system or kernel without RWF_NOWAIT (EOPNOTSUPP, EINVAL, ENOSYS),
        // a sandbox refusing the call, or a real error: the IO pool reads it the usual way and
        // judges what goes wrong there (a worker never drops a record on this path).
        _ => Err(io::ErrorKind::WouldBlock.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::record::{encode, Kind};

    #[test]
    fn append_read_roll_scan_and_drop() {
        let dir = crate::disk::tests::tempdir("log");
        let log = Log::open(&dir, 1 << 16).unwrap();
        let mut locs = Vec::new();
        for i in 0..100u64 {
            let rec = encode(Kind::Value, i, i, b"k", &vec![b'v'; 1000]);
            locs.push(log.append(&rec).unwrap());
        }
        assert!(log.segments().len() >= 2, "rolled over");
        let r = log.read(locs[57]).unwrap();
        assert_eq!(crate::disk::record::decode(&r).unwrap().seq, 57);
        let mut seen = 0;
        for (id, _) in log.segments() {
            log.scan(id, 0, |_, _| seen += 1).unwrap();
        }
        assert_eq!(seen, 100);
        let first = log.drop_oldest().unwrap();
        assert!(log.read(locs[0]).is_err() && first == 1);
        // A torn tail: the scan stops before it and says where.
        let last = *log.segments().last().unwrap();
        let file = OpenOptions::new()
            .write(true)
            .open(seg_path(&dir, last.0))
            .unwrap();
        file.write_all_at(b"WRC1garbage", last.1).unwrap();
        drop(log);
        let log = Log::open(&dir, 1 << 16).unwrap();
        let end = log.scan(last.0, 0, |_, _| {}).unwrap();
        assert_eq!(end, last.1);
    }
}
