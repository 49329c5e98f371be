//! Sites on one listener (issue 36 §1–2): `examples/sites.yaml` as written, against Debian's
//! `pebble` (two ACME sites, one order each, served by SNI and verified against pebble's
//! root), a file certificate for the third site, the default site for other names and the
//! plain listener's redirect; then a sites block's routes, filters, error pages and the
//! config's errors, in process.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::pebble::Pebble;
use common::process::{free_port, have_all_or_skip, Running, WEIR};
use common::tlskit::{self, Pki};
use rustls::pki_types::CertificateDer;

/// The body and the certificate's serial for `sni` (with `Host: host`), verified against
/// `root`; `None` while the handshake fails or the chain does not verify.
fn ask(
    addr: SocketAddr,
    sni: &str,
    host: &str,
    root: &CertificateDer<'static>,
) -> Option<(String, String)> {
    let cfg = tlskit::client_config(root, &["http/1.1"], None);
    let mut s = tlskit::connect(addr, sni, &cfg).ok()?;
    let leaf = tlskit::presented(&s);
    let r = tlskit::exchange(
        &mut s,
        &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    Some((r.text(), cert.raw_serial_as_string()))
}

#[test]
fn the_sites_example_serves_three_sites_with_their_own_certificates() {
    if !have_all_or_skip(&["pebble", "pebble-challtestsrv"], "apt-get install pebble") {
        return;
    }
    let (https, plain) = (free_port(), free_port());
    // pebble validates TLS-ALPN-01 on weir's HTTPS port (its names resolve to 127.0.0.1).
    let pebble = Pebble::start(free_port(), https);
    let pki = Pki::new("sites-c");
    let c = pki.issue("c", "c.example", &["c.example"]);
    let storage = pebble.pki.dir.join("acme-sites");
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let log = pebble.pki.dir.join("weir-sites.log");
    let _weir = Running(
        Command::new(WEIR)
            .args(["run", "-c", "examples/sites.yaml"])
            .current_dir(root_dir)
            .env("WEIR_HTTPS", format!("127.0.0.1:{https}"))
            .env("WEIR_LISTEN", format!("127.0.0.1:{plain}"))
            .env("WEIR_ACME_DIRECTORY", &pebble.dir_url)
            .env("WEIR_ACME_CA", pebble.pki.ca_file())
            .env("WEIR_ACME_STORAGE", &storage)
            .env("WEIR_TLS_CERT", &c.cert)
            .env("WEIR_TLS_KEY", &c.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{https}").parse().unwrap();
    let root = pebble.root();
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut got = Vec::new();
    for name in ["a.example", "b.example"] {
        let mut answer = None;
        let took = common::until(
            &format!("an ACME certificate for {name}"),
            Duration::from_secs(90),
            || {
                answer = ask(addr, name, name, &root);
                answer.is_some() || logs().contains("ERROR")
            },
        );
        let (body, serial) = answer.unwrap_or_else(|| panic!("{name} after {took:?}: {}", logs()));
        assert_eq!(body, format!("site {}\n", &name[..1]));
        got.push(serial);
    }
    assert_ne!(got[0], got[1], "one certificate per site");
    assert!(storage.join("a.example").join("cert.pem").exists());
    assert!(storage.join("b.example").join("cert.pem").exists());
    // The file certificate for c.example, verified against its own CA.
    let (body, _) = ask(addr, "c.example", "c.example", &pki.ca_der).expect("c.example");
    assert_eq!(body, "site c\n");
    // A name no site has: the default site (the handshake gets the first file certificate).
    let (body, _) = ask(addr, "c.example", "nowhere.example", &pki.ca_der).unwrap();
    assert_eq!(body, "no site by that name here\n");
    // Plain HTTP: redirected to HTTPS, path and query kept.
    let plain: SocketAddr = format!("127.0.0.1:{plain}").parse().unwrap();
    let mut s = common::connect(plain);
    let r = common::roundtrip(&mut s, b"GET /x?y=1 HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://a.example/x?y=1"));
}

#[test]
fn a_site_s_routes_filters_and_pages_stay_in_the_site() {
    let dir = std::env::temp_dir().join(format!("weir-sites-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a404.html"), "<p>not on a</p>").unwrap();
    let srv = common::start_config(&format!(
        r#"
filters:
  a_only: {{ headers: {{ response: {{ add: {{ x-site: a }} }} }} }}
listeners:
  - address: 127.0.0.1:0
    sites:
      - hosts: [a.example, www.a.example]
        filters: [a_only]
        error_pages: {{ 404: '{}/a404.html' }}
        routes:
          - match: {{ path_prefix: /app/ }}
            respond: {{ body: "a app" }}
          - match: {{ path: /only-get, methods: [GET] }}
            respond: {{ body: "got" }}
      - hosts: "*.b.example"
        routes:
          - respond: {{ body: "b" }}
      - default: true
        routes:
          - respond: {{ status: 421, body: "unknown" }}
"#,
        dir.display()
    ));
    let ask = |host: &str, path: &str| {
        let mut s = srv.connect();
        common::roundtrip(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
    };
    let r = ask("www.a.example", "/app/x");
    assert_eq!((r.status, r.text().as_str()), (200, "a app"));
    assert_eq!(r.header("x-site"), Some("a"), "the site's filter");
    // A path no route of site a takes: site a's page, not another site's route, with the
    // site's filters run on it too.
    let r = ask("a.example", "/other");
    assert_eq!((r.status, r.text().as_str()), (404, "<p>not on a</p>"));
    assert_eq!(
        r.header("x-site"),
        Some("a"),
        "the site's filter on its 404"
    );
    // A method the site's route does not take: 405 with Allow, not the site's 404.
    let mut s = srv.connect();
    let r = common::roundtrip(
        &mut s,
        b"POST /only-get HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 405);
    assert!(r.header("allow").unwrap().contains("GET"));
    assert_eq!(ask("x.b.example", "/app/x").text(), "b");
    assert_eq!(ask("x.b.example", "/").header("x-site"), None);
    let r = ask("b.example", "/");
    assert_eq!((r.status, r.text().as_str()), (421, "unknown"));
}

#[test]
fn site_config_errors_name_the_key() {
    let cases = [
        (
            "    routes: [ { respond: { status: 200 } } ]\n    sites: [ { hosts: a.example, routes: [] } ]\n",
            "listeners[0].routes",
        ),
        (
            "    sites: [ { routes: [] } ]\n",
            "listeners[0].sites[0].hosts",
        ),
        (
            "    sites: [ { default: true }, { default: true } ]\n",
            "listeners[0].sites[1].default",
        ),
        (
            "    sites: [ { hosts: '*.a.example' }, { hosts: x.a.example } ]\n",
            "listeners[0].sites[1].hosts",
        ),
        (
            "    sites: [ { hosts: a.example, routes: [ { match: { host: b.example }, respond: { status: 200 } } ] } ]\n",
            "listeners[0].sites[0].routes[0].match.host",
        ),
        (
            "    sites: [ { hosts: a.example, filters: [ { headers: { request: { add: { x: y } } } } ] } ]\n",
            "listeners[0].sites[0].filters[0]",
        ),
        (
            "    sites: [ { hosts: a.example, tls: { certificates: [ { cert: /nonexistent.pem, key: /nonexistent.key } ] } } ]\n",
            "listeners[0].sites[0].tls",
        ),
        (
            "    tls: {}\n    sites: [ { hosts: a.example, tls: { certificates: [ { cert: /nonexistent.pem, key: /nonexistent.key } ] } } ]\n",
            "listeners[0].sites[0].tls.certificates[0]",
        ),
    ];
    for (listener, key) in cases {
        let e = common::config_error(&format!("listeners:\n  - address: 127.0.0.1:0\n{listener}"));
        assert!(e.contains(key), "{key}: {e}");
    }
}
