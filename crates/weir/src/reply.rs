//! The tail every response head shares, and the one place that turns an error status into a
//! canned response: `Date`, the `Connection` field the keep-alive decision calls for, the blank line.

use bytes::{BufMut, BytesMut};

/// What the response says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnHeader {
    /// HTTP/1.1 keep-alive: nothing to say.
    None,
    /// `Connection: close`: this is the last response.
    Close,
    /// `Connection: keep-alive`: an HTTP/1.0 client asked to keep the connection.
    KeepAlive,
}

impl ConnHeader {
    /// The field a response carries given the keep-alive decision and the client's version.
    pub fn for_response(close: bool, version: weir_http::Version) -> ConnHeader {
        match (close, version) {
            (true, _) => ConnHeader::Close,
            (false, weir_http::Version::Http10) => ConnHeader::KeepAlive,
            (false, weir_http::Version::Http11) => ConnHeader::None,
        }
    }

    pub fn as_bytes(&self) -> &'static [u8] {
        match self {
            ConnHeader::None => b"",
            ConnHeader::Close => b"Connection: close\r\n",
            ConnHeader::KeepAlive => b"Connection: keep-alive\r\n",
        }
    }
}

/// Writes `Date`, the connection field and the blank line ending the head.
#[inline]
pub fn finish_head(out: &mut BytesMut, conn: ConnHeader) {
    weir_http::response::put_date(out);
    out.put_slice(conn.as_bytes());
    out.put_slice(b"\r\n");
}

/// A canned error response (`text/plain` body naming the status).
pub fn error(
    out: &mut BytesMut,
    status: u16,
    server: Option<&[u8]>,
    extra: &[(&[u8], &[u8])],
    conn: ConnHeader,
    head_only: bool,
) {
    weir_http::response::put_error(out, status, server, extra, conn.as_bytes(), head_only);
}

/// A complete JSON response.
pub fn json(
    out: &mut BytesMut,
    status: u16,
    server: Option<&[u8]>,
    body: &[u8],
    conn: ConnHeader,
    head_only: bool,
) {
    weir_http::response::put_status_line(out, status);
    if let Some(s) = server {
        weir_http::response::put_header(out, b"Server", s);
    }
    out.put_slice(b"Content-Type: application/json\r\nCache-Control: no-store\r\n");
    weir_http::response::put_content_length(out, body.len() as u64);
    finish_head(out, conn);
    if !head_only {
        out.put_slice(body);
    }
}
