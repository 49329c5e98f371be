//! HTTP/3 over QUIC (`quic: true`): every action through the pipeline, the access log and
//! metrics, Alt-Svc on the TCP side, the limits (streams, header section, reset floods),
//! 0-RTT, reloads and shutdown under load, config errors, and the example with independent
//! clients (`weir bench --h3` and ngtcp2's `gtlsclient`).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::h3::{self as h3c, Client};
use common::inproc;
use common::tlskit::Pki;

/// A server with a QUIC listener on a fixed free port (so Alt-Svc names it), an origin, a
/// cache zone, a KV store and an access log.
struct Setup {
    handle: weir::server::ServerHandle,
    addr: SocketAddr,
    pki: Pki,
    log: std::path::PathBuf,
    hits: Arc<AtomicUsize>,
    big: Vec<u8>,
    yaml: String,
    _origin: common::origin::Origin,
}

fn setup(tag: &str, extra: &str) -> Setup {
    let pki = Pki::new(&format!("h3-{tag}"));
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let dir = inproc::dir("h3", tag);
    let big: Vec<u8> = (0..1_200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    std::fs::write(dir.join("small.txt"), "small file\n").unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let origin = common::origin::http_origin(move |req| {
        counted.fetch_add(1, Ordering::SeqCst);
        // A slow origin, for requests in flight at shutdown.
        if req.line.contains("/proxied/slow") {
            std::thread::sleep(Duration::from_secs(2));
        }
        let body = format!(
            "origin saw {} xff={} proto={} via={} early={}",
            req.line.trim_end(),
            req.header("x-forwarded-for").unwrap_or("-"),
            req.header("x-forwarded-proto").unwrap_or("-"),
            req.header("via").unwrap_or("-"),
            req.header("early-data").unwrap_or("-"),
        );
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let port = common::process::free_port();
    let log = dir.join("access.log");
    let yaml = format!(
        r#"workers: 1
{extra}
cache_zones: {{ z: {{ max_size: 16m }} }}
kv_stores: {{ s: {{ max_size: 1m, max_value_size: 64k }} }}
upstreams: {{ o: {{ servers: ['{origin}'] }} }}
listeners:
  - address: 127.0.0.1:{port}
    quic: true
    access_log: {{ path: '{log}', format: '$protocol $request_method $uri $status $ssl_protocol $ssl_server_name' }}
    tls:
      certificates: [{{ cert: '{cert}', key: '{key}' }}]
    routes:
      - match: {{ path: /hello }}
        respond: {{ body: "Hello, World\n" }}
      - match: {{ path: /whoami, client: [127.0.0.1] }}
        respond: {{ body: "allowed $remote_addr" }}
      - match: {{ path: /whoami }}
        respond: {{ body: "other $remote_addr" }}
      - match: {{ path_prefix: /echo }}
        echo: {{}}
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{root}' }}
      - match: {{ path_prefix: /cached }}
        proxy: {{ upstream: o }}
        cache: {{ zone: z }}
      - match: {{ path_prefix: /proxied }}
        proxy: {{ upstream: o, forwarded: {{ x_forwarded: true }}, via: true }}
      - match: {{ path_prefix: /kv/ }}
        kv: {{ store: s }}
      - match: {{ path_regex: "^/old/(.*)$" }}
        redirect: "https://$host/new/$1"
      - match: {{ path: /healthz }}
        health: {{}}
      - match: {{ path: /limited }}
        filters: [{{ rate_limit: {{ rate: 1, burst: 0, headers: false }} }}]
        respond: {{ body: ok }}
"#,
        origin = origin.addr,
        log = log.display(),
        cert = cert.cert.display(),
        key = cert.key.display(),
        root = dir.display(),
    );
    let handle = inproc::start(&yaml);
    let addr = handle.local_addrs()[0];
    assert_eq!(addr.port(), port);
    Setup {
        handle,
        addr,
        pki,
        log,
        hits,
        big,
        yaml,
        _origin: origin,
    }
}

fn wait_for(what: &str, ok: impl FnMut() -> bool) {
    common::until(what, Duration::from_secs(20), ok);
}

#[test]
fn every_action_answers_over_http3_and_is_logged_as_http3() {
    let s = setup("actions", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let a = "leaf.test";
        let r = h3c::request(&mut send, a, "GET", "/hello", &[], b"")
            .await
            .unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "Hello, World\n"));
        assert!(r.header("connection").is_none());
        assert!(
            r.header("alt-svc").is_none(),
            "HTTP/3 responses need no Alt-Svc"
        );

        // A request body, read whole (no content-length: its end is the stream's FIN).
        let r = h3c::request(&mut send, a, "POST", "/echo/x?y=1", &[], b"a request body")
            .await
            .unwrap();
        let text = r.text();
        assert_eq!(r.status, 200);
        assert!(text.contains("POST /echo/x?y=1"), "{text}");
        assert!(text.ends_with("a request body"), "{text}");

        let r = h3c::request(&mut send, a, "GET", "/static/small.txt", &[], b"")
            .await
            .unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "small file\n"));
        // More than the stream and connection windows: sent as the client reads.
        let r = h3c::request(&mut send, a, "GET", "/static/big.bin", &[], b"")
            .await
            .unwrap();
        assert!(r.status == 200 && r.body == s.big, "big file");
        let r = h3c::request(&mut send, a, "GET", "/static/none", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 404);

        let r = h3c::request(&mut send, a, "GET", "/proxied/p", &[], b"")
            .await
            .unwrap();
        let text = r.text();
        assert!(text.contains("GET /proxied/p HTTP/1.1"), "{text}");
        assert!(text.contains("xff=127.0.0.1"), "{text}");
        assert!(text.contains("proto=https"), "{text}");
        assert!(text.contains("early=-"), "{text}");

        // A miss, then hits from the store without the origin.
        let before = s.hits.load(Ordering::SeqCst);
        for _ in 0..3 {
            let r = h3c::request(&mut send, a, "GET", "/cached/one", &[], b"")
                .await
                .unwrap();
            assert_eq!(r.status, 200);
            assert!(r.text().contains("GET /cached/one"), "{}", r.text());
        }
        assert_eq!(
            s.hits.load(Ordering::SeqCst),
            before + 1,
            "two hits from the store"
        );

        let r = h3c::request(
            &mut send,
            a,
            "PUT",
            "/kv/k1",
            &[("content-length", "5")],
            b"value",
        )
        .await
        .unwrap();
        assert!(
            r.status == 200 || r.status == 201 || r.status == 204,
            "{}",
            r.status
        );
        let r = h3c::request(&mut send, a, "GET", "/kv/k1", &[], b"")
            .await
            .unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "value"));

        let r = h3c::request(&mut send, a, "GET", "/old/x?q=1", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 301, "{}", r.text());
        assert_eq!(r.header("location"), Some("https://leaf.test/new/x?q=1"));
        let r = h3c::request(&mut send, a, "GET", "/healthz", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        // A filter: the second request within the second is limited.
        let r = h3c::request(&mut send, a, "GET", "/limited", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        let r = h3c::request(&mut send, a, "GET", "/limited", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 429);
    });
    conn.close(quinn::VarInt::from_u32(0x100), b"");
    wait_for("the access log", || {
        std::fs::read_to_string(&s.log).is_ok_and(|t| t.lines().count() >= 15)
    });
    let log = std::fs::read_to_string(&s.log).unwrap();
    assert!(
        log.lines()
            .all(|l| l.starts_with("HTTP/3 ") && l.ends_with(" TLSv1.3 leaf.test")),
        "{log}"
    );
    assert!(log.contains("HTTP/3 GET /hello 200"), "{log}");
    assert!(log.contains("HTTP/3 POST /echo/x 200"), "{log}");
    inproc::stop(s.handle);
}

