//! Custom error pages (issue 36 §4): a listener's and a route's `error_pages` answer weir's own
//! errors (no route, a method not allowed, static files, the proxy's 502, a filter's 429) with
//! the file's bytes and type, keeping the fields those answers carry; HEAD gets the length and no
//! body; an upstream's own error response is relayed as it is; bad maps are refused by key.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::path::PathBuf;

use common::*;

fn pages(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-pages-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("404.html"), "<h1>no such page</h1>").unwrap();
    std::fs::write(dir.join("50x.html"), "<h1>we are on it</h1>").unwrap();
    std::fs::write(dir.join("api-4xx.json"), "{\"error\":\"client\"}").unwrap();
    std::fs::write(dir.join("slow-down.txt"), "slow down").unwrap();
    dir
}

fn server(dir: &std::path::Path, origin: &str) -> TestServer {
    let d = dir.display();
    start_config(&format!(
        "upstreams:\n  dead: {{ servers: ['127.0.0.1:{}'] }}\n  live: {{ servers: ['{origin}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    error_pages: {{ 404: '{d}/404.html', 5xx: '{d}/50x.html' }}\n    routes:\n      - match: {{ path_prefix: /dead/ }}\n        proxy: {{ upstream: dead }}\n      - match: {{ path_prefix: /live/ }}\n        proxy: {{ upstream: live }}\n      - match: {{ path_prefix: /api/ }}\n        error_pages: {{ 4xx: '{d}/api-4xx.json' }}\n        static: {{ root: '{d}/www' }}\n      - match: {{ path_prefix: /limited/ }}\n        filters: [ {{ rate_limit: {{ rate: 1, per: 1h, burst: 0 }} }} ]\n        error_pages: {{ 429: '{d}/slow-down.txt' }}\n        respond: {{ status: 200, body: ok }}\n      - match: {{ path_prefix: /files/ }}\n        static: {{ root: '{d}/www' }}\n",
        common::process::free_port()
    ))
}

#[test]
fn weir_s_own_errors_get_the_pages() {
    let dir = pages("own");
    let origin = common::origin::http_origin(|_| {
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 16\r\n\r\norigin's own 500".to_vec()
    });
    let srv = server(&dir, &origin.addr.to_string());

    // No route: the listener's 404 page, as HTML.
    let r = get(srv.addr, "/nowhere");
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, "<h1>no such page</h1>")
    );
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    // The proxy's 502 takes the listener's class page.
    let r = get(srv.addr, "/dead/x");
    assert_eq!(
        (r.status, r.text().as_str()),
        (502, "<h1>we are on it</h1>")
    );
    // A static 404 inside a route without pages of its own: the listener's.
    assert_eq!(
        get(srv.addr, "/files/missing").text(),
        "<h1>no such page</h1>"
    );
    // An upstream's own error is relayed as it is.
    let r = get(srv.addr, "/live/x");
    assert_eq!((r.status, r.text().as_str()), (500, "origin's own 500"));

    // A route's class page wins over the listener's exact one.
    let r = get(srv.addr, "/api/missing");
    assert_eq!(
        (r.status, r.text().as_str()),
        (404, "{\"error\":\"client\"}")
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    // No route answers a method it does not take: the listener's pages (none for 405 here:
    // weir's own body), and `Allow` is sent.
    let mut s = srv.connect();
    let r = roundtrip(
        &mut s,
        b"POST /files/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (405, "405 Method Not Allowed\n")
    );
    assert!(r.header("allow").unwrap().contains("GET"));

    // A filter's refusal: the page, with the filter's fields kept.
    assert_eq!(get(srv.addr, "/limited/a").status, 200);
    let r = get(srv.addr, "/limited/a");
    assert_eq!((r.status, r.text().as_str()), (429, "slow down"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);

    // HEAD: the page's length, no body (the connection stays usable).
    let mut s = srv.connect();
    s.write_all(b"HEAD /nowhere HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response_to(&mut s, true);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-length"), Some("21"));
    let r = roundtrip(&mut s, b"GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.text(), "<h1>no such page</h1>");
}

#[test]
fn bad_error_page_maps_are_refused_by_key() {
    let dir = pages("bad");
    std::fs::write(dir.join("huge.html"), vec![b'x'; 1024 * 1024 + 1]).unwrap();
    let d = dir.display();
    for (map, key) in [
        (
            format!("{{ 302: '{d}/404.html' }}"),
            "listeners[0].error_pages.302",
        ),
        (
            format!("{{ 6xx: '{d}/404.html' }}"),
            "listeners[0].error_pages.6xx",
        ),
        (
            format!("{{ 404: '{d}/missing.html' }}"),
            "listeners[0].error_pages.404",
        ),
        (
            format!("{{ 404: '{d}/huge.html' }}"),
            "listeners[0].error_pages.404",
        ),
    ] {
        let e = config_error(&format!(
            "listeners:\n  - address: 127.0.0.1:0\n    error_pages: {map}\n    routes: []\n"
        ));
        assert!(e.contains(key), "{map}: {e}");
    }
}
