//! Interim (1xx) responses from the origin: relayed in order before the final response, on plain
//! and cached proxy routes; never stored, never merged into the final head.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::time::Duration;

use common::origin::http_origin;
use common::*;

const INTERIM: &str = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 102 Processing\r\nX-Progress: half\r\n\r\n";

fn origin_with_hints() -> common::origin::Origin {
    http_origin(|_| {
        format!("{INTERIM}HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nfinal")
            .into_bytes()
    })
}

/// Reads everything up to the end of a 5-byte final body.
fn read_all(s: &mut std::net::TcpStream) -> String {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while !raw.ends_with(b"final") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(raw).unwrap()
}

/// Sends `GET /page` on `s` and reads everything up to the end of the final body.
fn get_page(s: &mut std::net::TcpStream) -> String {
    s.write_all(b"GET /page HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .unwrap();
    read_all(s)
}

fn check_relayed(text: &str) {
    let hints = text
        .find("HTTP/1.1 103 Early Hints\r\n")
        .expect("103 relayed");
    let processing = text
        .find("HTTP/1.1 102 Processing\r\n")
        .expect("102 relayed");
    let fin = text.find("HTTP/1.1 200 OK\r\n").expect("final response");
    assert!(hints < processing && processing < fin, "in order: {text}");
    assert!(text[hints..processing].contains("Link: </style.css>; rel=preload"));
    let final_head = &text[fin..];
    assert!(
        !final_head.contains("Link:"),
        "1xx fields not reused: {final_head}"
    );
    assert!(!final_head.contains("X-Progress"), "{final_head}");
}

#[test]
fn plain_proxy_relays_1xx_in_order() {
    let o = origin_with_hints();
    let srv = start(
        &format!("upstreams:\n  o:\n    servers: ['{}']", o.addr),
        "      - proxy: { upstream: o }\n",
    );
    let mut s = srv.connect();
    check_relayed(&get_page(&mut s));
    // The connection stays usable after the interim responses.
    check_relayed(&get_page(&mut s));
    // HTTP/1.0 clients get no 1xx (RFC 9110 §15.2).
    let mut s = srv.connect();
    s.write_all(b"GET /page HTTP/1.0\r\nHost: a.test\r\n\r\n")
        .unwrap();
    let text = read_all(&mut s);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
}

#[test]
fn cached_route_relays_1xx_but_never_stores_them() {
    let o = origin_with_hints();
    let srv = start(
        &format!(
            "cache_zones:\n  z: {{ max_size: 1m }}\nupstreams:\n  o:\n    servers: ['{}']",
            o.addr
        ),
        "      - proxy: { upstream: o }\n        cache: { zone: z }\n",
    );
    let mut s = srv.connect();
    check_relayed(&get_page(&mut s));
    // The hit is the final response alone.
    let hit = get_page(&mut s);
    assert!(hit.starts_with("HTTP/1.1 200 OK\r\n"), "{hit}");
    assert!(hit.contains("Cache-Status: weir; hit"), "{hit}");
    assert!(!hit.contains("Link:") && !hit.contains("103"), "{hit}");
    assert_eq!(o.accepted(), 1);
}