#[test]
fn tcp_responses_advertise_http3_and_metrics_count_it() {
    let s = setup("altsvc", "admin: { address: 127.0.0.1:0 }");
    let port = s.addr.port();
    let want = format!("h3=\":{port}\"; ma=86400");
    // HTTP/1.1 over TLS.
    let cfg = common::tlskit::client_config(&s.pki.ca_der, &["http/1.1"], None);
    let mut t = common::tlskit::connect(s.addr, "leaf.test", &cfg).unwrap();
    let r = common::tlskit::exchange(&mut t, "GET /hello HTTP/1.1\r\nHost: leaf.test\r\n\r\n");
    assert_eq!(r.header("alt-svc"), Some(want.as_str()), "{:?}", r);
    assert_eq!(r.text(), "Hello, World\n");
    // A weir error answer carries it too.
    let r = common::tlskit::exchange(
        &mut t,
        "GET /static/none HTTP/1.1\r\nHost: leaf.test\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.header("alt-svc"), Some(want.as_str()));
    // HTTP/2.
    let out = std::process::Command::new(common::process::WEIR)
        .args(["bench", "--h2", "-n", "1", "--format", "json"])
        .arg(format!("https://127.0.0.1:{port}/hello"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    for _ in 0..3 {
        assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    }
    let admin = s.handle.admin_addr().unwrap();
    let metrics = common::get(admin, "/metrics").text();
    assert!(
        metrics.contains("weir_http3_connections_total{event=\"accepted\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_http3_requests_total 3"), "{metrics}");
    inproc::stop(s.handle);
}

#[test]
fn http2_responses_carry_alt_svc() {
    let s = setup("altsvc-h2", "");
    let port = s.addr.port();
    let cfg = common::tlskit::client_config(&s.pki.ca_der, &["h2"], None);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("leaf.test").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        let (mut client, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = http::Request::get("https://leaf.test/hello")
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers().get("alt-svc").unwrap(),
            &format!("h3=\":{port}\"; ma=86400")
        );
    });
    inproc::stop(s.handle);
}

#[test]
fn the_limits_hold_streams_header_section_and_reset_floods() {
    let s = setup(
        "limits",
        "http3: { max_concurrent_streams: 4, max_field_section_size: 2k, max_resets_per_second: 50 }",
    );
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));

    // A header section past 2 KiB: 431, and the connection serves on.
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let big = "x".repeat(4096);
        let r = h3c::request(
            &mut send,
            "leaf.test",
            "GET",
            "/hello",
            &[("x-big", &big)],
            b"",
        )
        .await
        .unwrap();
        assert_eq!(r.status, 431);
        let r = h3c::request(&mut send, "leaf.test", "GET", "/hello", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);

        // The fifth concurrent stream cannot be opened while four are open (a QUIC limit:
        // no flood to count).
        let mut held = Vec::new();
        for _ in 0..4 {
            let opened = tokio::time::timeout(Duration::from_secs(5), conn.open_bi()).await;
            held.push(opened.expect("four streams open").unwrap());
        }
        let fifth = tokio::time::timeout(Duration::from_millis(500), conn.open_bi()).await;
        assert!(
            fifth.is_err(),
            "a fifth stream opened past max_concurrent_streams: 4"
        );
        // Ending one (reset before its request) lets a new one open.
        let (mut first_send, _first_recv) = held.remove(0);
        first_send.reset(quinn::VarInt::from_u32(0x10c)).unwrap();
        let opened = tokio::time::timeout(Duration::from_secs(5), conn.open_bi()).await;
        assert!(opened.is_ok(), "no stream opened after one was reset");
    });
    conn.close(quinn::VarInt::from_u32(0x100), b"");

    // Streams reset before their request: past 50 a second, H3_EXCESSIVE_LOAD.
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let closed = c.rt.block_on(async {
        let _send = h3c::session(&conn).await.unwrap();
        for _ in 0..400 {
            let Ok(Ok((mut tx, _rx))) =
                tokio::time::timeout(Duration::from_secs(2), conn.open_bi()).await
            else {
                break;
            };
            // Half a frame header, then the reset: the server saw the stream, never a request.
            let _ = tx.write_all(&[0x01]).await;
            let _ = tx.reset(quinn::VarInt::from_u32(0x10c));
            if conn.close_reason().is_some() {
                break;
            }
        }
        tokio::time::timeout(Duration::from_secs(5), conn.closed()).await
    });
    match closed {
        Ok(quinn::ConnectionError::ApplicationClosed(a)) => {
            assert_eq!(a.error_code, quinn::VarInt::from_u32(0x107), "{a:?}")
        }
        other => panic!("the reset flood was not closed with H3_EXCESSIVE_LOAD: {other:?}"),
    }
    // Another connection is served.
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    inproc::stop(s.handle);
}

