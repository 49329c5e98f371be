//! Between weir-h2's decoded fields and the pipeline's heads, with no `http` types in between.
//!
//! A request becomes a `weir_http::RequestHead` by way of the HTTP/1.1 text it stands for,
//! parsed in place by the same codec as HTTP/1.1 (so every check it makes, on the target, the
//! `Host`, field validity and the framing, applies to both protocols); weir-h2's
//! [`weir_h2::request::Checked`] has already held the block to RFC 9113 §8.2 and §8.3.
//! A `Reply` becomes an HPACK block by way of the HTTP/1.1 head its one encoder writes, split
//! into lines (already validated), less the connection-specific fields (RFC 9113 §8.2.2).
//!
//! The detour costs a parse per request; it buys one parser and one encoder for both
//! protocols (a second one is where header-handling bugs hide).

use bytes::{BufMut, BytesMut};
use weir_h2::hpack::{HpackError, Sink};
use weir_h2::request::Pseudo;
use weir_http::{parse_request, Base, Persistence, Reply, RequestHead, Version};

use crate::error::Error;

fn bad(why: &'static str) -> Error {
    weir_http::ParseError::BadRequest(why).into()
}

/// A request's regular fields as weir-h2 decodes them (checked already), written straight
/// as HTTP/1.1 field lines: one buffer per request, not a pair of `Vec`s per field.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Lines {
    /// Every field but the cookies, `name: value\r\n` each.
    text: Vec<u8>,
    /// The cookie fields' values joined with `; ` (RFC 9113 §8.2.3: HTTP/2 may split them,
    /// HTTP/1.1 wants one field).
    cookies: Vec<u8>,
    /// The first `host` value (a range of `text`); whether a `content-length` came.
    host: Option<(usize, usize)>,
    length: bool,
}

impl Sink for Lines {
    fn field(&mut self, name: &[u8], value: &[u8], _sensitive: bool) -> Result<(), HpackError> {
        if name == b"cookie" {
            if !self.cookies.is_empty() {
                self.cookies.extend_from_slice(b"; ");
            }
            self.cookies.extend_from_slice(value);
            return Ok(());
        }
        if self.text.capacity() == 0 {
            self.text.reserve(256);
        }
        self.text.extend_from_slice(name);
        self.text.extend_from_slice(b": ");
        let at = (self.text.len(), self.text.len() + value.len());
        self.text.extend_from_slice(value);
        self.text.extend_from_slice(b"\r\n");
        match name {
            b"host" => {
                self.host.get_or_insert(at);
            }
            b"content-length" => self.length = true,
            _ => {}
        }
        Ok(())
    }
}

impl Lines {
    /// The fields as weir's headers (a trailer section).
    pub(crate) fn into_headers(self) -> Vec<weir_http::Header> {
        let text = bytes::Bytes::from(self.text);
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(end) = memchr::memmem::find(&text[at..], b"\r\n").map(|i| at + i) {
            if let Some(colon) = memchr::memchr(b':', &text[at..end]).map(|i| at + i) {
                out.push(weir_http::Header {
                    name: text.slice(at..colon),
                    value: text.slice(colon + 2..end),
                });
            }
            at = end + 2;
        }
        if !self.cookies.is_empty() {
            out.push(weir_http::Header {
                name: bytes::Bytes::from_static(b"cookie"),
                value: bytes::Bytes::from(self.cookies),
            });
        }
        out
    }
}

