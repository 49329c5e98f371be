//! Idle TLS keep-alive connections parked outside their task (`server/park.rs`,
//! `tls/stream.rs`, issue 35 §1): a TLS HTTP/1.1 connection with nothing in flight gives up its
//! task, its reactor registration and every buffer, and keeps only rustls' session in its slot;
//! its next request (TLS 1.3 and 1.2) is decrypted with that session and answered with what its
//! handshake settled (server name, client certificate) still known to routes. A connection with
//! half a record read stays in its task, and a `close_notify` sent while parked closes it.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use common::parked::{metric, wait_parked};
use common::tlskit::{self, Pki};
use common::{start_config, until, TestServer};

const ROUTES: &str = r#"
      - match: { path: /who, sni: a.example.test }
        respond: { body: "route for a\n" }
      - match: { path: /who, client_subject: '^CN=alice,' }
        respond: { body: "hello alice\n" }
      - match: { path: /who }
        respond: { body: "anyone\n" }
"#;

fn server(pki: &Pki, client_auth: &str) -> (TestServer, SocketAddr) {
    let a = pki.issue("a", "a.example.test", &["a.example.test", "b.example.test"]);
    let srv = start_config(&format!(
        "workers: 1\ntimeouts: {{ header: 400ms, keepalive: 30s }}\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n{client_auth}    routes:\n{ROUTES}\n",
        a.cert.display(),
        a.key.display(),
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    (srv, admin)
}

const WHO: &str = "GET /who HTTP/1.1\r\nHost: x\r\n\r\n";

#[test]
fn tls_connections_park_and_are_served_again_with_their_handshake() {
    let pki = Pki::new("park-tls");
    let (srv, admin) = server(&pki, "");
    let tls13 = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let mut conns = vec![
        (
            tlskit::connect(srv.addr, "a.example.test", &tls13).unwrap(),
            "route for a\n",
        ),
        (
            tlskit::connect(srv.addr, "b.example.test", &tls13).unwrap(),
            "anyone\n",
        ),
        (
            tlskit::connect(
                srv.addr,
                "a.example.test",
                &tlskit::tls12_config(&pki.ca_der),
            )
            .unwrap(),
            "route for a\n",
        ),
    ];
    for (c, body) in &mut conns {
        assert_eq!(tlskit::exchange(c, WHO).text(), *body);
    }
    wait_parked(admin, 3.0);
    // Twice each: served from the parked session, parked again, served again.
    for round in 0..2 {
        for (c, body) in &mut conns {
            let r = tlskit::exchange(c, WHO);
            assert_eq!(r.status, 200, "round {round}");
            assert_eq!(
                r.text(),
                *body,
                "round {round}: the server name survives parking"
            );
            assert_eq!(r.header("connection"), None, "still keep-alive");
        }
        wait_parked(admin, 3.0);
    }
    // Pipelined requests in one flight of records.
    let (c, _) = &mut conns[0];
    c.write_all(format!("{WHO}{WHO}").as_bytes()).unwrap();
    c.flush().unwrap();
    for _ in 0..2 {
        assert_eq!(common::read_response_to(c, false).text(), "route for a\n");
    }
    wait_parked(admin, 3.0);
    // A client's close_notify wakes its parked connection, which closes.
    let (mut c, _) = conns.pop().unwrap();
    c.conn.send_close_notify();
    c.conn.write_tls(&mut c.sock).unwrap();
    assert!(
        tlskit::drain(&mut c).is_empty(),
        "nothing but the end after close_notify"
    );
    wait_parked(admin, 2.0);
    assert_eq!(
        metric(admin, "weir_connections_closed_total{reason=\"idle\"}"),
        0.0
    );
}

#[test]
fn client_certificates_survive_parking() {
    let pki = Pki::new("park-mtls");
    let alice = pki.issue("alice", "alice", &[]);
    let (srv, admin) = server(
        &pki,
        &format!(
            "      client_auth: {{ ca: '{}', mode: required }}\n",
            pki.ca_file().display()
        ),
    );
    let cfg = tlskit::client_config(&pki.ca_der, &["http/1.1"], Some(&alice));
    let mut c = tlskit::connect(srv.addr, "b.example.test", &cfg).unwrap();
    assert_eq!(tlskit::exchange(&mut c, WHO).text(), "hello alice\n");
    wait_parked(admin, 1.0);
    assert_eq!(tlskit::exchange(&mut c, WHO).text(), "hello alice\n");
}

#[test]
fn half_a_record_keeps_the_connection_in_its_task() {
    let pki = Pki::new("park-partial");
    let (srv, admin) = server(&pki, "");
    let tls13 = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let mut c = tlskit::connect(srv.addr, "a.example.test", &tls13).unwrap();
    // One request whole and the next one's record cut in half, in one write.
    c.conn.writer().write_all(WHO.as_bytes()).unwrap();
    let mut first = Vec::new();
    c.conn.write_tls(&mut first).unwrap();
    c.conn.writer().write_all(WHO.as_bytes()).unwrap();
    let mut second = Vec::new();
    c.conn.write_tls(&mut second).unwrap();
    let half = second.len() / 2;
    first.extend_from_slice(&second[..half]);
    c.sock.write_all(&first).unwrap();
    assert_eq!(
        common::read_response_to(&mut c, false).text(),
        "route for a\n"
    );
    // paces: the sweeper ticks every 100 ms (a quarter of `header`) and parks at the second
    // idle sweep: ten ticks must leave this connection where it is.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        metric(admin, "weir_connections_parked "),
        0.0,
        "half a record in flight"
    );
    c.sock.write_all(&second[half..]).unwrap();
    assert_eq!(
        common::read_response_to(&mut c, false).text(),
        "route for a\n"
    );
    // With nothing in flight it parks.
    wait_parked(admin, 1.0);
    until("served after parking", Duration::from_secs(5), || {
        tlskit::exchange(&mut c, WHO).text() == "route for a\n"
    });
}
