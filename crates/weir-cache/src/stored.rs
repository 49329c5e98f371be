//! Building, refreshing and invalidating stored responses: what the cache phase
//! (`weir/src/pipeline/cache/`) does with a response once policy said yes, as pure functions
//! with table tests.

use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use weir_http::hop::{is_hop_by_hop, ConnectionTokens};
use weir_http::{Header, ResponseHead};

use crate::object::{CachedObject, ObjectMeta};
use crate::policy::{self, http_date, storable, values, AgeClock, Storable, StoreRules};

/// The fields kept when a response is stored (and shown to coalesced followers): hop-by-hop
/// fields, Content-Length (re-added from the body), Age (recomputed) and the fields a
/// `Cache-Control: no-cache="..."` lists are dropped.
pub fn stored_headers(headers: &[Header]) -> Vec<Header> {
    let tokens = ConnectionTokens::of(headers);
    let unstored = unstored_fields(headers);
    headers
        .iter()
        .filter(|h| {
            !is_hop_by_hop(&h.name, &tokens)
                && !h.name.eq_ignore_ascii_case(b"content-length")
                && !h.name.eq_ignore_ascii_case(b"age")
                && !unstored.iter().any(|n| h.name.eq_ignore_ascii_case(n))
        })
        .cloned()
        .collect()
}

/// The fields `Cache-Control: no-cache="a, b"` says are never reused from the cache (RFC 9111
/// §5.2.2.4): not stored, so no hit shows them.
fn unstored_fields(headers: &[Header]) -> Vec<Vec<u8>> {
    if !headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case(b"cache-control") && may_qualify_no_cache(&h.value))
    {
        return Vec::new();
    }
    crate::directives::Directives::parse(values(headers, "cache-control")).no_cache_fields
}

/// Whether a Cache-Control value may hold a qualified `no-cache` (a `=` after `no-cache`).
fn may_qualify_no_cache(v: &[u8]) -> bool {
    v.windows(9).any(|w| w.eq_ignore_ascii_case(b"no-cache="))
}

/// The stored form of a response to a request with fields `req_headers`. `s`: what policy said
/// (`None`: a response kept only to answer this request, fresh for no time).
pub fn build(
    req_headers: &[Header],
    resp: &ResponseHead,
    body: Bytes,
    (request_time, response_time): (u64, u64),
    normalize_ae: bool,
    s: Option<Storable>,
) -> CachedObject {
    let mut vary = Vec::new();
    for v in values(resp.headers(), "vary") {
        for name in v.split(|b| *b == b',') {
            let name = String::from_utf8_lossy(name.trim_ascii()).to_ascii_lowercase();
            if !name.is_empty() {
                let value = crate::vary::request_value(req_headers, &name, normalize_ae);
                vary.push((name, value));
            }
        }
    }
    let mut tags = Vec::new();
    for v in values(resp.headers(), "surrogate-key") {
        tags.extend(
            v.split(|b| *b == b' ')
                .filter(|t| !t.is_empty())
                .map(|t| String::from_utf8_lossy(t).into_owned()),
        );
    }
    for v in values(resp.headers(), "cache-tag") {
        tags.extend(
            v.split(|b| *b == b',')
                .map(|t| t.trim_ascii())
                .filter(|t| !t.is_empty())
                .map(|t| String::from_utf8_lossy(t).into_owned()),
        );
    }
    let storable = s.unwrap_or(Storable {
        lifetime: 0,
        must_revalidate: false,
        no_cache: false,
        stale_while_revalidate: 0,
        stale_if_error: 0,
    });
    let clock = AgeClock::new(request_time, response_time, resp.headers());
    let last_modified = resp.header_bytes("last-modified");
    let meta = ObjectMeta {
        status: resp.status,
        storable,
        clock,
        etag: resp.header_bytes("etag"),
        modified: http_date(last_modified.as_deref()).unwrap_or(clock.date),
        last_modified,
        vary,
        tags,
        invalidated: AtomicBool::new(false),
    };
    CachedObject::new(
        meta,
        resp.reason.clone(),
        stored_headers(resp.headers()),
        body,
    )
}

