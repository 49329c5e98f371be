//! Request heads: parse, validate, derive framing and connection semantics.
//!
//! `parse_request` follows the codec convention: `Ok(Some(head))` consumes the head's bytes from
//! the buffer, `Ok(None)` means "need more bytes" (the buffer is left untouched), `Err` means the
//! connection must be answered with `err.status()` and closed. Names and values in the returned
//! head are slices of one frozen `Bytes` holding the head: nothing is copied.
//!
//! Table tests (malformed heads, statuses, split reads) are in `request/tests.rs`.

use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};

use crate::authority::{parse_authority, split_absolute, Authority};
use crate::error::ParseError;
use crate::fields::{Fields, Marks, Spans};
use crate::framing::{BodyKind, FramingFields};

/// Most header fields one request may carry; more is answered with 431.
pub const MAX_HEADERS: usize = 128;

/// Size limits applied while parsing a request head.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest header section (request line + fields + CRLFs), in bytes.
    pub max_head_bytes: usize,
    /// Longest request target, in bytes.
    pub max_uri_bytes: usize,
    /// Bring the path to its normal form (`path.rs`) or refuse it. Off only where weir reads
    /// back a request it wrote itself (the HTTP/2 upstream bridge).
    pub normalize_path: bool,
    /// Pass `%2F` and `%5C` through as they are instead of refusing them (off by default).
    pub keep_encoded_slashes: bool,
    /// Pass raw `;` path parameters through instead of refusing them (off by default).
    pub keep_semicolons: bool,
    /// Pass raw UTF-8 in a path through instead of refusing it (off by default); look-alikes of
    /// `.`, `/` and `\` are refused either way (`path.rs`).
    pub keep_utf8: bool,
    /// Fields whose names hold `_` (nginx's `underscores_in_headers`).
    pub underscores: Underscores,
}

/// What becomes of a request field whose name holds `_`: CGI-style applications read
/// `X_User` and `X-User` as one variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Underscores {
    /// Kept (fields weir sets upstream still drop their aliases: `filters/aliases.rs`).
    #[default]
    Allow,
    /// Left out of the request, as if not sent (nginx's default, `underscores_in_headers off`).
    Drop,
    /// The request is answered 400.
    Reject,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 32 * 1024,
            max_uri_bytes: 8 * 1024,
            normalize_path: true,
            keep_encoded_slashes: false,
            keep_semicolons: false,
            keep_utf8: false,
            underscores: Underscores::Allow,
        }
    }
}

/// The request method; the common ones are variants so that matching them is an integer compare.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
    /// Any other token (already validated by the parser).
    Other(Bytes),
}

impl Method {
    /// Parses a method token (case-sensitive, as RFC 9110 says).
    pub fn from_bytes(b: &[u8]) -> Method {
        match b {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"CONNECT" => Method::Connect,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            other => Method::Other(Bytes::copy_from_slice(other)),
        }
    }

    /// The method token.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            Method::Other(b) => std::str::from_utf8(b).unwrap_or("?"),
        }
    }
}

/// The protocol version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    pub fn as_str(&self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// One header field; both parts are slices of the head's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: Bytes,
    pub value: Bytes,
}

