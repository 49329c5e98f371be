//! Incremental body decoding: feed it the connection's read buffer, it hands back body bytes as
//! zero-copy `Bytes` slices split off the front, or says it needs more.
//!
//! The chunked decoder is strict: chunk sizes are 1–16 hex digits with no sign, prefix or
//! whitespace, lines end in CRLF, chunk data is followed by CRLF, and extensions and trailers are
//! bounded in size. Anything else is a [`ParseError::BadRequest`] and the connection is closed.

use bytes::{Bytes, BytesMut};

use crate::error::ParseError;
use crate::framing::BodyKind;
use crate::request::{Header, MAX_HEADERS};

/// Longest chunk-size line (size + extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 16 * 1024;

/// What one call to [`BodyDecoder::decode`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyEvent {
    /// Some body bytes (never empty).
    Data(Bytes),
    /// The buffer holds no further complete piece; read more and call again.
    NeedMore,
    /// The body is complete; chunked bodies may carry trailer fields.
    Done(Vec<Header>),
}

/// Decodes one message body.
#[derive(Debug)]
pub struct BodyDecoder {
    state: State,
    /// Body bytes returned so far.
    consumed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkDataEnd,
    Trailers,
    Eof,
    Done,
}

impl BodyDecoder {
    pub fn new(kind: BodyKind) -> BodyDecoder {
        let state = match kind {
            BodyKind::Empty | BodyKind::Length(0) => State::Done,
            BodyKind::Length(n) => State::Length(n),
            BodyKind::Chunked => State::ChunkSize,
            BodyKind::CloseDelimited => State::Eof,
        };
        BodyDecoder { state, consumed: 0 }
    }

