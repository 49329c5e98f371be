//! The HPACK encoder weir uses: stateless (RFC 7541 §6.1 and §6.2.2/§6.2.3), no dynamic table.
//! A field is the static table's index when name and value are there, else a literal without
//! indexing (never-indexed for credentials) naming the static entry when the name is there;
//! strings as they are (see [`string`]). Being stateless, a block encodes the same on
//! every connection, so a stored response's fields are encoded once, when it is stored, and a
//! hit writes those bytes (issue 54); the price is the dynamic table's saving on repeated
//! fields, which weir's responses have few of.
//!
//! Names are written lower-case (RFC 9113 §8.2.1). The one state it keeps is a pending table
//! size update: a peer that lowers SETTINGS_HEADER_TABLE_SIZE is told at the start of the next
//! block that the (empty) table's maximum is now that (§4.2).

use super::table::find_static;

#[derive(Debug, Default)]
pub struct Encoder {
    /// A size update to write before the next block's first field.
    pending: Option<usize>,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// The peer's new SETTINGS_HEADER_TABLE_SIZE: the next block starts with an update to it
    /// (or to the smallest of several changes in a row, then the last, as §4.2 allows).
    pub fn set_peer_table_size(&mut self, size: usize) {
        self.pending = Some(self.pending.map_or(size, |p| p.min(size)));
    }

    /// Starts a block: the pending size update, if any.
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(size) = self.pending.take() {
            integer(out, size, 5, 0x20);
        }
    }

    /// Appends one field (the block's; stateless, so any block).
    pub fn field(&self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        put_field(name, value, out);
    }
}

/// Whether a field's value is a credential, sent never-indexed (§7.1.3) so that an
/// intermediary does not index it either.
fn sensitive(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"authorization")
        || name.eq_ignore_ascii_case(b"proxy-authorization")
        || name.eq_ignore_ascii_case(b"cookie")
        || name.eq_ignore_ascii_case(b"set-cookie")
}

/// One field, statelessly: what [`Encoder::field`] writes (also for stored heads).
pub fn put_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    // Lower-cased on the stack: the HTTP/1.1 encoder weir reads replies from writes
    // `Content-Type`, and a `Vec` per field was a third of the block's cost (callgrind).
    let mut stack = [0u8; 64];
    let lower;
    let name: &[u8] = if !name.iter().any(u8::is_ascii_uppercase) {
        name
    } else if name.len() <= stack.len() {
        let b = &mut stack[..name.len()];
        b.copy_from_slice(name);
        b.make_ascii_lowercase();
        b
    } else {
        lower = name.to_ascii_lowercase();
        &lower
    };
    let never = sensitive(name);
    match find_static(name, value) {
        Some((i, true)) if !never || value.is_empty() => integer(out, i, 7, 0x80),
        Some((i, _)) => {
            integer(out, i, 4, if never { 0x10 } else { 0x00 });
            string(out, value);
        }
        None => {
            out.push(if never { 0x10 } else { 0x00 });
            string(out, name);
            string(out, value);
        }
    }
}

/// An integer with an `n`-bit prefix under `flags` (§5.1).
pub fn integer(out: &mut Vec<u8>, mut v: usize, n: u32, flags: u8) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal (§5.2), as is: not Huffman-coded. Coding a response's values cost about
/// 600 instructions a response (two passes over each value) to save a fifth of a few dozen
/// octets; HAProxy's encoder makes the same choice. The decoder reads both.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, s.len(), 7, 0);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::super::decoder::{Decoder, Outcome};
    use super::*;

    #[test]
    fn integers_as_the_rfc_s_examples() {
        // C.1.1 - C.1.3.
        let mut out = Vec::new();
        integer(&mut out, 10, 5, 0);
        assert_eq!(out, [0x0a]);
        out.clear();
        integer(&mut out, 1337, 5, 0);
        assert_eq!(out, [0x1f, 0x9a, 0x0a]);
        out.clear();
        integer(&mut out, 42, 8, 0);
        assert_eq!(out, [0x2a]);
    }

    /// What it writes, weir's decoder (and so any) reads back as it was, and it never touches
    /// the peer's table: a second decoder fed the same blocks in another order agrees.
    #[test]
    fn blocks_decode_back_and_are_stateless() {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b":status", b"200"),
            (b":status", b"418"),
            (b"Content-Type", b"text/html; charset=utf-8"),
            (b"cache-control", b"public, max-age=60"),
            (b"x-custom", b""),
            (b"set-cookie", b"sid=1; HttpOnly"),
            (b"authorization", b""),
            (b"etag", b"\"abc\""),
        ];
        let mut e = Encoder::new();
        let mut block = Vec::new();
        e.begin(&mut block);
        for (n, v) in &fields {
            e.field(n, v, &mut block);
        }
        for _ in 0..2 {
            let mut d = Decoder::new(4096);
            let mut out = Vec::new();
            assert_eq!(d.decode(&block, 1 << 16, &mut out), Ok(Outcome::Complete));
            let want: Vec<(Vec<u8>, Vec<u8>)> = fields
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
                .collect();
            assert_eq!(out, want);
            assert_eq!(d.table().len(), 0);
        }
        // The set-cookie literal is never-indexed: 0001 and the 4-bit prefix of index 55.
        let mut sc = Vec::new();
        put_field(b"set-cookie", b"sid=1; HttpOnly", &mut sc);
        assert_eq!(&sc[..2], &[0x1f, 55 - 15]);
        // A peer lowering its table size is told first thing in the next block.
        e.set_peer_table_size(0);
        let mut next = Vec::new();
        e.begin(&mut next);
        assert_eq!(next, [0x20]);
        next.clear();
        e.begin(&mut next);
        assert!(next.is_empty());
    }
}
