//! Sans-IO HTTP/1.1 for weir.
//!
//! Everything here is a pure function over byte buffers: no sockets, no tokio. The server, the proxy
//! and the load generator all speak HTTP/1.1 through this crate, so it can be fuzzed and unit-tested
//! in microseconds and the rules about framing live in exactly one place.
//!
//! * [`authority`]: `Host` / absolute-form authority validation and normalisation.
//! * [`conditional`]: the one `Range` parser and `If-*` evaluator (static files and cache hits).
//! * [`hop`]: the hop-by-hop field table and `Connection` tokens.
//! * [`request`]: parse a request head out of a `BytesMut` (`Ok(None)` = need more bytes). Header
//!   names and values are `Bytes` slices of the read buffer, never copies.
//! * [`framing`]: RFC 9112 §6 message-body rules (Content-Length vs Transfer-Encoding, keep-alive).
//! * [`body`]: the body decoder (content-length, chunked with trailers, close-delimited).
//! * [`reply`]: the [`Reply`] every producer builds, its one HTTP/1.1 encoder, and the one
//!   chunked encoder.
//! * [`response`]: encoding helpers (status lines, headers, canned error responses).
//! * [`response_head`]: parse an upstream's response head and its framing (for the proxy).
//! * [`fields`]: a received head's fields as spans of its bytes (a relayed response's).
//! * [`date`]: the `Date` header, rendered at most once per second per thread.
//!
//! The parser is strict where leniency enables request smuggling (RFC 9112 §6.3, §11.2): both
//! Content-Length and Transfer-Encoding, differing Content-Lengths, a non-chunked final transfer
//! coding, obs-fold, whitespace before the colon and control bytes are all rejected with a
//! [`ParseError`] whose [`ParseError::status`] is the 4xx/5xx to send before closing.
//!
//! Hand-written on top of `httparse` (which does the byte-level tokenizing) because this is weir's
//! hot path: one parse, one pass over the headers to derive framing, zero copies.

pub mod authority;
pub mod body;
pub mod conditional;
pub mod date;
pub mod error;
pub mod fields;
pub mod framing;
pub mod hop;
pub mod path;
pub mod reply;
pub mod request;
pub mod response;
pub mod response_head;

pub use authority::Authority;
pub use body::{BodyDecoder, BodyEvent};
pub use error::ParseError;
pub use fields::Fields;
pub use framing::BodyKind;
pub use reply::{Base, BodyEncoding, Framing, Persistence, Reply};
pub use request::{
    header_map, parse_request, Header, Limits, Method, RequestHead, Underscores, Version,
};
pub use response_head::{parse_response, ResponseHead};
