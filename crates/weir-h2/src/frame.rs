//! HTTP/2 frames (RFC 9113 §4, §6): decoding from a byte buffer, borrowing the payload, with
//! every check the frame layer itself can make (lengths, stream 0 or not, padding, settings'
//! values), and encoding into a `Vec<u8>` (a DATA frame's payload is the caller's, written
//! after its header with a vectored write).
//!
//! The checks that need the connection's state (a frame on a closed stream, CONTINUATION
//! expected, flow-control windows) are the connection's, not this module's. Which errors end
//! the connection and which only a stream follows §5.4: a frame size error in a frame that
//! can change the connection's state ends it (§4.2), so every oversized frame does here (a
//! choice §4.2 allows).

use crate::Reason;

/// The client's connection preface (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame's header.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE's initial value and floor; its ceiling.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
pub const MAX_FRAME_CEILING: u32 = 16_777_215;
/// Largest flow-control window (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (§6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// RFC 8441's extended CONNECT.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// What the frame layer refuses: the whole connection, or one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    Connection(Reason),
    Stream(u32, Reason),
}

/// A stream's dependency and weight, parsed and not used (§5.3.2 deprecates the scheme).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub depends_on: u32,
    pub exclusive: bool,
    pub weight: u8,
}

/// One decoded frame; payloads borrow the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        end_stream: bool,
        data: &'a [u8],
        /// What the frame counts against the windows: its whole payload, padding included.
        flow: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        block: &'a [u8],
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: u32,
    },
    Settings {
        ack: bool,
        /// Six octets per setting: see [`settings`].
        params: &'a [u8],
    },
    PushPromise {
        stream: u32,
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: u32,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    /// A type this endpoint does not know: ignored (§5.5).
    Unknown {
        kind: u8,
        stream: u32,
    },
}

