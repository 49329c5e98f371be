//! The DoS shield over real sockets: every limit and action, the example contract
//! (examples/shield.yaml as written), PROXY protocol v1 and v2, the admin API and /metrics.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::{roundtrip, start_config, Response, TestServer};
use weir::shield::proxy_protocol;

const EXAMPLE: &str = include_str!("../../../examples/shield.yaml");
const GET: &[u8] = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

/// examples/shield.yaml with these variables, on port 0 (admin too), one worker.
fn example(vars: &[(&str, &str)]) -> (TestServer, SocketAddr) {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([
            ("WEIR_LISTEN".into(), "127.0.0.1:0".into()),
            ("WEIR_ADMIN".into(), "127.0.0.1:0".into()),
            ("WEIR_WORKERS".into(), "2".into()),
        ])
        .collect();
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"));
    let cfg = weir::runtime::load_str(EXAMPLE, dir, |v| vars.get(v).cloned()).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let addr = handle.local_addrs()[0];
    let admin = handle.admin_addr().unwrap();
    (
        TestServer {
            handle: Some(handle),
            addr,
        },
        admin,
    )
}

/// A server from `yaml` and its admin address.
fn server(yaml: &str) -> (TestServer, SocketAddr) {
    let s = start_config(yaml);
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    (s, admin)
}

/// Sends `raw` on a new connection from `from` and reads until close: `None` when the
/// connection was closed with no reply.
fn once_from(from: &str, addr: SocketAddr, raw: &[u8]) -> Option<Response> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let bind: SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&bind.into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(raw);
    reply_or_close(&mut s)
}

/// The next response on `s`, or `None` when it closes (or resets) first.
fn reply_or_close(s: &mut TcpStream) -> Option<Response> {
    let mut first = [0u8; 1];
    match s.read(&mut first) {
        Ok(1) => {}
        _ => return None,
    }
    let mut rest = std::io::Cursor::new(first.to_vec()).chain(s);
    Some(common::read_response_to(&mut rest, false))
}

fn once(addr: SocketAddr, raw: &[u8]) -> Option<Response> {
    once_from("127.0.0.1", addr, raw)
}

fn admin(admin: SocketAddr, method: &str, path: &str) -> Response {
    let mut s = common::connect(admin);
    roundtrip(
        &mut s,
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
            .as_bytes(),
    )
}

/// The value of one sample line of /metrics (`name{labels}`), 0 when absent.
fn metric(admin_addr: SocketAddr, sample: &str) -> f64 {
    let text = admin(admin_addr, "GET", "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

fn action(limit: &str, action: &str) -> String {
    format!("weir_shield_actions_total{{limit=\"{limit}\",action=\"{action}\"}}")
}

#[test]
fn example_blocks_a_client_over_its_connection_limit_until_the_admin_unblocks_it() {
    let (s, adm) = example(&[("WEIR_CONN_LIMIT", "3"), ("WEIR_REQ_RATE", "1000")]);
    let mut open: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut c = s.connect();
            assert_eq!(roundtrip(&mut c, GET).status, 200);
            c
        })
        .collect();
    assert!(
        once(s.addr, GET).is_none(),
        "a 4th connection is closed at accept"
    );
    // Blocked for 10 s: closing a connection does not let a new one in, and the open ones
    // are closed at their next request.
    drop(open.pop());
    // Its close counted (two left, and this scrape's connection).
    common::until(
        "the closed connection counted out",
        Duration::from_secs(10),
        || metric(adm, "weir_connections_open") == 3.0,
    );
    assert!(once(s.addr, GET).is_none(), "blocked");
    open[0].write_all(GET).unwrap();
    assert!(
        reply_or_close(&mut open[0]).is_none(),
        "a request on an open connection"
    );
    let listed = admin(adm, "GET", "/shield").text();
    assert!(
        listed.contains(r#""client":"127.0.0.1""#) && listed.contains(r#""limit":"connections""#),
        "{listed}"
    );
    assert_eq!(metric(adm, &action("connections", "block")), 1.0);
    assert!(metric(adm, &action("blocked", "close")) >= 2.0);
    assert_eq!(metric(adm, "weir_shield_blocked_clients"), 1.0);

    let r = admin(adm, "POST", "/shield/unblock?client=127.0.0.1");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        admin(adm, "POST", "/shield/unblock?client=127.0.0.1").status,
        404
    );
    assert_eq!(
        admin(adm, "POST", "/shield/unblock?client=nope").status,
        400
    );
    drop(open);
    common::until(
        "the connections counted out",
        Duration::from_secs(10),
        || metric(adm, "weir_connections_open") == 1.0,
    );
    assert_eq!(
        once(s.addr, GET).map(|r| r.status),
        Some(200),
        "served again"
    );
}

