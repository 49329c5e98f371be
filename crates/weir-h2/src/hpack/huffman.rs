//! HPACK's Huffman coding (RFC 7541 §5.2, Appendix B).
//!
//! Encoding packs each octet's code into a 64-bit accumulator and pads the last octet with the
//! most significant bits of EOS (all ones). Decoding runs a state machine four bits at a time
//! ([`Machine`], built once from the code's tree). The decoder refuses what RFC 7541 §5.2
//! calls errors: EOS in the string, padding longer than 7 bits, and padding that is not the
//! prefix of EOS (all ones).

use std::sync::OnceLock;

use super::huffman_table::{CODES, LENGTHS};
use crate::hpack::HpackError;

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

/// The decoder's state machine: four bits at a time. A state is a node of the code's tree
/// that is not a symbol (the root is 0); from each, each nibble leads to a state and emits at
/// most one symbol (the shortest code is 5 bits long). Walking the tree bit by bit cost about
/// 25 instructions an octet (callgrind, a browser's request head); a nibble a step, a fifth.
struct Machine {
    /// `steps[state * 16 + nibble]`.
    steps: Vec<Step>,
    /// Per state: whether a string may end there (the root, or at most 7 one bits into EOS:
    /// RFC 7541 §5.2's padding).
    accepts: Vec<bool>,
}

#[derive(Clone, Copy, Default)]
struct Step {
    next: u16,
    /// The symbol emitted, if `EMITS`; `FAILS` when the nibble completes EOS.
    symbol: u8,
    flags: u8,
}

const EMITS: u8 = 1;
const FAILS: u8 = 2;

fn machine() -> &'static Machine {
    static TABLE: OnceLock<Machine> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The tree: children per node (-1: none); a leaf holds `-(symbol + 2)`.
        let mut child: Vec<[i32; 2]> = vec![[-1, -1]];
        let codes = (0..256usize)
            .map(|s| (CODES[s], LENGTHS[s], s as i32))
            .chain(std::iter::once((0x3fff_ffff, 30, 256)));
        for (code, len, sym) in codes {
            let mut node = 0usize;
            for i in (0..u32::from(len)).rev() {
                let bit = ((code >> i) & 1) as usize;
                if i == 0 {
                    child[node][bit] = -(sym + 2);
                } else {
                    if child[node][bit] < 0 {
                        child.push([-1, -1]);
                        child[node][bit] = (child.len() - 1) as i32;
                    }
                    node = child[node][bit] as usize;
                }
            }
        }
        // Depth along all-one bits from the root, for the padding rule.
        let mut ones = vec![None; child.len()];
        ones[0] = Some(0u32);
        let mut node = 0usize;
        let mut depth = 0;
        while child[node][1] >= 0 {
            node = child[node][1] as usize;
            depth += 1;
            ones[node] = Some(depth);
        }
        let mut steps = vec![Step::default(); child.len() * 16];
        for state in 0..child.len() {
            for nibble in 0..16u32 {
                let mut node = state;
                let mut step = Step::default();
                for i in (0..4).rev() {
                    let c = child[node][((nibble >> i) & 1) as usize];
                    if c >= 0 {
                        node = c as usize;
                        continue;
                    }
                    let sym = -c - 2;
                    if sym == 256 {
                        step.flags |= FAILS;
                    } else {
                        step.symbol = sym as u8;
                        step.flags |= EMITS;
                    }
                    node = 0;
                }
                step.next = node as u16;
                steps[state * 16 + nibble as usize] = step;
            }
        }
        let accepts = ones.iter().map(|d| d.is_some_and(|d| d <= 7)).collect();
        Machine { steps, accepts }
    })
}

/// Appends the decoding of `src` to `out`; `max` bounds what `out` may grow to (an HPACK bomb
/// cannot make the decoder allocate past the header list's limit).
pub fn decode(src: &[u8], out: &mut Vec<u8>, max: usize) -> Result<(), HpackError> {
    let m = machine();
    let mut state = 0usize;
    out.reserve(
        src.len()
            .saturating_mul(8)
            .div_ceil(5)
            .min(max.saturating_sub(out.len())),
    );
    for &byte in src {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = m.steps[state * 16 + usize::from(nibble)];
            if step.flags & FAILS != 0 {
                return Err(HpackError::Huffman);
            }
            if step.flags & EMITS != 0 {
                if out.len() >= max {
                    return Err(HpackError::TooLarge);
                }
                out.push(step.symbol);
            }
            state = usize::from(step.next);
        }
    }
    if !m.accepts[state] {
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
