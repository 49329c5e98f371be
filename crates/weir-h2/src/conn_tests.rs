//! Tests of `conn.rs` (split off: the connection and its tests each stand under 700 lines),
//! after h2spec's cases.

use super::*;
use crate::frame::{flag, setting, PREFACE};
use crate::hpack::encoder::put_field;

fn conn() -> Conn {
    let local = Settings {
        enable_push: false,
        max_concurrent_streams: Some(2),
        max_header_list_size: Some(16 * 1024),
        ..Settings::default()
    };
    Conn::new(local, Guard::new(1_000, 100, 64 * 1024, Instant::now()))
}

fn start() -> Vec<u8> {
    let mut w = PREFACE.to_vec();
    frame::put_settings(&mut w, &[(setting::INITIAL_WINDOW_SIZE, 100)]);
    w
}

fn get(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "t"),
        (":path", path),
    ] {
        put_field(n.as_bytes(), v.as_bytes(), &mut b);
    }
    b
}

fn headers(w: &mut Vec<u8>, stream: u32, block: &[u8], flags: u8) {
    frame::put_header(w, block.len(), frame::kind::HEADERS, flags, stream);
    w.extend_from_slice(block);
}

fn run(c: &mut Conn, wire: &[u8]) -> (Result<usize, Reason>, Vec<u8>, Vec<Event>) {
    let (mut out, mut ev) = (Vec::new(), Vec::new());
    let r = c.recv(wire, Instant::now(), &mut out, &mut ev);
    (r, out, ev)
}

#[test]
fn a_request_in_two_blocks_then_a_body() {
    let mut c = conn();
    let mut w = start();
    let block = get("/a");
    let (first, rest) = block.split_at(3);
    headers(&mut w, 1, first, 0);
    frame::put_header(
        &mut w,
        rest.len(),
        frame::kind::CONTINUATION,
        flag::END_HEADERS,
        1,
    );
    w.extend_from_slice(rest);
    frame::put_data_header(&mut w, 1, 5, true);
    w.extend_from_slice(b"hello");
    let (r, out, ev) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()));
    // The SETTINGS acknowledgement.
    assert_eq!(&out[..9], &[0, 0, 0, 4, 1, 0, 0, 0, 0]);
    assert!(
        matches!(&ev[0], Event::Request { stream: 1, end_stream: false, pseudo, .. } if pseudo.path() == Some(&b"/a"[..]))
    );
    assert_eq!(
        ev[1],
        Event::Data {
            stream: 1,
            data: b"hello".to_vec(),
            end_stream: true
        }
    );
    // The peer's initial window (100) applies to the response.
    assert_eq!(c.send_window(1), 100);
}