/// `Vary` with `Accept-Encoding` merged in; `None` when it already says so (or `*`).
pub fn merged_vary(existing: Option<&[u8]>) -> Option<Vec<u8>> {
    match existing {
        None => Some(b"Accept-Encoding".to_vec()),
        Some(v) => {
            let has = v.split(|b| *b == b',').any(|m| {
                let m = m.trim_ascii();
                m == b"*" || m.eq_ignore_ascii_case(b"accept-encoding")
            });
            (!has).then(|| [v.trim_ascii(), b", Accept-Encoding"].concat())
        }
    }
}

/// A strong validator made weak (`"x"` → `W/"x"`); a weak one as it is. A transformed body is
/// not the same bytes, but it means the same (RFC 9110 §8.8.1).
pub fn weak_etag(e: &[u8]) -> Vec<u8> {
    if e.starts_with(b"W/") {
        e.to_vec()
    } else {
        [b"W/", e].concat()
    }
}

/// The fields and Vary of a response a route compresses: `Vary: Accept-Encoding` merged in.
/// Stored this way, the identity body is the variant for requests that accept no coding.
pub fn with_vary_on_encoding(headers: &[Header]) -> Vec<Header> {
    let existing = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(b"vary"))
        .map(|h| &h.value[..]);
    let Some(vary) = merged_vary(existing) else {
        return headers.to_vec();
    };
    let mut out: Vec<Header> = headers
        .iter()
        .filter(|h| !h.name.eq_ignore_ascii_case(b"vary"))
        .cloned()
        .collect();
    out.push(Header {
        name: Bytes::from_static(b"Vary"),
        value: Bytes::from(vary),
    });
    out
}

/// The variant of a stored identity response in content coding `coding` (`br`, `zstd`,
/// `gzip`), with its body already encoded: `Content-Encoding`, a weak `ETag`, `Vary:
/// Accept-Encoding`, and the Vary value `coding` for `accept-encoding`; freshness, tags and
/// the rest as the base's.
pub fn encoded_variant(base: &CachedObject, coding: &'static str, body: Bytes) -> CachedObject {
    let etag = base.meta.etag.as_deref().map(|e| Bytes::from(weak_etag(e)));
    let mut headers: Vec<Header> = with_vary_on_encoding(&base.headers)
        .into_iter()
        .filter(|h| !h.name.eq_ignore_ascii_case(b"etag"))
        .collect();
    headers.push(Header {
        name: Bytes::from_static(b"Content-Encoding"),
        value: Bytes::from_static(coding.as_bytes()),
    });
    if let Some(e) = &etag {
        headers.push(Header {
            name: Bytes::from_static(b"ETag"),
            value: e.clone(),
        });
    }
    let mut vary: Vec<(String, Option<Bytes>)> = base
        .meta
        .vary
        .iter()
        .filter(|(n, _)| n != "accept-encoding")
        .cloned()
        .collect();
    vary.push((
        "accept-encoding".to_string(),
        Some(Bytes::from_static(coding.as_bytes())),
    ));
    let meta = ObjectMeta {
        status: base.meta.status,
        storable: base.meta.storable.clone(),
        clock: base.meta.clock,
        etag,
        // Not kept for `If-Range`: the bytes of this encoding run differ from those a client
        // got streamed on the miss under the same Last-Modified, so a range resumed by date
        // would splice two runs (issue 33 §5). Without it, If-Range never matches here and
        // the client gets the whole variant. (The field is still sent; 304s use `modified`.)
        last_modified: None,
        modified: base.meta.modified,
        vary,
        tags: base.meta.tags.clone(),
        invalidated: AtomicBool::new(false),
    };
    CachedObject::new(meta, base.reason.clone(), headers, body)
}

