//! FastCGI records (the FastCGI 1.0 specification, Open Market 1996): the 8-byte header, the
//! name-value pairs of PARAMS, and a reader that yields whole records from a byte stream.
//! One request at a time per connection, so multiplexing is not needed; each request has an id
//! of its own ([`next_id`]), so a record of an earlier one (an application that wrote after its
//! END_REQUEST) shows the connection out of step instead of being read as this one's.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const VERSION: u8 = 1;
pub const BEGIN_REQUEST: u8 = 1;
pub const ABORT_REQUEST: u8 = 2;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;
/// The responder role: a request in, a response out (what php-fpm serves).
pub const RESPONDER: u16 = 1;
/// BEGIN_REQUEST flag: keep the connection open after the request (pooled).
pub const KEEP_CONN: u8 = 1;
thread_local! {
    static LAST_ID: std::cell::Cell<u16> = const { std::cell::Cell::new(0) };
}

/// A request id for the next request of this worker: 1 to 65535, in turn.
pub fn next_id() -> u16 {
    LAST_ID.with(|c| {
        let id = c.get().checked_add(1).unwrap_or(1);
        c.set(id);
        id
    })
}
/// Largest record content.
pub const MAX_CONTENT: usize = 65_535;
const HEADER: usize = 8;

/// Appends one record of `kind` with `content` (at most [`MAX_CONTENT`] bytes).
pub fn put(out: &mut BytesMut, kind: u8, id: u16, content: &[u8]) {
    debug_assert!(content.len() <= MAX_CONTENT);
    // Padding to a multiple of 8, as the specification recommends.
    let pad = (8 - content.len() % 8) % 8;
    out.reserve(HEADER + content.len() + pad);
    out.put_u8(VERSION);
    out.put_u8(kind);
    out.put_u16(id);
    out.put_u16(content.len() as u16);
    out.put_u8(pad as u8);
    out.put_u8(0);
    out.put_slice(content);
    out.put_bytes(0, pad);
}

/// Appends `content` as records of `kind`, split at [`MAX_CONTENT`] (nothing for empty).
pub fn put_stream(out: &mut BytesMut, kind: u8, id: u16, content: &[u8]) {
    for part in content.chunks(MAX_CONTENT) {
        put(out, kind, id, part);
    }
}

/// Appends BEGIN_REQUEST for the responder role, the connection kept when `keep`.
pub fn put_begin(out: &mut BytesMut, id: u16, keep: bool) {
    let mut body = [0u8; 8];
    body[..2].copy_from_slice(&RESPONDER.to_be_bytes());
    body[2] = if keep { KEEP_CONN } else { 0 };
    put(out, BEGIN_REQUEST, id, &body);
}

#[cfg(test)]
fn put_len(out: &mut BytesMut, n: usize) {
    if n < 128 {
        out.put_u8(n as u8);
    } else {
        out.put_u32(n as u32 | 0x8000_0000);
    }
}

/// Encodes name-value pairs into PARAMS records, then the empty one that ends them.
#[cfg(test)]
pub fn put_params<'a>(out: &mut BytesMut, pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) {
    let mut body = BytesMut::with_capacity(2048);
    for (name, value) in pairs {
        put_len(&mut body, name.len());
        put_len(&mut body, value.len());
        body.put_slice(name);
        body.put_slice(value);
    }
    put_params_body(out, 1, &body);
}

/// The PARAMS records of `body` (encoded pairs), then the empty one that ends them.
pub fn put_params_body(out: &mut BytesMut, id: u16, body: &[u8]) {
    put_stream(out, PARAMS, id, body);
    put(out, PARAMS, id, &[]);
}

/// One record read.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: u8,
    pub id: u16,
    pub content: Bytes,
}

/// A record that cannot be one: the connection is not speaking FastCGI (or is out of step).
#[derive(Debug, PartialEq, Eq)]
pub struct BadRecord(pub &'static str);

/// The next whole record in `buf` (consumed), `None` until one is complete.
pub fn next(buf: &mut BytesMut) -> Result<Option<Record>, BadRecord> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    if buf[0] != VERSION {
        return Err(BadRecord("not a FastCGI version 1 record"));
    }
    let kind = buf[1];
    let id = u16::from_be_bytes([buf[2], buf[3]]);
    let len = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
    let pad = usize::from(buf[6]);
    if buf.len() < HEADER + len + pad {
        return Ok(None);
    }
    buf.advance(HEADER);
    let content = buf.split_to(len).freeze();
    buf.advance(pad);
    Ok(Some(Record { kind, id, content }))
}

/// END_REQUEST's application status and protocol status (0: request complete).
pub fn end_status(content: &[u8]) -> Option<(u32, u8)> {
    let app = u32::from_be_bytes(content.get(..4)?.try_into().ok()?);
    Some((app, *content.get(4)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_padded_and_split() {
        let mut out = BytesMut::new();
        put_begin(&mut out, 9, true);
        put_stream(&mut out, STDIN, 9, &vec![7u8; MAX_CONTENT + 10]);
        put(&mut out, STDIN, 9, &[]);
        assert_eq!(out.len() % 8, 0);
        let begin = next(&mut out).unwrap().unwrap();
        assert_eq!((begin.kind, begin.id), (BEGIN_REQUEST, 9));
        assert_eq!(&begin.content[..3], &[0, 1, KEEP_CONN]);
        assert_eq!(next(&mut out).unwrap().unwrap().content.len(), MAX_CONTENT);
        assert_eq!(next(&mut out).unwrap().unwrap().content.len(), 10);
        assert_eq!(next(&mut out).unwrap().unwrap().content.len(), 0);
        assert_eq!(next(&mut out).unwrap(), None);
    }

    #[test]
    fn params_use_one_or_four_byte_lengths() {
        let mut out = BytesMut::new();
        let long = [b'v'; 200];
        put_params(
            &mut out,
            [(&b"A"[..], &b"1"[..]), (&b"B"[..], &long[..])].into_iter(),
        );
        let r = next(&mut out).unwrap().unwrap();
        assert_eq!(r.kind, PARAMS);
        assert_eq!(&r.content[..4], b"\x01\x01A1");
        assert_eq!(&r.content[4..9], b"\x01\x80\x00\x00\xc8");
        assert_eq!(next(&mut out).unwrap().unwrap().content.len(), 0);
    }

    #[test]
    fn a_partial_record_waits_and_garbage_is_refused() {
        let mut out = BytesMut::new();
        put(&mut out, STDOUT, 1, b"hello");
        let mut part = out.split_to(10);
        assert_eq!(next(&mut part).unwrap(), None);
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
        assert!(next(&mut bad).is_err());
    }
}
