//! Wire-level tests: raw bytes to a real listener on 127.0.0.1, exact statuses and framing back.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    for _ in 0..3 {
        let r = roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "Hello, World\n");
        assert_eq!(r.header("server"), Some("weir"));
        assert!(r.header("date").is_some());
        assert_eq!(r.header("connection"), None);
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    s.write_all(
        b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\nPOST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /json HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut s).text(), "Hello, World\n");
    assert_eq!(read_response(&mut s).status, 404);
    let echo = read_response(&mut s);
    assert!(
        echo.text().starts_with("POST /echo HTTP/1.1\n") && echo.text().ends_with("\n\nabc"),
        "{}",
        echo.text()
    );
    let json = read_response(&mut s);
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(json.text(), r#"{"message":"Hello, World!"}"#);
}

#[test]
fn http10_closes_unless_keep_alive_is_asked() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    let r = roundtrip(&mut s, b"GET /hello HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut s);

    let mut s = srv.connect();
    let r = roundtrip(
        &mut s,
        b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let r = roundtrip(
        &mut s,
        b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn connection_close_is_honoured() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    let r = roundtrip(
        &mut s,
        b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut s);
}

/// Segments the kernel has received on `s` so far (`tcpi_segs_in`).
#[allow(unsafe_code)]
fn segments_in(s: &std::net::TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    // SAFETY: `info` is a plain C struct for which all-zero bytes are valid, and `len` tells
    // getsockopt its exact size, so the kernel writes only inside it.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(rc, 0, "getsockopt(TCP_INFO)");
        info.tcpi_segs_in
    }
}

#[test]
fn last_response_and_fin_share_one_segment() {
    // With `Connection: close` the response's last bytes and the FIN leave in one segment, so a
    // connection-per-request client gets one packet (and one wake-up) per response, not two.
    // After the handshake the client receives: Linux's immediate ACK of the request (quick-ack
    // at connection start), then response+FIN: 2 segments; a separate FIN makes 3. A stalled
    // server could add a delayed ACK, so one clean exchange out of three is required.
    let srv = start("", BASIC_ROUTES);
    let mut deltas = Vec::new();
    for _ in 0..3 {
        let mut s = srv.connect();
        let before = segments_in(&s);
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert!(got.ends_with(b"Hello, World\n"), "{got:?}");
        deltas.push(segments_in(&s) - before);
    }
    assert!(deltas.contains(&2), "segments per response: {deltas:?}");
}

#[test]
fn chunked_body_with_trailers_is_decoded() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    let r = roundtrip(
        &mut s,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("\n\nhello world"), "{}", r.text());
    // The connection is still usable: framing was consumed exactly.
    assert_eq!(
        roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
}

#[test]
fn expect_100_continue() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    s.write_all(
        b"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let interim = read_response(&mut s);
    assert_eq!(interim.status, 100);
    s.write_all(b"data").unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("\n\ndata"));

    // A route that will not read the body answers at once, without 100, and closes.
    let mut s = srv.connect();
    s.write_all(
        b"PUT /nope HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut s);
}

/// Every malformed or over-limit request gets its status and a closed connection.
#[test]
fn rejections_answer_and_close() {
    let srv = start(
        "limits: { max_header_bytes: 4k, max_uri_bytes: 1k, max_body_bytes: 1k }",
        BASIC_ROUTES,
    );
    let long_header = format!(
        "GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(5000)
    );
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(1100));
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("CL and TE", b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400),
        ("differing CL", b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(), 400),
        ("TE not chunked last", b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n".to_vec(), 400),
        ("obs-fold", b"GET /hello HTTP/1.1\r\nHost: t\r\nX-A: a\r\n  folded\r\n\r\n".to_vec(), 400),
        ("space before colon", b"GET /hello HTTP/1.1\r\nHost : t\r\n\r\n".to_vec(), 400),
        ("bad name byte", b"GET /hello HTTP/1.1\r\nHost: t\r\nX(A): a\r\n\r\n".to_vec(), 400),
        ("bad value byte", b"GET /hello HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n".to_vec(), 400),
        ("bad chunk size", b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n".to_vec(), 400),
        ("missing Host", b"GET /hello HTTP/1.1\r\n\r\n".to_vec(), 400),
        ("head too large", long_header.into_bytes(), 431),
        ("uri too long", long_uri.into_bytes(), 414),
        ("body too large (CL)", b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n".to_vec(), 413),
        ("body too large (chunked)", format!("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n{}\r\n0\r\n\r\n", "x".repeat(2048)).into_bytes(), 413),
        ("unknown version", b"GET /hello HTTP/2.0\r\nHost: t\r\n\r\n".to_vec(), 505),
        ("unknown transfer coding", b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n".to_vec(), 501),
    ];
    for (name, raw, status) in cases {
        let mut s = srv.connect();
        s.write_all(&raw).unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.status, status, "{name}");
        assert_eq!(r.header("connection"), Some("close"), "{name}");
        assert!(
            closed_within(&mut s, Duration::from_secs(3)),
            "{name}: connection not closed"
        );
    }
}

#[test]
fn method_not_allowed_lists_allowed_methods_and_keeps_the_connection() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    let r = roundtrip(&mut s, b"DELETE /only-get HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, HEAD"));
    s.write_all(b"HEAD /only-get HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response_to(&mut s, true).status, 200);
}

#[test]
fn head_gets_headers_without_body() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    s.write_all(b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response_to(&mut s, true);
    assert_eq!(r.header("content-length"), Some("13"));
    // The next response starts right after the head: no stray body bytes.
    assert_eq!(read_response(&mut s).text(), "Hello, World\n");
}

#[test]
fn slowloris_gets_408_and_is_closed() {
    let srv = start("timeouts: { header: 300ms }", BASIC_ROUTES);
    let mut s = srv.connect();
    s.write_all(b"GET /hello HTTP/1.1\r\nHo").unwrap();
    // paces: the rest of the head half the header timeout later.
    std::thread::sleep(Duration::from_millis(150));
    s.write_all(b"st: t\r\n").unwrap();
    let r = read_response(&mut s);
    assert_eq!(r.status, 408);
    assert_closed(&mut s);
}

#[test]
fn idle_keep_alive_connections_are_closed_silently() {
    let srv = start("timeouts: { keepalive: 200ms }", BASIC_ROUTES);
    let mut s = srv.connect();
    assert_eq!(
        roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
    let mut rest = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "no 408 for an idle connection");
}

#[test]
fn max_requests_per_connection() {
    let srv = start("limits: { max_requests_per_connection: 2 }", BASIC_ROUTES);
    let mut s = srv.connect();
    assert_eq!(
        roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").header("connection"),
        None
    );
    assert_eq!(
        roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").header("connection"),
        Some("close")
    );
    assert_closed(&mut s);
}

#[test]
fn graceful_shutdown_finishes_in_flight_and_closes_idle() {
    let mut srv = start("timeouts: { shutdown: 5s }", BASIC_ROUTES);
    let addr = srv.addr;
    let mut idle = srv.connect();
    assert_eq!(
        roundtrip(&mut idle, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
    let mut busy = srv.connect();
    // The 100 Continue says the head was read: the request is in flight.
    busy.write_all(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut busy).status, 100);
    busy.write_all(b"hello").unwrap();

    let handle = srv.handle.take().unwrap();
    handle.shutdown();
    assert_closed(&mut idle);
    // No new connections are accepted once the listener is gone.
    until(
        "the listener closed after shutdown",
        Duration::from_secs(10),
        || std::net::TcpStream::connect(addr).is_err(),
    );

    busy.write_all(b"world").unwrap();
    let r = read_response(&mut busy);
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("helloworld"));
    assert_eq!(r.header("connection"), Some("close"));
    assert_closed(&mut busy);
    handle.join();
}

#[test]
fn routes_by_host_header_and_method() {
    let routes = r#"
      - match: { host: api.example.com, path_prefix: /v1/ }
        respond: { body: "api\n" }
      - match: { host: "*.example.com" }
        respond: { body: "wild\n" }
      - match: { headers: { x-debug: "1" } }
        respond: { body: "debug\n" }
      - match: { path_regex: "^/items/[0-9]+$", methods: [PUT] }
        respond: { status: 201, body: "stored\n" }
"#;
    let srv = start("server_header: off", routes);
    let req = |raw: &str| {
        let mut s = srv.connect();
        roundtrip(&mut s, raw.as_bytes())
    };
    let r = req("GET /v1/x HTTP/1.1\r\nHost: API.example.com:8080\r\n\r\n");
    assert_eq!(r.text(), "api\n");
    assert_eq!(r.header("server"), None, "server_header: off");
    assert_eq!(
        req("GET /v1/x HTTP/1.1\r\nHost: www.example.com\r\n\r\n").text(),
        "wild\n"
    );
    assert_eq!(
        req("GET / HTTP/1.1\r\nHost: other\r\nX-Debug: 1\r\n\r\n").text(),
        "debug\n"
    );
    assert_eq!(req("GET / HTTP/1.1\r\nHost: other\r\n\r\n").status, 404);
    let r = req("PUT /items/42 HTTP/1.1\r\nHost: other\r\nContent-Length: 0\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (201, "stored\n"));
    assert_eq!(
        req("GET /items/42 HTTP/1.1\r\nHost: other\r\n\r\n").header("allow"),
        Some("PUT")
    );
}

#[test]
fn echo_answers_json_when_asked() {
    let srv = start("", BASIC_ROUTES);
    let mut s = srv.connect();
    let r = roundtrip(&mut s, b"POST /echo/x?y=1 HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["method"], "POST");
    assert_eq!(v["path"], "/echo/x");
    assert_eq!(v["query"], "y=1");
    assert_eq!(v["body"], "hi");
}

#[test]
fn respond_from_body_file_and_multiple_listeners() {
    let dir = tempdir("respond");
    std::fs::write(dir.join("page.html"), "<h1>from file</h1>").unwrap();
    let yaml = format!(
        "workers: 2\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ status: 503, body_file: {}/page.html, headers: {{ content-type: text/html, retry-after: '5' }} }}\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ status: 204 }}\n",
        dir.display()
    );
    let srv = start_config(&yaml);
    let r = get(srv.addr, "/anything");
    assert_eq!((r.status, r.text().as_str()), (503, "<h1>from file</h1>"));
    assert_eq!(r.header("retry-after"), Some("5"));
    let second = srv.handle.as_ref().unwrap().local_addrs()[1];
    let r = get(second, "/");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("content-length"), None);
}

pub fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weir-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_request_that_arrives_after_accept_is_served() {
    // Without TCP_DEFER_ACCEPT the first read on a fresh socket finds nothing, so the connection
    // must register with the reactor and wait; pipelining afterwards uses the registered path.
    let srv = start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    defer_accept: false\n    routes:\n{BASIC_ROUTES}"
    ));
    let mut s = srv.connect();
    // paces: the request comes 150 ms after the connect.
    std::thread::sleep(Duration::from_millis(150));
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /json HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).text(), "Hello, World\n");
    assert_eq!(
        read_response(&mut s).header("content-type"),
        Some("application/json")
    );
    // paces: the next request after the connection went back to waiting.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
}

#[test]
fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout_despite_defer_accept() {
    // With TCP_DEFER_ACCEPT the kernel holds a silent connection before weir sees it; weir
    // counts that time against `timeouts.header` (2 s here: the kernel holds 1 s, weir 1 s).
    let srv = start("timeouts: { header: 2s }", BASIC_ROUTES);
    let started = Instant::now();
    let mut s = srv.connect();
    assert!(
        closed_within(&mut s, Duration::from_secs(6)),
        "a silent connection was still open after 6 s"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_millis(3600),
        "closed after {took:?}, expected about 2 s (the header timeout plus at most two sweeps)"
    );
}
