//! gRPC-Web to gRPC (issue 55 §3), in the HTTP/2 upstream phase (`pipeline/forward_h2.rs`,
//! `pipeline/relay_h2.rs`): a browser
//! or any HTTP/1.1 client calls with `application/grpc-web[+proto]` (binary) or
//! `application/grpc-web-text[+proto]` (base64), and the gRPC server behind weir is asked in
//! gRPC. As the protocol (gRPC's PROTOCOL-WEB.md) and Envoy's `grpc_web` filter have it:
//! - the request's content type becomes the gRPC one (`+proto` kept), a text body is decoded
//!   from base64 (the client may pad each piece it sends), its `content-length` dropped;
//! - the answer's content type is the call's gRPC-Web family, and the server's trailers are
//!   sent as the body's last frame (flag `0x80`, `name:value\r\n` lines), not as HTTP trailers,
//!   which browsers cannot read; a text answer is base64, each piece padded on its own;
//! - a trailers-only answer (the status in the head) keeps its status fields in the head.
//!
//! Only upstreams of `protocol: h2` take gRPC: their phase is where every such call passes, so
//! the translation costs nothing to any other request.

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};

/// How a gRPC-Web call's bodies are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Binary,
    /// Base64 (`application/grpc-web-text`).
    Text,
}

const WEB_TEXT: &[u8] = b"application/grpc-web-text";
const WEB: &[u8] = b"application/grpc-web";
const GRPC: &[u8] = b"application/grpc";

fn strip_prefix_ci<'a>(v: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &v[prefix.len()..])
}

/// The codec suffix of a content type's rest: `+token` (`+proto`, `+json`) or nothing, then
/// the end, parameters or space; `None` for anything else (`application/grpc-webfoo`, a
/// suffix with bytes a token has not: never copied into a field).
fn suffix(rest: &[u8]) -> Option<&[u8]> {
    let end = rest
        .iter()
        .position(|b| *b == b';' || b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let codec = &rest[..end];
    match codec.split_first() {
        None => Some(b""),
        Some((b'+', name))
            if !name.is_empty()
                && name.len() <= 32
                && name
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) =>
        {
            Some(codec)
        }
        _ => None,
    }
}

/// The gRPC-Web mode and codec suffix of a request's content type; `None` when it is not
/// gRPC-Web.
pub fn mode(content_type: &[u8]) -> Option<(Mode, &[u8])> {
    if let Some(rest) = strip_prefix_ci(content_type, WEB_TEXT) {
        return Some((Mode::Text, suffix(rest)?));
    }
    let rest = strip_prefix_ci(content_type, WEB)?;
    Some((Mode::Binary, suffix(rest)?))
}

/// Whether an upstream answer is gRPC (its content type `application/grpc`, `+codec`): only
/// those are relabelled; another (an HTML 404 from a misrouted call) goes back as it came.
pub fn is_grpc_answer(content_type: Option<&[u8]>) -> bool {
    content_type
        .and_then(|v| strip_prefix_ci(v, GRPC))
        .is_some_and(|rest| suffix(rest).is_some())
}

/// The gRPC content type the upstream is asked with.
pub fn upstream_type(codec: &[u8]) -> Vec<u8> {
    [GRPC, codec].concat()
}

/// The content type of the answer: the call's family, with the upstream's codec suffix.
pub fn client_type(mode: Mode, upstream: Option<&[u8]>) -> Vec<u8> {
    let codec = upstream
        .and_then(|v| strip_prefix_ci(v, GRPC))
        .and_then(suffix)
        .unwrap_or(b"+proto");
    let family = match mode {
        Mode::Binary => WEB,
        Mode::Text => WEB_TEXT,
    };
    [family, if codec.is_empty() { b"+proto" } else { codec }].concat()
}

/// The trailer frame that ends a gRPC-Web body: flag `0x80`, the length, then each trailer
/// as `name:value\r\n` (names are lowercase in HTTP/2).
pub fn trailer_frame(trailers: &[(Vec<u8>, Vec<u8>)], out: &mut BytesMut) {
    let mut block = BytesMut::new();
    for (n, v) in trailers {
        block.put_slice(n);
        block.put_u8(b':');
        block.put_slice(v);
        block.put_slice(b"\r\n");
    }
    out.put_u8(0x80);
    out.put_u32(block.len() as u32);
    out.put_slice(&block);
}

/// Base64 for a text answer: each piece padded on its own, as the protocol allows.
pub fn encode_text(data: &[u8]) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .encode(data)
        .into_bytes()
}