#[test]
fn early_data_is_off_by_default_and_unsafe_methods_in_it_get_425() {
    // Off: a resumed client is not allowed 0-RTT.
    let s = setup("0rtt-off", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, true));
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    let zero_rtt = c.rt.block_on(async {
        let connecting = c.endpoint.connect(s.addr, "leaf.test").unwrap();
        connecting.into_0rtt().is_ok()
    });
    assert!(!zero_rtt, "0-RTT offered with early_data off");
    inproc::stop(s.handle);

    let s = setup("0rtt-on", "http3: { early_data: true }");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, true));
    // The first connection brings a ticket that allows early data.
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    let (post, get) = c.rt.block_on(async {
        // The ticket arrives after the response: until the client holds it, a connection
        // offers no 0-RTT (and takes no ticket).
        let mut early = None;
        common::until_async(
            "a ticket that allows 0-RTT (early_data on)",
            Duration::from_secs(10),
            || {
                let connecting = c.endpoint.connect(s.addr, "leaf.test").unwrap();
                early = connecting.into_0rtt().ok();
                early.is_some()
            },
        )
        .await;
        let (conn, _accepted) = early.unwrap();
        let mut send = h3c::session(&conn).await.unwrap();
        let mut send2 = send.clone();
        let post = h3c::request(&mut send, "leaf.test", "POST", "/proxied/x", &[], b"data");
        let get = h3c::request(&mut send2, "leaf.test", "GET", "/proxied/y", &[], b"");
        let (post, get) = tokio::join!(post, get);
        (post.unwrap(), get.unwrap())
    });
    assert_eq!(post.status, 425, "{}", post.text());
    assert_eq!(get.status, 200);
    // Whether the GET went out in early data depends on timing; when it did, the origin
    // heard so.
    assert!(
        get.text().contains("early=1") || get.text().contains("early=-"),
        "{}",
        get.text()
    );
    // After the handshake the same POST is served.
    let r = c
        .request(s.addr, "leaf.test", "POST", "/echo/z", &[], b"late")
        .unwrap();
    assert_eq!(r.status, 200);
    inproc::stop(s.handle);
}

