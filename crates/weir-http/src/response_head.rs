//! Response heads, as the proxy reads them from an upstream: parse, validate, derive framing and
//! whether the upstream connection may be reused. Same conventions as [`crate::request`]:
//! `Ok(None)` = need more bytes; names and values are slices of one frozen `Bytes`.
//!
//! The fields are kept as spans of the head ([`Fields`]); a relayed response is encoded from
//! them ([`ResponseHead::base`]). `Header`s are made the first time something asks for them
//! ([`ResponseHead::headers`]: the cache, filters that read the response), once.

use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};

use crate::error::ParseError;
use crate::fields::{Connection, Fields, Marks, PlainLines, Spans};
use crate::framing::{BodyKind, FramingFields};
use crate::hop::{is_fixed_hop_by_hop_token, token_eq};
use crate::reply::Base;
use crate::request::{Header, Version, MAX_HEADERS};

/// A parsed response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    /// The reason phrase as sent.
    pub reason: Bytes,
    pub version: Version,
    /// The fields as received.
    fields: Fields,
    /// The fields as `Header`s, made on first use; once set (or replaced: [`Self::with_headers`])
    /// they are the response's fields.
    headers: OnceLock<Vec<Header>>,
    /// How the body is framed (given the request method).
    pub body: BodyKind,
    /// Whether the connection may carry another exchange after this one.
    pub keep_alive: bool,
    /// Bytes the head occupied on the wire.
    pub head_len: usize,
}

impl ResponseHead {
    /// The fields, in order (made from the spans on first use).
    pub fn headers(&self) -> &[Header] {
        self.headers.get_or_init(|| self.fields.to_headers())
    }

    /// This response with `headers` as its fields.
    pub fn with_headers(&self, headers: Vec<Header>) -> ResponseHead {
        ResponseHead {
            headers: OnceLock::from(headers),
            ..self.clone()
        }
    }

    /// The fields as a reply's base: the spans as received, or the `Header`s once made.
    #[inline]
    pub fn base(&self) -> Base<'_> {
        match self.headers.get() {
            Some(headers) => Base::Fields(headers),
            None => Base::Spans(&self.fields),
        }
    }

    /// First value of a header as a slice of the head (no copy), from the `Header`s once made.
    pub fn header_bytes(&self, name: &str) -> Option<Bytes> {
        match self.headers.get() {
            Some(headers) => headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name.as_bytes()))
                .map(|h| h.value.clone()),
            None => self.fields.get_bytes(name.as_bytes()),
        }
    }

    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        match self.headers.get() {
            Some(headers) => headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name.as_bytes()))
                .map(|h| &h.value[..]),
            None => self.fields.get(name.as_bytes()),
        }
    }
}

