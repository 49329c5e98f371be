//! The admin listener keeps answering when the service is full (issue 18, item 6): at
//! `max_connections` and at the process's descriptor limit. Connections over the limit are
//! refused at once (closed, not left in the backlog) and counted by reason.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::process::{free_port, write_config, Running, WEIR};

fn wait_port(port: u16) {
    common::until(
        &format!("port {port} open"),
        Duration::from_secs(15),
        || TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
}

fn metric(admin: u16, name: &str) -> f64 {
    let m = common::get(format!("127.0.0.1:{admin}").parse().unwrap(), "/metrics");
    assert_eq!(m.status, 200);
    m.text()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Whether the server closed `s` without a response within a second.
fn refused(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let _ = s.write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_)) && !matches!(s.read(&mut buf), Ok(n) if n > 0)
}

fn spawn(shell_prefix: &str, extra: &str) -> (Running, u16, u16) {
    let (port, admin) = (free_port(), free_port());
    let cfg = write_config(
        &format!("budget-{port}"),
        &format!("workers: 1\n{extra}\nadmin: {{ address: 127.0.0.1:{admin} }}\nlisteners:\n  - address: 127.0.0.1:{port}\n    routes:\n      - respond: {{ body: hi }}\n"),
    );
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{shell_prefix} exec {WEIR} run -c {}",
            cfg.display()
        ))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = Running(child);
    wait_port(port);
    wait_port(admin);
    (child, port, admin)
}

#[test]
fn at_max_connections_others_are_refused_at_once_and_admin_answers() {
    let (_child, port, admin) = spawn("", "limits: { max_connections: 4 }");
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = common::connect(format!("127.0.0.1:{port}").parse().unwrap());
        let r = common::roundtrip(&mut s, b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.text(), "hi");
        held.push(s);
    }
    for _ in 0..3 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(refused(&mut s), "over max_connections: closed at once");
    }
    // The admin API has its own budget.
    assert!(
        metric(
            admin,
            "weir_connections_refused_total{reason=\"max_connections\"}"
        ) >= 3.0
    );
    // Room again once a connection ends (three held open, and this scrape's).
    drop(held.pop());
    common::until(
        "the closed connection counted out",
        Duration::from_secs(10),
        || metric(admin, "weir_connections_open ") == 4.0,
    );
    assert_eq!(
        common::get(format!("127.0.0.1:{port}").parse().unwrap(), "/hello").text(),
        "hi"
    );
}

#[test]
fn at_the_descriptor_limit_the_admin_api_still_answers() {
    let (_child, port, admin) = spawn("ulimit -n 64;", "");
    // More connections than descriptors: the surplus is refused, not left hanging.
    let mut held = Vec::new();
    let mut refusals = 0;
    for _ in 0..80 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = s.write_all(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => held.push(s),
            _ => refusals += 1,
        }
    }
    assert!(refusals > 0, "the limit was reached");
    for _ in 0..3 {
        assert!(metric(admin, "weir_connections_refused_total{reason=\"fd_limit\"}") >= 1.0);
    }
    drop(held);
    common::until(
        "the connections counted out",
        Duration::from_secs(10),
        || metric(admin, "weir_connections_open ") == 1.0,
    );
    assert_eq!(
        common::get(format!("127.0.0.1:{port}").parse().unwrap(), "/hello").text(),
        "hi"
    );
}
