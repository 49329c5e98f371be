//! A request's header block (or a trailer section) checked as RFC 9113 says while HPACK
//! decodes it: the pseudo-header fields (§8.3.1: each once, before the regular fields, only the
//! request's, the required ones present, CONNECT's own rules), and the regular fields (§8.2:
//! lower-case names, no connection-specific field, `te` only `trailers`, values without
//! CR, LF, NUL or surrounding whitespace). A malformed block is a stream error of type
//! PROTOCOL_ERROR (§8.1.1), not a connection error: the checker keeps the decoding going (the
//! HPACK table must stay in step) and says what was wrong at the end.
//!
//! The regular fields go on to the caller's sink as they are decoded, so the connection can
//! build weir's own request head from them without a list in between.

use crate::hpack::{HpackError, Sink};

/// The pseudo-header fields of a request, in one buffer (one allocation per request, not
/// one per field).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pseudo {
    buf: Vec<u8>,
    method: Option<(u32, u32)>,
    scheme: Option<(u32, u32)>,
    authority: Option<(u32, u32)>,
    path: Option<(u32, u32)>,
    /// RFC 8441's `:protocol` (extended CONNECT).
    protocol: Option<(u32, u32)>,
}

impl Pseudo {
    fn get(&self, r: Option<(u32, u32)>) -> Option<&[u8]> {
        r.map(|(a, b)| &self.buf[a as usize..b as usize])
    }

    pub fn method(&self) -> &[u8] {
        self.get(self.method).unwrap_or_default()
    }

    pub fn scheme(&self) -> Option<&[u8]> {
        self.get(self.scheme)
    }

    pub fn authority(&self) -> Option<&[u8]> {
        self.get(self.authority)
    }

    pub fn path(&self) -> Option<&[u8]> {
        self.get(self.path)
    }

    pub fn protocol(&self) -> Option<&[u8]> {
        self.get(self.protocol)
    }

    fn put(&mut self, value: &[u8]) -> (u32, u32) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(128);
        }
        let a = self.buf.len() as u32;
        self.buf.extend_from_slice(value);
        (a, self.buf.len() as u32)
    }
}

/// What the checker decided about a block.
pub type Malformed = &'static str;

/// Checks fields on their way to `inner` (see the module doc); `trailers`: a trailer section
/// (no pseudo-header at all).
pub struct Checked<'s> {
    inner: &'s mut dyn Sink,
    trailers: bool,
    pseudo: Pseudo,
    method_seen: bool,
    regular_seen: bool,
    malformed: Option<Malformed>,
}

impl std::fmt::Debug for Checked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("trailers", &self.trailers)
            .field("pseudo", &self.pseudo)
            .field("malformed", &self.malformed)
            .finish_non_exhaustive()
    }
}

impl<'s> Checked<'s> {
    pub fn new(inner: &'s mut dyn Sink, trailers: bool) -> Checked<'s> {
        Checked {
            inner,
            trailers,
            pseudo: Pseudo::default(),
            method_seen: false,
            regular_seen: false,
            malformed: None,
        }
    }

    /// The request's pseudo-header fields, or why the block is malformed.
    pub fn finish(self) -> Result<Pseudo, Malformed> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        if self.trailers {
            return Ok(self.pseudo);
        }
        let p = self.pseudo;
        if !self.method_seen {
            return Err("no :method");
        }
        if p.method() == b"CONNECT" && p.protocol.is_none() {
            // §8.5: :authority only.
            if p.authority.is_none() || p.scheme.is_some() || p.path.is_some() {
                return Err("CONNECT takes :authority and neither :scheme nor :path");
            }
            return Ok(p);
        }
        if p.protocol.is_some() && p.method() != b"CONNECT" {
            return Err(":protocol outside CONNECT");
        }
        let (Some(scheme), Some(path)) = (p.scheme(), p.path()) else {
            return Err("no :scheme or :path");
        };
        if path.is_empty() {
            return Err("an empty :path");
        }
        let http = scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https");
        if http && !(path.starts_with(b"/") || (path == b"*" && p.method() == b"OPTIONS")) {
            return Err(":path neither absolute nor * for OPTIONS");
        }
        Ok(p)
    }

