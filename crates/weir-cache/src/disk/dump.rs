//! A memory store written to one file and read back: how a zone without a disk tier crosses a
//! binary upgrade (the old process writes, the new one reads and deletes). The records are the
//! disk tier's (checksummed, `record.rs` + `codec.rs`), hottest first; the file is written under
//! a temporary name and renamed once complete, so a reader never sees half of one. A record
//! that fails its checksum ends the read: what came before it is kept.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::{codec, record, stable_hash};
use crate::key::CacheKey;
use crate::object::CachedObject;

fn temporary(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".tmp");
    PathBuf::from(p)
}

/// Writes `objects` (hottest first) to `path`; how many.
pub fn write(path: &Path, objects: &[(CacheKey, Arc<CachedObject>)]) -> io::Result<u64> {
    let tmp = temporary(path);
    let mut out = io::BufWriter::new(std::fs::File::create(&tmp)?);
    for (seq, (key, obj)) in objects.iter().enumerate() {
        let payload = codec::encode(key, obj);
        let rec = record::encode(
            record::Kind::Object,
            seq as u64,
            stable_hash(&key.text),
            &key.text,
            &payload,
        );
        out.write_all(&rec)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(objects.len() as u64)
}

/// Reads what [`write`] wrote, in its order; the bodies share one buffer with the file's bytes.
pub fn read(path: &Path) -> io::Result<Vec<(CacheKey, CachedObject)>> {
    let bytes = Bytes::from(std::fs::read(path)?);
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(len) = record::claimed_len(&bytes[at..]) else {
            break;
        };
        let Some(rec) = bytes.get(at..at + len).and_then(record::decode) else {
            break;
        };
        let Some(decoded) = codec::decode(Some(&bytes), rec.key, rec.payload) else {
            break;
        };
        out.push(decoded);
        at += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_round_trips_and_a_torn_one_keeps_what_precedes_the_tear() {
        let dir = super::super::tests::tempdir("dump");
        let path = dir.join("zone.cache");
        let objects: Vec<(CacheKey, Arc<CachedObject>)> = (0..3)
            .map(|i| {
                let key = CacheKey::from_url("http", &format!("a/{i}"));
                let obj = CachedObject::new(
                    crate::object::tests::meta(None),
                    Bytes::new(),
                    Vec::new(),
                    Bytes::from(format!("body {i}")),
                );
                (key, Arc::new(obj))
            })
            .collect();
        assert_eq!(write(&path, &objects).unwrap(), 3);
        assert!(!temporary(&path).exists());
        let back = read(&path).unwrap();
        let got: Vec<(&[u8], &[u8])> = back.iter().map(|(k, o)| (k.url(), &o.body[..])).collect();
        assert_eq!(
            got,
            [
                (&b"a/0"[..], &b"body 0"[..]),
                (b"a/1", b"body 1"),
                (b"a/2", b"body 2")
            ]
        );
        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() - 3]).unwrap();
        assert_eq!(read(&path).unwrap().len(), 2);
    }
}
