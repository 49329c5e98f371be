//! weir's own HTTP/2 client to `protocol: h2` upstreams (issue 55 §2), over real sockets: the
//! server's SETTINGS_MAX_CONCURRENT_STREAMS respected and streams spread over
//! `http2.connections`; GOAWAY (the stream the server processed finishes, the one it did not
//! goes again on a new connection, its body too); PING liveness (a server that stops
//! answering is dropped, one that answers is kept); request and response bodies past the
//! windows both ways; the cache and response filters over an HTTP/2 upstream; room freed by a
//! stream the server ends while weir still hands its answer to a slow client.
//!
//! The servers are the `h2` crate's (an implementation other than weir's) and, for what a
//! library does not let a test choose (when GOAWAY comes, a PING never acknowledged), raw
//! frames (`common/h2raw.rs`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::h2origin::h2_server;
use common::h2raw::{
    self, frame, read_frame, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING,
};

/// A raw-frame server: each connection's preface read and an empty SETTINGS sent, then
/// `handle(index, socket)` on a thread of its own (index 0 for the first connection).
fn raw_server(
    handle: impl Fn(usize, TcpStream) + Send + Sync + 'static,
) -> (SocketAddr, Arc<AtomicUsize>) {
    raw_server_with(Vec::new(), handle)
}

/// [`raw_server`] whose first SETTINGS carries `settings` (6 octets each).
fn raw_server_with(
    settings: Vec<u8>,
    handle: impl Fn(usize, TcpStream) + Send + Sync + 'static,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let settings = settings.clone();
            let Ok(mut tcp) = tcp else { return };
            let index = count.fetch_add(1, Ordering::SeqCst);
            let handle = handle.clone();
            std::thread::spawn(move || {
                let mut preface = [0u8; 24];
                if tcp.read_exact(&mut preface).is_err() {
                    return;
                }
                assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                tcp.write_all(&frame(h2raw::SETTINGS, 0, 0, &settings))
                    .unwrap();
                handle(index, tcp);
            });
        }
    });
    (addr, connections)
}

/// A 200 with `body` on `stream`.
fn answer(s: &mut TcpStream, stream: u32, body: &[u8]) {
    let head = h2raw::block(&[(":status", b"200")]);
    let mut w = frame(HEADERS, END_HEADERS, stream, &head);
    w.extend(frame(DATA, END_STREAM, stream, body));
    s.write_all(&w).unwrap();
}

/// Answers every request on the connection with `tag:` and the request's body.
fn echo_all(s: &mut TcpStream, tag: &str) {
    let mut bodies: std::collections::HashMap<u32, Vec<u8>> = Default::default();
    while let Some((kind, flags, stream, payload)) = read_frame(s) {
        match kind {
            HEADERS | DATA => {
                let b = bodies.entry(stream).or_default();
                if kind == DATA {
                    b.extend_from_slice(&payload);
                }
                if flags & END_STREAM != 0 {
                    let body = bodies.remove(&stream).unwrap_or_default();
                    let text = [tag.as_bytes(), b":", &body].concat();
                    answer(s, stream, &text);
                }
            }
            PING if flags & h2raw::ACK == 0 => {
                s.write_all(&frame(PING, h2raw::ACK, 0, &payload)).unwrap();
            }
            _ => {}
        }
    }
}

fn config(origin: SocketAddr, http2: &str) -> String {
    format!(
        "workers: 1\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2, http2: {{ {http2} }}, passive_health: {{ max_fails: 0 }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h }}\n"
    )
}

/// With a server that takes one stream at a time and two connections allowed, six calls at
/// once are served two at a time, on exactly two connections, none refused: a client that
/// ignored the limit would have streams refused (and 502s once resends ran out), one that
/// ignored `connections` would open more.
#[test]
fn streams_keep_to_the_server_s_limit_and_spread_over_the_connections() {
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(1);
    let handled = Arc::new(AtomicUsize::new(0));
    let seen = handled.clone();
    let (origin, connections) = h2_server(builder, move |_req, mut respond| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let resp = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(resp, false).unwrap();
            send.send_data(Bytes::from_static(b"slow"), true).unwrap();
        }
    });
    let s = common::start_config(&config(origin, "connections: 2"));
    // One call first: its connection is in the pool before the burst.
    assert_eq!(common::get(s.addr, "/warm").text(), "slow");
    let started = Instant::now();
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let addr = s.addr;
            std::thread::spawn(move || common::get(addr, &format!("/{i}")))
        })
        .collect();
    for c in calls {
        let r = c.join().unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "slow"));
    }
    let took = started.elapsed();
    assert_eq!(
        connections.load(Ordering::SeqCst),
        2,
        "two connections, no more"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 7, "every call handled once");
    // Six calls, two at a time, 300 ms each.
    assert!(took >= Duration::from_millis(850), "served in {took:?}");
}

