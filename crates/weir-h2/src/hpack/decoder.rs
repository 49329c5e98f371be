//! The HPACK decoder (RFC 7541 §6): a header block in, each field handed to a [`Sink`] as it is
//! decoded (no list of owned fields in between: weir's request head is filled from it).
//!
//! Its bounds, against HPACK bombs: a field list larger than `max_list` (SETTINGS_MAX_HEADER_
//! LIST_SIZE, counted as §6.5.2 does: name + value + 32 per field) is refused, but only after
//! the whole block is decoded, so the dynamic table stays in step with the peer's (the stream
//! fails, the connection goes on); fields past the bound are not copied, so a block of
//! one-octet references to a large table entry costs its parsing, never the memory it would
//! expand to. A table size update larger than the size weir advertised, one after a field, or
//! more than two in a row is a COMPRESSION_ERROR (§4.2, §6.3), as are integers longer than
//! 32 bits, index 0, an index past the tables and a string longer than the block.

use super::table::{Dynamic, ENTRY_OVERHEAD};
use super::{huffman, HpackError};

/// Where decoded fields go.
pub trait Sink {
    /// One field, in block order; `sensitive`: sent as never-indexed (§6.2.3), to be forwarded
    /// so. An error stops the decoding (the connection then fails: the table is out of step).
    fn field(&mut self, name: &[u8], value: &[u8], sensitive: bool) -> Result<(), HpackError>;
}

impl Sink for Vec<(Vec<u8>, Vec<u8>)> {
    fn field(&mut self, name: &[u8], value: &[u8], _sensitive: bool) -> Result<(), HpackError> {
        self.push((name.to_vec(), value.to_vec()));
        Ok(())
    }
}

/// One connection's decoder.
#[derive(Debug)]
pub struct Decoder {
    table: Dynamic,
    /// SETTINGS_HEADER_TABLE_SIZE weir advertised: the largest size update it takes.
    advertised: usize,
    /// Scratch for literal strings, kept between blocks (given back by [`Decoder::shrink`]).
    name: Vec<u8>,
    value: Vec<u8>,
}

/// How a block ended when it decoded cleanly.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Outcome {
    Complete,
    /// The fields passed `max_list`: those past it were not handed over. The stream is
    /// refused (431 or RST_STREAM); the table is in step.
    ListTooLarge,
}

impl Decoder {
    /// A decoder whose table may grow to `advertised` octets (4,096 is HTTP/2's initial).
    pub fn new(advertised: usize) -> Decoder {
        Decoder {
            table: Dynamic::new(advertised),
            advertised,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// A new SETTINGS_HEADER_TABLE_SIZE weir advertised (acknowledged by the peer): the
    /// ceiling of the size updates it may send.
    pub fn set_advertised(&mut self, size: usize) {
        self.advertised = size;
        if self.table.max() > size {
            self.table.set_max(size);
        }
    }

    pub fn table(&self) -> &Dynamic {
        &self.table
    }

    /// Gives back the scratch buffers (an idle connection keeps only its table).
    pub fn shrink(&mut self) {
        self.name = Vec::new();
        self.value = Vec::new();
    }

    /// Decodes `block` (a whole header block: HEADERS and its CONTINUATIONs joined) into
    /// `sink`.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        sink: &mut dyn Sink,
    ) -> Result<Outcome, HpackError> {
        let mut pos = 0;
        let mut list = 0usize;
        let mut fields_seen = false;
        let mut updates = 0;
        while pos < block.len() {
            let b = block[pos];
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let idx = integer(block, &mut pos, 7)?;
                let (n, v) = self.table.get(idx).ok_or(HpackError::Index)?;
                list = list.saturating_add(n.len() + v.len() + ENTRY_OVERHEAD);
                if list <= max_list {
                    sink.field(n, v, false)?;
                }
                fields_seen = true;
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the block's first field.
                updates += 1;
                if fields_seen || updates > 2 {
                    return Err(HpackError::SizeUpdate);
                }
                let size = integer(block, &mut pos, 5)?;
                if size > self.advertised {
                    return Err(HpackError::SizeUpdate);
                }
                self.table.set_max(size);
            } else {
                // A literal (§6.2): with incremental indexing (01), without (0000), never
                // indexed (0001).
                let (prefix, index, sensitive) = if b & 0xc0 == 0x40 {
                    (6, true, false)
                } else {
                    (4, false, b & 0xf0 == 0x10)
                };
                let idx = integer(block, &mut pos, prefix)?;
                // Past the bound nothing is copied; strings are still parsed so that the next
                // blocks decode as the peer meant. A field the table takes is always kept
                // whole (the block's own size bounds it).
                let room = if index {
                    usize::MAX
                } else {
                    max_list.saturating_sub(list)
                };
                self.name.clear();
                let name_kept = if idx == 0 {
                    string(block, &mut pos, &mut self.name, room)?
                } else {
                    let (n, _) = self.table.get(idx).ok_or(HpackError::Index)?;
                    let kept = n.len() <= room;
                    if kept {
                        self.name.extend_from_slice(n);
                    }
                    kept
                };
                self.value.clear();
                let value_kept = string(
                    block,
                    &mut pos,
                    &mut self.value,
                    room.saturating_sub(self.name.len()),
                )?;
                if name_kept && value_kept {
                    list = list.saturating_add(self.name.len() + self.value.len() + ENTRY_OVERHEAD);
                } else {
                    // Past the bound: the list is over it (never passed on cut short).
                    list = list.max(max_list.saturating_add(1));
                }
                if list <= max_list {
                    sink.field(&self.name, &self.value, sensitive)?;
                }
                if index {
                    self.table.insert(&self.name, &self.value);
                }
                fields_seen = true;
            }
        }
        Ok(if list > max_list {
            Outcome::ListTooLarge
        } else {
            Outcome::Complete
        })
    }
}

