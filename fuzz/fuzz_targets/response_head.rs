//! The upstream response head parser on arbitrary bytes: it never panics (a reason phrase that
//! is not UTF-8 once underflowed a pointer subtraction), what it takes is within the input, and
//! the framing it decides is one of the three a response can have.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_http::{parse_response, BodyKind};

fuzz_target!(|data: &[u8]| {
    for head_request in [false, true] {
        let mut buf = BytesMut::from(data);
        if let Ok(Some(h)) = parse_response(&mut buf, 64 * 1024, head_request) {
            assert!(h.head_len <= data.len());
            assert_eq!(buf.len(), data.len() - h.head_len);
            assert!(h.reason.len() <= h.head_len);
            assert!((100..=999).contains(&h.status));
            if head_request {
                assert_eq!(h.body, BodyKind::Empty);
            }
        }
    }
});
