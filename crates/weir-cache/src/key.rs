//! Cache keys. The default is method class (GET and HEAD share entries) + scheme + host + path +
//! query; a [`KeySpec`] adds chosen headers, cookies or query parameters, can keep only some
//! parameters, and can sort them so that `?a=1&b=2` and `?b=2&a=1` share an entry.
//!
//! The encoding is unambiguous: `CLASS SP scheme "://" authority path ["?" query]`, then
//! `NUL "h:" name "=" value` per key header and `NUL "c:" name "=" value` per key cookie. The
//! authority comes from the parser, validated (no `/`, `?`, `#`, `@`) and normalised (lowercase,
//! no trailing dot, no default port), so the first `/` ends it; a GET/HEAD path starts with `/`
//! and holds no `?`, so the first `?` ends it; field values cannot hold NUL. Two different
//! (authority, path, query, fields) tuples therefore never share a key text, and the store
//! compares texts, not only hashes.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use bytes::Bytes;
use weir_http::{Method, RequestHead};

/// What goes into a key (compiled from the route's `cache.key`).
#[derive(Debug, Clone, Default)]
pub struct KeySpec {
    /// Header names (lowercase) whose values are part of the key.
    pub headers: Vec<String>,
    /// Cookie names whose values are part of the key.
    pub cookies: Vec<String>,
    /// Only these query parameters (in this order); `None` = the whole query string.
    pub query_params: Option<Vec<String>>,
    /// Sort the query parameters.
    pub sort_query: bool,
    /// The consumer an authentication filter named is part of the key (`NUL "u:" consumer`,
    /// last): on a route that authenticates, one consumer's response is not another's.
    pub consumer: bool,
}

/// A computed key: its text (kept to tell collisions apart and for purge matching) and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    pub text: Bytes,
    pub hash: u64,
    /// Where `host/path?query` lies in `text`, for purges by URL, host and prefix.
    url_start: usize,
    url_end: usize,
}

impl CacheKey {
    /// `host/path?query`, the part purges match against.
    pub fn url(&self) -> &[u8] {
        &self.text[self.url_start..self.url_end]
    }

    /// The same key in an allocation of exactly its size.
    pub fn compact(&self) -> CacheKey {
        CacheKey {
            text: Bytes::copy_from_slice(&self.text),
            ..self.clone()
        }
    }

    /// Where `host/path?query` lies in the text (stored with the text by the disk tier).
    pub fn url_span(&self) -> (usize, usize) {
        (self.url_start, self.url_end)
    }

    /// A key read back from disk: its text and URL span, hashed for this process. `None` if the
    /// span does not fit the text.
    pub fn from_parts(text: Bytes, url_start: usize, url_end: usize) -> Option<CacheKey> {
        (url_start <= url_end && url_end <= text.len()).then(|| CacheKey {
            hash: hash_bytes(&text),
            text,
            url_start,
            url_end,
        })
    }

    /// A key from its text alone (purge by exact URL builds one of these).
    pub fn from_url(scheme: &str, url: &str) -> CacheKey {
        let mut text = format!("GET {scheme}://");
        let url_start = text.len();
        text.push_str(url);
        let url_end = text.len();
        CacheKey {
            hash: hash_bytes(text.as_bytes()),
            text: Bytes::from(text),
            url_start,
            url_end,
        }
    }
}

/// The key text hashed for sharding and lookup. Keys come from clients, so the hash is keyed
/// with keys drawn at random per process: nobody can precompute texts that collide and push
/// each other out. aHash (its portable folded-multiply form), not std's SipHash-1-3: a hit's
/// 40-byte key took about 270 instructions to hash with SipHash, about 4% of a 1 KiB hit
/// (callgrind, 2026-11-27), and aHash is built to resist the same collision attacks.
pub fn hash_bytes(b: &[u8]) -> u64 {
    static STATE: OnceLock<ahash::RandomState> = OnceLock::new();
    STATE
        .get_or_init(|| {
            // The keys come from std's `RandomState`, which the OS's random source seeds.
            let std = std::collections::hash_map::RandomState::new();
            let key = |i: u64| std::hash::BuildHasher::hash_one(&std, i);
            ahash::RandomState::with_seeds(key(1), key(2), key(3), key(4))
        })
        .hash_one(b)
}

