//! The `compress` filter over real sockets: negotiation through the cache (one origin request
//! for every coding, variants stored and served as hits), streamed compression on routes
//! without a cache, what is never compressed, and precompressed static files.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::origin::{http_origin, SeenRequest};
use common::{roundtrip, start_config, Response, TestServer};

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out = body.to_vec(),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("zstd") => out = zstd::decode_all(body).unwrap(),
        Some(other) => panic!("coding {other}"),
    }
    out
}

fn page() -> String {
    (0..400)
        .map(|i| format!("<p>paragraph {i} of a page</p>\n"))
        .collect()
}

fn send(s: &TestServer, path: &str, ae: Option<&str>) -> Response {
    let mut c = s.connect();
    let ae = ae
        .map(|v| format!("Accept-Encoding: {v}\r\n"))
        .unwrap_or_default();
    roundtrip(
        &mut c,
        format!("GET {path} HTTP/1.1\r\nHost: a\r\n{ae}\r\n").as_bytes(),
    )
}

/// br, then gzip, then identity, then br again, then zstd: one origin request in all; every
/// answer decodes to the page; from the second on they are hits with a length (stored
/// variants, not compressed as they go).
#[test]
fn negotiation_through_the_cache_asks_the_origin_once() {
    let body = page();
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let (b, s2) = (body.clone(), seen.clone());
    let origin = http_origin(move |req: &SeenRequest| {
        s2.lock()
            .unwrap()
            .push(req.header("accept-encoding").map(str::to_string));
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\nVary: Origin\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .into_bytes()
    });
    let s = start_config(&format!(
        r#"
workers: 1
cache_zones: {{ z: {{ max_size: 16m }} }}
upstreams:
  app: {{ servers: ["{}"] }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - filters: [{{ compress: {{ gzip_level: 6 }} }}]
        proxy: {{ upstream: app }}
        cache: {{ zone: z }}
"#,
        origin.addr
    ));
    let check = |r: &Response, coding: Option<&str>| {
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), coding);
        assert_eq!(decode(coding, &r.body), body.as_bytes(), "{coding:?}");
        assert_eq!(r.header("vary"), Some("Origin, Accept-Encoding"));
    };
    let first = send(&s, "/p", Some("gzip, deflate, br"));
    check(&first, Some("br"));
    assert!(
        first.header("content-length").is_none(),
        "the miss is compressed as it streams"
    );
    assert_eq!(first.header("etag"), Some("W/\"v1\""));
    let r = send(&s, "/p", Some("gzip"));
    check(&r, Some("gzip"));
    assert!(
        r.header("cache-status").unwrap().starts_with("weir; hit"),
        "{:?}",
        r.header("cache-status")
    );
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    let r = send(&s, "/p", None);
    check(&r, None);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert!(r.header("cache-status").unwrap().starts_with("weir; hit"));
    let br1 = send(&s, "/p", Some("br;q=1, gzip;q=0.5"));
    check(&br1, Some("br"));
    let br2 = send(&s, "/p", Some("br"));
    check(&br2, Some("br"));
    assert_eq!(
        br1.body, br2.body,
        "the stored variant, not a new compression"
    );
    assert_eq!(
        br2.header("content-length")
            .map(|n| n.parse::<usize>().unwrap()),
        Some(br2.body.len())
    );
    assert!(br2.body.len() < body.len() / 4);
    check(&send(&s, "/p", Some("zstd, gzip;q=0")), Some("zstd"));
    check(&send(&s, "/p", Some("identity, gzip;q=0")), None);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "one origin request for every coding");
    assert_eq!(seen[0], None, "the origin is asked for identity");
    // A conditional request against a variant's weak validator.
    let mut c = s.connect();
    let r = roundtrip(
        &mut c,
        b"GET /p HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nIf-None-Match: W/\"v1\"\r\n\r\n",
    );
    assert_eq!(r.status, 304);
}