/// Parses one response head from the front of `buf`. `head_request`: the request was HEAD, so the
/// response has no body whatever its fields say. Heads over `max_head` bytes are refused.
///
/// One pass over the fields records their spans, derives the framing and the `Connection`
/// tokens, and marks the fields the encoder treats apart ([`Marks`]).
pub fn parse_response(
    buf: &mut BytesMut,
    max_head: usize,
    head_request: bool,
) -> Result<Option<ResponseHead>, ParseError> {
    // Uninitialised slots, as for requests (`parse_request`).
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let n = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max_head => {
            return Err(ParseError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadTooLarge),
        Err(_) => return Err(ParseError::BadRequest("malformed response head")),
    };
    if n > max_head {
        return Err(ParseError::HeadTooLarge);
    }
    let status = resp.code.unwrap_or(0);
    if !(100..=999).contains(&status) {
        return Err(ParseError::BadRequest("invalid status code"));
    }
    let version = if resp.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - base;
    // httparse gives a reason phrase that is not UTF-8 as a static "" (not a slice of `buf`):
    // its offset must not be taken (it underflowed).
    let reason = resp.reason.unwrap_or("");
    let reason_range = if reason.is_empty() {
        (0, 0)
    } else {
        (offset(reason.as_bytes()), reason.len())
    };
    let mut spans = Spans::for_head(n);
    let mut framing = FramingFields::default();
    let mut connection = Connection::default();
    let mut marks = Marks {
        whole: resp.headers.len() <= 32,
        ..Marks::default()
    };
    let mut lines = PlainLines::new();
    for (i, h) in resp.headers.iter().enumerate() {
        let (name, value) = (h.name.as_bytes(), h.value);
        let (name_at, value_at) = (offset(name), offset(value));
        spans.push((name_at, name.len()), (value_at, value.len()));
        lines.field(buf, name_at, value_at + value.len());
        let bit = 1u32.checked_shl(i as u32).unwrap_or(0);
        // httparse gives token-character names: compared a word at a time (`token_eq`).
        match name.len() {
            14 if token_eq(name, b"content-length") => {
                framing
                    .content_length(value)
                    .map_err(|_| ParseError::BadRequest("invalid Content-Length in response"))?;
                marks.length |= bit;
            }
            17 if token_eq(name, b"transfer-encoding") => {
                framing.transfer_encoding(value)?;
                marks.hop |= bit;
            }
            10 if token_eq(name, b"connection") => {
                connection.note(value);
                marks.hop |= bit;
            }
            4 if token_eq(name, b"date") => marks.date = true,
            5 if token_eq(name, b"close") => marks.close_named = true,
            _ if is_fixed_hop_by_hop_token(name) => marks.hop |= bit,
            _ => {}
        }
    }
    let body = framing.response_body(status, head_request)?;
    let keep_alive = body != BodyKind::CloseDelimited
        && !connection.close
        && (version == Version::Http11 || connection.keep_alive);
    let crlf = lines.end(&buf[..n]);
    let head = buf.split_to(n).freeze();
    // The common phrase costs no reference to the head (a slice of it is a count taken and
    // given back: ~30 instructions per proxied response, callgrind 2026-11-27).
    let reason = match reason_range.1 {
        0 => Bytes::new(),
        2 if &head[reason_range.0..reason_range.0 + 2] == b"OK" => Bytes::from_static(b"OK"),
        len => head.slice(reason_range.0..reason_range.0 + len),
    };
    Ok(Some(ResponseHead {
        status,
        reason,
        version,
        fields: Fields::new(head, spans, connection, marks, crlf),
        headers: OnceLock::new(),
        body,
        keep_alive,
        head_len: n,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::MAX_HEAD;

    fn parse(s: &[u8], head: bool) -> Result<Option<ResponseHead>, ParseError> {
        let mut b = BytesMut::from(s);
        parse_response(&mut b, 64 * 1024, head)
    }

    impl ResponseHead {
        fn base_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
            self.fields.iter()
        }
    }

    #[test]
    fn spans_and_headers_say_the_same_until_headers_are_replaced() {
        let r = parse(
            b"HTTP/1.1 200 OK\r\nA: 1\r\nConnection: x-b, a\r\nx-b: 2\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(r.base(), crate::Base::Spans(_)));
        assert_eq!(r.header("a"), Some(&b"1"[..]));
        assert_eq!(r.header_bytes("X-b").as_deref(), Some(&b"2"[..]));
        assert!(
            matches!(r.base(), crate::Base::Spans(_)),
            "a lookup makes no Headers"
        );
        assert_eq!(r.headers().len(), 4);
        // Made once: from then on the base is the `Header`s, which say the same.
        assert!(matches!(r.base(), crate::Base::Fields(_)));
        assert_eq!(r.header("X-B"), Some(&b"2"[..]));
        let fewer = r.with_headers(r.headers()[..1].to_vec());
        assert_eq!(fewer.header("x-b"), None);
        assert_eq!(fewer.header_bytes("x-b"), None);
        assert_eq!(fewer.header_bytes("A").as_deref(), Some(&b"1"[..]));
        assert_eq!(fewer.headers().len(), 1);
        // Both bases relay the same fields, without the connection-specific ones.
        let encode = |base| {
            let mut reply = crate::Reply::new(200, crate::Framing::Given);
            reply.base = base;
            reply.date = false;
            let mut out = BytesMut::new();
            reply.encode_h1(&mut out, Version::Http11, crate::Persistence::KeepAlive);
            out
        };
        let spans = parse(
            b"HTTP/1.1 200 OK\r\nA: 1\r\nConnection: x-b\r\nx-b: 2\r\nDate: d\r\nContent-Length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        let via_spans = encode(spans.base());
        let _ = spans.headers();
        assert_eq!(via_spans, encode(spans.base()));
        assert_eq!(
            &via_spans[..],
            b"HTTP/1.1 200 OK\r\nA: 1\r\nDate: d\r\nContent-Length: 0\r\n\r\n"
        );
    }

    /// Kept lines go out as received (runs of them in one copy); a head with a bare LF anywhere
    /// is written field by field instead, every line ending in CRLF.
    #[test]
    fn relayed_lines_keep_their_bytes_and_never_a_bare_lf() {
        let encode = |raw: &[u8]| {
            let r = parse(raw, false).unwrap().unwrap();
            let mut reply = crate::Reply::new(r.status, crate::Framing::Length(2));
            reply.reason = &r.reason;
            reply.base = r.base();
            reply.date = false;
            let mut out = BytesMut::new();
            reply.encode_h1(&mut out, Version::Http11, crate::Persistence::KeepAlive);
            String::from_utf8(out.to_vec()).unwrap()
        };
        assert_eq!(
            encode(b"HTTP/1.1 200 OK\r\nA:1\r\nConnection: x-b\r\nB:  2\r\nx-b: 3\r\nContent-Length: 2\r\nZ: 9\r\n\r\nok"),
            "HTTP/1.1 200 OK\r\nA:1\r\nB:  2\r\nZ: 9\r\nContent-Length: 2\r\n\r\n"
        );
        // Whitespace after a value (which HTTP/2 and HTTP/3 forbid) is not relayed: the fields
        // are written one by one, trimmed, as a cache hit's would be (the attack review).
        assert_eq!(
            encode(b"HTTP/1.1 200 OK\r\nA:1\r\nX-Trail: bar \t\r\nContent-Length: 2\r\n\r\nok"),
            "HTTP/1.1 200 OK\r\nA: 1\r\nX-Trail: bar\r\nContent-Length: 2\r\n\r\n"
        );
        // Dropped first and last lines.
        assert_eq!(
            encode(
                b"HTTP/1.1 200 OK\r\nKeep-Alive: 5\r\nA: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            "HTTP/1.1 200 OK\r\nA: 1\r\nContent-Length: 2\r\n\r\n"
        );
        for bare in [
            &b"HTTP/1.1 200 OK\nA: 1\r\nB: 2\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\n\n",
        ] {
            let out = encode(bare);
            assert!(!out.replace("\r\n", "").contains('\n'), "{out:?}");
            assert!(out.contains("A: 1\r\nB: 2\r\n"), "{out:?}");
        }
    }

    /// The parser's marks pick the same lines as comparing names does, for every framing and
    /// `Date` case, and stand aside when they cannot decide alone.
    #[test]
    fn marks_relay_what_names_relay() {
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..40 {
            many.extend_from_slice(format!("F{i}: v\r\nKeep-Alive: {i}\r\n").as_bytes());
        }
        many.extend_from_slice(b"Content-Length: 0\r\n\r\n");
        let heads: [&[u8]; 11] = [
            // A field named as the `close` token is hop-by-hop, whichever comes first: names
            // decide.
            b"HTTP/1.1 200 OK\r\nClose: 1\r\nA: 2\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            // Without `Connection: close`, a field named `close` is relayed by the marks.
            b"HTTP/1.1 200 OK\r\nClose: 1\r\nA: 2\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nServer: s\r\nDate: d\r\nContent-Length: 2\r\nConnection: keep-alive\r\nETag: \"e\"\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nTE: x\r\nA: 1\r\nUpgrade: u\r\nB: 2\r\nProxy-Connection: p\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: t\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\nDATE: x\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            // A `Connection` naming other fields: names decide.
            b"HTTP/1.1 200 OK\r\nConnection: x-b, close\r\nX-B: 1\r\nA: 2\r\nContent-Length: 0\r\n\r\n",
            // Whitespace after a value and a bare LF: written field by field.
            b"HTTP/1.1 200 OK\r\nA: 1 \r\nKeep-Alive: 1\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: 1\nKeep-Alive: 1\r\nContent-Length: 0\r\n\r\n",
            &many,
        ];
        let no_drop = |_: &[u8]| false;
        for (i, raw) in heads.iter().enumerate() {
            let r = parse(raw, false).unwrap().unwrap();
            let marked = matches!(i, 1..=6);
            let mut out = BytesMut::new();
            assert_eq!(
                r.fields.put_marked(&mut out, true).is_some(),
                marked,
                "head {i}"
            );
            for framing in [
                crate::Framing::Given,
                crate::Framing::Length(2),
                crate::Framing::Unknown,
            ] {
                for date in [false, true] {
                    let encode = |drop: bool| {
                        let mut reply = crate::Reply::new(r.status, framing);
                        reply.base = r.base();
                        reply.date = date;
                        if drop {
                            reply.drop_fields(&no_drop);
                        }
                        let mut out = BytesMut::new();
                        reply.encode_h1(&mut out, Version::Http11, crate::Persistence::KeepAlive);
                        out
                    };
                    let (by_marks, by_names) = (encode(false), encode(true));
                    assert_eq!(by_marks, by_names, "head {i}, {framing:?}, date {date}");
                    if date {
                        // Exactly one Date, the origin's when it sent one.
                        let text = String::from_utf8_lossy(&by_marks).to_ascii_lowercase();
                        assert_eq!(text.matches("\r\ndate:").count(), 1, "head {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn fields_near_the_64_kib_bound_read_back_whole() {
        let head = |pad: usize| {
            let mut h = b"HTTP/1.1 200 OK\r\nA: 1\r\nX-Pad: ".to_vec();
            h.extend(std::iter::repeat_n(b'p', pad));
            h.extend_from_slice(b"\r\nZ-Last: end\r\nContent-Length: 0\r\n\r\n");
            h
        };
        let fixed = head(0).len();
        let exact = head(MAX_HEAD - fixed);
        assert_eq!(exact.len(), MAX_HEAD);
        let r = parse(&exact, false).unwrap().unwrap();
        let got: Vec<(Vec<u8>, usize)> = r
            .base_fields()
            .map(|(n, v)| (n.to_vec(), v.len()))
            .collect();
        assert_eq!(got[1], (b"X-Pad".to_vec(), MAX_HEAD - fixed));
        assert_eq!(r.header("z-last"), Some(&b"end"[..]));
        assert_eq!(r.header("content-length"), Some(&b"0"[..]));
        // One byte more takes the wide spans, read back the same.
        let mut over = BytesMut::from(&head(MAX_HEAD - fixed + 1)[..]);
        let r = parse_response(&mut over, 2 * MAX_HEAD, false)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.base_fields().nth(1).unwrap().1.len(),
            MAX_HEAD - fixed + 1
        );
        assert_eq!(r.header("z-last"), Some(&b"end"[..]));
        let mut over = BytesMut::from(&head(MAX_HEAD - fixed + 1)[..]);
        assert!(matches!(
            parse_response(&mut over, MAX_HEAD, false),
            Err(ParseError::HeadTooLarge)
        ));
    }

    #[test]
    fn parses_and_frames() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false)
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.status, &r.reason[..], r.body, r.keep_alive),
            (200, &b"OK"[..], BodyKind::Length(5), true)
        );
        let r = parse(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body, BodyKind::Chunked);
        let r = parse(b"HTTP/1.1 200 OK\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((r.body, r.keep_alive), (BodyKind::CloseDelimited, false));
        let r = parse(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert!(!r.keep_alive);
        let r = parse(
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(r.keep_alive);
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, BodyKind::Empty);
        let r = parse(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body, BodyKind::Empty);
        assert!(parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            false
        )
        .is_err());
        assert!(parse(b"garbage\r\n\r\n", false).is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Le", false)
            .unwrap()
            .is_none());
    }
}