/// `fields` as an `http::HeaderMap`, for the libraries that take one (`h2`, `h3`); a field
/// whose name or value `http` refuses is left out (weir's parser let neither through).
pub fn header_map(fields: &[Header]) -> http::HeaderMap {
    let mut map = http::HeaderMap::with_capacity(fields.len());
    for h in fields {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(&h.name),
            http::HeaderValue::from_bytes(&h.value),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// A parsed and validated request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Method,
    /// The request target as sent (origin-form, absolute-form or `*`), or, when its path was
    /// not in normal form, the origin-form of the normalised path and the query (`path.rs`).
    pub target: Bytes,
    pub version: Version,
    /// Fields in the order received, as spans of the head.
    fields: Fields,
    /// The same as `Header`s, made the first time something asks ([`RequestHead::headers`]):
    /// the proxy's path reads `fields` and never makes them.
    headers: OnceLock<Vec<Header>>,
    /// How the request body is framed.
    pub body: BodyKind,
    /// Whether the client allows the connection to be reused after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// Index into `headers` of the `Host` field, if any (below [`MAX_HEADERS`]; a `u16` keeps
    /// the head small: it lives in every connection's serving future).
    host_field: Option<u16>,
    /// Where the validated, normalised authority is: the Host field's value as received (already
    /// normal, the common case), or a normalised copy / the absolute-form target's authority.
    authority: AuthoritySource,
    /// Length of the host part of the authority (the rest is `:port`).
    authority_host_len: usize,
    /// Where the path starts in `target` (after `scheme://authority` in absolute-form).
    path_at: usize,
    /// Where the path ends in `target`: at the `?` of a query, else the end.
    path_end: usize,
    /// Bytes the head occupied on the wire.
    pub head_len: usize,
}

impl RequestHead {
    /// The fields in the order received, as `Header`s (made on first use, once).
    pub fn headers(&self) -> &[Header] {
        self.headers.get_or_init(|| self.fields.to_headers())
    }

    /// The fields in the order received, as spans of the head (nothing made).
    #[inline]
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields.get(name.as_bytes())
    }

    /// [`RequestHead::header`] as a slice of the head (no copy).
    pub fn header_bytes(&self, name: &str) -> Option<Bytes> {
        self.fields.get_bytes(name.as_bytes())
    }

    /// The value of cookie `name` from the `Cookie` fields, if sent.
    pub fn cookie(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .find_map(|(_, value)| {
                value.split(|b| *b == b';').find_map(|pair| {
                    pair.trim_ascii()
                        .strip_prefix(name.as_bytes())
                        .and_then(|r| r.strip_prefix(b"="))
                })
            })
    }

    /// The host the request is for (the absolute-form target's authority wins over `Host`),
    /// validated and normalised (lowercase, no trailing dot), without the port.
    pub fn host(&self) -> Option<&[u8]> {
        self.authority().map(|a| &a[..self.authority_host_len])
    }

    /// The normalised `host[:port]` the request is for (the port only when not the default).
    /// `None` only for an HTTP/1.0 request without Host.
    pub fn authority(&self) -> Option<&[u8]> {
        match &self.authority {
            AuthoritySource::None => None,
            AuthoritySource::HostField => self
                .host_field
                .and_then(|i| self.fields.field(usize::from(i)))
                .map(|(_, v)| v),
            AuthoritySource::Owned(b) => Some(b),
        }
    }

    /// [`RequestHead::authority`] as a `Bytes` (shares the head's buffer when it can).
    pub fn authority_bytes(&self) -> Option<Bytes> {
        match &self.authority {
            AuthoritySource::None => None,
            AuthoritySource::HostField => self
                .host_field
                .and_then(|i| self.fields.value_bytes(usize::from(i))),
            AuthoritySource::Owned(b) => Some(b.clone()),
        }
    }

    /// The path part of the target (before `?`). For absolute-form, the path after the authority,
    /// `/` when that is empty. Found once by the parser: a slice, no scan.
    pub fn path(&self) -> &[u8] {
        if self.path_end == self.path_at && self.path_at > 0 {
            return b"/";
        }
        &self.target[self.path_at..self.path_end]
    }

    /// The query string (after `?`), if any.
    pub fn query(&self) -> Option<&[u8]> {
        (self.path_end < self.target.len()).then(|| &self.target[self.path_end + 1..])
    }

    /// Whether the request says this is the last exchange or the version forbids reuse.
    pub fn wants_close(&self) -> bool {
        !self.keep_alive
    }
}

/// Where a request's authority lives.
#[derive(Debug, Clone)]
enum AuthoritySource {
    /// HTTP/1.0 without Host.
    None,
    /// The Host field's value, already normal.
    HostField,
    /// Normalised, or taken from an absolute-form target.
    Owned(Bytes),
}

