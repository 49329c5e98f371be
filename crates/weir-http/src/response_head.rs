//! Response heads, as the proxy reads them from an upstream: parse, validate, derive framing and
//! whether the upstream connection may be reused. Same conventions as [`crate::request`]:
//! `Ok(None)` = need more bytes; names and values are slices of one frozen `Bytes`.

use bytes::{Bytes, BytesMut};

use crate::error::ParseError;
use crate::framing::{trim_ows, BodyKind, FramingFields};
use crate::offsets::Offsets;
use crate::request::{Header, Version, MAX_HEADERS};

/// A parsed response head.
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    /// The reason phrase as sent.
    pub reason: Bytes,
    pub version: Version,
    pub headers: Vec<Header>,
    /// How the body is framed (given the request method).
    pub body: BodyKind,
    /// Whether the connection may carry another exchange after this one.
    pub keep_alive: bool,
    /// Bytes the head occupied on the wire.
    pub head_len: usize,
}

impl ResponseHead {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| &h.value)
    }
}

/// Parses one response head from the front of `buf`. `head_request`: the request was HEAD, so the
/// response has no body whatever its fields say.
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
    let mut ranges = Offsets::new();
    let mut framing = FramingFields::default();
    let (mut close, mut keep_alive_token) = (false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        ranges.push((offset(name), name.len(), offset(h.value), h.value.len()));
        if name.eq_ignore_ascii_case(b"content-length") {
            framing
                .content_length(h.value)
                .map_err(|_| ParseError::BadRequest("invalid Content-Length in response"))?;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            framing.transfer_encoding(h.value)?;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for t in h.value.split(|b| *b == b',') {
                let t = trim_ows(t);
                close |= t.eq_ignore_ascii_case(b"close");
                keep_alive_token |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let body = framing.response_body(status, head_request)?;
    let keep_alive = body != BodyKind::CloseDelimited
        && !close
        && (version == Version::Http11 || keep_alive_token);
    let head = buf.split_to(n).freeze();
    let headers = ranges.headers(&head);
    let reason = if reason_range.1 == 0 {
        Bytes::new()
    } else {
        head.slice(reason_range.0..reason_range.0 + reason_range.1)
    };
    Ok(Some(ResponseHead {
        status,
        reason,
        version,
        headers,
        body,
        keep_alive,
        head_len: n,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8], head: bool) -> Result<Option<ResponseHead>, ParseError> {
        let mut b = BytesMut::from(s);
        parse_response(&mut b, 32 * 1024, head)
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
