//! Upstream policies of the gateway (issue 19): outlier ejection and the caps on connections,
//! pending requests, requests and retries, over real sockets.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::origin::{http_origin, ok};
use common::{get, roundtrip};

/// A server with one proxy route to upstream `app` (`servers` and more keys as YAML lines,
/// indented by 4 spaces), with `workers` workers.
fn proxy_to(workers: u32, app: &str) -> common::TestServer {
    common::start_config(&format!(
        "workers: {workers}\nupstreams:\n  app:\n{app}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: app }}\n"
    ))
}

fn failing_500() -> Vec<u8> {
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nfail".to_vec()
}

/// Three 5xx in a row eject a server for the base time; the others take its traffic; it comes
/// back after; the ejection is counted in /metrics. With one server left up, none is ejected.
#[test]
fn consecutive_5xx_eject_a_server_for_the_base_time() {
    let bad_hits = Arc::new(AtomicUsize::new(0));
    let b = bad_hits.clone();
    let bad = http_origin(move |_| {
        b.fetch_add(1, Ordering::SeqCst);
        failing_500()
    });
    let good = http_origin(|_| ok("good"));
    let s = common::start_config(&format!(
        r#"
workers: 1
admin: {{ address: 127.0.0.1:0 }}
upstreams:
  app:
    servers: ["{}", "{}"]
    policy: round_robin
    outlier_detection: {{ consecutive_5xx: 3, base_ejection_time: 1s, max_ejection_percent: 50 }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: app }}
"#,
        bad.addr, good.addr
    ));
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let mut c = s.connect();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").status);
    }
    assert_eq!(bad_hits.load(Ordering::SeqCst), 3, "{statuses:?}");
    // Ejected: everything goes to the good server now.
    for _ in 0..10 {
        assert_eq!(
            roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
            "good"
        );
    }
    assert_eq!(bad_hits.load(Ordering::SeqCst), 3);
    let m = get(admin, "/metrics").text();
    assert!(
        m.lines()
            .any(|l| l.starts_with("weir_upstream_ejections_total")
                && l.contains(&bad.addr.to_string())
                && l.ends_with(" 1")),
        "{}",
        m.lines()
            .filter(|l| l.contains("ejections"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Back after the base time.
    // paces: the ejection's base time (1 s) passes.
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..4 {
        roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    assert!(bad_hits.load(Ordering::SeqCst) > 3, "the ejection ended");
}

#[test]
fn the_last_server_up_is_never_ejected() {
    let bad = http_origin(|_| failing_500());
    let s = proxy_to(
        1,
        &format!(
            "    servers: [\"{}\"]\n    outlier_detection: {{ consecutive_5xx: 2, base_ejection_time: 10s, max_ejection_percent: 100 }}",
            bad.addr
        ),
    );
    let mut c = s.connect();
    for _ in 0..5 {
        // The origin's own 500s, never a 503 for "no server up".
        assert_eq!(
            roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").status,
            500
        );
    }
}

/// `max_requests`: requests in flight over the cap get 503 at once; the origin never sees more.
#[test]
fn max_requests_caps_requests_in_flight_across_workers() {
    let peak = Arc::new(AtomicUsize::new(0));
    let now = Arc::new(AtomicUsize::new(0));
    let (p, n) = (peak.clone(), now.clone());
    let o = http_origin(move |_| {
        let c = n.fetch_add(1, Ordering::SeqCst) + 1;
        p.fetch_max(c, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(400));
        n.fetch_sub(1, Ordering::SeqCst);
        ok("slow")
    });
    let s = proxy_to(
        2,
        &format!(
            "    servers: [\"{}\"]\n    limits: {{ max_requests: 3 }}",
            o.addr
        ),
    );
    let answers = common::concurrent_gets(s.addr, "/", 6);
    let ok_count = answers.iter().filter(|r| r.status == 200).count();
    let refused = answers.iter().filter(|r| r.status == 503).count();
    assert_eq!((ok_count, refused), (3, 3));
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    // Slots come back.
    assert_eq!(get(s.addr, "/").status, 200);
}

/// `max_connections`: a request that needs a new connection beyond the cap gets 503; pooled
/// connections are reused within it.
#[test]
fn max_connections_caps_connections_to_the_upstream() {
    let o = http_origin(|_| {
        std::thread::sleep(Duration::from_millis(300));
        ok("slow")
    });
    let s = proxy_to(
        1,
        &format!(
            "    servers: [\"{}\"]\n    limits: {{ max_connections: 2 }}",
            o.addr
        ),
    );
    let mut statuses: Vec<u16> = common::concurrent_gets(s.addr, "/", 4)
        .iter()
        .map(|r| r.status)
        .collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 503, 503]);
    // Sequential requests reuse the two pooled connections: no refusal, no new connection.
    let before = o.accepted();
    for _ in 0..4 {
        assert_eq!(get(s.addr, "/").status, 200);
    }
    assert_eq!(o.accepted(), before);
}

/// Revalidations go through the one upstream phase: a server that refuses the connection is
/// retried on another, and the conditional request carries the request id.
#[test]
fn revalidation_retries_and_carries_the_request_id() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let o = http_origin(move |req| {
        let conditional = req.header("if-none-match").is_some();
        s2.lock()
            .unwrap()
            .push((conditional, req.header("x-request-id").map(str::to_string)));
        if conditional {
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\n\r\n"
                .to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\nContent-Length: 2\r\n\r\nhi".to_vec()
        }
    });
    let refused = common::process::free_port();
    let s = common::start_config(&format!(
        r#"
workers: 1
cache_zones: {{ z: {{ max_size: 1m }} }}
upstreams:
  app:
    servers: ["127.0.0.1:{refused}", "{}"]
    policy: round_robin
    passive_health: {{ max_fails: 0 }}
    retries: {{ attempts: 1, on: [connect], backoff: 0s }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: app }}
        cache: {{ zone: z }}
"#,
        o.addr
    ));
    let mut c = s.connect();
    assert_eq!(
        roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").text(),
        "hi"
    );
    for _ in 0..3 {
        // paces: a second later the stored response is stale again.
        std::thread::sleep(Duration::from_millis(1100));
        let r = roundtrip(&mut c, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "hi");
        let status = r.header("cache-status").unwrap_or("");
        assert!(
            status.contains("fwd=stale") && status.contains("fwd-status=304"),
            "{status}"
        );
    }
    let seen = seen.lock().unwrap();
    let conditionals: Vec<_> = seen.iter().filter(|(c, _)| *c).collect();
    assert_eq!(
        conditionals.len(),
        3,
        "every revalidation reached the origin: {seen:?}"
    );
    assert!(conditionals
        .iter()
        .all(|(_, id)| id.as_deref().is_some_and(|i| !i.is_empty())));
}