    fn bad(&mut self, why: Malformed) {
        self.malformed.get_or_insert(why);
    }

    fn pseudo(&mut self, name: &[u8], value: &[u8]) {
        if self.trailers {
            return self.bad("a pseudo-header field in trailers");
        }
        if self.regular_seen {
            return self.bad("a pseudo-header field after a regular one");
        }
        let slot = match name {
            b":method" => {
                if std::mem::replace(&mut self.method_seen, true) {
                    return self.bad("a second :method");
                }
                if value.is_empty() || !value.iter().all(|b| is_tchar(*b)) {
                    return self.bad("a :method that is no token");
                }
                self.pseudo.method = Some(self.pseudo.put(value));
                return;
            }
            b":scheme" => self.pseudo.scheme,
            b":authority" => self.pseudo.authority,
            b":path" => self.pseudo.path,
            b":protocol" => self.pseudo.protocol,
            // `:status` and anything else.
            _ => return self.bad("a pseudo-header field a request does not have"),
        };
        if slot.is_some() {
            return self.bad("a pseudo-header field twice");
        }
        let r = Some(self.pseudo.put(value));
        match name {
            b":scheme" => self.pseudo.scheme = r,
            b":authority" => self.pseudo.authority = r,
            b":path" => self.pseudo.path = r,
            _ => self.pseudo.protocol = r,
        }
        if value.iter().any(|b| *b <= b' ' || *b == 0x7f) {
            self.bad("a pseudo-header value with a space or control byte");
        }
    }
}

impl Sink for Checked<'_> {
    fn field(&mut self, name: &[u8], value: &[u8], sensitive: bool) -> Result<(), HpackError> {
        if self.malformed.is_some() {
            // Decoding goes on (the table stays in step); nothing more is passed on.
            return Ok(());
        }
        if name.first() == Some(&b':') {
            self.pseudo(name, value);
            return Ok(());
        }
        self.regular_seen = true;
        if let Some(why) = regular_malformed(name, value) {
            self.bad(why);
            return Ok(());
        }
        self.inner.field(name, value, sensitive)
    }
}

/// Why a regular field (request or response, head or trailers) is malformed (RFC 9113
/// §8.2.1, §8.2.2), if it is.
pub(crate) fn regular_malformed(name: &[u8], value: &[u8]) -> Option<&'static str> {
    if name.is_empty() || !name.iter().all(|b| LOWER_TCHAR[usize::from(*b)]) {
        return Some("a field name that is no lower-case token");
    }
    // §8.2.1: no NUL, CR or LF; no leading or trailing space or tab.
    let ws = |b: &u8| matches!(b, b' ' | b'\t');
    if value.iter().any(|b| matches!(b, 0 | b'\r' | b'\n'))
        || value.first().is_some_and(ws)
        || value.last().is_some_and(ws)
    {
        return Some("a field value with CR, LF, NUL or surrounding whitespace");
    }
    // §8.2.2: connection-specific fields.
    if matches!(
        name,
        b"connection" | b"proxy-connection" | b"keep-alive" | b"transfer-encoding" | b"upgrade"
    ) {
        return Some("a connection-specific field");
    }
    if name == b"te" && value != b"trailers" {
        return Some("te other than trailers");
    }
    None
}

/// RFC 9110 §5.6.2's tchar.
fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// tchar by octet: a table, as the check runs on every octet of every name.
const TCHAR: [bool; 256] = tchars(false);
/// tchar but upper-case letters (HTTP/2's field names, §8.2.1).
const LOWER_TCHAR: [bool; 256] = tchars(true);