#[test]
fn a_reload_under_http3_load_fails_no_request_and_shutdown_says_goodbye() {
    let s = setup("reload", "");
    let url = format!("https://127.0.0.1:{}/hello", s.addr.port());
    let target = weir_loadgen::Target::parse("h3", &url).unwrap();
    let opts = weir_loadgen::Options {
        target,
        connections: 4,
        threads: 1,
        stop: weir_loadgen::options::Stop::After(Duration::from_secs(3)),
        rate: None,
        method: "GET".into(),
        headers: Vec::new(),
        body: bytes::Bytes::new(),
        close: false,
        pipeline: 1,
        timeout: Duration::from_secs(5),
        h2: false,
        h3: true,
        streams: 4,
        tls_resume: false,
    };
    let load = std::thread::spawn(move || weir_loadgen::run(&opts).unwrap());
    for i in 0..4 {
        // paces: a reload every 500 ms while the load runs.
        std::thread::sleep(Duration::from_millis(500));
        // A changed body each time: the new config is in effect for new requests.
        inproc::reload(
            &s.handle,
            &s.yaml.replace("Hello, World\\n", &format!("Hello {i}\\n")),
        );
    }
    let r = load.join().unwrap();
    let e = r.errors();
    assert!(r.stats.responses > 100, "{} responses", r.stats.responses);
    assert_eq!(
        (e.connect, e.read, e.write, e.timeout),
        (0, 0, 0, 0),
        "requests failed across reloads"
    );
    assert_eq!(r.stats.statuses.get(&200).copied(), Some(r.stats.responses));
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").text(), "Hello 3\n");

    // An idle connection hears GOAWAY and a close when the server stops.
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let send = c.rt.block_on(h3c::session(&conn)).unwrap();
    let stopping = std::thread::spawn(move || inproc::stop(s.handle));
    let closed =
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), conn.closed()).await });
    drop(send);
    match closed {
        Ok(quinn::ConnectionError::ApplicationClosed(a)) => {
            assert_eq!(a.error_code, quinn::VarInt::from_u32(0x100), "{a:?}")
        }
        other => panic!("not closed with H3_NO_ERROR at shutdown: {other:?}"),
    }
    stopping.join().unwrap();
}