#[test]
fn example_blocks_a_client_over_its_request_rate_with_a_429() {
    let (s, adm) = example(&[("WEIR_REQ_RATE", "10")]);
    let mut c = s.connect();
    for i in 0..10 {
        assert_eq!(roundtrip(&mut c, GET).status, 200, "request {i}");
    }
    let r = roundtrip(&mut c, GET);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("10"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(once(s.addr, GET).is_none(), "blocked for 10 s");
    assert_eq!(metric(adm, &action("request_rate", "block")), 1.0);
    // The table is in /metrics with its bound.
    assert!(metric(adm, "weir_shield_clients") >= 1.0);
    assert_eq!(metric(adm, "weir_shield_max_clients"), 65536.0);
}

#[test]
fn reply_answers_429_and_keeps_the_connection_counting_only_admitted_requests() {
    let (s, adm) = server(
        "workers: 1\nshield: {action: reply, requests: {rate: 5}}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let mut c = s.connect();
    for _ in 0..5 {
        assert_eq!(roundtrip(&mut c, GET).status, 200);
    }
    for _ in 0..20 {
        let r = roundtrip(&mut c, GET);
        assert_eq!((r.status, r.header("retry-after")), (429, Some("1")));
        assert_ne!(r.header("connection"), Some("close"));
    }
    // Refused requests did not count: a second later the client has its whole rate back.
    // paces: the rate's second passes.
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..5 {
        assert_eq!(roundtrip(&mut c, GET).status, 200);
    }
    assert_eq!(metric(adm, &action("request_rate", "reply")), 20.0);
    assert_eq!(metric(adm, &action("request_rate", "block")), 0.0);
}

#[test]
fn request_burst_per_eighth_of_a_second() {
    let (s, adm) = server(
        "workers: 1\nshield: {action: reply, requests: {rate: 1000, burst: 3}}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let mut c = s.connect();
    // Four pipelined requests arrive in one read: the fourth is over the burst.
    c.write_all(&GET.repeat(4)).unwrap();
    let statuses: Vec<u16> = (0..4)
        .map(|_| common::read_response(&mut c).status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(metric(adm, &action("request_burst", "reply")), 1.0);
}

#[test]
fn connection_rate_and_burst_with_close() {
    let (s, adm) = server(
        "workers: 1\nshield: {action: close, connections: {rate: 4, burst: 3}}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let ok = |s: &TestServer| once(s.addr, GET).is_some_and(|r| r.status == 200);
    // Ten connections as fast as they go (well within 1/4 s): at most 3 per 1/8 s and 4 in
    // the second are served, whatever slot boundary falls among them.
    let served = (0..10).filter(|_| ok(&s)).count();
    assert!((3..=4).contains(&served), "{served} served");
    assert!(metric(adm, &action("connection_burst", "close")) >= 1.0);
    // Not blocked (action: close): a second later, three now and three in a later 1/8 s: the
    // burst is whole again there, the rate (4 a second) is not.
    // paces: the rate's second passes.
    std::thread::sleep(Duration::from_millis(1100));
    let first = (0..3).filter(|_| ok(&s)).count();
    // paces: into a later 1/8 s slot.
    std::thread::sleep(Duration::from_millis(150));
    let second = (0..3).filter(|_| ok(&s)).count();
    assert!(
        first >= 1 && first + second <= 4,
        "{first} + {second} served"
    );
    assert!(metric(adm, &action("connection_rate", "close")) >= 1.0);
}

#[test]
fn the_allow_list_bypasses_every_limit_and_other_clients_are_apart() {
    let (s, adm) = server(
        "workers: 1\nshield: {allow: [127.0.0.2], requests: {rate: 2}}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    for _ in 0..10 {
        assert_eq!(
            once_from("127.0.0.2", s.addr, GET).map(|r| r.status),
            Some(200)
        );
    }
    // 127.0.0.3 passes its own rate and is blocked; 127.0.0.4 is not affected.
    for _ in 0..2 {
        assert_eq!(
            once_from("127.0.0.3", s.addr, GET).map(|r| r.status),
            Some(200)
        );
    }
    assert_eq!(
        once_from("127.0.0.3", s.addr, GET).map(|r| r.status),
        Some(429)
    );
    assert!(once_from("127.0.0.3", s.addr, GET).is_none());
    assert_eq!(
        once_from("127.0.0.4", s.addr, GET).map(|r| r.status),
        Some(200)
    );
    let listed = admin(adm, "GET", "/shield").text();
    assert!(!listed.contains("127.0.0.2"), "{listed}");
    assert!(listed.contains(r#""client":"127.0.0.3""#), "{listed}");
}

const PROXIED: &str = "workers: 1
shield: {requests: {rate: 3}, block_for: 10s}
listeners:
  - address: 127.0.0.1:0
    proxy_protocol: {trusted: [127.0.0.1]}
    routes:
      - respond: {body: \"client $remote_addr\\n\"}
  - address: 127.0.0.1:0
    proxy_protocol: {trusted: [10.0.0.0/8]}
    routes:
      - respond: {body: ok}
admin: {address: '127.0.0.1:0'}
";

#[test]
fn proxy_protocol_v1_and_v2_name_the_client_and_key_the_shield() {
    let (s, adm) = server(PROXIED);
    let server_addr: SocketAddr = "10.0.0.1:80".parse().unwrap();
    let v1 = |client: &str| {
        let mut raw = proxy_protocol::v1(client.parse().unwrap(), server_addr).into_bytes();
        raw.extend_from_slice(GET);
        once(s.addr, &raw)
    };
    let v2 = |client: &str| {
        let mut raw = proxy_protocol::v2(client.parse().unwrap(), server_addr, &[0x04, 0, 1, 7]);
        raw.extend_from_slice(GET);
        once(s.addr, &raw)
    };
    assert_eq!(v1("192.0.2.7:5555").unwrap().text(), "client 192.0.2.7\n");
    assert_eq!(
        v2("198.51.100.9:1").unwrap().text(),
        "client 198.51.100.9\n"
    );
    assert_eq!(
        v2("[2001:db8::5]:1").unwrap().text(),
        "client 2001:db8::5\n",
        "IPv6 in v2"
    );
    // The shield counts the PROXY client: 192.0.2.7 passes its rate and is blocked, while the
    // balancer (127.0.0.1) and its other clients are served.
    assert_eq!(v1("192.0.2.7:5556").unwrap().status, 200);
    assert_eq!(v2("192.0.2.7:5557").unwrap().status, 200);
    assert_eq!(v1("192.0.2.7:5558").unwrap().status, 429);
    assert!(
        v2("192.0.2.7:1").is_none(),
        "blocked, whichever version names it"
    );
    assert_eq!(v1("192.0.2.8:1").unwrap().status, 200);
    let listed = admin(adm, "GET", "/shield").text();
    assert!(listed.contains(r#""client":"192.0.2.7""#), "{listed}");
    assert!(!listed.contains(r#""client":"127.0.0.1""#), "{listed}");

    // No header, a broken one, or a plain request: closed without a reply.
    assert!(once(s.addr, GET).is_none());
    assert!(once(
        s.addr,
        b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\nGET / HTTP/1.1\r\n\r\n"
    )
    .is_none());
    // An untrusted source (127.0.0.1 is not in 10.0.0.0/8) is refused even with a header.
    let other = s.handle.as_ref().unwrap().local_addrs()[1];
    let mut raw = proxy_protocol::v2("192.0.2.9:1".parse().unwrap(), server_addr, &[]);
    raw.extend_from_slice(GET);
    assert!(once(other, &raw).is_none(), "v2 from an untrusted source");
    let mut raw = proxy_protocol::v1("192.0.2.9:1".parse().unwrap(), server_addr).into_bytes();
    raw.extend_from_slice(GET);
    assert!(once(other, &raw).is_none(), "v1 from an untrusted source");
    assert_eq!(metric(adm, &action("proxy_protocol", "close")), 4.0);
}

#[test]
fn the_client_table_stays_within_its_bound_under_address_churn_from_proxy_headers() {
    let (s, adm) = server(
        "workers: 2\nshield: {clients: 1024, requests: {rate: 100}}\nlisteners:\n  - address: 127.0.0.1:0\n    proxy_protocol: {trusted: [127.0.0.1]}\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let server_addr: SocketAddr = "10.0.0.1:80".parse().unwrap();
    const N: u32 = 20_000;
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let addr = s.addr;
            std::thread::spawn(move || {
                for n in (t..N).step_by(4) {
                    let client = SocketAddr::from(((0x0a00_0000 + n).to_be_bytes(), 1));
                    let mut raw = proxy_protocol::v2(client, server_addr, &[]);
                    raw.extend_from_slice(
                        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                    );
                    assert_eq!(once(addr, &raw).map(|r| r.status), Some(200));
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let clients = metric(adm, "weir_shield_clients");
    let evicted = metric(adm, "weir_shield_clients_evicted_total");
    assert!(clients <= 1024.0, "{clients} clients remembered");
    assert!(
        clients + evicted >= f64::from(N),
        "{clients} + {evicted} evicted"
    );
}

#[test]
fn shape_limits_answer_with_their_status_and_can_block() {
    let (s, adm) = server(
        "workers: 1
shield: {action: reply}
listeners:
  - address: 127.0.0.1:0
    filters:
      - shape: {max_headers: 6, max_header_bytes: 64, max_uri_bytes: 40, refuse_method_override: true, strict_host: true}
    routes:
      - match: {path_prefix: /api}
        filters:
          - shape: {methods: [GET, POST], content_types: [application/json], max_body_bytes: 16}
        echo: {}
      - match: {path_prefix: /login}
        filters:
          - shape: {methods: [POST], block: true}
        respond: {body: ok}
      - respond: {body: ok}
admin: {address: '127.0.0.1:0'}
",
    );
    let status = |raw: &str| once(s.addr, raw.as_bytes()).map(|r| r.status);
    assert_eq!(status("GET /x HTTP/1.1\r\nHost: t\r\n\r\n"), Some(200));
    assert_eq!(
        status(
            "GET /x HTTP/1.1\r\nHost: t\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\n\r\n"
        ),
        Some(431)
    );
    assert_eq!(
        status(&format!(
            "GET /x HTTP/1.1\r\nHost: t\r\nA: {}\r\n\r\n",
            "a".repeat(70)
        )),
        Some(431)
    );
    assert_eq!(
        status(&format!(
            "GET /{} HTTP/1.1\r\nHost: t\r\n\r\n",
            "a".repeat(50)
        )),
        Some(414)
    );
    assert_eq!(
        status("GET /x HTTP/1.1\r\nHost: t\r\nX-HTTP-Method-Override: DELETE\r\n\r\n"),
        Some(400)
    );
    assert_eq!(
        status("GET http://other/x HTTP/1.1\r\nHost: t\r\n\r\n"),
        Some(400)
    );
    let r = once(s.addr, b"DELETE /api HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, POST")));
    assert_eq!(
        status("POST /api HTTP/1.1\r\nHost: t\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi"),
        Some(415)
    );
    assert_eq!(
        status("POST /api HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"a\":\"123456789\"}"),
        Some(413)
    );
    // A chunked body is held to the cap as it is read.
    assert_eq!(
        status("POST /api HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"),
        Some(413)
    );
    assert_eq!(
        status("POST /api HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n0\r\n\r\n"),
        Some(200)
    );
    assert!(metric(adm, &action("shape", "reply")) >= 8.0);
    // `block: true`: the client is blocked whatever the shield's action.
    assert_eq!(status("GET /login HTTP/1.1\r\nHost: t\r\n\r\n"), Some(405));
    assert_eq!(
        status("GET /x HTTP/1.1\r\nHost: t\r\n\r\n"),
        None,
        "blocked"
    );
    assert_eq!(metric(adm, &action("shape", "block")), 1.0);
}

#[test]
fn dribbled_heads_and_bodies_are_cut_after_their_reads() {
    let (s, adm) = server(
        "workers: 1\nshield: {action: reply, reads: {head: 3, body: 2}}\nlisteners:\n  - address: 127.0.0.1:0\n    defer_accept: false\n    routes:\n      - echo: {}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let dribble = |pieces: &[&str]| {
        let mut c = s.connect();
        for p in pieces {
            c.write_all(p.as_bytes()).unwrap();
            // paces: one piece per read.
            std::thread::sleep(Duration::from_millis(60));
        }
        reply_or_close(&mut c).map(|r| r.status)
    };
    assert_eq!(
        dribble(&["GET / HT", "TP/1.1\r\nHo", "st: t\r\n\r\n"]),
        Some(200),
        "3 reads"
    );
    assert_eq!(
        dribble(&["GET / HT", "TP/1.1\r\n", "Ho", "st: t\r\n\r\n"]),
        Some(408),
        "4 reads"
    );
    let post = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\n";
    assert_eq!(dribble(&[post, "ab", "cdef"]), Some(200), "2 body reads");
    assert_eq!(
        dribble(&[post, "ab", "cd", "ef"]),
        Some(408),
        "3 body reads"
    );
    assert_eq!(metric(adm, &action("head_reads", "reply")), 1.0);
    assert_eq!(metric(adm, &action("body_reads", "reply")), 1.0);
}

#[test]
fn password_guessing_blocks_after_n_failures_within_the_window() {
    let (s, adm) = server(
        "workers: 1\nshield: {outcomes: {statuses: [401, 403], count: 3, within: 10s}, block_for: 5s}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - match: {path: /login}\n        respond: {status: 401, body: no}\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let mut c = s.connect();
    let login = b"GET /login HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_eq!(roundtrip(&mut c, login).status, 401);
    assert_eq!(roundtrip(&mut c, GET).status, 200);
    assert_eq!(roundtrip(&mut c, login).status, 401);
    assert_eq!(
        roundtrip(&mut c, login).status,
        401,
        "the third is answered, then blocks"
    );
    c.write_all(GET).unwrap();
    assert!(reply_or_close(&mut c).is_none());
    assert!(once(s.addr, GET).is_none());
    assert_eq!(metric(adm, &action("outcomes", "block")), 1.0);
}

#[test]
fn tls_handshake_rate_and_incomplete_handshakes() {
    let pki = common::tlskit::Pki::new("shield");
    let cert = pki.issue("srv", "srv", &["shield.test"]);
    let (s, adm) = server(&format!(
        "workers: 1\nshield: {{action: close, connections: {{tls_rate: 3, tls_incomplete: 2}}}}\nlisteners:\n  - address: 127.0.0.1:0\n    tls: {{certificates: [{{cert: '{}', key: '{}'}}]}}\n    routes:\n      - respond: {{body: ok}}\nadmin: {{address: '127.0.0.1:0'}}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let cfg = common::tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    for _ in 0..3 {
        assert!(common::tlskit::connect(s.addr, "shield.test", &cfg).is_ok());
    }
    assert!(
        common::tlskit::connect(s.addr, "shield.test", &cfg).is_err(),
        "a 4th handshake in the second"
    );
    assert_eq!(metric(adm, &action("tls_rate", "close")), 1.0);
    // paces: the handshake rate's second passes.
    std::thread::sleep(Duration::from_millis(1100));
    // Handshakes that fail (a record that is no ClientHello): the 3rd in a second passes
    // tls_incomplete.
    for _ in 0..3 {
        let _ = once(s.addr, &[0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8]);
    }
    assert_eq!(metric(adm, &action("tls_incomplete", "close")), 1.0);
}

#[test]
fn http2_glitches_go_away_then_close_and_block() {
    use common::h2raw;
    let (s, adm) = server(
        "workers: 1\nshield: {http2_glitches: 8, block_for: 5s}\nlisteners:\n  - address: 127.0.0.1:0\n    h2c: true\n    routes:\n      - respond: {body: ok}\nadmin: {address: '127.0.0.1:0'}\n",
    );
    let mut c = h2raw::raw(s.addr);
    // Rapid reset: open a stream and reset it at once, again and again.
    for i in 0..8u32 {
        let id = 1 + 2 * i;
        let mut wire = h2raw::frame(0x1, 0x4 | 0x1, id, &h2raw::get("http", b"t", b"/"));
        wire.extend(h2raw::frame(0x3, 0, id, &8u32.to_be_bytes()));
        let _ = c.write_all(&wire);
    }
    let goaway = h2raw::until(&mut c, 0x7, 0).expect("GOAWAY");
    // The last GOAWAY carries ENHANCE_YOUR_CALM (0xb); a graceful one may come first.
    let mut codes = vec![u32::from_be_bytes(goaway[4..8].try_into().unwrap())];
    while let Some(f) = h2raw::until(&mut c, 0x7, 0) {
        codes.push(u32::from_be_bytes(f[4..8].try_into().unwrap()));
    }
    assert!(codes.contains(&0xb), "GOAWAY codes {codes:?}");
    assert_eq!(metric(adm, &action("http2_glitches", "block")), 1.0);
    assert!(once(s.addr, GET).is_none(), "blocked");
}

#[test]
fn bad_shield_settings_name_file_line_and_key() {
    let e = common::config_error(
        "shield:\n  action: drop\nlisteners:\n  - address: 127.0.0.1:0\n    routes: []\n",
    );
    assert!(e.contains("config:2: shield.action"), "{e}");
    let e = common::config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    proxy_protocol: {trusted: [bogus]}\n    routes: []\n",
    );
    assert!(e.contains("listeners[0].proxy_protocol.trusted[0]"), "{e}");
    let e = common::config_error(
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - filters: [{shape: {block: true}}]\n        respond: {body: x}\n",
    );
    assert!(e.contains("shape.block") && e.contains("shield"), "{e}");
}

/// Issue 33 §4: IPv6 clients rotating addresses within their /64 escaped every limit. The
/// shield counts an IPv6 client by its network of `ipv6_prefix` bits (64 by default), as
/// `rate_limit` can; the admin API unblocks it by any of its addresses.
#[test]
fn ipv6_clients_are_counted_by_their_network() {
    let (s, adm) = server(PROXIED);
    let server_addr: SocketAddr = "[2001:db8::1]:80".parse().unwrap();
    let from = |client: &str| {
        let mut raw = proxy_protocol::v2(client.parse().unwrap(), server_addr, &[]);
        raw.extend_from_slice(GET);
        once(s.addr, &raw)
    };
    // rate 3: three addresses of one /64 pass, the fourth is refused, the fifth blocked.
    for host in 1..=3 {
        assert_eq!(
            from(&format!("[2001:db8:0:7::{host}]:1")).unwrap().status,
            200
        );
    }
    assert_eq!(from("[2001:db8:0:7::4]:1").unwrap().status, 429);
    assert!(
        from("[2001:db8:0:7:ffff::9]:1").is_none(),
        "blocked by its /64"
    );
    // Another /64 is another client.
    assert_eq!(from("[2001:db8:0:8::1]:1").unwrap().status, 200);
    let listed = admin(adm, "GET", "/shield").text();
    assert!(listed.contains(r#""client":"2001:db8:0:7::""#), "{listed}");
    let r = admin(adm, "POST", "/shield/unblock?client=2001:db8:0:7::abcd");
    assert_eq!(r.status, 200, "{}", r.text());
    drop(s);
    // ipv6_prefix: 128 counts every address apart.
    let (s, _) = server(&PROXIED.replace("block_for: 10s", "block_for: 10s, ipv6_prefix: 128"));
    let from = |client: &str| {
        let mut raw = proxy_protocol::v2(client.parse().unwrap(), server_addr, &[]);
        raw.extend_from_slice(GET);
        once(s.addr, &raw)
    };
    for host in 1..=6 {
        assert_eq!(
            from(&format!("[2001:db8:0:7::{host}]:1")).unwrap().status,
            200
        );
    }
}
