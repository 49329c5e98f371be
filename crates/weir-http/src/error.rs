//! The one error type of the codec. Every variant knows the status code a server answers with; a
//! parse error always means the framing of the connection can no longer be trusted, so the caller
//! closes the connection after sending it.

use std::fmt;

/// Why a message could not be parsed or framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed syntax or ambiguous framing (400). The string says what was wrong.
    BadRequest(&'static str),
    /// The request target is longer than the configured limit (414).
    UriTooLong,
    /// The header section is larger than the configured limit or has too many fields (431).
    HeadTooLarge,
    /// The declared or actual body is larger than the configured limit (413).
    BodyTooLarge,
    /// An `HTTP/x.y` version this server does not speak (505).
    VersionNotSupported,
    /// A transfer coding other than `chunked` that we cannot decode (501).
    NotImplemented(&'static str),
    /// An `Expect` value other than `100-continue` (417).
    ExpectationFailed,
}

impl ParseError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            ParseError::BadRequest(_) => 400,
            ParseError::UriTooLong => 414,
            ParseError::HeadTooLarge => 431,
            ParseError::BodyTooLarge => 413,
            ParseError::VersionNotSupported => 505,
            ParseError::NotImplemented(_) => 501,
            ParseError::ExpectationFailed => 417,
        }
    }

    /// A short, stable description for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            ParseError::BadRequest(why) => why,
            ParseError::UriTooLong => "request target too long",
            ParseError::HeadTooLarge => "header section too large",
            ParseError::BodyTooLarge => "body too large",
            ParseError::VersionNotSupported => "HTTP version not supported",
            ParseError::NotImplemented(why) => why,
            ParseError::ExpectationFailed => "unsupported expectation",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.status())
    }
}

impl std::error::Error for ParseError {}
