//! A server connection's receiving side (weir-h2 `conn`, issue 54) on arbitrary bytes after a
//! valid preface and SETTINGS, fed in pieces as a socket delivers them: it never panics, never
//! takes more than it was given, and its events name only streams a client may open (odd).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Instant;
use weir_h2::conn::{Conn, Event};
use weir_h2::frame::{put_settings, PREFACE};
use weir_h2::guard::Guard;
use weir_h2::settings::Settings;

fuzz_target!(|data: &[u8]| {
    let local = Settings {
        enable_push: false,
        max_concurrent_streams: Some(8),
        max_header_list_size: Some(16 * 1024),
        ..Settings::default()
    };
    let mut c: Conn = Conn::new(local, Guard::new(1_000, 100, 64 * 1024, Instant::now()));
    let mut wire = PREFACE.to_vec();
    put_settings(&mut wire, &[]);
    wire.extend_from_slice(data);
    // The first byte picks the piece size (1..=256).
    let piece = usize::from(data.first().copied().unwrap_or(0)) + 1;
    let (mut buf, mut out, mut events) = (Vec::new(), Vec::new(), Vec::new());
    for chunk in wire.chunks(piece) {
        buf.extend_from_slice(chunk);
        match c.recv(&buf, Instant::now(), &mut out, &mut events) {
            Ok(n) => {
                assert!(n <= buf.len());
                buf.drain(..n);
            }
            Err(_) => break,
        }
        out.clear();
    }
    for e in &events {
        let stream = match e {
            Event::Request { stream, .. }
            | Event::TooLarge { stream }
            | Event::Data { stream, .. }
            | Event::Trailers { stream, .. }
            | Event::Reset { stream, .. } => *stream,
            _ => 1,
        };
        assert_eq!(stream % 2, 1, "{e:?}");
    }
});