/// The frame at the start of `buf`, and the octets it took; `None` until it is all there.
/// `max_frame` is the SETTINGS_MAX_FRAME_SIZE this endpoint advertised.
pub fn decode(buf: &[u8], max_frame: u32) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]);
    let kind = buf[3];
    let flags = buf[4];
    let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
    if len > max_frame {
        return Err(FrameError::Connection(Reason::FrameSizeError));
    }
    let end = HEADER_LEN + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let p = &buf[HEADER_LEN..end];
    let conn = |r| Err(FrameError::Connection(r));
    let frame = match kind {
        kind::DATA => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            let data = unpad(p, flags)?;
            Frame::Data {
                stream,
                end_stream: flags & flag::END_STREAM != 0,
                data,
                flow: len,
            }
        }
        kind::HEADERS => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            let mut block = unpad(p, flags)?;
            let priority = if flags & flag::PRIORITY != 0 {
                if block.len() < 5 {
                    return conn(Reason::FrameSizeError);
                }
                let pr = priority(&block[..5]);
                block = &block[5..];
                Some(pr)
            } else {
                None
            };
            Frame::Headers {
                stream,
                end_stream: flags & flag::END_STREAM != 0,
                end_headers: flags & flag::END_HEADERS != 0,
                priority,
                block,
            }
        }
        kind::PRIORITY => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            if len != 5 {
                return Err(FrameError::Stream(stream, Reason::FrameSizeError));
            }
            Frame::Priority {
                stream,
                priority: priority(p),
            }
        }
        kind::RST_STREAM => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            if len != 4 {
                return conn(Reason::FrameSizeError);
            }
            Frame::RstStream {
                stream,
                code: u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
            }
        }
        kind::SETTINGS => {
            if stream != 0 {
                return conn(Reason::ProtocolError);
            }
            let ack = flags & flag::ACK != 0;
            if (ack && len != 0) || !len.is_multiple_of(6) {
                return conn(Reason::FrameSizeError);
            }
            for (id, value) in settings(p) {
                check_setting(id, value)?;
            }
            Frame::Settings { ack, params: p }
        }
        kind::PUSH_PROMISE => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            Frame::PushPromise { stream }
        }
        kind::PING => {
            if stream != 0 {
                return conn(Reason::ProtocolError);
            }
            if len != 8 {
                return conn(Reason::FrameSizeError);
            }
            let mut data = [0u8; 8];
            data.copy_from_slice(p);
            Frame::Ping {
                ack: flags & flag::ACK != 0,
                data,
            }
        }
        kind::GOAWAY => {
            if stream != 0 {
                return conn(Reason::ProtocolError);
            }
            if len < 8 {
                return conn(Reason::FrameSizeError);
            }
            Frame::GoAway {
                last_stream: u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff,
                code: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                debug: &p[8..],
            }
        }
        kind::WINDOW_UPDATE => {
            if len != 4 {
                return conn(Reason::FrameSizeError);
            }
            let increment = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
            if increment == 0 {
                return Err(if stream == 0 {
                    FrameError::Connection(Reason::ProtocolError)
                } else {
                    FrameError::Stream(stream, Reason::ProtocolError)
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        kind::CONTINUATION => {
            if stream == 0 {
                return conn(Reason::ProtocolError);
            }
            Frame::Continuation {
                stream,
                end_headers: flags & flag::END_HEADERS != 0,
                block: p,
            }
        }
        other => Frame::Unknown {
            kind: other,
            stream,
        },
    };
    Ok(Some((frame, end)))
}

/// A padded frame's content (§6.1): the pad length octet and the padding taken off.
fn unpad(p: &[u8], flags: u8) -> Result<&[u8], FrameError> {
    if flags & flag::PADDED == 0 {
        return Ok(p);
    }
    let Some((&pad, rest)) = p.split_first() else {
        return Err(FrameError::Connection(Reason::FrameSizeError));
    };
    // Padding as long as the rest or longer is a PROTOCOL_ERROR (§6.1, §6.2).
    if usize::from(pad) > rest.len() {
        return Err(FrameError::Connection(Reason::ProtocolError));
    }
    Ok(&rest[..rest.len() - usize::from(pad)])
}

fn priority(p: &[u8]) -> Priority {
    let dep = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    Priority {
        depends_on: dep & 0x7fff_ffff,
        exclusive: dep & 0x8000_0000 != 0,
        weight: p[4],
    }
}

/// A SETTINGS frame's parameters (§6.5.1).
pub fn settings(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    params.chunks_exact(6).map(|c| {
        (
            u16::from_be_bytes([c[0], c[1]]),
            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
        )
    })
}

/// The values §6.5.2 bounds; unknown settings are ignored.
fn check_setting(id: u16, value: u32) -> Result<(), FrameError> {
    match id {
        setting::ENABLE_PUSH | setting::ENABLE_CONNECT_PROTOCOL if value > 1 => {
            Err(FrameError::Connection(Reason::ProtocolError))
        }
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => {
            Err(FrameError::Connection(Reason::FlowControlError))
        }
        setting::MAX_FRAME_SIZE if !(DEFAULT_MAX_FRAME..=MAX_FRAME_CEILING).contains(&value) => {
            Err(FrameError::Connection(Reason::ProtocolError))
        }
        _ => Ok(()),
    }
}

/// Appends a frame header.
pub fn put_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_FRAME_CEILING as usize);
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// A SETTINGS frame with `params`.
pub fn put_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    put_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: Reason, debug: &[u8]) {
    put_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, code: Reason) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(increment > 0 && increment <= MAX_WINDOW);
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// A header block as HEADERS and as many CONTINUATIONs as `max_frame` (the peer's
/// SETTINGS_MAX_FRAME_SIZE) needs.
pub fn put_headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: u32) {
    let max = max_frame as usize;
    let mut chunks = block.chunks(max.max(1)).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    put_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(c) = chunks.next() {
        let f = if chunks.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        put_header(out, c.len(), kind::CONTINUATION, f, stream);
        out.extend_from_slice(c);
    }
}