/// GOAWAY with two streams open: the one at or below its last stream finishes on the old
/// connection, the one above goes again on a new connection, with its body, though a POST
/// (RFC 9113 §8.7: a stream the server did not process is safe to send again). Then the old
/// connection closes, its streams done.
#[test]
fn goaway_finishes_the_processed_stream_and_sends_the_other_again() {
    let closed = Arc::new(AtomicBool::new(false));
    let saw_close = closed.clone();
    // The GET must have the lower stream: GOAWAY's last stream covers every stream below it.
    let got_get = Arc::new(AtomicBool::new(false));
    let saw_get = got_get.clone();
    let (origin, connections) = raw_server(move |index, mut s| {
        if index > 0 {
            return echo_all(&mut s, "second");
        }
        // The first connection: the warm-up call, then two at once.
        let mut streams = Vec::new();
        let mut get = 0;
        while let Some((kind, flags, stream, _)) = read_frame(&mut s) {
            if kind == HEADERS {
                if stream == 1 {
                    answer(&mut s, 1, b"warm");
                    continue;
                }
                if flags & END_STREAM != 0 {
                    get = stream;
                    saw_get.store(true, Ordering::SeqCst);
                }
                streams.push(stream);
                if streams.len() == 2 {
                    break;
                }
            }
        }
        // The GET (no body) is processed; the POST is not.
        let mut goaway = get.to_be_bytes().to_vec();
        goaway.extend_from_slice(&0u32.to_be_bytes());
        s.write_all(&frame(GOAWAY, 0, 0, &goaway)).unwrap();
        answer(&mut s, get, b"first");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while read_frame(&mut s).is_some() {}
        saw_close.store(true, Ordering::SeqCst);
    });
    let s = common::start_config(&config(origin, "connections: 1"));
    assert_eq!(common::get(s.addr, "/warm").text(), "warm");
    let addr = s.addr;
    let get = std::thread::spawn(move || common::get(addr, "/a"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !got_get.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = common::connect(s.addr);
    let post = common::roundtrip(
        &mut c,
        b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 7\r\n\r\npayload",
    );
    let get = get.join().unwrap();
    assert_eq!((get.status, get.text().as_str()), (200, "first"));
    assert_eq!(
        (post.status, post.text().as_str()),
        (200, "second:payload"),
        "the unprocessed POST went again, with its body"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !closed.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        closed.load(Ordering::SeqCst),
        "the old connection was closed"
    );
}

/// A server that answers once, then never acknowledges a PING, is dropped after
/// `ping_interval` + `ping_timeout`; the next call gets a new connection. A server that does
/// acknowledge keeps its one connection through the same silence.
#[test]
fn a_server_that_stops_acknowledging_pings_is_dropped() {
    let pinged = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(Mutex::new(None::<Instant>));
    let (p, d) = (pinged.clone(), dropped.clone());
    let (origin, connections) = raw_server(move |index, mut s| {
        if index > 0 {
            return echo_all(&mut s, "new");
        }
        while let Some((kind, flags, stream, _)) = read_frame(&mut s) {
            if kind == HEADERS && flags & END_STREAM != 0 {
                answer(&mut s, stream, b"once");
            }
            if kind == PING && flags & h2raw::ACK == 0 {
                p.store(true, Ordering::SeqCst);
            }
        }
        *d.lock().unwrap() = Some(Instant::now());
    });
    let s = common::start_config(&config(origin, "ping_interval: 300ms, ping_timeout: 300ms"));
    assert_eq!(common::get(s.addr, "/").text(), "once");
    let asked = Instant::now();
    let deadline = asked + Duration::from_secs(10);
    while dropped.lock().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let at = dropped
        .lock()
        .unwrap()
        .expect("the silent connection was closed");
    assert!(pinged.load(Ordering::SeqCst), "a PING came first");
    assert!(
        at - asked >= Duration::from_millis(550),
        "closed after {:?}: before the PING could time out",
        at - asked
    );
    assert_eq!(common::get(s.addr, "/").text(), "new:");
    assert_eq!(connections.load(Ordering::SeqCst), 2);

    // The h2 crate's server acknowledges PINGs: its connection stays.
    let (origin, connections) =
        h2_server(h2::server::Builder::new(), |_req, mut respond| async move {
            let resp = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(resp, false).unwrap();
            send.send_data(Bytes::from_static(b"kept"), true).unwrap();
        });
    let s = common::start_config(&config(origin, "ping_interval: 200ms, ping_timeout: 300ms"));
    assert_eq!(common::get(s.addr, "/").text(), "kept");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(common::get(s.addr, "/").text(), "kept");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "the answered connection was kept"
    );
}

/// Bodies past every window both ways: a 3 MiB upload reaches the server whole (weir waits
/// on its windows) and a 3 MiB answer reaches the client whole (weir gives its windows back
/// as the client reads).
#[test]
fn bodies_past_the_windows_cross_both_ways() {
    let (origin, _) = h2_server(h2::server::Builder::new(), |req, mut respond| async move {
        let mut body = req.into_body();
        let mut got = 0usize;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            got += chunk.len();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let resp = http::Response::builder()
            .status(200)
            .header("x-got", got.to_string())
            .body(())
            .unwrap();
        let mut send = respond.send_response(resp, false).unwrap();
        let big = Bytes::from(vec![b'z'; 3 << 20]);
        send.reserve_capacity(big.len());
        send.send_data(big, true).unwrap();
    });
    let s = common::start_config(&format!(
        "limits: {{ max_body_bytes: 8m }}\n{}",
        config(origin, "")
    ));
    let mut c = common::connect(s.addr);
    let upload = vec![b'u'; 3 << 20];
    let mut req = format!(
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        upload.len()
    )
    .into_bytes();
    req.extend_from_slice(&upload);
    let r = common::roundtrip(&mut c, &req);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-got"), Some("3145728"));
    assert_eq!(r.body.len(), 3 << 20);
    assert!(r.body.iter().all(|b| *b == b'z'));
}

/// The cache and the response filters over an HTTP/2 upstream, as over HTTP/1.1: the second
/// GET is a hit the server never sees, and both carry the filter's field.
#[test]
fn the_cache_and_filters_work_over_an_http2_upstream() {
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = asked.clone();
    let (origin, _) = h2_server(h2::server::Builder::new(), move |_req, mut respond| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            let resp = http::Response::builder()
                .status(200)
                .header("cache-control", "max-age=60")
                .body(())
                .unwrap();
            let mut send = respond.send_response(resp, false).unwrap();
            send.send_data(Bytes::from_static(b"cached"), true).unwrap();
        }
    });
    let s = common::start_config(&format!(
        "workers: 1\ncache_zones:\n  main: {{ max_size: 16m }}\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2 }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h, response_headers: {{ add: {{ x-via: weir }} }} }}\n        cache: {{ zone: main }}\n"
    ));
    let first = common::get(s.addr, "/page");
    let second = common::get(s.addr, "/page");
    for r in [&first, &second] {
        assert_eq!((r.status, r.text().as_str()), (200, "cached"));
        assert_eq!(r.header("x-via"), Some("weir"));
    }
    assert!(
        second.header("cache-status").unwrap_or("").contains("hit"),
        "{:?}",
        second.header("cache-status")
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the hit never reached the server"
    );
}

