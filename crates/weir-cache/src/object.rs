//! A stored response. Its head is kept already encoded (status line and stored fields, ending
//! with `Content-Length`), so a hit is the head, `Age`/`Cache-Status`, and the body `Bytes`.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use weir_http::Header;

use crate::policy::{AgeClock, Storable};

/// Per-object memory counted against the byte limit besides the bytes of its head, body, field
/// table and Vary values:
/// * the object itself behind its `Arc` (`size_of::<CachedObject>()` + 16);
/// * the store's entry: a hash-map slot of about 120 bytes at a load between 7/16 and 7/8
///   (≈ 185), the variants vector (32), the FIFO queue slot with slack (32) and the ghost list's
///   two slots (≈ 48): 300 in all;
/// * the allocator's header on each of the object's eight or so allocations (16 each) and the
///   shared-buffer headers of its `Bytes` (2 × 32).
///
/// Counting less (a flat 256 bytes, field table ignored) let RSS run at 2.5–3.5× `max_size` with
/// small objects; with this figure 100 B objects stay within about 1.1× (bench/cache_churn.sh).
pub const OBJECT_OVERHEAD: u64 =
    std::mem::size_of::<CachedObject>() as u64 + 16 + 300 + 8 * 16 + 2 * 32;

/// A body as stored: the bytes exactly, in an allocation of their own size. A capture buffer that
/// grew by doubling (or a slice of a larger read buffer) would otherwise hold up to twice the
/// bytes the store counts.
pub fn exact(body: BytesMut) -> Bytes {
    if body.capacity() - body.len() > body.len() / 16 + 64 {
        Bytes::copy_from_slice(&body)
    } else {
        body.freeze()
    }
}

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

/// The reason phrase and fields of `headers`, as slices of `head` (which encodes them in order:
/// status line, then `name: value\r\n` per field).
fn reslice(head: &Bytes, headers: &[Header]) -> (Bytes, Vec<Header>) {
    let line_end = head.iter().position(|b| *b == b'\r').unwrap_or(0);
    let reason = head.slice(13.min(line_end)..line_end);
    let mut at = line_end + 2;
    let mut out = Vec::with_capacity(headers.len());
    for h in headers {
        let name = head.slice(at..at + h.name.len());
        at += h.name.len() + 2;
        let value = head.slice(at..at + h.value.len());
        at += h.value.len() + 2;
        out.push(Header { name, value });
    }
    (reason, out)
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
    let reason_len = if reason.is_empty() {
        weir_http::response::reason(status).len()
    } else {
        reason.len()
    };
    let fields: usize = headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 4)
        .sum();
    // Exactly the encoded size (status line, fields, Content-Length): nothing is left over.
    let mut head = BytesMut::with_capacity(9 + 4 + reason_len + 2 + fields + 40);
    weir_http::response::put_status_line_with(&mut head, status, reason);
    for h in headers {
        weir_http::response::put_header(&mut head, &h.name, &h.value);
    }
    if let (Some(n), false) = (content_length, status == 304 || status == 204) {
        weir_http::response::put_content_length(&mut head, n);
    }
    head.freeze()
}

impl CachedObject {
    /// Builds a stored response. The fields, reason, ETag and Last-Modified it is given are
    /// usually slices of an upstream's read buffer; keeping them would pin that whole buffer for
    /// the object's life. They are re-pointed into the object's own encoded head, so an object
    /// owns exactly its head and its body.
    pub fn new(meta: ObjectMeta, reason: Bytes, headers: Vec<Header>, body: Bytes) -> CachedObject {
        let len = body.len() as u64;
        Self::with_length(meta, reason, headers, body, len)
    }

