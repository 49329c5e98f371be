//! The response value every producer builds (proxy, cache, actions, errors) and the one HTTP/1.1
//! encoder that writes it. Producers say *what* to answer; only the protocol layer decides how
//! it looks on the wire: the status line, which fields are connection-specific and dropped, the
//! `Date`, the framing (`Content-Length`, chunks, or the close) and the `Connection` field.
//!
//! A [`Reply`] borrows everything it carries and holds no allocation: a hit is the stored
//! object's pre-encoded head ([`Base::Encoded`]) plus a few pre-rendered lines (`Age`,
//! `Cache-Status`); a relayed response is the upstream's fields ([`Base::Spans`], or
//! [`Base::Fields`] once made into `Header`s) minus those a filter drops. Building it on the stack keeps the hot paths at their previous instruction
//! counts (measured with callgrind: see bench/ab_weir.sh), where a `Vec` of owned fields per
//! response cost an allocation and a reference count per field.
//!
//! Any number of added field slices, line slices and drop sets: the first four (one drop set) sit
//! in inline arrays, so the replies weir builds (at most three of each without filters) hold no
//! allocation; a fifth goes to a `Vec` instead of being lost (it once was, silently). Not
//! `SmallVec`: its storage makes `Reply<'a>` invariant in `'a`, and the response filters need
//! to extend a reply with parts that live shorter than it (`pipeline::send_filtered`).
//!
//! HTTP/2 would read the same value: `Base::Encoded` and `lines` are field lines in HTTP/1.1
//! syntax, already validated, which split into name/value pairs without parsing anything else.

use bytes::{BufMut, Bytes, BytesMut};

use crate::fields::Fields;
use crate::hop::{is_hop_by_hop, ConnectionTokens};
use crate::request::{Header, Version};
use crate::response::{put_content_length, put_date, put_header, put_status_line_with};

/// Where a reply's fields come from, before the ones added to it.
#[derive(Debug, Clone, Copy)]
pub enum Base<'a> {
    /// Nothing: the status line and the added fields only.
    None,
    /// A pre-encoded status line and field lines (no blank line), written as is: a stored
    /// object's head, which carries its own `Date` and `Content-Length`.
    Encoded(&'a [u8]),
    /// Fields received from an upstream: connection-specific ones (RFC 9110 §7.6.1) are dropped,
    /// and `Content-Length` too unless the framing is [`Framing::Given`]; the rest is relayed.
    Fields(&'a [Header]),
    /// The same, as spans of the received head (a relayed response no one read as `Header`s).
    Spans(&'a Fields),
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Add no framing field: there is no body (204, 304, 1xx), or the base already carries it.
    Given,
    /// `Content-Length: n`.
    Length(u64),
    /// Length unknown: chunked to an HTTP/1.1 client, delimited by the close for HTTP/1.0.
    Unknown,
}

/// Whether the connection stays open after this response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    KeepAlive,
    Close,
}

/// Which base fields a filter removes (names compared case-insensitively by it).
pub trait DropFields {
    fn drops(&self, name: &[u8]) -> bool;
}

impl<F: Fn(&[u8]) -> bool> DropFields for F {
    fn drops(&self, name: &[u8]) -> bool {
        self(name)
    }
}

/// Renders field lines (`Name: value\r\n`) into the encoder's output.
pub type RenderFn<'a> = &'a dyn Fn(&mut BytesMut);

/// Slices of added fields and of pre-rendered lines a reply carries without allocating.
const INLINE_PARTS: usize = 4;

/// A response to encode.
#[derive(Clone)]
pub struct Reply<'a> {
    pub status: u16,
    /// The reason phrase as received; empty: the standard one.
    pub reason: &'a [u8],
    pub base: Base<'a>,
    /// Base fields filters remove: the first set, then any more (one per filter).
    drop: Option<&'a dyn DropFields>,
    more_drops: Vec<&'a dyn DropFields>,
    added: Parts<&'a [(Bytes, Bytes)], INLINE_PARTS>,
    lines: Parts<&'a [u8], INLINE_PARTS>,
    /// Field lines rendered by the encoder straight into its output, after `lines`: a hit's
    /// `Age` and `Cache-Status`, without a buffer to render them into first.
    pub render: Option<RenderFn<'a>>,
    /// Add a `Date` field (when the base has none).
    pub date: bool,
    pub framing: Framing,
}