#[test]
fn quic_config_errors_name_the_key() {
    let pki = Pki::new("h3-errors");
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let tls = format!(
        "tls: {{ certificates: [{{ cert: '{}', key: '{}' }}] }}",
        cert.cert.display(),
        cert.key.display()
    );
    let load = |yaml: &str| {
        weir::runtime::load_str(yaml, std::path::Path::new("."), |_| None)
            .unwrap_err()
            .to_string()
    };
    let cases = [
        (
            "listeners:\n  - address: 127.0.0.1:0\n    quic: true\n    routes: [{ respond: { body: x } }]\n".to_string(),
            "listeners[0].quic",
            "always encrypted",
        ),
        (
            format!("listeners:\n  - address: 127.0.0.1:0\n    quic: true\n    proxy_protocol: {{ trusted: [127.0.0.1] }}\n    {tls}\n    routes: [{{ respond: {{ body: x }} }}]\n"),
            "listeners[0].quic",
            "PROXY protocol",
        ),
        (
            format!("listeners:\n  - address: unix:/tmp/weir-h3-x.sock\n    quic: true\n    {tls}\n    routes: [{{ respond: {{ body: x }} }}]\n"),
            "listeners[0].quic",
            "UDP",
        ),
        (
            format!("listeners:\n  - address: 127.0.0.1:0\n    quic: true\n    tls: {{ protocols: [tls1.2], certificates: [{{ cert: '{}', key: '{}' }}] }}\n    routes: [{{ respond: {{ body: x }} }}]\n", cert.cert.display(), cert.key.display()),
            "listeners[0].quic",
            "TLS 1.3",
        ),
        (
            format!("http3: {{ max_concurrent_streams: 0 }}\nlisteners:\n  - address: 127.0.0.1:0\n    quic: true\n    {tls}\n    routes: [{{ respond: {{ body: x }} }}]\n"),
            "http3.max_concurrent_streams",
            "at least 1",
        ),
        (
            format!("listeners:\n  - address: 127.0.0.1:0\n    quic: true\n    tcp: {{ upstream: u }}\n    {tls}\nupstreams: {{ u: {{ servers: ['127.0.0.1:1'] }} }}\n"),
            "listeners[0].quic",
            "tcp",
        ),
    ];
    for (yaml, key, words) in cases {
        let e = load(&yaml);
        assert!(e.contains(key) && e.contains(words), "{key} / {words}: {e}");
    }
}

