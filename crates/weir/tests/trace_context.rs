//! W3C Trace Context through weir (issue 55 §4, the propagation part): a trusted client's
//! `traceparent` continued, anyone else's replaced by a new trace, the upstream sent weir's
//! own span as its parent, the access log's `$trace_id` and `$span_id`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::origin::{http_origin, ok};

const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// What the origin saw of the last request: its `traceparent` and `tracestate`.
type Seen = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

fn setup(tracing: &str, log: &std::path::Path) -> (common::TestServer, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let origin = http_origin(move |req| {
        s.lock().unwrap().push((
            req.header("traceparent").map(str::to_string),
            req.header("tracestate").map(str::to_string),
        ));
        ok("hi")
    });
    let srv = common::start_config(&format!(
        "workers: 1\n{tracing}upstreams:\n  o: {{ servers: ['{}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    access_log: {{ path: '{}', format: '$uri $trace_id $span_id' }}\n    routes:\n      - match: {{ path: /fixed }}\n        respond: {{ body: ok }}\n      - proxy: {{ upstream: o }}\n",
        origin.addr,
        log.display()
    ));
    std::mem::forget(origin);
    (srv, seen)
}

fn send(srv: &common::TestServer, path: &str, fields: &str) {
    let mut c = srv.connect();
    std::io::Write::write_all(
        &mut c,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{fields}\r\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(common::read_response(&mut c).status, 200);
}

fn log_lines(log: &std::path::Path, n: usize) -> Vec<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<Vec<String>> = text
            .lines()
            .map(|l| l.split(' ').map(str::to_string).collect())
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parts(tp: &str) -> (String, String, String) {
    let p: Vec<&str> = tp.split('-').collect();
    assert_eq!(p.len(), 4, "{tp}");
    assert_eq!(p[0], "00");
    (p[1].to_string(), p[2].to_string(), p[3].to_string())
}

#[test]
fn a_trusted_client_s_trace_is_continued_with_weir_s_span() {
    let log = std::env::temp_dir().join(format!("weir-trace-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (srv, seen) = setup(
        "tracing: { sample: 0.0, trust_from: [127.0.0.0/8] }\n",
        &log,
    );
    send(
        &srv,
        "/continued",
        &format!("traceparent: {CLIENT}\r\ntracestate: vendor=abc\r\n"),
    );
    // Not valid (uppercase hex): a new trace, sampled at 0.
    send(
        &srv,
        "/invalid",
        "traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\r\ntracestate: vendor=abc\r\n",
    );
    send(&srv, "/fixed", "");
    let seen = seen.lock().unwrap().clone();
    let (trace, parent, flags) = parts(seen[0].0.as_deref().unwrap());
    assert_eq!(
        trace, "4bf92f3577b34da6a3ce929d0e0e4736",
        "the trace goes on"
    );
    assert_ne!(
        parent, "00f067aa0ba902b7",
        "the upstream's parent is weir's span"
    );
    assert_eq!(flags, "01", "the parent's sampling decision is kept");
    assert_eq!(
        seen[0].1.as_deref(),
        Some("vendor=abc"),
        "tracestate relayed"
    );
    let (trace2, _, flags2) = parts(seen[1].0.as_deref().unwrap());
    assert_ne!(trace2, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(flags2, "00", "a new trace, sampled at 0");
    assert_eq!(seen[1].1, None, "a new trace has no tracestate");
    let lines = log_lines(&log, 3);
    let _ = std::fs::remove_file(&log);
    assert_eq!(
        lines[0],
        ["/continued", &trace, &parent],
        "log: trace and weir's span"
    );
    assert_eq!(lines[1][1], trace2);
    assert_eq!(lines[2][0], "/fixed");
    assert_eq!(lines[2][1].len(), 32, "a fixed response has a trace too");
    assert_eq!(lines[2][2].len(), 16);
}

#[test]
fn an_untrusted_client_s_trace_is_replaced_and_without_tracing_relayed() {
    let log = std::env::temp_dir().join(format!("weir-trace-u-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (srv, seen) = setup("tracing: { trust_from: [10.0.0.0/8] }\n", &log);
    send(
        &srv,
        "/untrusted",
        &format!("traceparent: {CLIENT}\r\ntracestate: vendor=abc\r\n"),
    );
    let got = seen.lock().unwrap()[0].clone();
    let (trace, _, flags) = parts(got.0.as_deref().unwrap());
    assert_ne!(trace, "4bf92f3577b34da6a3ce929d0e0e4736", "not continued");
    assert_eq!(flags, "01", "sample defaults to 1");
    assert_eq!(got.1, None, "an untrusted tracestate is dropped");
    let _ = std::fs::remove_file(&log);

    // Without `tracing` the client's fields pass as they came, and the log has `-`.
    let log = std::env::temp_dir().join(format!("weir-trace-off-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let (srv, seen) = setup("", &log);
    send(&srv, "/off", &format!("traceparent: {CLIENT}\r\n"));
    assert_eq!(seen.lock().unwrap()[0].0.as_deref(), Some(CLIENT));
    let lines = log_lines(&log, 1);
    let _ = std::fs::remove_file(&log);
    assert_eq!(lines[0], ["/off", "-", "-"]);
}

#[test]
fn a_bad_sample_names_its_key() {
    let e = weir::runtime::load_str(
        "tracing: { sample: 2 }\nlisteners: []\n",
        std::path::Path::new("."),
        |_| None,
    )
    .unwrap_err();
    assert_eq!(e.path.as_deref(), Some("tracing.sample"), "{e}");
}

/// From a trusted peer: two `traceparent` fields restart the trace (which one is the parent?),
/// two `tracestate` fields go on as one list. From anyone, with `tracing`, the trace fields of
/// a request's trailer section are dropped: the context is weir's, in the head (the review of
/// issue 55 found a client's `traceparent` and `tracestate` relayed in trailers).
#[test]
fn duplicate_fields_and_trailers_cannot_carry_a_client_s_trace() {
    use std::io::{Read, Write};
    // An origin that keeps the raw bytes of each request (its trailers too).
    let raw: Arc<Mutex<Vec<String>>> = Arc::default();
    let keep = raw.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let keep = keep.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let text = String::from_utf8_lossy(&got).to_string();
                    let done = match text.split_once("\r\n\r\n") {
                        Some((head, rest)) if head.contains("chunked") => rest.contains("\r\n\r\n"),
                        Some(_) => true,
                        None => false,
                    };
                    if done {
                        keep.lock().unwrap().push(text);
                        got.clear();
                        if conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
            });
        }
    });
    let srv = common::start_config(&format!(
        "workers: 1\ntracing: {{ trust_from: [127.0.0.0/8] }}\nupstreams:\n  o: {{ servers: ['{origin}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n"
    ));
    send(
        &srv,
        "/two-parents",
        &format!("traceparent: {CLIENT}\r\ntraceparent: 00-11111111111111111111111111111111-2222222222222222-01\r\n"),
    );
    send(
        &srv,
        "/two-states",
        &format!("traceparent: {CLIENT}\r\ntracestate: a=1\r\ntracestate: b=2\r\n"),
    );
    let mut c = srv.connect();
    c.write_all(
        format!("POST /trailers HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\ntraceparent: {CLIENT}\r\ntracestate: evil=1\r\nx-kept: yes\r\n\r\n").as_bytes(),
    )
    .unwrap();
    assert_eq!(common::read_response(&mut c).status, 200);
    let raw = raw.lock().unwrap().clone();
    assert_eq!(raw.len(), 3, "{raw:?}");
    assert!(
        !raw[0].contains("4bf92f3577b34da6a3ce929d0e0e4736"),
        "restarted: {}",
        raw[0]
    );
    assert!(!raw[0].contains("1111111111"), "restarted: {}", raw[0]);
    assert!(
        raw[1].contains("4bf92f3577b34da6a3ce929d0e0e4736"),
        "{}",
        raw[1]
    );
    assert!(
        raw[1].contains("tracestate: a=1,b=2\r\n"),
        "one list: {}",
        raw[1]
    );
    let (head, trailers) = raw[2].split_once("\r\n0\r\n").unwrap();
    assert_eq!(head.matches("traceparent").count(), 1, "weir's: {head}");
    assert!(
        !trailers.contains("traceparent") && !trailers.contains("tracestate"),
        "{trailers}"
    );
    assert!(trailers.contains("x-kept: yes"), "{trailers}");
}