/// A frame cut anywhere waits for the rest, and is counted once.
#[test]
fn frames_in_pieces_wait_for_their_end() {
    let mut c = conn();
    let mut w = start();
    headers(&mut w, 1, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    frame::put_ping(&mut w, false, [1; 8]);
    let mut buf = Vec::new();
    let (mut out, mut events) = (Vec::new(), Vec::new());
    for chunk in w.chunks(5) {
        buf.extend_from_slice(chunk);
        let used = c.recv(&buf, Instant::now(), &mut out, &mut events).unwrap();
        buf.drain(..used);
    }
    assert!(buf.is_empty());
    assert_eq!(events.len(), 1);
    let mut pong = Vec::new();
    frame::put_ping(&mut pong, true, [1; 8]);
    assert!(out.ends_with(&pong));
}

/// h2spec 5.1.2: past SETTINGS_MAX_CONCURRENT_STREAMS, REFUSED_STREAM (the block still
/// decoded: the next request's fields come out right).
#[test]
fn streams_past_the_limit_are_refused() {
    let mut c = conn();
    let mut w = start();
    for id in [1, 3, 5] {
        headers(&mut w, id, &get("/x"), flag::END_HEADERS);
    }
    let (r, out, ev) = run(&mut c, &w);
    assert!(r.is_ok());
    assert_eq!(ev.len(), 2);
    assert_eq!(
        &out[out.len() - 13..out.len() - 4],
        &[0, 0, 4, 3, 0, 0, 0, 0, 5]
    );
    assert_eq!(
        &out[out.len() - 4..],
        &(Reason::RefusedStream as u32).to_be_bytes()
    );
}

/// h2spec 5.1/1, 6.1/2, 6.10/1, 5.1.1/1, 8.1.2.1/3: the connection errors RFC 9113 names.
#[test]
fn connection_errors() {
    // DATA on an idle stream.
    let mut w = start();
    frame::put_data_header(&mut w, 1, 1, true);
    w.push(b'x');
    assert_eq!(run(&mut conn(), &w).0, Err(Reason::ProtocolError));
    // Another frame in the middle of a header block.
    let mut w = start();
    headers(&mut w, 1, &get("/")[..2], 0);
    frame::put_ping(&mut w, false, [0; 8]);
    assert_eq!(run(&mut conn(), &w).0, Err(Reason::ProtocolError));
    // A stream id going down.
    let mut w = start();
    headers(&mut w, 5, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    headers(&mut w, 3, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    assert_eq!(run(&mut conn(), &w).0, Err(Reason::ProtocolError));
    // A block HPACK cannot decode.
    let mut w = start();
    headers(
        &mut w,
        1,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        flag::END_HEADERS,
    );
    assert_eq!(run(&mut conn(), &w).0, Err(Reason::CompressionError));
}

/// h2spec 8.1.2 and 5.1/8: a malformed request or DATA after END_STREAM resets that
/// stream only; PING is answered.
#[test]
fn stream_errors_reset_the_stream_alone() {
    let mut c = conn();
    let mut w = start();
    let mut bad = get("/");
    put_field(b"connection", b"close", &mut bad);
    headers(&mut w, 1, &bad, flag::END_HEADERS | flag::END_STREAM);
    headers(&mut w, 3, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    frame::put_data_header(&mut w, 3, 1, false);
    w.push(b'x');
    frame::put_ping(&mut w, false, [7; 8]);
    let (r, out, ev) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()));
    // Stream 3's request, then word that this side reset it.
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[1], Event::Aborted { stream: 3 });
    let rst = |id: u32, reason: Reason| {
        let mut f = Vec::new();
        frame::put_rst_stream(&mut f, id, reason);
        f
    };
    let hay = |needle: &[u8]| out.windows(needle.len()).any(|x| x == needle);
    assert!(hay(&rst(1, Reason::ProtocolError)));
    assert!(hay(&rst(3, Reason::StreamClosed)));
    let mut pong = Vec::new();
    frame::put_ping(&mut pong, true, [7; 8]);
    assert!(hay(&pong));
}

/// h2spec 6.9.1: a peer that sends past the connection window ends the connection; the
/// application's taking gives the windows back.
#[test]
fn the_receive_windows_hold() {
    let mut c = conn();
    let mut w = start();
    headers(&mut w, 1, &get("/"), flag::END_HEADERS);
    let (r, _, _) = run(&mut c, &w);
    assert!(r.is_ok());
    let mut out = Vec::new();
    let mut body = Vec::new();
    for _ in 0..4 {
        frame::put_data_header(&mut body, 1, 16_000, false);
        body.extend(std::iter::repeat_n(0u8, 16_000));
    }
    assert!(run(&mut c, &body).0.is_ok());
    c.consumed(1, 64_000, &mut out);
    assert!(!out.is_empty(), "window updates");
    let mut more = Vec::new();
    frame::put_data_header(&mut more, 1, 16_000, false);
    more.extend(std::iter::repeat_n(0u8, 16_000));
    assert!(run(&mut c, &more).0.is_ok());
    let mut c = conn();
    let mut w = start();
    headers(&mut w, 1, &get("/"), flag::END_HEADERS);
    for _ in 0..5 {
        frame::put_data_header(&mut w, 1, 16_000, false);
        w.extend(std::iter::repeat_n(0u8, 16_000));
    }
    assert_eq!(run(&mut c, &w).0, Err(Reason::FlowControlError));
}

fn rst(id: u32, reason: Reason) -> Vec<u8> {
    let mut f = Vec::new();
    frame::put_rst_stream(&mut f, id, reason);
    f
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|x| *x == needle).count()
}

