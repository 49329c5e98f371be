//! `Cache-Status` (RFC 9211): one member for weir, with the parameters that say what happened.

use std::fmt::Write;

/// How the response relates to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Not forwarded: a hit.
    None,
    /// The cache was skipped by a rule or method.
    Bypass,
    /// No stored response for the URI.
    UriMiss,
    /// A stored response, but not for these Vary values.
    VaryMiss,
    /// The stored response was stale and was validated or refetched.
    Stale,
    /// The request asked to bypass (no-cache).
    Request,
}

impl Fwd {
    pub fn as_str(&self) -> &'static str {
        match self {
            Fwd::None => "",
            Fwd::Bypass => "bypass",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Stale => "stale",
            Fwd::Request => "request",
        }
    }
}

/// The facts rendered into one `Cache-Status` line.
#[derive(Debug, Clone, Default)]
pub struct CacheStatus {
    pub hit: bool,
    pub fwd: Option<Fwd>,
    pub fwd_status: Option<u16>,
    /// Remaining freshness in seconds (negative when stale).
    pub ttl: Option<i64>,
    pub stored: bool,
    pub collapsed: bool,
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// Appends `Cache-Status: weir; ...\r\n` (and `X-Cache` when asked) to `out`.
    pub fn render(&self, out: &mut bytes::BytesMut, x_cache: bool) {
        let mut s = String::with_capacity(64);
        s.push_str("Cache-Status: weir");
        if self.hit {
            s.push_str("; hit");
        }
        if let Some(f) = self.fwd.filter(|f| *f != Fwd::None) {
            let _ = write!(s, "; fwd={}", f.as_str());
        }
        if let Some(st) = self.fwd_status {
            let _ = write!(s, "; fwd-status={st}");
        }
        if let Some(t) = self.ttl {
            let _ = write!(s, "; ttl={t}");
        }
        if self.stored {
            s.push_str("; stored");
        }
        if self.collapsed {
            s.push_str("; collapsed");
        }
        if let Some(d) = self.detail {
            let _ = write!(s, "; detail={d}");
        }
        s.push_str("\r\n");
        if x_cache {
            s.push_str(if self.hit {
                "X-Cache: HIT\r\n"
            } else {
                "X-Cache: MISS\r\n"
            });
        }
        out.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_rfc9211_members() {
        let mut out = bytes::BytesMut::new();
        CacheStatus {
            hit: true,
            ttl: Some(42),
            ..Default::default()
        }
        .render(&mut out, true);
        assert_eq!(
            &out[..],
            b"Cache-Status: weir; hit; ttl=42\r\nX-Cache: HIT\r\n"
        );
        let mut out = bytes::BytesMut::new();
        CacheStatus {
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(200),
            stored: true,
            collapsed: true,
            ..Default::default()
        }
        .render(&mut out, false);
        assert_eq!(
            &out[..],
            b"Cache-Status: weir; fwd=uri-miss; fwd-status=200; stored; collapsed\r\n"
        );
    }
}