impl std::fmt::Debug for Reply<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("base", &self.base)
            .field("framing", &self.framing)
            .finish()
    }
}

/// A list of `N` inline slots, then a `Vec` (covariant, unlike `SmallVec`). The slots hold
/// slices, whose default (empty) fills the unused ones.
#[derive(Clone)]
struct Parts<T: Copy + Default, const N: usize> {
    inline: [T; N],
    n: u8,
    more: Vec<T>,
}

impl<T: Copy + Default, const N: usize> Parts<T, N> {
    fn new() -> Self {
        Parts {
            inline: [T::default(); N],
            n: 0,
            more: Vec::new(),
        }
    }

    fn push(&mut self, v: T) {
        let i = self.n as usize;
        if i < N {
            self.inline[i] = v;
            self.n += 1;
        } else {
            self.more.push(v);
        }
    }

    /// The inline slots in use, and the rest.
    #[inline(always)]
    fn slices(&self) -> (&[T], &[T]) {
        (&self.inline[..self.n as usize], &self.more)
    }

    fn iter(&self) -> impl Iterator<Item = T> + '_ {
        let (a, b) = self.slices();
        a.iter().chain(b.iter()).copied()
    }
}

/// How the body must be written after the head the encoder wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    /// As is (its length is announced, or there is none).
    Plain,
    /// In chunks ([`put_chunk`], then [`put_last_chunk`]).
    Chunked,
    /// As is, and the connection closes after it (HTTP/1.0, length unknown).
    UntilClose,
}