/// A stored answer that must be revalidated is revalidated over HTTP/2: the cache asks with
/// its validator (`If-None-Match`, the client's own conditionals dropped), the server's 304
/// refreshes it, and the stored body is served.
#[test]
fn the_cache_revalidates_over_an_http2_upstream() {
    let conditionals = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let seen = conditionals.clone();
    let (origin, _) = h2_server(h2::server::Builder::new(), move |req, mut respond| {
        let inm = req
            .headers()
            .get("if-none-match")
            .map(|v| v.to_str().unwrap().to_string());
        seen.lock().unwrap().push(inm.clone());
        async move {
            let status = if inm.as_deref() == Some("\"v1\"") {
                304
            } else {
                200
            };
            let resp = http::Response::builder()
                .status(status)
                .header("cache-control", "no-cache")
                .header("etag", "\"v1\"")
                .body(())
                .unwrap();
            let mut send = respond.send_response(resp, status == 304).unwrap();
            if status == 200 {
                send.send_data(Bytes::from_static(b"stored"), true).unwrap();
            }
        }
    });
    let s = common::start_config(&format!(
        "workers: 1\ncache_zones:\n  main: {{ max_size: 16m }}\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2 }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h }}\n        cache: {{ zone: main }}\n"
    ));
    let first = common::get(s.addr, "/doc");
    assert_eq!((first.status, first.text().as_str()), (200, "stored"));
    let mut c = common::connect(s.addr);
    let second = common::roundtrip(
        &mut c,
        b"GET /doc HTTP/1.1\r\nHost: localhost\r\nIf-None-Match: \"other\"\r\n\r\n",
    );
    assert_eq!((second.status, second.text().as_str()), (200, "stored"));
    assert!(
        second
            .header("cache-status")
            .unwrap_or("")
            .contains("fwd-status=304"),
        "{:?}",
        second.header("cache-status")
    );
    let asked = conditionals.lock().unwrap().clone();
    assert_eq!(asked, vec![None, Some("\"v1\"".to_string())]);
}

