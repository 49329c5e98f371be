//! On-demand certificates (`acme.on_demand`, Caddy's `on_demand_tls`) against Debian's `pebble`:
//! the first handshake for a name the allow list or the `ask` endpoint approves waits for its
//! certificate and gets it; refused names get none and are asked about once a minute at most;
//! the rate of new orders is capped; a restart serves the stored certificates without the CA.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::origin::http_origin;
use common::pebble::Pebble;
use common::process::{free_port, have_all_or_skip};
use common::tlskit;
use rustls::pki_types::{CertificateDer, ServerName};

/// The body and the certificate's serial for a handshake naming `sni`, verified against
/// `root`; `Err` with the reason when the handshake fails. Waits up to 60 s (an order).
fn handshake(
    addr: SocketAddr,
    sni: &str,
    root: &CertificateDer<'static>,
) -> Result<(String, String), String> {
    let cfg = tlskit::client_config(root, &["http/1.1"], None);
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).map_err(|e| e.to_string())?;
    }
    let leaf = tlskit::presented(&s);
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let r = common::read_response_to(&mut s, false);
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    Ok((r.text(), cert.raw_serial_as_string()))
}

fn config(https: u16, pebble: &Pebble, storage: &Path, ask: SocketAddr) -> String {
    config_with(
        https,
        pebble,
        storage,
        &format!(
            r#"{{ ask: "http://{ask}/check", allow: ["*.od.test"], rate: 3, per: 1h, wait: 50s }}"#
        ),
    )
}

/// A TLS listener on `https` with on-demand certificates from `pebble` (`on_demand`: the
/// section as a YAML flow mapping), answering `hi $host`.
fn config_with(https: u16, pebble: &Pebble, storage: &Path, on_demand: &str) -> String {
    format!(
        r#"workers: 1
listeners:
  - address: 127.0.0.1:{https}
    tls:
      acme:
        directory: "{dir}"
        directory_ca: "{ca}"
        storage: "{storage}"
        challenge: tls-alpn-01
        retry_after: 1s
        on_demand: {on_demand}
    routes:
      - respond: {{ body: "hi $host\n" }}
"#,
        dir = pebble.dir_url,
        ca = pebble.pki.ca_file().display(),
        storage = storage.display(),
    )
}

fn start(yaml: &str) -> weir::server::ServerHandle {
    let cfg = weir::runtime::load_str(yaml, Path::new("."), |_| None).unwrap();
    weir::server::start(cfg).unwrap()
}

#[test]
fn approved_names_get_certificates_at_their_first_handshake_within_the_rate() {
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let https = free_port();
    // pebble validates TLS-ALPN-01 on weir's port (its names resolve to 127.0.0.1).
    let mut pebble = Pebble::start(free_port(), https);
    let storage = pebble.pki.dir.join("acme-on-demand");
    // The ask endpoint approves names starting with `yes.`, and records what it was asked.
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let ask = http_origin(move |req| {
        seen.lock().unwrap().push(req.line.clone());
        if req.line.contains("domain=yes.") {
            common::origin::ok("yes")
        } else {
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno".to_vec()
        }
    });
    let addr: SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
    let h = start(&config(https, &pebble, &storage, ask.addr));
    let root = pebble.root();

    // Allowed by the list: the very first handshake waits for the order and gets the name's
    // own certificate.
    let t = Instant::now();
    let (body, a_serial) = handshake(addr, "a.od.test", &root).expect("a.od.test");
    eprintln!("a.od.test: first handshake done in {:?}", t.elapsed());
    assert_eq!(body, "hi a.od.test\n");
    assert!(storage.join("on-demand/a.od.test/cert.pem").exists());
    // Served again without an order.
    let (_, again) = handshake(addr, "a.od.test", &root).unwrap();
    assert_eq!(again, a_serial);
    assert!(
        asked.lock().unwrap().is_empty(),
        "the allow list needs no ask"
    );

    // Approved by the ask endpoint.
    let (body, yes_serial) = handshake(addr, "yes.ask.test", &root).expect("yes.ask.test");
    assert_eq!(body, "hi yes.ask.test\n");
    assert_ne!(yes_serial, a_serial, "one certificate per name");
    // Refused by it: no certificate (no default either, so the handshake fails), and a refused
    // name is not asked about again for a while.
    for _ in 0..3 {
        let e = handshake(addr, "no.ask.test", &root).unwrap_err();
        assert!(!e.is_empty());
    }
    let asks = asked.lock().unwrap().clone();
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert!(
        asks[0].starts_with("GET /check?domain=yes.ask.test HTTP/1.1"),
        "{asks:?}"
    );
    assert!(
        asks[1].starts_with("GET /check?domain=no.ask.test HTTP/1.1"),
        "{asks:?}"
    );
    // Not in the list, one label too deep for `*.od.test`, and no ask approval.
    assert!(handshake(addr, "x.y.od.test", &root).is_err());

    // The third new certificate is within `rate: 3`; the fourth is refused without an order.
    let (_, b_serial) = handshake(addr, "b.od.test", &root).expect("b.od.test");
    let e = handshake(addr, "c.od.test", &root).unwrap_err();
    assert!(!e.is_empty());
    assert!(
        !storage.join("c.od.test").exists(),
        "no order over the rate"
    );
    h.shutdown();
    h.join();

    // A restart with the CA gone: the stored certificates are served at their first handshake.
    pebble.stop_ca();
    let h = start(&config(https, &pebble, &storage, ask.addr));
    let (_, after) = handshake(addr, "a.od.test", &root).expect("a.od.test after a restart");
    assert_eq!(after, a_serial);
    let (_, after) = handshake(addr, "b.od.test", &root).expect("b.od.test after a restart");
    assert_eq!(after, b_serial);
    h.shutdown();
    h.join();
}

