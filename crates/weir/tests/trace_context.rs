//! W3C Trace Context through weir (issue 55 §4, the propagation part): a trusted client's
//! `traceparent` continued, anyone else's replaced by a new trace, the upstream sent weir's
//! own span as its parent, the access log's `$trace_id` and `$span_id`.
#![allow(clippy::unwrap_used)]

mod common;

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
