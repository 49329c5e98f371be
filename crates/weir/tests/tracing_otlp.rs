//! Span export over OTLP to a real Jaeger (issue 55 §4): weir's server span as the child of
//! the client's, a client span per upstream try (a retry visible) whose id is the upstream's
//! `traceparent` parent, the HTTP attributes, parent-based sampling with a ratio, gRPC and
//! HTTP/protobuf transports, and a collector that is down, slow, then back: spans dropped and
//! counted, requests not slowed.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::jaeger::{parent, tag, Jaeger};
use common::origin::{http_origin, ok};
use common::parked::metric;
use serde_json::json;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The `traceparent`s the origin saw.
type Seen = Arc<Mutex<Vec<String>>>;

fn live_origin() -> (common::origin::Origin, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let origin = http_origin(move |req| {
        s.lock()
            .unwrap()
            .push(req.header("traceparent").unwrap_or("").to_string());
        ok("hi")
    });
    (origin, seen)
}

/// weir with an admin listener, `tracing` as given, and a route `/app` to `servers`.
fn weir(tracing: &str, servers: &str) -> (common::TestServer, SocketAddr) {
    let srv = common::start_config(&format!(
        "workers: 1\nadmin: {{ address: 127.0.0.1:0 }}\ntracing: {tracing}\nupstreams:\n  app: {{ servers: [{servers}], passive_health: {{ max_fails: 0 }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - name: app\n        match: {{ path_prefix: /app }}\n        proxy: {{ upstream: app }}\n      - name: fixed\n        respond: {{ body: fixed }}\n"
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    (srv, admin)
}

/// A GET of `path` with `fields`, on connection `c`; the status.
fn get(c: &mut std::net::TcpStream, path: &str, fields: &str) -> u16 {
    c.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: example.test\r\nUser-Agent: probe/1\r\n{fields}\r\n")
            .as_bytes(),
    )
    .unwrap();
    common::read_response(c).status
}

fn traceparent(trace: &str, flags: &str) -> String {
    format!("traceparent: 00-{trace}-{CLIENT_SPAN}-{flags}\r\n")
}

#[test]
fn spans_reach_jaeger_with_parents_attributes_and_retries() {
    let Some(jaeger) = Jaeger::start() else {
        return;
    };
    let (origin, seen) = live_origin();
    let dead = common::process::free_port();
    let (srv, _admin) = weir(
        &format!(
            "{{ sample: 1.0, trust_from: [127.0.0.0/8], otlp: {{ endpoint: '{}', service_name: weir-http-test, interval: 50ms }} }}",
            jaeger.otlp_http()
        ),
        &format!("'127.0.0.1:{dead}', '{}'", origin.addr),
    );
    // Round robin over [dead, live] on one worker: one of two requests tries the dead server
    // first and is retried on the live one.
    let traces = [
        "4bf92f3577b34da6a3ce929d0e0e4701",
        "4bf92f3577b34da6a3ce929d0e0e4702",
    ];
    let mut c = srv.connect();
    for t in traces {
        // Two `tracestate` fields: one list upstream and in the span (attack review).
        let fields = traceparent(t, "01") + "tracestate: a=1\r\ntracestate: b=2\r\n";
        assert_eq!(get(&mut c, "/app/x?q=1", &fields), 200);
    }
    let mut retried = 0;
    for (i, t) in traces.iter().enumerate() {
        // The server span, and one or two client spans.
        let spans = jaeger.wait_spans(t, 2);
        let spans = if spans.len() == 2 {
            // A retried request's spans may come in two exports: wait a little for a third.
            std::thread::sleep(Duration::from_millis(300));
            jaeger.spans(t)
        } else {
            spans
        };
        let server = spans
            .iter()
            .find(|s| tag(s, "span.kind") == "server")
            .unwrap_or_else(|| panic!("no server span in {spans:#?}"));
        assert_eq!(parent(server).as_deref(), Some(CLIENT_SPAN), "{server:#}");
        assert_eq!(server["operationName"], "GET app");
        assert_eq!(tag(server, "http.request.method"), "GET");
        assert_eq!(tag(server, "url.path"), "/app/x");
        assert_eq!(tag(server, "url.query"), "q=1");
        assert_eq!(tag(server, "url.scheme"), "http");
        assert_eq!(tag(server, "server.address"), "example.test");
        assert_eq!(tag(server, "user_agent.original"), "probe/1");
        assert_eq!(tag(server, "network.protocol.version"), "1.1");
        assert_eq!(tag(server, "http.response.status_code"), json!(200));
        assert_eq!(tag(server, "weir.route"), "app");
        assert_eq!(tag(server, "w3c.tracestate"), "a=1,b=2", "{server:#}");
        assert_eq!(tag(server, "weir.upstream"), "app");
        assert_eq!(tag(server, "weir.upstream.server"), origin.addr.to_string());
        let server_id = server["spanID"].as_str().unwrap().to_string();
        let mut clients: Vec<&serde_json::Value> = spans
            .iter()
            .filter(|s| tag(s, "span.kind") == "client")
            .collect();
        clients.sort_by_key(|s| s["startTime"].as_u64().unwrap());
        for c in &clients {
            assert_eq!(parent(c).as_deref(), Some(&server_id[..]), "{c:#}");
        }
        let answered = clients.last().unwrap();
        assert_eq!(tag(answered, "http.response.status_code"), json!(200));
        assert_eq!(tag(answered, "server.port"), json!(origin.addr.port()));
        // The origin's parent is the answering try's span, not weir's server span.
        let sent = seen.lock().unwrap()[i].clone();
        assert_eq!(
            sent,
            format!("00-{t}-{}-01", answered["spanID"].as_str().unwrap()),
            "the origin's traceparent"
        );
        if clients.len() == 2 {
            retried += 1;
            let failed = clients[0];
            assert_eq!(
                tag(failed, "weir.upstream.server"),
                format!("127.0.0.1:{dead}")
            );
            assert_eq!(tag(failed, "error"), json!(true), "{failed:#}");
            assert!(tag(failed, "error.type").as_str().is_some(), "{failed:#}");
            assert_eq!(tag(answered, "http.request.resend_count"), json!(1));
        } else {
            assert_eq!(clients.len(), 1, "{spans:#?}");
        }
    }
    assert_eq!(retried, 1, "one of the two requests was retried");
    // A fixed answer is traced too: a server span alone.
    assert_eq!(get(&mut c, "/fixed", &traceparent(TRACE, "01")), 200);
    let spans = jaeger.wait_spans(TRACE, 1);
    assert_eq!(spans[0]["operationName"], "GET fixed");
    // A client's long values are cut in the span (a full queue's memory is bounded).
    let long = "000000000000000000000000000010e9";
    let path = format!("/fixed/{}", "a".repeat(3000));
    assert_eq!(get(&mut c, &path, &traceparent(long, "01")), 200);
    let spans = jaeger.wait_spans(long, 1);
    let kept = tag(&spans[0], "url.path");
    assert_eq!(kept.as_str().map(str::len), Some(512), "{kept}");
    drop(srv);
}

#[test]
fn sampling_follows_the_parent_then_the_ratio() {
    let Some(jaeger) = Jaeger::start() else {
        return;
    };
    let (origin, _seen) = live_origin();
    let service = "weir-sampling-test";
    let (srv, _admin) = weir(
        &format!(
            "{{ sample: 0.5, trust_from: [127.0.0.0/8], otlp: {{ endpoint: '{}', service_name: {service}, interval: 50ms }} }}",
            jaeger.otlp_http()
        ),
        &format!("'{}'", origin.addr),
    );
    let mut c = srv.connect();
    // The parent said not sampled: not exported, whatever the ratio.
    let unsampled = "0000000000000000000000000000aa01";
    assert_eq!(get(&mut c, "/app", &traceparent(unsampled, "00")), 200);
    // The parent said sampled: exported.
    let sampled = "0000000000000000000000000000aa02";
    assert_eq!(get(&mut c, "/app", &traceparent(sampled, "01")), 200);
    jaeger.wait_spans(sampled, 2);
    assert!(jaeger.spans(unsampled).is_empty());
    // New traces: about half of 200.
    for _ in 0..200 {
        assert_eq!(get(&mut c, "/fixed", ""), 200);
    }
    let count = || {
        let r = common::get(
            SocketAddr::from(([127, 0, 0, 1], jaeger.ports.query)),
            &format!("/api/traces?service={service}&limit=5000&lookback=1h"),
        );
        let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
        v["data"].as_array().map_or(0, Vec::len)
    };
    // Exports settle: the count stops growing.
    let mut last = usize::MAX;
    let n = common::until_value(
        "the sampled traces in Jaeger",
        Duration::from_secs(30),
        || {
            std::thread::sleep(Duration::from_millis(300));
            let n = count();
            let settled = n == last;
            last = n;
            (n, settled)
        },
        |(n, settled)| *settled && *n > 1,
    )
    .0;
    // The one sampled continued trace, and a binomial(200, 0.5) draw: 100 ± 7 (5σ: 65..135).
    let new = n - 1;
    assert!(
        (65..=135).contains(&new),
        "{new} of 200 new traces sampled at 0.5"
    );
    drop(srv);
}

#[test]
fn grpc_export_reaches_jaeger() {
    let Some(jaeger) = Jaeger::start() else {
        return;
    };
    let (origin, _seen) = live_origin();
    let (srv, admin) = weir(
        &format!(
            "{{ trust_from: [127.0.0.0/8], otlp: {{ endpoint: '{}', protocol: grpc, interval: 50ms }} }}",
            jaeger.otlp_grpc()
        ),
        &format!("'{}'", origin.addr),
    );
    let mut c = srv.connect();
    assert_eq!(get(&mut c, "/app", &traceparent(TRACE, "01")), 200);
    let spans = jaeger.wait_spans(TRACE, 2);
    assert!(spans.iter().any(|s| tag(s, "span.kind") == "server"));
    common::until("the export counted", Duration::from_secs(10), || {
        metric(admin, "weir_trace_spans_exported_total") >= 2.0
    });
    drop(srv);
}

/// Sends `n` traced requests and returns the slowest.
fn slowest_of(srv: &common::TestServer, n: usize) -> Duration {
    let mut c = srv.connect();
    let mut worst = Duration::ZERO;
    for i in 0..n {
        let t = format!("{:032x}", 0xbb00 + i);
        let at = Instant::now();
        assert_eq!(get(&mut c, "/app", &traceparent(&t, "01")), 200);
        worst = worst.max(at.elapsed());
    }
    worst
}

#[test]
fn a_dead_or_slow_collector_costs_spans_not_requests_and_export_resumes() {
    let (origin, _seen) = live_origin();
    // Dead: nothing listens where Jaeger will come up later.
    let ports = common::jaeger::Ports::free();
    let (srv, admin) = weir(
        &format!(
            "{{ trust_from: [127.0.0.0/8], otlp: {{ endpoint: 'http://127.0.0.1:{}', interval: 50ms, timeout: 5s }} }}",
            ports.otlp_http
        ),
        &format!("'{}'", origin.addr),
    );
    let worst = slowest_of(&srv, 100);
    common::until("failed exports counted", Duration::from_secs(10), || {
        metric(
            admin,
            "weir_trace_spans_dropped_total{reason=\"export_failed\"}",
        ) > 0.0
    });
    assert!(worst < Duration::from_secs(2), "a request took {worst:?}");
    // Back: the next spans arrive.
    let Some(jaeger) = Jaeger::start_on(ports) else {
        return;
    };
    let back = "000000000000000000000000000bac01";
    let mut c = srv.connect();
    common::until_value(
        "a trace exported after the collector came back",
        Duration::from_secs(30),
        || {
            assert_eq!(get(&mut c, "/app", &traceparent(back, "01")), 200);
            std::thread::sleep(Duration::from_millis(200));
            jaeger.spans(back).len()
        },
        |n| *n > 0,
    );
    drop(srv);

    // Slow: a collector that takes the connection and never answers. The exporter waits out
    // its 5 s timeout on the first batch; the queue of 8 fills and the rest are dropped.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let h = held.clone();
    std::thread::spawn(move || {
        for s in silent.incoming().flatten() {
            h.lock().unwrap().push(s);
        }
    });
    let (srv, admin) = weir(
        &format!(
            "{{ trust_from: [127.0.0.0/8], otlp: {{ endpoint: 'http://{silent_addr}', queue: 8, batch: 4, interval: 50ms, timeout: 5s }} }}"
        ),
        &format!("'{}'", origin.addr),
    );
    let start = Instant::now();
    let worst = slowest_of(&srv, 100);
    let took = start.elapsed();
    let full = metric(
        admin,
        "weir_trace_spans_dropped_total{reason=\"queue_full\"}",
    );
    assert!(full > 0.0, "no span dropped for a full queue");
    assert!(
        worst < Duration::from_secs(2) && took < Duration::from_secs(5),
        "requests waited for the collector: the slowest {worst:?}, all {took:?}"
    );
    assert!(
        !held.lock().unwrap().is_empty(),
        "the exporter never connected"
    );
    drop(srv);
}

#[test]
fn otlp_settings_are_checked() {
    for (otlp, says) in [
        (
            "{ endpoint: 'http://127.0.0.1:4318', protocol: http/json }",
            "tracing.otlp.protocol",
        ),
        (
            "{ endpoint: 'https://c.example:4317', protocol: grpc }",
            "tracing.otlp.endpoint",
        ),
        ("{ endpoint: 'ftp://c.example' }", "tracing.otlp.endpoint"),
        (
            "{ endpoint: 'http://127.0.0.1:4318', queue: 0 }",
            "tracing.otlp.queue",
        ),
        // Bounded: a slot is ~400 bytes, allocated with the first span (attack review: a
        // queue of 10 million was 3.8 GB; a batch of 100 million aborted the process).
        (
            "{ endpoint: 'http://127.0.0.1:4318', queue: 100000000 }",
            "tracing.otlp.queue",
        ),
        (
            "{ endpoint: 'http://127.0.0.1:4318', batch: 100000000 }",
            "tracing.otlp.batch",
        ),
        (
            "{ endpoint: 'http://127.0.0.1:4318', queue: 100, batch: 200 }",
            "tracing.otlp.batch",
        ),
        (
            "{ endpoint: 'http://127.0.0.1:4318', colour: red }",
            "colour",
        ),
    ] {
        let e = common::config_error(&format!(
            "tracing: {{ otlp: {otlp} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: x }}\n"
        ));
        assert!(e.contains(says), "{otlp}: {e}");
    }
    // An empty endpoint (`${WEIR_OTLP_ENDPOINT:-}` unset) exports nothing and serves.
    let srv = common::start_config(
        "tracing: { otlp: { endpoint: '' } }\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { body: x }\n",
    );
    let mut c = srv.connect();
    assert_eq!(get(&mut c, "/", ""), 200);
}

/// examples/grpc.yaml with `WEIR_OTLP_ENDPOINT` set: each call's server span carries its
/// `rpc.grpc.status_code` (0 for an answered call, 14 with the upstream gone), and the answered
/// call has a client span for its try.
#[test]
fn the_grpc_example_traces_to_weir_otlp_endpoint() {
    const EXAMPLE: &str = include_str!("../../../examples/grpc.yaml");
    let Some(jaeger) = Jaeger::start() else {
        return;
    };
    let Some(origin) = common::grpcgo::GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-example-trace");
    let cert = pki.issue("grpc", "localhost", &["localhost"]);
    let vars: std::collections::HashMap<&str, String> = [
        ("WEIR_GRPC_UPSTREAM", origin.addr.to_string()),
        ("WEIR_LISTEN", "127.0.0.1:0".into()),
        ("WEIR_HTTPS", "127.0.0.1:0".into()),
        ("WEIR_TLS_CERT", cert.cert.display().to_string()),
        ("WEIR_TLS_KEY", cert.key.display().to_string()),
        ("WEIR_WORKERS", "1".into()),
        ("WEIR_OTLP_ENDPOINT", jaeger.otlp_http()),
    ]
    .into();
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"));
    let cfg =
        weir::runtime::load_str(EXAMPLE, dir, |v| vars.get(v).map(|s| s.to_string())).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let h2c = handle.local_addrs()[0].to_string();
    let (ok, out) = common::grpcgo::client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(ok, "{out}");
    drop(origin);
    let (ok, out) = common::grpcgo::client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(!ok && out.contains("code = Unavailable"), "{out}");
    // Both calls' spans, found by the example's service name.
    let query = SocketAddr::from(([127, 0, 0, 1], jaeger.ports.query));
    let spans = common::until_value(
        "both calls' server spans in Jaeger",
        Duration::from_secs(30),
        || {
            let r = common::get(query, "/api/traces?service=weir-grpc&limit=100&lookback=1h");
            let v: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
            v["data"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
                .collect::<Vec<_>>()
        },
        |spans| {
            spans
                .iter()
                .filter(|s| tag(s, "span.kind") == "server")
                .count()
                >= 2
        },
    );
    let codes: Vec<serde_json::Value> = spans
        .iter()
        .filter(|s| tag(s, "span.kind") == "server")
        .map(|s| tag(s, "rpc.grpc.status_code"))
        .collect();
    assert!(codes.contains(&json!(0)), "{codes:?}");
    assert!(codes.contains(&json!(14)), "{codes:?}");
    assert!(
        spans
            .iter()
            .any(|s| tag(s, "span.kind") == "client" && tag(s, "weir.upstream") == "grpc"),
        "no client span for the answered call"
    );
    common::inproc::stop(handle);
}
