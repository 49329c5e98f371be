//! A TLS 1.2 client that asks to renegotiate gets rustls' `no_renegotiation` alert at once
//! (issue 18, item 10): the alert was queued while reading and never written, and the client
//! hung until its own timeout. Driven with `openssl s_client` (its `R` command).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::tlskit::Pki;

#[test]
fn a_renegotiation_attempt_gets_its_alert_at_once() {
    let pki = Pki::new("reneg");
    let cert = pki.issue("leaf", "leaf", &["localhost"]);
    let srv = common::start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n      - respond: {{ body: hi }}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-servername",
            "localhost",
            "-connect",
        ])
        .arg(srv.addr.to_string())
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
    // Wait for the handshake, then ask to renegotiate.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if line.starts_with("Verify return code") || line.contains("Extended master secret") {
            break;
        }
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"R\n").unwrap();
    let asked = Instant::now();
    let mut refused = false;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(3)) {
        if line.contains("no renegotiation") {
            refused = true;
            break;
        }
    }
    let waited = asked.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(refused, "no alert within 3 s");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}
