//! The HTTP/2 frame decoder on arbitrary bytes (issue 54): it never panics, what it takes is
//! a whole frame within the input (header + the length it declares, never past the advertised
//! SETTINGS_MAX_FRAME_SIZE), and payloads it hands out lie inside that frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_h2::frame::{decode, Frame, DEFAULT_MAX_FRAME, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((frame, n))) = decode(rest, DEFAULT_MAX_FRAME) {
        assert!(n >= HEADER_LEN && n <= rest.len());
        assert!(n - HEADER_LEN <= DEFAULT_MAX_FRAME as usize);
        let payload_len = n - HEADER_LEN;
        match frame {
            Frame::Data { data, flow, .. } => {
                assert!(data.len() <= payload_len);
                assert_eq!(flow as usize, payload_len);
            }
            Frame::Headers { block, .. } | Frame::Continuation { block, .. } => {
                assert!(block.len() <= payload_len)
            }
            Frame::Settings { params, .. } => assert_eq!(params.len() % 6, 0),
            Frame::GoAway { debug, .. } => assert!(debug.len() + 8 == payload_len),
            Frame::WindowUpdate { increment, .. } => assert!(increment > 0),
            _ => {}
        }
        rest = &rest[n..];
    }
});
