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
use weir_h2::request::Pseudo;
use weir_http::{parse_request, Persistence, Reply, RequestHead, Version};

use crate::error::Error;

fn bad(why: &'static str) -> Error {
    weir_http::ParseError::BadRequest(why).into()
}

/// The request head of an HTTP/2 request. `has_body`: the HEADERS frame did not end the
/// stream; a body without `content-length` is read as chunked (its length is known at its end).
pub(crate) fn request_head(
    p: &Pseudo,
    fields: &[(Vec<u8>, Vec<u8>)],
    has_body: bool,
    limits: &weir_http::Limits,
) -> Result<RequestHead, Error> {
    let connect = p.method == b"CONNECT";
    if p.protocol.is_some() {
        // RFC 8441's extended CONNECT: weir does not advertise SETTINGS_ENABLE_CONNECT_PROTOCOL.
        return Err(bad("extended CONNECT is not supported"));
    }
    // RFC 9113 §8.3.1: `:scheme` is http or https here (weir serves no other).
    if !connect
        && !p
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case(b"http") || s.eq_ignore_ascii_case(b"https"))
    {
        return Err(bad("unsupported :scheme"));
    }
    let mut b = BytesMut::with_capacity(
        256 + fields
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum::<usize>(),
    );
    b.put_slice(&p.method);
    b.put_u8(b' ');
    if connect {
        b.put_slice(p.authority.as_deref().unwrap_or_default());
    } else {
        b.put_slice(p.path.as_deref().unwrap_or(b"/"));
    }
    b.put_slice(b" HTTP/1.1\r\n");
    let authority = p.authority.as_deref().filter(|a| !a.is_empty());
    if let Some(a) = authority {
        // RFC 9113 §8.3.1: a server SHOULD treat a request whose Host names another entity
        // than `:authority` as malformed (the h1 counterpart is the `shape` filter's
        // `strict_host`).
        if fields
            .iter()
            .any(|(n, v)| n == b"host" && !v.eq_ignore_ascii_case(a))
        {
            return Err(bad("Host differs from :authority"));
        }
        b.put_slice(b"host: ");
        b.put_slice(a);
        b.put_slice(b"\r\n");
    }
    let mut cookies = 0;
    let mut has_length = false;
    for (name, value) in fields {
        if name == b"cookie" {
            cookies += 1;
            continue;
        }
        if name == b"host" && authority.is_some() {
            continue;
        }
        has_length |= name == b"content-length";
        b.put_slice(name);
        b.put_slice(b": ");
        b.put_slice(value);
        b.put_slice(b"\r\n");
    }
    if cookies > 0 {
        // HTTP/2 may split cookies into several fields; HTTP/1.1 wants one (§8.2.3).
        b.put_slice(b"cookie: ");
        let mut first = true;
        for (_, v) in fields.iter().filter(|(n, _)| n == b"cookie") {
            if !first {
                b.put_slice(b"; ");
            }
            first = false;
            b.put_slice(v);
        }
        b.put_slice(b"\r\n");
    }
    if has_body && !has_length {
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
    let mut text = BytesMut::with_capacity(512);
    reply.encode_h1(&mut text, Version::Http11, Persistence::KeepAlive);
    weir_h2::response::put_status(reply.status, out);
    let mut at = match memchr::memchr(b'\n', &text) {
        Some(i) => i + 1,
        None => text.len(),
    };
    while at < text.len() {
        let end = memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i);
        let line = &text[at..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at = end + 1;
        if line.is_empty() {
            break;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = &line[..colon];
        if weir_http::hop::not_in_h2(name) {
            continue;
        }
        weir_h2::hpack::encoder::put_field(name, line[colon + 1..].trim_ascii(), out);
    }
    for (name, value) in extra {
        weir_h2::hpack::encoder::put_field(name, value, out);
    }
}

/// Appends the HPACK block of a trailer section; names lower-cased, the fields a trailer
/// section must not carry left out.
pub(crate) fn trailer_block(fields: &[weir_http::Header], out: &mut Vec<u8>) {
    for f in fields {
        if weir_http::hop::not_in_h2(&f.name) {
            continue;
        }
        weir_h2::hpack::encoder::put_field(&f.name, &f.value, out);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use weir_h2::hpack::Decoder;
    use weir_http::{BodyKind, Framing};

    fn pseudo(method: &str, path: &str) -> Pseudo {
        Pseudo {
            method: method.as_bytes().to_vec(),
            scheme: Some(b"https".to_vec()),
            authority: Some(b"example.com".to_vec()),
            path: Some(path.as_bytes().to_vec()),
            protocol: None,
        }
    }

    fn f(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (n.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn requests_read_as_their_http1_equivalent() {
        let limits = weir_http::Limits::default();
        let fields = vec![f("cookie", "a=1"), f("x-one", "1"), f("cookie", "b=2")];
        let head = request_head(&pseudo("POST", "/a?b=1"), &fields, true, &limits).unwrap();
        assert_eq!(&head.target[..], b"/a?b=1");
        assert_eq!(head.header("host").unwrap(), b"example.com");
        assert_eq!(head.header("cookie").unwrap(), b"a=1; b=2");
        assert_eq!(head.header("x-one").unwrap(), b"1");
        assert_eq!(head.body, BodyKind::Chunked);

        let fields = vec![f("content-length", "3")];
        let p = pseudo("POST", "/");
        assert_eq!(
            request_head(&p, &fields, true, &limits).unwrap().body,
            BodyKind::Length(3)
        );
        let mut p = pseudo("GET", "/");
        p.scheme = Some(b"ftp".to_vec());
        assert!(request_head(&p, &[], false, &limits).is_err());
        let fields = vec![f("host", "other.example")];
        assert!(request_head(&pseudo("GET", "/"), &fields, false, &limits).is_err());
        // A target the HTTP/1.1 parser refuses is refused here too.
        assert!(request_head(&pseudo("GET", "/a b"), &[], false, &limits).is_err());
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
