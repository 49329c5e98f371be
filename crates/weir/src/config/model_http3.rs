//! The `http3:` section: limits for every listener with `quic: true` (`server/h3/`). The
//! defaults follow HTTP/2's (`http2:`) where the protocols share a notion, and Caddy's
//! (quic-go's) where QUIC adds one.

use serde::Deserialize;

use super::units::Size;

/// HTTP/3 and QUIC limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http3 {
    /// Request streams a client may have open at once (QUIC's `initial_max_streams_bidi`;
    /// the client cannot open more until one ends).
    pub max_concurrent_streams: u32,
    /// Largest request header section, as QPACK decodes it
    /// (SETTINGS_MAX_FIELD_SECTION_SIZE); 431 beyond.
    pub max_field_section_size: Size,
    /// Each request stream's receive window.
    pub stream_window: Size,
    /// The connection's receive window.
    pub connection_window: Size,
    /// Accept requests in 0-RTT early data (replayable: unsafe methods in it are answered
    /// `425 Too Early`, RFC 8470). Off by default.
    pub early_data: bool,
    /// New QUIC handshakes per second (per worker) above which a client must first prove its
    /// address with a Retry round trip (one more RTT for it; a spoofed source never gets a
    /// connection). 0: always.
    pub retry_above: u32,
    /// Streams a client may reset (or send malformed) per second on one connection before it
    /// is closed with H3_EXCESSIVE_LOAD (the QUIC form of HTTP/2's rapid reset).
    pub max_resets_per_second: u32,
    /// Send several packets per system call with UDP generic segmentation offload
    /// (`UDP_SEGMENT`) where the kernel has it (receive offload, `UDP_GRO`, is always used
    /// where available). Off only for a network path that mishandles it.
    pub segmentation_offload: bool,
}

impl Default for Http3 {
    fn default() -> Self {
        Http3 {
            max_concurrent_streams: 100,
            max_field_section_size: Size(32 * 1024),
            stream_window: Size(256 * 1024),
            connection_window: Size(1024 * 1024),
            early_data: false,
            retry_above: 1000,
            max_resets_per_second: 100,
            segmentation_offload: true,
        }
    }
}
