//! `replace`: replaces a string in response bodies (nginx `sub_filter`), the first user of the
//! response-body phase. It claims a 200 response whose `Content-Type` is one of `types`
//! (`text/html` by default) and that has no `Content-Encoding`; the body then streams through
//! it with the last `from.len() - 1` bytes held back between pieces, so that a match split
//! across two pieces is found. The length changes: the claimed response loses its
//! `Content-Length` (and its `ETag`, which named the other bytes) and is sent chunked (or
//! close-delimited to HTTP/1.0). Runs after the cache: the store keeps the origin's bytes.

use bytes::BytesMut;
use weir_http::reply::DropFields;
use weir_http::{Framing, Reply};

use super::registry::{plain, Build, Built, Cx};
use super::{Caps, Phases, State};
use crate::config::{model, CompileError};

#[derive(Debug)]
pub struct Replace {
    from: Vec<u8>,
    to: Vec<u8>,
    types: Vec<String>,
}

/// The fields a claimed response loses.
#[derive(Debug)]
struct LengthAndTag;

impl DropFields for LengthAndTag {
    fn drops(&self, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"etag")
    }
}

static LENGTH_AND_TAG: LengthAndTag = LengthAndTag;

/// What a claimed response holds between pieces: the bytes that could start a match.
#[derive(Debug, Default)]
struct Tail(Vec<u8>);

impl Build<&Cx<'_>> for model::ReplaceRule {
    type Output = Built;

    fn build(self, cx: &Cx<'_>) -> Built {
        plain(Replace::compile(self, cx.path)?)
    }
}

impl Replace {
    pub(crate) fn compile(r: model::ReplaceRule, path: &str) -> Result<Replace, CompileError> {
        if r.from.is_empty() {
            return Err((format!("{path}.from"), "must not be empty".into()));
        }
        Ok(Replace {
            from: r.from.into_bytes(),
            to: r.to.into_bytes(),
            types: r.types.iter().map(|t| t.to_ascii_lowercase()).collect(),
        })
    }

    fn claims(&self, reply: &Reply<'_>) -> bool {
        if reply.status != 200 || reply.field("content-encoding").is_some() {
            return false;
        }
        let Some(ct) = reply.field("content-type") else {
            return false;
        };
        let essence = ct.split(|b| *b == b';').next().unwrap_or(b"").trim_ascii();
        self.types
            .iter()
            .any(|t| essence.eq_ignore_ascii_case(t.as_bytes()))
    }
}

impl super::Filter for Replace {
    fn phases(&self) -> Phases {
        Phases::RESPONSE | Phases::BODY
    }

    fn caps(&self) -> Caps {
        Caps::STATE
    }

    fn response<'a>(&'a self, reply: &mut Reply<'a>, state: &mut State, _: &mut BytesMut) {
        if self.claims(reply) {
            reply.framing = Framing::Unknown;
            reply.drop_fields(&LENGTH_AND_TAG);
            *state = Some(Box::new(Tail::default()));
        }
    }

    fn body(&self, state: &mut State, data: &[u8], end: bool, out: &mut BytesMut) {
        let Some(tail) = state.as_mut().and_then(|s| s.downcast_mut::<Tail>()) else {
            out.extend_from_slice(data);
            return;
        };
        let mut text = std::mem::take(&mut tail.0);
        text.extend_from_slice(data);
        let finder = memchr::memmem::Finder::new(&self.from);
        let mut at = 0;
        while let Some(i) = finder.find(&text[at..]) {
            out.extend_from_slice(&text[at..at + i]);
            out.extend_from_slice(&self.to);
            at += i + self.from.len();
        }
        // Hold back what could be the start of a match that the next piece completes.
        let keep = if end {
            0
        } else {
            (self.from.len() - 1).min(text.len() - at)
        };
        out.extend_from_slice(&text[at..text.len() - keep]);
        tail.0 = text[text.len() - keep..].to_vec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::Filter;

    #[test]
    fn matches_split_across_pieces_are_replaced() {
        let r = Replace {
            from: b"internal:8080".to_vec(),
            to: b"example.com".to_vec(),
            types: vec!["text/html".into()],
        };
        let mut state: State = Some(Box::new(Tail::default()));
        let mut out = BytesMut::new();
        for (piece, end) in [
            (&b"<a href=http://inter"[..], false),
            (b"nal:8080/x>", false),
            (b"internal:8080", false),
            (b"", true),
        ] {
            r.body(&mut state, piece, end, &mut out);
        }
        assert_eq!(&out[..], b"<a href=http://example.com/x>example.com");
    }
}