/// Decodes a text request body as it arrives: whole groups of four characters, a group with
/// padding ending a piece (a client may pad each piece it sends).
#[derive(Debug, Default)]
pub struct TextDecoder {
    held: Vec<u8>,
}

impl TextDecoder {
    /// The bytes `data` completes; the rest is held for the next piece.
    pub fn push(&mut self, data: &[u8]) -> Result<Bytes, String> {
        self.held
            .extend(data.iter().copied().filter(|b| !b.is_ascii_whitespace()));
        let whole = self.held.len() / 4 * 4;
        let mut out = Vec::with_capacity(whole / 4 * 3);
        let mut start = 0;
        for group in (0..whole).step_by(4) {
            let padded = self.held[group + 3] == b'=';
            if padded || group + 4 == whole {
                base64::engine::general_purpose::STANDARD
                    .decode_vec(&self.held[start..group + 4], &mut out)
                    .map_err(|e| format!("gRPC-Web text body: {e}"))?;
                start = group + 4;
            }
        }
        self.held.drain(..whole);
        Ok(Bytes::from(out))
    }

    /// At the body's end: `Err` when characters are left that make no group.
    pub fn finish(&self) -> Result<(), String> {
        match self.held.is_empty() {
            true => Ok(()),
            false => Err("gRPC-Web text body: a cut base64 group".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_map_both_ways() {
        assert_eq!(
            mode(b"application/grpc-web+proto"),
            Some((Mode::Binary, &b"+proto"[..]))
        );
        assert_eq!(
            mode(b"application/grpc-web"),
            Some((Mode::Binary, &b""[..]))
        );
        assert_eq!(
            mode(b"Application/GRPC-Web-Text+proto; charset=x"),
            Some((Mode::Text, &b"+proto"[..]))
        );
        assert_eq!(mode(b"application/grpc"), None);
        assert_eq!(mode(b"application/json"), None);
        // Not gRPC-Web, or a suffix that is no token: not translated (the review of issue 55).
        for bad in [
            &b"application/grpc-webfoo"[..],
            b"application/grpc-web-json",
            b"application/grpc-web+proto,x",
            b"application/grpc-web+pr\xffoto",
            b"application/grpc-web+",
        ] {
            assert_eq!(mode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert!(is_grpc_answer(Some(b"application/grpc+proto")));
        assert!(!is_grpc_answer(Some(b"text/html")));
        assert!(!is_grpc_answer(None));
        assert_eq!(upstream_type(b"+proto"), b"application/grpc+proto");
        assert_eq!(upstream_type(b""), b"application/grpc");
        assert_eq!(
            client_type(Mode::Text, Some(b"application/grpc")),
            b"application/grpc-web-text+proto"
        );
        assert_eq!(
            client_type(Mode::Binary, Some(b"application/grpc+json")),
            b"application/grpc-web+json"
        );
        assert_eq!(
            client_type(Mode::Binary, None),
            b"application/grpc-web+proto"
        );
    }

    #[test]
    fn the_trailer_frame_is_flagged_and_framed() {
        let t = vec![
            (b"grpc-status".to_vec(), b"0".to_vec()),
            (b"grpc-message".to_vec(), b"ok".to_vec()),
        ];
        let mut out = BytesMut::new();
        trailer_frame(&t, &mut out);
        let block = b"grpc-status:0\r\ngrpc-message:ok\r\n";
        assert_eq!(out[0], 0x80);
        assert_eq!(&out[1..5], &(block.len() as u32).to_be_bytes());
        assert_eq!(&out[5..], block);
    }

    #[test]
    fn text_bodies_decode_across_pieces_and_paddings() {
        let b64 = base64::engine::general_purpose::STANDARD;
        // Two pieces each padded on its own, cut at arbitrary places.
        let whole = [b64.encode(b"hello"), b64.encode(b"gRPC-Web!")].concat();
        for cut in 0..whole.len() {
            let mut d = TextDecoder::default();
            let mut got = d.push(&whole.as_bytes()[..cut]).unwrap().to_vec();
            got.extend_from_slice(&d.push(&whole.as_bytes()[cut..]).unwrap());
            d.finish().unwrap();
            assert_eq!(got, b"hellogRPC-Web!", "cut at {cut}");
        }
        let mut d = TextDecoder::default();
        assert!(d.push(b"aGVsbG8=!!!!").is_err(), "not base64");
        let mut d = TextDecoder::default();
        d.push(b"aGV").unwrap();
        assert!(d.finish().is_err(), "a cut group");
    }
}
