//! `Content-Range` (RFC 9110 §14.4): the bytes a partial response holds. Apart from `slice`
//! (which stores pieces) so that the storability rules (`policy`) can parse it without
//! depending on stored objects.

/// Bytes `first..=last` of a representation of `total` bytes (a `Content-Range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub first: u64,
    pub last: u64,
    pub total: u64,
}

impl Extent {
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `first..=last` lies wholly inside.
    pub fn covers(&self, first: u64, last: u64) -> bool {
        self.first <= first && last <= self.last
    }
}

/// `bytes first-last/total` with `first <= last < total`; anything else (`*/total`, unknown
/// total, several parts) is `None`.
pub fn content_range(v: &[u8]) -> Option<Extent> {
    let spec = v.trim_ascii().strip_prefix(b"bytes ")?.trim_ascii_start();
    let slash = spec.iter().position(|b| *b == b'/')?;
    let dash = spec[..slash].iter().position(|b| *b == b'-')?;
    let first = number(&spec[..dash])?;
    let last = number(&spec[dash + 1..slash])?;
    let total = number(&spec[slash + 1..])?;
    (first <= last && last < total).then_some(Extent { first, last, total })
}

fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}