/// A frame header as an array (for writers that are not a `Vec`).
pub fn header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_FRAME_CEILING as usize);
    let l = (len as u32).to_be_bytes();
    let s = (stream & 0x7fff_ffff).to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// A DATA frame's header for `len` octets of payload the caller writes after it, as an array.
pub fn data_header(stream: u32, len: usize, end_stream: bool) -> [u8; HEADER_LEN] {
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    header(len, kind::DATA, flags, stream)
}

/// A DATA frame's header for `len` octets of payload the caller writes after it.
pub fn put_data_header(out: &mut Vec<u8>, stream: u32, len: usize, end_stream: bool) {
    put_header(
        out,
        len,
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn one(b: &[u8]) -> Result<Frame<'_>, FrameError> {
        decode(b, DEFAULT_MAX_FRAME).map(|f| f.expect("whole").0)
    }

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        put_settings(
            &mut out,
            &[(setting::MAX_CONCURRENT_STREAMS, 100), (0xff, 7)],
        );
        let Frame::Settings { ack, params } = one(&out).unwrap() else {
            panic!()
        };
        assert!(!ack);
        assert_eq!(
            settings(params).collect::<Vec<_>>(),
            [(setting::MAX_CONCURRENT_STREAMS, 100), (0xff, 7)]
        );
        out.clear();
        put_ping(&mut out, true, *b"12345678");
        assert_eq!(
            one(&out).unwrap(),
            Frame::Ping {
                ack: true,
                data: *b"12345678"
            }
        );
        out.clear();
        put_goaway(&mut out, 7, Reason::EnhanceYourCalm, b"slow down");
        assert_eq!(
            one(&out).unwrap(),
            Frame::GoAway {
                last_stream: 7,
                code: 0xb,
                debug: b"slow down"
            }
        );
        out.clear();
        put_window_update(&mut out, 3, 65_535);
        assert_eq!(
            one(&out).unwrap(),
            Frame::WindowUpdate {
                stream: 3,
                increment: 65_535
            }
        );
        out.clear();
        put_rst_stream(&mut out, 5, Reason::Cancel);
        assert_eq!(one(&out).unwrap(), Frame::RstStream { stream: 5, code: 8 });
        // A block over the peer's frame size: HEADERS then CONTINUATIONs, END_HEADERS last.
        out.clear();
        let block = vec![0x82u8; 40_000];
        put_headers(&mut out, 1, &block, true, DEFAULT_MAX_FRAME);
        let (f, n) = decode(&out, DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert!(matches!(
            f,
            Frame::Headers {
                end_stream: true,
                end_headers: false,
                ..
            }
        ));
        let (f2, n2) = decode(&out[n..], DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert!(matches!(
            f2,
            Frame::Continuation {
                end_headers: false,
                ..
            }
        ));
        let (f3, n3) = decode(&out[n + n2..], DEFAULT_MAX_FRAME).unwrap().unwrap();
        assert!(matches!(
            f3,
            Frame::Continuation {
                end_headers: true,
                ..
            }
        ));
        assert_eq!(n + n2 + n3, out.len());
        // Incomplete: nothing yet.
        assert_eq!(decode(&out[..5], DEFAULT_MAX_FRAME), Ok(None));
        assert_eq!(decode(&out[..20], DEFAULT_MAX_FRAME), Ok(None));
    }

    #[test]
    fn padding_and_priority_come_off() {
        // DATA, padded: pad length 3, "hi", 3 octets of padding; flow counts all 6.
        let f = frame(
            kind::DATA,
            flag::PADDED | flag::END_STREAM,
            1,
            &[3, b'h', b'i', 0, 0, 0],
        );
        assert_eq!(
            one(&f).unwrap(),
            Frame::Data {
                stream: 1,
                end_stream: true,
                data: b"hi",
                flow: 6
            }
        );
        // HEADERS, padded and with a priority.
        let f = frame(
            kind::HEADERS,
            flag::PADDED | flag::PRIORITY | flag::END_HEADERS,
            3,
            &[1, 0x80, 0, 0, 1, 15, 0x82, 0],
        );
        assert_eq!(
            one(&f).unwrap(),
            Frame::Headers {
                stream: 3,
                end_stream: false,
                end_headers: true,
                priority: Some(Priority {
                    depends_on: 1,
                    exclusive: true,
                    weight: 15
                }),
                block: &[0x82],
            }
        );
    }

    /// RFC 9113's frame-level errors, as h2spec checks them.
    #[test]
    fn malformed_frames_are_errors_of_the_right_kind() {
        use FrameError::{Connection as C, Stream as S};
        let cases: Vec<(Vec<u8>, FrameError)> = vec![
            (frame(kind::DATA, 0, 0, b"x"), C(Reason::ProtocolError)),
            (
                frame(kind::DATA, flag::PADDED, 1, &[5, 1, 2]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::HEADERS, 0, 0, &[0x82]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::PRIORITY, 0, 1, &[0; 4]),
                S(1, Reason::FrameSizeError),
            ),
            (
                frame(kind::PRIORITY, 0, 0, &[0; 5]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::RST_STREAM, 0, 1, &[0; 3]),
                C(Reason::FrameSizeError),
            ),
            (
                frame(kind::RST_STREAM, 0, 0, &[0; 4]),
                C(Reason::ProtocolError),
            ),
            (frame(kind::SETTINGS, 0, 1, &[]), C(Reason::ProtocolError)),
            (
                frame(kind::SETTINGS, flag::ACK, 0, &[0; 6]),
                C(Reason::FrameSizeError),
            ),
            (
                frame(kind::SETTINGS, 0, 0, &[0; 5]),
                C(Reason::FrameSizeError),
            ),
            (
                frame(kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]),
                C(Reason::FlowControlError),
            ),
            (
                frame(kind::SETTINGS, 0, 0, &[0, 5, 0, 0, 0x3f, 0xff]),
                C(Reason::ProtocolError),
            ),
            (frame(kind::PING, 0, 1, &[0; 8]), C(Reason::ProtocolError)),
            (frame(kind::PING, 0, 0, &[0; 7]), C(Reason::FrameSizeError)),
            (frame(kind::GOAWAY, 0, 1, &[0; 8]), C(Reason::ProtocolError)),
            (
                frame(kind::WINDOW_UPDATE, 0, 1, &[0; 3]),
                C(Reason::FrameSizeError),
            ),
            (
                frame(kind::WINDOW_UPDATE, 0, 1, &[0; 4]),
                S(1, Reason::ProtocolError),
            ),
            (
                frame(kind::WINDOW_UPDATE, 0, 0, &[0; 4]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::CONTINUATION, 0, 0, &[]),
                C(Reason::ProtocolError),
            ),
            (
                frame(kind::DATA, 0, 1, &vec![0; 16_385]),
                C(Reason::FrameSizeError),
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(one(&bytes).err(), Some(want), "{:x?}", &bytes[..9]);
        }
        // Oversized is refused from its header alone, before the payload arrives.
        let mut big = Vec::new();
        put_header(&mut big, 1 << 20, kind::DATA, 0, 1);
        assert_eq!(
            decode(&big, DEFAULT_MAX_FRAME),
            Err(FrameError::Connection(Reason::FrameSizeError))
        );
        // An unknown type is passed on (ignored by the connection), reserved bit dropped.
        let f = frame(0xfa, 0xff, 0x8000_0003, b"abc");
        assert_eq!(
            one(&f).unwrap(),
            Frame::Unknown {
                kind: 0xfa,
                stream: 3
            }
        );
    }
}