/// The request head of an HTTP/2 request. `has_body`: the HEADERS frame did not end the
/// stream; a body without `content-length` is read as chunked (its length is known at its end).
pub(crate) fn request_head(
    p: &Pseudo,
    fields: &Lines,
    has_body: bool,
    limits: &weir_http::Limits,
) -> Result<RequestHead, Error> {
    let method = p.method();
    let connect = method == b"CONNECT";
    if p.protocol().is_some() {
        // RFC 8441's extended CONNECT: weir does not advertise SETTINGS_ENABLE_CONNECT_PROTOCOL.
        return Err(bad("extended CONNECT is not supported"));
    }
    // RFC 9113 §8.3.1: `:scheme` is http or https here (weir serves no other).
    if !connect
        && !p
            .scheme()
            .is_some_and(|s| s.eq_ignore_ascii_case(b"http") || s.eq_ignore_ascii_case(b"https"))
    {
        return Err(bad("unsupported :scheme"));
    }
    let target = if connect {
        p.authority().unwrap_or_default()
    } else {
        p.path().unwrap_or(b"/")
    };
    let authority = p.authority().filter(|a| !a.is_empty());
    let mut b = BytesMut::with_capacity(
        method.len() + target.len() + fields.text.len() + fields.cookies.len() + 96,
    );
    b.put_slice(method);
    b.put_u8(b' ');
    b.put_slice(target);
    b.put_slice(b" HTTP/1.1\r\n");
    match (authority, fields.host) {
        (Some(a), Some((h0, h1))) => {
            // RFC 9113 §8.3.1: a server SHOULD treat a request whose Host names another
            // entity than `:authority` as malformed (the h1 counterpart is the `shape`
            // filter's `strict_host`). The same: the field stands for both.
            if !fields.text[h0..h1].eq_ignore_ascii_case(a) {
                return Err(bad("Host differs from :authority"));
            }
        }
        (Some(a), None) => {
            b.put_slice(b"host: ");
            b.put_slice(a);
            b.put_slice(b"\r\n");
        }
        (None, _) => {}
    }
    b.put_slice(&fields.text);
    if !fields.cookies.is_empty() {
        b.put_slice(b"cookie: ");
        b.put_slice(&fields.cookies);
        b.put_slice(b"\r\n");
    }
    if has_body && !fields.length {
        b.put_slice(b"transfer-encoding: chunked\r\n");
    }
    b.put_slice(b"\r\n");
    match parse_request(&mut b, limits)? {
        Some(head) => Ok(head),
        None => Err(bad("incomplete request head")),
    }
}

/// Appends the HPACK block of `reply` (status and fields, as the HTTP/1.1 encoder writes
/// them, without the connection-specific ones), then `extra` fields.
pub(crate) fn response_block(reply: &Reply<'_>, extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    thread_local! {
        static TEXT: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::with_capacity(1024));
    }
    TEXT.with_borrow_mut(|text| {
        text.clear();
        match reply.base {
            // A stored head (a cache hit, a KV value): its fields' block is made once per
            // head and worker (`stored.rs`); the rest of the reply is encoded as usual.
            Base::Encoded(head) if reply.drops_nothing() && head.len() >= STORED_MIN => {
                weir_h2::response::put_status(reply.status, out);
                super::stored::put_fields(head, out);
                let mut rest = reply.clone();
                rest.base = Base::None;
                rest.encode_h1(text, Version::Http11, Persistence::KeepAlive);
                super::lines::put_lines(super::lines::after_status_line(text), out);
            }
            _ => {
                reply.encode_h1(text, Version::Http11, Persistence::KeepAlive);
                weir_h2::response::put_status(reply.status, out);
                super::lines::put_lines(super::lines::after_status_line(text), out);
            }
        }
    });
    for (name, value) in extra {
        weir_h2::hpack::encoder::put_field(name, value, out);
    }
}

