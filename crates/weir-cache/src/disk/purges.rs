//! Purges that outlive a restart. A purge is appended to `purges.log` (synced before the purge
//! is answered) with the sequence number it was made at; an object read from disk is checked
//! against the purges made after it was written: a match is dropped (or, for a soft purge,
//! served as stale). So an object stored before a purge that matched it is never served after a
//! restart, whatever the index snapshot says — the flaw that made Varnish deprecate its
//! persistent storage. A purge of everything also empties the disk at once.
//!
//! Purges older than every record still on disk match nothing and are dropped when the log is
//! loaded again.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use bytes::Bytes;

use super::codec::{In, Out};
use super::record::{self, Kind};
use crate::key::CacheKey;
use crate::storage::PurgeSelector;

/// A purge as remembered.
#[derive(Debug, Clone)]
pub struct Purge {
    pub seq: u64,
    pub soft: bool,
    pub sel: PurgeSelector,
    /// The newest segment when it was made: once every segment up to this one is gone, the
    /// purge matches nothing left and is forgotten.
    pub seg: u32,
}

impl Purge {
    /// Whether the purge still matters: exact keys leave the index when purged, so the purge is
    /// only needed until an index snapshot made after it (`snapshot_seq`); patterns are needed
    /// while segments written before them remain (`oldest_seg`).
    pub fn needed(&self, snapshot_seq: u64, oldest_seg: u32) -> bool {
        match (&self.sel, self.soft) {
            (PurgeSelector::Exact(_), false) => self.seq >= snapshot_seq,
            _ => oldest_seg <= self.seg,
        }
    }
}

fn encode_sel(sel: &PurgeSelector, o: &mut Out) {
    match sel {
        PurgeSelector::Exact(k) => {
            o.u8(1);
            let (s, e) = k.url_span();
            o.u32(s as u32);
            o.u32(e as u32);
            o.bytes(&k.text);
        }
        PurgeSelector::Url(u) => {
            o.u8(2);
            o.bytes(u);
        }
        PurgeSelector::Prefix(p) => {
            o.u8(3);
            o.bytes(p);
        }
        PurgeSelector::Host(h) => {
            o.u8(4);
            o.bytes(h);
        }
        PurgeSelector::Regex(r) => {
            o.u8(5);
            o.bytes(r.as_str().as_bytes());
        }
        PurgeSelector::Tag(t) => {
            o.u8(6);
            o.bytes(t.as_bytes());
        }
        PurgeSelector::All => o.u8(7),
    }
}

fn decode_sel(i: &mut In<'_>) -> Option<PurgeSelector> {
    Some(match i.u8()? {
        1 => {
            let (s, e) = (i.u32()? as usize, i.u32()? as usize);
            PurgeSelector::Exact(CacheKey::from_parts(
                Bytes::copy_from_slice(i.bytes()?),
                s,
                e,
            )?)
        }
        2 => PurgeSelector::Url(i.bytes()?.to_vec()),
        3 => PurgeSelector::Prefix(i.bytes()?.to_vec()),
        4 => PurgeSelector::Host(i.bytes()?.to_vec()),
        5 => PurgeSelector::Regex(regex::bytes::Regex::new(&i.string()?).ok()?),
        6 => PurgeSelector::Tag(i.string()?),
        7 => PurgeSelector::All,
        _ => return None,
    })
}

/// Whether two selectors select the same keys (a repeated purge replaces the older one).
pub fn same(a: &PurgeSelector, b: &PurgeSelector) -> bool {
    let mut x = Out::default();
    let mut y = Out::default();
    encode_sel(a, &mut x);
    encode_sel(b, &mut y);
    x.0 == y.0
}

/// Encodes a purge as a log record.
pub fn encode(p: &Purge) -> Vec<u8> {
    let mut o = Out::default();
    o.u8(u8::from(p.soft));
    o.u32(p.seg);
    encode_sel(&p.sel, &mut o);
    record::encode(Kind::Purge, p.seq, 0, b"", &o.0)
}

/// The purges in `path` (torn tail ignored), and the file opened for appending.
pub fn load(path: &Path) -> io::Result<(Vec<Purge>, File)> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(len) = bytes.get(at..).and_then(record::claimed_len) {
        let Some(rec) = bytes.get(at..at + len).and_then(record::decode) else {
            break;
        };
        let mut i = In { b: rec.payload };
        if let (Some(soft), Some(seg), Some(sel)) = (i.u8(), i.u32(), decode_sel(&mut i)) {
            out.push(Purge {
                seq: rec.seq,
                soft: soft != 0,
                sel,
                seg,
            });
        }
        at += len;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    if at < bytes.len() {
        // A torn purge at the end (a crash mid-append): cut it, so later purges follow valid ones.
        file.set_len(at as u64)?;
    }
    Ok((out, file))
}

/// Rewrites `path` with only `keep` (older purges that match nothing left on disk are gone).
pub fn rewrite(path: &Path, keep: &[Purge]) -> io::Result<File> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    for p in keep {
        f.write_all(&encode(p))?;
    }
    f.sync_data()?;
    std::fs::rename(&tmp, path)?;
    OpenOptions::new().append(true).open(path)
}

/// The verdict of the purges on an object written at `seq` under `key` with `tags`: `None` if
/// none made after it matches, else whether all matching ones were soft.
pub fn verdict(purges: &[Purge], seq: u64, key: &CacheKey, tags: &[String]) -> Option<bool> {
    let mut verdict = None;
    for p in purges.iter().filter(|p| p.seq > seq) {
        if p.sel.matches(key, |t| tags.iter().any(|x| x == t)) {
            if !p.soft {
                return Some(false);
            }
            verdict = Some(true);
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purges_round_trip_and_match_only_older_objects() {
        let dir = crate::disk::tests::tempdir("purges");
        let path = dir.join("purges.log");
        let key = CacheKey::from_url("http", "a.test/p/1");
        let purges = vec![
            Purge {
                seq: 10,
                soft: false,
                sel: PurgeSelector::Prefix(b"a.test/p/".to_vec()),
                seg: 1,
            },
            Purge {
                seq: 20,
                soft: true,
                sel: PurgeSelector::Regex(regex::bytes::Regex::new("^b\\.test").unwrap()),
                seg: 1,
            },
            Purge {
                seq: 30,
                soft: false,
                sel: PurgeSelector::Exact(key.clone()),
                seg: 1,
            },
            Purge {
                seq: 40,
                soft: false,
                sel: PurgeSelector::Tag("t".into()),
                seg: 1,
            },
        ];
        let (_, mut f) = load(&path).unwrap();
        for p in &purges {
            f.write_all(&encode(p)).unwrap();
        }
        f.write_all(&encode(&purges[0])[..9]).unwrap();
        drop(f);
        let (back, _) = load(&path).unwrap();
        assert_eq!(back.len(), 4, "torn tail ignored");
        let b = CacheKey::from_url("http", "b.test/x");
        let other = CacheKey::from_url("http", "a.test/q");
        assert_eq!(verdict(&back, 5, &key, &[]), Some(false));
        assert_eq!(
            verdict(&back, 35, &key, &[]),
            None,
            "stored after the purges"
        );
        assert_eq!(verdict(&back, 15, &b, &[]), Some(true), "soft");
        assert_eq!(verdict(&back, 15, &other, &[]), None);
        assert_eq!(verdict(&back, 35, &other, &["t".into()]), Some(false));
        let f = rewrite(&path, &back[2..]).unwrap();
        drop(f);
        assert_eq!(load(&path).unwrap().0.len(), 2);
    }
}
