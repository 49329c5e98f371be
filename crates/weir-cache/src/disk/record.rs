//! One record of a disk log: a fixed header, the key, and a payload, checksummed together.
//!
//! ```text
//!  0  u32  magic "WRC1"
//!  4  u32  length of the whole record
//!  8  u32  CRC-32 of bytes 12..length
//! 12  u8   kind
//! 13  [3]  zero
//! 16  u64  sequence number (one counter per directory, never reused)
//! 24  u64  key hash (the directory's stable hash, `Dir::hash`)
//! 32  u32  key length
//! 36  key, then the payload
//! ```
//!
//! A record whose magic, length or checksum is wrong is torn (a crash mid-write) or corrupt:
//! readers drop it, they never serve it. All integers are little-endian.

/// Bytes before the key.
pub const HEADER: usize = 36;
const MAGIC: u32 = u32::from_le_bytes(*b"WRC1");
/// No record is larger (a cache object is bounded by its zone, a KV value by its store).
pub const MAX_RECORD: usize = 1 << 30;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A cached response ([`super::codec`]).
    Object = 1,
    /// A key-value pair.
    Value = 2,
    /// A key-value deletion.
    Deleted = 3,
    /// A purge ([`super::purges`]).
    Purge = 4,
}

impl Kind {
    fn from(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Object,
            2 => Kind::Value,
            3 => Kind::Deleted,
            4 => Kind::Purge,
            _ => return None,
        })
    }
}

/// A decoded record, borrowing the bytes it was read from.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub kind: Kind,
    pub seq: u64,
    pub hash: u64,
    pub key: &'a [u8],
    pub payload: &'a [u8],
}

/// Encodes a record.
pub fn encode(kind: Kind, seq: u64, hash: u64, key: &[u8], payload: &[u8]) -> Vec<u8> {
    let len = HEADER + key.len() + payload.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&hash.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The length a record starting with `head` (at least [`HEADER`] bytes) claims, if its magic
/// is right and the length is plausible.
pub fn claimed_len(head: &[u8]) -> Option<usize> {
    if head.len() < HEADER || u32_at(head, 0) != MAGIC {
        return None;
    }
    let len = u32_at(head, 4) as usize;
    (HEADER..=MAX_RECORD).contains(&len).then_some(len)
}

/// Decodes a whole record; `None` if it is torn or corrupt.
pub fn decode(b: &[u8]) -> Option<Record<'_>> {
    let len = claimed_len(b)?;
    if b.len() != len || crc32fast::hash(&b[12..]) != u32_at(b, 8) {
        return None;
    }
    fields(b)
}

/// The start of a record of `len` bytes whose checksum was verified when it was read whole
/// before: its fields, and what of the payload `b` holds. For bodies sent straight from the
/// file (`file_hit.rs`); never for a record not verified before.
pub fn decode_prefix(b: &[u8], len: usize) -> Option<Record<'_>> {
    if claimed_len(b)? != len {
        return None;
    }
    fields(b)
}

/// The header fields, the key and the payload bytes `b` holds (its length and magic checked).
fn fields(b: &[u8]) -> Option<Record<'_>> {
    let kind = Kind::from(b[12])?;
    let key_len = u32_at(b, 32) as usize;
    if HEADER + key_len > b.len() {
        return None;
    }
    Some(Record {
        kind,
        seq: u64_at(b, 16),
        hash: u64_at(b, 24),
        key: &b[HEADER..HEADER + key_len],
        payload: &b[HEADER + key_len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_torn_or_flipped_byte_is_caught() {
        let rec = encode(Kind::Object, 7, 42, b"GET http://a/x", b"payload bytes");
        let r = decode(&rec).unwrap();
        assert_eq!(
            (r.kind, r.seq, r.hash, r.key, r.payload),
            (
                Kind::Object,
                7,
                42,
                &b"GET http://a/x"[..],
                &b"payload bytes"[..]
            )
        );
        for cut in 0..rec.len() {
            assert!(decode(&rec[..cut]).is_none(), "torn at {cut}");
        }
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_none(), "flipped byte {i}");
        }
    }
}
