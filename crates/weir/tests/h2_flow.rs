//! HTTP/2 frames weir owes the client leave without waiting for the client to send again
//! (issue 18, item 3): a PING on an idle connection, the SETTINGS ACK, the WINDOW_UPDATEs that
//! let large uploads go on, and downloads through a small client window; over h2c and TLS.
//!
//! Before the fix the write-gathering layer under `h2` held every frame queued after its last
//! read until the client's next bytes arrived: a PING on an idle connection was never answered
//! and uploads stalled on a WINDOW_UPDATE until the body timeout.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::h2raw::{frame, preface, until, ACK, PING, SETTINGS};
use common::tlskit::{self, Pki};
use common::{start_config, TestServer};

struct Setup {
    server: TestServer,
    tls_addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    big: Vec<u8>,
    _pki: Pki,
    _origin: common::origin::Origin,
}

/// h2c and TLS listeners with a proxied route to an origin that answers with the length of
/// the body it read, a static route with a 3 MB file, and a cached route with a 2 MB object.
fn setup(tag: &str) -> Setup {
    let pki = Pki::new(tag);
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let origin_big: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let ob = origin_big.clone();
    let origin = common::origin::http_origin(move |req| {
        if req.line.starts_with("GET /cached/") {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n",
                ob.len()
            )
            .into_bytes();
            r.extend_from_slice(&ob);
            return r;
        }
        common::origin::ok(&format!("got {}", req.body.len()))
    });
    let root = std::env::temp_dir().join(format!("weir-h2flow-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let routes = format!(
        r#"
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{}' }}
      - match: {{ path_prefix: /cached }}
        proxy: {{ upstream: o }}
        cache: {{ zone: z }}
      - proxy: {{ upstream: o }}
"#,
        root.display()
    );
    let yaml = format!(
        "workers: 1\ncache_zones: {{ z: {{ max_size: 32m }} }}\nupstreams: {{ o: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    h2c: true\n    routes:\n{routes}\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n{routes}\n",
        origin.addr,
        cert.cert.display(),
        cert.key.display()
    );
    let server = start_config(&yaml);
    let tls_addr = server.handle.as_ref().unwrap().local_addrs()[1];
    let tls = tlskit::client_config(&pki.ca_der, &["h2"], None);
    Setup {
        server,
        tls_addr,
        tls,
        big,
        _pki: pki,
        _origin: origin,
    }
}

/// How long the server takes to ACK a SETTINGS and then, after `idle`, a PING.
fn acks(s: &mut (impl Read + Write), idle: Duration) -> (Duration, Duration) {
    let t = Instant::now();
    preface(s);
    until(s, SETTINGS, ACK).expect("SETTINGS ACK");
    let settings = t.elapsed();
    // paces: the connection idles `idle` before the PING.
    std::thread::sleep(idle);
    let t = Instant::now();
    s.write_all(&frame(PING, 0, 0, b"12345678")).unwrap();
    s.flush().unwrap();
    let payload = until(s, PING, ACK).expect("PING ACK");
    assert_eq!(payload, b"12345678");
    (settings, t.elapsed())
}

#[test]
fn settings_and_ping_on_an_idle_connection_are_answered_at_once() {
    let s = setup("acks");
    let limit = Duration::from_millis(50);
    let mut plain = common::connect(s.server.addr);
    let (settings, ping) = acks(&mut plain, Duration::from_millis(300));
    assert!(
        settings < limit && ping < limit,
        "h2c: {settings:?} {ping:?}"
    );
    let mut tls = tlskit::connect(s.tls_addr, "leaf.test", &s.tls).unwrap();
    tls.get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (settings, ping) = acks(&mut tls, Duration::from_millis(300));
    assert!(
        settings < limit && ping < limit,
        "TLS: {settings:?} {ping:?}"
    );
}

type Client = h2::client::SendRequest<Bytes>;

async fn connect(s: &Setup, tls: bool, window: Option<u32>) -> Client {
    let addr = if tls { s.tls_addr } else { s.server.addr };
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut b = h2::client::Builder::new();
    if let Some(w) = window {
        b.initial_window_size(w).initial_connection_window_size(w);
    }
    let client = if tls {
        let name = rustls::pki_types::ServerName::try_from("leaf.test").unwrap();
        let io = tokio_rustls::TlsConnector::from(s.tls.clone())
            .connect(name, tcp)
            .await
            .unwrap();
        let (client, conn) = b.handshake(io).await.unwrap();
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        client
    } else {
        let (client, conn) = b.handshake(tcp).await.unwrap();
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        client
    };
    client
}

/// Sends `body` (in 16 KiB frames, as the window allows) and reads the whole response.
async fn exchange(client: Client, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://leaf.test{path}"))
        .body(())
        .unwrap();
    let mut c = client.ready().await.unwrap();
    let (resp, mut stream) = c.send_request(req, body.is_empty()).unwrap();
    let mut rest = Bytes::copy_from_slice(body);
    while !rest.is_empty() {
        stream.reserve_capacity(rest.len().min(16384));
        let n = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .unwrap()
            .unwrap();
        let piece = rest.split_to(n.min(rest.len()));
        stream.send_data(piece, rest.is_empty()).unwrap();
    }
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut recv = resp.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    (status, out)
}

/// Runs `f` on a current-thread runtime with a local task set, within `limit`.
fn run<F: std::future::Future>(limit: Duration, f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local
        .block_on(&rt, async { tokio::time::timeout(limit, f).await })
        .expect("hung")
}

#[test]
fn fifty_concurrent_one_megabyte_uploads_never_hang() {
    let s = setup("uploads");
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 241) as u8).collect();
    for tls in [false, true] {
        let done = run(Duration::from_secs(30), async {
            let mut tasks = Vec::new();
            for _ in 0..50 {
                let client = connect(&s, tls, None).await;
                let body = body.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    exchange(client, "POST", "/upload", &body).await
                }));
            }
            let mut ok = 0;
            for t in tasks {
                let (status, got) = t.await.unwrap();
                assert_eq!((status, &got[..]), (200, &b"got 1000000"[..]));
                ok += 1;
            }
            ok
        });
        assert_eq!(done, 50, "tls={tls}");
    }
}

#[test]
fn large_downloads_through_a_small_client_window() {
    let s = setup("downloads");
    for tls in [false, true] {
        run(Duration::from_secs(30), async {
            let client = connect(&s, tls, Some(4096)).await;
            let (status, got) = exchange(client.clone(), "GET", "/static/big.bin", b"").await;
            assert_eq!(status, 200);
            assert!(got == s.big, "static: {} bytes", got.len());
            for _ in 0..2 {
                // A miss, then a hit.
                let (status, got) = exchange(client.clone(), "GET", "/cached/x", b"").await;
                assert_eq!((status, got.len()), (200, 2_000_000), "tls={tls}");
            }
        });
    }
}
