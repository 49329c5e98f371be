//! Partial content (RFC 9111 §3.3, §3.4): a representation stored in fixed-size slices, as
//! nginx's `slice` module does, so a range request fills only the slices it needs and a 206 can
//! be stored and reused.
//!
//! A representation of `total` bytes is cut at multiples of the slice size. Each slice is stored
//! as a *piece*: an ordinary stored 206 under the representation's key with `\0slice=N`
//! appended (same URL, so purges by URL, prefix and host reach every piece), holding one
//! contiguous extent of that slice (`Content-Range` in its stored fields). A piece that covers
//! only part of its slice (the client's range was smaller) is completed later by fetching only
//! the missing bytes, and the two are combined when both carry the same strong validator
//! (§3.3; nothing else may be combined).
//!
//! Everything here is arithmetic on byte positions; the flow (lookups, fetches, the answer) is
//! the pipeline's `cache/slice.rs`.

use bytes::{Bytes, BytesMut};

pub use crate::extent::{content_range, Extent};
use crate::key::CacheKey;
use crate::object::CachedObject;

/// The extent a stored piece holds (its `Content-Range`).
pub fn extent_of(piece: &CachedObject) -> Option<Extent> {
    (piece.meta.status == 206)
        .then(|| piece.header("content-range"))
        .flatten()
        .and_then(|v| content_range(v))
}

/// The key of slice `index` of the representation stored under `base`.
pub fn piece_key(base: &CacheKey, index: u64) -> CacheKey {
    let mut text = BytesMut::with_capacity(base.text.len() + 24);
    text.extend_from_slice(&base.text);
    text.extend_from_slice(b"\0slice=");
    text.extend_from_slice(index.to_string().as_bytes());
    let (start, end) = base.url_span();
    CacheKey::from_parts(text.freeze(), start, end).expect("the base key's URL span fits")
}

/// Which slice byte `offset` falls in.
pub fn slice_of(offset: u64, size: u64) -> u64 {
    offset / size
}

/// The bytes slice `index` spans in a representation of `total` bytes.
pub fn span(index: u64, size: u64, total: u64) -> (u64, u64) {
    let first = index * size;
    (first, (first + size).min(total) - 1)
}

/// The value of the `Range` field that asks for `first..=last` of `total` bytes: open-ended
/// when it runs to the end (what RFC 9111 §3.4's example asks to complete a stored prefix).
pub fn range_value(first: u64, last: u64, total: u64) -> String {
    if last + 1 >= total {
        format!("bytes={first}-")
    } else {
        format!("bytes={first}-{last}")
    }
}

/// What to fetch to complete slice `(first, last)` when `have` is stored for it: the bytes
/// after it or before it when it touches one end of the slice, else the whole slice.
pub fn missing(slice: (u64, u64), have: Option<Extent>) -> (u64, u64) {
    match have {
        Some(h) if h.first <= slice.0 && h.last < slice.1 && h.last + 1 >= slice.0 => {
            (h.last + 1, slice.1)
        }
        Some(h) if h.last >= slice.1 && h.first > slice.0 && h.first <= slice.1 + 1 => {
            (slice.0, h.first - 1)
        }
        _ => slice,
    }
}

/// A strong entity tag (RFC 9110 §8.8.3): quoted, not `W/`.
pub fn strong_etag(piece: &CachedObject) -> Option<&Bytes> {
    piece.meta.etag.as_ref().filter(|e| e.starts_with(b"\""))
}

/// Whether two pieces are parts of one representation, so one answer may combine them
/// (RFC 9111 §3.3): the same total and the same strong validator.
pub fn same_representation(a: &CachedObject, b: &CachedObject) -> bool {
    let same_total = match (extent_of(a), extent_of(b)) {
        (Some(x), Some(y)) => x.total == y.total,
        _ => false,
    };
    same_total && strong_etag(a).is_some() && strong_etag(a) == strong_etag(b)
}

/// The body of `new` combined with `old`'s when they overlap or touch (same representation
/// checked by the caller): the union's extent and bytes. `None` when they leave a gap.
pub fn combine(old: (Extent, &Bytes), new: (Extent, &Bytes)) -> Option<(Extent, Bytes)> {
    let ((a, ab), (b, bb)) = if old.0.first <= new.0.first {
        (old, new)
    } else {
        (new, old)
    };
    if b.first > a.last + 1 {
        return None;
    }
    if a.last >= b.last {
        return Some((a, ab.clone()));
    }
    let mut out = BytesMut::with_capacity((b.last - a.first + 1) as usize);
    out.extend_from_slice(ab);
    out.extend_from_slice(&bb[(a.last + 1 - b.first) as usize..]);
    let e = Extent {
        first: a.first,
        last: b.last,
        total: a.total,
    };
    Some((e, out.freeze()))
}

