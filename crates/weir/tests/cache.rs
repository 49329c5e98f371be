//! The cache over real sockets: RFC 9111 scenarios against an in-process origin, with the zone's
//! clock moved forward instead of sleeping; coalescing; memory bound; purges; Vary.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::cachekit::{cache, get, req, resp, scripted, status_of, Cache};
use common::*;

#[test]
fn miss_then_hit_with_age_and_cache_status() {
    let o = scripted(|_, n| {
        resp(
            "200 OK",
            "Cache-Control: max-age=60\r\nETag: \"v1\"\r\n",
            &format!("body {n}"),
        )
    });
    let c = cache(&o.origin, ", x_cache: true", "1m");
    // The zone's clock is the wall clock's seconds moved by `advance`: a second that ticks
    // between the miss and the hit (a loaded machine) adds one to the age. It is counted.
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let t0 = wall();
    let first = get(&c, "/a", "");
    assert_eq!(first.text(), "body 1");
    assert_eq!(
        status_of(&first),
        "weir; fwd=uri-miss; fwd-status=200; stored"
    );
    assert_eq!(first.header("x-cache"), Some("MISS"));
    c.clock.advance(5);
    let second = get(&c, "/a", "");
    let ticked = wall() - t0;
    assert_eq!(second.text(), "body 1");
    let age: u64 = second.header("age").unwrap().parse().unwrap();
    assert!(
        (5..=5 + ticked).contains(&age),
        "age {age}, {ticked} s ticked on the wall clock"
    );
    assert_eq!(status_of(&second), format!("weir; hit; ttl={}", 60 - age));
    assert_eq!(second.header("x-cache"), Some("HIT"));
    assert_eq!(o.requests(), 1);
    // HEAD from the stored GET; conditional from the client answered from cache; a range.
    let head = req(&c, "HEAD /a HTTP/1.1\r\nHost: site.test\r\n\r\n");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("6"))
    );
    let cond = get(&c, "/a", "If-None-Match: \"v1\"\r\n");
    assert_eq!((cond.status, cond.header("etag")), (304, Some("\"v1\"")));
    let range = get(&c, "/a", "Range: bytes=2-3\r\n");
    assert_eq!((range.status, range.text().as_str()), (206, "dy"));
    assert_eq!(o.requests(), 1, "all of these came from the cache");
}

#[test]
fn storability_table() {
    // (response headers, request headers, stored?)
    let cases = [
        ("Cache-Control: max-age=60\r\n", "", true),
        ("Cache-Control: no-store\r\n", "", false),
        ("Cache-Control: private, max-age=60\r\n", "", false),
        (
            "Cache-Control: max-age=60\r\n",
            "Authorization: Basic eA==\r\n",
            false,
        ),
        (
            "Cache-Control: public, max-age=60\r\n",
            "Authorization: Basic eA==\r\n",
            true,
        ),
        (
            "Cache-Control: max-age=60\r\nSet-Cookie: s=1\r\n",
            "",
            false,
        ),
        ("Cache-Control: max-age=60\r\nVary: *\r\n", "", false),
        (
            "Cache-Control: no-store\r\nCDN-Cache-Control: max-age=60\r\n",
            "",
            true,
        ),
        ("Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n", "", true),
        ("", "", false),
        (
            "Cache-Control: max-age=60\r\n",
            "Cache-Control: no-store\r\n",
            false,
        ),
    ];
    for (i, (rh, qh, stored)) in cases.iter().enumerate() {
        let owned = rh.to_string();
        let o = scripted(move |_, n| resp("200 OK", &owned, &format!("n{n}")));
        let c = cache(&o.origin, "", "1m");
        get(&c, "/x", qh);
        let again = get(&c, "/x", qh);
        assert_eq!(
            again.text() == "n1",
            *stored,
            "case {i}: {rh:?} {qh:?} -> {}",
            status_of(&again)
        );
    }
}

