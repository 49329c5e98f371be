//! The request parser on arbitrary bytes: it never panics, the result does not depend on how
//! the bytes were split across reads (the first byte of the input picks the split), and the
//! path it gives is a fixed point of the normal form (`weir_http::path`).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use weir_http::{parse_request, Limits};

fn parse(parts: &[&[u8]]) -> Result<Option<(Vec<u8>, usize, usize)>, u16> {
    let limits = Limits::default();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    for part in parts {
        buf.extend_from_slice(part);
        fed += part.len();
        match parse_request(&mut buf, &limits) {
            Ok(Some(h)) => {
                // What the parser took is exactly the head: the rest is left for the body.
                let consumed = fed - buf.len();
                let _ = (h.authority(), h.path(), h.query(), h.keep_alive, h.body);
                // The path is in its normal form: normalising it again changes nothing.
                if h.target.first() == Some(&b'/') {
                    let again = weir_http::path::normalize(h.path(), false)
                        .expect("a parsed path normalises");
                    assert!(again.is_none_or(|p| p == h.path()), "normal form is a fixed point");
                }
                return Ok(Some((h.target.to_vec(), h.fields().len(), consumed)));
            }
            Ok(None) => {}
            Err(e) => return Err(e.status()),
        }
    }
    Ok(None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, wire)) = data.split_first() else {
        return;
    };
    let whole = parse(&[wire]);
    let at = (split as usize).min(wire.len());
    let split_result = parse(&[&wire[..at], &wire[at..]]);
    // A split can only turn an error into the same error or a success that the whole input
    // would also give: the verdict is the same.
    assert_eq!(whole, split_result, "split at {at}");
});