/// An integer with an `n`-bit prefix (§5.1) at `block[*pos]`; at most 32 bits of value.
pub(crate) fn integer(block: &[u8], pos: &mut usize, n: u32) -> Result<usize, HpackError> {
    let mask = (1u32 << n) - 1;
    let first = u32::from(*block.get(*pos).ok_or(HpackError::Truncated)?) & mask;
    *pos += 1;
    if first < mask {
        return Ok(first as usize);
    }
    let mut value = u64::from(mask);
    let mut shift = 0;
    loop {
        let b = *block.get(*pos).ok_or(HpackError::Truncated)?;
        *pos += 1;
        value += u64::from(b & 0x7f) << shift;
        if value > u64::from(u32::MAX) {
            return Err(HpackError::Integer);
        }
        if b & 0x80 == 0 {
            return Ok(value as usize);
        }
        shift += 7;
        if shift > 28 {
            return Err(HpackError::Integer);
        }
    }
}

/// A string literal (§5.2) appended to `out`: Huffman-decoded when flagged. When it is longer
/// than `room`, it is parsed (and checked) but not kept: `out` is left as it was.
/// A string literal at `block[*pos]` appended to `out` when it takes at most `room` octets;
/// `Ok(false)` when it was longer (parsed and checked, not kept).
fn string(
    block: &[u8],
    pos: &mut usize,
    out: &mut Vec<u8>,
    room: usize,
) -> Result<bool, HpackError> {
    let huff = block.get(*pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
    let len = integer(block, pos, 7)?;
    let end = pos.checked_add(len).ok_or(HpackError::Truncated)?;
    let raw = block.get(*pos..end).ok_or(HpackError::Truncated)?;
    *pos = end;
    if huff {
        let before = out.len();
        match huffman::decode(raw, out, before.saturating_add(room)) {
            Ok(()) => {}
            Err(HpackError::TooLarge) => {
                out.truncate(before);
                // Still checked whole: a malformed string past the bound is an error too.
                let mut sink = Vec::new();
                huffman::decode(raw, &mut sink, usize::MAX)?;
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
    } else if raw.len() <= room {
        out.extend_from_slice(raw);
    } else {
        return Ok(false);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    fn decode(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        assert_eq!(
            d.decode(&hex(block), 1 << 16, &mut out),
            Ok(Outcome::Complete)
        );
        fields(&out)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 (requests without Huffman) and C.4 (with), each a connection of three.
    #[test]
    fn the_rfc_s_request_examples() {
        for blocks in [
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        ] {
            let mut d = Decoder::new(4096);
            assert_eq!(
                decode(&mut d, blocks[0]),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/"),
                    (":authority", "www.example.com")
                ])
            );
            assert_eq!(d.table().size(), 57);
            assert_eq!(
                decode(&mut d, blocks[1]),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "http"),
                    (":path", "/"),
                    (":authority", "www.example.com"),
                    ("cache-control", "no-cache")
                ])
            );
            assert_eq!(d.table().size(), 110);
            assert_eq!(
                decode(&mut d, blocks[2]),
                pairs(&[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    (":authority", "www.example.com"),
                    ("custom-key", "custom-value")
                ])
            );
            assert_eq!(d.table().size(), 164);
        }
    }

    /// RFC 7541 C.5 and C.6: responses through a 256-octet table, with evictions.
    #[test]
    fn the_rfc_s_response_examples_with_eviction() {
        for blocks in [
            [
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "4803 3330 37c1 c0bf",
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
            ],
            [
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ffc1 c0bf",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ],
        ] {
            let mut d = Decoder::new(256);
            let first = decode(&mut d, blocks[0]);
            assert_eq!(first[0], (":status".to_string(), "302".to_string()));
            assert_eq!(d.table().size(), 222);
            let second = decode(&mut d, blocks[1]);
            assert_eq!(second[0], (":status".to_string(), "307".to_string()));
            assert_eq!(second[3].1, "https://www.example.com");
            assert_eq!(d.table().size(), 222);
            let third = decode(&mut d, blocks[2]);
            assert_eq!(third[0], (":status".to_string(), "200".to_string()));
            assert_eq!(third[2].1, "Mon, 21 Oct 2013 20:13:22 GMT");
            assert_eq!(third[4].0, "content-encoding");
            assert_eq!(
                third[5].1,
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
            );
            assert_eq!(d.table().size(), 215);
            assert_eq!(d.table().len(), 3);
        }
    }

    #[test]
    fn malformed_blocks_are_compression_errors() {
        let mut d = Decoder::new(4096);
        let mut out = Vec::new();
        for (block, want) in [
            (vec![0x80], HpackError::Index), // index 0
            (vec![0xbe], HpackError::Index), // 62, the table empty
            (
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
                HpackError::Integer,
            ), // past 32 bits
            (vec![0xff, 0x80], HpackError::Truncated), // an integer cut short
            (vec![0x40, 0x05, b'a'], HpackError::Truncated), // a name past the block
            (vec![0x3f, 0xe2, 0x1f], HpackError::SizeUpdate), // 4097 > 4096 advertised
            (vec![0x82, 0x20], HpackError::SizeUpdate), // an update after a field
            (vec![0x20, 0x20, 0x20], HpackError::SizeUpdate), // three updates
        ] {
            out.clear();
            assert_eq!(d.decode(&block, 1 << 16, &mut out), Err(want), "{block:x?}");
        }
        // Two updates then a field: fine.
        let mut d = Decoder::new(4096);
        assert_eq!(
            d.decode(&[0x20, 0x3f, 0xe1, 0x0f, 0x82], 1 << 16, &mut out),
            Ok(Outcome::Complete)
        );
    }

    /// A block of one-octet references to a large entry: refused as too large once decoded
    /// whole (the table in step), with nothing copied past the bound.
    #[test]
    fn an_hpack_bomb_is_bounded() {
        let mut d = Decoder::new(4096);
        // Insert one 4,000-octet entry (literal with incremental indexing, new name "x").
        let mut block = vec![0x40, 0x01, b'x', 0x7f];
        let mut n = 4000 - 127;
        while n >= 128 {
            block.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        block.push(n as u8);
        block.extend(std::iter::repeat_n(b'v', 4000));
        // Then 10,000 references to it (index 62): 40 MB if expanded.
        block.extend(std::iter::repeat_n(0xbe, 10_000));
        let mut out = Vec::new();
        assert_eq!(
            d.decode(&block, 16 * 1024, &mut out),
            Ok(Outcome::ListTooLarge)
        );
        let kept: usize = out.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(kept <= 16 * 1024, "{kept}");
        // The table is in step: the next block's reference to it decodes.
        out.clear();
        assert_eq!(d.decode(&[0xbe], 1 << 16, &mut out), Ok(Outcome::Complete));
        assert_eq!(out[0].1.len(), 4000);
    }

    /// A literal longer than the room left is never passed on cut short (it once came out
    /// with an empty value, and the list was not judged too large): the block is too large.
    #[test]
    fn a_literal_past_the_bound_makes_the_list_too_large() {
        for huffman in [false, true] {
            let mut block = Vec::new();
            for (name, fill) in [(&b"x-a"[..], b'a'), (&b"x-b"[..], b'b')] {
                block.extend_from_slice(&[0x00, name.len() as u8]);
                block.extend_from_slice(name);
                let value = vec![fill; 3000];
                if huffman {
                    let mut h = Vec::new();
                    huffman::encode(&value, &mut h);
                    crate::hpack::encoder::integer(&mut block, h.len(), 7, 0x80);
                    block.extend_from_slice(&h);
                } else {
                    crate::hpack::encoder::integer(&mut block, value.len(), 7, 0);
                    block.extend_from_slice(&value);
                }
            }
            let mut out = Vec::new();
            let got = Decoder::new(4096).decode(&block, 4000, &mut out);
            assert_eq!(got, Ok(Outcome::ListTooLarge), "huffman {huffman}");
            assert_eq!(out.len(), 1, "huffman {huffman}");
            assert_eq!(out[0].1.len(), 3000);
        }
    }
}