/// Stored heads at least this long go through the per-worker memo (a short one costs less
/// to encode than to look up).
const STORED_MIN: usize = 64;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use weir_h2::hpack::Decoder;
    use weir_http::{BodyKind, Framing};

    /// A request's pseudo-header fields and regular fields, as weir-h2 decodes them.
    fn decoded(
        method: &str,
        path: &str,
        scheme: &str,
        fields: &[(&str, &str)],
    ) -> Result<(Pseudo, Lines), Error> {
        let mut block = Vec::new();
        let pseudo = [
            (":method", method),
            (":scheme", scheme),
            (":authority", "example.com"),
            (":path", path),
        ];
        for (n, v) in pseudo.iter().chain(fields) {
            weir_h2::hpack::encoder::put_field(n.as_bytes(), v.as_bytes(), &mut block);
        }
        let mut lines = Lines::default();
        let mut c = weir_h2::request::Checked::new(&mut lines, false);
        Decoder::new(4096)
            .decode(&block, usize::MAX, &mut c)
            .unwrap();
        let p = c.finish().map_err(bad)?;
        Ok((p, lines))
    }

    fn head(
        method: &str,
        path: &str,
        scheme: &str,
        fields: &[(&str, &str)],
        has_body: bool,
    ) -> Result<RequestHead, Error> {
        let (p, lines) = decoded(method, path, scheme, fields)?;
        request_head(&p, &lines, has_body, &weir_http::Limits::default())
    }

    fn f(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn requests_read_as_their_http1_equivalent() {
        let fields = [("cookie", "a=1"), ("x-one", "1"), ("cookie", "b=2")];
        let h = head("POST", "/a?b=1", "https", &fields, true).unwrap();
        assert_eq!(&h.target[..], b"/a?b=1");
        assert_eq!(h.header("host").unwrap(), b"example.com");
        assert_eq!(h.header("cookie").unwrap(), b"a=1; b=2");
        assert_eq!(h.header("x-one").unwrap(), b"1");
        assert_eq!(h.body, BodyKind::Chunked);

        let h = head("POST", "/", "https", &[("content-length", "3")], true).unwrap();
        assert_eq!(h.body, BodyKind::Length(3));
        // A Host equal to :authority stands for both (one Host field).
        let h = head("GET", "/", "https", &[("host", "example.com")], false).unwrap();
        assert_eq!(h.header("host").unwrap(), b"example.com");
        assert!(head("GET", "/", "ftp", &[], false).is_err());
        assert!(head("GET", "/", "https", &[("host", "other.example")], false).is_err());
        // A target with a space is refused (by weir-h2's checks, or the HTTP/1.1 parser's).
        assert!(head("GET", "/a b", "https", &[], false).is_err());
        // A field the HTTP/1.1 parser refuses is refused here too (two lengths that differ).
        let two = [("content-length", "3"), ("content-length", "4")];
        assert!(head("POST", "/", "https", &two, true).is_err());
        // Trailers read back as headers, cookies joined.
        let trailers = [("grpc-status", "0"), ("cookie", "a"), ("cookie", "b")];
        let (_, lines) = decoded("GET", "/", "https", &trailers).unwrap();
        let t = lines.into_headers();
        assert_eq!(
            (&t[0].name[..], &t[0].value[..]),
            (&b"grpc-status"[..], &b"0"[..])
        );
        assert_eq!(&t[1].value[..], b"a; b");
    }

    #[test]
    fn responses_lose_connection_fields_and_keep_the_rest() {
        let fields = [
            (
                bytes::Bytes::from_static(b"X-A"),
                bytes::Bytes::from_static(b"1"),
            ),
            (
                bytes::Bytes::from_static(b"connection"),
                bytes::Bytes::from_static(b"close"),
            ),
        ];
        let mut reply = Reply::new(201, Framing::Unknown);
        reply.add_fields(&fields);
        let mut block = Vec::new();
        response_block(&reply, &[(b"alt-svc", b"h3=\":443\"")], &mut block);
        let mut got: weir_h2::conn::Fields = Vec::new();
        Decoder::new(4096)
            .decode(&block, usize::MAX, &mut got)
            .unwrap();
        let names: Vec<&[u8]> = got.iter().map(|(n, _)| &n[..]).collect();
        assert_eq!(got[0], f(":status", "201"));
        assert!(got.contains(&f("x-a", "1")), "{got:?}");
        assert!(got.contains(&f("alt-svc", "h3=\":443\"")), "{got:?}");
        assert!(names.contains(&&b"date"[..]));
        assert!(!names.contains(&&b"connection"[..]));
        assert!(!names.contains(&&b"transfer-encoding"[..]));
    }
}
