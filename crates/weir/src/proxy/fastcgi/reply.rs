//! A CGI response (RFC 3875 §6) as the HTTP/1.1 response head weir's upstream phase reads:
//! `Status:` gives the status (200 without it, 302 when only `Location:` is given, as nginx
//! does); the length, framing and connection fields are weir's own (the body goes chunked).

use bytes::{BufMut, BytesMut};

/// Largest CGI header section accepted (nginx's `fastcgi_buffer_size` is 4–8 KiB by default).
pub const MAX_HEAD: usize = 64 * 1024;

/// Where the header section ends in `buf` (after its blank line), if it does yet.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    // A line ends in LF, with or without CR: the blank line is `\n\n` or `\n\r\n`.
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[at..]) {
        let next = at + i + 1;
        match buf.get(next..) {
            Some([b'\n', ..]) => return Some(next + 1),
            Some([b'\r', b'\n', ..]) => return Some(next + 2),
            _ => at = next,
        }
    }
    None
}

/// A CGI header section that is not one.
#[derive(Debug, PartialEq, Eq)]
pub struct BadHead(pub &'static str);

/// Writes the HTTP/1.1 head for the CGI header section `section` into `out`; `bodyless` for
/// HEAD requests and statuses without a body. The status.
pub fn write_head(section: &[u8], bodyless: bool, out: &mut BytesMut) -> Result<u16, BadHead> {
    let mut status = None;
    let mut location = false;
    let mut fields = BytesMut::with_capacity(section.len() + 64);
    for line in section.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let colon = memchr::memchr(b':', line).ok_or(BadHead("a header line without `:`"))?;
        let name = &line[..colon];
        let value = trim(&line[colon + 1..]);
        if name.is_empty()
            // A token (RFC 9110 §5.6.2), as weir's own parser wants it (the fuzz target found
            // `X/Powered-By` passed here and refused there).
            || !name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
            // A field value has no control byte but tab (RFC 9110 §5.5).
            || value
                .iter()
                .any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f)
        {
            return Err(BadHead("a header field weir cannot relay"));
        }
        if name.eq_ignore_ascii_case(b"status") {
            let code = value.get(..3).and_then(|d| std::str::from_utf8(d).ok());
            match code.and_then(|d| d.parse::<u16>().ok()) {
                Some(c) if (200..=599).contains(&c) => status = Some(c),
                _ => return Err(BadHead("a Status that is not a final status code")),
            }
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"connection")
            || name.eq_ignore_ascii_case(b"keep-alive")
        {
            continue;
        }
        location |= name.eq_ignore_ascii_case(b"location");
        fields.put_slice(name);
        fields.put_slice(b": ");
        fields.put_slice(value);
        fields.put_slice(b"\r\n");
    }
    let status = status.unwrap_or(if location { 302 } else { 200 });
    out.put_slice(format!("HTTP/1.1 {status} \r\n").as_bytes());
    out.put_slice(&fields);
    if !bodyless && !matches!(status, 204 | 304) {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"connection: close\r\n\r\n");
    Ok(status)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |i| i + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn head(section: &[u8]) -> (u16, String) {
        let mut out = BytesMut::new();
        let s = write_head(section, false, &mut out).unwrap();
        (s, String::from_utf8(out.to_vec()).unwrap())
    }

    #[test]
    fn status_location_and_plain() {
        let (s, h) = head(b"Status: 404 Not Found\r\nContent-Type: text/html\r\n\r\n");
        assert_eq!(s, 404);
        assert!(
            h.starts_with("HTTP/1.1 404 \r\nContent-Type: text/html\r\n"),
            "{h}"
        );
        assert!(!h.contains("Status"));
        assert_eq!(head(b"Location: /next\n\n").0, 302);
        assert_eq!(head(b"Status: 301\r\nLocation: /x\r\n\r\n").0, 301);
        let (s, h) = head(
            b"X-Powered-By: PHP\r\nContent-Length: 3\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
        );
        assert_eq!(s, 200);
        assert!(!h.contains("Content-Length"));
        assert_eq!(h.matches("Set-Cookie").count(), 2);
        assert!(h.contains("transfer-encoding: chunked\r\n"));
    }

    #[test]
    fn a_section_weir_cannot_relay_is_refused() {
        let mut out = BytesMut::new();
        assert!(write_head(b"garbage\r\n\r\n", false, &mut out).is_err());
        assert!(write_head(b"Status: 1xx\r\n\r\n", false, &mut out).is_err());
        assert!(write_head(b"Status: 101\r\n\r\n", false, &mut out).is_err());
        assert!(write_head(b"X: a\x00b\r\n\r\n", false, &mut out).is_err());
        assert!(write_head(b"X/Y: 1\r\n\r\n", false, &mut out).is_err());
        assert!(write_head(b"X: a\x03b\r\n\r\n", false, &mut out).is_err());
        assert_eq!(head_end(b"A: b\r\n\r\nbody"), Some(8));
        assert_eq!(head_end(b"A: b\n\nbody"), Some(6));
        assert_eq!(head_end(b"A: b\r\n"), None);
        // A blank line of CRLF after an LF-only line (nginx accepts it too).
        assert_eq!(head_end(b"A: b\n\r\nbody"), Some(7));
    }
}
