//! Vary variants on disk. The index maps one key text to one record, so each variant of a
//! response that varies is also written under a key of its own: the key, then each `Vary` field
//! and the request's (normalised) value of it. The plain key holds the variant stored last,
//! whose `Vary` names the fields; a lookup whose request does not match it builds the variant
//! key from those fields and its own values and reads that. Purges match by URL, which every
//! variant key keeps.

use bytes::{BufMut, Bytes, BytesMut};

use crate::key::CacheKey;
use crate::object::CachedObject;

/// The key variant `values` of `key` is written under.
pub fn variant_key<'a>(
    key: &CacheKey,
    values: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> CacheKey {
    let mut text = BytesMut::with_capacity(key.text.len() + 64);
    text.put_slice(&key.text);
    text.put_slice(b"\0vary");
    for (name, value) in values {
        text.put_u8(0);
        text.put_slice(name.as_bytes());
        match value {
            Some(v) => {
                text.put_u8(b'=');
                text.put_slice(v);
            }
            None => text.put_u8(b'!'),
        }
    }
    let (start, end) = key.url_span();
    CacheKey::from_parts(text.freeze(), start, end).expect("the key's URL span fits")
}

/// The variant key `obj` (stored under `key`) is also written under; `None` when it does not
/// vary.
pub fn of_object(key: &CacheKey, obj: &CachedObject) -> Option<CacheKey> {
    (!obj.meta.vary.is_empty()).then(|| {
        variant_key(
            key,
            obj.meta
                .vary
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_deref())),
        )
    })
}

/// The variant key a request (its values by `value_of`) would find, given `found`: the
/// variant under the plain key, which did not match it.
pub fn for_request(
    key: &CacheKey,
    found: &CachedObject,
    value_of: &dyn Fn(&str) -> Option<Bytes>,
) -> CacheKey {
    let values: Vec<(&str, Option<Bytes>)> = found
        .meta
        .vary
        .iter()
        .map(|(n, _)| (n.as_str(), value_of(n)))
        .collect();
    variant_key(key, values.iter().map(|(n, v)| (*n, v.as_deref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_keys_differ_by_value_and_keep_the_url() {
        let key = CacheKey::from_url("http", "a/x");
        let gzip = variant_key(&key, [("accept-encoding", Some(&b"gzip"[..]))].into_iter());
        let none = variant_key(&key, [("accept-encoding", None)].into_iter());
        let br = variant_key(&key, [("accept-encoding", Some(&b"br"[..]))].into_iter());
        assert_eq!(gzip.url(), key.url());
        assert!(gzip.text != none.text && gzip.text != br.text && none.text != key.text);
    }
}
