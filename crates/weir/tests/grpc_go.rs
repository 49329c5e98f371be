//! gRPC through weir against a real implementation (issue 55 §3): grpc-go's server (with its
//! `grpc.health.v1` service) and client, from `tests/fixtures/grpc-go`, over h2c and TLS.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::grpcgo::{client, GrpcServer};

/// weir in front of `origin`: an h2c listener and a TLS one (ALPN h2), both proxying to it as
/// an HTTP/2 upstream, with `health` as the upstream's `active_health` when given.
fn weir(origin: SocketAddr, health: &str, pki: &common::tlskit::Pki) -> common::TestServer {
    let cert = pki.issue("grpc", "localhost", &["localhost"]);
    common::start_config(&format!(
        r#"workers: 1
admin: {{ address: 127.0.0.1:0 }}
upstreams:
  g:
    servers: ["{origin}"]
    protocol: h2
{health}listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - proxy: {{ upstream: g }}
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - proxy: {{ upstream: g }}
"#,
        cert.cert.display(),
        cert.key.display()
    ))
}

/// Unary, server-streaming (50 messages), client-streaming (20) and bidirectional ping-pong
/// calls from grpc-go's client through weir to grpc-go's server, each with its trailers, over
/// h2c and over TLS.
#[test]
fn grpc_go_calls_of_every_kind_pass_through() {
    let Some(origin) = GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-go-kinds");
    let s = weir(origin.addr, "", &pki);
    let addrs = s.handle.as_ref().unwrap().local_addrs();
    let (h2c, tls) = (addrs[0].to_string(), addrs[1].to_string());
    let ca = pki.ca_file().display().to_string();
    for kind in ["unary", "server", "client", "bidi"] {
        let (ok, out) = client(&["-addr", &h2c, "-kind", kind]);
        assert!(ok, "h2c {kind}: {out}");
        let (ok, out) = client(&["-addr", &tls, "-kind", kind, "-ca", &ca]);
        assert!(ok, "TLS {kind}: {out}");
    }
}

/// `active_health: { grpc: { service } }` asks grpc-go's health service: a service set to
/// NOT_SERVING takes the server out (calls get UNAVAILABLE, trailers-only from weir), and
/// SERVING brings it back; a service the server does not know keeps it out.
#[test]
fn grpc_health_checks_follow_the_service_s_status() {
    let Some(mut origin) = GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-go-health");
    let check = |service: &str| {
        format!(
            "    active_health: {{ grpc: {{ service: '{service}' }}, interval: 100ms, timeout: 1s, rise: 1, fall: 1 }}\n"
        )
    };
    let s = weir(origin.addr, &check("echo.Echo"), &pki);
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let h2c = s.handle.as_ref().unwrap().local_addrs()[0].to_string();
    let origin_addr = origin.addr;
    let up = || {
        common::parked::metric(
            admin,
            &format!(
                "weir_upstream_server_up{{upstream=\"g\",server=\"{}\"}}",
                origin_addr
            ),
        )
    };
    common::until("the server is up", Duration::from_secs(10), || up() == 1.0);
    let (ok, out) = client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(ok, "{out}");

    origin.set_serving("echo.Echo", false);
    common::until("NOT_SERVING takes it out", Duration::from_secs(10), || {
        up() == 0.0
    });
    let (ok, out) = client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(!ok && out.contains("Unavailable"), "{out}");

    origin.set_serving("echo.Echo", true);
    common::until("SERVING brings it back", Duration::from_secs(10), || {
        up() == 1.0
    });
    let (ok, out) = client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(ok, "{out}");

    // A service the server has never heard of: NOT_FOUND, never up.
    let s = weir(origin.addr, &check("no.Such"), &pki);
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let h2c = s.handle.as_ref().unwrap().local_addrs()[0].to_string();
    common::until(
        "an unknown service is down",
        Duration::from_secs(10),
        || {
            common::parked::metric(
                admin,
                &format!(
                    "weir_upstream_server_up{{upstream=\"g\",server=\"{}\"}}",
                    origin.addr
                ),
            ) == 0.0
        },
    );
    let (ok, out) = client(&["-addr", &h2c, "-kind", "unary"]);
    assert!(!ok && out.contains("Unavailable"), "{out}");
}

