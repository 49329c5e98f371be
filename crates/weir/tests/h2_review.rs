//! The outside review of issue 54's HTTP/2 server (weir-h2 on the server path), one test per
//! finding, over raw frames: each failed before its fix.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::h2raw::{
    block, frame, raw, read_frame, DATA, GOAWAY, HEADERS, PING, RST_STREAM, SETTINGS,
};
use common::start_config;

const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PROTOCOL_ERROR: u32 = 0x1;
const STREAM_CLOSED: u32 = 0x5;
const CANCEL: u32 = 0x8;

struct Setup {
    server: common::TestServer,
    seen: Arc<Mutex<Vec<String>>>,
    _origin: common::origin::Origin,
}

/// An h2c listener: /hello answered by weir, /p/ proxied to an origin that logs each request
/// line it parses and answers /p/slow after 1.5 s.
fn setup(extra: &str) -> Setup {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let origin = common::origin::http_origin(move |req| {
        log.lock().unwrap().push(req.line.clone());
        if req.line.contains("/p/slow") {
            std::thread::sleep(Duration::from_millis(1500));
        }
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n".to_vec()
    });
    let yaml = format!(
        r#"workers: 1
{extra}
upstreams: {{ o: {{ servers: ['{}'] }} }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - match: {{ path: /hello }}
        respond: {{ body: "Hello, World\n" }}
      - match: {{ path_prefix: /echo }}
        echo: {{}}
      - match: {{ path_prefix: /p/ }}
        proxy: {{ upstream: o }}
"#,
        origin.addr
    );
    Setup {
        server: start_config(&yaml),
        seen,
        _origin: origin,
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let mut s = raw(addr);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&frame(SETTINGS, 0x1, 0, &[])).unwrap();
    s
}

fn request(method: &str, path: &str, more: &[(&str, &[u8])]) -> Vec<u8> {
    let mut fields: Vec<(&str, &[u8])> = vec![
        (":method", method.as_bytes()),
        (":scheme", b"http"),
        (":authority", b"a"),
        (":path", path.as_bytes()),
    ];
    fields.extend_from_slice(more);
    block(&fields)
}

/// Frames until a PING acknowledgement (the connection is alive) or a GOAWAY (its code) or
/// the end: the RST_STREAMs seen on the way, and the GOAWAY code.
fn settle(s: &mut TcpStream) -> (Vec<(u32, u32)>, Option<u32>) {
    s.write_all(&frame(PING, 0, 0, b"settle!!")).unwrap();
    let mut resets = Vec::new();
    while let Some((kind, flags, id, payload)) = read_frame(s) {
        match kind {
            RST_STREAM => resets.push((id, u32::from_be_bytes(payload[..4].try_into().unwrap()))),
            GOAWAY => {
                let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                return (resets, Some(code));
            }
            PING if flags & 0x1 == 1 && payload == b"settle!!" => return (resets, None),
            _ => {}
        }
    }
    (resets, None)
}

/// Finding 1: `content-length: 5,5` is 5 to the parser (and to the origin), and the DATA is
/// held to it: more is a malformed request, reset, and nothing past the 5 octets reaches the
/// origin (it once read a second, smuggled request there).
#[test]
fn a_length_list_holds_the_data_to_it() {
    let s = setup("");
    let mut c = connect(s.server.addr);
    let head = request("POST", "/p/upload", &[("content-length", b"5,5")]);
    c.write_all(&frame(HEADERS, END_HEADERS, 1, &head)).unwrap();
    let body = b"AAAAAGET /p/SMUGGLED HTTP/1.1\r\nhost: victim\r\n\r\n";
    c.write_all(&frame(DATA, END_STREAM, 1, body)).unwrap();
    let got = common::h2raw::outcome_of(&mut c, 1);
    eprintln!("{got:?}");
    assert_eq!(got.reset, Some(PROTOCOL_ERROR), "{got:?}");
    std::thread::sleep(Duration::from_millis(300));
    let seen = s.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|l| !l.contains("SMUGGLED")),
        "the origin read a second request: {seen:?}"
    );
    // A body of the announced length goes through whole.
    let head = request("POST", "/echo", &[("content-length", b"5,5")]);
    let got = common::h2raw::request(s.server.addr, &head);
    assert!(got.answered || got.reset.is_some());
}