/// Routes without a cache compress as the body streams: proxied, `respond`, `echo`.
#[test]
fn responses_without_a_cache_are_compressed_as_they_stream() {
    let body = page();
    let b = body.clone();
    let origin = http_origin(move |_| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .into_bytes()
    });
    let s = start_config(&format!(
        r#"
workers: 1
upstreams:
  app: {{ servers: ["{}"] }}
filters:
  squeeze: {{ compress: {{ }} }}
listeners:
  - address: 127.0.0.1:0
    filters: [squeeze]
    routes:
      - match: {{ path: /fixed }}
        respond: {{ headers: {{ content-type: text/plain }}, body: "{}" }}
      - match: {{ path: /short }}
        respond: {{ headers: {{ content-type: text/plain }}, body: "short" }}
      - proxy: {{ upstream: app }}
"#,
        origin.addr,
        "x".repeat(5000)
    ));
    for coding in ["gzip", "br", "zstd"] {
        let r = send(&s, "/x", Some(coding));
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(decode(Some(coding), &r.body), body.as_bytes());
        let r = send(&s, "/fixed", Some(coding));
        assert_eq!(decode(Some(coding), &r.body), "x".repeat(5000).as_bytes());
    }
    let r = send(&s, "/short", Some("gzip"));
    assert_eq!(
        (r.header("content-encoding"), r.text()),
        (None, "short".to_string()),
        "under min_length"
    );
    let r = send(&s, "/x", None);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.body, body.as_bytes());
}

