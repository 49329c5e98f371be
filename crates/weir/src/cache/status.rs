//! `Cache-Status` (RFC 9211): one member for weir, with the parameters that say what happened.

/// How the response relates to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
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
    /// Appends `Cache-Status: weir; ...\r\n` (and `X-Cache` when asked) to `out`, without
    /// formatting machinery: this runs on every hit.
    pub fn render(&self, out: &mut bytes::BytesMut, x_cache: bool) {
        use bytes::BufMut;
        out.put_slice(b"Cache-Status: weir");
        if self.hit {
            out.put_slice(b"; hit");
        }
        if let Some(f) = self.fwd {
            out.put_slice(b"; fwd=");
            out.put_slice(f.as_str().as_bytes());
        }
        if let Some(st) = self.fwd_status {
            out.put_slice(b"; fwd-status=");
            out.put_slice(itoa::Buffer::new().format(st).as_bytes());
        }
        if let Some(t) = self.ttl {
            out.put_slice(b"; ttl=");
            out.put_slice(itoa::Buffer::new().format(t).as_bytes());
        }
        if self.stored {
            out.put_slice(b"; stored");
        }
        if self.collapsed {
            out.put_slice(b"; collapsed");
        }
        if let Some(d) = self.detail {
            out.put_slice(b"; detail=");
            out.put_slice(d.as_bytes());
        }
        out.put_slice(b"\r\n");
        if x_cache {
            out.put_slice(if self.hit {
                b"X-Cache: HIT\r\n"
            } else {
                b"X-Cache: MISS\r\n"
            });
        }
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
