//! A TLS 1.2 client that asks to renegotiate gets rustls' `no_renegotiation` alert at once
//! (issue 18, item 10): the alert was queued while reading and never written, and the client
//! hung until its own timeout. Driven with `openssl s_client` (its `R` command), on a fresh
//! connection and on one that parked first (its records then sealed by `tls/records.rs`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::tlskit::Pki;

/// `openssl s_client` over TLS 1.2 to `addr`, its output lines on a channel (`extra` args).
fn s_client(addr: std::net::SocketAddr, extra: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new("openssl")
        .args(["s_client", "-tls1_2", "-servername", "localhost"])
        .args(extra)
        .arg("-connect")
        .arg(addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl (Debian: apt-get install openssl)");
    let (tx, rx) = mpsc::channel();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    // Wait for the handshake.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.starts_with("Verify return code") || line.contains("Extended master secret") {
            break;
        }
    }
    (child, rx)
}

/// Waits up to `within` for a line containing `what`.
fn line_with(rx: &mpsc::Receiver<String>, what: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.contains(what) {
            return true;
        }
    }
    false
}

/// Asks to renegotiate (`R`): the `no_renegotiation` alert must come within 2 s.
fn renegotiation_is_refused_at_once(
    mut child: Child,
    mut stdin: std::process::ChildStdin,
    rx: &mpsc::Receiver<String>,
) {
    stdin.write_all(b"R\n").unwrap();
    let asked = Instant::now();
    let refused = line_with(rx, "no renegotiation", Duration::from_secs(3));
    let waited = asked.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(refused, "no alert within 3 s");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[test]
fn a_renegotiation_attempt_gets_its_alert_at_once() {
    let pki = Pki::new("reneg");
    let cert = pki.issue("leaf", "leaf", &["localhost"]);
    let srv = common::start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n      - respond: {{ body: hi }}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let (mut child, rx) = s_client(srv.addr, &[]);
    let stdin = child.stdin.take().unwrap();
    renegotiation_is_refused_at_once(child, stdin, &rx);
}

/// The same from a connection that parked first, whose records are then weir's own
/// (`tls/records.rs`). OpenSSL's client gives up on the warning itself; that a second attempt is
/// fatal is `tls::records` `forged_tls12_records_renegotiation_once_then_fatal`.
#[test]
fn a_parked_connection_refuses_renegotiation_too() {
    let pki = Pki::new("reneg-parked");
    let cert = pki.issue("leaf", "leaf", &["localhost"]);
    let (srv, admin) = common::parked::server(
        "timeouts: { header: 400ms, keepalive: 30s }",
        &format!(
            "    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n",
            cert.cert.display(),
            cert.key.display()
        ),
        "      - respond: { body: \"hi there\\n\" }",
    );
    let (mut child, rx) = s_client(srv.addr, &["-crlf"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"GET / HTTP/1.1\nHost: x\n\n").unwrap();
    assert!(line_with(&rx, "hi there", Duration::from_secs(5)));
    common::parked::wait_parked(admin, 1.0);
    renegotiation_is_refused_at_once(child, stdin, &rx);
}
