//! Limits per route and per site over the top-level ones (issue 53 §4, nginx's
//! `client_max_body_size` in a `server` or `location`): a route or site may take larger bodies
//! than `limits.max_body_bytes` or smaller ones, declared (`Content-Length`: 413 before
//! anything is read) or not (chunked: 413 once past), over HTTP/1.1 and HTTP/3.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;

use common::h3::{self as h3c, Client};
use common::inproc;
use common::tlskit::Pki;

fn post(addr: SocketAddr, host: &str, path: &str, len: usize, chunked: bool) -> u16 {
    let body = vec![b'x'; len];
    let mut raw = if chunked {
        format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n")
            .into_bytes()
    } else {
        format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len}\r\n\r\n")
            .into_bytes()
    };
    if chunked {
        for part in body.chunks(4096) {
            raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            raw.extend_from_slice(part);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
    } else {
        raw.extend_from_slice(&body);
    }
    let mut s = common::connect(addr);
    // The server may answer 413 and close before it read the whole body.
    let _ = std::io::Write::write_all(&mut s, &raw);
    common::read_response_to(&mut s, false).status
}

#[test]
fn routes_and_sites_set_their_own_body_limits() {
    let pki = Pki::new("route-limits");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let port = common::process::free_port();
    let handle = inproc::start(&format!(
        r#"workers: 1
limits: {{ max_body_bytes: 1k }}
listeners:
  - address: 127.0.0.1:0
    sites:
      - hosts: uploads.test
        limits: {{ max_body_bytes: 64k }}
        routes:
          - match: {{ path_prefix: /tiny }}
            limits: {{ max_body_bytes: 100 }}
            echo: {{}}
          - echo: {{}}
      - default: true
        routes:
          - match: {{ path_prefix: /big }}
            limits: {{ max_body_bytes: 100k }}
            echo: {{}}
          - echo: {{}}
  - address: 127.0.0.1:{port}
    quic: true
    tls:
      certificates: [{{ cert: '{cert}', key: '{key}' }}]
    routes:
      - match: {{ path_prefix: /big }}
        limits: {{ max_body_bytes: 100k }}
        echo: {{}}
      - echo: {{}}
"#,
        cert = cert.cert.display(),
        key = cert.key.display(),
    ));
    let addr = handle.local_addrs()[0];
    let cases = [
        // host, path, length, chunked, status
        ("other.test", "/big", 50_000, false, 200),
        ("other.test", "/big", 50_000, true, 200),
        ("other.test", "/big", 200_000, false, 413),
        ("other.test", "/big", 200_000, true, 413),
        ("other.test", "/small", 500, false, 200),
        ("other.test", "/small", 2_000, false, 413),
        ("other.test", "/small", 2_000, true, 413),
        ("uploads.test", "/x", 30_000, false, 200),
        ("uploads.test", "/x", 30_000, true, 200),
        ("uploads.test", "/x", 70_000, false, 413),
        ("uploads.test", "/tiny", 100, false, 200),
        ("uploads.test", "/tiny", 101, false, 413),
        ("uploads.test", "/tiny", 200, true, 413),
    ];
    for (host, path, len, chunked, want) in cases {
        let got = post(addr, host, path, len, chunked);
        assert_eq!(
            got, want,
            "POST {host}{path} with {len} bytes (chunked: {chunked})"
        );
    }
    // HTTP/3: the same limits, one route above the top-level one and one at it.
    let c = Client::new(h3c::client_config(&pki.ca_der, false));
    let h3 = handle.local_addrs()[1];
    let send = |path: &str, len: usize| {
        c.request(h3, "leaf.test", "POST", path, &[], &vec![b'y'; len])
            .map(|r| r.status)
    };
    assert_eq!(send("/big", 50_000), Ok(200));
    assert_eq!(send("/big", 200_000), Ok(413));
    assert_eq!(send("/small", 2_000), Ok(413));
    assert_eq!(send("/small", 500), Ok(200));
    inproc::stop(handle);
}

