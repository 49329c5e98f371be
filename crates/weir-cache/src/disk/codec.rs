//! A cached response as a record payload, and back: the metadata policy needs, the fields (the
//! head is encoded again from them when read, as it was when stored) and the body.

use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use weir_http::Header;

use crate::key::CacheKey;
use crate::object::{CachedObject, ObjectMeta};
use crate::policy::{AgeClock, Storable};

/// Little-endian writer.
#[derive(Debug, Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A length-prefixed byte string (u32 length).
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
}

/// Little-endian reader over a record's payload; every read fails cleanly past the end.
#[derive(Debug)]
pub struct In<'a> {
    pub b: &'a [u8],
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Some(head)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Option<u32> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4)?);
        Some(u32::from_le_bytes(a))
    }
    pub fn u64(&mut self) -> Option<u64> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Some(u64::from_le_bytes(a))
    }
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

/// The payload of an object record (the key text is the record's key).
pub fn encode(key: &CacheKey, obj: &CachedObject) -> Vec<u8> {
    let m = &obj.meta;
    let mut o = Out(Vec::with_capacity(obj.head.len() + obj.body.len() + 128));
    let (us, ue) = key.url_span();
    o.u32(us as u32);
    o.u32(ue as u32);
    o.u16(m.status);
    let s = &m.storable;
    o.u64(s.lifetime);
    o.u8(u8::from(s.must_revalidate)
        | u8::from(s.no_cache) << 1
        | u8::from(obj.is_invalidated()) << 2
        | u8::from(m.etag.is_some()) << 3
        | u8::from(m.last_modified.is_some()) << 4);
    o.u64(s.stale_while_revalidate);
    o.u64(s.stale_if_error);
    for v in [
        m.clock.request_time,
        m.clock.response_time,
        m.clock.date,
        m.clock.age_value,
        m.modified,
    ] {
        o.u64(v);
    }
    o.u16(m.vary.len() as u16);
    for (name, value) in &m.vary {
        o.bytes(name.as_bytes());
        match value {
            Some(v) => {
                o.u8(1);
                o.bytes(v);
            }
            None => o.u8(0),
        }
    }
    o.u16(m.tags.len() as u16);
    for t in &m.tags {
        o.bytes(t.as_bytes());
    }
    o.bytes(&obj.reason);
    o.u32(obj.headers.len() as u32);
    for h in &obj.headers {
        o.bytes(&h.name);
        o.bytes(&h.value);
    }
    o.bytes(&obj.body);
    o.0
}

/// An object record's payload up to its body, and where the body lies in the payload.
#[derive(Debug)]
pub struct Head {
    pub key: CacheKey,
    pub meta: ObjectMeta,
    pub reason: Bytes,
    pub headers: Vec<Header>,
    /// Offset of the body's first byte in the payload, and its length.
    pub body_at: usize,
    pub body_len: usize,
}

/// An object record back: its key and the object. `None` if the payload does not parse (a
/// record from a different version, or corrupt past its checksum). With `owner`, the buffer
/// `payload` lies in, the body is a slice of it (no copy of a large body).
pub fn decode(
    owner: Option<&Bytes>,
    key_text: &[u8],
    payload: &[u8],
) -> Option<(CacheKey, CachedObject)> {
    let h = decode_head(key_text, payload)?;
    let body = payload.get(h.body_at..h.body_at + h.body_len)?;
    let body = match owner {
        Some(o) => o.slice_ref(body),
        None => Bytes::copy_from_slice(body),
    };
    Some((h.key, CachedObject::new(h.meta, h.reason, h.headers, body)))
}

