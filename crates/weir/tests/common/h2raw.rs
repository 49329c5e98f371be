//! HTTP/2 over raw frames, for what a well-behaved client library refuses to send (a malformed
//! `:authority`, whitespace in a value, a pseudo-header in trailers) or hides (when a PING ACK
//! arrives). Field blocks are HPACK literals without indexing, so no encoder state is needed;
//! responses are judged by their frames and DATA, never by decoding HPACK.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// One frame: 9-byte head and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Opens a raw h2c connection: preface and an empty SETTINGS.
pub fn raw(addr: SocketAddr) -> TcpStream {
    let mut s = super::connect(addr);
    preface(&mut s);
    s
}

/// Writes the client preface and an empty SETTINGS.
pub fn preface(s: &mut impl Write) {
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
    s.flush().unwrap();
}

/// Reads frames until one of `kind` with `flags` set; `None` at the end of the connection.
pub fn until(s: &mut impl Read, kind: u8, flags: u8) -> Option<Vec<u8>> {
    loop {
        let (k, f, _, payload) = read_frame(s)?;
        if k == kind && f & flags == flags {
            return Some(payload);
        }
    }
}

/// An HPACK integer with an `n`-bit prefix, its first byte or-ed with `flags`.
fn integer(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A field block of literals without indexing (new names, no Huffman): any bytes pass.
pub fn block(fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        b.push(0x00);
        integer(&mut b, 0, 7, name.len());
        b.extend_from_slice(name.as_bytes());
        integer(&mut b, 0, 7, value.len());
        b.extend_from_slice(value);
    }
    b
}

/// A GET's field block with these pseudo-header values.
pub fn get(scheme: &str, authority: &[u8], path: &[u8]) -> Vec<u8> {
    block(&[
        (":method", b"GET"),
        (":scheme", scheme.as_bytes()),
        (":authority", authority),
        (":path", path),
    ])
}

/// One frame read: type, flags, stream, payload; `None` at the end of the connection.
pub fn read_frame(s: &mut impl Read) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Some((head[3], head[4], stream, payload))
}

/// What became of one stream.
#[derive(Debug, Default)]
pub struct Outcome {
    /// A HEADERS frame arrived for it.
    pub answered: bool,
    pub data: Vec<u8>,
    /// Its RST_STREAM error code.
    pub reset: Option<u32>,
    /// The connection's GOAWAY error code.
    pub goaway: Option<u32>,
}

impl Outcome {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

/// Reads frames until `stream` ends (END_STREAM, RST_STREAM, GOAWAY or the connection's end).
pub fn outcome(s: &mut TcpStream, stream: u32) -> Outcome {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    outcome_of(s, stream)
}

/// [`outcome`] over any stream (TLS too); the caller sets its read timeout.
pub fn outcome_of(s: &mut impl Read, stream: u32) -> Outcome {
    let mut o = Outcome::default();
    while let Some((kind, flags, id, payload)) = read_frame(s) {
        match kind {
            GOAWAY => {
                o.goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
                return o;
            }
            RST_STREAM if id == stream => {
                o.reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                return o;
            }
            HEADERS if id == stream => {
                o.answered = true;
                if flags & END_STREAM != 0 {
                    return o;
                }
            }
            DATA if id == stream => {
                o.data.extend_from_slice(&payload);
                if flags & END_STREAM != 0 {
                    return o;
                }
            }
            _ => {}
        }
    }
    o
}

/// Sends one request's field block on stream 1 of a new connection and reads what became of it.
pub fn request(addr: SocketAddr, fields: &[u8]) -> Outcome {
    let mut s = raw(addr);
    s.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, 1, fields))
        .unwrap();
    outcome(&mut s, 1)
}