/// Hashing for maps and sets keyed by [`CacheKey::hash`]: that value is already a keyed hash
/// of the text, so it is used as it is instead of being hashed a second time (std's SipHash
/// of a `u64` was about 60 instructions per lookup). Only for keyed hashes: the disk tier's
/// index is keyed by `disk::stable_hash`, the same in every process (it is written to disk),
/// which anyone can compute, so that index keeps std's per-process SipHash (a table hashed by
/// it directly could be flooded with precomputed colliding URLs: found in review). Its halves are swapped: stores pick a
/// shard by the low bits (`hash % shards`), so within one shard those bits are all alike, and
/// the table picks its bucket by the low bits too.
pub type ByHash = BuildHasherDefault<HashedKey>;

/// The [`Hasher`] of [`ByHash`]: passes a `u64` through.
#[derive(Debug, Default, Clone, Copy)]
pub struct HashedKey(u64);

impl Hasher for HashedKey {
    fn finish(&self) -> u64 {
        self.0.rotate_left(32)
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    /// Only `u64` keys are meant; anything else is still mixed in (FNV-1a), never ignored.
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl KeySpec {
    /// The key of a request. Host is lowercased; the scheme is the listener's.
    pub fn key(&self, req: &RequestHead, scheme: &str) -> CacheKey {
        self.key_as(req, scheme, None)
    }

    /// [`KeySpec::key`] for a request whose consumer is known (`consumer`: part of the key
    /// when [`KeySpec::consumer`] says so; `None` is the anonymous consumer).
    pub fn key_as(&self, req: &RequestHead, scheme: &str, consumer: Option<&str>) -> CacheKey {
        let class = match req.method {
            Method::Get | Method::Head => "GET",
            ref m => m.as_str(),
        };
        self.key_in_class(req, scheme, class, consumer)
    }

    /// The key a GET of the same URI would have (a POST response stored for later GETs).
    pub fn get_key(&self, req: &RequestHead, scheme: &str) -> CacheKey {
        self.key_in_class(req, scheme, "GET", None)
    }

    /// [`KeySpec::get_key`] with the consumer, as [`KeySpec::key_as`].
    pub fn get_key_as(&self, req: &RequestHead, scheme: &str, consumer: Option<&str>) -> CacheKey {
        self.key_in_class(req, scheme, "GET", consumer)
    }

    fn key_in_class(
        &self,
        req: &RequestHead,
        scheme: &str,
        class: &str,
        consumer: Option<&str>,
    ) -> CacheKey {
        let mut text = Vec::with_capacity(64 + req.target.len());
        text.extend_from_slice(class.as_bytes());
        text.push(b' ');
        text.extend_from_slice(scheme.as_bytes());
        text.extend_from_slice(b"://");
        let url_start = text.len();
        // The parser validated and normalised the authority (absolute-form target first, else
        // Host): it holds no `/`, so the path's leading `/` ends it; the path holds no `?`.
        if let Some(a) = req.authority() {
            text.extend_from_slice(a);
        }
        text.extend_from_slice(req.path());
        if let Some(q) = self.query(req.query()) {
            text.push(b'?');
            text.extend_from_slice(&q);
        }
        let url_end = text.len();
        for name in &self.headers {
            text.extend_from_slice(b"\0h:");
            text.extend_from_slice(name.as_bytes());
            text.push(b'=');
            if let Some(v) = req.header(name) {
                text.extend_from_slice(v);
            }
        }
        for name in &self.cookies {
            text.extend_from_slice(b"\0c:");
            text.extend_from_slice(name.as_bytes());
            text.push(b'=');
            if let Some(v) = req.cookie(name) {
                text.extend_from_slice(v);
            }
        }
        if self.consumer {
            text.extend_from_slice(b"\0u:");
            text.extend_from_slice(consumer.unwrap_or("").as_bytes());
        }
        CacheKey {
            hash: hash_bytes(&text),
            text: Bytes::from(text),
            url_start,
            url_end,
        }
    }

    fn query(&self, q: Option<&[u8]>) -> Option<Vec<u8>> {
        let q = q?;
        if self.query_params.is_none() && !self.sort_query {
            return Some(q.to_vec());
        }
        let mut pairs: Vec<&[u8]> = q.split(|b| *b == b'&').filter(|p| !p.is_empty()).collect();
        if let Some(keep) = &self.query_params {
            pairs.retain(|p| {
                let name = p.split(|b| *b == b'=').next().unwrap_or(p);
                keep.iter().any(|k| k.as_bytes() == name)
            });
        }
        if self.sort_query {
            pairs.sort();
        }
        if pairs.is_empty() {
            return None;
        }
        Some(pairs.join(&b'&'))
    }
}

/// Accept-Encoding reduced to what a cache needs to tell apart: `br`, `zstd`, `gzip` or nothing
/// (identity). The coding with the highest `q` wins (RFC 9110 §12.5.3), `br`, `zstd`, `gzip` in
/// that order among equals; a coding that is not listed takes `*`'s `q` (or is refused), and
/// identity wins when its own `q` (or `*`'s; 1 when neither is given) is higher than every
/// coding's. `q=0` refuses.
pub fn normalize_accept_encoding(v: Option<&[u8]>) -> &'static [u8] {
    let Some(v) = v else { return b"" };
    // q in thousandths, by entry: br, zstd, gzip, identity, `*`.
    let mut q: [Option<u16>; 5] = [None; 5];
    for t in v.split(|b| *b == b',') {
        let mut parts = t.split(|b| *b == b';');
        let name = parts.next().unwrap_or(b"").trim_ascii();
        let slot = match name {
            n if n.eq_ignore_ascii_case(b"br") => 0,
            n if n.eq_ignore_ascii_case(b"zstd") => 1,
            n if n.eq_ignore_ascii_case(b"gzip") || n.eq_ignore_ascii_case(b"x-gzip") => 2,
            n if n.eq_ignore_ascii_case(b"identity") => 3,
            b"*" => 4,
            _ => continue,
        };
        let weight = parts
            .find_map(|p| {
                let p = p.trim_ascii();
                let v = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
                Some(qvalue(v.trim_ascii()))
            })
            .unwrap_or(1000);
        // The same coding twice: the first says (RFC 9110 leaves it open).
        q[slot].get_or_insert(weight);
    }
    let star = q[4];
    let (mut best, mut best_q) = (b"" as &'static [u8], 0u16);
    for (i, name) in [&b"br"[..], b"zstd", b"gzip"].into_iter().enumerate() {
        let w = q[i].or(star).unwrap_or(0);
        if w > best_q {
            (best, best_q) = (name, w);
        }
    }
    // Identity unlisted is acceptable, but never preferred to a coding the client listed.
    let identity = q[3].or(star).unwrap_or(0);
    if best_q == 0 || identity > best_q {
        return b"";
    }
    best
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths; anything malformed counts as 1 (as if the
/// parameter were absent).
fn qvalue(v: &[u8]) -> u16 {
    let (int, frac) = match v.iter().position(|b| *b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return 1000;
    }
    match int {
        b"0" => {
            let mut n = 0u16;
            for i in 0..3 {
                n = n * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
            }
            n
        }
        b"1" if frac.iter().all(|d| *d == b'0') => 1000,
        _ => 1000,
    }
}

#[cfg(test)]
mod tests {
    /// Hashes that share their low bits (one shard's) still spread over a table's buckets,
    /// which are picked by the low bits of what [`HashedKey`] gives.
    #[test]
    fn one_shards_hashes_spread_over_buckets() {
        use std::hash::{BuildHasher, Hasher};
        let mut buckets = std::collections::HashSet::new();
        let mut n = 0;
        for i in 0..20_000u32 {
            let h = hash_bytes(format!("GET http://h/{i}").as_bytes());
            if h % 16 != 3 {
                continue;
            }
            n += 1;
            let mut hasher = ByHash::default().build_hasher();
            hasher.write_u64(h);
            buckets.insert(hasher.finish() & 1023);
        }
        assert!(n > 1000, "{n}");
        // 1,024 buckets, over a thousand keys: nearly every bucket is used, not one in 16.
        assert!(buckets.len() > 600, "{} of 1024 buckets", buckets.len());
    }

    use super::*;
    use bytes::BytesMut;

    fn req(s: &str) -> RequestHead {
        let mut b = BytesMut::from(s.as_bytes());
        weir_http::parse_request(&mut b, &Default::default())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn accept_encoding_q_values_decide() {
        let n =
            |v: &str| std::str::from_utf8(normalize_accept_encoding(Some(v.as_bytes()))).unwrap();
        assert_eq!(n("gzip, deflate, br"), "br");
        assert_eq!(n("br;q=0.5, gzip;q=1"), "gzip");
        assert_eq!(n("br;q=0.5, gzip"), "gzip");
        assert_eq!(n("gzip;q=0.5, br;q=0.5"), "br");
        assert_eq!(n("gzip;q=0, br;q=0"), "");
        assert_eq!(n("br;q=0"), "");
        assert_eq!(n("*"), "br");
        assert_eq!(n("*;q=0.1, gzip"), "gzip");
        assert_eq!(n("gzip;q=0.5, identity"), "");
        assert_eq!(n("gzip;q=0.5, identity;q=0.2"), "gzip");
        assert_eq!(n("gzip, identity;q=0"), "gzip");
        assert_eq!(n("deflate"), "");
        assert_eq!(n("gzip;q=0.001"), "gzip");
        assert_eq!(n("gzip;q=junk"), "gzip");
        assert_eq!(n("x-gzip"), "gzip");
    }

    #[test]
    fn default_key() {
        let spec = KeySpec::default();
        let a = spec.key(
            &req("GET /a?x=1 HTTP/1.1\r\nHost: Example.COM\r\n\r\n"),
            "http",
        );
        let b = spec.key(
            &req("HEAD /a?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"),
            "http",
        );
        assert_eq!(a, b, "HEAD shares GET's entries; host case does not matter");
        assert_eq!(a.url(), b"example.com/a?x=1");
        let c = spec.key(
            &req("GET /a?x=2 HTTP/1.1\r\nHost: example.com\r\n\r\n"),
            "http",
        );
        assert_ne!(a.hash, c.hash);
    }

    #[test]
    fn the_consumer_is_part_of_the_key_when_asked() {
        let r = req("GET /p HTTP/1.1\r\nHost: h\r\n\r\n");
        let spec = KeySpec {
            consumer: true,
            ..Default::default()
        };
        let (alice, bob) = (
            spec.key_as(&r, "http", Some("alice")),
            spec.key_as(&r, "http", Some("bob")),
        );
        assert_ne!(alice, bob);
        assert_eq!(alice.url(), bob.url(), "purges by URL reach both");
        assert_ne!(spec.key_as(&r, "http", None), alice);
        let shared = KeySpec::default();
        assert_eq!(
            shared.key_as(&r, "http", Some("alice")),
            shared.key(&r, "http")
        );
    }

    #[test]
    fn configured_components() {
        let spec = KeySpec {
            headers: vec!["x-tenant".into()],
            cookies: vec!["lang".into()],
            query_params: Some(vec!["b".into(), "a".into()]),
            sort_query: true,
            consumer: false,
        };
        let k1 = spec.key(&req("GET /p?b=2&utm=x&a=1 HTTP/1.1\r\nHost: h\r\nX-Tenant: t1\r\nCookie: s=1; lang=fr\r\n\r\n"), "http");
        let k2 = spec.key(
            &req("GET /p?a=1&b=2 HTTP/1.1\r\nHost: h\r\nX-Tenant: t1\r\nCookie: lang=fr\r\n\r\n"),
            "http",
        );
        assert_eq!(k1, k2);
        let k3 = spec.key(
            &req("GET /p?a=1&b=2 HTTP/1.1\r\nHost: h\r\nX-Tenant: t2\r\nCookie: lang=fr\r\n\r\n"),
            "http",
        );
        assert_ne!(k1, k3);
    }

    #[test]
    fn accept_encoding_normalization() {
        assert_eq!(normalize_accept_encoding(Some(b"gzip, deflate, br")), b"br");
        assert_eq!(
            normalize_accept_encoding(Some(b"gzip;q=1.0, identity")),
            b"gzip"
        );
        assert_eq!(normalize_accept_encoding(Some(b"br;q=0, gzip")), b"gzip");
        assert_eq!(normalize_accept_encoding(Some(b"deflate")), b"");
        assert_eq!(normalize_accept_encoding(None), b"");
    }

    #[test]
    fn keys_use_the_validated_authority_and_never_collide() {
        let spec = KeySpec::default();
        let k = |s: &str| spec.key(&req(s), "http").text;
        // The absolute-form authority wins over Host, and is normalised like Host.
        assert_eq!(
            k("GET http://Victim.example./b/x HTTP/1.1\r\nHost: attacker.example\r\n\r\n"),
            k("GET /b/x HTTP/1.1\r\nHost: victim.example:80\r\n\r\n"),
        );
        let texts = [
            k("GET /b/x HTTP/1.1\r\nHost: victim.example\r\n\r\n"),
            k("GET /x HTTP/1.1\r\nHost: victim.example.b\r\n\r\n"),
            k("GET /b/x HTTP/1.1\r\nHost: victim.example:8080\r\n\r\n"),
            k("GET /b/x? HTTP/1.1\r\nHost: victim.example\r\n\r\n"),
            k("GET /b/x?y HTTP/1.1\r\nHost: victim.example\r\n\r\n"),
            k("GET /b/x%2By HTTP/1.1\r\nHost: victim.example\r\n\r\n"),
            k("GET /b HTTP/1.1\r\nHost: victim.example\r\n\r\n"),
            k("GET / HTTP/1.0\r\n\r\n"),
        ];
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