impl<'a> Reply<'a> {
    /// A reply with `status`, a `Date`, no fields yet and the given framing.
    pub fn new(status: u16, framing: Framing) -> Reply<'a> {
        Reply {
            status,
            reason: b"",
            base: Base::None,
            drop: None,
            more_drops: Vec::new(),
            added: Parts::new(),
            lines: Parts::new(),
            render: None,
            date: true,
            framing,
        }
    }

    /// Adds fields (a route's configured ones, say).
    pub fn add_fields(&mut self, fields: &'a [(Bytes, Bytes)]) {
        if !fields.is_empty() {
            self.added.push(fields);
        }
    }

    /// Adds pre-rendered field lines (`Name: value\r\n` each, values already validated).
    pub fn add_lines(&mut self, lines: &'a [u8]) {
        if !lines.is_empty() {
            self.lines.push(lines);
        }
    }

    /// Removes the base fields `set` names (added fields and lines are not affected).
    pub fn drop_fields(&mut self, set: &'a dyn DropFields) {
        match self.drop {
            None => self.drop = Some(set),
            Some(_) => self.more_drops.push(set),
        }
    }

    /// Whether no drop set applies: the base's fields go out as they are.
    pub fn drops_nothing(&self) -> bool {
        self.drop.is_none()
    }

    /// Whether a drop set removes base field `name`.
    fn dropped(&self, name: &[u8]) -> bool {
        self.drop.is_some_and(|d| d.drops(name)) || self.more_drops.iter().any(|d| d.drops(name))
    }

    /// The value of field `name` (lowercase) as the reply carries it: the first one among the
    /// base (unless dropped), the added fields and the added lines. Fields `render` writes and
    /// those the encoder adds (`Date`, framing, `Connection`) are not seen. For logs: a walk
    /// over every field, done only when a log format asks for a response field.
    pub fn field(&self, name: &str) -> Option<&'a [u8]> {
        let name = name.as_bytes();
        let dropped = |n: &[u8]| self.dropped(n);
        let in_lines = |text: &'a [u8]| {
            text.split(|b| *b == b'\n').find_map(|line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|b| *b == b':')?;
                (line[..colon].eq_ignore_ascii_case(name)).then(|| line[colon + 1..].trim_ascii())
            })
        };
        let base = match self.base {
            Base::None => None,
            Base::Encoded(text) => {
                // Skip the status line.
                let start = text
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(text.len(), |i| i + 1);
                in_lines(&text[start..]).filter(|_| !dropped(name))
            }
            Base::Fields(fields) => fields
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name) && !dropped(&h.name))
                .map(|h| &h.value[..]),
            Base::Spans(fields) => fields
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name) && !dropped(n))
                .map(|(_, v)| v),
        };
        base.or_else(|| {
            self.added
                .iter()
                .flat_map(|s| s.iter())
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| &v[..])
        })
        .or_else(|| self.lines.iter().find_map(in_lines))
    }

    /// The values of several fields (lowercase names) in one walk over the reply: `out[i]` is
    /// what [`Reply::field`] would say of `names[i]`. A response filter that reads several
    /// fields of every response (compression) pays one walk, not one per name (each `field`
    /// call over a cache hit's ~10 stored fields cost ~1,500 instructions).
    pub fn fields_of<const N: usize>(&self, names: [&str; N]) -> [Option<&'a [u8]>; N] {
        let mut out = [None; N];
        let take = |name: &[u8], value: &'a [u8], out: &mut [Option<&'a [u8]>; N]| {
            for (i, n) in names.iter().enumerate() {
                if n.len() == name.len()
                    && out[i].is_none()
                    && name.eq_ignore_ascii_case(n.as_bytes())
                {
                    out[i] = Some(value);
                    return;
                }
            }
        };
        let lines = |text: &'a [u8], from_base: bool, out: &mut [Option<&'a [u8]>; N]| {
            let mut start = 0;
            while start < text.len() {
                let end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
                let line = &text[start..end];
                start = end + 1;
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let Some(colon) = memchr::memchr(b':', line) else {
                    continue;
                };
                let name = &line[..colon];
                if from_base && self.drop.is_some() && self.dropped(name) {
                    continue;
                }
                take(name, line[colon + 1..].trim_ascii(), out);
            }
        };
        match self.base {
            Base::None => {}
            Base::Encoded(text) => {
                let start = text
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(text.len(), |i| i + 1);
                lines(&text[start..], true, &mut out);
            }
            Base::Fields(fields) => {
                for h in fields.iter().filter(|h| !self.dropped(&h.name)) {
                    take(&h.name, &h.value, &mut out);
                }
            }
            Base::Spans(fields) => {
                for (n, v) in fields.iter().filter(|(n, _)| !self.dropped(n)) {
                    take(n, v, &mut out);
                }
            }
        }
        for (n, v) in self.added.iter().flat_map(|s| s.iter()) {
            take(n, v, &mut out);
        }
        for text in self.lines.iter() {
            lines(text, false, &mut out);
        }
        out
    }

    /// The added fields and lines, for encoders other than HTTP/1.1 and for tests.
    pub fn added(&self) -> impl Iterator<Item = &(Bytes, Bytes)> {
        self.added.iter().flat_map(|s| s.iter())
    }

    /// Writes the HTTP/1.1 head for a client speaking `version`, and says how to write the
    /// body. `persistence` may be overridden to `Close` (HTTP/1.0 with an unknown length): the
    /// returned encoding says so.
    pub fn encode_h1(
        &self,
        out: &mut BytesMut,
        version: Version,
        persistence: Persistence,
    ) -> BodyEncoding {
        let drop = |name: &[u8]| self.dropped(name);
        let mut has_date = false;
        match self.base {
            Base::None => put_status_line_with(out, self.status, self.reason),
            Base::Encoded(head) if self.drop.is_none() => out.put_slice(head),
            Base::Encoded(head) => put_encoded_filtered(out, head, &drop),
            Base::Fields(fields) => {
                put_status_line_with(out, self.status, self.reason);
                let tokens = ConnectionTokens::of(fields);
                let pairs = fields.iter().map(|h| (&h.name[..], &h.value[..]));
                has_date = self.put_relayed(out, pairs, &tokens);
            }
            Base::Spans(fields) => {
                put_status_line_with(out, self.status, self.reason);
                // The parser's marks decide when no filter drops fields.
                let marked = match self.drop {
                    None => fields.put_marked(out, self.framing == Framing::Given),
                    Some(_) => None,
                };
                if let Some(date) = marked {
                    has_date = date;
                } else {
                    has_date = self.put_spans(out, fields);
                }
            }
        }
        let (first, more) = self.added.slices();
        for fields in first.iter().chain(more) {
            for (n, v) in fields.iter() {
                put_header(out, n, v);
            }
        }
        let (first, more) = self.lines.slices();
        for l in first {
            out.put_slice(l);
        }
        for l in more {
            out.put_slice(l);
        }
        if let Some(render) = self.render {
            render(out);
        }
        if self.date && !has_date {
            put_date(out);
        }
        let (encoding, persistence) = match (self.framing, version) {
            (Framing::Given, _) => (BodyEncoding::Plain, persistence),
            (Framing::Length(n), _) => {
                put_content_length(out, n);
                (BodyEncoding::Plain, persistence)
            }
            (Framing::Unknown, Version::Http11) => {
                out.put_slice(b"Transfer-Encoding: chunked\r\n");
                (BodyEncoding::Chunked, persistence)
            }
            (Framing::Unknown, Version::Http10) => (BodyEncoding::UntilClose, Persistence::Close),
        };
        let connection = connection_field(persistence, version);
        if !connection.is_empty() {
            out.put_slice(connection);
        }
        out.put_slice(b"\r\n");
        encoding
    }
}