/// examples/grpc.yaml as its header says: `WEIR_LISTEN` (h2c) and `WEIR_HTTPS` (TLS, with
/// `WEIR_TLS_CERT` and `WEIR_TLS_KEY`) proxy to `WEIR_GRPC_UPSTREAM`, checked by
/// `grpc.health.v1`; with the upstream down a call gets `grpc-status: 14` (UNAVAILABLE).
#[test]
fn the_grpc_example_answers_as_its_header_says() {
    const EXAMPLE: &str = include_str!("../../../examples/grpc.yaml");
    let Some(origin) = GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-example");
    let cert = pki.issue("grpc", "localhost", &["localhost"]);
    let vars: std::collections::HashMap<&str, String> = [
        ("WEIR_GRPC_UPSTREAM", origin.addr.to_string()),
        ("WEIR_LISTEN", "127.0.0.1:0".into()),
        ("WEIR_HTTPS", "127.0.0.1:0".into()),
        ("WEIR_TLS_CERT", cert.cert.display().to_string()),
        ("WEIR_TLS_KEY", cert.key.display().to_string()),
        ("WEIR_WORKERS", "1".into()),
    ]
    .into();
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples"));
    let cfg =
        weir::runtime::load_str(EXAMPLE, dir, |v| vars.get(v).map(|s| s.to_string())).unwrap();
    let handle = weir::server::start(cfg).unwrap();
    let addrs = handle.local_addrs();
    let (h2c, tls) = (addrs[0].to_string(), addrs[1].to_string());
    let ca = pki.ca_file().display().to_string();
    for kind in ["unary", "bidi"] {
        let (ok, out) = client(&["-addr", &h2c, "-kind", kind]);
        assert!(ok, "h2c {kind}: {out}");
        let (ok, out) = client(&["-addr", &tls, "-kind", kind, "-ca", &ca]);
        assert!(ok, "TLS {kind}: {out}");
    }
    drop(origin);
    let plain: [&str; 0] = [];
    for (addr, tls_args) in [(&h2c, &plain[..]), (&tls, &["-ca", ca.as_str()][..])] {
        let mut args = vec!["-addr", addr.as_str(), "-kind", "unary"];
        args.extend_from_slice(tls_args);
        let (ok, out) = client(&args);
        assert!(!ok && out.contains("code = Unavailable"), "{addr}: {out}");
    }
    common::inproc::stop(handle);
}

