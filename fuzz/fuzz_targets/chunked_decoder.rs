//! The chunked decoder on arbitrary bytes: it never panics, never returns more bytes than it
//! was given, and decodes the same body whatever the read boundaries (the first byte picks the
//! size of each read).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_http::{BodyDecoder, BodyEvent, BodyKind};

/// (decoded body, done, error) feeding `wire` in reads of `step` bytes.
fn decode(wire: &[u8], step: usize) -> (Vec<u8>, bool, bool) {
    let mut dec = BodyDecoder::new(BodyKind::Chunked);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match dec.decode(&mut buf) {
            Ok(BodyEvent::Data(d)) => {
                assert!(!d.is_empty(), "Data is never empty");
                body.extend_from_slice(&d);
                assert!(body.len() <= wire.len());
                assert_eq!(dec.consumed(), body.len() as u64);
            }
            Ok(BodyEvent::Done(_)) => return (body, true, false),
            Ok(BodyEvent::NeedMore) => {
                if fed == wire.len() {
                    return (body, false, false);
                }
                let n = step.min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
            Err(_) => return (body, false, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, wire)) = data.split_first() else {
        return;
    };
    let whole = decode(wire, wire.len().max(1));
    let split = decode(wire, (step as usize % 17) + 1);
    // Same verdict; on success the same body. (An error may come after a different amount of
    // partial data, so bodies are compared only when both completed.)
    assert_eq!((whole.1, whole.2), (split.1, split.2));
    if whole.1 {
        assert_eq!(whole.0, split.0);
    }
});
