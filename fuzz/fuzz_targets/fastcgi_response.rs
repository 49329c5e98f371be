//! What a FastCGI application sends, on arbitrary bytes (issue 53): records are read without
//! panic and only from the input, and whatever CGI header section they carry either is refused
//! or becomes an HTTP/1.1 head weir's own parser reads back whole (or refuses as too many
//! fields), with a final status and no
//! field the application could use to split the response (no framing or connection field of
//! its own, no line break inside a value).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir::proxy::fastcgi::{record, reply};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let mut section = Vec::new();
    while let Ok(Some(r)) = record::next(&mut buf) {
        assert!(r.content.len() <= data.len());
        if r.kind == record::STDOUT {
            section.extend_from_slice(&r.content);
        }
    }
    // The section as records carry it, and the input itself as one (a parser on its own).
    for s in [&section[..], data] {
        let Some(end) = reply::head_end(s) else { continue };
        for bodyless in [false, true] {
            let mut out = BytesMut::new();
            let Ok(status) = reply::write_head(&s[..end], bodyless, &mut out) else {
                continue;
            };
            assert!((200..=599).contains(&status));
            let mut head = out.clone();
            // More fields than weir's parser takes is refused there (502), never misread.
            let parsed = match weir_http::parse_response(&mut head, 1 << 20, false) {
                Err(weir_http::ParseError::HeadTooLarge) => continue,
                other => other.expect("weir's own head parses").expect("whole"),
            };
            assert!(head.is_empty(), "the head is all that was written");
            assert_eq!(parsed.status, status);
            let text = String::from_utf8_lossy(&out);
            let framing = text
                .lines()
                .filter(|l| {
                    let l = l.to_ascii_lowercase();
                    l.starts_with("content-length:") || l.starts_with("transfer-encoding:")
                })
                .count();
            assert!(framing <= 1, "{text}");
        }
    }
});
