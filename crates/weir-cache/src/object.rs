//! A stored response. Its head is kept already encoded (status line and stored fields, ending
//! with `Content-Length`), so a hit is the head, `Age`/`Cache-Status`, and the body `Bytes`.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use weir_http::Header;

use crate::policy::{AgeClock, Storable};

/// Fixed per-object overhead counted against the byte limit (metadata, map and queue slots).
pub const OBJECT_OVERHEAD: u64 = 256;

/// What policy and purges need to know about a stored response.
#[derive(Debug)]
pub struct ObjectMeta {
    pub status: u16,
    pub storable: Storable,
    pub clock: AgeClock,
    pub etag: Option<Bytes>,
    pub last_modified: Option<Bytes>,
    /// What `If-Modified-Since` compares against, in Unix seconds: `Last-Modified`, else `Date`,
    /// else the time received (RFC 9111 §4.3.2). Parsed once, when stored.
    pub modified: u64,
    /// The request's values of the response's Vary fields (lowercase name, value).
    pub vary: Vec<(String, Option<Bytes>)>,
    /// Surrogate keys / cache tags.
    pub tags: Vec<String>,
    /// Soft purge: stale from now on, to be revalidated.
    pub invalidated: AtomicBool,
}

/// A stored response.
#[derive(Debug)]
pub struct CachedObject {
    pub meta: ObjectMeta,
    /// The stored fields (hop-by-hop and framing fields removed).
    pub headers: Vec<Header>,
    pub reason: Bytes,
    /// Pre-encoded: status line, fields, `Content-Length`, without the final CRLF.
    pub head: Bytes,
    pub body: Bytes,
}

impl CachedObject {
    /// The validators client conditionals and ranges are evaluated against.
    pub fn validators(&self) -> weir_http::conditional::Validators<'_> {
        weir_http::conditional::Validators {
            etag: self.meta.etag.as_deref(),
            last_modified_text: self.meta.last_modified.as_deref(),
            modified: Some(self.meta.modified),
        }
    }
}

/// Encodes a stored-response head: status line, fields and (when known and allowed)
/// `Content-Length`, without the final CRLF. Stored objects and responses streamed to coalesced
/// waiters are both written from this.
pub fn encode_head(
    status: u16,
    reason: &[u8],
    headers: &[Header],
    content_length: Option<u64>,
) -> Bytes {
    let mut head = BytesMut::with_capacity(256);
    head.put_slice(b"HTTP/1.1 ");
    weir_http::response::put_u64(&mut head, u64::from(status));
    head.put_u8(b' ');
    if reason.is_empty() {
        head.put_slice(weir_http::response::reason(status).as_bytes());
    } else {
        head.put_slice(reason);
    }
    head.put_slice(b"\r\n");
    for h in headers {
        weir_http::response::put_header(&mut head, &h.name, &h.value);
    }
    if let (Some(n), false) = (content_length, status == 304 || status == 204) {
        weir_http::response::put_content_length(&mut head, n);
    }
    head.freeze()
}

impl CachedObject {
    pub fn new(meta: ObjectMeta, reason: Bytes, headers: Vec<Header>, body: Bytes) -> CachedObject {
        let head = encode_head(meta.status, &reason, &headers, Some(body.len() as u64));
        CachedObject {
            meta,
            headers,
            reason,
            head,
            body,
        }
    }

    /// Bytes counted against the store's limit.
    pub fn size(&self) -> u64 {
        let fields: usize = self
            .headers
            .iter()
            .map(|h| h.name.len() + h.value.len())
            .sum();
        self.head.len() as u64 + self.body.len() as u64 + fields as u64 + OBJECT_OVERHEAD
    }

    pub fn is_invalidated(&self) -> bool {
        self.meta.invalidated.load(Ordering::Relaxed)
    }

    pub fn invalidate(&self) {
        self.meta.invalidated.store(true, Ordering::Relaxed);
    }

    /// Whether this variant was stored for a request with the same values of the Vary fields.
    pub fn vary_matches(&self, value_of: impl Fn(&str) -> Option<Bytes>) -> bool {
        self.meta
            .vary
            .iter()
            .all(|(name, stored)| value_of(name) == *stored)
    }

    /// First value of a stored field.
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|h| &h.value)
    }
}