#[test]
fn the_h3_example_serves_hello_to_weir_bench_and_gtlsclient() {
    let pki = Pki::new("h3-example");
    let cert = pki.issue("localhost", "localhost", &["localhost"]);
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let port = common::process::free_port();
    let mut cmd = std::process::Command::new(common::process::WEIR);
    cmd.args(["run", "-c", "examples/h3.yaml"])
        .env("WEIR_TLS_CERT", &cert.cert)
        .env("WEIR_TLS_KEY", &cert.key)
        .env("WEIR_LISTEN", format!("127.0.0.1:{port}"))
        .env("WEIR_WORKERS", "2")
        .current_dir(root);
    let (_child, addr) = common::process::spawn_serving(cmd);
    assert_eq!(addr.port(), port);
    let url = format!("https://127.0.0.1:{port}/hello");
    // As the issue writes it: 100 requests, 100 times 200.
    let out = std::process::Command::new(common::process::WEIR)
        .args(["bench", "--h3", "-n", "100", "--format", "hey", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("[200]\t100 responses"), "{text}");
    // /json too, and the TCP side says where HTTP/3 is.
    let c = Client::new(h3c::client_config(&pki.ca_der, false));
    let r = c.get(addr, "localhost", "/json");
    assert_eq!(r.text(), r#"{"message":"Hello, World!"}"#);
    let cfg = common::tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let mut t = common::tlskit::connect(addr, "localhost", &cfg).unwrap();
    let r = common::tlskit::exchange(&mut t, "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(
        r.header("alt-svc"),
        Some(format!("h3=\":{port}\"; ma=86400").as_str())
    );
    // An independent HTTP/3 client: ngtcp2's example client on GnuTLS, with nghttp3.
    if !common::process::have_all_or_skip(&["gtlsclient"], "apt-get install ngtcp2-client") {
        return;
    }
    let out = std::process::Command::new("timeout")
        .args([
            "20",
            "gtlsclient",
            "--exit-on-all-streams-close",
            "127.0.0.1",
        ])
        .arg(port.to_string())
        .arg(&url)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("[:status: 200]"), "{all}");
    assert!(all.contains("body 13 bytes"), "{all}");
    assert!(all.contains("48 65 6c 6c 6f 2c 20 57"), "Hello, W…: {all}");
}

#[test]
fn a_high_handshake_rate_asks_for_retry_and_the_shield_counts_quic_clients() {
    // retry_above: 0 — every new client proves its address first; requests still succeed.
    let s = setup(
        "retry",
        "admin: { address: 127.0.0.1:0 }\nhttp3: { retry_above: 0 }\nshield: { action: close, connections: { concurrent: 2 } }",
    );
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    for _ in 0..3 {
        assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    }
    let admin = s.handle.admin_addr().unwrap();
    let metrics = common::get(admin, "/metrics").text();
    let count = |event: &str| -> u64 {
        let key = format!("weir_http3_connections_total{{event=\"{event}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {metrics}"))
    };
    assert_eq!(count("retry"), 3, "{metrics}");
    assert_eq!(count("accepted"), 3, "{metrics}");

    // Two connections open at once per client: a third gets no answer from the shield.
    let a = c.connect(s.addr, "leaf.test").unwrap();
    let b = c.connect(s.addr, "leaf.test").unwrap();
    let third = c.connect(s.addr, "leaf.test");
    assert!(third.is_err(), "a third QUIC connection past concurrent: 2");
    let metrics = common::get(admin, "/metrics").text();
    assert!(
        metrics.contains("weir_http3_connections_total{event=\"shield\"}"),
        "{metrics}"
    );
    drop((a, b));
    inproc::stop(s.handle);
}

#[test]
fn a_reload_turns_http3_on_and_off_on_a_kept_listener() {
    let s = setup("toggle", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    // An idle connection opened before the reload hears GOAWAY when HTTP/3 goes.
    let held = c.connect(s.addr, "leaf.test").unwrap();
    let _send = c.rt.block_on(h3c::session(&held)).unwrap();
    let without = s.yaml.replace("    quic: true\n", "");
    inproc::reload(&s.handle, &without);
    let closed =
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), held.closed()).await });
    assert!(
        matches!(closed, Ok(quinn::ConnectionError::ApplicationClosed(ref a)) if a.error_code == quinn::VarInt::from_u32(0x100)),
        "{closed:?}"
    );
    // No QUIC any more; HTTP/1.1 over TLS serves, without Alt-Svc.
    let cfg = common::tlskit::client_config(&s.pki.ca_der, &["http/1.1"], None);
    let mut t = common::tlskit::connect(s.addr, "leaf.test", &cfg).unwrap();
    let r = common::tlskit::exchange(&mut t, "GET /hello HTTP/1.1\r\nHost: leaf.test\r\n\r\n");
    assert_eq!((r.status, r.header("alt-svc")), (200, None));
    let refused = c.request(s.addr, "leaf.test", "GET", "/hello", &[], b"");
    assert!(refused.is_err(), "HTTP/3 still served: {refused:?}");
    // And back on, once the endpoint let its port go (its connections drained).
    wait_for("the UDP port to be free", || {
        std::net::UdpSocket::bind(s.addr).is_ok()
    });
    inproc::reload(&s.handle, &s.yaml);
    assert_eq!(c.get(s.addr, "leaf.test", "/hello").status, 200);
    inproc::stop(s.handle);
}