/// The outside review of issue 54: frames on streams closed long ago (more than the 64
/// remembered) are ignored, not a connection error, while a new stream below one already
/// opened still is one (§5.1.1); DATA on a closed stream draws one RST_STREAM, not one per
/// frame.
#[test]
fn streams_closed_long_ago_are_told_from_ids_never_opened() {
    let local = Settings {
        max_concurrent_streams: Some(1000),
        max_header_list_size: Some(16 * 1024),
        ..Settings::default()
    };
    let mut c: Conn = Conn::new(local, Guard::new(1_000, 0, 64 * 1024, Instant::now()));
    let mut w = start();
    // 70 streams that end at once, then stream 201 skipping to leave 141..199 unopened.
    for id in (1..=139).step_by(2) {
        headers(&mut w, id, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    }
    let (r, _, ev) = run(&mut c, &w);
    assert!(r.is_ok());
    assert_eq!(ev.len(), 70);
    for id in (1..=139).step_by(2) {
        c.sent_headers(id, true);
    }
    let mut w = Vec::new();
    headers(&mut w, 201, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    // Trailers-like HEADERS and DATA on stream 1, forgotten: ignored.
    headers(&mut w, 1, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    frame::put_data_header(&mut w, 1, 1, true);
    w.push(b'x');
    let (r, out, _) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()), "{out:?}");
    // DATA on stream 139 (closed lately): one RST_STREAM, then the rest ignored.
    let mut w = Vec::new();
    for _ in 0..5 {
        frame::put_data_header(&mut w, 139, 0, true);
    }
    let (r, out, _) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()));
    assert_eq!(count(&out, &rst(139, Reason::StreamClosed)), 1);
    // A new stream on an id skipped over: PROTOCOL_ERROR.
    let mut w = Vec::new();
    headers(&mut w, 151, &get("/"), flag::END_HEADERS | flag::END_STREAM);
    assert_eq!(run(&mut c, &w).0, Err(Reason::ProtocolError));
}

/// A header block on a stream this side reset is decoded for the table only (a block of
/// references to a large entry copies nothing), and draws no second RST_STREAM, over
/// CONTINUATION too; the next request decodes right.
#[test]
fn a_reset_stream_s_block_keeps_the_table_and_says_nothing() {
    let mut c = conn();
    let mut w = start();
    // Stream 1: malformed (an upper-case name), and it indexes a 4,000-octet value.
    let mut bad = get("/");
    bad.push(0x40);
    bad.push(5);
    bad.extend_from_slice(b"x-big");
    crate::hpack::encoder::integer(&mut bad, 4000, 7, 0);
    bad.extend(std::iter::repeat_n(b'v', 4000));
    // (put_field lower-cases names: the literal by hand.)
    bad.extend_from_slice(&[0x00, 5]);
    bad.extend_from_slice(b"Upper");
    bad.extend_from_slice(&[1, b'1']);
    headers(&mut w, 1, &bad, flag::END_HEADERS);
    let (r, out, _) = run(&mut c, &w);
    assert!(r.is_ok());
    assert_eq!(count(&out, &rst(1, Reason::ProtocolError)), 1);
    // 16,000 references to it on stream 1, in two frames (HEADERS + CONTINUATION).
    let refs = vec![0xbe; 16_000];
    let mut w = Vec::new();
    headers(&mut w, 1, &refs[..8000], flag::END_STREAM);
    frame::put_header(
        &mut w,
        8000,
        frame::kind::CONTINUATION,
        flag::END_HEADERS,
        1,
    );
    w.extend_from_slice(&refs[8000..]);
    let (r, out, ev) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()));
    assert!(ev.is_empty() && out.is_empty(), "{ev:?} {out:?}");
    // The table is in step: stream 3 refers to the entry and comes out with it.
    let mut ok = get("/");
    ok.push(0xbe);
    let mut w = Vec::new();
    headers(&mut w, 3, &ok, flag::END_HEADERS | flag::END_STREAM);
    let (_, _, ev) = run(&mut c, &w);
    match &ev[..] {
        [Event::Request { fields, .. }] => {
            assert_eq!(fields[0].0, b"x-big");
            assert_eq!(fields[0].1.len(), 4000);
        }
        other => panic!("{other:?}"),
    }
}

/// Trailers over the header list size end the stream (RST_STREAM PROTOCOL_ERROR): no
/// second answer (431) on a stream being answered.
#[test]
fn trailers_too_large_reset_the_stream() {
    let mut c = conn();
    let mut w = start();
    headers(&mut w, 1, &get("/"), flag::END_HEADERS);
    let mut big = Vec::new();
    put_field(b"x-trailer", &vec![b'a'; 15_000], &mut big);
    put_field(b"x-more", &vec![b'b'; 15_000], &mut big);
    headers(&mut w, 1, &big[..15_000], flag::END_STREAM);
    let rest = &big[15_000..];
    frame::put_header(
        &mut w,
        rest.len(),
        frame::kind::CONTINUATION,
        flag::END_HEADERS,
        1,
    );
    w.extend_from_slice(rest);
    let (r, out, ev) = run(&mut c, &w);
    assert_eq!(r, Ok(w.len()));
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[1], Event::Aborted { stream: 1 });
    assert_eq!(count(&out, &rst(1, Reason::ProtocolError)), 1);
}
