//! TLS to upstreams over real sockets: verification against a given CA (and refusal of
//! another), SNI from `tls.sni` or the server's host, `insecure_skip_verify`, a client
//! certificate for an origin that requires one, pooled connections, session resumption on
//! reconnects, and health checks made with the same TLS settings.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::start_config;
use common::tlskit::{Issued, Pki};

/// A TLS origin on its own threads: answers every request with what it saw of the TLS session.
struct TlsOrigin {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

fn tls_origin(cert: &Issued, client_ca: Option<&Pki>) -> TlsOrigin {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pki) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(pki.ca_der.clone()).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(v)
        }
    };
    let cfg = Arc::new(
        builder
            .with_single_cert(cert.chain.clone(), cert.key_der.clone_key())
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let cfg = cfg.clone();
            std::thread::spawn(move || serve(tcp, cfg));
        }
    });
    TlsOrigin { addr, accepted }
}

fn serve(tcp: std::net::TcpStream, cfg: Arc<rustls::ServerConfig>) {
    let conn = rustls::ServerConnection::new(cfg).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let path = text.split(' ').nth(1).unwrap_or("").to_string();
        let subject = s
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| {
                let (_, x) = x509_parser::parse_x509_certificate(c).unwrap();
                x.subject().to_string()
            })
            .unwrap_or_else(|| "-".into());
        let body = format!(
            "path={path} sni={} resumed={} client={subject}",
            s.conn.server_name().unwrap_or("-"),
            s.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        );
        let close = path.contains("close");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if s.write_all(reply.as_bytes()).is_err() || s.flush().is_err() {
            return;
        }
        if close {
            s.conn.send_close_notify();
            let _ = s.flush();
            return;
        }
    }
}

fn p(path: &std::path::Path) -> String {
    path.display().to_string()
}