#[test]
fn expiry_revalidation_and_304_updates_headers() {
    let o = scripted(|req, _| {
        if req.header("if-none-match") == Some("\"v1\"") {
            resp(
                "304 Not Modified",
                "Cache-Control: max-age=100\r\nETag: \"v1\"\r\nX-Updated: yes\r\n",
                "",
            )
        } else {
            resp(
                "200 OK",
                "Cache-Control: max-age=10\r\nETag: \"v1\"\r\n",
                "payload",
            )
        }
    });
    let c = cache(&o.origin, "", "1m");
    assert_eq!(get(&c, "/r", "").text(), "payload");
    c.clock.advance(11);
    let r = get(&c, "/r", "");
    assert_eq!(r.text(), "payload");
    assert_eq!(
        status_of(&r),
        "weir; fwd=stale; fwd-status=304; ttl=100; stored"
    );
    assert_eq!(
        r.header("x-updated"),
        Some("yes"),
        "the 304's fields update the stored response"
    );
    assert_eq!(o.last().header("if-none-match"), Some("\"v1\""));
    c.clock.advance(50);
    let r = get(&c, "/r", "");
    assert_eq!(status_of(&r), "weir; hit; ttl=50");
    assert_eq!(o.requests(), 2);
}

#[test]
fn request_directives() {
    let o = scripted(|_, n| {
        resp(
            "200 OK",
            "Cache-Control: max-age=10\r\nETag: \"e\"\r\n",
            &format!("v{n}"),
        )
    });
    let c = cache(&o.origin, "", "1m");
    let r = get(&c, "/d", "Cache-Control: only-if-cached\r\n");
    assert_eq!(r.status, 504, "only-if-cached on a miss");
    get(&c, "/d", "");
    c.clock.advance(15);
    assert_eq!(
        get(&c, "/d", "Cache-Control: max-stale=10\r\n").text(),
        "v1",
        "stale by 5, max-stale 10"
    );
    assert_eq!(
        get(&c, "/d", "Cache-Control: only-if-cached\r\n").status,
        504,
        "stale and only-if-cached"
    );
    let r = get(&c, "/d", "Cache-Control: no-cache\r\n");
    assert!(status_of(&r).contains("fwd=stale"), "{}", status_of(&r));
    c.clock.advance(-15);
    assert_eq!(o.requests(), 2);
}

#[test]
fn stale_while_revalidate_and_stale_if_error() {
    let o = scripted(|_, n| {
        resp(
            "200 OK",
            "Cache-Control: max-age=10, stale-while-revalidate=30, stale-if-error=300\r\n",
            &format!("v{n}"),
        )
    });
    let c = cache(&o.origin, "", "1m");
    get(&c, "/s", "");
    c.clock.advance(20);
    let r = get(&c, "/s", "");
    assert_eq!(r.text(), "v1", "served stale at once");
    assert!(status_of(&r).contains("detail=stale-while-revalidate"));
    common::until("a background revalidation", Duration::from_secs(10), || {
        o.requests() >= 2
    });
    // Stale hits meanwhile start no other refresh (the refresh leads the key).
    let refreshed = common::until_value(
        "the refreshed response stored",
        Duration::from_secs(10),
        || get(&c, "/s", "").text(),
        |text| text != "v1",
    );
    assert_eq!(refreshed, "v2", "refreshed in the background");

    // Origin gone: stale-if-error serves the stored response.
    let c2_origin = scripted(|_, _| {
        resp(
            "200 OK",
            "Cache-Control: max-age=10, stale-if-error=300\r\n",
            "kept",
        )
    });
    let c2 = cache(&c2_origin.origin, "", "1m");
    get(&c2, "/e", "");
    drop(c2_origin);
    c2.clock.advance(60);
    let r = get(&c2, "/e", "");
    assert_eq!((r.status, r.text().as_str()), (200, "kept"));
    assert!(
        status_of(&r).contains("detail=stale-if-error"),
        "{}",
        status_of(&r)
    );
}