/// The stored response updated by a 304 (RFC 9111 §4.3.4 and §3.2): its fields replaced by the
/// 304's, except those [`updates_stored`] keeps out; freshness and validators recomputed.
pub fn refreshed(
    obj: &CachedObject,
    not_modified: &[Header],
    (request_time, response_time): (u64, u64),
    rules: &StoreRules,
) -> CachedObject {
    let tokens = ConnectionTokens::of(not_modified);
    let updates: Vec<&Header> = not_modified
        .iter()
        .filter(|h| !is_hop_by_hop(&h.name, &tokens) && updates_stored(&h.name, rules))
        .collect();
    let mut headers: Vec<Header> = obj
        .headers
        .iter()
        .filter(|h| !updates.iter().any(|u| u.name.eq_ignore_ascii_case(&h.name)))
        .cloned()
        .collect();
    headers.extend(updates.into_iter().cloned());
    let unstored = unstored_fields(&headers);
    headers.retain(|h| !unstored.iter().any(|n| h.name.eq_ignore_ascii_case(n)));
    let s = storable(
        &weir_http::Method::Get,
        &[],
        obj.meta.status,
        &headers,
        rules,
        response_time,
    )
    .unwrap_or(obj.meta.storable.clone());
    let clock = AgeClock::new(request_time, response_time, &headers);
    let find = |name: &[u8]| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.clone())
    };
    let last_modified = find(b"last-modified");
    let meta = ObjectMeta {
        status: obj.meta.status,
        storable: s,
        clock,
        etag: find(b"etag"),
        modified: policy::http_date(last_modified.as_deref()).unwrap_or(clock.date),
        last_modified,
        vary: obj.meta.vary.clone(),
        tags: obj.meta.tags.clone(),
        invalidated: AtomicBool::new(false),
    };
    CachedObject::new(meta, obj.reason.clone(), headers, obj.body.clone())
}

/// Whether a field of a 304 replaces the stored one (RFC 9111 §3.2). Not: Content-Length (the
/// stored body's), Age (the clock's), the fields that describe the stored body's bytes
/// (Content-Encoding, Content-Range, Transfer-Encoding: a 304 that changed them would mislabel
/// the body, the §3.2 exception "to assure integrity"), and Set-Cookie/Set-Cookie2 unless the
/// zone shares cookies: a cookie in a 304 is the revalidating client's, and merged into the
/// shared object it went to every later client (see [`own_fields_of_304`]).
pub fn updates_stored(name: &[u8], rules: &StoreRules) -> bool {
    let never = [
        &b"content-length"[..],
        b"age",
        b"content-encoding",
        b"content-range",
        b"transfer-encoding",
    ];
    if never.iter().any(|n| name.eq_ignore_ascii_case(n)) {
        return false;
    }
    rules.share_set_cookie || !is_set_cookie(name)
}