#[test]
fn an_idle_connection_closes_at_the_keepalive_timeout_and_frees_its_slot() {
    let s = setup(
        "idle",
        "admin: { address: 127.0.0.1:0 }\ntimeouts: { keepalive: 1s }",
    );
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let t0 = Instant::now();
    let closed = c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let r = h3c::request(&mut send, "leaf.test", "GET", "/hello", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        tokio::time::timeout(Duration::from_secs(10), conn.closed()).await
    });
    let waited = t0.elapsed();
    // weir's idle timer (GOAWAY, then a close) or QUIC's idle timeout, whichever comes first.
    assert!(
        matches!(closed, Ok(quinn::ConnectionError::TimedOut))
            || matches!(closed, Ok(quinn::ConnectionError::ApplicationClosed(ref a)) if a.error_code == quinn::VarInt::from_u32(0x100)),
        "{closed:?}"
    );
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
    // The worker's slot is given back: the open-connections gauge returns to the scrape's own
    // connection.
    let admin = s.handle.admin_addr().unwrap();
    common::until_value(
        "the QUIC connection's slot freed",
        Duration::from_secs(10),
        || {
            let m = common::get(admin, "/metrics").text();
            m.lines()
                .find(|l| l.starts_with("weir_connections_open "))
                .unwrap_or("")
                .to_string()
        },
        |last| last == "weir_connections_open 1",
    );
    inproc::stop(s.handle);
}

#[test]
fn a_body_that_differs_from_its_content_length_is_refused_not_forwarded_whole() {
    let s = setup("length", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let before = s.hits.load(Ordering::SeqCst);
    // Shorter than announced: the origin must not wait for the rest, nor get a request whole.
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/short",
        &[("content-length", "10")],
        b"abc",
    );
    // Malformed (RFC 9114 §4.1.2): a stream error, H3_MESSAGE_ERROR (h3_messages.rs).
    assert!(r.is_err(), "answered: {r:?}");
    // Longer than announced: nothing past the length reaches the origin as a request.
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/long",
        &[("content-length", "2")],
        b"abcdef",
    );
    assert!(r.is_err(), "answered: {r:?}");
    // Exact: served.
    let r = c
        .request(
            s.addr,
            "leaf.test",
            "POST",
            "/echo/ok",
            &[("content-length", "3")],
            b"abc",
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.text().ends_with("abc"), "{}", r.text());
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        before,
        "the origin answered a malformed request"
    );
    inproc::stop(s.handle);
}

/// A QUIC variable-length integer read from `r`.
async fn read_varint(r: &mut quinn::RecvStream) -> Option<u64> {
    let mut first = [0u8; 1];
    r.read_exact(&mut first).await.ok()?;
    let len = 1usize << (first[0] >> 6);
    let mut rest = [0u8; 7];
    r.read_exact(&mut rest[..len - 1]).await.ok()?;
    let mut v = u64::from(first[0] & 0x3f);
    for b in &rest[..len - 1] {
        v = (v << 8) | u64::from(*b);
    }
    Some(v)
}

/// The id of the first GOAWAY frame on the server's control stream (its other unidirectional
/// streams, QPACK's, are skipped).
async fn goaway_id(conn: quinn::Connection) -> Option<u64> {
    loop {
        let mut r = conn.accept_uni().await.ok()?;
        if read_varint(&mut r).await? != 0 {
            continue;
        }
        loop {
            let ty = read_varint(&mut r).await?;
            let len = read_varint(&mut r).await?;
            if ty == 0x07 {
                return read_varint(&mut r).await;
            }
            let mut skip = vec![0u8; len as usize];
            r.read_exact(&mut skip).await.ok()?;
        }
    }
}

