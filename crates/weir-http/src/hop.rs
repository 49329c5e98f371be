//! Hop-by-hop fields (RFC 9110 §7.6.1): the fixed set that describes one connection, and any
//! field a message's `Connection` names. A proxy never forwards them, a cache never stores them,
//! and an interim response relayed to a client drops them too: one table for all of those.

use crate::fields::Fields;
use crate::framing::trim_ows;
use crate::request::Header;

/// Fields that describe one connection, never forwarded.
const HOP_BY_HOP: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    // Only meaningful with `Upgrade: h2c` (RFC 7540 §3.2), which is never relayed.
    b"http2-settings",
];

/// Fields HTTP/2 forbids in a message (RFC 9113 §8.2.2): the connection-specific ones. Used by
/// both HTTP/2 sides (a client's streams, and the bridge to HTTP/2 upstreams).
const NOT_IN_H2: &[&[u8]] = &[
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
    b"http2-settings",
];

/// Whether HTTP/2 forbids field `name` (RFC 9113 §8.2.2; `te` other than `trailers` too, which
/// callers handle).
pub fn not_in_h2(name: &[u8]) -> bool {
    NOT_IN_H2.iter().any(|f| name.eq_ignore_ascii_case(f))
}

/// Fields a trailer section must not carry (RFC 9110 §6.5.1): framing, routing, request
/// modifiers, authentication and content format, besides the hop-by-hop ones. A recipient that
/// merged them into the header section would be misled (a trailing `Content-Length` or `Host`),
/// so a proxy drops them.
const NOT_IN_TRAILERS: &[&[u8]] = &[
    b"content-length",
    b"host",
    b"content-encoding",
    b"content-type",
    b"content-range",
    b"trailer",
    b"authorization",
    b"cookie",
    b"set-cookie",
    b"cache-control",
    b"expect",
    b"max-forwards",
    b"pragma",
    b"range",
    b"if-match",
    b"if-none-match",
    b"if-modified-since",
    b"if-unmodified-since",
    b"if-range",
    b"www-authenticate",
    b"age",
    b"expires",
    b"date",
    b"location",
    b"retry-after",
    b"vary",
];

/// Whether a trailer field is dropped rather than forwarded: the fields of [`NOT_IN_TRAILERS`],
/// the hop-by-hop ones, and any pseudo-header.
pub fn not_in_trailers(name: &[u8]) -> bool {
    name.first() == Some(&b':')
        || NOT_IN_TRAILERS.iter().any(|f| name.eq_ignore_ascii_case(f))
        || HOP_BY_HOP.iter().any(|f| name.eq_ignore_ascii_case(f))
}

/// Tokens kept in place; a message listing more falls back to scanning its fields.
const MAX_TOKENS: usize = 8;

/// The field names a message's `Connection` fields list, gathered once (no allocation: at most
/// eight tokens are kept as slices of the field values, a longer list is scanned when asked).
/// Gathering once matters: asking per field scanned every field again, and with the
/// `Connection: keep-alive` most upstreams send that was ~1,600 instructions per proxied
/// response (callgrind, bench/proxy_floor.sh).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTokens<'a> {
    source: Source<'a>,
    tokens: [&'a [u8]; MAX_TOKENS],
    count: u8,
    /// More than `MAX_TOKENS`: `contains` scans the fields again.
    overflow: bool,
}

/// The fields a [`ConnectionTokens`] was gathered from.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Headers(&'a [Header]),
    Fields(&'a Fields),
}

impl<'a> Source<'a> {
    /// The values of the `Connection` fields.
    fn connection_values(self) -> impl Iterator<Item = &'a [u8]> {
        let (headers, fields) = match self {
            Source::Headers(h) => (Some(h), None),
            Source::Fields(f) => (None, Some(f)),
        };
        let from_headers = headers
            .into_iter()
            .flatten()
            .map(|h| (&h.name[..], &h.value[..]));
        let from_fields = fields.into_iter().flat_map(|f| f.iter());
        from_headers
            .chain(from_fields)
            .filter(|(n, _)| n.len() == 10 && n.eq_ignore_ascii_case(b"connection"))
            .map(|(_, v)| v)
    }
}