/// `weir check --print` says which routes answer under their own (or their site's) limit.
#[test]
fn check_prints_the_effective_limits() {
    let cfg = common::process::write_config(
        "route-limits-check",
        "limits: { max_body_bytes: 1k }\nlisteners:\n  - address: 127.0.0.1:0\n    sites:\n      - hosts: a.test\n        limits: { max_body_bytes: 64k, keepalive_timeout: 5s }\n        routes: [ { name: up, echo: {} }, { name: slow, limits: { body_timeout: 2m }, echo: {} } ]\n",
    );
    let out = std::process::Command::new(common::process::WEIR)
        .args(["check", "--no-bind", "--print", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("# effective limits: max_body_bytes 1024, timeouts.body 30s, timeouts.keepalive 60s unless a route says:")
            && text.contains("route up: max_body_bytes 65536 (limits.max_body_bytes 1024), keepalive_timeout 5s (timeouts.keepalive 60s)")
            && text.contains("route slow: max_body_bytes 65536 (limits.max_body_bytes 1024), body_timeout 120s (timeouts.body 30s), keepalive_timeout 5s"),
        "{text}"
    );
}

/// `limits.body_timeout` on a route (nginx's `client_body_timeout` in a `location`): a body
/// that stalls longer than the route allows is 408 there, while another route waits the
/// top-level `timeouts.body`.
#[test]
fn a_route_waits_for_its_body_as_long_as_it_says() {
    use std::io::Write;
    let handle = inproc::start(
        r#"workers: 1
timeouts: { body: 10s }
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: { path_prefix: /quick }
        limits: { body_timeout: 300ms }
        echo: {}
      - echo: {}
"#,
    );
    let addr = handle.local_addrs()[0];
    let stalled = |path: &str| {
        let mut s = common::connect(addr);
        s.write_all(
            format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello")
                .as_bytes(),
        )
        .unwrap();
        // paces: the body stalls past the route's wait, within the top-level one.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let _ = s.write_all(b"world");
        common::read_response_to(&mut s, false).status
    };
    assert_eq!(stalled("/quick"), 408);
    assert_eq!(stalled("/other"), 200);
    inproc::stop(handle);
}

/// `limits.keepalive_timeout` on a route or site (nginx's `keepalive_timeout` in a `location`
/// or `server`): after that route answers, the connection waits that long for its next request
/// and is closed after, where another route's answer leaves the listener's wait.
#[test]
fn a_route_keeps_the_connection_as_long_as_it_says() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let handle = inproc::start(
        r#"workers: 1
timeouts: { keepalive: 30s }
listeners:
  - address: 127.0.0.1:0
    sites:
      - hosts: brief.test
        limits: { keepalive_timeout: 300ms }
        routes:
          - respond: { status: 200, body: "site" }
      - default: true
        routes:
          - match: { path_prefix: /brief }
            limits: { keepalive_timeout: 300ms }
            respond: { status: 200, body: "brief" }
          - respond: { status: 200, body: "other" }
"#,
    );
    let addr = handle.local_addrs()[0];
    // How long the connection stays open after one answer (capped at `cap`).
    let open_for = |host: &str, path: &str, cap: Duration| {
        let mut s = common::connect(addr);
        let r = common::roundtrip(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200);
        let start = Instant::now();
        s.set_read_timeout(Some(cap)).unwrap();
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => start.elapsed(),
            Ok(_) => panic!("unexpected bytes"),
            Err(_) => cap,
        }
    };
    let cap = Duration::from_secs(3);
    let brief = open_for("t", "/brief", cap);
    assert!(
        brief >= Duration::from_millis(250) && brief < cap,
        "{brief:?}"
    );
    let site = open_for("brief.test", "/", cap);
    assert!(site >= Duration::from_millis(250) && site < cap, "{site:?}");
    // Another route: the listener's 30 s, still open when the test stops waiting.
    assert_eq!(
        open_for("t", "/other", Duration::from_millis(1500)),
        Duration::from_millis(1500)
    );
    // The next request on the connection decides the next wait: /brief then /other waits long.
    let mut s = common::connect(addr);
    assert_eq!(
        common::roundtrip(&mut s, b"GET /brief HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
    assert_eq!(
        common::roundtrip(&mut s, b"GET /other HTTP/1.1\r\nHost: t\r\n\r\n").status,
        200
    );
    s.set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(
        s.read(&mut b).is_err(),
        "closed after /other: the listener's wait applies"
    );
    inproc::stop(handle);
}
