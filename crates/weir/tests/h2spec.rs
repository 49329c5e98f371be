//! HTTP/2 conformance by h2spec (github.com/summerwind/h2spec, built from the Go module proxy
//! by `.ci/run`): every case over TLS (ALPN `h2`) and over h2c with prior knowledge, on one
//! in-process server. Issue 54 keeps these at all passed while it replaces the `h2` crate.
//! Also the case h2spec found on h2c (3.5/2): bytes that are neither HTTP/2's preface nor an
//! HTTP/1 request line end the connection unanswered, while HTTP/1.1 on the same listener is
//! still served.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::inproc;
use common::process::have_all_or_skip;
use common::tlskit::Pki;

/// Runs h2spec against `addr` (`tls`: over TLS, certificate not checked); the summary line and
/// the failed cases.
fn h2spec(addr: SocketAddr, tls: bool) -> (String, String) {
    let mut cmd = Command::new("h2spec");
    cmd.args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "-o", "5"]);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .find(|l| l.contains(" tests, "))
        .unwrap_or("no summary")
        .to_string();
    let failures = text
        .split("Failures:")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (summary, failures)
}

#[test]
fn h2spec_passes_over_tls_and_h2c() {
    if !have_all_or_skip(
        &["h2spec"],
        "go install 'github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible'",
    ) {
        return;
    }
    let pki = Pki::new("h2spec");
    let cert = pki.issue("h2spec", "localhost", &["localhost"]);
    let h = inproc::start(&format!(
        r#"workers: 1
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - respond: {{ body: "hello\n" }}
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - respond: {{ body: "hello\n" }}
"#,
        cert.cert.display(),
        cert.key.display()
    ));
    let (plain, tls) = (h.local_addrs()[0], h.local_addrs()[1]);
    // An invalid preface: closed with nothing written back (h2spec 3.5/2).
    let mut s = common::connect(plain);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"INVALID CONNECTION PREFACE\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    // HTTP/1.1 on the same listener, and a malformed HTTP/1 request still answered 400.
    let mut s = common::connect(plain);
    let r = common::roundtrip(
        &mut s,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "hello\n"));
    let mut s = common::connect(plain);
    let r = common::roundtrip(&mut s, b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 400);
    for (what, addr, over_tls) in [("h2c", plain, false), ("TLS", tls, true)] {
        let (summary, failures) = h2spec(addr, over_tls);
        eprintln!("h2spec over {what}: {summary}");
        assert!(
            summary.contains(" 0 failed") && !summary.contains(" 0 passed"),
            "h2spec over {what}: {summary}\n{failures}"
        );
    }
    inproc::stop(h);
}