/// Already encoded, partial, no-transform, not a listed type, HEAD: left alone.
#[test]
fn what_is_never_compressed() {
    let body = page();
    let hits = Arc::new(AtomicUsize::new(0));
    let (b, h) = (body.clone(), hits.clone());
    let origin = http_origin(move |req: &SeenRequest| {
        h.fetch_add(1, Ordering::SeqCst);
        let path = req.line.split(' ').nth(1).unwrap().to_string();
        let (extra, body): (&str, Vec<u8>) = match path.as_str() {
            "/encoded" => ("Content-Type: text/html\r\nContent-Encoding: gzip\r\n", {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(b.as_bytes()).unwrap();
                e.finish().unwrap()
            }),
            "/keep" => (
                "Content-Type: text/html\r\nCache-Control: no-transform\r\n",
                b.clone().into_bytes(),
            ),
            "/png" => ("Content-Type: image/png\r\n", b.clone().into_bytes()),
            _ => ("Content-Type: text/html\r\n", b.clone().into_bytes()),
        };
        let mut out = format!(
            "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    });
    let s = start_config(&format!(
        "workers: 1\nupstreams:\n  app: {{ servers: [\"{}\"] }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - filters: [{{ compress: {{}} }}]\n        proxy: {{ upstream: app }}\n",
        origin.addr
    ));
    let r = send(&s, "/encoded", Some("br"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(Some("gzip"), &r.body), body.as_bytes());
    for path in ["/keep", "/png"] {
        let r = send(&s, path, Some("br"));
        assert_eq!(r.header("content-encoding"), None, "{path}");
        assert_eq!(r.body, body.as_bytes());
    }
    let mut c = s.connect();
    let r = roundtrip(
        &mut c,
        b"GET /page HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nRange: bytes=0-9\r\n\r\n",
    );
    // The origin ignores the range (a 200); a 206 from it would not be compressed either.
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut c = s.connect();
    c.write_all(b"HEAD /page HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let r = common::read_response_to(&mut c, true);
    // A HEAD gets the fields its GET would (issue 33 §5).
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

/// `file.gz`, `file.br`, `file.zst` beside a static file are sent to clients that take them.
#[test]
fn precompressed_static_files() {
    let dir = std::env::temp_dir().join(format!("weir-static-gz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = page();
    std::fs::write(dir.join("a.txt"), &text).unwrap();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(text.as_bytes()).unwrap();
    let gz = e.finish().unwrap();
    std::fs::write(dir.join("a.txt.gz"), &gz).unwrap();
    let s = start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - filters: [{{ compress: {{}} }}]\n        static: {{ root: '{}' }}\n",
        dir.display()
    ));
    let r = send(&s, "/a.txt", Some("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.body, gz, "the file beside it, as it is");
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // No .br beside it: compressed as it streams.
    let r = send(&s, "/a.txt", Some("br"));
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(decode(Some("br"), &r.body), text.as_bytes());
    let r = send(&s, "/a.txt", None);
    assert_eq!(
        (r.header("content-encoding"), r.body.clone()),
        (None, text.clone().into_bytes())
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// examples/cache.yaml as written: text is compressed, and each coding is stored once.
#[test]
fn the_cache_example_stores_compressed_text() {
    let body = page();
    let asked = Arc::new(AtomicUsize::new(0));
    let (b, a) = (body.clone(), asked.clone());
    let origin = http_origin(move |_| {
        a.fetch_add(1, Ordering::SeqCst);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .into_bytes()
    });
    let vars: std::collections::HashMap<&str, String> = [
        ("WEIR_ORIGIN", origin.addr.to_string()),
        ("WEIR_LISTEN", "127.0.0.1:0".to_string()),
        ("WEIR_ADMIN", "127.0.0.1:0".to_string()),
        ("WEIR_WORKERS", "1".to_string()),
        // A disk tier of its own: the example's default directory may hold an earlier run's.
        ("WEIR_CACHE_DIR", {
            let d = std::env::temp_dir().join(format!("weir-compress-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            d.display().to_string()
        }),
    ]
    .into_iter()
    .collect();
    let yaml = include_str!("../../../examples/cache.yaml");
    let cfg =
        weir::runtime::load_str(yaml, std::path::Path::new("."), |v| vars.get(v).cloned()).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let s = TestServer {
        addr: handle.local_addrs()[0],
        handle: Some(handle),
    };
    for coding in ["br", "gzip", "zstd", "br", "gzip", "zstd"] {
        let r = send(&s, "/index.html", Some(coding));
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(decode(Some(coding), &r.body), body.as_bytes());
        assert_eq!(r.header("x-cache-by"), Some("weir"));
    }
    let r = send(&s, "/index.html", None);
    assert_eq!(r.body, body.as_bytes());
    assert_eq!(asked.load(Ordering::SeqCst), 1);
}

/// Issue 33 §5: Accept-Encoding `q` values decide (RFC 9110 §12.5.3; `br;q=0.5, gzip;q=1` got
/// br); a HEAD is answered with the fields its GET gets (it got the identity ones); a range
/// resumed with `If-Range: <Last-Modified>` is never spliced from another encoding run (the
/// streamed miss and the stored variant differ under one weak ETag: 10 of 20 resumed
/// downloads did not decode) — the whole variant is sent.
#[test]
fn q_values_head_fields_and_ranges_of_encoded_variants() {
    let body = page();
    let b = body.clone();
    let origin = http_origin(move |_| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
        .into_bytes()
    });
    let s = start_config(&format!(
        "workers: 1\ncache_zones: {{ z: {{ max_size: 16m }} }}\nupstreams:\n  app: {{ servers: ['{}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {{ path_prefix: /plain/ }}\n        filters: [{{ compress: {{}} }}]\n        proxy: {{ upstream: app }}\n      - filters: [{{ compress: {{}} }}]\n        proxy: {{ upstream: app }}\n        cache: {{ zone: z }}\n",
        origin.addr
    ));
    let r = send(&s, "/plain/a", Some("br;q=0.5, gzip;q=1"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(Some("gzip"), &r.body), body.as_bytes());
    let r = send(&s, "/plain/a", Some("gzip;q=0.2, identity"));
    assert_eq!(r.header("content-encoding"), None);
    // HEAD: the same fields as the GET.
    let mut c = s.connect();
    c.write_all(b"HEAD /plain/a HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let head = common::read_response_to(&mut c, true);
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert_eq!(head.header("etag"), Some("W/\"v1\""));
    assert!(
        head.header("content-length").is_none(),
        "{:?}",
        head.headers
    );
    // The cached route: the miss streams gzip, then a resumed range by date gets the whole
    // stored variant, which decodes.
    let streamed = send(&s, "/c", Some("gzip"));
    assert_eq!(streamed.header("content-encoding"), Some("gzip"));
    let mut c = s.connect();
    let r = roundtrip(
        &mut c,
        b"GET /c HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nRange: bytes=20-\r\nIf-Range: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
    );
    assert_eq!(r.status, 200, "a range of another encoding run");
    assert_eq!(decode(Some("gzip"), &r.body), body.as_bytes());
}