#[test]
fn vary_matrix() {
    let o = scripted(|req, _| {
        let ae = req.header("accept-encoding").unwrap_or("none").to_string();
        resp(
            "200 OK",
            "Cache-Control: max-age=60\r\nVary: Accept-Encoding, X-Lang\r\n",
            &ae,
        )
    });
    let c = cache(&o.origin, "", "1m");
    let cases = [
        ("Accept-Encoding: gzip\r\n", "gzip"),
        ("Accept-Encoding: gzip, deflate\r\n", "gzip"),
        ("Accept-Encoding: br, gzip\r\n", "br, gzip"),
        ("", "none"),
        ("Accept-Encoding: gzip\r\nX-Lang: fr\r\n", "gzip"),
    ];
    for (h, body) in cases {
        assert_eq!(get(&c, "/v", h).text(), body, "{h:?}");
    }
    // gzip and "gzip, deflate" normalise to one variant; br, none and gzip+X-Lang are others.
    assert_eq!(o.requests(), 4);
    for (h, body) in cases {
        let r = get(&c, "/v", h);
        assert!(status_of(&r).contains("hit"), "{h:?}: {}", status_of(&r));
        assert_eq!(r.text(), body);
    }
    assert_eq!(o.requests(), 4);
}

#[test]
fn fifty_concurrent_misses_make_one_origin_request() {
    let o = scripted(|_, n| {
        std::thread::sleep(Duration::from_millis(300));
        resp(
            "200 OK",
            "Cache-Control: max-age=60\r\n",
            &format!("only {n}"),
        )
    });
    let c = cache(&o.origin, "", "1m");
    let addr = c.srv.addr;
    let threads: Vec<_> = (0..50)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = connect(addr);
                roundtrip(&mut s, b"GET /slow HTTP/1.1\r\nHost: site.test\r\n\r\n")
            })
        })
        .collect();
    let bodies: Vec<Response> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(bodies
        .iter()
        .all(|r| r.status == 200 && r.text() == "only 1"));
    assert_eq!(o.requests(), 1);
    assert!(
        bodies
            .iter()
            .filter(|r| status_of(r).contains("collapsed"))
            .count()
            >= 40
    );

    // Uncacheable: waiters are released to fetch on their own, then hit-for-miss.
    let o = scripted(|_, n| {
        std::thread::sleep(Duration::from_millis(200));
        resp("200 OK", "Cache-Control: no-store\r\n", &format!("n{n}"))
    });
    let c = cache(&o.origin, "", "1m");
    let addr = c.srv.addr;
    let threads: Vec<_> = (0..5)
        .map(|_| {
            std::thread::spawn(move || {
                roundtrip(
                    &mut connect(addr),
                    b"GET /u HTTP/1.1\r\nHost: site.test\r\n\r\n",
                )
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap().status, 200);
    }
    assert_eq!(o.requests(), 5);
    let r = get(&c, "/u", "");
    assert!(
        status_of(&r).contains("detail=hit-for-miss"),
        "{}",
        status_of(&r)
    );
}

#[test]
fn memory_bound_holds() {
    let o = scripted(|req, _| {
        resp(
            "200 OK",
            "Cache-Control: max-age=600\r\n",
            &format!("{:>2000}", req.line),
        )
    });
    let c = cache(&o.origin, "", "256k");
    for i in 0..400 {
        assert_eq!(get(&c, &format!("/obj/{i}"), "").status, 200);
        let (_, bytes) = c.zone.store.usage();
        assert!(
            bytes <= c.zone.store.limit(),
            "{bytes} > {}",
            c.zone.store.limit()
        );
    }
    let (objects, _) = c.zone.store.usage();
    assert!(objects < 400);
    let served_before = o.requests();
    // An evicted object is really gone: asking for it goes to the origin again.
    get(&c, "/obj/0", "");
    assert_eq!(o.requests(), served_before + 1);
    let stats = admin(&c, "GET /stats");
    assert!(
        stats.contains("\"evictions\":") && !stats.contains("\"evictions\":0"),
        "{stats}"
    );
}

fn admin(c: &Cache, line: &str) -> String {
    let mut s = connect(c.admin);
    roundtrip(
        &mut s,
        format!("{line} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    )
    .text()
}

#[test]
fn purges_by_every_selector() {
    let o = scripted(|req, n| {
        let tag = if req.line.contains("/tagged") {
            "Surrogate-Key: group-a other\r\n"
        } else {
            ""
        };
        resp(
            "200 OK",
            &format!("Cache-Control: max-age=600\r\nETag: \"e{n}\"\r\n{tag}"),
            &format!("n{n}"),
        )
    });
    let c = cache(&o.origin, "", "1m");
    let fill = |paths: &[&str]| {
        for p in paths {
            get(&c, p, "");
        }
    };
    let cached = |p: &str| status_of(&get(&c, p, "")).contains("hit");
    fill(&["/p/1", "/p/2", "/q/1", "/tagged/1", "/tagged/2"]);
    assert!(cached("/p/1"));
    assert_eq!(
        admin(&c, "POST /purge?url=site.test/p/1"),
        r#"{"purged":1,"soft":false}"#
    );
    assert!(!cached("/p/1"));
    assert_eq!(
        admin(&c, "POST /purge?prefix=site.test/p/"),
        r#"{"purged":2,"soft":false}"#
    );
    assert_eq!(
        admin(&c, "POST /purge?tag=group-a"),
        r#"{"purged":2,"soft":false}"#
    );
    assert!(!cached("/tagged/2"));
    assert_eq!(
        admin(&c, "POST /purge?regex=%5Esite%5C.test%2Fq"),
        r#"{"purged":1,"soft":false}"#
    );
    fill(&["/h/1"]);
    assert!(admin(&c, "POST /purge?host=SITE.test").starts_with(r#"{"purged":"#));
    fill(&["/z/1", "/z/2"]);
    assert!(admin(&c, "POST /purge?all=1").starts_with(r#"{"purged":"#));
    assert_eq!(c.zone.store.usage().0, 0);
    // Soft purge: kept, but revalidated on next use.
    fill(&["/soft"]);
    assert_eq!(
        admin(&c, "POST /purge?url=site.test/soft&soft=1"),
        r#"{"purged":1,"soft":true}"#
    );
    let r = get(&c, "/soft", "");
    assert!(status_of(&r).contains("fwd=stale"), "{}", status_of(&r));
    assert!(o.last().header("if-none-match").is_some());
    // PURGE method from loopback; errors are JSON.
    fill(&["/m"]);
    assert_eq!(
        req(&c, "PURGE /m HTTP/1.1\r\nHost: site.test\r\n\r\n").status,
        200
    );
    assert!(!cached("/m"));
    assert!(admin(&c, "POST /purge").contains("error"));
    assert!(admin(&c, "GET /health").contains("ok"));
}

#[test]
fn unsafe_methods_invalidate_and_rules_override() {
    let o = scripted(|req, n| {
        if req.line.starts_with("POST") {
            resp("201 Created", "Location: /item/2\r\n", "made")
        } else {
            resp("200 OK", "Cache-Control: max-age=600\r\n", &format!("v{n}"))
        }
    });
    let c = cache(&o.origin, "", "1m");
    get(&c, "/item/1", "");
    get(&c, "/item/2", "");
    assert_eq!(
        req(
            &c,
            "POST /item/1 HTTP/1.1\r\nHost: site.test\r\nContent-Length: 0\r\n\r\n"
        )
        .status,
        201
    );
    assert!(
        !status_of(&get(&c, "/item/1", "")).contains("hit"),
        "target URI invalidated"
    );
    assert!(
        !status_of(&get(&c, "/item/2", "")).contains("hit"),
        "Location invalidated"
    );

    // Seed 000 rule: cache every 200 for a day whatever the origin says; bypass on a cookie.
    let o = scripted(|_, n| {
        resp(
            "200 OK",
            "Cache-Control: no-store, private\r\n",
            &format!("v{n}"),
        )
    });
    let c = cache(
        &o.origin,
        ", ttl: { '200': 1d }, ignore_origin: true, bypass: { cookies: [session] }",
        "1m",
    );
    get(&c, "/forced", "");
    let r = get(&c, "/forced", "");
    assert_eq!(
        (r.text().as_str(), status_of(&r).as_str()),
        ("v1", "weir; hit; ttl=86400")
    );
    let r = get(&c, "/forced", "Cookie: a=1; session=xyz\r\n");
    assert!(status_of(&r).contains("fwd=bypass"));
    assert_eq!(r.text(), "v2");
}

#[test]
fn bypass_by_method() {
    let o = scripted(|_, n| resp("200 OK", "Cache-Control: max-age=60\r\n", &format!("v{n}")));
    let c = cache(&o.origin, ", bypass: { methods: [head] }", "1m");
    assert_eq!(get(&c, "/m", "").text(), "v1");
    assert_eq!(status_of(&get(&c, "/m", "")), "weir; hit; ttl=60");
    let h = req(&c, "HEAD /m HTTP/1.1\r\nHost: site.test\r\n\r\n");
    assert_eq!(
        status_of(&h),
        "weir; fwd=bypass; fwd-status=200; detail=bypass-method"
    );
    assert_eq!(o.requests(), 2, "the HEAD went to the origin");
    assert_eq!(o.last().line, "HEAD /m HTTP/1.1");

    let cfg = "cache_zones: { z: { max_size: 1m } }\nupstreams: { o: { servers: ['127.0.0.1:9'] } }\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: { upstream: o }\n        cache: { zone: z, bypass: { methods: [GET, POST] } }\n";
    let err = weir::runtime::load_str(cfg, std::path::Path::new("."), |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bypass.methods[1]") && err.contains("only GET and HEAD"),
        "{err}"
    );
}

/// Reads a response head and then exactly `n` body bytes.
fn head_and(s: &mut std::net::TcpStream, n: usize) -> (String, Vec<u8>) {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut b = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        raw.push(b[0]);
    }
    let mut body = vec![0; n];
    s.read_exact(&mut body).unwrap();
    (String::from_utf8(raw).unwrap(), body)
}

#[test]
fn coalesced_followers_are_streamed_the_response_as_it_arrives() {
    use std::io::Read;
    let o = common::origin::origin(|mut c| {
        let _ = c.read(&mut [0u8; 2048]);
        let _ = c.write_all(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 10\r\n\r\nhello",
        );
        std::thread::sleep(Duration::from_millis(400));
        let _ = c.write_all(b"world");
    });
    let c = cache(&o, "", "1m");
    let addr = c.srv.addr;
    let leader = std::thread::spawn(move || {
        roundtrip(
            &mut connect(addr),
            b"GET /stream HTTP/1.1\r\nHost: site.test\r\n\r\n",
        )
        .text()
    });
    common::until(
        "the leader's fetch reached the origin",
        Duration::from_secs(10),
        || o.accepted() == 1,
    );
    let start = std::time::Instant::now();
    let mut s = connect(addr);
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let (head, first) = head_and(&mut s, 5);
    let first_at = start.elapsed();
    assert_eq!(first, b"hello");
    assert!(
        first_at < Duration::from_millis(250),
        "first half only after {first_at:?}: not streamed"
    );
    assert!(head.contains("collapsed"), "{head}");
    let mut rest = [0u8; 5];
    s.read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"world");
    assert_eq!(leader.join().unwrap(), "helloworld");
    assert_eq!(o.accepted(), 1, "one origin request for both");
    assert!(
        status_of(&get(&c, "/stream", "")).contains("hit"),
        "and it was stored"
    );
}

#[test]
fn followers_are_aborted_when_the_origin_dies_mid_body() {
    use std::io::Read;
    let o = common::origin::origin(|mut c| {
        let _ = c.read(&mut [0u8; 2048]);
        let _ = c.write_all(
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 10\r\n\r\nhel",
        );
        std::thread::sleep(Duration::from_millis(300));
    });
    let c = cache(&o, "", "1m");
    let addr = c.srv.addr;
    let leader = std::thread::spawn(move || {
        let mut s = connect(addr);
        s.write_all(b"GET /dies HTTP/1.1\r\nHost: site.test\r\n\r\n")
            .unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        all
    });
    common::until(
        "the leader's fetch reached the origin",
        Duration::from_secs(10),
        || o.accepted() == 1,
    );
    let mut s = connect(addr);
    s.write_all(b"GET /dies HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    assert!(
        text.contains("Content-Length: 10") && text.ends_with("\r\n\r\nhel"),
        "follower: {text}"
    );
    assert!(String::from_utf8_lossy(&leader.join().unwrap()).ends_with("\r\n\r\nhel"));
    assert_eq!(o.accepted(), 1);
}

#[test]
fn write_timeout_bounds_each_stall_of_a_large_hit_not_the_transfer() {
    // timeouts.write is 400ms. A client that reads a 16 MiB hit steadily, but slower than that
    // in total, gets all of it; a client that stops reading is dropped.
    let big = "0123456789abcdef".repeat(16 * 1024 * 1024 / 16);
    let big2 = big.clone();
    let o = scripted(move |_, _| resp("200 OK", "Cache-Control: max-age=600\r\n", &big2));
    let yaml = format!(
        "workers: 1\ntimeouts: {{ write: 400ms }}\ncache_zones:\n  main: {{ max_size: 64m, shards: SHARDS }}\nupstreams:\n  o:\n    servers: ['{}']\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n        cache: {{ zone: main, max_object_size: 32m }}\n",
        o.origin.addr
    );
    // An object must fit in one shard: 64m over 16 shards cannot take 32m objects.
    let err = weir::runtime::load_str(
        &yaml.replace("SHARDS", "16"),
        std::path::Path::new("."),
        |_| None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("cache.max_object_size") && err.contains("one shard"),
        "{err}"
    );
    let srv = start_config(&yaml.replace("SHARDS", "2"));
    let request = b"GET /big HTTP/1.1\r\nHost: site.test\r\n\r\n";
    assert_eq!(
        roundtrip(&mut srv.connect(), request).body.len(),
        big.len(),
        "the miss"
    );

    use std::io::Read;
    let started = std::time::Instant::now();
    let mut steady = srv.connect();
    steady.write_all(request).unwrap();
    let mut got = 0;
    let mut chunk = vec![0u8; 1 << 20];
    while got < big.len() {
        // paces: a steady reader, a read every 100 ms.
        std::thread::sleep(Duration::from_millis(100));
        let n = steady.read(&mut chunk).unwrap();
        assert!(n > 0, "dropped after {got} bytes");
        got += n;
    }
    assert!(
        started.elapsed() > Duration::from_millis(800),
        "the transfer should outlast the write timeout to prove anything"
    );

    let mut stalled = srv.connect();
    stalled.write_all(request).unwrap();
    // paces: the client stops reading for 1.5 s, well past the 400 ms write timeout.
    std::thread::sleep(Duration::from_millis(1500));
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(
        rest.len() < big.len(),
        "a client that stopped reading for longer than timeouts.write was not dropped"
    );
    assert_eq!(o.requests(), 1);
}

/// Issue 33 §3: `ttl: {"200": 1h}` lost to the Last-Modified heuristic when the origin sent
/// no explicit freshness. A configured ttl now applies whenever the origin gives none, as
/// nginx's `proxy_cache_valid` does; explicit freshness still wins.
#[test]
fn a_configured_ttl_wins_over_the_last_modified_heuristic() {
    let o = scripted(|req, n| {
        let now = std::time::SystemTime::now();
        let lm = httpdate::fmt_http_date(now - Duration::from_secs(10_000));
        let extra = if req.line.contains("/explicit") {
            format!("Last-Modified: {lm}\r\nCache-Control: max-age=7\r\n")
        } else {
            format!("Last-Modified: {lm}\r\n")
        };
        resp("200 OK", &extra, &format!("body {n}"))
    });
    let c = cache(&o.origin, ", ttl: { '200': 1h }", "1m");
    get(&c, "/lm", "");
    let hit = get(&c, "/lm", "");
    let status = status_of(&hit);
    assert!(status.starts_with("weir; hit; ttl=3"), "{status}");
    let ttl: u64 = status.rsplit("ttl=").next().unwrap().parse().unwrap();
    assert!(ttl > 3500, "the heuristic (1000 s) won: {status}");
    get(&c, "/explicit", "");
    let hit = get(&c, "/explicit", "");
    assert!(
        status_of(&hit).ends_with("ttl=7") || status_of(&hit).ends_with("ttl=6"),
        "{}",
        status_of(&hit)
    );
}

/// Issue 33 §5: a response with `Set-Cookie2` was stored and shared as if it set no cookie.
#[test]
fn set_cookie2_keeps_a_response_private_as_set_cookie_does() {
    let o = scripted(|_, n| {
        resp(
            "200 OK",
            "Cache-Control: max-age=60\r\nSet-Cookie2: session=abc; Version=1\r\n",
            &format!("body {n}"),
        )
    });
    let c = cache(&o.origin, "", "1m");
    assert_eq!(get(&c, "/a", "").text(), "body 1");
    assert_eq!(
        get(&c, "/a", "").text(),
        "body 2",
        "a Set-Cookie2 response was shared"
    );
}