/// The fields of a 304 that the client whose request caused the revalidation gets but the stored
/// object does not (its Set-Cookie, when the zone does not share cookies), encoded as lines.
pub fn own_fields_of_304(not_modified: &[Header], rules: &StoreRules) -> Vec<u8> {
    let mut out = Vec::new();
    if rules.share_set_cookie {
        return out;
    }
    for h in not_modified.iter().filter(|h| is_set_cookie(&h.name)) {
        out.extend_from_slice(&h.name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&h.value);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn is_set_cookie(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"set-cookie") || name.eq_ignore_ascii_case(b"set-cookie2")
}

/// If-None-Match / If-Modified-Since fields (encoded lines) for revalidating `obj`.
pub fn revalidation_fields(obj: &CachedObject) -> Vec<u8> {
    let mut v = Vec::new();
    if let Some(e) = &obj.meta.etag {
        v.extend_from_slice(b"If-None-Match: ");
        v.extend_from_slice(e);
        v.extend_from_slice(b"\r\n");
    }
    if let Some(lm) = &obj.meta.last_modified {
        v.extend_from_slice(b"If-Modified-Since: ");
        v.extend_from_slice(lm);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Fields a 304 repeats (RFC 9110 §15.4.5).
pub fn keeps_on_304(name: &[u8]) -> bool {
    [
        &b"etag"[..],
        b"last-modified",
        b"cache-control",
        b"expires",
        b"vary",
        b"content-location",
        b"date",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// RFC 9111 §4.4: the URLs (`authority` + path) a successful unsafe request invalidates: its
/// own target and the same-origin `Location` and `Content-Location`. Nothing after a 1xx, 4xx
/// or 5xx.
pub fn invalidated_urls(
    authority: &[u8],
    path_and_query: &[u8],
    status: u16,
    locations: [Option<&[u8]>; 2],
) -> Vec<Vec<u8>> {
    if !(200..400).contains(&status) {
        return Vec::new();
    }
    let mut urls = vec![[authority, path_and_query].concat()];
    for v in locations.into_iter().flatten() {
        if v.starts_with(b"/") {
            urls.push([authority, v].concat());
        } else if let Some(rest) = v.strip_prefix(b"http://") {
            // Same origin only: the authority compares case-insensitively, the path exactly.
            let end = rest.iter().position(|b| *b == b'/').unwrap_or(rest.len());
            if rest[..end].eq_ignore_ascii_case(authority) {
                let path = if end == rest.len() {
                    &b"/"[..]
                } else {
                    &rest[end..]
                };
                urls.push([authority, path].concat());
            }
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::h;
    use bytes::BytesMut;

    fn response(raw: &str) -> ResponseHead {
        let mut b = BytesMut::from(raw.as_bytes());
        weir_http::parse_response(&mut b, 64 * 1024, false)
            .unwrap()
            .unwrap()
    }

    fn names(fields: &[Header]) -> Vec<String> {
        fields
            .iter()
            .map(|f| String::from_utf8_lossy(&f.name).to_ascii_lowercase())
            .collect()
    }

    #[test]
    fn stored_fields_drop_hop_by_hop_length_and_age() {
        let kept = stored_headers(&h(&[
            ("Connection", "X-Secret"),
            ("X-Secret", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Content-Length", "3"),
            ("Age", "7"),
            ("ETag", "\"a\""),
            ("Cache-Control", "max-age=60"),
        ]));
        assert_eq!(names(&kept), ["etag", "cache-control"]);
    }

    #[test]
    fn build_records_vary_values_tags_and_validators() {
        let resp = response(
            "HTTP/1.1 200 OK\r\nVary: Accept-Language, X-Tenant\r\nSurrogate-Key: a b\r\nCache-Tag: c, d\r\nETag: \"v\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 2\r\n\r\n",
        );
        let req = h(&[("Accept-Language", "FR, en"), ("X-Tenant", "t1")]);
        let obj = build(&req, &resp, Bytes::from_static(b"hi"), (10, 11), true, None);
        assert_eq!(
            obj.meta.vary,
            vec![
                (
                    "accept-language".into(),
                    Some(Bytes::from_static(b"en, fr"))
                ),
                ("x-tenant".into(), Some(Bytes::from_static(b"t1"))),
            ]
        );
        assert_eq!(obj.meta.tags, ["a", "b", "c", "d"]);
        assert_eq!(obj.meta.etag.as_deref(), Some(&b"\"v\""[..]));
        assert_eq!(obj.meta.modified, 1_704_067_200);
        assert_eq!(
            obj.meta.storable.lifetime, 0,
            "no policy verdict: fresh for no time"
        );
        assert_eq!(
            revalidation_fields(&obj),
            b"If-None-Match: \"v\"\r\nIf-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
        );
    }

    #[test]
    fn a_304_replaces_fields_and_recomputes_freshness() {
        let resp = response(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=10\r\nETag: \"v1\"\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\n",
        );
        let old = build(&[], &resp, Bytes::from_static(b"hi"), (0, 0), false, None);
        let updated = refreshed(
            &old,
            &h(&[
                ("Cache-Control", "max-age=600"),
                ("ETag", "\"v2\""),
                ("Connection", "close"),
                ("Content-Length", "0"),
            ]),
            (100, 100),
            &StoreRules::default(),
        );
        assert_eq!(names(&updated.headers), ["x-kept", "cache-control", "etag"]);
        assert_eq!(updated.meta.storable.lifetime, 600);
        assert_eq!(updated.meta.etag.as_deref(), Some(&b"\"v2\""[..]));
        assert_eq!(&updated.body[..], b"hi");
        assert_eq!(updated.meta.clock.current_age(100), 0);
    }

    /// RFC 9111 §3.2, as a table: which fields of a 304 update the stored response.
    #[test]
    fn fields_a_304_updates() {
        let private = StoreRules::default();
        let shared = StoreRules {
            share_set_cookie: true,
            ..StoreRules::default()
        };
        for (name, updates, when_shared) in [
            ("Cache-Control", true, true),
            ("Expires", true, true),
            ("ETag", true, true),
            ("Last-Modified", true, true),
            ("Date", true, true),
            ("Vary", true, true),
            ("Content-Type", true, true),
            ("X-Custom", true, true),
            ("Content-Length", false, false),
            ("Age", false, false),
            ("Content-Encoding", false, false),
            ("Content-Range", false, false),
            ("Transfer-Encoding", false, false),
            ("Set-Cookie", false, true),
            ("set-cookie2", false, true),
        ] {
            assert_eq!(updates_stored(name.as_bytes(), &private), updates, "{name}");
            assert_eq!(
                updates_stored(name.as_bytes(), &shared),
                when_shared,
                "{name} (shared)"
            );
        }
    }

    #[test]
    fn a_304_cookie_stays_with_its_client() {
        let resp = response(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=10\r\nETag: \"v1\"\r\nContent-Length: 2\r\n\r\n",
        );
        let old = build(&[], &resp, Bytes::from_static(b"hi"), (0, 0), false, None);
        let not_modified = h(&[
            ("Cache-Control", "max-age=600"),
            ("Set-Cookie", "session=abc"),
            ("Age", "5"),
        ]);
        let rules = StoreRules::default();
        let updated = refreshed(&old, &not_modified, (100, 100), &rules);
        assert_eq!(names(&updated.headers), ["etag", "cache-control"]);
        assert_eq!(updated.meta.storable.lifetime, 600, "still storable");
        assert_eq!(
            own_fields_of_304(&not_modified, &rules),
            b"Set-Cookie: session=abc\r\n"
        );
        let shared = StoreRules {
            share_set_cookie: true,
            ..StoreRules::default()
        };
        let updated = refreshed(&old, &not_modified, (100, 100), &shared);
        assert_eq!(
            names(&updated.headers),
            ["etag", "cache-control", "set-cookie"]
        );
        assert!(own_fields_of_304(&not_modified, &shared).is_empty());
    }

    #[test]
    fn fields_a_304_repeats() {
        for (name, kept) in [
            ("ETag", true),
            ("last-modified", true),
            ("Cache-Control", true),
            ("Expires", true),
            ("Vary", true),
            ("Content-Location", true),
            ("Date", true),
            ("Content-Type", false),
            ("Set-Cookie", false),
        ] {
            assert_eq!(keeps_on_304(name.as_bytes()), kept, "{name}");
        }
    }

    #[test]
    fn unsafe_methods_invalidate_same_origin_urls_only() {
        let a = b"site.test";
        let urls = |status, loc: Option<&str>, cloc: Option<&str>| {
            invalidated_urls(
                a,
                b"/p?x=1",
                status,
                [loc.map(str::as_bytes), cloc.map(str::as_bytes)],
            )
            .into_iter()
            .map(|u| String::from_utf8(u).unwrap())
            .collect::<Vec<_>>()
        };
        assert_eq!(urls(200, None, None), ["site.test/p?x=1"]);
        assert_eq!(
            urls(201, Some("/new"), Some("http://SITE.test/Doc")),
            ["site.test/p?x=1", "site.test/new", "site.test/Doc"]
        );
        assert_eq!(
            urls(303, Some("http://other.test/x"), Some("http://site.test")),
            ["site.test/p?x=1", "site.test/"]
        );
        assert!(urls(404, Some("/new"), None).is_empty());
        assert!(urls(500, None, None).is_empty());
    }
}