#[test]
fn https_upstreams_are_verified_pooled_resumed_and_health_checked() {
    let pki = Pki::new("up");
    let stranger = Pki::new("up-stranger");
    let cert = pki.issue("origin", "origin", &["origin.test", "localhost"]);
    let weir_client = pki.issue("weir-client", "weir-proxy", &[]);
    let origin = tls_origin(&cert, None);
    let strict = tls_origin(&cert, Some(&pki));
    // Health checks connect on their own schedule: to an origin of their own, so that they do
    // not count as connections of the pooling checks below.
    let checked = tls_origin(&cert, None);
    let ca = p(&pki.ca_file());
    let port = origin.addr.port();
    let yaml = format!(
        r#"workers: 1
upstreams:
  o:
    servers: ["https://127.0.0.1:{port}"]
    tls: {{ ca: '{ca}', sni: origin.test }}
  by_host:
    servers: ["https://localhost:{port}"]
    tls: {{ ca: '{ca}' }}
  stranger:
    servers: ["https://127.0.0.1:{port}"]
    tls: {{ ca: '{stranger_ca}', sni: origin.test }}
  lab:
    servers: ["https://127.0.0.1:{port}"]
    tls: {{ insecure_skip_verify: true }}
  mtls:
    servers: ["127.0.0.1:{strict_port}"]
    tls: {{ ca: '{ca}', sni: origin.test, client_cert: {{ cert: '{cc}', key: '{ck}' }} }}
  mtls_without:
    servers: ["127.0.0.1:{strict_port}"]
    tls: {{ ca: '{ca}', sni: origin.test }}
  checked:
    servers: ["https://127.0.0.1:{checked_port}"]
    tls: {{ ca: '{ca}', sni: origin.test }}
    active_health: {{ path: /health, interval: 100ms, fall: 1, rise: 1 }}
  checked_stranger:
    servers: ["https://127.0.0.1:{checked_port}"]
    tls: {{ ca: '{stranger_ca}', sni: origin.test }}
    active_health: {{ path: /health, interval: 100ms, fall: 1, rise: 1 }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - {{ match: {{ path_prefix: /o/ }}, proxy: {{ upstream: o }} }}
      - {{ match: {{ path_prefix: /by_host/ }}, proxy: {{ upstream: by_host }} }}
      - {{ match: {{ path_prefix: /stranger/ }}, proxy: {{ upstream: stranger }} }}
      - {{ match: {{ path_prefix: /lab/ }}, proxy: {{ upstream: lab }} }}
      - {{ match: {{ path_prefix: /mtls/ }}, proxy: {{ upstream: mtls }} }}
      - {{ match: {{ path_prefix: /mtls_without/ }}, proxy: {{ upstream: mtls_without }} }}
      - {{ match: {{ path_prefix: /checked/ }}, proxy: {{ upstream: checked }} }}
      - {{ match: {{ path_prefix: /checked_stranger/ }}, proxy: {{ upstream: checked_stranger }} }}
"#,
        stranger_ca = p(&stranger.ca_file()),
        strict_port = strict.addr.port(),
        checked_port = checked.addr.port(),
        cc = p(&weir_client.cert),
        ck = p(&weir_client.key),
    );
    let s = start_config(&yaml);
    let mut c = s.connect();
    let get = |c: &mut std::net::TcpStream, path: &str| {
        common::roundtrip(
            c,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
    };
    // Verified against the CA, SNI from `tls.sni`, and the connection pooled.
    let r = get(&mut c, "/o/a");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "path=/o/a sni=origin.test resumed=false client=-");
    let before = origin.accepted.load(Ordering::SeqCst);
    let r = get(&mut c, "/o/b");
    assert!(
        r.text().starts_with("path=/o/b sni=origin.test"),
        "{}",
        r.text()
    );
    assert_eq!(origin.accepted.load(Ordering::SeqCst), before, "pooled");
    // The origin closes; the next connection resumes the session.
    let r = get(&mut c, "/o/close");
    assert_eq!(r.status, 200);
    let r = get(&mut c, "/o/after");
    assert_eq!(
        r.text(),
        "path=/o/after sni=origin.test resumed=true client=-"
    );
    // SNI from the server's host.
    assert!(get(&mut c, "/by_host/x").text().contains("sni=localhost"));
    // Another CA: the handshake fails, 502 (and the client connection is fine).
    let r = get(&mut c, "/stranger/x");
    assert_eq!(r.status, 502, "{}", r.text());
    let mut c = s.connect();
    // Labs: any certificate.
    assert_eq!(get(&mut c, "/lab/x").status, 200);
    // An origin that requires a client certificate.
    let r = get(&mut c, "/mtls/x");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("client=CN=weir-proxy"), "{}", r.text());
    let r = get(&mut c, "/mtls_without/x");
    assert!(r.status == 502, "{} {}", r.status, r.text());
    let mut c = s.connect();
    // Health checks use the same TLS settings: the stranger's checks fail, so it is down.
    common::until(
        "the stranger's checks failed",
        Duration::from_secs(10),
        || get(&mut s.connect(), "/checked_stranger/x").status == 503,
    );
    assert_eq!(get(&mut c, "/checked/x").status, 200);
    let r = get(&mut c, "/checked_stranger/x");
    assert_eq!(r.status, 503, "{}", r.text());
}

#[test]
fn upstream_tls_config_errors_name_the_key() {
    let pki = Pki::new("up-errors");
    let cert = pki.issue("c", "c", &["c.test"]);
    let cases = [
        (
            "tls: { ca: /nonexistent/ca.pem }".to_string(),
            "upstreams.o.tls.ca",
        ),
        (
            format!(
                "tls: {{ client_cert: {{ cert: '{}', key: '{}' }} }}",
                p(&cert.cert),
                p(&pki.issue("d", "d", &["d.test"]).key)
            ),
            "upstreams.o.tls.client_cert",
        ),
    ];
    for (tls, key) in cases {
        let yaml = format!(
            "upstreams:\n  o:\n    servers: ['https://127.0.0.1:1']\n    {tls}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n"
        );
        let err = weir::runtime::load_str(&yaml, std::path::Path::new("."), |_| None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}