#[test]
fn on_demand_config_errors_name_the_key() {
    let base = "listeners:\n  - address: 127.0.0.1:0\n    tls:\n      acme:\n        directory: https://127.0.0.1:1/dir\n        challenge: tls-alpn-01\n";
    let cases = [
        (
            "        on_demand: {}\n",
            "tls.acme.on_demand",
            "needs `ask`",
        ),
        (
            "        on_demand: { ask: \"https://x/check\" }\n",
            "tls.acme.on_demand.ask",
            "http://host:port",
        ),
        (
            "        on_demand: { allow: [\"*.*.x\"] }\n",
            "tls.acme.on_demand.allow[0]",
            "not a DNS name",
        ),
        (
            "        on_demand: { allow: [a.x], rate: 0 }\n",
            "tls.acme.on_demand.rate",
            "at least one",
        ),
    ];
    for (extra, key, says) in cases {
        let yaml = format!("{base}{extra}    routes: [ {{ respond: {{ body: x }} }} ]\n");
        let e = common::config_error(&yaml);
        assert!(e.contains(key) && e.contains(says), "{extra}→ {e}");
    }
    // Without on_demand an empty name list is still an error.
    let e = common::config_error(&format!(
        "{base}    routes: [ {{ respond: {{ body: x }} }} ]\n"
    ));
    assert!(e.contains("tls.acme.names"), "{e}");
}

/// Issue 52: names a random-SNI client makes up under an `allow` wildcard do not hold the
/// table for good. With `max_names: 1`, a name asked for once and then left alone for
/// `per` is forgotten (its stored certificate removed) when a new, approved name needs the
/// room, and the new name gets its own certificate; while the first is still being asked for,
/// there is no room, and a name no one approves makes none.
#[test]
fn names_no_one_asks_for_again_make_room() {
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let https = free_port();
    let pebble = Pebble::start(free_port(), https);
    let storage = pebble.pki.dir.join("acme-on-demand-forget");
    let yaml = config_with(
        https,
        &pebble,
        &storage,
        r#"{ allow: ["*.od.test"], rate: 5, per: 3s, max_names: 1, forget_after: 1h, wait: 50s }"#,
    );
    let addr: SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
    let h = start(&yaml);
    let root = pebble.root();
    let (body, _) = handshake(addr, "junk1.od.test", &root).expect("junk1");
    assert_eq!(body, "hi junk1.od.test\n");
    assert!(storage.join("on-demand/junk1.od.test/cert.pem").exists());
    // Asked for again just now: no room for another name.
    assert!(handshake(addr, "junk2.od.test", &root).is_err());
    // Left alone for `per` (3 s): forgotten to make room for a real name.
    // paces: `per` passes.
    std::thread::sleep(Duration::from_millis(3200));
    // A name no one approves evicts no one (review of issue 52: it used to, before approval).
    assert!(handshake(addr, "x.not-allowed.test", &root).is_err());
    assert!(
        storage.join("on-demand/junk1.od.test/cert.pem").exists(),
        "an unapproved name evicted an idle one"
    );
    let (body, _) = handshake(addr, "real.od.test", &root).expect("room made for a new name");
    assert_eq!(body, "hi real.od.test\n");
    assert!(
        !storage.join("on-demand/junk1.od.test").exists(),
        "the forgotten name's storage is removed"
    );
    h.shutdown();
    h.join();
}

/// `weir check` warns about a wildcard `allow` without `ask`, and about a rate over a public
/// CA's limits; the defaults draw neither warning about the rate.
#[test]
fn check_warns_about_a_wildcard_allow_without_ask_and_a_rate_over_ca_limits() {
    let run = |od: &str| {
        let yaml = format!(
            "listeners:\n  - address: 127.0.0.1:0\n    tls:\n      acme:\n        directory: https://127.0.0.1:1/dir\n        challenge: tls-alpn-01\n        storage: /tmp/weir-od-check\n        on_demand: {od}\n    routes: [ {{ respond: {{ body: x }} }} ]\n"
        );
        let file = common::process::write_config("od-check", &yaml);
        let out = std::process::Command::new(common::process::WEIR)
            .args(["check", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&file);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let wild = run("{ allow: ['*.customers.example'] }");
    assert!(
        wild.contains("on_demand.allow") && wild.contains("without ask"),
        "{wild}"
    );
    assert!(!wild.contains("Let's Encrypt"), "the default rate: {wild}");
    let asked = run("{ allow: ['*.customers.example'], ask: 'http://127.0.0.1:9/check' }");
    assert!(!asked.contains("without ask"), "{asked}");
    let fast = run("{ ask: 'http://127.0.0.1:9/check', rate: 10, per: 1m }");
    assert!(fast.contains("Let's Encrypt"), "{fast}");
}
