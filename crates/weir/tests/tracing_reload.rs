//! Reloads while the OTLP collector is down (issue 55 §4, attack review): each replaced
//! config's exporter drops what it cannot send at once and ends, so threads and full queues
//! do not pile up (they did: nine exporter threads and 240 MB after eight reloads, five of
//! them still there three minutes later). Its own test binary: it counts the process's
//! `weir-otlp` threads.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn exporter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "weir-otlp")
        })
        .count()
}

#[test]
fn reloads_while_the_collector_is_down_leave_no_exporters_behind() {
    // A collector that takes connections and never answers: each export waits its timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let held: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let h = held.clone();
    std::thread::spawn(move || {
        for s in silent.incoming().flatten() {
            h.lock().unwrap().push(s);
        }
    });
    let yaml = |n: usize| {
        format!(
            "workers: 1\ntracing: {{ otlp: {{ endpoint: 'http://{addr}', queue: 64, batch: 8, interval: 50ms, timeout: 2s, service_name: s{n} }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n"
        )
    };
    let srv = common::start_config(&yaml(0));
    let handle = srv.handle.as_ref().unwrap();
    for n in 1..=6 {
        // Enough spans to fill the queue, then a new config.
        let mut c = srv.connect();
        for _ in 0..100 {
            c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            assert_eq!(common::read_response(&mut c).status, 200);
        }
        common::inproc::reload(handle, &yaml(n));
    }
    // A request on the last config: the worker lets go of the one before. (The worker held
    // the first config for its whole life too, until this test.)
    let mut c = srv.connect();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(common::read_response(&mut c).status, 200);
    // The live config's exporter may still be there; every replaced one ends after its first
    // failed export (2 s) instead of waiting out each batch in its queue.
    let took = common::until(
        "the replaced configs' exporter threads end",
        Duration::from_secs(20),
        || exporter_threads() <= 1,
    );
    eprintln!("replaced exporters gone after {took:?}");
    assert!(
        weir::trace::export::DROPPED_EXPORT.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "nothing was counted as dropped"
    );
}