    /// [`CachedObject::new`] with the `Content-Length` of a body held elsewhere (`body` is then
    /// empty: a disk object whose body is sent from its file).
    pub fn with_length(
        mut meta: ObjectMeta,
        reason: Bytes,
        headers: Vec<Header>,
        body: Bytes,
        len: u64,
    ) -> CachedObject {
        let head = encode_head(meta.status, &reason, &headers, Some(len));
        let (reason, headers) = reslice(&head, &headers);
        let find = |name: &[u8]| {
            headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value.clone())
        };
        if meta.etag.is_some() {
            meta.etag = find(b"etag").or(meta.etag.map(|e| Bytes::copy_from_slice(&e)));
        }
        if meta.last_modified.is_some() {
            meta.last_modified =
                find(b"last-modified").or(meta.last_modified.map(|e| Bytes::copy_from_slice(&e)));
        }
        CachedObject {
            meta,
            headers,
            reason,
            head,
            body,
        }
    }

    /// Bytes counted against the store's limit: what the object really holds in memory.
    pub fn size(&self) -> u64 {
        let table = self.headers.capacity() * std::mem::size_of::<Header>();
        let vary: usize = self
            .meta
            .vary
            .iter()
            .map(|(n, v)| {
                std::mem::size_of::<(String, Option<Bytes>)>()
                    + n.capacity()
                    + v.as_ref().map_or(0, |v| v.len() + 32)
            })
            .sum();
        let tags: usize = self.meta.tags.iter().map(|t| t.capacity() + 24).sum();
        self.head.len() as u64
            + self.body.len() as u64
            + (table + vary + tags) as u64
            + OBJECT_OVERHEAD
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::{AgeClock, Storable};

    /// A plain stored-200 meta for tests (also used by the store's tests).
    pub(crate) fn meta(etag: Option<Bytes>) -> ObjectMeta {
        ObjectMeta {
            status: 200,
            storable: Storable {
                lifetime: 60,
                must_revalidate: false,
                no_cache: false,
                stale_while_revalidate: 0,
                stale_if_error: 0,
            },
            clock: AgeClock::default(),
            etag,
            last_modified: None,
            modified: 0,
            vary: Vec::new(),
            tags: Vec::new(),
            invalidated: AtomicBool::new(false),
        }
    }

    fn within(inner: &[u8], outer: &[u8]) -> bool {
        let (i, o) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
        i >= o && i + inner.len() <= o + outer.len()
    }

    /// Fields handed in as slices of a big read buffer must not keep that buffer alive.
    #[test]
    fn an_object_owns_only_its_head_and_body() {
        let read_buffer = Bytes::from(vec![b'a'; 64 * 1024]);
        let mut raw = read_buffer.to_vec();
        raw[..29].copy_from_slice(b"ETag\"v1\"Content-Typetext/html");
        let read_buffer = Bytes::from(raw);
        let headers = vec![
            Header {
                name: read_buffer.slice(0..4),
                value: read_buffer.slice(4..8),
            },
            Header {
                name: read_buffer.slice(8..20),
                value: read_buffer.slice(20..29),
            },
        ];
        let obj = CachedObject::new(
            meta(Some(read_buffer.slice(4..8))),
            read_buffer.slice(100..102),
            headers,
            Bytes::from_static(b"body"),
        );
        assert_eq!(
            &obj.head[..],
            b"HTTP/1.1 200 aa\r\nETag: \"v1\"\r\nContent-Type: text/html\r\nContent-Length: 4\r\n"
        );
        for h in &obj.headers {
            assert!(within(&h.name, &obj.head) && within(&h.value, &obj.head));
        }
        assert!(within(&obj.reason, &obj.head));
        assert!(within(obj.meta.etag.as_deref().unwrap(), &obj.head));
        assert_eq!(
            obj.header("content-type").map(|v| &v[..]),
            Some(&b"text/html"[..])
        );
        assert_eq!(&obj.reason[..], b"aa");
        // Nothing refers to the read buffer any more.
        assert!(read_buffer.is_unique());
    }

    #[test]
    fn exact_bodies_hold_no_slack() {
        let mut grown = BytesMut::with_capacity(64 * 1024);
        grown.extend_from_slice(&[b'x'; 1000]);
        let body = exact(grown);
        assert_eq!(body.len(), 1000);
        let sized = BytesMut::from(&[b'y'; 4096][..]);
        let ptr = sized.as_ptr();
        assert_eq!(
            exact(sized).as_ptr(),
            ptr,
            "an exact buffer is kept, not copied"
        );
    }

    #[test]
    fn size_counts_the_field_table_and_overhead() {
        let small = CachedObject::new(
            meta(None),
            Bytes::new(),
            Vec::new(),
            Bytes::from_static(b"x"),
        );
        assert!(small.size() > OBJECT_OVERHEAD + small.head.len() as u64);
        assert!(OBJECT_OVERHEAD >= std::mem::size_of::<CachedObject>() as u64);
    }
}
