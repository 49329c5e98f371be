//! Table tests for `request.rs`.

use super::*;

fn parse(s: &[u8]) -> Result<Option<RequestHead>, ParseError> {
    let mut b = BytesMut::from(s);
    parse_request(&mut b, &Limits::default())
}

fn status(s: &[u8]) -> u16 {
    parse(s).expect_err("should be rejected").status()
}

#[test]
fn parses_simple_get() {
    let mut b = BytesMut::from(&b"GET /a?b=1 HTTP/1.1\r\nHost: x.test:8080\r\n\r\nGET"[..]);
    let h = parse_request(&mut b, &Limits::default()).unwrap().unwrap();
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.path(), b"/a");
    assert_eq!(h.query(), Some(&b"b=1"[..]));
    assert_eq!(h.host(), Some(&b"x.test"[..]));
    assert_eq!(h.body, BodyKind::Empty);
    assert!(h.keep_alive);
    assert_eq!(&b[..], b"GET", "only the head is consumed");
}

#[test]
fn partial_is_none_and_leaves_buffer() {
    let mut b = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n"[..]);
    assert!(parse_request(&mut b, &Limits::default()).unwrap().is_none());
    assert_eq!(b.len(), 25);
}

#[test]
fn cookies() {
    let h = parse(b"GET / HTTP/1.1\r\nHost: a\r\nCookie: a=1; session=xyz\r\nCookie: b=2\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.cookie("session"), Some(&b"xyz"[..]));
    assert_eq!(h.cookie("b"), Some(&b"2"[..]));
    assert_eq!(h.cookie("sess"), None, "no prefix matches");
}

#[test]
fn keep_alive_rules() {
    let ka = |s: &[u8]| parse(s).unwrap().unwrap().keep_alive;
    assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(ka(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    ));
    assert!(!ka(
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, Close\r\n\r\n"
    ));
    assert!(ka(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
}

#[test]
fn rejections() {
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"),
        400
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n"), 400);
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n"),
        400
    );
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: a\r\nX\x7f: a\r\n\r\n"),
        400
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
    assert_eq!(status(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n"), 505);
    assert_eq!(status(b"GET / FTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/5.1\r\0\nHost: a\r\n\r\n"), 400);
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n"),
        417
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        501
    );
}

#[test]
fn limits() {
    let limits = Limits {
        max_head_bytes: 100,
        max_uri_bytes: 20,
        ..Limits::default()
    };
    let mut long_uri =
        BytesMut::from(&b"GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n"[..]);
    assert_eq!(
        parse_request(&mut long_uri, &limits).unwrap_err(),
        ParseError::UriTooLong
    );
    let mut partial_uri = BytesMut::from(&[b'/'; 60][..]);
    partial_uri[..4].copy_from_slice(b"GET ");
    assert_eq!(
        parse_request(&mut partial_uri, &limits).unwrap_err(),
        ParseError::UriTooLong
    );
    let mut big = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n"[..]);
    big.extend_from_slice(&[b'x'; 120]);
    assert_eq!(
        parse_request(&mut big, &limits).unwrap_err(),
        ParseError::HeadTooLarge
    );
    let mut many = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: a\r\n"[..]);
    for _ in 0..200 {
        many.extend_from_slice(b"a: b\r\n");
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_request(&mut many, &Limits::default()).unwrap_err(),
        ParseError::HeadTooLarge
    );
}

#[test]
fn expect_and_absolute_form() {
    let h = parse(b"PUT http://h.test/x?y HTTP/1.1\r\nHost: h.test\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.expect_continue);
    assert_eq!(h.path(), b"/x");
    assert_eq!(h.body, BodyKind::Length(2));
}

#[test]
fn host_is_validated_and_normalised() {
    for bad in [
        &b"GET /x HTTP/1.1\r\nHost: victim.example/b\r\n\r\n"[..],
        b"GET /x HTTP/1.1\r\nHost: bad host\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: a@b\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: [::1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost:\r\n\r\n",
        b"GET /x HTTP/1.0\r\nHost: a/b\r\n\r\n",
        b"GET http://a/x HTTP/1.1\r\nHost: a/b\r\n\r\n",
        b"GET http://u@a/x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http://a/b/x HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
        b"GET x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /a?q#frag HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(
            status(bad),
            400,
            "{}",
            String::from_utf8_lossy(bad).escape_debug()
        );
    }
    let h = parse(b"GET /a HTTP/1.1\r\nHost: WWW.Example.com.:80\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.host(), Some(&b"www.example.com"[..]));
    assert_eq!(h.authority(), Some(&b"www.example.com"[..]));
    assert!(parse(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").is_ok());
    let h = parse(b"GET /a HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert_eq!(h.authority(), None);
}

#[test]
fn absolute_form_authority_wins() {
    let h =
        parse(b"GET http://Victim.example:8080/b/x?q=1 HTTP/1.1\r\nHost: other.example\r\n\r\n")
            .unwrap()
            .unwrap();
    assert_eq!(h.host(), Some(&b"victim.example"[..]));
    assert_eq!(h.authority(), Some(&b"victim.example:8080"[..]));
    assert_eq!(h.path(), b"/b/x");
    assert_eq!(h.query(), Some(&b"q=1"[..]));
    let h = parse(b"GET https://h.test:443?q HTTP/1.1\r\nHost: h.test\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(h.authority(), Some(&b"h.test"[..]));
    assert_eq!(h.path(), b"/", "an empty path is /");
    assert_eq!(h.query(), Some(&b"q"[..]));
}

#[test]
fn a_bad_version_gets_the_same_status_whatever_the_read_boundaries() {
    // (wire, status): every split point must give the same answer as the whole line.
    let table: &[(&[u8], u16)] = &[
        (b"OPTIONS * HTTP/5.1\r\0\0\nHost: [::1]:\n\r\n", 400),
        (b"GET / HTTP/5.1\r\nHost: a\r\n\r\n", 505),
        (b"GET / HTTP/2\r\nHost: a\r\n\r\n", 505),
        (b"GET / HTTP/x.1\r\nHost: a\r\n\r\n", 400),
        (b"OPTIONS * HOPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    ];
    for (wire, want) in table {
        for at in 0..wire.len() {
            let mut buf = BytesMut::from(&wire[..at]);
            let first = parse_request(&mut buf, &Limits::default());
            let got = match first {
                Err(e) => e.status(),
                Ok(Some(_)) => panic!("parsed a bad version"),
                Ok(None) => {
                    buf.extend_from_slice(&wire[at..]);
                    parse_request(&mut buf, &Limits::default())
                        .err()
                        .map_or(0, |e| e.status())
                }
            };
            assert_eq!(
                got,
                *want,
                "{:?} split at {at}",
                String::from_utf8_lossy(wire)
            );
        }
    }
}
