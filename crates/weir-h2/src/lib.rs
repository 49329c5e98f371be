//! weir's HTTP/2 codec, sans-IO (issue 54): frames in and out of byte buffers ([`frame`]) and
//! HPACK ([`hpack`]), with no I/O, no allocation per frame and no `http` types, so that
//! weir's connections (server side first, upstreams after) decode straight into their own
//! heads and write stored bytes, as `weir-http` does for HTTP/1.1.
//!
//! Written by hand rather than taken from the `h2` crate: the HTTP/2 path is weir's hot path
//! and its measured cost (issue 54: 29,254 instructions per h2c hello against 4,633 over
//! HTTP/1.1, 37 KiB per idle TLS connection against 2.84) is the crate's conversions, buffers
//! and per-stream futures. This crate is the codec: frames, HPACK, stream states ([`stream`])
//! and flow-control windows ([`flow`]), the connection's start ([`preface`]), SETTINGS
//! ([`settings`]), a request's header block checked as it decodes ([`request`]), a response
//! head encoded once for any connection ([`response`]), and the flood and glitch counters
//! ([`guard`]), and on them the receiving side of a server connection ([`conn`]: bytes in,
//! events and the frames this side owes out) and a client connection ([`client`]: requests
//! out, answers in as events; weir's `protocol: h2` upstreams, issue 55 §2).
//!
//! Its tests hold it to the RFCs' own examples (RFC 7541 Appendix C) and to the errors RFC 9113
//! names for each malformed frame.

pub mod client;
pub mod conn;
pub mod flow;
pub mod frame;
pub mod guard;
pub mod hpack;
pub mod preface;
pub mod request;
pub mod response;
pub mod settings;
pub mod stream;

/// HTTP/2 error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    NoError = 0x0,
    ProtocolError = 0x1,
    InternalError = 0x2,
    FlowControlError = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSizeError = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    CompressionError = 0x9,
    ConnectError = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}
