//! Hand-made HTTP/3 frames for probes: QUIC varints, QPACK field sections of literal names and
//! values (no table, no Huffman), and one raw request stream's outcome.

use std::time::Duration;

pub fn varint(out: &mut Vec<u8>, v: u64) {
    if v < 64 {
        out.push(v as u8);
    } else if v < 16384 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < (1 << 30) {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// An HPACK/QPACK prefixed integer: `bits` low bits of `first`, then continuation bytes.
pub fn prefix_int(out: &mut Vec<u8>, first: u8, bits: u8, v: usize) {
    let max = (1usize << bits) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    let mut v = v - max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// A QPACK field section of literal names and values (no table, no Huffman), in the order given.
pub fn qpack(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut b = vec![0, 0];
    for (n, v) in fields {
        prefix_int(&mut b, 0x20, 3, n.len());
        b.extend_from_slice(n);
        prefix_int(&mut b, 0x00, 7, v.len());
        b.extend_from_slice(v);
    }
    b
}

pub fn frame(ty: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, ty);
    varint(&mut out, payload.len() as u64);
    out.extend_from_slice(payload);
    out
}

/// A HEADERS frame of `fields`.
pub fn headers(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    frame(0x01, &qpack(fields))
}

/// A DATA frame.
pub fn data(bytes: &[u8]) -> Vec<u8> {
    frame(0x00, bytes)
}

pub fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let first = *b.get(*at)?;
    let len = 1usize << (first >> 6);
    if *at + len > b.len() {
        return None;
    }
    let mut v = u64::from(first & 0x3f);
    for i in 1..len {
        v = (v << 8) | u64::from(b[*at + i]);
    }
    *at += len;
    Some(v)
}

/// How the server ended one request stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The response stream ended normally, with these bytes (frames).
    Answered(Vec<u8>),
    /// The server reset the response stream with this application error code.
    Reset(u64),
    /// Anything else (timeout, connection lost): the text says what.
    Other(String),
}

/// Sends `bytes` on a new request stream (and its FIN) and reads the response stream to its
/// end, within 10 s.
pub async fn request(conn: &quinn::Connection, bytes: &[u8]) -> Outcome {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    let _ = send.finish();
    match tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 20)).await {
        Err(_) => Outcome::Other("timeout".into()),
        Ok(Ok(b)) => Outcome::Answered(b),
        Ok(Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code)))) => {
            Outcome::Reset(code.into_inner())
        }
        Ok(Err(e)) => Outcome::Other(e.to_string()),
    }
}
