//! Codec micro-benchmarks: parsing a typical request head (with Host validation), decoding a
//! chunked body, and encoding a status line with fields. For hot-path changes, compare these
//! (or their instruction counts under `valgrind --tool=callgrind`) before and after.
#![allow(clippy::unwrap_used, missing_docs)]

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use weir_http::{parse_request, BodyDecoder, BodyEvent, BodyKind, Limits};

const REQUEST: &[u8] = b"GET /api/v1/items?page=2&sort=name HTTP/1.1\r\nHost: www.example.com:8080\r\nUser-Agent: bench/1.0\r\nAccept: application/json\r\nAccept-Encoding: gzip, br\r\nCookie: session=abc123; theme=dark\r\n\r\n";

fn parse(c: &mut Criterion) {
    let limits = Limits::default();
    c.bench_function("parse_request (6 fields)", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(REQUEST);
            let head = parse_request(&mut buf, &limits).unwrap().unwrap();
            black_box(head.host());
        })
    });
}

fn chunked(c: &mut Criterion) {
    let mut body = Vec::new();
    for _ in 0..16 {
        body.extend_from_slice(b"400\r\n");
        body.extend_from_slice(&[b'x'; 1024]);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    c.bench_function("decode chunked (16 x 1 KiB)", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&body[..]);
            let mut d = BodyDecoder::new(BodyKind::Chunked);
            let mut n = 0;
            while let BodyEvent::Data(x) = d.decode(&mut buf).unwrap() {
                n += x.len();
            }
            black_box(n)
        })
    });
}

fn encode(c: &mut Criterion) {
    let fields: Vec<(Bytes, Bytes)> = vec![
        (
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/html"),
        ),
        (
            Bytes::from_static(b"Cache-Control"),
            Bytes::from_static(b"max-age=60"),
        ),
        (Bytes::from_static(b"ETag"), Bytes::from_static(b"\"abc\"")),
    ];
    c.bench_function("encode Reply: status line + 3 fields", |b| {
        let mut out = BytesMut::with_capacity(512);
        b.iter(|| {
            out.clear();
            let mut reply = weir_http::Reply::new(200, weir_http::Framing::Length(1024));
            reply.add_fields(&fields);
            let enc = reply.encode_h1(
                &mut out,
                weir_http::Version::Http11,
                weir_http::Persistence::KeepAlive,
            );
            black_box((out.len(), enc))
        })
    });
    // A cache hit's head: the stored, pre-encoded head plus rendered Age / Cache-Status lines.
    let stored: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: max-age=60\r\nETag: \"abc\"\r\nDate: Sun, 22 Nov 2026 10:00:00 GMT\r\nContent-Length: 1024\r\n";
    c.bench_function("encode Reply: stored head + Age + Cache-Status", |b| {
        let mut out = BytesMut::with_capacity(512);
        let render = |out: &mut BytesMut| {
            out.extend_from_slice(b"Age: 12\r\nCache-Status: weir; hit; ttl=48\r\n");
        };
        b.iter(|| {
            out.clear();
            let mut reply = weir_http::Reply::new(200, weir_http::Framing::Given);
            reply.base = weir_http::Base::Encoded(stored);
            reply.date = false;
            reply.render = Some(&render);
            let enc = reply.encode_h1(
                &mut out,
                weir_http::Version::Http11,
                weir_http::Persistence::KeepAlive,
            );
            black_box((out.len(), enc))
        })
    });
}

criterion_group!(benches, parse, chunked, encode);
criterion_main!(benches);
