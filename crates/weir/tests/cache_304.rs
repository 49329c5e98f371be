//! What a 304 may change in a stored response (RFC 9111 §3.2, §4.3.4), over real sockets. A
//! Set-Cookie in a 304 belongs to the client whose request caused the revalidation: before the
//! fix it was merged into the shared object and every later hit carried it (issue 18, item 2).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::cachekit::{cache, get, resp, scripted, status_of};

/// The first answer: fresh for 1 s, with a validator. Revalidations: a 304 that sets a cookie
/// (the second request only) and makes the object fresh for 600 s.
fn cookie_origin() -> common::cachekit::Scripted {
    scripted(|req, n| {
        if req.header("if-none-match") == Some("\"v1\"") {
            let cookie = if n == 2 {
                "Set-Cookie: session=secret\r\n"
            } else {
                ""
            };
            format!("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=600\r\n{cookie}\r\n")
        } else {
            resp(
                "200 OK",
                "Cache-Control: max-age=1\r\nETag: \"v1\"\r\n",
                "shared body",
            )
        }
    })
}

#[test]
fn a_set_cookie_from_a_304_goes_to_its_client_only() {
    let o = cookie_origin();
    let c = cache(&o.origin, "", "1m");
    let first = get(&c, "/p", "");
    assert_eq!(
        (first.text().as_str(), first.header("set-cookie")),
        ("shared body", None)
    );
    c.clock.advance(5);
    // This client's request revalidates: it gets the cookie the origin set for it.
    let revalidating = get(&c, "/p", "");
    assert_eq!(revalidating.text(), "shared body");
    assert_eq!(revalidating.header("set-cookie"), Some("session=secret"));
    assert_eq!(o.requests(), 2);
    // Every later client is served the refreshed object, without that cookie.
    for _ in 0..3 {
        let later = get(&c, "/p", "");
        assert!(status_of(&later).contains("hit"), "{}", status_of(&later));
        assert_eq!(later.header("set-cookie"), None);
        assert_eq!(later.text(), "shared body");
    }
    assert_eq!(o.requests(), 2, "the refreshed object is fresh for 600 s");
}

#[test]
fn a_zone_that_shares_cookies_stores_the_304s_cookie() {
    let o = cookie_origin();
    let c = cache(&o.origin, ", share_set_cookie: true", "1m");
    get(&c, "/p", "");
    c.clock.advance(5);
    assert_eq!(
        get(&c, "/p", "").header("set-cookie"),
        Some("session=secret")
    );
    let later = get(&c, "/p", "");
    assert!(status_of(&later).contains("hit"));
    assert_eq!(later.header("set-cookie"), Some("session=secret"));
}

/// RFC 9111 §3.2 as a table over the wire: fields a 304 updates, and those it must not.
#[test]
fn fields_a_304_updates_and_those_it_does_not() {
    let o = scripted(|req, _| {
        if req.header("if-none-match").is_some() {
            "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=600\r\nX-Version: 2\r\nContent-Type: text/x-new\r\nContent-Encoding: gzip\r\nContent-Range: bytes 0-1/2\r\nContent-Length: 99\r\nSet-Cookie2: old=1\r\n\r\n".to_string()
        } else {
            resp(
                "200 OK",
                "Cache-Control: max-age=1\r\nETag: \"v1\"\r\nX-Version: 1\r\nContent-Type: text/plain\r\n",
                "0123456789",
            )
        }
    });
    let c = cache(&o.origin, "", "1m");
    get(&c, "/t", "");
    c.clock.advance(5);
    get(&c, "/t", "");
    let hit = get(&c, "/t", "");
    assert!(status_of(&hit).contains("hit"));
    for (field, want) in [
        ("x-version", Some("2")),
        ("content-type", Some("text/x-new")),
        ("cache-control", Some("max-age=600")),
        ("content-encoding", None),
        ("content-range", None),
        ("content-length", Some("10")),
        ("set-cookie2", None),
    ] {
        assert_eq!(hit.header(field), want, "{field}");
    }
    assert_eq!(hit.text(), "0123456789");
}

/// If-Match and If-Unmodified-Since on a cache hit go through the same evaluator as static
/// files: 412 when they fail (issue 18, item 11).
#[test]
fn cache_hits_answer_412_to_failed_preconditions() {
    let o = scripted(|_, _| {
        resp(
            "200 OK",
            "Cache-Control: max-age=600\r\nETag: \"v1\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
            "stored",
        )
    });
    let c = cache(&o.origin, "", "1m");
    get(&c, "/p", "");
    for (h, status) in [
        ("If-Match: \"v1\"\r\n", 200),
        ("If-Match: \"v2\"\r\n", 412),
        (
            "If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT\r\n",
            412,
        ),
        (
            "If-Unmodified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
            200,
        ),
    ] {
        let r = get(&c, "/p", h);
        assert_eq!(r.status, status, "{h}");
        assert!(status_of(&r).contains("hit"), "{}", status_of(&r));
    }
    assert_eq!(o.requests(), 1);
}
