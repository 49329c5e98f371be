//! Between the `h3` crate's message types (`http::Request`, `http::Response`) and the
//! pipeline's: an HTTP/3 request becomes a `weir_http::RequestHead` by way of the HTTP/1.1 text it stands
//! for, parsed by the same codec (so every check the codec makes applies to both protocols);
//! a `Reply` becomes response fields by way of the HTTP/1.1 head its one encoder writes, minus
//! the connection-specific fields HTTP/2 forbids (RFC 9113 §8.2.2).
//!
//! The detour costs a parse per request and per response; it buys one encoder and one parser
//! for both protocols (a second encoder is where header-handling bugs hide).

use bytes::{BufMut, BytesMut};
use http::header::{HeaderName, HeaderValue};
use weir_http::{parse_request, Persistence, Reply, RequestHead, Version};

use crate::error::Error;

use weir_http::hop::not_in_h2 as connection_specific;

/// The request head of an HTTP/2 request. `has_body`: the HEADERS frame did not end the
/// stream; a body without `content-length` is read as chunked (its length is known at its end).
pub(crate) fn request_head(
    parts: &http::request::Parts,
    has_body: bool,
    limits: &weir_http::Limits,
) -> Result<RequestHead, Error> {
    // RFC 9113 §8.3.1: `:scheme` is http or https here (weir serves no other); §8.2.1: a value
    // with leading or trailing whitespace is malformed, refused rather than trimmed.
    // (Without `:authority` the `h2` crate keeps no scheme in the URI; it checked it was there.)
    if parts.method != http::Method::CONNECT
        && !matches!(parts.uri.scheme_str(), None | Some("http" | "https"))
    {
        return Err(weir_http::ParseError::BadRequest("unsupported :scheme").into());
    }
    let padded = |v: &[u8]| {
        matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t'))
    };
    if parts.headers.values().any(|v| padded(v.as_bytes())) {
        return Err(
            weir_http::ParseError::BadRequest("field value with surrounding whitespace").into(),
        );
    }
    let mut b = BytesMut::with_capacity(512);
    b.put_slice(parts.method.as_str().as_bytes());
    b.put_u8(b' ');
    if parts.method == http::Method::CONNECT {
        let authority = parts.uri.authority().map_or("", |a| a.as_str());
        b.put_slice(authority.as_bytes());
    } else {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        b.put_slice(path.as_bytes());
    }
    b.put_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    // RFC 9113 §8.3.1: a server SHOULD treat a request whose Host names another entity than
    // `:authority` as malformed (the h1 counterpart is the `shape` filter's `strict_host`).
    if let (Some(a), Some(h)) = (authority, parts.headers.get(http::header::HOST)) {
        if !h.as_bytes().eq_ignore_ascii_case(a.as_str().as_bytes()) {
            return Err(weir_http::ParseError::BadRequest("Host differs from :authority").into());
        }
    }
    if let Some(a) = authority {
        b.put_slice(b"host: ");
        b.put_slice(a.as_str().as_bytes());
        b.put_slice(b"\r\n");
    }
    let mut cookies: Vec<&[u8]> = Vec::new();
    let mut has_length = false;
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE {
            // HTTP/2 may split cookies into several fields; HTTP/1.1 wants one (§8.2.3).
            cookies.push(value.as_bytes());
            continue;
        }
        if (name == http::header::HOST && authority.is_some())
            || connection_specific(name.as_str().as_bytes())
        {
            continue;
        }
        has_length |= name == http::header::CONTENT_LENGTH;
        b.put_slice(name.as_str().as_bytes());
        b.put_slice(b": ");
        b.put_slice(value.as_bytes());
        b.put_slice(b"\r\n");
    }
    if !cookies.is_empty() {
        b.put_slice(b"cookie: ");
        b.put_slice(&cookies.join(&b"; "[..]));
        b.put_slice(b"\r\n");
    }
    if has_body && !has_length {
        b.put_slice(b"transfer-encoding: chunked\r\n");
    }
    b.put_slice(b"\r\n");
    match parse_request(&mut b, limits)? {
        Some(head) => Ok(head),
        None => Err(weir_http::ParseError::BadRequest("incomplete request head").into()),
    }
}

/// The response head of `reply`: its status and fields, as the HTTP/1.1 encoder writes them,
/// without the connection-specific ones. Values are slices of the encoded text (no copy each);
/// the text is the encoder's own, one `Name: value` per line, so it is split, not re-parsed.
pub(crate) fn response_head(reply: &Reply<'_>) -> http::Response<()> {
    let mut text = BytesMut::with_capacity(512);
    reply.encode_h1(&mut text, Version::Http11, Persistence::KeepAlive);
    let text = text.freeze();
    let mut response = http::Response::new(());
    *response.status_mut() =
        http::StatusCode::from_u16(reply.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    let headers = response.headers_mut();
    // One allocation for the whole map: growing it field by field cost about 1,000
    // instructions per response (callgrind, `HeaderMap::try_grow` and `try_reserve_one`).
    headers.reserve(memchr::memchr_iter(b'\n', &text).count());
    let mut at = match memchr::memchr(b'\n', &text) {
        Some(i) => i + 1,
        None => return response,
    };
    while at < text.len() {
        let end = memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i);
        let line_end = if end > at && text[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        let line = &text[at..line_end];
        let next = end + 1;
        if line.is_empty() {
            break;
        }
        if let Some(colon) = memchr::memchr(b':', line) {
            let name = &line[..colon];
            let mut v0 = at + colon + 1;
            while v0 < line_end && (text[v0] == b' ' || text[v0] == b'\t') {
                v0 += 1;
            }
            if !connection_specific(name) {
                if let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name),
                    HeaderValue::from_maybe_shared(text.slice(v0..line_end)),
                ) {
                    headers.append(n, v);
                }
            }
        }
        at = next;
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use weir_http::{BodyKind, Framing};

    fn limits() -> weir_http::Limits {
        weir_http::Limits::default()
    }

    #[test]
    fn requests_read_as_their_http1_equivalent() {
        let req = http::Request::builder()
            .method("POST")
            .uri("https://example.com/a?b=1")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("x-one", "1")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let head = request_head(&parts, true, &limits()).unwrap();
        assert_eq!(&head.target[..], b"/a?b=1");
        assert_eq!(head.header("host").unwrap(), b"example.com");
        assert_eq!(head.header("cookie").unwrap(), b"a=1; b=2");
        assert_eq!(head.header("x-one").unwrap(), b"1");
        assert_eq!(head.body, BodyKind::Chunked);

        let req = http::Request::builder()
            .uri("https://example.com/")
            .header("content-length", "3")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        assert_eq!(
            request_head(&parts, true, &limits()).unwrap().body,
            BodyKind::Length(3)
        );
        assert_eq!(
            request_head(&parts, false, &limits()).unwrap().body,
            BodyKind::Length(3)
        );
    }

    #[test]
    fn responses_lose_connection_fields_and_keep_the_rest() {
        let fields = [
            (
                bytes::Bytes::from_static(b"x-a"),
                bytes::Bytes::from_static(b"1"),
            ),
            (
                bytes::Bytes::from_static(b"connection"),
                bytes::Bytes::from_static(b"close"),
            ),
        ];
        let mut reply = Reply::new(201, Framing::Unknown);
        reply.add_fields(&fields);
        let r = response_head(&reply);
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["x-a"], "1");
        assert!(r.headers().get("connection").is_none());
        assert!(r.headers().get("transfer-encoding").is_none());
        assert!(r.headers().get("date").is_some());
    }
}