const fn tchars(lower_only: bool) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = (c.is_ascii_alphanumeric() && !(lower_only && c.is_ascii_uppercase()))
            || matches!(
                c,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        b += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(fields: &[(&str, &str)], trailers: bool) -> (Result<Pseudo, Malformed>, usize) {
        let mut passed: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut c = Checked::new(&mut passed, trailers);
        for (n, v) in fields {
            c.field(n.as_bytes(), v.as_bytes(), false).unwrap();
        }
        let r = c.finish();
        (r, passed.len())
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "example.test"),
        (":path", "/a?b"),
    ];

    #[test]
    fn the_token_tables_are_rfc_9110_s_tchar() {
        for b in 0..=255u8 {
            let tchar = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_tchar(b), tchar, "{b}");
            assert_eq!(
                LOWER_TCHAR[usize::from(b)],
                tchar && !b.is_ascii_uppercase(),
                "{b}"
            );
        }
    }

    #[test]
    fn a_request_passes_its_fields_on() {
        let mut f = GET.to_vec();
        f.push(("accept", "*/*"));
        f.push(("te", "trailers"));
        let (r, n) = check(&f, false);
        let p = r.unwrap();
        assert_eq!(p.method(), b"GET");
        assert_eq!(p.path(), Some(&b"/a?b"[..]));
        assert_eq!(p.authority(), Some(&b"example.test"[..]));
        assert_eq!(p.scheme(), Some(&b"https"[..]));
        assert_eq!(p.protocol(), None);
        assert_eq!(n, 2);
        let (r, _) = check(
            &[(":method", "CONNECT"), (":authority", "example.test:443")],
            false,
        );
        assert!(r.is_ok());
        let (r, _) = check(
            &[(":method", "OPTIONS"), (":scheme", "http"), (":path", "*")],
            false,
        );
        assert!(r.is_ok());
        let (r, _) = check(&[("grpc-status", "0")], true);
        assert!(r.is_ok());
    }

    /// h2spec 8.1.2/1 (upper case), 8.1.2.1 (pseudo-headers: unknown, response's, in
    /// trailers, after a regular field), 8.1.2.2 (connection-specific, te), 8.1.2.3 (missing,
    /// empty or twice), and CONNECT's rules.
    #[test]
    fn malformed_blocks_say_why() {
        let bad: Vec<(Vec<(&str, &str)>, bool)> = vec![
            ([&GET[..], &[("Accept", "x")]].concat(), false),
            ([&GET[..], &[(":foo", "x")]].concat(), false),
            ([&GET[..], &[(":status", "200")]].concat(), false),
            (
                vec![
                    (":path", "/"),
                    ("accept", "x"),
                    (":method", "GET"),
                    (":scheme", "http"),
                ],
                false,
            ),
            ([&GET[..], &[("connection", "keep-alive")]].concat(), false),
            ([&GET[..], &[("te", "gzip")]].concat(), false),
            ([&GET[..], &[("x", " padded")]].concat(), false),
            ([&GET[..], &[("x", "a\r\nb: c")]].concat(), false),
            (GET[1..].to_vec(), false),
            (
                vec![(":method", "GET"), (":scheme", "https"), (":path", "")],
                false,
            ),
            ([&GET[..], &[(":path", "/again")]].concat(), false),
            ([&GET[..], &[(":method", "POST")]].concat(), false),
            (
                vec![(":method", "GET"), (":scheme", "https"), (":path", "a")],
                false,
            ),
            (
                vec![
                    (":method", "CONNECT"),
                    (":authority", "a:1"),
                    (":path", "/"),
                ],
                false,
            ),
            (
                vec![(":method", "G T"), (":scheme", "https"), (":path", "/")],
                false,
            ),
            (vec![(":path", "/")], true),
        ];
        for (fields, trailers) in bad {
            let (r, _) = check(&fields, trailers);
            assert!(r.is_err(), "{fields:?} passed");
        }
    }

    /// After a malformation nothing more reaches the sink, and decoding is not stopped.
    #[test]
    fn nothing_passes_after_the_block_is_malformed() {
        let mut f = GET.to_vec();
        f.push(("accept", "a"));
        f.push(("Upper", "b"));
        f.push(("accept-language", "c"));
        let (r, n) = check(&f, false);
        assert!(r.is_err());
        assert_eq!(n, 1);
    }
}
