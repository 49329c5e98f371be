//! The fields of a received head as spans into its bytes ([`Fields`]): how request heads and
//! relayed responses carry them. A [`Header`] per field holds two refcounted `Bytes` slices,
//! and the `Vec` of them is an allocation: ~900 instructions per proxied response and ~500
//! per request that nothing but the upstream request's and the client's encoders read
//! (callgrind, 2026-11-27). `Header`s are made on demand ([`Fields::to_headers`]) by the paths
//! that keep fields (the cache) or want them as values.
//!
//! The spans are collected while httparse's borrow of the buffer is alive and kept once the
//! head is split off. Inline in a `SmallVec`, whose array is not initialised (zeroing a
//! 512-byte array cost 49 instructions per head, callgrind 2026-11-26).

use bytes::Bytes;

use crate::request::Header;

/// Fields kept inline (more spill to the heap): most heads carry fewer.
const INLINE: usize = 16;

/// The largest head whose fields fit the compact spans: offsets and lengths are `u16`, so 16
/// fields take 128 bytes (a head lives in the connection's and the proxy's futures). A larger
/// head (a request under a raised `limits.max_header_bytes`) keeps `u32` spans in a `Vec`.
pub const MAX_HEAD: usize = u16::MAX as usize + 1;

/// (name start, name length, value start, value length).
type Narrow = (u16, u16, u16, u16);
type Wide = (u32, u32, u32, u32);

/// Where a head's fields are: compact for heads of at most [`MAX_HEAD`] bytes.
#[derive(Debug, Clone)]
pub(crate) enum Spans {
    Narrow(smallvec::SmallVec<[Narrow; INLINE]>),
    Wide(Vec<Wide>),
}

impl Spans {
    /// Spans for a head of `len` bytes.
    #[inline]
    pub(crate) fn for_head(len: usize) -> Spans {
        if len <= MAX_HEAD {
            Spans::Narrow(smallvec::SmallVec::new())
        } else {
            Spans::Wide(Vec::new())
        }
    }

    /// Records one field of the head given to [`Spans::for_head`].
    #[inline]
    pub(crate) fn push(&mut self, name: (usize, usize), value: (usize, usize)) {
        match self {
            // A head of at most MAX_HEAD bytes: every offset and length fits 16 bits.
            Spans::Narrow(v) => {
                v.push((name.0 as u16, name.1 as u16, value.0 as u16, value.1 as u16))
            }
            Spans::Wide(v) => {
                v.push((name.0 as u32, name.1 as u32, value.0 as u32, value.1 as u32))
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Spans::Narrow(v) => v.len(),
            Spans::Wide(v) => v.len(),
        }
    }

    /// Field `i`'s spans, as `usize`s.
    #[inline]
    fn get(&self, i: usize) -> Option<(usize, usize, usize, usize)> {
        match self {
            Spans::Narrow(v) => v
                .get(i)
                .map(|&(a, b, c, d)| (a as usize, b as usize, c as usize, d as usize)),
            Spans::Wide(v) => v
                .get(i)
                .map(|&(a, b, c, d)| (a as usize, b as usize, c as usize, d as usize)),
        }
    }
}

/// A head's fields, in order, as `(name, value)` spans of the head's bytes.
#[derive(Debug, Clone)]
pub struct Fields {
    head: Bytes,
    spans: Spans,
    /// Every line of the head ends in CRLF (none in a bare LF): its field lines may be
    /// relayed as received ([`Fields::put_lines`]).
    crlf: bool,
    /// What the `Connection` fields list, noted by the parser.
    connection: Connection,
    /// The fields an encoder leaves out of a relayed head, noted by the parser.
    marks: Marks,
}

/// Which of a response's fields the encoder treats apart, by index (bit `i` is field `i`),
/// noted by the parser: a relayed response's kept lines are then found with a few bit
/// operations rather than by comparing every name again (`Reply::relays` cost ~110
/// instructions a field, 883 per proxied 1 KiB response, callgrind 2026-11-27). Only a head of at most 32 fields is marked (`whole`); the names a
/// `Connection` field lists besides `close` and `keep-alive` are not (names then decide).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Marks {
    /// The fixed hop-by-hop fields (`hop::HOP_BY_HOP`).
    pub hop: u32,
    /// `Content-Length`.
    pub length: u32,
    /// A `Date` field is present.
    pub date: bool,
    /// A field is named `close`: hop-by-hop when a `Connection` field lists `close` (names
    /// decide then).
    pub close_named: bool,
    /// Every field has its bit.
    pub whole: bool,
}