/// A GET for `path` as an HTTP/3 HEADERS frame, QPACK-encoded from the static table only.
fn raw_get(authority: &str, path: &str) -> Vec<u8> {
    // Required Insert Count 0, Delta Base 0; :method GET (17), :scheme https (23); :authority
    // (0) and :path (1) as literals with a static name reference.
    let mut block = vec![0x00, 0x00, 0xC0 | 17, 0xC0 | 23];
    for (index, value) in [(0u8, authority), (1, path)] {
        block.push(0x50 | index);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let mut frame = vec![0x01, block.len() as u8];
    frame.extend_from_slice(&block);
    frame
}

/// Issue 52: at shutdown, a complete request waiting on a 2 s origin is answered (HTTP/3 used
/// to close 1.7 s later with no answer), the GOAWAY names the first stream not processed, and a
/// request opened on that stream anyway is refused with H3_REQUEST_REJECTED and never reaches
/// the origin (a client retries it elsewhere: a POST is never run twice).
#[test]
fn shutdown_finishes_requests_in_flight_and_refuses_streams_past_the_goaway() {
    let s = setup("drain", "timeouts: { shutdown: 10s }");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let hits = s.hits.clone();
    let handle = s.handle;
    let started = Instant::now();
    let (slow, goaway, rejected, stopping) = c.rt.block_on(async {
        // The client's control-stream driver is never polled: the server's GOAWAY is read
        // here, and the client goes on opening a stream past it, as a racing client would.
        let (_driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .unwrap();
        let goaway = tokio::spawn(goaway_id(conn.clone()));
        let slow = tokio::spawn(async move {
            h3c::request(&mut send, "leaf.test", "GET", "/proxied/slow", &[], b"").await
        });
        common::until_async(
            "the slow request reached the origin",
            Duration::from_secs(10),
            || hits.load(Ordering::SeqCst) > 0,
        )
        .await;
        let stopping = std::thread::spawn(move || inproc::stop(handle));
        let id = tokio::time::timeout(Duration::from_secs(5), goaway)
            .await
            .expect("a GOAWAY within 5 s")
            .unwrap();
        let (mut tx, mut rx) = conn.open_bi().await.unwrap();
        let sent_on = tx.id().index() * 4;
        let _ = tx.write_all(&raw_get("leaf.test", "/proxied/again")).await;
        let _ = tx.finish();
        let mut buf = [0u8; 64];
        let rejected = match tokio::time::timeout(Duration::from_secs(5), rx.read(&mut buf)).await {
            Ok(Err(quinn::ReadError::Reset(code))) => Some((sent_on, code.into_inner())),
            other => panic!("stream {sent_on} past the GOAWAY: {other:?}"),
        };
        let slow = slow.await.unwrap();
        (slow, id, rejected, stopping)
    });
    let slow = slow.expect("the request in flight is answered");
    assert_eq!(slow.status, 200);
    assert!(slow.text().contains("GET /proxied/slow"), "{}", slow.text());
    assert_eq!(
        goaway,
        Some(4),
        "GOAWAY names stream 4, the first not processed"
    );
    assert_eq!(rejected, Some((4, 0x10B)), "H3_REQUEST_REJECTED");
    assert_eq!(
        s.hits.load(Ordering::SeqCst),
        1,
        "the refused request never ran"
    );
    stopping.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Issue 52: a client that migrates its connection (QUIC, RFC 9000 §9) is judged by the address
/// it has now: `match.client` and `$remote_addr` follow it from 127.0.0.1 to 127.0.0.2 on the
/// same connection.
#[test]
fn a_migrated_connection_is_judged_by_its_current_address() {
    let s = setup("migrate", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let r = h3c::request(&mut send, "leaf.test", "GET", "/whoami", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.text(), "allowed 127.0.0.1");
        let moved = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
        c.endpoint.rebind(moved).unwrap();
        // The server learns the new path from the next packets: ask until it answers from it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = h3c::request(&mut send, "leaf.test", "GET", "/whoami", &[], b"")
                .await
                .unwrap();
            if r.text() == "other 127.0.0.2" {
                break;
            }
            assert_eq!(r.text(), "allowed 127.0.0.1", "one path or the other");
            assert!(Instant::now() < deadline, "never seen from 127.0.0.2");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    inproc::stop(s.handle);
}