/// Finding 4: a page's streams cancelled together (a browser navigating away) are not rapid
/// reset: only streams opened and reset in the same read count.
#[test]
fn cancelling_a_page_s_streams_is_not_rapid_reset() {
    let s = setup("");
    let mut c = connect(s.server.addr);
    let mut opens = Vec::new();
    for i in 0..30u32 {
        let id = 2 * i + 1;
        opens.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            &request("GET", "/p/slow", &[]),
        ));
    }
    c.write_all(&opens).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut cancels = Vec::new();
    for i in 0..30u32 {
        cancels.extend(frame(RST_STREAM, 0, 2 * i + 1, &CANCEL.to_be_bytes()));
    }
    c.write_all(&cancels).unwrap();
    let (_, goaway) = settle(&mut c);
    assert_eq!(goaway, None, "cancelled streams ended the connection");
    c.write_all(&frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        61,
        &request("GET", "/hello", &[]),
    ))
    .unwrap();
    assert_eq!(
        common::h2raw::outcome_of(&mut c, 61).text(),
        "Hello, World\n"
    );
}

/// Finding 5: DATA on a closed stream draws one RST_STREAM STREAM_CLOSED, not one per frame
/// (a reset flood the flood guard did not see).
#[test]
fn data_on_a_closed_stream_is_answered_once() {
    let s = setup("");
    let mut c = connect(s.server.addr);
    c.write_all(&frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &request("GET", "/hello", &[]),
    ))
    .unwrap();
    assert_eq!(
        common::h2raw::outcome_of(&mut c, 1).text(),
        "Hello, World\n"
    );
    let flood: Vec<u8> = (0..2000)
        .flat_map(|_| frame(DATA, END_STREAM, 1, &[]))
        .collect();
    c.write_all(&flood).unwrap();
    let (resets, goaway) = settle(&mut c);
    assert_eq!(goaway, None);
    let closed = resets.iter().filter(|r| **r == (1, STREAM_CLOSED)).count();
    assert!(closed <= 1, "{closed} RST_STREAMs for one closed stream");
}

/// Finding 6: trailers over the header list size reset their stream (PROTOCOL_ERROR); no
/// second answer (431) starts on a stream already being answered.
#[test]
fn oversized_trailers_reset_their_stream() {
    let s = setup("http2: { max_header_list_size: 4k }");
    let mut c = connect(s.server.addr);
    c.write_all(&frame(
        HEADERS,
        END_HEADERS,
        1,
        &request("POST", "/echo", &[]),
    ))
    .unwrap();
    c.write_all(&frame(DATA, 0, 1, b"some body")).unwrap();
    let big = vec![b'x'; 6000];
    let trailers = block(&[("x-trailer", &big)]);
    c.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailers))
        .unwrap();
    let mut answered_431 = false;
    let mut reset = None;
    while let Some((kind, _, id, payload)) = read_frame(&mut c) {
        if id != 1 {
            continue;
        }
        if kind == HEADERS && payload.windows(3).any(|w| w == b"431") {
            answered_431 = true;
        }
        if kind == RST_STREAM {
            reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
            break;
        }
        if kind == DATA || kind == HEADERS {
            // An answer other than the reset: keep reading until the stream's end.
            continue;
        }
    }
    assert!(!answered_431, "a 431 on a stream being answered");
    assert_eq!(reset, Some(PROTOCOL_ERROR));
    let (_, goaway) = settle(&mut c);
    assert_eq!(goaway, None);
}

/// From the review of issue 54 §2: HTTP/2 never sent `100 Continue`, so a client that waits
/// for it before its body (as it may, RFC 9110 §10.1.1) waited until `timeouts.body`. The
/// interim response now comes when the body is first read, and then the body is echoed.
#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let s = setup("");
    let mut c = connect(s.server.addr);
    let head = request(
        "POST",
        "/echo",
        &[("content-length", b"5"), ("expect", b"100-continue")],
    );
    c.write_all(&frame(HEADERS, END_HEADERS, 1, &head)).unwrap();
    // Nothing of the body is sent until the interim response: a HEADERS frame on stream 1
    // without END_STREAM whose block is `:status 100`.
    let mut interim = None;
    while let Some((kind, flags, id, payload)) = read_frame(&mut c) {
        if kind == HEADERS && id == 1 {
            interim = Some((flags, payload));
            break;
        }
        assert_ne!(kind, GOAWAY, "the connection ended");
    }
    let (flags, payload) = interim.expect("no HEADERS on stream 1 within 5 s: no 100 Continue");
    assert_eq!(
        flags & END_STREAM,
        0,
        "the interim head does not end the stream"
    );
    // `:status` by its static name (entry 8), the value a literal: 0x08, length 3, "100".
    assert_eq!(payload, b"\x08\x03100", "a 100 head");
    c.write_all(&frame(DATA, END_STREAM, 1, b"hello")).unwrap();
    let got = common::h2raw::outcome_of(&mut c, 1);
    assert!(got.answered, "{got:?}");
}