/// Parses one request head from the front of `buf`.
pub fn parse_request(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<RequestHead>, ParseError> {
    // Uninitialised slots: zeroing 128 of them (4 KiB) per request cost ~10% of a keep-alive
    // hello's instructions (callgrind).
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let n = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            check_partial(buf, limits)?;
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::HeadTooLarge),
        Err(httparse::Error::Version) => {
            return match version_error(buf) {
                Some(e) => Err(e),
                None => check_partial(buf, limits).map(|()| None),
            }
        }
        Err(e) => return Err(ParseError::BadRequest(httparse_reason(e))),
    };
    if n > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge);
    }
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - base;
    let target = req.path.unwrap_or("");
    if target.len() > limits.max_uri_bytes {
        return Err(ParseError::UriTooLong);
    }
    let target_range = (offset(target.as_bytes()), target.len());
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes());
    let form = target_form(target.as_bytes(), &method)?;
    let version = if req.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };

    // One pass over the fields: record slices, derive framing and connection semantics.
    // Offsets of each name and value, on the stack: the slices are made after the split.
    let mut ranges = Spans::for_head(n);
    let mut framing = FramingFields::default();
    let mut connection = crate::fields::Connection::default();
    let mut expect_continue = false;
    let mut host = None;
    let underscores = limits.underscores;
    // Index of the next field kept (fields with `_` may be dropped).
    let mut i = 0;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if underscores != Underscores::Allow && memchr::memchr(b'_', name).is_some() {
            if underscores == Underscores::Reject {
                return Err(ParseError::BadRequest("underscore in a field name"));
            }
            continue;
        }
        ranges.push((offset(name), name.len()), (offset(h.value), h.value.len()));
        i += 1;
        let i = i - 1;
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                if host.is_some() {
                    return Err(ParseError::BadRequest("more than one Host field"));
                }
                host = Some(i);
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                if h.value.eq_ignore_ascii_case(b"100-continue") {
                    expect_continue = true;
                } else {
                    return Err(ParseError::ExpectationFailed);
                }
            }
            10 if name.eq_ignore_ascii_case(b"connection") => connection.note(h.value),
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                framing.content_length(h.value)?
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                framing.transfer_encoding(h.value)?
            }
            _ => {}
        }
    }
    if version == Version::Http11 && host.is_none() {
        return Err(ParseError::BadRequest("HTTP/1.1 request without Host"));
    }
    let body = framing.request_body(version == Version::Http10)?;
    let keep_alive = match version {
        Version::Http11 => !connection.close,
        Version::Http10 => connection.keep_alive && !connection.close,
    };

    let head = buf.split_to(n).freeze();
    // A request's fields are rebuilt upstream by name (`proxy::exchange::build_request`):
    // marking them cost every request ~30 instructions and saved the proxy as many.
    let fields = Fields::new(head, ranges, connection, Marks::default(), false);
    // The head's bytes, owned by the fields (one reference to them, not two).
    let head = fields.bytes();
    // RFC 9112 §3.2: an invalid Host is a 400 even when an absolute-form target overrides it.
    let from_host = match host.and_then(|i| fields.field(i)) {
        Some((_, value)) => Some(parse_authority(value, 80).map_err(ParseError::BadRequest)?),
        None => None,
    };
    let (authority, authority_host_len, path_at) = match form {
        TargetForm::Absolute {
            default_port,
            authority,
            path_at,
        } => {
            let range = target_range.0 + authority.0..target_range.0 + authority.1;
            let a = parse_authority(&head[range.clone()], default_port)
                .map_err(ParseError::BadRequest)?;
            let text = match a.normalised {
                Some(n) => Bytes::from(n),
                None => head.slice(range),
            };
            (AuthoritySource::Owned(text), a.host_len, path_at)
        }
        _ => match from_host {
            None => (AuthoritySource::None, 0, 0),
            Some(Authority {
                host_len,
                normalised: None,
            }) => (AuthoritySource::HostField, host_len, 0),
            Some(Authority {
                host_len,
                normalised: Some(n),
            }) => (AuthoritySource::Owned(Bytes::from(n)), host_len, 0),
        },
    };
    // One scan for the end of the path. A fragment is not part of a request target (RFC 9112
    // §3.2): a `#` anywhere is a 400, so no later reader has to look for one.
    let target_bytes = &head[target_range.0..target_range.0 + target_range.1];
    let path_end = match memchr::memchr2(b'?', b'#', &target_bytes[path_at..]) {
        Some(i) if target_bytes[path_at + i] == b'#' => {
            return Err(ParseError::BadRequest("fragment in request target"))
        }
        Some(i) => {
            if memchr::memchr(b'#', &target_bytes[path_at + i..]).is_some() {
                return Err(ParseError::BadRequest("fragment in request target"));
            }
            path_at + i
        }
        None => target_bytes.len(),
    };
    let mut target = head.slice(target_range.0..target_range.0 + target_range.1);
    let (mut path_at, mut path_end) = (path_at, path_end);
    if limits.normalize_path && !matches!(form, TargetForm::Asterisk) {
        if let Some(path) = crate::path::normalize_with(
            &target_bytes[path_at..path_end],
            crate::path::Keep {
                encoded_slashes: limits.keep_encoded_slashes,
                semicolons: limits.keep_semicolons,
                utf8: limits.keep_utf8,
            },
        )
        .map_err(ParseError::BadRequest)?
        {
            let mut t = path;
            let len = t.len();
            t.extend_from_slice(&target_bytes[path_end..]);
            target = Bytes::from(t);
            (path_at, path_end) = (0, len);
        }
    }
    Ok(Some(RequestHead {
        method,
        target,
        version,
        fields,
        headers: OnceLock::new(),
        body,
        keep_alive,
        expect_continue: expect_continue && version == Version::Http11,
        // An index below MAX_HEADERS (httparse's slots).
        host_field: host.map(|i: usize| i as u16),
        authority,
        authority_host_len,
        path_at,
        path_end,
        head_len: n,
    }))
}

