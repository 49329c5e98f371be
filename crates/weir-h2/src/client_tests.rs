//! Tests of `client.rs`: the client against this crate's server connection (`conn.rs`), bytes
//! carried by hand both ways, and against hand-written frames for what a server must not send.

use super::*;
use crate::conn::{Conn, Event as ServerEvent};
use crate::frame::{flag, kind, setting};
use crate::guard::Guard;
use std::time::Instant;

fn server(max_streams: u32) -> Conn {
    let local = Settings {
        enable_push: false,
        max_concurrent_streams: Some(max_streams),
        ..Settings::default()
    };
    Conn::new(local, Guard::new(10_000, 1_000, 64 * 1024, Instant::now()))
}

/// A client and a server past their prefaces (the server's SETTINGS taken).
fn pair(max_streams: u32) -> (Client, Conn) {
    let mut c = Client::new(Settings::default(), 100);
    let mut s = server(max_streams);
    let mut wire = Vec::new();
    c.greeting(1 << 20, &mut wire);
    let mut back = Vec::new();
    s.greeting(&mut back);
    let mut events = Vec::new();
    let n = s
        .recv(&wire, Instant::now(), &mut back, &mut events)
        .unwrap();
    assert_eq!(n, wire.len());
    let mut out = Vec::new();
    let mut ce = Vec::new();
    let n = c.recv(&back, &mut out, &mut ce).unwrap();
    assert_eq!(n, back.len());
    (c, s)
}

fn to_server(s: &mut Conn, wire: &[u8]) -> Vec<ServerEvent> {
    let mut events = Vec::new();
    let mut out = Vec::new();
    let n = s.recv(wire, Instant::now(), &mut out, &mut events).unwrap();
    assert_eq!(n, wire.len());
    events
}

fn to_client(c: &mut Client, wire: &[u8]) -> (Vec<Event>, Vec<u8>) {
    let mut events = Vec::new();
    let mut out = Vec::new();
    let n = c.recv(wire, &mut out, &mut events).unwrap();
    assert_eq!(n, wire.len());
    (events, out)
}

fn answer(stream: u32, status: u16, fields: &[(&[u8], &[u8])], end_stream: bool) -> Vec<u8> {
    let mut block = Vec::new();
    crate::response::put_response(status, fields.iter().copied(), &mut block);
    let mut w = Vec::new();
    frame::put_headers(&mut w, stream, &block, end_stream, 16_384);
    w
}

#[test]
fn a_request_its_body_and_trailers_reach_the_server_and_the_answer_comes_back() {
    let (mut c, mut s) = pair(10);
    let mut wire = Vec::new();
    let fields: [(&[u8], &[u8]); 1] = [(b"content-type", b"application/grpc")];
    let id = c.open(
        (b"POST", b"http", b"up", b"/svc/M"),
        fields.iter().copied(),
        false,
        &mut wire,
    );
    assert_eq!(id, 1);
    assert_eq!(c.data(id, b"hello", false, &mut wire), 5);
    let trailers: [(&[u8], &[u8]); 1] = [(b"x-end", b"1")];
    c.trailers(id, trailers.iter().copied(), &mut wire);
    let ev = to_server(&mut s, &wire);
    assert_eq!(ev.len(), 3, "{ev:?}");
    match &ev[0] {
        ServerEvent::Request { pseudo, fields, .. } => {
            assert_eq!(pseudo.method(), b"POST");
            assert_eq!(pseudo.path(), Some(&b"/svc/M"[..]));
            assert_eq!(
                fields[0],
                (b"content-type".to_vec(), b"application/grpc".to_vec())
            );
        }
        e => panic!("{e:?}"),
    }
    assert!(
        matches!(&ev[1], ServerEvent::Data { data, end_stream: false, .. } if data == b"hello")
    );
    assert!(matches!(&ev[2], ServerEvent::Trailers { .. }));

    let mut w = answer(1, 200, &[(b"content-type", b"application/grpc")], false);
    frame::put_data_header(&mut w, 1, 3, false);
    w.extend_from_slice(b"abc");
    let mut block = Vec::new();
    put_field(b"grpc-status", b"0", &mut block);
    frame::put_headers(&mut w, 1, &block, true, 16_384);
    let (ev, _) = to_client(&mut c, &w);
    assert!(matches!(
        &ev[0],
        Event::Head {
            stream: 1,
            status: 200,
            end_stream: false,
            ..
        }
    ));
    assert!(matches!(&ev[1], Event::Data { data, end_stream: false, .. } if data == b"abc"));
    match &ev[2] {
        Event::Trailers { fields, .. } => {
            assert_eq!(fields[0], (b"grpc-status".to_vec(), b"0".to_vec()))
        }
        e => panic!("{e:?}"),
    }
    // Both sides ended: the stream left the table.
    assert_eq!(c.active(), 0);
}