/// A bidirectional call quiet both ways after its first exchange (issue 55's review: such
/// streams were cut by the upstream's `timeouts.idle` and counted against the server, four of
/// them marking a healthy server down). A gRPC stream waits on its route's `stream_idle`, not
/// on the plain HTTP timeouts (the upstream's 500 ms, the client's 300 ms body wait): it ends
/// after 2 s quiet, and nobody is marked.
#[test]
fn a_stream_quiet_both_ways_is_not_the_server_s_failure() {
    let (Some(a), Some(b)) = (GrpcServer::start(), GrpcServer::start()) else {
        return;
    };
    let s = common::start_config(&format!(
        r#"workers: 1
admin: {{ address: 127.0.0.1:0 }}
timeouts: {{ body: 300ms }}
upstreams:
  g:
    servers: ["{}", "{}"]
    protocol: h2
    timeouts: {{ idle: 500ms, response_header: 500ms }}
    passive_health: {{ max_fails: 1, window: 60s, down_for: 60s }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - proxy: {{ upstream: g, stream_idle: 2s }}
"#,
        a.addr, b.addr
    ));
    let addr = s.addr;
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let (rt, client) = common::h2c_client(addr);
    rt.block_on(async {
        // google.protobuf.StringValue { value: "ping" } in a gRPC frame.
        let message = bytes::Bytes::from_static(&[0, 0, 0, 0, 6, 0x0a, 4, b'p', b'i', b'n', b'g']);
        let mut calls = Vec::new();
        for _ in 0..4 {
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{addr}/echo.Echo/Bidi"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let mut c = client.clone().ready().await.unwrap();
            let (resp, mut send) = c.send_request(req, false).unwrap();
            send.send_data(message.clone(), false).unwrap();
            let mut body = resp.await.unwrap().into_body();
            let echo = body.data().await.unwrap().unwrap();
            assert_eq!(&echo[7..], b"PING");
            // Kept open and quiet: `send` is held, nothing more is sent.
            calls.push((send, body));
        }
        let started = std::time::Instant::now();
        for (_send, mut body) in calls {
            // Each ends (a reset or an error), on the client's 2 s body wait.
            let end = tokio::time::timeout(Duration::from_secs(10), async {
                while let Some(Ok(_)) = body.data().await {}
            })
            .await;
            assert!(end.is_ok(), "the quiet stream was never ended");
        }
        assert!(
            started.elapsed() >= Duration::from_millis(1500),
            "ended by a plain HTTP timeout, not the route's stream_idle: {:?}",
            started.elapsed()
        );
    });
    for server in [a.addr, b.addr] {
        let up = common::parked::metric(
            admin,
            &format!("weir_upstream_server_up{{upstream=\"g\",server=\"{server}\"}}"),
        );
        assert_eq!(up, 1.0, "{server} marked down");
    }
}

/// gRPC-Web (issue 55 §3): connect-go's client speaks gRPC-Web (binary) over HTTP/1.1 and over
/// HTTP/2 (TLS) to weir, which asks grpc-go in gRPC; a unary and a server-streaming call, their trailers read from
/// the body's last frame. The text form (base64) over raw HTTP/1.1, both ways.
#[test]
fn grpc_web_calls_are_translated_to_grpc() {
    use base64::Engine;
    let Some(origin) = GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-web");
    let s = weir(origin.addr, "", &pki);
    let addrs = s.handle.as_ref().unwrap().local_addrs();
    let (h2c, tls) = (addrs[0].to_string(), addrs[1].to_string());
    let ca = pki.ca_file().display().to_string();
    for kind in ["web-unary", "web-server"] {
        // HTTP/1.1 in clear, HTTP/2 over TLS.
        let (ok, out) = client(&["-addr", &h2c, "-kind", kind]);
        assert!(ok, "{kind}: {out}");
        let (ok, out) = client(&["-addr", &tls, "-kind", kind, "-ca", &ca]);
        assert!(ok, "TLS {kind}: {out}");
    }
    // grpc-web-text: StringValue{"hi"} framed, then base64, sent in two pieces.
    let b64 = base64::engine::general_purpose::STANDARD;
    let frame = [0u8, 0, 0, 0, 4, 0x0a, 2, b'h', b'i'];
    let text = b64.encode(frame);
    let (one, two) = text.split_at(5);
    let mut c = s.connect();
    let req = format!(
        "POST /echo.Echo/Unary HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc-web-text\r\nX-Grpc-Web: 1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{one}\r\n{:x}\r\n{two}\r\n0\r\n\r\n",
        one.len(),
        two.len()
    );
    std::io::Write::write_all(&mut c, req.as_bytes()).unwrap();
    let r = common::read_response(&mut c);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/grpc-web-text+proto")
    );
    assert!(
        r.header("grpc-status").is_none(),
        "the status is in the body"
    );
    // The body: base64 pieces, each padded on its own; decoded, the message then the
    // trailer frame.
    let mut decoded = Vec::new();
    let body = r.text();
    let mut rest = body.as_str();
    while !rest.is_empty() {
        let end = rest
            .as_bytes()
            .chunks(4)
            .position(|g| g.contains(&b'='))
            .map_or(rest.len(), |i| (i + 1) * 4);
        decoded.extend(b64.decode(&rest[..end]).unwrap());
        rest = &rest[end..];
    }
    assert_eq!(&decoded[..9], &[0, 0, 0, 0, 4, 0x0a, 2, b'H', b'I']);
    assert_eq!(decoded[9], 0x80, "the trailer frame");
    let trailers = String::from_utf8_lossy(&decoded[14..]);
    assert!(trailers.contains("grpc-status:0\r\n"), "{trailers}");
    assert!(trailers.contains("x-echo-trailer:unary\r\n"), "{trailers}");

    // A text body that is not base64: answered 400 at once, the upstream stream reset (it was
    // held until `response_header` ran out: the review of issue 55), the server not marked.
    let started = std::time::Instant::now();
    let mut c = s.connect();
    std::io::Write::write_all(
        &mut c,
        b"POST /echo.Echo/Unary HTTP/1.1\r\nHost: x\r\nContent-Type: application/grpc-web-text\r\nContent-Length: 8\r\n\r\n!!!!AAAA",
    )
    .unwrap();
    let r = common::read_response(&mut c);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let (ok, out) = client(&["-addr", &h2c, "-kind", "web-unary"]);
    assert!(ok, "the server is still used: {out}");
}