/// A WebSocket upgrade to an HTTP/2 upstream (extended CONNECT is not built) is refused 502,
/// never sent on as a plain GET whose answer the client would take for the upgrade's.
#[test]
fn an_upgrade_to_an_http2_upstream_is_refused() {
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = asked.clone();
    let (origin, _) = h2_server(h2::server::Builder::new(), move |_req, mut respond| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            let resp = http::Response::builder().status(200).body(()).unwrap();
            let _ = respond.send_response(resp, true);
        }
    });
    let s = common::start_config(&config(origin, ""));
    let mut c = common::connect(s.addr);
    let r = common::roundtrip(
        &mut c,
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    assert_eq!(r.status, 502);
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(common::get(s.addr, "/plain").status, 200);
}

/// The first HEADERS on the connection (its stream), other frames skipped.
fn first_request(s: &mut TcpStream) -> Option<u32> {
    loop {
        let (kind, _, stream, _) = read_frame(s)?;
        if kind == HEADERS {
            return Some(stream);
        }
    }
}

/// An answer that runs past its `content-length` is cut where the length ends, never relayed
/// on: to a keep-alive HTTP/1.1 client the extra octets would be the next answer (attack
/// review: a forged `X-Injected` answer reached a pipelining client).
#[test]
fn an_answer_past_its_length_is_cut_not_relayed() {
    let (origin, _) = raw_server(|_, mut s| {
        while let Some(stream) = first_request(&mut s) {
            let head = h2raw::block(&[(":status", b"200"), ("content-length", b"5")]);
            let mut w = frame(HEADERS, END_HEADERS, stream, &head);
            let extra = b"helloHTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Injected: yes\r\n\r\nbad";
            w.extend(frame(DATA, 0, stream, extra));
            s.write_all(&w).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let _ = s.write_all(&frame(DATA, END_STREAM, stream, b""));
        }
    });
    let s = common::start_config(&config(origin, ""));
    let mut c = common::connect(s.addr);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    // The answer is cut (at most its head and its five octets), the connection closed.
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    assert!(
        !text.contains("X-Injected"),
        "relayed past the length: {text}"
    );
    assert!(!text.contains("bad"), "{text}");
}

/// HTTP/2 has no 101 (RFC 9113 §8.6): a server's `:status 101` is a broken answer (502),
/// never a `101 Switching Protocols` that would turn the client's connection into a tunnel.
#[test]
fn a_101_from_an_http2_server_is_refused() {
    let (origin, _) = raw_server(|_, mut s| {
        while let Some(stream) = first_request(&mut s) {
            let head = h2raw::block(&[(":status", b"101")]);
            s.write_all(&frame(HEADERS, END_HEADERS, stream, &head))
                .unwrap();
        }
    });
    let s = common::start_config(&config(origin, ""));
    let r = common::get(s.addr, "/");
    assert_eq!(r.status, 502);
}

