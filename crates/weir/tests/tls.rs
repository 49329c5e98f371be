//! TLS termination over real sockets: SNI and ALPN, resumption, client certificates, plain
//! HTTP on a TLS port, certificate errors in the config, certificates re-read on reload, and
//! HTTP/1.1 over TLS (keep-alive, a large response, the proxy's `X-Forwarded-Proto`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use common::tlskit::{self, Pki};
use common::{start_config, TestServer};
use rcgen::KeyPair;

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// A server with one TLS listener: `tls` is the listener's `tls:` body (indented 6), `routes`
/// its routes (indented 6).
fn tls_server(tls: &str, routes: &str) -> TestServer {
    start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n{tls}\n    routes:\n{routes}\n"
    ))
}

const ROUTES: &str = r#"
      - match: { path: /who, sni: a.example.test }
        respond: { body: "route for a\n" }
      - match: { path: /who, client_subject: '^CN=alice,' }
        respond: { body: "hello alice\n" }
      - match: { path: /who }
        respond: { body: "anyone\n" }
      - match: { path: /big }
        respond: { body: "BIG" }
"#;

#[test]
fn sni_picks_the_certificate_and_alpn_settles_the_protocol() {
    let pki = Pki::new("sni");
    let default = pki.issue("default", "default", &["default.test", "127.0.0.1"]);
    let a = pki.issue("a", "a", &["a.example.test"]);
    let wild = pki.issue("wild", "wild", &["*.wild.test"]);
    let tls = format!(
        "      certificates:\n        - {{ cert: '{}', key: '{}' }}\n        - {{ cert: '{}', key: '{}' }}\n        - {{ cert: '{}', key: '{}' }}\n",
        p(&default.cert), p(&default.key), p(&a.cert), p(&a.key), p(&wild.cert), p(&wild.key)
    );
    let s = tls_server(&tls, ROUTES);
    let both = tlskit::client_config(&pki.ca_der, &["h2", "http/1.1"], None);
    let h1 = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let none = tlskit::client_config(&pki.ca_der, &[], None);

    let c = tlskit::connect(s.addr, "a.example.test", &both).unwrap();
    assert_eq!(tlskit::presented(&c), a.chain[0], "exact name");
    assert_eq!(c.conn.alpn_protocol(), Some(&b"h2"[..]), "h2 preferred");
    let c = tlskit::connect(s.addr, "x.wild.test", &both).unwrap();
    assert_eq!(tlskit::presented(&c), wild.chain[0], "wildcard");
    // No SNI (an IP address): the first certificate.
    let c = tlskit::connect(s.addr, "127.0.0.1", &both).unwrap();
    assert_eq!(tlskit::presented(&c), default.chain[0], "default");
    // A name no certificate has: the default one, which the client then refuses.
    assert!(tlskit::connect(s.addr, "nobody.test", &both).is_err());

    // ALPN http/1.1, and no ALPN at all, both speak HTTP/1.1; routes see the SNI.
    let mut c = tlskit::connect(s.addr, "a.example.test", &h1).unwrap();
    assert_eq!(c.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let r = tlskit::exchange(&mut c, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "route for a\n"));
    let mut c = tlskit::connect(s.addr, "x.wild.test", &none).unwrap();
    assert_eq!(c.conn.alpn_protocol(), None);
    // Keep-alive: several requests on one TLS connection.
    for _ in 0..3 {
        let r = tlskit::exchange(&mut c, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((r.status, r.text().as_str()), (200, "anyone\n"));
    }
}

#[test]
fn sessions_resume_with_tickets_and_ids_on_tls13_and_tls12() {
    let pki = Pki::new("resume");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let tls = format!(
        "      certificates: [{{ cert: '{}', key: '{}' }}]\n",
        p(&cert.cert),
        p(&cert.key)
    );
    let s = tls_server(&tls, ROUTES);
    let tls13 = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    // TLS 1.2 only, with and without tickets (the second resumes by session id).
    let tls12 = |tickets: bool| {
        let mut cfg = Arc::unwrap_or_clone(tlskit::tls12_config(&pki.ca_der));
        let mode = if tickets {
            rustls::client::Tls12Resumption::SessionIdOrTickets
        } else {
            rustls::client::Tls12Resumption::SessionIdOnly
        };
        cfg.resumption = rustls::client::Resumption::default().tls12_resumption(mode);
        Arc::new(cfg)
    };
    for (what, cfg) in [
        ("tls1.3 ticket", tls13),
        ("tls1.2 ticket", tls12(true)),
        ("tls1.2 session id", tls12(false)),
    ] {
        let mut first = tlskit::connect(s.addr, "leaf.test", &cfg).unwrap();
        assert_eq!(
            first.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Full),
            "{what}"
        );
        // Reading a response also reads the TLS 1.3 ticket sent after the handshake.
        let r = tlskit::exchange(&mut first, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(r.status, 200);
        let second = tlskit::connect(s.addr, "leaf.test", &cfg).unwrap();
        assert_eq!(
            second.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{what}"
        );
    }
}

#[test]
fn client_certificates_are_required_or_optional_and_reach_routes() {
    let pki = Pki::new("mtls");
    let other = Pki::new("mtls-other");
    let server = pki.issue("server", "server", &["server.test"]);
    let alice = pki.issue("alice", "alice", &[]);
    let mallory = other.issue("mallory", "alice", &[]);
    let listener = |mode: &str| {
        tls_server(
            &format!(
                "      certificates: [{{ cert: '{}', key: '{}' }}]\n      client_auth: {{ ca: '{}', mode: {mode} }}\n",
                p(&server.cert),
                p(&server.key),
                p(&pki.ca_file())
            ),
            ROUTES,
        )
    };
    let with_alice = tlskit::client_config(&pki.ca_der, &["http/1.1"], Some(&alice));
    let with_mallory = tlskit::client_config(&pki.ca_der, &["http/1.1"], Some(&mallory));
    let without = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    // The server's verdict on a TLS 1.3 client certificate arrives after the client's side of
    // the handshake: it shows as a failed first exchange.
    let refused = |s: &TestServer, cfg| match tlskit::connect(s.addr, "server.test", cfg) {
        Err(_) => true,
        Ok(mut c) => {
            let _ = c.write_all(b"GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut buf = [0u8; 64];
            !matches!(c.read(&mut buf), Ok(n) if n > 0)
        }
    };

    let required = listener("required");
    let mut c = tlskit::connect(required.addr, "server.test", &with_alice).unwrap();
    let r = tlskit::exchange(&mut c, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello alice\n"));
    assert!(refused(&required, &without), "required: no certificate");
    assert!(refused(&required, &with_mallory), "required: another CA");

    let optional = listener("optional");
    let mut c = tlskit::connect(optional.addr, "server.test", &without).unwrap();
    let r = tlskit::exchange(&mut c, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "anyone\n"));
    let mut c = tlskit::connect(optional.addr, "server.test", &with_alice).unwrap();
    let r = tlskit::exchange(&mut c, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.text(), "hello alice\n");
    assert!(refused(&optional, &with_mallory), "optional: another CA");
}

#[test]
fn plain_http_on_a_tls_port_gets_400_and_handshake_failures_are_counted() {
    let pki = Pki::new("plain");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let s = start_config(&format!(
        "workers: 1\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n{ROUTES}\n",
        p(&cert.cert),
        p(&cert.key)
    ));
    let mut c = common::connect(s.addr);
    c.write_all(b"GET /who HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = common::read_response(&mut c);
    assert_eq!(r.status, 400);
    assert!(r
        .text()
        .contains("plain HTTP request was sent to HTTPS port"));
    // A client that distrusts the certificate aborts the handshake.
    let stranger = Pki::new("plain-stranger");
    let cfg = tlskit::client_config(&stranger.ca_der, &[], None);
    assert!(tlskit::connect(s.addr, "leaf.test", &cfg).is_err());
    let good = tlskit::client_config(&pki.ca_der, &[], None);
    drop(tlskit::connect(s.addr, "leaf.test", &good).unwrap());
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    common::until_value(
        "one plaintext, one failed and one full handshake counted",
        std::time::Duration::from_secs(10),
        || common::get(admin, "/metrics").text(),
        |m| {
            let has = |line: &str| m.lines().any(|l| l == line);
            has("weir_tls_handshakes_total{result=\"plaintext\"} 1")
                && has("weir_tls_handshakes_total{result=\"failed\"} 1")
                && has("weir_tls_handshakes_total{result=\"full\"} 1")
        },
    );
}

#[test]
fn bad_certificates_are_config_errors_naming_the_file() {
    let pki = Pki::new("bad");
    let good = pki.issue("good", "good", &["good.test"]);
    let other = pki.issue("other", "other", &["other.test"]);
    let expired = pki.issue_with("expired", "old", &["old.test"], |params| {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let missing = pki.dir.join("missing.pem");
    let cases = [
        (&good.cert, &other.key, "does not match certificate"),
        (&expired.cert, &expired.key, "certificate expired"),
        (&missing, &good.key, "cannot read"),
        (&garbage, &good.key, "no PEM certificate"),
        (&good.cert, &garbage, "no private key"),
    ];
    for (cert, key, want) in cases {
        let yaml = format!(
            "listeners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates:\n        - cert: '{}'\n          key: '{}'\n",
            p(cert),
            p(key)
        );
        let err = weir::runtime::load_str(&yaml, Path::new("."), |_| None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{want}: {err}");
        assert!(err.contains("listeners[0].tls.certificates[0]"), "{err}");
        assert!(err.contains("line 5") || err.contains(":5:"), "{err}");
        let named = if want == "no private key" || want.contains("match") {
            p(key)
        } else {
            p(cert)
        };
        assert!(err.contains(&named), "{want} names {named}: {err}");
    }
    let yaml = format!(
        "listeners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n      protocols: [tls1.1]\n",
        p(&good.cert),
        p(&good.key)
    );
    let err = weir::runtime::load_str(&yaml, Path::new("."), |_| None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("listeners[0].tls.protocols[0]"), "{err}");
}

#[test]
fn a_reload_rereads_the_certificates() {
    let pki = Pki::new("reload");
    let first = pki.issue("first", "first", &["site.test"]);
    let second = pki.issue("second", "second", &["site.test"]);
    let live_cert = pki.dir.join("live.pem");
    let live_key = pki.dir.join("live.key");
    std::fs::copy(&first.cert, &live_cert).unwrap();
    std::fs::copy(&first.key, &live_key).unwrap();
    let yaml = format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n{ROUTES}\n",
        p(&live_cert),
        p(&live_key)
    );
    let s = start_config(&yaml);
    let cfg = tlskit::client_config(&pki.ca_der, &[], None);
    let c = tlskit::connect(s.addr, "site.test", &cfg).unwrap();
    assert_eq!(tlskit::presented(&c), first.chain[0]);
    // Renewed on disk, then reloaded (what SIGHUP and POST /reload do).
    std::fs::copy(&second.cert, &live_cert).unwrap();
    std::fs::copy(&second.key, &live_key).unwrap();
    let handle = s.handle.as_ref().unwrap();
    let next =
        weir::runtime::compile_str(&yaml, Path::new("."), |_| None, &handle.registry()).unwrap();
    handle.reload(next).unwrap();
    let c = tlskit::connect(s.addr, "site.test", &cfg).unwrap();
    assert_eq!(tlskit::presented(&c), second.chain[0]);
}

#[test]
fn http1_over_tls_streams_large_bodies_and_tells_the_upstream_it_was_https() {
    let pki = Pki::new("h1");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let origin = common::origin::http_origin(|req| {
        let proto = req.header("x-forwarded-proto").unwrap_or("-").to_string();
        common::origin::ok(&proto)
    });
    let root = std::env::temp_dir().join(format!("weir-tls-www-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let s = start_config(&format!(
        r#"workers: 1
upstreams:
  o: {{ servers: ["{}"] }}
listeners:
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{}' }}
      - match: {{ path: /proxied }}
        proxy: {{ upstream: o }}
"#,
        origin.addr,
        p(&cert.cert),
        p(&cert.key),
        p(&root)
    ));
    let cfg = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let mut c = tlskit::connect(s.addr, "leaf.test", &cfg).unwrap();
    let r = tlskit::exchange(&mut c, "GET /proxied HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "https"));
    // 3 MB through TLS records, more than a socket buffer: the rest waits in rustls' buffer.
    let r = tlskit::exchange(&mut c, "GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body == big, "body differs ({} bytes)", r.body.len());
    let r = tlskit::exchange(
        &mut c,
        "GET /proxied HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "https");
    // The server closes with close_notify: a clean EOF, not an error.
    let mut rest = Vec::new();
    assert_eq!(c.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn weir_bench_speaks_https_h2_and_counts_handshakes() {
    use weir_loadgen::options::Stop;
    let pki = Pki::new("bench");
    let cert = pki.issue("leaf", "leaf", &["localhost"]);
    let s = start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n{ROUTES}\n  - address: 127.0.0.1:0\n    h2c: true\n    routes:\n{ROUTES}\n",
        p(&cert.cert),
        p(&cert.key)
    ));
    let h2c_addr = s.handle.as_ref().unwrap().local_addrs()[1];
    let opts = |url: String| weir_loadgen::Options {
        target: weir_loadgen::Target::parse("t", &url).unwrap(),
        connections: 2,
        threads: 1,
        stop: Stop::Requests(200),
        rate: None,
        method: "GET".into(),
        headers: vec![],
        body: bytes::Bytes::new(),
        close: false,
        pipeline: 1,
        timeout: std::time::Duration::from_secs(5),
        h2: false,
        h3: false,
        streams: 1,
        tls_resume: false,
    };
    let https = format!("https://localhost:{}/who", s.addr.port());
    let check = |o: &weir_loadgen::Options| {
        let r = weir_loadgen::run(o).unwrap();
        assert_eq!(r.stats.responses, 200, "{:?}", o.target.url);
        assert_eq!(r.stats.errors.total(), 0);
        assert_eq!(r.stats.body_bytes, 200 * "anyone\n".len() as u64);
        r
    };
    // HTTP/1.1 over TLS, kept connections: one handshake each.
    let r = check(&opts(https.clone()));
    assert_eq!(r.stats.handshakes, 2);
    // A connection per request: a full handshake per request, or resumed ones.
    let mut o = opts(https.clone());
    o.close = true;
    let r = check(&o);
    // Each connection may open once more and find the requests all taken.
    assert!(
        (200..=202).contains(&r.stats.handshakes),
        "{}",
        r.stats.handshakes
    );
    assert_eq!(r.stats.resumed, 0);
    o.tls_resume = true;
    let r = check(&o);
    assert!(r.stats.resumed >= 190, "resumed {}", r.stats.resumed);
    // HTTP/2 over TLS (ALPN) and h2c, several streams per connection.
    for url in [https, format!("http://{h2c_addr}/who")] {
        let mut o = opts(url);
        o.h2 = true;
        o.streams = 8;
        check(&o);
    }
}

#[test]
fn the_tls_example_serves_hello_over_h2_and_http1_and_says_https() {
    let pki = Pki::new("example");
    let cert = pki.issue("localhost", "localhost", &["localhost"]);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // Without the certificate variables the example is refused, naming them.
    let out = std::process::Command::new(common::process::WEIR)
        .args(["check", "-c", "examples/tls.yaml"])
        .env_remove("WEIR_TLS_CERT")
        .env_remove("WEIR_TLS_KEY")
        .current_dir(root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WEIR_TLS_CERT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = std::process::Command::new(common::process::WEIR);
    cmd.args(["run", "-c", "examples/tls.yaml"])
        .env("WEIR_TLS_CERT", &cert.cert)
        .env("WEIR_TLS_KEY", &cert.key)
        .env("WEIR_LISTEN", "127.0.0.1:0")
        .env("WEIR_WORKERS", "1")
        .current_dir(root);
    let (_child, addr) = common::process::spawn_serving(cmd);
    for alpn in [&["h2", "http/1.1"][..], &["http/1.1"][..]] {
        let cfg = tlskit::client_config(&pki.ca_der, alpn, None);
        let c = tlskit::connect(addr, "localhost", &cfg).unwrap();
        assert_eq!(c.conn.alpn_protocol(), Some(alpn[0].as_bytes()));
        if alpn[0] == "http/1.1" {
            let mut c = c;
            let r = tlskit::exchange(&mut c, "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n");
            assert_eq!(r.text(), "Hello, World\n");
        }
    }
}

#[test]
fn rsa_ecdsa_and_ed25519_certificates_serve_and_mtls_subjects_are_logged() {
    let pki = Pki::new("keys");
    let log = pki.dir.join("access.log");
    let keys = [
        (
            "rsa",
            KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap(),
        ),
        (
            "ecdsa",
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
        ),
        (
            "ed25519",
            KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        ),
    ];
    let mut certs = String::new();
    let mut issued = Vec::new();
    for (name, key) in keys {
        let host = format!("{name}.test");
        let c = pki.issue_key(name, name, &[host.as_str()], key, |_| {});
        certs.push_str(&format!(
            "        - {{ cert: '{}', key: '{}' }}\n",
            p(&c.cert),
            p(&c.key)
        ));
        issued.push((host, c));
    }
    let alice = pki.issue("alice", "alice", &[]);
    let s = tls_server(
        &format!(
            "      certificates:\n{certs}      client_auth: {{ ca: '{}', mode: optional }}\n",
            p(&pki.ca_file())
        ),
        &format!(
            "      - match: {{ path: /who }}\n        respond: {{ body: \"ok\\n\" }}\n        access_log: {{ path: '{}', format: '$tls_protocol $tls_sni $tls_client_subject' }}\n",
            p(&log)
        ),
    );
    for (host, c) in &issued {
        let cfg = tlskit::client_config(&pki.ca_der, &["http/1.1"], Some(&alice));
        let mut conn = tlskit::connect(s.addr, host, &cfg).unwrap();
        assert_eq!(tlskit::presented(&conn), c.chain[0], "{host}");
        let r = tlskit::exchange(&mut conn, "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(r.status, 200, "{host}");
    }
    drop(s); // stopping the server writes the log out
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("TLSv1.3 rsa.test CN=alice"), "{text}");
    assert!(
        lines[2].starts_with("TLSv1.3 ed25519.test CN=alice"),
        "{text}"
    );
}
