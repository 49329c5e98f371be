//! Hostile upstream responses over real sockets (issue 18, item 8): a reason phrase that is
//! not UTF-8, a transfer coding weir does not decode, and a chunked body bad from its first
//! chunk-size line. Each gets an answer (the relayed response or a 502), never a dropped
//! connection or a panic.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufReader, Write};

use common::origin::{origin, read_request};
use common::{read_response, start_config};

/// A proxy to an origin that answers every request with `raw`.
fn proxy_to(raw: &'static [u8]) -> (common::TestServer, common::origin::Origin) {
    let o = origin(move |conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        while read_request(&mut r).is_some() {
            if w.write_all(raw).is_err() {
                return;
            }
        }
    });
    let srv = start_config(&format!(
        "workers: 1\nupstreams: {{ o: {{ servers: ['{}'], retries: {{ attempts: 0 }} }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n",
        o.addr
    ));
    (srv, o)
}

fn status_and_body(srv: &common::TestServer) -> (u16, String) {
    let mut s = srv.connect();
    s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let r = read_response(&mut s);
    (r.status, r.text())
}

#[test]
fn a_reason_phrase_that_is_not_utf8_is_relayed() {
    let (srv, _o) = proxy_to(b"HTTP/1.1 200 \xffK\xfe\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(status_and_body(&srv), (200, "ok".to_string()));
}

#[test]
fn a_transfer_coding_weir_does_not_decode_is_a_502() {
    for raw in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\nraw",
    ] {
        let raw: &'static [u8] = Box::leak(raw.to_vec().into_boxed_slice());
        let (srv, _o) = proxy_to(raw);
        let (status, body) = status_and_body(&srv);
        assert_eq!(status, 502, "{body}");
        assert!(
            !body.contains("\r\n0\r\n"),
            "no raw chunk framing: {body:?}"
        );
    }
}

#[test]
fn a_body_bad_from_its_first_chunk_is_a_502() {
    let (srv, _o) =
        proxy_to(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n");
    assert_eq!(status_and_body(&srv).0, 502);
    // Well-formed chunked bodies still stream.
    let (srv, _o) =
        proxy_to(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n");
    assert_eq!(status_and_body(&srv), (200, "ok".to_string()));
}
