//! Issue 55's small parsers on arbitrary bytes: gRPC-Web content types and base64 text bodies
//! (cut anywhere: the pieces decode to what the whole does), and W3C `traceparent` /
//! `tracestate` from a trusted peer (what goes upstream is always whole field lines: no bare
//! CR or LF, whatever the client sent).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::proxy::grpc_web::{self, TextDecoder};

fuzz_target!(|data: &[u8]| {
    if let Some((mode, codec)) = grpc_web::mode(data) {
        assert!(codec.iter().all(|b| b.is_ascii_graphic()));
        let ct = grpc_web::client_type(mode, Some(data));
        assert!(ct.iter().all(|b| b.is_ascii_graphic()));
    }
    let _ = grpc_web::is_grpc_answer(Some(data));

    let cut = data.first().map_or(0, |b| *b as usize).min(data.len());
    let mut pieces = TextDecoder::default();
    let a = pieces.push(&data[..cut]);
    let b = pieces.push(&data[cut..]);
    let mut whole = TextDecoder::default();
    if let (Ok(a), Ok(b), Ok(w)) = (a, b, whole.push(data)) {
        if pieces.finish().is_ok() && whole.finish().is_ok() {
            assert_eq!([&a[..], &b[..]].concat(), &w[..]);
        }
    }

    let mut raw = bytes::BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\ntraceparent: "[..]);
    raw.extend_from_slice(data);
    raw.extend_from_slice(b"\r\ntracestate: ");
    raw.extend_from_slice(data);
    raw.extend_from_slice(b"\r\n\r\n");
    if let Ok(Some(head)) = weir_http::parse_request(&mut raw, &weir_http::Limits::default()) {
        let settings = weir::trace::context::TraceSettings::compile(&weir::config::model::Tracing {
            sample: 0.5,
            trust_from: vec!["127.0.0.0/8".into()],
            otlp: None,
        })
        .unwrap();
        let t = settings.context(&head, "127.0.0.1".parse().unwrap());
        let lines = t.upstream_lines(&head);
        assert!(lines.ends_with(b"\r\n"));
        for line in lines[..lines.len() - 2].split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            assert!(!line.contains(&b'\r') && !line.contains(&b'\n'));
        }
    }
});
