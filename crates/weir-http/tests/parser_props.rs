//! Property tests for the request parser: it never panics on arbitrary bytes, and parsing is
//! independent of how the bytes were split across reads.

use bytes::BytesMut;
use proptest::prelude::*;
use weir_http::{parse_request, BodyDecoder, BodyEvent, BodyKind, Limits};

fn parse_incrementally(wire: &[u8], split: usize) -> Result<Option<(String, usize)>, u16> {
    let mut buf = BytesMut::new();
    let limits = Limits::default();
    let split = split.min(wire.len());
    buf.extend_from_slice(&wire[..split]);
    match parse_request(&mut buf, &limits) {
        Ok(Some(h)) => {
            return Ok(Some((
                String::from_utf8_lossy(&h.target).into_owned(),
                h.fields().len(),
            )))
        }
        Ok(None) => {}
        Err(e) => return Err(e.status()),
    }
    buf.extend_from_slice(&wire[split..]);
    parse_request(&mut buf, &limits)
        .map(|h| {
            h.map(|h| {
                (
                    String::from_utf8_lossy(&h.target).into_owned(),
                    h.fields().len(),
                )
            })
        })
        .map_err(|e| e.status())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut buf = BytesMut::from(&data[..]);
        let _ = parse_request(&mut buf, &Limits::default());
        let mut d = BodyDecoder::new(BodyKind::Chunked);
        let mut buf = BytesMut::from(&data[..]);
        for _ in 0..64 {
            match d.decode(&mut buf) {
                Ok(BodyEvent::Data(_)) => continue,
                _ => break,
            }
        }
    }

    #[test]
    fn split_point_does_not_change_the_result(
        path in "/[a-zA-Z0-9/._~-]{0,40}",
        names in proptest::collection::vec("[A-Za-z][A-Za-z0-9-]{0,12}", 0..8),
        value in "[ -~]{0,30}",
        split in 0usize..400,
    ) {
        let mut wire = format!("GET {path} HTTP/1.1\r\nHost: t\r\n");
        for n in &names {
            wire.push_str(&format!("{n}: {}\r\n", value.trim()));
        }
        wire.push_str("\r\n");
        let whole = parse_incrementally(wire.as_bytes(), wire.len());
        let split_result = parse_incrementally(wire.as_bytes(), split);
        prop_assert_eq!(&whole, &split_result);
        prop_assert!(whole.is_ok(), "valid request rejected: {:?}", wire);
    }
}