/// Everything of an object record before its body; `payload` may end anywhere after the
/// body's length (the start of a record read again to send its body from the file).
pub fn decode_head(key_text: &[u8], payload: &[u8]) -> Option<Head> {
    let mut i = In { b: payload };
    let (us, ue) = (i.u32()? as usize, i.u32()? as usize);
    let key = CacheKey::from_parts(Bytes::copy_from_slice(key_text), us, ue)?;
    let status = i.u16()?;
    let lifetime = i.u64()?;
    let flags = i.u8()?;
    let storable = Storable {
        lifetime,
        must_revalidate: flags & 1 != 0,
        no_cache: flags & 2 != 0,
        stale_while_revalidate: i.u64()?,
        stale_if_error: i.u64()?,
    };
    let clock = AgeClock {
        request_time: i.u64()?,
        response_time: i.u64()?,
        date: i.u64()?,
        age_value: i.u64()?,
    };
    let modified = i.u64()?;
    let mut vary = Vec::new();
    for _ in 0..i.u16()? {
        let name = i.string()?;
        let value = match i.u8()? {
            0 => None,
            _ => Some(Bytes::copy_from_slice(i.bytes()?)),
        };
        vary.push((name, value));
    }
    let mut tags = Vec::new();
    for _ in 0..i.u16()? {
        tags.push(i.string()?);
    }
    let reason = Bytes::copy_from_slice(i.bytes()?);
    let n = i.u32()? as usize;
    let mut headers = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let name = Bytes::copy_from_slice(i.bytes()?);
        let value = Bytes::copy_from_slice(i.bytes()?);
        headers.push(Header { name, value });
    }
    let body_len = i.u32()? as usize;
    let body_at = payload.len() - i.b.len();
    // The validators are found again in the fields by `CachedObject::new`.
    let marker = || Some(Bytes::new());
    let meta = ObjectMeta {
        status,
        storable,
        clock,
        etag: if flags & 8 != 0 { marker() } else { None },
        last_modified: if flags & 16 != 0 { marker() } else { None },
        modified,
        vary,
        tags,
        invalidated: AtomicBool::new(flags & 4 != 0),
    };
    Some(Head {
        key,
        meta,
        reason,
        headers,
        body_at,
        body_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_survives_the_round_trip() {
        let mut meta = crate::object::tests::meta(Some(Bytes::from_static(b"\"v1\"")));
        meta.vary = vec![
            ("accept-encoding".into(), Some(Bytes::from_static(b"gzip"))),
            ("x-lang".into(), None),
        ];
        meta.tags = vec!["t1".into(), "t2".into()];
        meta.clock.date = 1234;
        let headers = vec![
            Header {
                name: Bytes::from_static(b"ETag"),
                value: Bytes::from_static(b"\"v1\""),
            },
            Header {
                name: Bytes::from_static(b"Content-Type"),
                value: Bytes::from_static(b"text/plain"),
            },
        ];
        let obj = CachedObject::new(
            meta,
            Bytes::from_static(b"OK"),
            headers,
            Bytes::from_static(b"hello"),
        );
        let key = CacheKey::from_url("http", "a.test/x?y=1");
        let payload = encode(&key, &obj);
        let (k2, o2) = decode(None, &key.text, &payload).unwrap();
        let owned = Bytes::from(payload.clone());
        let (_, o3) = decode(Some(&owned), &key.text, &owned).unwrap();
        assert_eq!(o3.body, obj.body);
        assert_eq!(
            o3.body.as_ptr(),
            owned[owned.len() - 5..].as_ptr(),
            "not copied"
        );
        assert_eq!((k2.text.clone(), k2.url()), (key.text.clone(), key.url()));
        assert_eq!(k2.hash, key.hash);
        assert_eq!(o2.head, obj.head);
        assert_eq!(o2.body, obj.body);
        assert_eq!(o2.meta.etag.as_deref(), Some(&b"\"v1\""[..]));
        assert_eq!(o2.meta.vary, obj.meta.vary);
        assert_eq!(o2.meta.tags, obj.meta.tags);
        assert_eq!(o2.meta.clock.date, 1234);
        for cut in 0..payload.len() {
            assert!(
                decode(None, &key.text, &payload[..cut]).is_none(),
                "cut at {cut}"
            );
        }
    }
}
