//! gRPC through weir: an HTTP/2 upstream (`protocol: h2`, prior knowledge) behind an h2c
//! listener. A unary call's response body and its trailers (`grpc-status`, `grpc-message`)
//! reach an HTTP/2 client as trailers and an HTTP/1.1 client as chunked trailer fields; the
//! upstream's health checks speak HTTP/2 too.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::h2origin::h2_server;

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

/// Waits (5 s at most) until the access log at `log` holds every line of `want`, then removes
/// it; fails naming the first line missing.
fn assert_logged(log: &std::path::Path, want: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut text = String::new();
    while std::time::Instant::now() < deadline {
        text = std::fs::read_to_string(log).unwrap_or_default();
        if want.iter().all(|w| text.contains(w)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(log);
    for w in want {
        assert!(text.contains(w), "{w:?} not in the access log:\n{text}");
    }
}

/// A gRPC-ish server on its own thread (h2 with prior knowledge): `/health` answers 200; any
/// other path echoes the message of the request's one gRPC frame, upper-cased, with trailers.
fn grpc_server() -> (SocketAddr, Arc<AtomicUsize>) {
    h2_server(h2::server::Builder::new(), |req, mut respond| async move {
        let path = req.uri().path().to_string();
        let te = req.headers().get("te").cloned();
        let mut body = req.into_body();
        let mut got = BytesMut::new();
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        // Request trailers, when the client sent some, are echoed back.
        let echoed = match body.trailers().await {
            Ok(Some(t)) => t
                .get("x-client-trailer")
                .map(|v| v.to_str().unwrap_or("").to_string()),
            _ => None,
        };
        if path.ends_with("/Slow") {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        if path.ends_with("/Unimplemented") {
            // A trailers-only answer: the status in the one HEADERS frame.
            let resp = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .header("grpc-status", "12")
                .header("grpc-message", "no such method")
                .body(())
                .unwrap();
            respond.send_response(resp, true).unwrap();
            return;
        }
        if path == "/health" {
            let resp = http::Response::builder().status(200).body(()).unwrap();
            respond.send_response(resp, true).unwrap();
            return;
        }
        assert_eq!(te.unwrap(), "trailers");
        let message = String::from_utf8_lossy(&got[5..]).to_uppercase();
        let resp = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let mut send = respond.send_response(resp, false).unwrap();
        send.send_data(frame(&message), false).unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        trailers.insert("grpc-message", "all good".parse().unwrap());
        if let Some(v) = echoed {
            trailers.insert("x-echoed-trailer", v.parse().unwrap());
        }
        send.send_trailers(trailers).unwrap();
    })
}

/// A gRPC message frame: uncompressed flag, 4-byte length, the bytes.
fn frame(message: &str) -> Bytes {
    let mut f = vec![0u8];
    f.extend_from_slice(&(message.len() as u32).to_be_bytes());
    f.extend_from_slice(message.as_bytes());
    Bytes::from(f)
}

#[test]
fn a_unary_grpc_call_passes_through_with_its_trailers() {
    let (origin, connections) = grpc_server();
    let s = common::start_config(&format!(
        r#"workers: 1
upstreams:
  g:
    servers: ["{origin}"]
    protocol: h2
    active_health: {{ path: /health, interval: 100ms, fall: 1 }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - proxy: {{ upstream: g }}
"#
    ));
    let addr = s.addr;
    let (rt, client) = common::h2c_client(addr);
    rt.block_on(async {
        for word in ["hello", "again"] {
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/echo.Echo/Say"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let mut c = client.clone().ready().await.unwrap();
            let (resp, mut send) = c.send_request(req, false).unwrap();
            // The second call ends its request with trailers: they reach the upstream too.
            if word == "again" {
                send.send_data(frame(word), false).unwrap();
                let mut t = http::HeaderMap::new();
                t.insert("x-client-trailer", "from-client".parse().unwrap());
                send.send_trailers(t).unwrap();
            } else {
                send.send_data(frame(word), true).unwrap();
            }
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.headers()["content-type"], "application/grpc");
            let mut body = resp.into_body();
            let mut got = BytesMut::new();
            while let Some(chunk) = body.data().await {
                got.extend_from_slice(&chunk.unwrap());
            }
            assert_eq!(&got[..], &frame(&word.to_uppercase())[..]);
            let trailers = body.trailers().await.unwrap().expect("trailers");
            assert_eq!(trailers["grpc-status"], "0");
            assert_eq!(trailers["grpc-message"], "all good");
            let echoed = trailers
                .get("x-echoed-trailer")
                .map(|v| v.to_str().unwrap());
            let want = (word == "again").then_some("from-client");
            assert_eq!(echoed, want, "{word}");
        }
    });
    // An HTTP/1.1 client: its chunked body's trailers go upstream, and the response's come
    // back after the last chunk.
    let mut c = s.connect();
    let message = frame("plain");
    let mut req = format!(
        "POST /echo.Echo/Say HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        message.len()
    )
    .into_bytes();
    req.extend_from_slice(&message);
    req.extend_from_slice(b"\r\n0\r\nX-Client-Trailer: h1-client\r\n\r\n");
    std::io::Write::write_all(&mut c, &req).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !raw.ends_with(
        b"0\r\ngrpc-status: 0\r\ngrpc-message: all good\r\nx-echoed-trailer: h1-client\r\n\r\n",
    ) {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("Transfer-Encoding: chunked"), "{text}");
    let _ = connections;
}

/// weir's own refusals of gRPC calls are trailers-only gRPC responses (issue 55 §3): `200`,
/// `grpc-status` and `grpc-message` in one HEADERS frame that ends the stream, the refusal's
/// own fields kept (`WWW-Authenticate`). A request that is not gRPC gets the HTTP refusal.
#[test]
fn weir_s_own_refusals_of_grpc_calls_are_grpc_statuses() {
    // A port nothing listens on: the upstream's connect fails (502).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let htpasswd = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/htpasswd");
    let log = std::env::temp_dir().join(format!("weir-grpc-refusals-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let s = common::start_config(&format!(
        r#"workers: 1
limits: {{ max_body_bytes: 64 }}
upstreams:
  gone: {{ servers: ["{dead_addr}"], protocol: h2 }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    access_log: {{ path: "{log}", format: "$uri $status $sent_http_grpc_status" }}
    routes:
      - match: {{ path_prefix: /locked. }}
        filters: [{{ basic_auth: {{ file: "{htpasswd}", realm: grpc }} }}]
        respond: {{ body: in }}
      - match: {{ path_prefix: /gone. }}
        proxy: {{ upstream: gone }}
"#,
        log = log.display()
    ));
    let addr = s.addr;
    let (rt, client) = common::h2c_client(addr);
    rt.block_on(async {
        let call = |path: &str, content_type: &str, message: &str| {
            let message = frame(message);
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}{path}"))
                .header("content-type", content_type)
                .header("content-length", message.len())
                .header("te", "trailers")
                .body(())
                .unwrap();
            let client = client.clone();
            async move {
                let mut c = client.ready().await.unwrap();
                let (resp, mut send) = c.send_request(req, false).unwrap();
                send.send_data(message, true).unwrap();
                resp.await.unwrap()
            }
        };
        let big = "x".repeat(100);
        for (path, message, grpc, more) in [
            ("/gone.Svc/Call", "hi", "14", None),
            ("/locked.Svc/Call", "hi", "16", Some("www-authenticate")),
            ("/nowhere.Svc/Call", "hi", "12", None),
            // Over `max_body_bytes`, refused by the HTTP/2 stream itself before the pipeline.
            ("/gone.Svc/Call", big.as_str(), "8", None),
        ] {
            let resp = call(path, "application/grpc+proto", message).await;
            assert_eq!(resp.status(), 200, "{path}");
            let h = resp.headers();
            assert_eq!(h["grpc-status"], grpc, "{path}");
            assert!(!h["grpc-message"].is_empty(), "{path}");
            assert_eq!(h["content-type"], "application/grpc+proto", "{path}");
            if let Some(name) = more {
                assert!(h.contains_key(name), "{path}: {name} kept");
            }
            assert!(
                resp.body().is_end_stream(),
                "{path}: trailers-only, the HEADERS frame ends the stream"
            );
        }
        // Not gRPC: the HTTP refusal, with its body.
        let resp = call("/gone.Svc/Call", "application/json", "hi").await;
        assert_eq!(resp.status(), 502);
        assert!(resp.headers().get("grpc-status").is_none());
    });
    // The access log counts the refusals as refusals (the HTTP status weir refused with), the
    // gRPC status beside them: error rates see gRPC failures.
    let want = [
        "/gone.Svc/Call 502 14",
        "/locked.Svc/Call 401 16",
        "/nowhere.Svc/Call 404 12",
    ];
    assert_logged(&log, &want);
}

/// An HTTP/2 upstream that never answers `/Hang` (and counts the streams its clients reset)
/// and answers anything else at once; it allows 4 streams at a time.
fn hanging_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let resets = Arc::new(AtomicUsize::new(0));
    let count = resets.clone();
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(4);
    let (addr, _) = h2_server(builder, move |req, mut respond| {
        let count = count.clone();
        async move {
            if req.uri().path() == "/Hang" {
                let reset = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
                if reset.is_ok() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                return;
            }
            let resp = http::Response::builder().status(200).body(()).unwrap();
            let _ = respond.send_response(resp, true);
        }
    });
    (addr, resets)
}

/// A call the upstream phase gives up on (`timeouts.response_header`) resets its HTTP/2
/// stream to the upstream. The bridge used to wait for the answer nobody would read, holding
/// one of the server's concurrent streams: after 4 such calls every other call hung (review of
/// issue 55's first part).
#[test]
fn a_call_given_up_on_resets_its_upstream_stream() {
    let (origin, resets) = hanging_server();
    let s = common::start_config(&format!(
        r#"workers: 1
upstreams:
  g: {{ servers: ["{origin}"], protocol: h2, timeouts: {{ response_header: 200ms }}, passive_health: {{ max_fails: 0 }} }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: g }}
"#
    ));
    let get = |path: &str| {
        let mut c = s.connect();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        std::io::Write::write_all(
            &mut c,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out.split(' ').nth(1).unwrap_or("none").to_string()
    };
    for _ in 0..8 {
        assert_eq!(get("/Hang"), "504");
    }
    assert_eq!(get("/Ok"), "200", "a free stream for the next call");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while resets.load(Ordering::SeqCst) < 8 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        resets.load(Ordering::SeqCst),
        8,
        "each abandoned stream was reset"
    );
}

/// `grpc-timeout` bounds the upstream exchange (issue 55 §3): a call given 300 ms to a method
/// that takes 3 s ends in `DEADLINE_EXCEEDED` well before the upstream answers; without the
/// header, or on a POST that is not a gRPC call, the same request waits for the answer. The
/// expiry is the client's: four of them leave both servers up under a passive health check that
/// marks a server down at its first failure (the first version marked a healthy one down), and
/// leave closed a circuit breaker that opens at half of four calls failing (its 504s counted
/// until the second review).
#[test]
fn grpc_timeout_bounds_the_upstream_exchange() {
    let (a, _) = grpc_server();
    let (b, _) = grpc_server();
    let s = common::start_config(&format!(
        r#"workers: 1
admin: {{ address: 127.0.0.1:0 }}
upstreams:
  g:
    servers: ["{a}", "{b}"]
    protocol: h2
    passive_health: {{ max_fails: 1, window: 60s, down_for: 60s }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - filters: [{{ circuit_breaker: {{ min_calls: 4, window_size: 10, failure_rate: 50, wait: 30s }} }}]
        proxy: {{ upstream: g }}
"#
    ));
    let addr = s.addr;
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let (rt, client) = common::h2c_client(addr);
    rt.block_on(async {
        let call = |timeout: Option<&'static str>, content_type: &'static str| {
            let mut req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/echo.Echo/Slow"))
                .header("content-type", content_type)
                .header("te", "trailers");
            if let Some(t) = timeout {
                req = req.header("grpc-timeout", t);
            }
            let req = req.body(()).unwrap();
            let client = client.clone();
            async move {
                let started = std::time::Instant::now();
                let mut c = client.ready().await.unwrap();
                let (resp, mut send) = c.send_request(req, false).unwrap();
                send.send_data(frame("slow"), true).unwrap();
                let resp = resp.await.unwrap();
                let grpc = resp
                    .headers()
                    .get("grpc-status")
                    .map(|v| v.to_str().unwrap().to_string());
                let mut body = resp.into_body();
                while let Some(chunk) = body.data().await {
                    chunk.unwrap();
                }
                let trailers = body.trailers().await.unwrap();
                let grpc = grpc.or_else(|| {
                    trailers.and_then(|t| {
                        t.get("grpc-status")
                            .map(|v| v.to_str().unwrap().to_string())
                    })
                });
                (grpc, started.elapsed())
            }
        };
        for _ in 0..4 {
            let (status, took) = call(Some("300m"), "application/grpc").await;
            assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED");
            assert!(took < Duration::from_secs(2), "ended after {took:?}");
        }
        let up = |server: SocketAddr| {
            common::parked::metric(
                admin,
                &format!("weir_upstream_server_up{{upstream=\"g\",server=\"{server}\"}}"),
            )
        };
        assert_eq!((up(a), up(b)), (1.0, 1.0), "no server marked down");
        assert_eq!(
            common::parked::metric(admin, "weir_circuit_breaker_state{"),
            0.0,
            "the breaker stays closed"
        );
        // Not a gRPC call: the header is the client's business, not a bound.
        let (status, took) = call(Some("300m"), "application/json").await;
        assert_eq!(status.as_deref(), Some("0"), "answered");
        assert!(took >= Duration::from_secs(3), "not bounded: {took:?}");
        let (status, took) = call(None, "application/grpc").await;
        assert_eq!(status.as_deref(), Some("0"), "answered");
        assert!(
            took >= Duration::from_secs(3),
            "waited for the answer: {took:?}"
        );
    });
}

/// A gRPC call's status reaches the access log (`$grpc_status`) and the metrics
/// (`weir_grpc_responses_total`) (issue 55 §3): from the upstream's trailers, from its
/// trailers-only head, and from weir's own refusal; a request that is not a call has none.
#[test]
fn grpc_status_is_in_the_access_log_and_the_metrics() {
    let (origin, _) = grpc_server();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let log = std::env::temp_dir().join(format!("weir-grpc-status-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let s = common::start_config(&format!(
        r#"workers: 1
admin: {{ address: 127.0.0.1:0 }}
upstreams:
  g: {{ servers: ["{origin}"], protocol: h2 }}
  gone: {{ servers: ["{dead_addr}"], protocol: h2 }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    access_log: {{ path: "{log}", format: "$uri $status $grpc_status" }}
    routes:
      - match: {{ path_prefix: /gone. }}
        proxy: {{ upstream: gone }}
      - proxy: {{ upstream: g }}
"#,
        log = log.display()
    ));
    let addr = s.addr;
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let (rt, client) = common::h2c_client(addr);
    rt.block_on(async {
        for (method, path) in [
            ("POST", "/echo.Echo/Say"),
            ("POST", "/echo.Echo/Unimplemented"),
            ("POST", "/gone.Svc/Call"),
            ("GET", "/health"),
        ] {
            let mut req = http::Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}"));
            if method == "POST" {
                req = req
                    .header("content-type", "application/grpc")
                    .header("te", "trailers");
            }
            let mut c = client.clone().ready().await.unwrap();
            let (resp, mut send) = c.send_request(req.body(()).unwrap(), false).unwrap();
            send.send_data(frame("hi"), true).unwrap();
            let mut body = resp.await.unwrap().into_body();
            while let Some(chunk) = body.data().await {
                chunk.unwrap();
            }
            let _ = body.trailers().await;
        }
    });
    let want = [
        "/echo.Echo/Say 200 0",
        "/echo.Echo/Unimplemented 200 12",
        "/gone.Svc/Call 502 14",
        "/health 200 -",
    ];
    assert_logged(&log, &want);
    let metrics = common::get(admin, "/metrics").text();
    let calls = |code: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with("weir_grpc_responses_total{"))
            .filter(|l| l.contains(&format!("grpc_status=\"{code}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert_eq!(
        (calls("0"), calls("12"), calls("14")),
        (1, 1, 1),
        "{metrics}"
    );
    let all: u64 = (0..17).map(|c| calls(&c.to_string())).sum();
    assert_eq!(all, 3, "the GET is not a call");
}

/// An HTTP/2 upstream that answers with a `content-length` (any HTTP/2 server but gRPC's) is
/// relayed: the bridge re-frames the body as chunks, so it leaves the length out. Every such
/// answer was a 502 ("both Transfer-Encoding and Content-Length"), found by issue 55's bench. A
/// HEAD keeps its length.
#[test]
fn an_http2_upstream_answer_with_a_length_is_relayed() {
    let (origin, _) = h2_server(h2::server::Builder::new(), |req, mut respond| async move {
        let resp = http::Response::builder()
            .status(200)
            .header("content-length", "5")
            .header("x-origin", "h2")
            .body(())
            .unwrap();
        let head = req.method() == http::Method::HEAD;
        let mut send = respond.send_response(resp, head).unwrap();
        if !head {
            send.send_data(Bytes::from_static(b"hello"), true).unwrap();
        }
    });
    let s = common::start_config(&format!(
        r#"workers: 1
upstreams:
  h: {{ servers: ["{origin}"], protocol: h2 }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: h }}
"#
    ));
    let r = common::get(s.addr, "/page");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("x-origin"), Some("h2"));
    let mut c = s.connect();
    std::io::Write::write_all(&mut c, b"HEAD /page HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let r = common::read_response_to(&mut c, true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"));
}

/// A client's `content-type: application/grpc` to an HTTP/1.1 upstream does not lift the
/// upstream's timeouts (attack review of issue 55: it held a request for the route's 5-minute
/// `stream_idle` where the operator set 500 ms): `stream_idle` is for gRPC to HTTP/2 upstreams.
#[test]
fn a_grpc_content_type_to_an_http1_upstream_keeps_its_timeouts() {
    let origin = common::origin::http_origin(|_| {
        std::thread::sleep(Duration::from_secs(4));
        common::origin::ok("late")
    });
    let s = common::start_config(&format!(
        "workers: 1\nupstreams:\n  o: {{ servers: ['{}'], timeouts: {{ response_header: 500ms }}, passive_health: {{ max_fails: 0 }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n",
        origin.addr
    ));
    let mut c = s.connect();
    let started = std::time::Instant::now();
    let r = common::roundtrip(
        &mut c,
        b"POST /echo.Echo/Unary HTTP/1.1\r\nHost: t\r\nContent-Type: application/grpc\r\nContent-Length: 5\r\n\r\n\0\0\0\0\0",
    );
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2500), "waited {took:?}");
    assert!(!r.text().contains("late"), "{}", r.text());
    drop(origin);
}
