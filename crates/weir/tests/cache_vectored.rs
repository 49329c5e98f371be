//! Large cache hits written by reference (vectored writes from the stored buffer) to clients
//! that pipeline and read slowly. Apart from `cache.rs` to keep each file small.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::cachekit::{cache, get, resp, scripted, status_of};
use common::*;

#[test]
fn large_hits_are_sent_by_reference_to_slow_and_pipelining_clients() {
    // Bodies of 16 KiB and more are written from the stored buffer with vectored writes. A
    // client that pipelines several of them and does not read until the server's socket buffer
    // is full gets every byte in order: heads, a short body between long ones, a range, HEAD.
    // (The first hit's Age may tick during the 300 ms sleep: ttl=599 is as right as 600.)
    let big: String = (0..3 * 1024 * 1024 / 8)
        .map(|i| format!("{:07}\n", i % 10_000_000))
        .collect();
    let big2 = big.clone();
    let o = scripted(move |r, _| {
        let body = if r.line.contains("/big") {
            &big2[..]
        } else {
            "short"
        };
        resp("200 OK", "Cache-Control: max-age=600\r\n", body)
    });
    let c = cache(&o.origin, "", "64m");
    assert_eq!(get(&c, "/big", "").body.len(), big.len(), "the miss");
    assert_eq!(get(&c, "/small", "").text(), "short");

    let mut s = c.srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let h = "Host: site.test\r\n";
    s.write_all(
        format!(
            "GET /big HTTP/1.1\r\n{h}\r\nGET /small HTTP/1.1\r\n{h}\r\n\
             GET /big HTTP/1.1\r\n{h}Range: bytes=1000000-2999999\r\n\r\n\
             HEAD /big HTTP/1.1\r\n{h}\r\nGET /big HTTP/1.1\r\n{h}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    // paces: the client reads nothing for 300 ms while the answers queue.
    std::thread::sleep(Duration::from_millis(300));
    let first = read_response(&mut s);
    assert!(first.body == big.as_bytes(), "first body differs");
    let status = status_of(&first).replace("599", "600");
    assert_eq!(status, "weir; hit; ttl=600");
    assert_eq!(read_response(&mut s).text(), "short");
    let range = read_response(&mut s);
    assert_eq!(range.status, 206);
    assert!(
        range.body == big.as_bytes()[1_000_000..3_000_000],
        "range differs"
    );
    let head = read_response_to(&mut s, true);
    assert_eq!(head.header("content-length"), Some(&*big.len().to_string()));
    let last = read_response(&mut s);
    assert!(last.body == big.as_bytes(), "last body differs");
    assert_closed(&mut s);
    assert_eq!(o.requests(), 2);
}
