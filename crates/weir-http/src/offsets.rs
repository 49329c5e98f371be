//! Where each header name and value lies in a head, collected while httparse's borrow of the
//! buffer is alive and turned into `Bytes` slices after the head is split off. Up to 32 fields
//! live on the stack (a `SmallVec`: its inline array is not initialised, where zeroing a
//! 512-byte array cost 49 instructions per head, callgrind 2026-11-26); more spill to the heap.

/// (name start, name len, value start, value len)
pub(crate) type Span = (usize, usize, usize, usize);

type Packed = (u32, u32, u32, u32);

const INLINE: usize = 32;

#[derive(Debug)]
pub(crate) struct Offsets(smallvec::SmallVec<[Packed; INLINE]>);

impl Offsets {
    pub(crate) fn new() -> Offsets {
        Offsets(smallvec::SmallVec::new())
    }

    /// Records one field. Heads are bounded far below 4 GiB, so offsets fit in u32.
    #[inline]
    pub(crate) fn push(&mut self, s: Span) {
        self.0
            .push((s.0 as u32, s.1 as u32, s.2 as u32, s.3 as u32));
    }

    /// The fields as `Bytes` slices of `head` (the frozen head the spans point into).
    pub(crate) fn headers(&self, head: &bytes::Bytes) -> Vec<crate::request::Header> {
        self.spans()
            .map(|(ns, nl, vs, vl)| crate::request::Header {
                name: head.slice(ns..ns + nl),
                value: head.slice(vs..vs + vl),
            })
            .collect()
    }

    /// The recorded spans, in order.
    pub(crate) fn spans(&self) -> impl Iterator<Item = Span> + '_ {
        self.0
            .iter()
            .map(|&(a, b, c, d)| (a as usize, b as usize, c as usize, d as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spills_past_the_inline_capacity_in_order() {
        let mut o = Offsets::new();
        for i in 0..40 {
            o.push((i, 1, i + 100, 2));
        }
        let got: Vec<Span> = o.spans().collect();
        assert_eq!(got.len(), 40);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, s)| s.0 == i && s.2 == i + 100));
    }
}
