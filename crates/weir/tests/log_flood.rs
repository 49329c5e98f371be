//! Log lines a client controls are rate-limited (issue 18, item 10): thousands of bad TLS
//! handshakes, rapid-reset HTTP/2 connections and failed upstream requests write a bounded
//! number of lines to `weir run`'s error log, and the events are counted in /metrics.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::h2raw::{frame, get, preface, HEADERS, RST_STREAM};
use common::process::{free_port, write_config, WEIR};
use common::tlskit::Pki;

fn wait_port(port: u16) {
    common::until(
        &format!("port {port} open"),
        Duration::from_secs(10),
        || TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
}

#[test]
fn ten_thousand_hostile_clients_write_at_most_a_hundred_lines() {
    let pki = Pki::new("logflood");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let (tls, h2c, admin, dead) = (free_port(), free_port(), free_port(), free_port());
    let cfg = write_config(
        "log-flood",
        &format!(
            "workers: 1\nadmin: {{ address: 127.0.0.1:{admin} }}\nupstreams: {{ gone: {{ servers: ['127.0.0.1:{dead}'], passive_health: {{ max_fails: 0 }} }} }}\nlisteners:\n  - address: 127.0.0.1:{tls}\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n      - respond: {{ body: hi }}\n  - address: 127.0.0.1:{h2c}\n    h2c: true\n    routes:\n      - match: {{ path_prefix: /gone }}\n        proxy: {{ upstream: gone }}\n      - respond: {{ body: hi }}\n",
            cert.cert.display(),
            cert.key.display()
        ),
    );
    let log = std::env::temp_dir().join(format!("weir-log-flood-{}.log", std::process::id()));
    let started = Instant::now();
    let mut child = common::process::Running(
        Command::new(WEIR)
            .args(["run", "-c"])
            .arg(&cfg)
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap(),
    );
    for p in [tls, h2c, admin] {
        wait_port(p);
    }
    // 4,000 handshakes that fail: TLS records of garbage, and ClientHellos cut short.
    for i in 0..4000 {
        let mut s = TcpStream::connect(("127.0.0.1", tls)).unwrap();
        let junk: &[u8] = if i % 2 == 0 {
            b"\x16\x03\x01\x00\x08garbage!"
        } else {
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
        };
        let _ = s.write_all(junk);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut sink);
    }
    // 2,000 rapid-reset HTTP/2 connections.
    let flood: Vec<u8> = (0..600u32)
        .flat_map(|i| {
            let id = 2 * i + 1;
            let mut f = frame(HEADERS, 0x5, id, &get("http", b"a", b"/"));
            f.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
            f
        })
        .collect();
    for _ in 0..2000 {
        let mut s = TcpStream::connect(("127.0.0.1", h2c)).unwrap();
        preface(&mut s);
        let _ = s.write_all(&flood);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut sink);
    }
    // 4,000 requests to an upstream that is down: a 502 each.
    let mut s = common::connect(format!("127.0.0.1:{h2c}").parse().unwrap());
    for _ in 0..4000 {
        let r = common::roundtrip(&mut s, b"GET /gone HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.status, 502);
    }
    let metrics = common::get(format!("127.0.0.1:{admin}").parse().unwrap(), "/metrics").text();
    common::process::signal(&child, "-TERM");
    let _ = child.0.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let lines = text.lines().count();
    // The limiters admit a few lines per second each: on a loaded machine the run takes
    // longer and may write more (103 at load average 6), never thousands (issue 33 §6).
    let bound = 100.max(15 * started.elapsed().as_secs() as usize);
    assert!(
        lines <= bound,
        "{lines} lines:\n{}",
        &text[..text.len().min(4000)]
    );
    // The events are counted all the same.
    let value = |prefix: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        value("weir_tls_handshakes_total{result=\"failed\"}") >= 4000.0,
        "{metrics}"
    );
    assert!(value("weir_http2_abuse_closes_total") >= 2000.0);
    assert!(value("weir_upstream_failures_total") >= 4000.0);
}