/// Decides whether an incomplete head has already broken a limit.
fn check_partial(buf: &[u8], limits: &Limits) -> Result<(), ParseError> {
    match memchr::memchr(b'\n', buf) {
        // Still inside the request line: it is the target that is too long.
        None if buf.len() > limits.max_uri_bytes + 32 => Err(ParseError::UriTooLong),
        _ if buf.len() > limits.max_head_bytes => Err(ParseError::HeadTooLarge),
        _ => Ok(()),
    }
}

/// httparse reports any unknown version token the same way, as soon as it sees its first wrong
/// byte; `HTTP/d.d` is a version we do not speak (505), anything else is garbage (400). `None`:
/// the request line is not complete and its version could still turn out either way, so the
/// verdict waits for the line end. (Without the wait, `HTTP/5` cut by a read boundary answered
/// 505 where the whole line `HTTP/5.1<junk>` answers 400: found by `fuzz/` request_parser.)
fn version_error(buf: &[u8]) -> Option<ParseError> {
    let Some(line_end) = memchr::memchr(b'\n', buf) else {
        let version = version_token(buf);
        let could_be = |pattern: &[u8]| {
            version.len() <= pattern.len()
                && version.iter().zip(pattern).all(|(b, p)| match p {
                    b'D' => b.is_ascii_digit(),
                    p => b == p,
                })
        };
        if could_be(b"HTTP/D.D\r") || could_be(b"HTTP/D\r") {
            return None;
        }
        return Some(ParseError::BadRequest("invalid HTTP version"));
    };
    let line = &buf[..line_end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Some(match version_token(line) {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            ParseError::VersionNotSupported
        }
        [b'H', b'T', b'T', b'P', b'/', major] if major.is_ascii_digit() => {
            ParseError::VersionNotSupported
        }
        _ => ParseError::BadRequest("invalid HTTP version"),
    })
}

/// What follows the second space of a request line: `method SP target SP version`. (The last
/// space-separated token would take `GET / X HTTP/1.1` for a 505.)
fn version_token(line: &[u8]) -> &[u8] {
    line.splitn(3, |b| *b == b' ').nth(2).unwrap_or(b"")
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name (whitespace before colon or obs-fold?)",
        httparse::Error::HeaderValue => "invalid byte in header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token in request line",
        httparse::Error::TooManyHeaders => "too many header fields",
        httparse::Error::Version => "invalid HTTP version",
    }
}

/// The four request-target forms of RFC 9112 §3.2.
enum TargetForm {
    Origin,
    /// `scheme://authority...`: the authority's range within the target and where the path starts.
    Absolute {
        default_port: u16,
        authority: (usize, usize),
        path_at: usize,
    },
    /// `*`, for OPTIONS only.
    Asterisk,
}

/// Classifies the target; anything that is none of the four forms (or a form the method does not
/// allow) is a 400.
fn target_form(target: &[u8], method: &Method) -> Result<TargetForm, ParseError> {
    match target.first() {
        Some(b'/') => Ok(TargetForm::Origin),
        Some(b'*') if target.len() == 1 && *method == Method::Options => Ok(TargetForm::Asterisk),
        // weir is a reverse proxy, never a forward one: a CONNECT relayed as `CONNECT /host:port`
        // with its body let a backend that reads CONNECT as bodiless see a second request.
        _ if *method == Method::Connect => Err(ParseError::NotImplemented(
            "CONNECT is not supported (weir is not a forward proxy)",
        )),
        Some(c) if c.is_ascii_alphabetic() => {
            let (default_port, authority, path_at) =
                split_absolute(target).map_err(ParseError::BadRequest)?;
            let start = authority.as_ptr() as usize - target.as_ptr() as usize;
            Ok(TargetForm::Absolute {
                default_port,
                authority: (start, start + authority.len()),
                path_at,
            })
        }
        _ => Err(ParseError::BadRequest("invalid request target")),
    }
}

#[cfg(test)]
mod tests;