/// The tokens of a head's `Connection` fields, as the parser saw them: when only `close` and
/// `keep-alive` are listed, [`crate::hop::ConnectionTokens`] needs no second pass over the
/// fields (it cost ~280 instructions per head, callgrind 2026-11-27).
#[derive(Debug, Clone, Copy, Default)]
pub struct Connection {
    pub close: bool,
    pub keep_alive: bool,
    /// Any other token.
    pub other: bool,
}

impl Connection {
    /// Notes the tokens of one `Connection` value.
    #[inline(always)]
    pub(crate) fn note(&mut self, value: &[u8]) {
        // The one token most heads carry, without the split (~150 instructions a head).
        if value.len() == 10 && value.eq_ignore_ascii_case(b"keep-alive") {
            self.keep_alive = true;
            return;
        }
        if value.len() == 5 && value.eq_ignore_ascii_case(b"close") {
            self.close = true;
            return;
        }
        self.note_list(value);
    }

    /// Notes the tokens of a `Connection` value that is not one of the two common tokens.
    #[inline(never)]
    fn note_list(&mut self, value: &[u8]) {
        for token in value.split(|b| *b == b',') {
            let token = crate::framing::trim_ows(token);
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if !token.is_empty() {
                self.other = true;
            }
        }
    }
}

/// Whether a head's field lines may be relayed as received ([`Fields::put_lines`]), checked
/// as the parser reports each field: only when each line is exactly `name: value CRLF` with the
/// next line right after. So no bare LF; no whitespace after a value (httparse trims it, and
/// HTTP/2 and HTTP/3 forbid it in a value); and no byte between two fields' lines that the
/// parser read but did not report as a field (folded or skipped lines, were the parser ever
/// configured to allow them). Checked in the parser's pass: a second pass over the spans cost
/// ~130 instructions per relayed 8-field head (callgrind 2026-11-27).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainLines {
    ok: bool,
    /// Where the next field's line must start; 0 before the first field.
    next: usize,
}

impl PlainLines {
    pub(crate) fn new() -> PlainLines {
        PlainLines { ok: true, next: 0 }
    }

    /// Notes the field whose name starts at `name_at` and whose value ends at `value_end`, in
    /// `head` (the bytes the head was parsed from).
    #[inline(always)]
    pub(crate) fn field(&mut self, head: &[u8], name_at: usize, value_end: usize) {
        let starts = if self.next == 0 {
            name_at >= 2 && head.get(name_at - 2..name_at) == Some(&b"\r\n"[..])
        } else {
            name_at == self.next
        };
        self.ok &= starts && head.get(value_end..value_end + 2) == Some(&b"\r\n"[..]);
        self.next = value_end + 2;
    }

    /// Whether every line was plain, `head` being the whole head (its blank line included).
    /// Only heads with compact spans are relayed so.
    #[inline]
    pub(crate) fn end(self, head: &[u8]) -> bool {
        self.ok
            && head.len() <= MAX_HEAD
            && head.ends_with(b"\r\n\r\n")
            && (self.next == 0 || self.next == head.len() - 2)
    }
}

/// The fields of a [`Fields`], in order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    head: &'a [u8],
    narrow: std::slice::Iter<'a, Narrow>,
    wide: std::slice::Iter<'a, Wide>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let (ns, nl, vs, vl) = match self.narrow.next() {
            Some(&(a, b, c, d)) => (a as usize, b as usize, c as usize, d as usize),
            None => {
                let &(a, b, c, d) = self.wide.next()?;
                (a as usize, b as usize, c as usize, d as usize)
            }
        };
        Some((
            self.head.get(ns..ns + nl).unwrap_or_default(),
            self.head.get(vs..vs + vl).unwrap_or_default(),
        ))
    }
}

impl Fields {
    /// `crlf`: the head's field lines may be copied as received ([`PlainLines`]; a request's
    /// are always rebuilt, so never).
    #[inline]
    pub(crate) fn new(
        head: Bytes,
        spans: Spans,
        connection: Connection,
        marks: Marks,
        crlf: bool,
    ) -> Fields {
        Fields {
            head,
            spans,
            crlf,
            connection,
            marks,
        }
    }