#[test]
fn the_server_s_max_concurrent_streams_is_respected() {
    let (mut c, _s) = pair(2);
    let mut wire = Vec::new();
    assert!(c.may_open());
    c.open(
        (b"GET", b"http", b"up", b"/a"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    c.open(
        (b"GET", b"http", b"up", b"/b"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    assert!(!c.may_open(), "two streams open, the server allows two");
    let (ev, _) = to_client(&mut c, &answer(1, 204, &[], true));
    assert!(matches!(
        ev[0],
        Event::Head {
            stream: 1,
            status: 204,
            end_stream: true,
            ..
        }
    ));
    assert!(c.may_open(), "one ended: room again");
}

#[test]
fn goaway_stops_new_streams_and_names_the_last_processed() {
    let (mut c, _s) = pair(10);
    let mut wire = Vec::new();
    for p in [&b"/a"[..], b"/b", b"/c"] {
        c.open(
            (b"GET", b"http", b"up", p),
            std::iter::empty(),
            true,
            &mut wire,
        );
    }
    let mut w = Vec::new();
    frame::put_goaway(&mut w, 3, Reason::NoError, b"bye");
    let (ev, _) = to_client(&mut c, &w);
    assert_eq!(
        ev,
        vec![Event::GoAway {
            last_stream: 3,
            code: 0
        }]
    );
    assert!(!c.may_open() && c.is_draining());
    // A later GOAWAY may only lower the last stream.
    let mut w = Vec::new();
    frame::put_goaway(&mut w, 5, Reason::NoError, b"");
    let (ev, _) = to_client(&mut c, &w);
    assert_eq!(
        ev,
        vec![Event::GoAway {
            last_stream: 3,
            code: 0
        }]
    );
}

#[test]
fn a_request_body_waits_on_the_windows_and_goes_on_when_they_open() {
    let mut c = Client::new(Settings::default(), 100);
    let mut wire = Vec::new();
    c.greeting(1 << 20, &mut wire);
    let mut w = Vec::new();
    frame::put_settings(&mut w, &[(setting::INITIAL_WINDOW_SIZE, 10)]);
    to_client(&mut c, &w);
    let id = c.open(
        (b"PUT", b"http", b"up", b"/"),
        std::iter::empty(),
        false,
        &mut wire,
    );
    assert_eq!(c.data(id, &[7u8; 25], true, &mut wire), 10);
    assert_eq!(
        c.data(id, &[7u8; 15], true, &mut wire),
        0,
        "the stream's window is spent"
    );
    let mut w = Vec::new();
    frame::put_window_update(&mut w, id, 100);
    let (ev, _) = to_client(&mut c, &w);
    assert_eq!(ev, vec![Event::WindowOpened]);
    let mut out = Vec::new();
    assert_eq!(c.data(id, &[7u8; 15], true, &mut out), 15);
    // One DATA frame with END_STREAM.
    assert_eq!(out[3], kind::DATA);
    assert_eq!(out[4], flag::END_STREAM);
}

#[test]
fn a_response_body_is_acknowledged_as_it_is_taken() {
    let (mut c, _s) = pair(10);
    let mut wire = Vec::new();
    let id = c.open(
        (b"GET", b"http", b"up", b"/"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    let mut w = answer(id, 200, &[], false);
    for _ in 0..3 {
        frame::put_data_header(&mut w, id, 16_384, false);
        w.extend_from_slice(&[1u8; 16_384]);
    }
    let (ev, out) = to_client(&mut c, &w);
    assert_eq!(ev.len(), 4);
    assert!(out.is_empty(), "nothing owed before the body is taken");
    let mut out = Vec::new();
    c.consumed(id, 16_384, &mut out);
    assert!(out.is_empty(), "a quarter of the window taken: not yet");
    c.consumed(id, 32_768, &mut out);
    assert_eq!(out.len(), 13, "one WINDOW_UPDATE for the stream: {out:?}");
    assert_eq!((out[3], out[8]), (kind::WINDOW_UPDATE, id as u8));
    // More than the window: a stream error, the stream reset, the connection goes on.
    let mut w = Vec::new();
    for _ in 0..5 {
        frame::put_data_header(&mut w, id, 16_384, false);
        w.extend_from_slice(&[1u8; 16_384]);
    }
    let (ev, _) = to_client(&mut c, &w);
    assert_eq!(
        ev.last(),
        Some(&Event::Reset {
            stream: id,
            code: Reason::FlowControlError as u32
        })
    );
}

#[test]
fn a_malformed_response_head_resets_only_its_stream() {
    let (mut c, _s) = pair(10);
    let mut wire = Vec::new();
    let a = c.open(
        (b"GET", b"http", b"up", b"/a"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    let b = c.open(
        (b"GET", b"http", b"up", b"/b"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    // An upper-case name (§8.2.1).
    let mut block = Vec::new();
    put_field(b":status", b"200", &mut block);
    block.extend_from_slice(&[0x00, 0x01, b'X', 0x01, b'1']);
    let mut w = Vec::new();
    frame::put_headers(&mut w, a, &block, true, 16_384);
    let (ev, out) = to_client(&mut c, &w);
    assert_eq!(
        ev,
        vec![Event::Reset {
            stream: a,
            code: Reason::ProtocolError as u32
        }]
    );
    assert_eq!(out[3], kind::RST_STREAM);
    // The other stream goes on.
    let (ev, _) = to_client(&mut c, &answer(b, 200, &[], true));
    assert!(matches!(ev[0], Event::Head { status: 200, .. }));
    // A value with CR LF (it would be a line of its own in an HTTP/1.1 head).
    let e = c.open(
        (b"GET", b"http", b"up", b"/e"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    let mut block = Vec::new();
    put_field(b":status", b"200", &mut block);
    put_field(b"x-a", b"1\r\nset-cookie: x", &mut block);
    let mut w = Vec::new();
    frame::put_headers(&mut w, e, &block, true, 16_384);
    let (ev, _) = to_client(&mut c, &w);
    assert!(
        matches!(ev[0], Event::Reset { stream, .. } if stream == e),
        "{ev:?}"
    );
    // A head without `:status`, and DATA before a head.
    let d = c.open(
        (b"GET", b"http", b"up", b"/d"),
        std::iter::empty(),
        true,
        &mut wire,
    );
    let mut w = Vec::new();
    frame::put_data_header(&mut w, d, 1, true);
    w.push(b'x');
    let (ev, _) = to_client(&mut c, &w);
    assert!(matches!(ev[0], Event::Reset { stream, .. } if stream == d));
}

#[test]
fn interim_heads_come_before_the_final_one() {
    let (mut c, _s) = pair(10);
    let mut wire = Vec::new();
    let id = c.open(
        (b"POST", b"http", b"up", b"/"),
        std::iter::empty(),
        false,
        &mut wire,
    );
    let mut w = answer(id, 103, &[(b"link", b"</a>")], false);
    w.extend(answer(id, 200, &[], true));
    let (ev, _) = to_client(&mut c, &w);
    assert!(matches!(ev[0], Event::Interim { status: 103, .. }));
    assert!(matches!(
        ev[1],
        Event::Head {
            status: 200,
            end_stream: true,
            ..
        }
    ));
}

#[test]
fn pings_are_answered_and_acknowledged() {
    let (mut c, _s) = pair(10);
    let mut w = Vec::new();
    frame::put_ping(&mut w, false, *b"12345678");
    let (ev, out) = to_client(&mut c, &w);
    assert!(ev.is_empty());
    assert_eq!(out[3], kind::PING);
    assert_eq!(out[4], flag::ACK);
    let mut w = Vec::new();
    frame::put_ping(&mut w, true, *b"weirping");
    let (ev, _) = to_client(&mut c, &w);
    assert_eq!(ev, vec![Event::PingAck { data: *b"weirping" }]);
}

#[test]
fn what_a_server_must_not_send_ends_the_connection() {
    // A first frame other than SETTINGS (§3.4).
    let mut c = Client::new(Settings::default(), 100);
    let mut w = Vec::new();
    frame::put_ping(&mut w, false, [0; 8]);
    let mut out = Vec::new();
    let mut ev = Vec::new();
    assert_eq!(c.recv(&w, &mut out, &mut ev), Err(Reason::ProtocolError));
    // A push (ENABLE_PUSH is 0), a stream never opened, a reset of an idle stream.
    for bad in [
        {
            let mut w = Vec::new();
            frame::put_header(&mut w, 4, kind::PUSH_PROMISE, flag::END_HEADERS, 1);
            w.extend_from_slice(&2u32.to_be_bytes());
            w
        },
        answer(9, 200, &[], true),
        {
            let mut w = Vec::new();
            frame::put_rst_stream(&mut w, 7, Reason::Cancel);
            w
        },
    ] {
        let (mut c, _s) = pair(10);
        let mut wire = Vec::new();
        c.open(
            (b"GET", b"http", b"up", b"/"),
            std::iter::empty(),
            true,
            &mut wire,
        );
        let mut out = Vec::new();
        let mut ev = Vec::new();
        assert_eq!(c.recv(&bad, &mut out, &mut ev), Err(Reason::ProtocolError));
    }
}
