#[test]
fn drop_sets_filter_an_encoded_head_line_by_line() {
    let head = b"HTTP/1.1 200 OK\r\nA: 1\r\nX-Drop: 2\r\nB: 3\r\nx-drop: 4\r\n";
    let drop = |n: &[u8]| n.eq_ignore_ascii_case(b"x-drop");
    let other = |n: &[u8]| n.eq_ignore_ascii_case(b"b");
    let mut r = Reply::new(200, Framing::Given);
    r.base = Base::Encoded(head);
    r.date = false;
    r.drop_fields(&drop);
    let mut out = BytesMut::new();
    r.encode_h1(&mut out, Version::Http11, Persistence::KeepAlive);
    assert_eq!(&out[..], b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 3\r\n\r\n");
    r.drop_fields(&other);
    let mut out = BytesMut::new();
    r.encode_h1(&mut out, Version::Http11, Persistence::KeepAlive);
    assert_eq!(
        &out[..],
        b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n",
        "a second drop set"
    );
}

#[test]
fn a_field_is_found_in_every_part_of_a_reply() {
    let stored = b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nX-Drop: 1\r\n";
    let added = [(Bytes::from_static(b"X-Added"), Bytes::from_static(b"a"))];
    let drop = |n: &[u8]| n.eq_ignore_ascii_case(b"x-drop");
    let mut r = Reply::new(200, Framing::Given);
    r.base = Base::Encoded(stored);
    r.drop_fields(&drop);
    r.add_fields(&added);
    r.add_lines(b"Cache-Status: weir; hit\r\n");
    assert_eq!(r.field("etag"), Some(&b"\"v1\""[..]));
    assert_eq!(r.field("x-drop"), None);
    assert_eq!(r.field("x-added"), Some(&b"a"[..]));
    assert_eq!(r.field("cache-status"), Some(&b"weir; hit"[..]));
    assert_eq!(r.field("http/1.1 200 ok"), None);
    // One walk says what a lookup per name says.
    let names = ["etag", "x-drop", "x-added", "cache-status", "vary"];
    let all = r.fields_of(names);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(all[i], r.field(n), "{n}");
    }
}

use super::*;

fn h(n: &'static str, v: &'static str) -> Header {
    Header {
        name: Bytes::from_static(n.as_bytes()),
        value: Bytes::from_static(v.as_bytes()),
    }
}

fn encode(r: &Reply<'_>, v: Version, p: Persistence) -> (String, BodyEncoding) {
    let mut out = BytesMut::new();
    let e = r.encode_h1(&mut out, v, p);
    (String::from_utf8(out.to_vec()).unwrap(), e)
}

