//! A listener's QUIC server config (`quic: true`): its TLS server config — the same
//! certificates, SNI selection, ACME certificates, session tickets and client-certificate
//! policy — with ALPN `h3` and TLS 1.3 alone (QUIC has no other), and the `http3:` limits as
//! QUIC transport parameters.
//!
//! The QUIC stack is quinn's (`quinn-proto`): it runs on the rustls and aws-lc-rs that TCP TLS
//! uses, so there is one crypto stack in the binary, and it needs nothing but Rust to build.
//! Cloudflare's quiche needs BoringSSL (cmake and a C toolchain), which the build rule
//! excludes; s2n-quic was not measured. `server/h3/` keeps quinn and the `h3` crate behind its
//! own `Downstream`, so the stack can change without touching the pipeline.
//!
//! Measured with it (`bench/h3.sh`, 2026-11-26, two runs): a 1 KiB cache hit over HTTP/3 at
//! 100 connections x 10 streams costs 14.15–17.73 µs of CPU, 0.13–0.17× Caddy/quic-go serving
//! the file and 1.81–1.95× weir's HTTP/2 over TLS under the same client (2.29–2.30× under
//! h2load); an idle connection holds 51–52 KiB, 30 of them quinn's own state (figures and the
//! profile: bench/README.md).

use super::error::TlsError;
use std::sync::Arc;
use std::time::Duration;

use crate::config::model_http3::Http3;

/// Client-initiated unidirectional streams allowed: HTTP/3 needs three (control, QPACK encoder
/// and decoder); clients also open reserved "grease" streams (RFC 9114 §6.2.3).
const UNI_STREAMS: u32 = 16;

/// The quinn server config of a listener whose TLS config is `tls`; `idle` closes a
/// connection with nothing to do (`timeouts.keepalive`).
pub(crate) fn server_config(
    tls: &rustls::ServerConfig,
    h: &Http3,
    idle: Duration,
) -> Result<quinn::ServerConfig, TlsError> {
    let mut c = tls.clone();
    // QUIC connections never park (`tls/records.rs` is for TCP records).
    c.enable_secret_extraction = false;
    c.alpn_protocols = vec![b"h3".to_vec()];
    // RFC 9001 §4.6.1: a QUIC server either takes no early data or advertises 0xffffffff.
    c.max_early_data_size = if h.early_data { u32::MAX } else { 0 };
    if h.early_data {
        // rustls takes early data only on stateful resumption: sessions kept by the server
        // (one process-wide store, across reloads), each taken once, so a replayed 0-RTT
        // flight finds nothing to resume within this process.
        c.ticketer = Arc::new(NoTickets);
        c.session_storage = early_data_sessions();
    }
    // QUIC always runs TLS 1.3; a listener limited to TLS 1.2 is refused by the caller.
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(c)).map_err(|_| {
        TlsError::config(
            "QUIC needs the TLS 1.3 cipher suite TLS13_AES_128_GCM_SHA256 (its Initial packets \
             use it): add it to `tls.ciphers`",
        )
    })?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport(h, idle)?));
    // Addresses are validated by Retry only when the handshake rate asks for it
    // (`server/h3/accept.rs`); a migrating client keeps its connection.
    config.migration(true);
    Ok(config)
}

/// Session tickets off (stateless resumption allows no early data in rustls).
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The store of resumable QUIC sessions when 0-RTT is on (one per process).
fn early_data_sessions() -> Arc<dyn rustls::server::StoresServerSessions> {
    static STORE: std::sync::OnceLock<Arc<dyn rustls::server::StoresServerSessions>> =
        std::sync::OnceLock::new();
    STORE
        .get_or_init(|| rustls::server::ServerSessionMemoryCache::new(16 * 1024))
        .clone()
}

/// The transport parameters and limits of `http3:`.
fn transport(h: &Http3, idle: Duration) -> Result<quinn::TransportConfig, TlsError> {
    let varint = |v: u64, key: &str| {
        quinn::VarInt::from_u64(v)
            .map_err(|_| TlsError::config(format_args!("http3.{key}: {v} is too large for QUIC")))
    };
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(h.max_concurrent_streams))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(UNI_STREAMS))
        .stream_receive_window(varint(h.stream_window.0, "stream_window")?)
        .receive_window(varint(h.connection_window.0, "connection_window")?)
        // What one connection may buffer to send beyond what the client acknowledged.
        .send_window(h.connection_window.0.max(1 << 20))
        .enable_segmentation_offload(h.segmentation_offload)
        // No QUIC DATAGRAM frames: HTTP/3 here has no use for them, and quinn would buffer
        // 1.25 MB of them per connection that nothing reads.
        .datagram_receive_buffer_size(None)
        .max_idle_timeout(Some(
            quinn::IdleTimeout::try_from(idle.max(Duration::from_millis(1))).map_err(|_| {
                TlsError::config("timeouts.keepalive: too long for QUIC's idle timeout")
            })?,
        ));
    Ok(t)
}

/// Checks `http3:` on its own (the ranges QUIC and HTTP/3 allow).
pub(crate) fn check(h: &Http3) -> Result<(), (String, String)> {
    let bad = |key: &str, m: &str| Err((format!("http3.{key}"), m.to_string()));
    if h.max_concurrent_streams == 0 {
        return bad("max_concurrent_streams", "must be at least 1");
    }
    if h.stream_window.0 < 1024 || h.connection_window.0 < 1024 {
        let key = if h.stream_window.0 < 1024 {
            "stream_window"
        } else {
            "connection_window"
        };
        return bad(key, "must be at least 1KiB");
    }
    if h.connection_window.0 < h.stream_window.0 {
        return bad(
            "connection_window",
            "must be at least `stream_window` (one stream could not use its own window)",
        );
    }
    if h.max_field_section_size.0 < 1024 {
        return bad("max_field_section_size", "must be at least 1KiB");
    }
    if h.max_resets_per_second == 0 {
        return bad("max_resets_per_second", "must be at least 1");
    }
    transport(h, Duration::from_secs(1)).map_err(|m| {
        let m = m.to_string();
        let key = m.split(':').next().unwrap_or("http3").to_string();
        (key, m)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::Size;

    #[test]
    fn the_limits_are_checked() {
        let ok = Http3::default();
        assert!(check(&ok).is_ok());
        type Case = (fn(&mut Http3), &'static str);
        let cases: [Case; 5] = [
            (
                |h| h.max_concurrent_streams = 0,
                "http3.max_concurrent_streams",
            ),
            (|h| h.stream_window = Size(10), "http3.stream_window"),
            (
                |h| h.connection_window = Size(128 * 1024),
                "http3.connection_window",
            ),
            (
                |h| h.max_field_section_size = Size(1),
                "http3.max_field_section_size",
            ),
            (
                |h| h.stream_window = Size(1 << 63),
                "http3.connection_window",
            ),
        ];
        for (change, key) in cases {
            let mut h = Http3::default();
            change(&mut h);
            let (k, m) = check(&h).expect_err(key);
            assert_eq!(k, key, "{m}");
        }
    }
}