impl<'a> ConnectionTokens<'a> {
    pub fn of(headers: &'a [Header]) -> ConnectionTokens<'a> {
        ConnectionTokens::gather(Source::Headers(headers))
    }

    /// The same, over a received head's spans: read from what the parser noted when the
    /// fields list only `close` and `keep-alive`.
    pub fn of_fields(fields: &'a Fields) -> ConnectionTokens<'a> {
        let listed = fields.connection();
        if listed.other {
            return ConnectionTokens::gather(Source::Fields(fields));
        }
        let mut t = ConnectionTokens {
            source: Source::Fields(fields),
            tokens: [&[]; MAX_TOKENS],
            count: 0,
            overflow: false,
        };
        if listed.close {
            t.add(b"close");
        }
        if listed.keep_alive {
            t.add(b"keep-alive");
        }
        t
    }

    fn gather(source: Source<'a>) -> ConnectionTokens<'a> {
        let mut t = ConnectionTokens {
            source,
            tokens: [&[]; MAX_TOKENS],
            count: 0,
            overflow: false,
        };
        let is_connection = |n: &[u8]| n.len() == 10 && n.eq_ignore_ascii_case(b"connection");
        match source {
            Source::Headers(headers) => {
                for h in headers.iter().filter(|h| is_connection(&h.name)) {
                    t.add(&h.value);
                }
            }
            Source::Fields(fields) => {
                for (_, v) in fields.iter().filter(|(n, _)| is_connection(n)) {
                    t.add(v);
                }
            }
        }
        t
    }

    /// Notes the tokens of one `Connection` value.
    fn add(&mut self, value: &'a [u8]) {
        for token in value.split(|b| *b == b',').map(trim_ows) {
            if token.is_empty() {
                continue;
            }
            if (self.count as usize) < MAX_TOKENS {
                self.tokens[self.count as usize] = token;
                self.count += 1;
            } else {
                self.overflow = true;
            }
        }
    }

    /// Whether `token` is listed (case-insensitive).
    #[inline]
    pub fn contains(&self, token: &[u8]) -> bool {
        if self.tokens[..self.count as usize]
            .iter()
            .any(|t| t.eq_ignore_ascii_case(token))
        {
            return true;
        }
        self.overflow
            && self.source.connection_values().any(|value| {
                value
                    .split(|b| *b == b',')
                    .any(|t| trim_ows(t).eq_ignore_ascii_case(token))
            })
    }
}

/// Whether a field must not be forwarded or stored.
pub fn is_hop_by_hop(name: &[u8], connection: &ConnectionTokens<'_>) -> bool {
    is_fixed_hop_by_hop(name) || connection.contains(name)
}

/// The hop-by-hop test for the fields of a received head (token-character names, as its
/// parser checked them): when its `Connection` fields list only `close` and `keep-alive`, no
/// token list is gathered and names are compared a word at a time ([`token_eq`]); the
/// upstream request's builder asks this of every client field (~140 instructions per proxied
/// request, callgrind 2026-11-27).
#[derive(Debug, Clone, Copy)]
pub struct HopTest<'a> {
    /// The tokens, when the fields list others than `close` and `keep-alive`.
    tokens: Option<ConnectionTokens<'a>>,
    /// `close` is listed: a field named so is hop-by-hop.
    close: bool,
}

impl<'a> HopTest<'a> {
    #[inline]
    pub fn of_fields(fields: &'a Fields) -> HopTest<'a> {
        let listed = fields.connection();
        if listed.other {
            return HopTest::listing(fields);
        }
        // Only the tag is written: the token list built and copied in every case cost ~35
        // instructions per proxied request (callgrind 2026-11-27).
        HopTest {
            tokens: None,
            close: listed.close,
        }
    }

    #[cold]
    #[inline(never)]
    fn listing(fields: &'a Fields) -> HopTest<'a> {
        HopTest {
            tokens: Some(ConnectionTokens::of_fields(fields)),
            close: fields.connection().close,
        }
    }

    /// Whether field `name` of those fields is hop-by-hop ([`is_hop_by_hop`]).
    #[inline]
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        match &self.tokens {
            Some(tokens) => is_hop_by_hop(name, tokens),
            // `keep-alive` is a fixed hop-by-hop field.
            None => is_fixed_hop_by_hop_token(name) || (self.close && token_eq(name, b"close")),
        }
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`]: only the names of its length are compared (every
/// field of every proxied message passes here; the walk over the whole table cost ~60
/// instructions a field, callgrind 2026-11-27).
#[inline]
pub(crate) fn is_fixed_hop_by_hop(name: &[u8]) -> bool {
    fixed_hop_by_hop(name, |a, b| a.eq_ignore_ascii_case(b))
}

/// Eight bytes of `s` from `at`, as one word.
#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    match s.get(at..at + 8) {
        Some(w) => u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]),
        None => 0,
    }
}

/// The same for a name of token characters (a parser checked it): compared a word at a time
/// ([`token_eq`]).
#[inline]
pub(crate) fn is_fixed_hop_by_hop_token(name: &[u8]) -> bool {
    fixed_hop_by_hop(name, token_eq)
}

#[inline(always)]
fn fixed_hop_by_hop(name: &[u8], eq: impl Fn(&[u8], &[u8]) -> bool) -> bool {
    let candidates: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        7 => &[b"trailer", b"upgrade"],
        10 => &[b"connection", b"keep-alive"],
        14 => &[b"http2-settings"],
        16 => &[b"proxy-connection"],
        17 => &[b"transfer-encoding"],
        18 => &[b"proxy-authenticate"],
        19 => &[b"proxy-authorization"],
        _ => return false,
    };
    candidates.iter().any(|h| eq(name, h))
}

/// Whether `name`, a field name of token characters (RFC 9110 §5.6.2, as httparse checks
/// them), is `lower` (lowercase letters, digits and `-`) with ASCII case ignored. Setting bit
/// 0x20 of a token byte gives a lowercase letter only from a letter, and `-` or a digit only
/// from itself, so eight bytes are compared at once (`eq_ignore_ascii_case` lowers a byte at
/// a time: ~4 instructions a byte, ~300 per proxied response, callgrind 2026-11-27). A name
/// holding bytes outside the token set (which parsers refuse) may compare equal wrongly.
#[inline(always)]
pub(crate) fn token_eq(name: &[u8], lower: &[u8]) -> bool {
    const SET: u64 = 0x2020_2020_2020_2020;
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n >= 8 {
        // Words from the start, the last one ending at the end (overlapping).
        let mut at = 0;
        while at + 8 < n {
            if word(name, at) | SET != word(lower, at) {
                return false;
            }
            at += 8;
        }
        word(name, n - 8) | SET == word(lower, n - 8)
    } else {
        name.iter().zip(lower).all(|(a, b)| a | 0x20 == *b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn fields(pairs: &[(&'static str, &'static str)]) -> Vec<Header> {
        pairs
            .iter()
            .map(|(n, v)| Header {
                name: Bytes::from_static(n.as_bytes()),
                value: Bytes::from_static(v.as_bytes()),
            })
            .collect()
    }

    /// `token_eq` says what `eq_ignore_ascii_case` says for every token-character name, at
    /// every length up to 24 (both sides of the word boundaries).
    #[test]
    fn token_eq_agrees_with_ignoring_case() {
        const TCHAR: &[u8] =
            b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in 0..=24 {
            for _ in 0..400 {
                let lower: Vec<u8> = (0..len)
                    .map(|_| b"abcdefghijklmnopqrstuvwxyz-0123456789"[next() as usize % 37])
                    .collect();
                // The name, in mixed case, with one byte sometimes changed to any token byte.
                let mut name: Vec<u8> = lower
                    .iter()
                    .map(|b| {
                        if next() % 2 == 0 {
                            b.to_ascii_uppercase()
                        } else {
                            *b
                        }
                    })
                    .collect();
                if len > 0 && next() % 2 == 0 {
                    let at = next() as usize % len;
                    name[at] = TCHAR[next() as usize % TCHAR.len()];
                }
                assert_eq!(
                    token_eq(&name, &lower),
                    name.eq_ignore_ascii_case(&lower),
                    "{:?} {:?}",
                    String::from_utf8_lossy(&name),
                    String::from_utf8_lossy(&lower)
                );
            }
        }
        for name in HOP_BY_HOP {
            assert!(is_fixed_hop_by_hop_token(&name.to_ascii_uppercase()));
            assert!(!is_fixed_hop_by_hop_token(
                &[b"x".as_slice(), &name[1..]].concat()
            ));
        }
    }

    #[test]
    fn the_length_switch_knows_every_fixed_field() {
        for name in HOP_BY_HOP {
            assert!(is_fixed_hop_by_hop(name), "{:?}", std::str::from_utf8(name));
            assert!(is_fixed_hop_by_hop(&name.to_ascii_uppercase()));
            let mut other = name.to_vec();
            other[0] ^= 0x01;
            assert!(!is_fixed_hop_by_hop(&other));
        }
        assert!(!is_fixed_hop_by_hop(b"content-length") && !is_fixed_hop_by_hop(b""));
    }

    /// What the parser noted and a scan of the fields say the same, request and response.
    #[test]
    fn noted_tokens_agree_with_a_scan() {
        let names = [
            "close",
            "keep-alive",
            "x-a",
            "X-B",
            "te",
            "upgrade",
            "other",
            "",
        ];
        for conn in [
            "close",
            "Keep-Alive",
            "keep-alive, close",
            ",, close ,",
            "Upgrade",
            "close, X-A",
            "x-a,x-b",
        ] {
            let raw = format!("GET / HTTP/1.1\r\nHost: a\r\nConnection: {conn}\r\nX-A: 1\r\n\r\n");
            let req = crate::parse_request(
                &mut bytes::BytesMut::from(raw.as_bytes()),
                &Default::default(),
            )
            .unwrap()
            .unwrap();
            let raw = format!("HTTP/1.1 200 OK\r\nConnection: {conn}\r\nContent-Length: 0\r\n\r\n");
            let resp =
                crate::parse_response(&mut bytes::BytesMut::from(raw.as_bytes()), 4096, false)
                    .unwrap()
                    .unwrap();
            let crate::Base::Spans(resp_fields) = resp.base() else {
                panic!("spans")
            };
            for (fields, headers) in [(req.fields(), req.headers()), (resp_fields, resp.headers())]
            {
                let noted = ConnectionTokens::of_fields(fields);
                let scanned = ConnectionTokens::of(headers);
                let test = HopTest::of_fields(fields);
                for n in names
                    .iter()
                    .chain(&["CLOSE", "Keep-Alive", "Transfer-Encoding"])
                {
                    assert_eq!(
                        noted.contains(n.as_bytes()),
                        scanned.contains(n.as_bytes()),
                        "{conn:?} {n:?}"
                    );
                    assert_eq!(
                        test.is_hop_by_hop(n.as_bytes()),
                        is_hop_by_hop(n.as_bytes(), &scanned),
                        "{conn:?} {n:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_connection_lists_are_still_read_whole() {
        let long = fields(&[("Connection", "a, b, c, d, e, f, g, h, i, X-Late")]);
        let tokens = ConnectionTokens::of(&long);
        assert!(tokens.contains(b"a") && tokens.contains(b"x-late"));
        assert!(!tokens.contains(b"z"));
        // The same over a received head's spans.
        let mut raw = bytes::BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nConnection: a, b, c, d, e\r\nconnection: f, g, h, i, X-Late\r\n\r\n"[..],
        );
        let resp = crate::parse_response(&mut raw, 4096, false)
            .unwrap()
            .unwrap();
        let crate::Base::Spans(spans) = resp.base() else {
            panic!("spans")
        };
        let tokens = ConnectionTokens::of_fields(spans);
        assert!(tokens.contains(b"a") && tokens.contains(b"x-late") && tokens.contains(b"I"));
        assert!(!tokens.contains(b"z"));
        assert!(!ConnectionTokens::of(&[]).contains(b"close"));
    }

    #[test]
    fn hop_by_hop_table() {
        let with = fields(&[("Connection", "close,  X-Secret "), ("connection", "x-two")]);
        let without = fields(&[("X-Secret", "1")]);
        for (name, msg, want) in [
            ("X-Secret", &with, true),
            ("x-two", &with, true),
            ("Keep-Alive", &with, true),
            ("Proxy-Authorization", &without, true),
            ("TE", &without, true),
            ("Transfer-Encoding", &without, true),
            ("X-Secret", &without, false),
            ("X-Other", &with, false),
            ("Content-Length", &with, false),
        ] {
            let tokens = ConnectionTokens::of(msg);
            assert_eq!(is_hop_by_hop(name.as_bytes(), &tokens), want, "{name}");
        }
    }
}
