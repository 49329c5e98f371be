//! A client connection's receiving side (weir-h2 `client`, issue 55 §2: what weir reads from
//! HTTP/2 upstreams) on arbitrary bytes after the server's SETTINGS, with three streams open,
//! fed in pieces as a socket delivers them: it never panics, never takes more than it was
//! given, and its events name only streams this side opened.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_h2::client::{Client, Event};
use weir_h2::frame::put_settings;
use weir_h2::settings::Settings;

fuzz_target!(|data: &[u8]| {
    let local = Settings {
        max_header_list_size: Some(16 * 1024),
        ..Settings::default()
    };
    let mut c = Client::new(local, 100);
    let mut out = Vec::new();
    c.greeting(1 << 20, &mut out);
    let mut opened = Vec::new();
    for (i, path) in [&b"/a"[..], b"/b", b"/c"].into_iter().enumerate() {
        let id = c.open((b"POST", b"http", b"up", path), std::iter::empty(), i == 2, &mut out);
        opened.push(id);
    }
    let mut wire = Vec::new();
    put_settings(&mut wire, &[]);
    wire.extend_from_slice(data);
    // The first byte picks the piece size (1..=256).
    let piece = usize::from(data.first().copied().unwrap_or(0)) + 1;
    let (mut buf, mut events) = (Vec::new(), Vec::new());
    for chunk in wire.chunks(piece) {
        buf.extend_from_slice(chunk);
        match c.recv(&buf, &mut out, &mut events) {
            Ok(n) => {
                assert!(n <= buf.len());
                buf.drain(..n);
            }
            Err(_) => break,
        }
        out.clear();
        // The caller takes what came (windows given back), and sends what it may.
        for e in &events {
            if let Event::Data { stream, data, .. } = e {
                c.consumed(*stream, data.len() as u32, &mut out);
            }
        }
        for id in &opened {
            let _ = c.data(*id, b"body", false, &mut out);
        }
    }
    for e in &events {
        let stream = match e {
            Event::Head { stream, .. }
            | Event::Interim { stream, .. }
            | Event::Data { stream, .. }
            | Event::Trailers { stream, .. }
            | Event::Reset { stream, .. } => Some(*stream),
            _ => None,
        };
        if let Some(s) = stream {
            assert!(opened.contains(&s), "{e:?}");
        }
    }
});