/// A server that floods empty DATA frames (each costs a read and says nothing) has its
/// connection ended with GOAWAY ENHANCE_YOUR_CALM.
#[test]
fn a_flood_of_empty_frames_ends_the_connection() {
    let code = Arc::new(Mutex::new(None::<u32>));
    let seen = code.clone();
    let (origin, _) = raw_server(move |_, mut s| {
        let Some(stream) = first_request(&mut s) else {
            return;
        };
        let head = h2raw::block(&[(":status", b"200")]);
        s.write_all(&frame(HEADERS, END_HEADERS, stream, &head))
            .unwrap();
        let empty = frame(DATA, 0, stream, b"");
        let burst: Vec<u8> = empty
            .iter()
            .copied()
            .cycle()
            .take(empty.len() * 1000)
            .collect();
        for _ in 0..20 {
            if s.write_all(&burst).is_err() {
                break;
            }
        }
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while let Some((kind, _, _, payload)) = read_frame(&mut s) {
            if kind == GOAWAY {
                *seen.lock().unwrap() = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
                return;
            }
        }
    });
    let s = common::start_config(&config(origin, ""));
    let mut c = common::connect(s.addr);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let deadline = Instant::now() + Duration::from_secs(10);
    while code.lock().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(*code.lock().unwrap(), Some(0xb), "GOAWAY ENHANCE_YOUR_CALM");
}

/// A server that starts with SETTINGS_MAX_CONCURRENT_STREAMS 0 and raises it: the waiting
/// request goes as soon as the new SETTINGS come, not when `timeouts.connect` runs out.
#[test]
fn a_raised_stream_limit_lets_waiting_requests_go() {
    let zero = [0u8, 3, 0, 0, 0, 0].to_vec();
    let (origin, _) = raw_server_with(zero, |_, mut s| {
        std::thread::sleep(Duration::from_millis(400));
        s.write_all(&frame(h2raw::SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 10]))
            .unwrap();
        echo_all(&mut s, "raised");
    });
    let s = common::start_config(&config(origin, ""));
    let started = Instant::now();
    let r = common::get(s.addr, "/");
    assert_eq!((r.status, r.text().as_str()), (200, "raised:"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// An HTTP/2 health check that times out closes its connection (attack review: each one's
/// stayed open for `keepalive.idle_timeout`, about 40 per worker and server).
#[test]
fn a_health_check_that_times_out_closes_its_connection() {
    let open = Arc::new(AtomicUsize::new(0));
    let gauge = open.clone();
    let (origin, connections) = raw_server(move |_, mut s| {
        gauge.fetch_add(1, Ordering::SeqCst);
        // Never answers; reads until weir closes.
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        while read_frame(&mut s).is_some() {}
        gauge.fetch_sub(1, Ordering::SeqCst);
    });
    let _s = common::start_config(&format!(
        "workers: 1\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2, active_health: {{ path: /h, interval: 100ms, timeout: 100ms }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h }}\n"
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while connections.load(Ordering::SeqCst) < 8 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(connections.load(Ordering::SeqCst) >= 8, "checks ran");
    std::thread::sleep(Duration::from_millis(500));
    let left = open.load(Ordering::SeqCst);
    assert!(left <= 3, "{left} check connections still open");
}

/// HTTP/2 over TLS to the upstream: ALPN `h2` offered and agreed, the server's certificate
/// checked against the given CA, a request and its answer carried (the `h2` crate's server
/// behind rustls).
#[test]
fn an_https_upstream_speaks_h2_by_alpn() {
    let pki = common::tlskit::Pki::new("h2-upstream-tls");
    let cert = pki.issue("origin", "origin.test", &["origin.test"]);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(cert.chain.clone(), cert.key_der.clone_key())
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let alpn = Arc::new(Mutex::new(None::<Vec<u8>>));
    let agreed = alpn.clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                *agreed.lock().unwrap() = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tls).await.unwrap();
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        let scheme = req.uri().scheme_str().unwrap_or("").to_string();
                        let resp = http::Response::builder().status(200).body(()).unwrap();
                        let mut send = respond.send_response(resp, false).unwrap();
                        send.send_data(Bytes::from(format!("over {scheme}")), true)
                            .unwrap();
                    }
                });
            }
        });
    });
    let s = common::start_config(&format!(
        "workers: 1\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2, tls: {{ ca: '{}', sni: origin.test }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h }}\n",
        pki.ca_file().display()
    ));
    let r = common::get(s.addr, "/");
    assert_eq!((r.status, r.text().as_str()), (200, "over https"));
    assert_eq!(alpn.lock().unwrap().as_deref(), Some(&b"h2"[..]));
}