impl Reply<'_> {
    /// Writes a relayed head's fields by their names: the kept lines as received, or, for a
    /// head with a bare LF, field by field. Returns whether a `Date` was written.
    fn put_spans(&self, out: &mut BytesMut, fields: &Fields) -> bool {
        let mut has_date = false;
        let tokens = ConnectionTokens::of_fields(fields);
        // The kept lines as received; a head with a bare LF is written field by field.
        let kept = fields.put_lines(out, |n, _| {
            let keep = self.relays(n, &tokens);
            has_date |= keep && n.eq_ignore_ascii_case(b"date");
            keep
        });
        if !kept {
            has_date = self.put_relayed(out, fields.iter(), &tokens);
        }
        has_date
    }
    /// Writes relayed fields, leaving out the connection-specific ones, those dropped and the
    /// framing fields (the encoder's, unless the base carries them: a HEAD response's or a
    /// 304's Content-Length describes another message). Returns whether a `Date` was written.
    #[inline]
    fn put_relayed<'f>(
        &self,
        out: &mut BytesMut,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        tokens: &ConnectionTokens<'_>,
    ) -> bool {
        let mut has_date = false;
        for (n, v) in fields {
            if !self.relays(n, tokens) {
                continue;
            }
            has_date |= n.eq_ignore_ascii_case(b"date");
            put_header(out, n, v);
        }
        has_date
    }

    /// Whether relayed field `name` is written: not connection-specific, not dropped, and not
    /// a framing field (the encoder's, unless the base carries them).
    #[inline]
    fn relays(&self, name: &[u8], tokens: &ConnectionTokens<'_>) -> bool {
        let framing_field =
            self.framing != Framing::Given && name.eq_ignore_ascii_case(b"content-length");
        !(is_hop_by_hop(name, tokens) || framing_field || self.dropped(name))
    }
}

/// The one place the `Connection` field is chosen: `close` on the last response, `keep-alive`
/// to an HTTP/1.0 client that keeps the connection, nothing otherwise.
pub fn connection_field(persistence: Persistence, version: Version) -> &'static [u8] {
    match (persistence, version) {
        (Persistence::Close, _) => b"Connection: close\r\n",
        (Persistence::KeepAlive, Version::Http10) => b"Connection: keep-alive\r\n",
        (Persistence::KeepAlive, Version::Http11) => b"",
    }
}

/// Copies a pre-encoded head line by line, leaving out fields `drop` names.
/// Runs of kept lines are copied at once (a `memchr` per line, no iterator adapters: this
/// walk once cost ~700 instructions for a five-line head).
fn put_encoded_filtered(out: &mut BytesMut, head: &[u8], drop: &dyn Fn(&[u8]) -> bool) {
    let line_end =
        |from: usize| memchr::memchr(b'\n', &head[from..]).map_or(head.len(), |i| from + i + 1);
    // The status line is kept.
    let mut at = line_end(0);
    let mut kept_from = 0;
    while at < head.len() {
        let end = line_end(at);
        let line = &head[at..end];
        let name = &line[..memchr::memchr(b':', line).unwrap_or(line.len())];
        if drop(name) {
            out.put_slice(&head[kept_from..at]);
            kept_from = end;
        }
        at = end;
    }
    out.put_slice(&head[kept_from..]);
}

/// Writes one chunk of a chunked body (nothing for empty data: that would end the body).
pub fn put_chunk(out: &mut BytesMut, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let mut hex = [0u8; 16];
    let mut n = data.len();
    let mut i = hex.len();
    while n > 0 {
        i -= 1;
        hex[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
    }
    out.reserve(hex.len() - i + data.len() + 4);
    out.put_slice(&hex[i..]);
    out.put_slice(b"\r\n");
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// Ends a chunked body (no trailers).
pub fn put_last_chunk(out: &mut BytesMut) {
    out.put_slice(b"0\r\n\r\n");
}

#[cfg(test)]
mod tests;
