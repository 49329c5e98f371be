//! Message framing per RFC 9112 §6: which of Content-Length, chunked or "read until close" delimits
//! a body, and the checks that keep a front-end and a back-end from disagreeing about it
//! (request smuggling). Used for requests here and for upstream responses by the proxy.

use crate::error::ParseError;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`, possibly with trailers.
    Chunked,
    /// Everything until the peer closes (responses only).
    CloseDelimited,
}

/// Accumulates the framing-related header fields of one message, then decides.
#[derive(Debug, Default)]
pub(crate) struct FramingFields {
    content_length: Option<u64>,
    /// Number of transfer codings seen, and whether the last one was `chunked`.
    te_count: u32,
    te_last_chunked: bool,
    te_chunked_not_last: bool,
    te_unknown: bool,
}

impl FramingFields {
    /// Feeds one `Content-Length` field value (which may be a comma list of equal values).
    pub(crate) fn content_length(&mut self, value: &[u8]) -> Result<(), ParseError> {
        for part in value.split(|b| *b == b',') {
            let n = parse_decimal(trim_ows(part))
                .ok_or(ParseError::BadRequest("invalid Content-Length"))?;
            match self.content_length {
                Some(prev) if prev != n => {
                    return Err(ParseError::BadRequest("conflicting Content-Length values"))
                }
                _ => self.content_length = Some(n),
            }
        }
        Ok(())
    }

    /// Feeds one `Transfer-Encoding` field value (a comma list of codings).
    pub(crate) fn transfer_encoding(&mut self, value: &[u8]) -> Result<(), ParseError> {
        for part in value.split(|b| *b == b',') {
            let coding = trim_ows(part);
            if coding.is_empty() {
                continue;
            }
            // Parameters (";q=..") are not allowed on chunked and we decode nothing else.
            let name = coding.split(|b| *b == b';').next().unwrap_or(coding);
            let name = trim_ows(name);
            if self.te_last_chunked {
                self.te_chunked_not_last = true;
            }
            self.te_count += 1;
            self.te_last_chunked =
                name.eq_ignore_ascii_case(b"chunked") && name.len() == coding.len();
            if !name.eq_ignore_ascii_case(b"chunked") {
                self.te_unknown = true;
            }
        }
        Ok(())
    }

    /// Decides the body framing of a request (RFC 9112 §6.3, items 3–6).
    pub(crate) fn request_body(&self, http10: bool) -> Result<BodyKind, ParseError> {
        if self.te_count == 0 {
            return Ok(match self.content_length {
                None | Some(0) => BodyKind::Empty,
                Some(n) => BodyKind::Length(n),
            });
        }
        if self.content_length.is_some() {
            return Err(ParseError::BadRequest(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        if http10 {
            return Err(ParseError::BadRequest(
                "Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        if self.te_chunked_not_last {
            return Err(ParseError::BadRequest(
                "chunked applied more than once or not last",
            ));
        }
        if !self.te_last_chunked {
            return Err(ParseError::BadRequest(
                "final transfer coding is not chunked",
            ));
        }
        if self.te_unknown {
            return Err(ParseError::NotImplemented("unsupported transfer coding"));
        }
        Ok(BodyKind::Chunked)
    }
}

impl FramingFields {
    /// Decides the body framing of a response (RFC 9112 §6.3, items 1–7): the request method and
    /// the status code rule out a body before any field is consulted.
    pub(crate) fn response_body(
        &self,
        status: u16,
        head_request: bool,
    ) -> Result<BodyKind, ParseError> {
        if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(BodyKind::Empty);
        }
        if self.te_count > 0 {
            if self.content_length.is_some() {
                return Err(ParseError::BadRequest(
                    "both Transfer-Encoding and Content-Length",
                ));
            }
            // A coding weir does not decode (`gzip, chunked`) would reach the client as raw
            // framing, or as bytes it cannot read: refused (a 502 from the proxy).
            if self.te_unknown {
                return Err(ParseError::NotImplemented(
                    "unsupported transfer coding in response",
                ));
            }
            // A response whose final coding is not chunked is delimited by the close.
            return Ok(if self.te_last_chunked && !self.te_chunked_not_last {
                BodyKind::Chunked
            } else {
                BodyKind::CloseDelimited
            });
        }
        Ok(match self.content_length {
            Some(0) => BodyKind::Empty,
            Some(n) => BodyKind::Length(n),
            None => BodyKind::CloseDelimited,
        })
    }
}

/// Strips optional whitespace (SP / HTAB) from both ends.
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Parses `1*DIGIT` into a u64, refusing signs, empty input and overflow.
pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cl: &[&[u8]], te: &[&[u8]], http10: bool) -> Result<BodyKind, ParseError> {
        let mut f = FramingFields::default();
        for v in cl {
            f.content_length(v)?;
        }
        for v in te {
            f.transfer_encoding(v)?;
        }
        f.request_body(http10)
    }

    #[test]
    fn content_length_rules() {
        assert_eq!(req(&[b"5"], &[], false), Ok(BodyKind::Length(5)));
        assert_eq!(req(&[b"0"], &[], false), Ok(BodyKind::Empty));
        assert_eq!(req(&[b"5", b"5"], &[], false), Ok(BodyKind::Length(5)));
        assert_eq!(req(&[b"5, 5"], &[], false), Ok(BodyKind::Length(5)));
        assert!(req(&[b"5", b"6"], &[], false).is_err());
        assert!(req(&[b"5, 6"], &[], false).is_err());
        assert!(req(&[b"+5"], &[], false).is_err());
        assert!(req(&[b"-1"], &[], false).is_err());
        assert!(req(&[b"0x10"], &[], false).is_err());
        assert!(req(&[b""], &[], false).is_err());
        assert!(req(&[b"99999999999999999999999"], &[], false).is_err());
    }

    #[test]
    fn transfer_encoding_rules() {
        assert_eq!(req(&[], &[b"chunked"], false), Ok(BodyKind::Chunked));
        assert_eq!(req(&[], &[b"Chunked"], false), Ok(BodyKind::Chunked));
        assert!(req(&[b"5"], &[b"chunked"], false).is_err());
        assert!(req(&[], &[b"chunked"], true).is_err());
        assert!(req(&[], &[b"chunked, identity"], false).is_err());
        assert!(req(&[], &[b"chunked", b"chunked"], false).is_err());
        assert_eq!(
            req(&[], &[b"gzip, chunked"], false),
            Err(ParseError::NotImplemented("unsupported transfer coding"))
        );
        assert!(req(&[], &[b"gzip"], false).is_err());
    }

    #[test]
    fn response_framing() {
        let f = FramingFields::default();
        assert_eq!(f.response_body(200, false), Ok(BodyKind::CloseDelimited));
        assert_eq!(f.response_body(204, false), Ok(BodyKind::Empty));
        assert_eq!(f.response_body(304, false), Ok(BodyKind::Empty));
        assert_eq!(f.response_body(200, true), Ok(BodyKind::Empty));
        // Codings weir does not decode are refused, chunked last or not.
        for te in [&b"gzip"[..], b"gzip, chunked", b"chunked, gzip"] {
            let mut f = FramingFields::default();
            f.transfer_encoding(te).unwrap();
            assert_eq!(
                f.response_body(200, false),
                Err(ParseError::NotImplemented(
                    "unsupported transfer coding in response"
                )),
                "{te:?}"
            );
        }
        let mut f = FramingFields::default();
        f.transfer_encoding(b"chunked").unwrap();
        assert_eq!(f.response_body(200, false), Ok(BodyKind::Chunked));
        f.content_length(b"3").unwrap();
        assert!(f.response_body(200, false).is_err());
    }
}
