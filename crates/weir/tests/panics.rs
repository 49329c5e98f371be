//! A panic while serving one connection closes that connection only: the worker goes on
//! serving the others, and the panic is counted (issue 18, item 8). The panic comes from the
//! debug-only fault injection in `pipeline::handle` (`WEIR_FAULT_INJECTION`).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use common::{closed_within, get, start_config};

#[test]
fn a_panic_closes_one_connection_and_no_worker() {
    std::env::set_var("WEIR_FAULT_INJECTION", "1");
    // One worker: if the panic took it down, nothing would answer after it.
    let srv = start_config(
        "workers: 1\nadmin: { address: 127.0.0.1:0 }\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { body: fine }\n",
    );
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    // A keep-alive connection open across the panics.
    let mut bystander = srv.connect();
    assert_eq!(
        common::roundtrip(&mut bystander, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
        "fine"
    );
    for _ in 0..20 {
        let mut s = srv.connect();
        s.write_all(b"GET /__weir_fault/panic HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert!(closed_within(&mut s, Duration::from_secs(5)));
    }
    assert_eq!(get(srv.addr, "/").text(), "fine");
    assert_eq!(
        common::roundtrip(&mut bystander, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
        "fine"
    );
    let metrics = get(admin, "/metrics").text();
    let panics: u64 = metrics
        .lines()
        .find(|l| l.starts_with("weir_panics_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert!(panics >= 20, "{panics}");
}