    /// The head's bytes, which the spans index.
    #[inline]
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.head
    }

    /// What the `Connection` fields list.
    #[inline]
    pub fn connection(&self) -> Connection {
        self.connection
    }

    /// Field `i` as `(name, value)`.
    #[inline]
    pub fn field(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let (ns, nl, vs, vl) = self.spans.get(i)?;
        Some((
            self.head.get(ns..ns + nl).unwrap_or_default(),
            self.head.get(vs..vs + vl).unwrap_or_default(),
        ))
    }

    /// `(name, value)` of each field, in the order received.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        let (narrow, wide): (&[Narrow], &[Wide]) = match &self.spans {
            Spans::Narrow(v) => (v, &[]),
            Spans::Wide(v) => (&[], v),
        };
        Iter {
            head: &self.head,
            narrow: narrow.iter(),
            wide: wide.iter(),
        }
    }

    /// Writes the lines of the fields `keep` accepts as they were received, CRLF included,
    /// each run of kept lines in one copy: a relayed response's fields cost one copy, not
    /// four small ones per field. Returns `false`, having written nothing, when a line of the
    /// head does not end in CRLF (a bare LF is not passed on: the caller writes the fields
    /// one by one, normalised).
    pub fn put_lines(
        &self,
        out: &mut bytes::BytesMut,
        mut keep: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> bool {
        let Spans::Narrow(spans) = &self.spans else {
            return false;
        };
        if !self.crlf {
            return false;
        }
        let head = &self.head[..];
        // Where the current run of kept lines started.
        let mut run: Option<usize> = None;
        for &(ns, nl, vs, vl) in spans.iter() {
            let (ns, vs) = (ns as usize, vs as usize);
            let name = head.get(ns..ns + nl as usize).unwrap_or_default();
            let value = head.get(vs..vs + vl as usize).unwrap_or_default();
            if keep(name, value) {
                run.get_or_insert(ns);
            } else if let Some(from) = run.take() {
                out.extend_from_slice(&head[from..ns]);
            }
        }
        if let Some(from) = run {
            // The last kept line runs to the blank line that ends the head.
            out.extend_from_slice(&head[from..head.len() - 2]);
        }
        true
    }

    /// Whether the marks alone tell the hop-by-hop fields: every field is marked, and no
    /// `Connection` field names a field the parser did not mark (a token besides `close` and
    /// `keep-alive`, or `close` while a field is named so).
    #[inline]
    fn marks_decide(&self) -> bool {
        self.marks.whole
            && !self.connection.other
            && !(self.connection.close && self.marks.close_named)
    }

    /// Writes the lines a relayed head keeps, chosen by the parser's marks ([`Marks`]): every
    /// field but the hop-by-hop ones, and `Content-Length` only when `keep_length`. Each run
    /// of kept lines is one copy. Returns whether a `Date` was written; `None`, having written
    /// nothing, when the marks cannot decide alone (lines not in the plain form, more than 32
    /// fields, or a `Connection` field naming other fields): the caller compares names.
    #[inline]
    pub fn put_marked(&self, out: &mut bytes::BytesMut, keep_length: bool) -> Option<bool> {
        let Spans::Narrow(spans) = &self.spans else {
            return None;
        };
        if !self.crlf || !self.marks_decide() {
            return None;
        }
        let all = u32::MAX.checked_shr(32 - spans.len() as u32).unwrap_or(0);
        let length = if keep_length { 0 } else { self.marks.length };
        let mut kept = all & !self.marks.hop & !length;
        // `Date` is never hop-by-hop: kept whenever present.
        let has_date = self.marks.date;
        let head = &self.head[..];
        while kept != 0 {
            let first = kept.trailing_zeros() as usize;
            let end = first + (!(kept >> first)).trailing_zeros() as usize;
            let from = spans[first].0 as usize;
            // The last kept line runs to the blank line that ends the head.
            let to = spans.get(end).map_or(head.len() - 2, |s| s.0 as usize);
            out.extend_from_slice(&head[from..to]);
            kept &= u32::MAX.checked_shl(end as u32).unwrap_or(0);
        }
        Some(has_date)
    }

    /// The first value of field `name` (case-insensitive) as a slice of the head (no copy).
    pub fn get_bytes(&self, name: &[u8]) -> Option<Bytes> {
        let i = self
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(name))?;
        self.value_bytes(i)
    }

    /// Field `i`'s value as a slice of the head (no copy).
    pub fn value_bytes(&self, i: usize) -> Option<Bytes> {
        let (_, _, vs, vl) = self.spans.get(i)?;
        (vs + vl <= self.head.len()).then(|| self.head.slice(vs..vs + vl))
    }

    /// The first value of field `name` (case-insensitive).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The values of every field `name` (case-insensitive), in order.
    pub fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The fields as `Header`s (slices of the head's bytes, not copies).
    pub fn to_headers(&self) -> Vec<Header> {
        (0..self.spans.len())
            .filter_map(|i| self.spans.get(i))
            .map(|(ns, nl, vs, vl)| Header {
                name: self.head.slice(ns..ns + nl),
                value: self.head.slice(vs..vs + vl),
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way a line can differ from `name: value CRLF` right after the one before it.
    #[test]
    fn plain_lines_are_exactly_name_value_crlf_in_a_row() {
        // (head, fields as (name start, value end)).
        let check = |head: &[u8], fields: &[(usize, usize)]| {
            let mut lines = PlainLines::new();
            for &(name_at, value_end) in fields {
                lines.field(head, name_at, value_end);
            }
            lines.end(head)
        };
        let plain = b"HTTP/1.1 200 OK\r\nA: 1\r\nBb: 22\r\n\r\n";
        assert!(check(plain, &[(17, 21), (23, 29)]));
        assert!(check(b"HTTP/1.1 204 No Content\r\n\r\n", &[]));
        // A byte between two lines (a folded or skipped line).
        assert!(!check(
            b"HTTP/1.1 200 OK\r\nA: 1\r\n Bb: 22\r\n\r\n",
            &[(17, 21), (24, 30)]
        ));
        // Whitespace after a value: its end is not at the CRLF.
        assert!(!check(
            b"HTTP/1.1 200 OK\r\nA: 1 \r\nBb: 22\r\n\r\n",
            &[(17, 21), (24, 30)]
        ));
        assert!(!check(
            b"HTTP/1.1 200 OK\r\nA: 1\r\nBb: 22 \r\n\r\n",
            &[(17, 21), (23, 29)]
        ));
        // Bare LFs: after the status line, after a field, at the end.
        assert!(!check(b"HTTP/1.1 200 OK\nA: 1\r\n\r\n", &[(16, 20)]));
        assert!(!check(
            b"HTTP/1.1 200 OK\r\nA: 1\nBb: 22\r\n\r\n",
            &[(17, 21), (22, 28)]
        ));
        assert!(!check(b"HTTP/1.1 200 OK\r\nA: 1\r\n\n", &[(17, 21)]));
        // The last line not right before the blank line.
        assert!(!check(b"HTTP/1.1 200 OK\r\nA: 1\r\nX\r\n\r\n", &[(17, 21)]));
        // Past the compact spans' bound.
        let mut big = b"HTTP/1.1 200 OK\r\nA: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        let end = big.len();
        big.extend_from_slice(b"\r\n\r\n");
        assert!(!check(&big, &[(17, end)]));
    }

    #[test]
    fn spans_read_back_as_the_fields_they_mark() {
        let head = Bytes::from_static(b"HTTP/1.1 200 OK\r\nA: 1\r\nbb: two\r\n\r\n");
        for mut spans in [Spans::for_head(head.len()), Spans::Wide(Vec::new())] {
            spans.push((17, 1), (20, 1));
            spans.push((23, 2), (27, 3));
            let f = Fields::new(
                head.clone(),
                spans,
                Connection::default(),
                Marks::default(),
                true,
            );
            let got: Vec<_> = f.iter().collect();
            assert_eq!(got, [(&b"A"[..], &b"1"[..]), (&b"bb"[..], &b"two"[..])]);
            assert_eq!(f.get(b"BB"), Some(&b"two"[..]));
            assert_eq!(f.get(b"c"), None);
            let h = f.to_headers();
            assert_eq!((&h[1].name[..], &h[1].value[..]), (&b"bb"[..], &b"two"[..]));
            assert_eq!(f.len(), 2);
        }
    }
}