/// `grpc-health-probe` (the Kubernetes probe for gRPC servers, from the Go module proxy) asks
/// through weir: the server's and a service's SERVING, a service set NOT_SERVING, and the
/// upstream gone (weir's own UNAVAILABLE).
#[test]
fn grpc_health_probe_asks_through_weir() {
    if !common::process::have_all_or_skip(
        &["grpc-health-probe"],
        "GOBIN=/usr/local/bin go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.62",
    ) {
        return;
    }
    let Some(mut origin) = GrpcServer::start() else {
        return;
    };
    let pki = common::tlskit::Pki::new("grpc-probe");
    let s = weir(origin.addr, "", &pki);
    let h2c = s.handle.as_ref().unwrap().local_addrs()[0].to_string();
    let probe = |service: &str| {
        let out = std::process::Command::new("grpc-health-probe")
            .args([
                "-addr",
                &h2c,
                "-service",
                service,
                "-connect-timeout",
                "5s",
                "-rpc-timeout",
                "5s",
            ])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    for service in ["", "echo.Echo"] {
        let (ok, out) = probe(service);
        assert!(ok && out.contains("SERVING"), "{service:?}: {out}");
    }
    origin.set_serving("echo.Echo", false);
    let (ok, out) = probe("echo.Echo");
    assert!(!ok && out.contains("NOT_SERVING"), "{out}");
    drop(origin);
    let (ok, out) = probe("");
    assert!(!ok && out.contains("Unavailable"), "{out}");
}

/// A server-streaming call whose server pauses 700 ms between messages (issue 55 §3): the
/// plain HTTP timeouts (the upstream's `response_header` and `idle` at 300 ms) do not cut it,
/// the route's `stream_idle` (5 minutes unless set) bounds it; a route with `stream_idle:
/// 400ms` ends the same call, answering DEADLINE_EXCEEDED-free: the stream is cut, and the
/// server is not marked.
#[test]
fn a_quiet_server_stream_waits_on_the_route_s_stream_idle() {
    let Some(origin) = GrpcServer::start() else {
        return;
    };
    let s = common::start_config(&format!(
        r#"workers: 1
admin: {{ address: 127.0.0.1:0 }}
timeouts: {{ body: 300ms }}
upstreams:
  g:
    servers: ["{}"]
    protocol: h2
    timeouts: {{ idle: 300ms, response_header: 300ms }}
    passive_health: {{ max_fails: 1, window: 60s, down_for: 60s }}
listeners:
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - proxy: {{ upstream: g }}
  - address: 127.0.0.1:0
    h2c: true
    routes:
      - proxy: {{ upstream: g, stream_idle: 400ms }}
"#,
        origin.addr
    ));
    let addrs = s.handle.as_ref().unwrap().local_addrs();
    let admin = s.handle.as_ref().unwrap().admin_addr().unwrap();
    let (default, short) = (addrs[0].to_string(), addrs[1].to_string());
    let (ok, out) = client(&[
        "-addr",
        &default,
        "-kind",
        "server",
        "-messages",
        "3",
        "-gap",
        "700ms",
    ]);
    assert!(ok, "cut by a plain HTTP timeout: {out}");
    let (ok, out) = client(&[
        "-addr",
        &short,
        "-kind",
        "server",
        "-messages",
        "3",
        "-gap",
        "700ms",
    ]);
    assert!(
        !ok && out.contains("server stream after 1"),
        "not cut at 400 ms: {out}"
    );
    let up = common::parked::metric(
        admin,
        &format!(
            "weir_upstream_server_up{{upstream=\"g\",server=\"{}\"}}",
            origin.addr
        ),
    );
    assert_eq!(up, 1.0, "the server was marked down for a quiet stream");
    // Still answering on the default route.
    let (ok, out) = client(&["-addr", &default, "-kind", "unary"]);
    assert!(ok, "{out}");
}
