//! HPACK's Huffman coding (RFC 7541 §5.2, Appendix B).
//!
//! Encoding packs each octet's code into a 64-bit accumulator and pads the last octet with the
//! most significant bits of EOS (all ones). Decoding walks the canonical code: codes of one
//! length are consecutive integers, so a symbol is found by its length's first code and count
//! ([`Canonical`], built once). The decoder refuses what RFC 7541 §5.2 calls errors: EOS in the
//! string, padding longer than 7 bits, and padding that is not the prefix of EOS (all ones).

use std::sync::OnceLock;

use super::huffman_table::{CODES, LENGTHS};
use crate::hpack::HpackError;

/// Longest code (EOS's).
const MAX_LEN: usize = 30;

/// The number of octets `src` takes once encoded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(LENGTHS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

/// Appends the Huffman encoding of `src` to `out`.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(src));
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let len = u32::from(LENGTHS[usize::from(b)]);
        acc = (acc << len) | u64::from(CODES[usize::from(b)]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        // Keep only the bits not yet written (at most 7 after the loop).
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        // Padding: the most significant bits of EOS, all ones.
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1u64 << pad) - 1)) as u8);
    }
}

/// The canonical code's decoding tables.
struct Canonical {
    /// Per code length: the first code of that length, and where its symbols start in
    /// `symbols`; `count` symbols have that length.
    first: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    count: [u16; MAX_LEN + 1],
    /// Symbols ordered by (length, code); 256 is EOS.
    symbols: [u16; 257],
}

fn canonical() -> &'static Canonical {
    static TABLE: OnceLock<Canonical> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut order: Vec<(u8, u32, u16)> =
            (0..256).map(|s| (LENGTHS[s], CODES[s], s as u16)).collect();
        order.push((30, 0x3fff_ffff, 256));
        order.sort_unstable();
        let mut c = Canonical {
            first: [0; MAX_LEN + 1],
            start: [0; MAX_LEN + 1],
            count: [0; MAX_LEN + 1],
            symbols: [0; 257],
        };
        for (i, &(len, code, sym)) in order.iter().enumerate() {
            let l = usize::from(len);
            if c.count[l] == 0 {
                c.first[l] = code;
                c.start[l] = i as u16;
            }
            // Canonical: consecutive codes within a length (checked by the tests).
            debug_assert_eq!(code, c.first[l] + u32::from(c.count[l]));
            c.count[l] += 1;
            c.symbols[i] = sym;
        }
        c
    })
}

/// Appends the decoding of `src` to `out`; `max` bounds what `out` may grow to (an HPACK bomb
/// cannot make the decoder allocate past the header list's limit).
pub fn decode(src: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), HpackError> {
    let t = canonical();
    let mut code: u32 = 0;
    let mut len: usize = 0;
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let l = len;
            if l > MAX_LEN {
                return Err(HpackError::Huffman);
            }
            let n = u32::from(t.count[l]);
            if n > 0 && code >= t.first[l] && code - t.first[l] < n {
                let sym = t.symbols[usize::from(t.start[l]) + (code - t.first[l]) as usize];
                if sym == 256 {
                    return Err(HpackError::Huffman);
                }
                if out.len() >= max {
                    return Err(HpackError::TooLarge);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            }
        }
    }
    // What is left is padding: at most 7 bits, all ones.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok(())
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

    /// RFC 7541 Appendix C.4 and C.6's strings.
    #[test]
    fn the_rfc_s_examples() {
        for (text, coded) in [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"),
            ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"),
            ("custom-value", "25a8 49e9 5bb8 e8b4 bf"),
            ("302", "6402"),
            ("private", "aec3 771a 4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
            ),
            ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"),
            (
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        ] {
            let mut out = Vec::new();
            encode(text.as_bytes(), &mut out);
            assert_eq!(out, hex(coded), "{text}");
            assert_eq!(encoded_len(text.as_bytes()), out.len());
            let mut back = Vec::new();
            decode(&out, &mut back, 1 << 20).unwrap();
            assert_eq!(back, text.as_bytes());
        }
    }

    /// Every octet, alone and after each other octet, comes back as it went.
    #[test]
    fn every_octet_round_trips() {
        for a in 0..=255u8 {
            for b in [0u8, 1, b'a', 0x7f, 0xfe, 0xff, a] {
                let src = [a, b, a];
                let mut out = Vec::new();
                encode(&src, &mut out);
                let mut back = Vec::new();
                decode(&out, &mut back, 16).unwrap();
                assert_eq!(back, src);
            }
        }
    }

    /// RFC 7541 §5.2's errors: EOS in the string, padding over 7 bits, padding with a zero.
    #[test]
    fn bad_padding_and_eos_are_errors() {
        let mut out = Vec::new();
        // EOS encoded outright (30 ones, then padding).
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut out, 16),
            Err(HpackError::Huffman)
        );
        // 'a' is 00011 (5 bits): a byte 0b00011_111 is 'a' with 3 bits of padding: fine.
        out.clear();
        decode(&[0b0001_1111], &mut out, 16).unwrap();
        assert_eq!(out, b"a");
        // Padding with a zero bit in it.
        out.clear();
        assert_eq!(
            decode(&[0b0001_1011], &mut out, 16),
            Err(HpackError::Huffman)
        );
        // 8 bits of padding after a whole symbol.
        out.clear();
        assert_eq!(
            decode(&[0b0001_1111, 0xff], &mut out, 16),
            Err(HpackError::Huffman)
        );
        // The output bound holds.
        out.clear();
        let mut big = Vec::new();
        encode(&[b'a'; 100], &mut big);
        assert_eq!(decode(&big, &mut out, 10), Err(HpackError::TooLarge));
    }
}