    /// True once the whole body has been returned.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body bytes returned so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Takes the next piece of the body from the front of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<BodyEvent, ParseError> {
        loop {
            match self.state {
                State::Done => return Ok(BodyEvent::Done(Vec::new())),
                State::Length(remaining) => {
                    if buf.is_empty() {
                        return Ok(BodyEvent::NeedMore);
                    }
                    let n = remaining.min(buf.len() as u64) as usize;
                    self.state = if remaining == n as u64 {
                        State::Done
                    } else {
                        State::Length(remaining - n as u64)
                    };
                    return Ok(self.data(buf.split_to(n).freeze()));
                }
                State::Eof => {
                    if buf.is_empty() {
                        return Ok(BodyEvent::NeedMore);
                    }
                    let n = buf.len();
                    return Ok(self.data(buf.split_to(n).freeze()));
                }
                State::ChunkSize => {
                    let Some(line_end) = find_crlf(buf, MAX_CHUNK_LINE)? else {
                        return Ok(BodyEvent::NeedMore);
                    };
                    let size = parse_chunk_size(&buf[..line_end])?;
                    let _ = buf.split_to(line_end + 2);
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkData(remaining) => {
                    if buf.is_empty() {
                        return Ok(BodyEvent::NeedMore);
                    }
                    let n = remaining.min(buf.len() as u64) as usize;
                    self.state = if remaining == n as u64 {
                        State::ChunkDataEnd
                    } else {
                        State::ChunkData(remaining - n as u64)
                    };
                    return Ok(self.data(buf.split_to(n).freeze()));
                }
                State::ChunkDataEnd => {
                    if buf.len() < 2 {
                        return Ok(BodyEvent::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ParseError::BadRequest("chunk data not followed by CRLF"));
                    }
                    let _ = buf.split_to(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => return self.trailers(buf),
            }
        }
    }

    /// The peer closed the connection: fine for a close-delimited body, an error otherwise.
    pub fn on_eof(&mut self) -> Result<(), ParseError> {
        match self.state {
            State::Eof | State::Done => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(ParseError::BadRequest(
                "connection closed before the body was complete",
            )),
        }
    }

    fn data(&mut self, b: Bytes) -> BodyEvent {
        self.consumed += b.len() as u64;
        BodyEvent::Data(b)
    }

    fn trailers(&mut self, buf: &mut BytesMut) -> Result<BodyEvent, ParseError> {
        if buf.len() >= 2 && &buf[..2] == b"\r\n" {
            let _ = buf.split_to(2);
            self.state = State::Done;
            return Ok(BodyEvent::Done(Vec::new()));
        }
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match httparse::parse_headers(buf, &mut slots) {
            Ok(httparse::Status::Complete((n, fields))) => {
                let ranges: Vec<_> = fields
                    .iter()
                    .map(|h| {
                        (
                            subslice_range(buf, h.name.as_bytes()),
                            subslice_range(buf, h.value),
                        )
                    })
                    .collect();
                let section = buf.split_to(n).freeze();
                self.state = State::Done;
                Ok(BodyEvent::Done(
                    ranges
                        .into_iter()
                        .map(|(n, v)| Header {
                            name: section.slice(n),
                            value: section.slice(v),
                        })
                        .collect(),
                ))
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_TRAILERS => {
                Err(ParseError::BadRequest("trailer section too large"))
            }
            Ok(httparse::Status::Partial) => Ok(BodyEvent::NeedMore),
            Err(_) => Err(ParseError::BadRequest("invalid trailer field")),
        }
    }
}

fn subslice_range(outer: &[u8], inner: &[u8]) -> std::ops::Range<usize> {
    let start = inner.as_ptr() as usize - outer.as_ptr() as usize;
    start..start + inner.len()
}

/// Checks the first chunk-size line of a chunked body, if it has arrived: a proxy can then
/// answer 502 for a body that is bad from its first byte, before it relays the head.
pub fn check_first_chunk(buf: &[u8]) -> Result<(), ParseError> {
    match find_crlf(buf, MAX_CHUNK_LINE)? {
        Some(end) => parse_chunk_size(&buf[..end]).map(|_| ()),
        None => Ok(()),
    }
}

/// Position of the CRLF ending the first line, `None` if not yet received.
fn find_crlf(buf: &[u8], max: usize) -> Result<Option<usize>, ParseError> {
    match memchr::memchr(b'\n', buf) {
        Some(i) if i > 0 && buf[i - 1] == b'\r' && i - 1 <= max => Ok(Some(i - 1)),
        Some(_) => Err(ParseError::BadRequest("invalid chunk-size line")),
        None if buf.len() > max => Err(ParseError::BadRequest("chunk-size line too long")),
        None => Ok(None),
    }
}

/// `1*HEXDIG [ BWS ";" ext ]` → size. Extensions are accepted and ignored.
fn parse_chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(ParseError::BadRequest("invalid chunk size"));
    }
    let rest = crate::framing::trim_ows(&line[digits..]);
    if !rest.is_empty() && rest[0] != b';' {
        return Err(ParseError::BadRequest("invalid chunk size"));
    }
    if rest.iter().any(|b| *b < 0x20 && *b != b'\t' || *b == 0x7f) {
        return Err(ParseError::BadRequest("invalid byte in chunk extension"));
    }
    let mut n: u64 = 0;
    for &b in &line[..digits] {
        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
        n = n
            .checked_mul(16)
            .and_then(|n| n.checked_add(d))
            .ok_or(ParseError::BadRequest("chunk size overflow"))?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the whole input, feeding it `step` bytes at a time.
    fn decode_all(
        kind: BodyKind,
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, Vec<Header>), ParseError> {
        let mut d = BodyDecoder::new(kind);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                BodyEvent::Data(b) => out.extend_from_slice(&b),
                BodyEvent::Done(t) => return Ok((out, t)),
                BodyEvent::NeedMore => {
                    if fed >= input.len() {
                        d.on_eof()?;
                        return Ok((out, Vec::new()));
                    }
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn chunked_with_trailers_any_split() {
        let wire = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n";
        for step in 1..wire.len() {
            let (body, trailers) = decode_all(BodyKind::Chunked, wire, step).unwrap();
            assert_eq!(body, b"hello world");
            assert_eq!(trailers.len(), 1);
            assert_eq!(&trailers[0].value[..], b"42");
        }
    }

    #[test]
    fn bad_chunks() {
        for bad in [
            &b"x\r\n"[..],
            b"-1\r\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"5 z\r\nhello\r\n0\r\n\r\n",
        ] {
            assert!(
                decode_all(BodyKind::Chunked, bad, 64).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn truncated_chunked_is_an_error_at_eof() {
        assert!(decode_all(BodyKind::Chunked, b"5\r\nhel", 64).is_err());
    }

    #[test]
    fn length_and_eof() {
        let (b, _) = decode_all(BodyKind::Length(3), b"abcdef", 2).unwrap();
        assert_eq!(b, b"abc");
        let (b, _) = decode_all(BodyKind::CloseDelimited, b"abcdef", 4).unwrap();
        assert_eq!(b, b"abcdef");
        assert!(decode_all(BodyKind::Length(10), b"abc", 2).is_err());
    }
}