/// The date line is the only varying part: blank it out for comparison.
fn no_date(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with("Date: "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn framing_and_connection_per_version_table() {
    use Framing::*;
    use Persistence::*;
    use Version::*;
    // (framing, version, persistence) -> (framing and connection lines, body encoding)
    let table = [
        (
            Length(5),
            Http11,
            KeepAlive,
            "Content-Length: 5",
            BodyEncoding::Plain,
        ),
        (
            Length(5),
            Http10,
            KeepAlive,
            "Content-Length: 5\nConnection: keep-alive",
            BodyEncoding::Plain,
        ),
        (
            Length(0),
            Http11,
            Close,
            "Content-Length: 0\nConnection: close",
            BodyEncoding::Plain,
        ),
        (
            Unknown,
            Http11,
            KeepAlive,
            "Transfer-Encoding: chunked",
            BodyEncoding::Chunked,
        ),
        (
            Unknown,
            Http10,
            KeepAlive,
            "Connection: close",
            BodyEncoding::UntilClose,
        ),
        (Given, Http11, KeepAlive, "", BodyEncoding::Plain),
    ];
    for (framing, version, persistence, lines, want) in table {
        let (text, enc) = encode(&Reply::new(200, framing), version, persistence);
        let text = no_date(&text);
        let tail: Vec<&str> = text.lines().skip(1).filter(|l| !l.is_empty()).collect();
        assert_eq!(
            tail.join("\n"),
            lines,
            "{framing:?} {version:?} {persistence:?}"
        );
        assert_eq!(enc, want, "{framing:?} {version:?} {persistence:?}");
        assert!(text.starts_with("HTTP/1.1 200 OK"));
    }
}

#[test]
fn relayed_fields_lose_hop_by_hop_framing_and_dropped_ones() {
    let fields = [
        h("Server", "origin"),
        h("Connection", "x-private, close"),
        h("X-Private", "secret"),
        h("Keep-Alive", "timeout=5"),
        h("Content-Length", "99"),
        h("Transfer-Encoding", "chunked"),
        h("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        h("Set-Cookie", "a=1"),
    ];
    let drop = |n: &[u8]| n.eq_ignore_ascii_case(b"set-cookie");
    let added = [(Bytes::from_static(b"X-Route"), Bytes::from_static(b"api"))];
    let mut r = Reply::new(200, Framing::Length(2));
    r.reason = b"Fine";
    r.base = Base::Fields(&fields);
    r.drop_fields(&drop);
    r.add_fields(&added);
    r.add_lines(b"Via: 1.1 weir\r\n");
    let (text, _) = encode(&r, Version::Http11, Persistence::KeepAlive);
    assert_eq!(
        text,
        "HTTP/1.1 200 Fine\r\nServer: origin\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nX-Route: api\r\nVia: 1.1 weir\r\nContent-Length: 2\r\n\r\n"
    );
}

#[test]
fn an_encoded_base_is_copied_and_filtered_only_when_asked() {
    let head = b"HTTP/1.1 200 OK\r\nETag: \"a\"\r\nSet-Cookie: s=1\r\nContent-Length: 3\r\n";
    let mut r = Reply::new(200, Framing::Given);
    r.base = Base::Encoded(head);
    r.date = false;
    r.add_lines(b"Age: 4\r\n");
    let (text, _) = encode(&r, Version::Http11, Persistence::Close);
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\nETag: \"a\"\r\nSet-Cookie: s=1\r\nContent-Length: 3\r\nAge: 4\r\nConnection: close\r\n\r\n"
    );
    let drop = |n: &[u8]| n.eq_ignore_ascii_case(b"set-cookie");
    r.drop_fields(&drop);
    let (text, _) = encode(&r, Version::Http11, Persistence::KeepAlive);
    assert!(
        !text.contains("Set-Cookie") && text.contains("ETag"),
        "{text}"
    );
}

#[test]
fn rendered_lines_follow_the_added_ones() {
    let age = |out: &mut BytesMut| out.put_slice(b"Age: 3\r\n");
    let mut r = Reply::new(200, Framing::Length(0));
    r.date = false;
    r.add_lines(b"Via: 1.1 weir\r\n");
    r.render = Some(&age);
    let (text, _) = encode(&r, Version::Http11, Persistence::KeepAlive);
    assert_eq!(
        text,
        "HTTP/1.1 200 OK\r\nVia: 1.1 weir\r\nAge: 3\r\nContent-Length: 0\r\n\r\n"
    );
}

#[test]
fn chunks_are_hex_sized_and_empty_data_writes_nothing() {
    let mut out = BytesMut::new();
    put_chunk(&mut out, b"");
    put_chunk(&mut out, &[b'x'; 26]);
    put_chunk(&mut out, b"abc");
    put_last_chunk(&mut out);
    let mut want = b"1a\r\n".to_vec();
    want.extend_from_slice(&[b'x'; 26]);
    want.extend_from_slice(b"\r\n3\r\nabc\r\n0\r\n\r\n");
    assert_eq!(&out[..], &want[..]);
    // What the decoder reads back is what went in.
    let mut dec = crate::BodyDecoder::new(crate::BodyKind::Chunked);
    let mut got = Vec::new();
    while let Ok(crate::BodyEvent::Data(d)) = dec.decode(&mut out) {
        got.extend_from_slice(&d);
    }
    assert_eq!(got.len(), 29);
}
