//! HTTP/2 over real sockets: h2 over TLS (ALPN) and h2c with prior knowledge, the same
//! behaviours as HTTP/1.1 (respond, echo with a body, static files, the proxy, cache hits), the
//! abuse limits (rapid reset, PING/SETTINGS/empty-frame floods, concurrent streams, header list
//! size) closing with GOAWAY while other connections carry on, and `Upgrade: h2c` never relayed.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::tlskit::{self, Pki};
use common::{start_config, TestServer};

/// Runs `f` on a current-thread runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

type Client = h2::client::SendRequest<Bytes>;

async fn h2c(addr: SocketAddr) -> Client {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

async fn h2_tls(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> Client {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("leaf.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A response: status, fields, body.
struct Got {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

async fn send(client: &mut Client, method: &str, uri: &str, body: &[u8]) -> Got {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .unwrap();
    let mut c = client.clone().ready().await.unwrap();
    let (resp, mut stream) = c.send_request(req, body.is_empty()).unwrap();
    if !body.is_empty() {
        stream
            .send_data(Bytes::copy_from_slice(body), true)
            .unwrap();
    }
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut recv = resp.into_body();
    let mut out = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        out.extend_from_slice(&chunk);
    }
    let _ = client;
    Got {
        status,
        headers,
        body: out,
    }
}

/// A server with `h2c: true` on a plain listener, and a TLS listener offering h2, both with
/// routes for each action; an origin that counts its requests.
struct Setup {
    server: TestServer,
    tls_addr: SocketAddr,
    pki: Pki,
    origin_hits: Arc<AtomicUsize>,
    big: Vec<u8>,
    _origin: common::origin::Origin,
}

fn setup(tag: &str, extra: &str) -> Setup {
    let pki = Pki::new(tag);
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let origin = common::origin::http_origin(move |req| {
        counted.fetch_add(1, Ordering::SeqCst);
        let body = format!(
            "origin saw {} upgrade={} settings={} proto={}",
            req.line.trim_end(),
            req.header("upgrade").unwrap_or("-"),
            req.header("http2-settings").unwrap_or("-"),
            req.header("x-forwarded-proto").unwrap_or("-"),
        );
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let root = std::env::temp_dir().join(format!("weir-h2-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..1_500_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    std::fs::write(root.join("small.txt"), "small file\n").unwrap();
    let routes = format!(
        r#"
      - match: {{ path: /hello }}
        respond: {{ body: "Hello, World\n" }}
      - match: {{ path_prefix: /echo }}
        echo: {{}}
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{}' }}
      - match: {{ path_prefix: /cached }}
        proxy: {{ upstream: o }}
        cache: {{ zone: z }}
      - match: {{ path_prefix: /proxied }}
        proxy: {{ upstream: o }}
"#,
        root.display()
    );
    let yaml = format!(
        "workers: 1\n{extra}\nadmin: {{ address: 127.0.0.1:0 }}\ncache_zones: {{ z: {{ max_size: 16m }} }}\nupstreams: {{ o: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    h2c: true\n    routes:\n{routes}\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n{routes}\n",
        origin.addr,
        cert.cert.display(),
        cert.key.display()
    );
    let server = start_config(&yaml);
    let tls_addr = server.handle.as_ref().unwrap().local_addrs()[1];
    Setup {
        server,
        tls_addr,
        pki,
        origin_hits: hits,
        big,
        _origin: origin,
    }
}

#[test]
fn every_action_answers_the_same_over_h2_h2c_and_http1() {
    let s = setup("same", "");
    let addr = s.server.addr;
    let cfg = tlskit::client_config(&s.pki.ca_der, &["h2"], None);
    block_on(async {
        let mut plain = h2c(addr).await;
        let mut tls = h2_tls(s.tls_addr, cfg).await;
        for (which, client, scheme) in [("h2c", &mut plain, "http"), ("h2", &mut tls, "https")] {
            let at = |path: &str| format!("{scheme}://leaf.test{path}");
            let r = send(client, "GET", &at("/hello"), b"").await;
            assert_eq!(
                (r.status, &r.body[..]),
                (200, &b"Hello, World\n"[..]),
                "{which}"
            );
            assert!(r.headers.get("connection").is_none());

            let r = send(client, "POST", &at("/echo/x?y=1"), b"a request body").await;
            let text = String::from_utf8_lossy(&r.body).to_string();
            assert_eq!(r.status, 200, "{which}");
            assert!(text.contains("POST /echo/x?y=1"), "{which}: {text}");
            assert!(text.ends_with("a request body"), "{which}: {text}");

            let r = send(client, "GET", &at("/static/small.txt"), b"").await;
            assert_eq!((r.status, &r.body[..]), (200, &b"small file\n"[..]));
            // More than the stream window: sent as the client's window opens.
            let r = send(client, "GET", &at("/static/big.bin"), b"").await;
            assert!(r.status == 200 && r.body == s.big, "{which}: big file");
            let r = send(client, "GET", &at("/static/none"), b"").await;
            assert_eq!(r.status, 404);

            let r = send(client, "GET", &at("/proxied/p"), b"").await;
            let text = String::from_utf8_lossy(&r.body).to_string();
            assert!(text.contains(&format!("proto={scheme}")), "{which}: {text}");

            // A miss, then hits from the store without the origin.
            let path = format!("/cached/{which}");
            let before = s.origin_hits.load(Ordering::SeqCst);
            for _ in 0..3 {
                let r = send(client, "GET", &at(&path), b"").await;
                assert_eq!(r.status, 200);
                assert!(String::from_utf8_lossy(&r.body).contains(&path));
            }
            assert_eq!(s.origin_hits.load(Ordering::SeqCst), before + 1, "{which}");
        }
        // Many streams at once on one connection.
        let mut waits = Vec::new();
        for i in 0..50 {
            let mut c = plain.clone();
            waits.push(tokio::spawn(async move {
                send(&mut c, "GET", &format!("http://leaf.test/echo/{i}"), b"").await
            }));
        }
        for (i, w) in waits.into_iter().enumerate() {
            let r = w.await.unwrap();
            assert!(String::from_utf8_lossy(&r.body).contains(&format!("/echo/{i} ")));
        }
    });
    // HTTP/1.1 on the h2c listener still works.
    let r = common::get(addr, "/hello");
    assert_eq!(r.text(), "Hello, World\n");
}

#[test]
fn upgrade_h2c_is_never_relayed_upstream() {
    let s = setup("upgrade", "");
    let mut c = s.server.connect();
    let r = common::roundtrip(
        &mut c,
        b"GET /proxied/u HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    );
    assert_eq!(r.status, 200, "answered over HTTP/1.1, not switched");
    assert!(r.text().contains("upgrade=- settings=-"), "{}", r.text());
    // Even when `Connection` does not list them.
    let r = common::roundtrip(
        &mut c,
        b"GET /proxied/v HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    );
    assert!(r.text().contains("upgrade=- settings=-"), "{}", r.text());
}

// ---- abuse, over raw frames ----

use common::h2raw::{frame, raw, DATA, GOAWAY, HEADERS, PING, RST_STREAM, SETTINGS};
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A HEADERS block for `GET http://a/` (HPACK: indexed :method GET, :scheme http, :path /,
/// and :authority `a` as a literal), padded with a field of `extra` bytes.
fn get_block(extra: usize) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x84, 0x01, 0x01, b'a'];
    if extra > 0 {
        // Literal without indexing, new name "x-big", value of `extra` bytes (length as an
        // HPACK integer with a 7-bit prefix).
        b.extend_from_slice(&[0x00, 0x05]);
        b.extend_from_slice(b"x-big");
        let mut n = extra;
        if n < 127 {
            b.push(n as u8);
        } else {
            b.push(127);
            n -= 127;
            while n >= 128 {
                b.push((n % 128) as u8 | 0x80);
                n /= 128;
            }
            b.push(n as u8);
        }
        b.extend(std::iter::repeat_n(b'x', extra));
    }
    b
}

/// Reads frames until a GOAWAY (its error code) or the end of the connection (`None`).
fn goaway(s: &mut std::net::TcpStream) -> Option<u32> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 9];
    loop {
        if s.read_exact(&mut head).is_err() {
            return None;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if s.read_exact(&mut payload).is_err() {
            return None;
        }
        if head[3] == GOAWAY {
            return Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
        }
    }
}

/// Writes as much of `bytes` as the server takes (it may stop reading and close midway).
fn flood(s: &mut std::net::TcpStream, bytes: &[u8]) {
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(bytes);
}

/// Whether a fresh connection is still served.
fn others_fine(addr: SocketAddr) {
    let got = block_on(async {
        let mut c = h2c(addr).await;
        send(&mut c, "GET", "http://a/hello", b"").await
    });
    assert_eq!(got.status, 200);
}

#[test]
fn floods_and_rapid_reset_close_with_goaway_and_spare_other_connections() {
    let s = setup("abuse", "http2: { max_control_frames_per_second: 200 }");
    let addr = s.server.addr;
    // Its own runtime, kept for the whole test: a runtime's end would end the connection.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut bystander = rt.block_on(h2c(addr));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "ping flood",
            (0..5000).flat_map(|_| frame(PING, 0, 0, &[0; 8])).collect(),
        ),
        (
            "settings flood",
            (0..5000).flat_map(|_| frame(SETTINGS, 0, 0, &[])).collect(),
        ),
        (
            "empty data frames",
            frame(HEADERS, 0x4, 1, &get_block(0))
                .into_iter()
                .chain((0..5000).flat_map(|_| frame(DATA, 0, 1, &[])))
                .collect(),
        ),
        (
            "rapid reset",
            (0..5000u32)
                .flat_map(|i| {
                    let id = 2 * i + 1;
                    let mut f = frame(HEADERS, 0x5, id, &get_block(0));
                    f.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
                    f
                })
                .collect(),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = raw(addr);
        flood(&mut c, &bytes);
        assert_eq!(goaway(&mut c), Some(ENHANCE_YOUR_CALM), "{what}");
        others_fine(addr);
    }
    // The connection opened before the floods still works.
    let got = rt.block_on(send(&mut bystander, "GET", "http://a/hello", b""));
    assert_eq!(got.status, 200);
    // The closes are counted.
    let m = weir_metrics(&s);
    assert!(m.contains("weir_http2_abuse_closes_total 4"), "{m}");
}

fn weir_metrics(s: &Setup) -> String {
    let admin = s.server.handle.as_ref().unwrap().admin_addr().unwrap();
    common::get(admin, "/metrics").text()
}

#[test]
fn stream_and_header_limits_are_advertised_and_enforced() {
    let s = setup(
        "limits",
        "http2: { max_concurrent_streams: 4, max_header_list_size: 4k }",
    );
    let addr = s.server.addr;
    block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.unwrap();
        // The server's SETTINGS arrived with the handshake's first exchange.
        let _ = send(&mut client, "GET", "http://a/hello", b"").await;
        assert_eq!(client.current_max_send_streams(), 4);
    });
    // A header list over 4 KiB: refused (431 or a reset), and the connection lives on.
    let mut c = raw(addr);
    c.write_all(&frame(HEADERS, 0x5, 1, &get_block(8000)))
        .unwrap();
    c.write_all(&frame(HEADERS, 0x5, 3, &get_block(0))).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0u8; 9];
    let mut seen = Vec::new();
    while seen.len() < 10 {
        if c.read_exact(&mut head).is_err() {
            break;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        c.read_exact(&mut payload).unwrap();
        let stream = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
        seen.push((head[3], stream));
        if head[3] == DATA && stream == 3 && head[4] & 1 == 1 {
            break;
        }
    }
    assert!(
        seen.iter()
            .any(|&(k, id)| id == 1 && (k == HEADERS || k == RST_STREAM)),
        "stream 1 refused: {seen:?}"
    );
    assert!(
        seen.iter().any(|&(k, id)| id == 3 && k == DATA),
        "stream 3 answered: {seen:?}"
    );
    others_fine(addr);
}