/// A gRPC call streaming both ways whose server answers each message with more than a
/// stream's window before it reads the next, while the client sends without waiting: weir
/// keeps reading the answer while the request waits on the server's window (second attack
/// review: a send that waited held the answer, the server held the request, and the call hung
/// until `timeouts.send`).
#[test]
fn a_duplex_call_with_big_answers_does_not_deadlock() {
    const MSG: usize = 16 * 1024;
    const MESSAGES: usize = 32;
    const REPLY: usize = 9 * MSG;
    let (origin, _) = h2_server(h2::server::Builder::new(), |req, mut respond| async move {
        let mut body = req.into_body();
        let resp = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let mut send = respond.send_response(resp, false).unwrap();
        let mut got = 0usize;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            let before = got / MSG;
            got += chunk.len();
            // A reply per whole message, written (as far as windows allow) before reading on.
            for _ in before..got / MSG {
                let mut left = REPLY;
                while left > 0 {
                    send.reserve_capacity(left);
                    let room = std::future::poll_fn(|cx| send.poll_capacity(cx))
                        .await
                        .unwrap()
                        .unwrap();
                    let n = room.min(left);
                    send.send_data(Bytes::from(vec![b'r'; n]), false).unwrap();
                    left -= n;
                }
            }
        }
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        send.send_trailers(trailers).unwrap();
    });
    let s = common::start_config(&format!(
        "workers: 1\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2, timeouts: {{ send: 20s }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    h2c: true\n    routes:\n      - proxy: {{ upstream: h }}\n"
    ));
    let (rt, client) = common::h2c_client(s.addr);
    let started = Instant::now();
    let received = rt.block_on(async {
        let mut c = client.ready().await.unwrap();
        let req = http::Request::post("http://x/echo.Echo/Bidi")
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        tokio::spawn(async move {
            for i in 0..MESSAGES {
                let mut left = MSG;
                while left > 0 {
                    send.reserve_capacity(left);
                    let Some(Ok(room)) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await
                    else {
                        return;
                    };
                    let n = room.min(left);
                    left -= n;
                    let last = i + 1 == MESSAGES && left == 0;
                    if send.send_data(Bytes::from(vec![b'q'; n]), last).is_err() {
                        return;
                    }
                }
            }
        });
        let resp = tokio::time::timeout(Duration::from_secs(15), resp)
            .await
            .expect("the answer's head")
            .unwrap();
        let mut body = resp.into_body();
        let mut n = 0usize;
        while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(15), body.data()).await
        {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            n += chunk.len();
        }
        n
    });
    assert_eq!(received, MESSAGES * REPLY, "after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A stream the server ends frees room on its connection at once, even while weir is still
/// handing its answer to a slow client: a request waiting for that room goes then, not when
/// `timeouts.connect` runs out (second attack review: it got a 503 after 5 s). The server
/// takes one stream at a time; client A never reads its answer, so A's stream keeps its
/// place in weir while the server, stalled by A's window, ends it with an empty DATA.
#[test]
fn a_stream_the_server_ends_frees_room_while_its_reader_is_slow() {
    let (end_a, end_a_rx) = std::sync::mpsc::channel::<()>();
    let end_a_rx = Mutex::new(Some(end_a_rx));
    let (stalled_tx, stalled) = std::sync::mpsc::channel::<()>();
    let stalled_tx = Mutex::new(Some(stalled_tx));
    let one = [0u8, 3, 0, 0, 0, 1].to_vec();
    let (origin, _) = raw_server_with(one, move |_, s| {
        let (Some(end_a), Some(stalled)) = (
            end_a_rx.lock().unwrap().take(),
            stalled_tx.lock().unwrap().take(),
        ) else {
            return;
        };
        let out = Arc::new(Mutex::new(s.try_clone().unwrap()));
        // Send credit: weir's initial stream window (its SETTINGS) and WINDOW_UPDATEs, for
        // the connection and for stream 1; the reader answers every later stream at once.
        let credit = Arc::new(Mutex::new((65_535i64, 65_535i64)));
        let (c, o) = (credit.clone(), out.clone());
        let (opened, a_opened) = std::sync::mpsc::channel::<()>();
        let mut r = s;
        std::thread::spawn(move || {
            while let Some((kind, flags, stream, p)) = read_frame(&mut r) {
                match kind {
                    h2raw::SETTINGS if flags & h2raw::ACK == 0 => {
                        for f in p.chunks_exact(6) {
                            if u16::from_be_bytes([f[0], f[1]]) == 4 {
                                let v = u32::from_be_bytes(f[2..6].try_into().unwrap());
                                c.lock().unwrap().1 = i64::from(v);
                            }
                        }
                        let ack = frame(h2raw::SETTINGS, h2raw::ACK, 0, b"");
                        o.lock().unwrap().write_all(&ack).unwrap();
                    }
                    h2raw::WINDOW_UPDATE => {
                        let n = i64::from(u32::from_be_bytes(p[..4].try_into().unwrap()));
                        let mut w = c.lock().unwrap();
                        match stream {
                            0 => w.0 += n,
                            1 => w.1 += n,
                            _ => {}
                        }
                    }
                    HEADERS if stream == 1 => opened.send(()).unwrap(),
                    HEADERS => answer(&mut o.lock().unwrap(), stream, b"b"),
                    PING if flags & h2raw::ACK == 0 => {
                        let pong = frame(PING, h2raw::ACK, 0, &p);
                        o.lock().unwrap().write_all(&pong).unwrap();
                    }
                    _ => {}
                }
            }
        });
        // Stream 1 (A), once asked (weir's SETTINGS come before): a head, then DATA as far as
        // the windows let, until they stay shut.
        a_opened.recv().unwrap();
        let head = h2raw::block(&[(":status", b"200")]);
        let started = frame(HEADERS, END_HEADERS, 1, &head);
        out.lock().unwrap().write_all(&started).unwrap();
        let piece = vec![b'a'; 16_384];
        let mut idle_since = Instant::now();
        while idle_since.elapsed() < Duration::from_millis(700) {
            let room = {
                let w = credit.lock().unwrap();
                w.0.min(w.1).min(16_384)
            };
            if room <= 0 {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            let n = usize::try_from(room).unwrap();
            {
                let mut w = credit.lock().unwrap();
                w.0 -= room;
                w.1 -= room;
            }
            out.lock()
                .unwrap()
                .write_all(&frame(DATA, 0, 1, &piece[..n]))
                .unwrap();
            idle_since = Instant::now();
        }
        let _ = stalled.send(());
        // Ends A (an empty DATA needs no window) when the test says so.
        let _ = end_a.recv();
        let _ = out
            .lock()
            .unwrap()
            .write_all(&frame(DATA, END_STREAM, 1, b""));
        std::thread::sleep(Duration::from_secs(30));
    });
    let s = common::start_config(&format!(
        "workers: 1\nupstreams:\n  h: {{ servers: ['{origin}'], protocol: h2, http2: {{ connections: 1 }}, timeouts: {{ connect: 3s }}, passive_health: {{ max_fails: 0 }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: h }}\n"
    ));
    // A asks and never reads: weir's task for A stops at A's full socket, holding the stream.
    let mut a = common::connect(s.addr);
    a.write_all(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    stalled.recv_timeout(Duration::from_secs(30)).unwrap();
    // B waits for room (the server takes one stream), then A's stream ends at the server.
    let addr = s.addr;
    let b = std::thread::spawn(move || {
        let t = Instant::now();
        let r = common::get(addr, "/b");
        (r.status, r.text(), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    end_a.send(()).unwrap();
    let (status, body, took) = b.join().unwrap();
    assert_eq!((status, body.as_str()), (200, "b"), "after {took:?}");
    assert!(
        took < Duration::from_secs(2),
        "B waited {took:?}: woken by timeouts.connect, not by A's end"
    );
    drop(a);
}