/// Cuts a 206's body covering `e` at slice boundaries: `(index, extent, bytes)` per slice, the
/// bytes shared with `body` (no copy).
pub fn cut(e: Extent, body: &Bytes, size: u64) -> Vec<(u64, Extent, Bytes)> {
    let mut out = Vec::new();
    let mut at = e.first;
    while at <= e.last {
        let index = slice_of(at, size);
        let last = span(index, size, e.total).1.min(e.last);
        let from = (at - e.first) as usize;
        let to = (last - e.first + 1) as usize;
        let part = Extent {
            first: at,
            last,
            total: e.total,
        };
        out.push((index, part, body.slice(from..to)));
        at = last + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(first: u64, last: u64, total: u64) -> Extent {
        Extent { first, last, total }
    }

    #[test]
    fn content_range_parses_one_satisfied_range_only() {
        let table: &[(&str, Option<Extent>)] = &[
            ("bytes 4-9/10", Some(ext(4, 9, 10))),
            (" bytes 0-0/1 ", Some(ext(0, 0, 1))),
            ("bytes 0-9/*", None),
            ("bytes */10", None),
            ("bytes 5-4/10", None),
            ("bytes 0-10/10", None),
            ("bytes -1-4/10", None),
            ("items 0-4/10", None),
            ("bytes 0-4/99999999999999999999", None),
        ];
        for (v, want) in table {
            assert_eq!(content_range(v.as_bytes()), *want, "{v}");
        }
    }

    #[test]
    fn spans_and_range_values() {
        assert_eq!(span(0, 4, 10), (0, 3));
        assert_eq!(span(2, 4, 10), (8, 9));
        assert_eq!(slice_of(8, 4), 2);
        assert_eq!(range_value(5, 9, 10), "bytes=5-");
        assert_eq!(range_value(0, 3, 10), "bytes=0-3");
    }

    #[test]
    fn missing_fetches_only_what_a_piece_lacks() {
        type Case = ((u64, u64), Option<Extent>, (u64, u64));
        let table: &[Case] = &[
            ((0, 9), None, (0, 9)),
            // A stored prefix: the rest.
            ((0, 9), Some(ext(0, 4, 10)), (5, 9)),
            // A stored suffix: the start.
            ((0, 9), Some(ext(4, 9, 10)), (0, 3)),
            // A hole on both sides: the whole slice again.
            ((0, 9), Some(ext(3, 5, 10)), (0, 9)),
        ];
        for (slice, have, want) in table {
            assert_eq!(missing(*slice, *have), *want, "{slice:?} {have:?}");
        }
    }

    #[test]
    fn combine_joins_touching_parts_and_refuses_gaps() {
        let a = Bytes::from_static(b"01234");
        let b = Bytes::from_static(b"56789");
        let (e, body) = combine((ext(0, 4, 10), &a), (ext(5, 9, 10), &b)).unwrap();
        assert_eq!((e, &body[..]), (ext(0, 9, 10), &b"0123456789"[..]));
        // Either order, overlapping.
        let c = Bytes::from_static(b"3456789");
        let (e, body) = combine((ext(3, 9, 10), &c), (ext(0, 4, 10), &a)).unwrap();
        assert_eq!((e, &body[..]), (ext(0, 9, 10), &b"0123456789"[..]));
        let late = Bytes::from_static(b"89");
        assert!(combine((ext(0, 4, 10), &a), (ext(8, 9, 10), &late)).is_none());
    }

    #[test]
    fn cut_splits_at_slice_boundaries_without_copying() {
        let body = Bytes::from_static(b"23456789");
        let parts = cut(ext(2, 9, 10), &body, 4);
        let got: Vec<(u64, Extent, &[u8])> =
            parts.iter().map(|(i, e, b)| (*i, *e, &b[..])).collect();
        assert_eq!(
            got,
            vec![
                (0, ext(2, 3, 10), &b"23"[..]),
                (1, ext(4, 7, 10), &b"4567"[..]),
                (2, ext(8, 9, 10), &b"89"[..]),
            ]
        );
        assert_eq!(parts[1].2.as_ptr(), body[2..].as_ptr());
    }

    #[test]
    fn piece_keys_keep_the_url_for_purges() {
        let base = CacheKey::from_url("http", "example.com/v.mp4");
        let p = piece_key(&base, 3);
        assert_eq!(p.url(), base.url());
        assert_ne!(p.hash, base.hash);
        assert_ne!(p.hash, piece_key(&base, 4).hash);
    }
}
