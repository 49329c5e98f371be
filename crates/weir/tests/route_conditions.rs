//! Route matching on query arguments, cookies and the client's address (issue 36 §2), over a
//! real socket; the client is the PROXY protocol's when the listener takes one.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;

use common::*;

const ROUTES: &str = "      - match: { client: ['10.0.0.0/8'] }\n        respond: { status: 200, body: internal }\n      - match: { query: { debug: '*' }, cookies: { beta: '1' } }\n        respond: { status: 200, body: beta-debug }\n      - match: { query: { lang: 'de fr' } }\n        respond: { status: 200, body: two-languages }\n      - respond: { status: 200, body: default }\n";

#[test]
fn query_cookie_and_client_pick_the_route() {
    let srv = start("", ROUTES);
    let ask = |raw: &str| {
        let mut s = srv.connect();
        roundtrip(&mut s, raw.as_bytes()).text()
    };
    assert_eq!(
        ask("GET /?debug HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n"),
        "beta-debug"
    );
    assert_eq!(
        ask("GET /?debug=yes HTTP/1.1\r\nHost: a\r\nCookie: x=2; beta=1\r\n\r\n"),
        "beta-debug"
    );
    assert_eq!(
        ask("GET /?debug HTTP/1.1\r\nHost: a\r\nCookie: beta=0\r\n\r\n"),
        "default"
    );
    assert_eq!(
        ask("GET /?nodebug HTTP/1.1\r\nHost: a\r\nCookie: beta=1\r\n\r\n"),
        "default"
    );
    assert_eq!(
        ask("GET /x?lang=de+fr HTTP/1.1\r\nHost: a\r\n\r\n"),
        "two-languages"
    );
    assert_eq!(
        ask("GET /x?lang=de%20fr HTTP/1.1\r\nHost: a\r\n\r\n"),
        "two-languages"
    );
    // 127.0.0.1 is not in 10.0.0.0/8.
    assert_eq!(ask("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), "default");
}

#[test]
fn the_client_is_the_proxy_protocol_s() {
    let srv = start_config(&format!(
        "listeners:\n  - address: 127.0.0.1:0\n    proxy_protocol: {{ trusted: ['127.0.0.1'] }}\n    routes:\n{ROUTES}"
    ));
    for (client, want) in [("10.1.2.3", "internal"), ("192.0.2.9", "default")] {
        let mut s = srv.connect();
        s.write_all(format!("PROXY TCP4 {client} 127.0.0.1 5555 80\r\n").as_bytes())
            .unwrap();
        assert_eq!(
            roundtrip(&mut s, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
            want,
            "{client}"
        );
    }
}

#[test]
fn bad_conditions_are_refused_by_key() {
    for (m, key) in [
        (
            "{ client: ['10.0.0.0/40'] }",
            "listeners[0].routes[0].match.client",
        ),
        (
            "{ query: { 'a b': '1' } }",
            "listeners[0].routes[0].match.query.a b",
        ),
        (
            "{ cookies: { 'a;b': '1' } }",
            "listeners[0].routes[0].match.cookies.a;b",
        ),
    ] {
        let e = config_error(&format!(
            "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {m}\n        respond: {{ status: 200 }}\n"
        ));
        assert!(e.contains(key), "{m}: {e}");
    }
}
