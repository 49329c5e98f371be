//! Edges of the server-side TLS stream on rustls' unbuffered API (`tls/stream.rs`), the server
//! name read from the ClientHello by our own parser (`tls/hello.rs`), and parked idle TLS
//! connections (`server/park.rs`), probed over real sockets on 127.0.0.1: ClientHellos framed
//! in odd ways (one oversized record, records of a byte, a byte per segment, a retry), requests
//! split and pipelined across records, large uploads and downloads to slow readers, key updates,
//! close_notify and abrupt ends mid-request, garbage after the handshake, HTTP/2 with many
//! streams and small windows, WebSocket and TCP relays over TLS, and parked connections woken
//! by partial records, key updates, garbage and pipelined requests.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::origin::{self, Origin};
use common::parked::{metric, wait_parked};
use common::tlskit::{self, Pki, TlsStream};
use common::{start_config, until, TestServer};
use rustls::pki_types::ServerName;

const WHO: &str = "GET /who HTTP/1.1\r\nHost: x\r\n\r\n";
const BIG: usize = 4 << 20;

/// A TLS server with SNI routes, a static root holding a 4 MiB file, an upstream that answers
/// with the length and checksum of the body it got, a WebSocket echo upstream, and an admin
/// listener for its metrics.
struct Env {
    pki: Pki,
    srv: TestServer,
    admin: SocketAddr,
    big: Vec<u8>,
    _root: PathBuf,
    _origins: (Origin, Origin),
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100000001b3)
    })
}

fn env(tag: &str, timeouts: &str) -> Env {
    let pki = Pki::new(&format!("tse-{tag}"));
    let a = pki.issue("a", "a.example.test", &["a.example.test", "b.example.test"]);
    let root = pki.dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..BIG as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let sums = origin::http_origin(|req| {
        origin::ok(&format!("len={} sum={:x}", req.body.len(), fnv(&req.body)))
    });
    let ws = origin::origin(|conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = std::io::BufReader::new(conn);
        let Some(_) = origin::read_request(&mut r) else {
            return;
        };
        w.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )
        .unwrap();
        let mut buf = vec![0u8; 65536];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if w.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let srv = start_config(&format!(
        r#"workers: 1
timeouts: {timeouts}
limits: {{ max_body_bytes: 64m }}
admin: {{ address: 127.0.0.1:0 }}
upstreams:
  sums: {{ servers: ["{}"] }}
  ws: {{ servers: ["{}"] }}
listeners:
  - address: 127.0.0.1:0
    tls:
      certificates: [{{ cert: '{}', key: '{}' }}]
    routes:
      - match: {{ path: /who, sni: a.example.test }}
        respond: {{ body: "route for a\n" }}
      - match: {{ path: /who, sni: b.example.test }}
        respond: {{ body: "route for b\n" }}
      - match: {{ path: /who }}
        respond: {{ body: "anyone\n" }}
      - match: {{ path_prefix: /static/ }}
        static: {{ root: '{}' }}
      - match: {{ path: /ws }}
        proxy: {{ upstream: ws }}
      - match: {{ path_prefix: /up }}
        proxy: {{ upstream: sums }}
"#,
        sums.addr,
        ws.addr,
        a.cert.display(),
        a.key.display(),
        root.display(),
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    Env {
        pki,
        srv,
        admin,
        big,
        _root: root,
        _origins: (sums, ws),
    }
}

const FAST: &str = "{ header: 1s, keepalive: 3s }";

impl Env {
    fn h1(&self) -> Arc<rustls::ClientConfig> {
        tlskit::client_config(&self.pki.ca_der, &["http/1.1"], None)
    }

    fn tls12(&self) -> Arc<rustls::ClientConfig> {
        tlskit::tls12_config(&self.pki.ca_der)
    }

    fn connect(&self, sni: &str) -> TlsStream {
        tlskit::connect(self.srv.addr, sni, &self.h1()).unwrap()
    }

    /// Client connections open, the admin scrape asking included.
    fn open(&self) -> f64 {
        metric(self.admin, "weir_connections_open ")
    }
}

// ---------------------------------------------------------------------------------------------
// Records on the wire.

/// The records in `b`: (content type, payload).
fn records(b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = b;
    while rest.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        out.push((rest[0], rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    assert!(rest.is_empty(), "whole records");
    out
}

/// `payload` as records of type `typ` of at most `chunk` bytes each.
fn frame(typ: u8, payload: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in payload.chunks(chunk) {
        out.extend([typ, 3, 1]);
        out.extend((part.len() as u16).to_be_bytes());
        out.extend(part);
    }
    out
}

/// A client whose first flight (the ClientHello) is re-framed by `reframe` and sent as the
/// writes it returns (`gap` apart); the rest of the handshake runs as usual. Re-framing does not
/// change the handshake transcript, which covers messages, not records.
fn connect_framed(
    addr: SocketAddr,
    sni: &str,
    cfg: &Arc<rustls::ClientConfig>,
    reframe: impl FnOnce(&[u8]) -> Vec<Vec<u8>>,
    gap: Duration,
) -> std::io::Result<TlsStream> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
    let mut first = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut first).unwrap();
    }
    let mut s = rustls::StreamOwned::new(conn, tcp);
    for w in reframe(&first) {
        s.sock.write_all(&w)?;
        if !gap.is_zero() {
            // paces: the records of the first flight `gap` apart.
            std::thread::sleep(gap);
        }
    }
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// The handshake bytes of a first flight, joined.
fn hello_payload(first: &[u8]) -> Vec<u8> {
    records(first)
        .into_iter()
        .inspect(|(t, _)| assert_eq!(*t, 22))
        .flat_map(|(_, p)| p)
        .collect()
}

/// Encrypts `data` as the client's records (one `write` each), returned unsent.
fn seal(s: &mut TlsStream, data: &[u8]) -> Vec<u8> {
    s.conn.writer().write_all(data).unwrap();
    let mut out = Vec::new();
    while s.conn.wants_write() {
        s.conn.write_tls(&mut out).unwrap();
    }
    out
}

fn who(s: &mut TlsStream) -> String {
    tlskit::exchange(s, WHO).text()
}

// ---------------------------------------------------------------------------------------------
// 1. The server name.

/// A client config offering ALPN `http/1.1` and `extra` made-up protocols of 250 bytes, which
/// make its ClientHello larger.
fn padded_config(env: &Env, extra: usize) -> Arc<rustls::ClientConfig> {
    let filler: Vec<String> = (0..extra)
        .map(|i| format!("{i:03}{}", "x".repeat(247)))
        .collect();
    let mut alpn: Vec<&str> = vec!["http/1.1"];
    alpn.extend(filler.iter().map(String::as_str));
    tlskit::client_config(&env.pki.ca_der, &alpn, None)
}

fn hello_len(cfg: &Arc<rustls::ClientConfig>) -> usize {
    let name = ServerName::try_from("a.example.test").unwrap();
    let mut conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
    let mut first = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut first).unwrap();
    }
    hello_payload(&first).len()
}

/// A ClientHello of about 17 KiB sent in ONE plaintext record (rustls accepts records up to
/// 18,431 bytes before encryption is on): rustls reads its server name and picks the
/// certificate by it, and weir must record the same name for routes.
#[test]
fn sni_of_a_hello_in_one_oversized_record_reaches_routes() {
    let env = env("bigrecord", FAST);
    let cfg = (60..74)
        .map(|n| padded_config(&env, n))
        .find(|c| (16_800..18_300).contains(&hello_len(c)))
        .expect("a ClientHello of 16.8 to 18.3 KB");
    let one_record = |first: &[u8]| vec![frame(22, &hello_payload(first), 1 << 16)];
    // Control: the same hello in rustls' own records (16 KiB and the rest).
    let mut c = connect_framed(
        env.srv.addr,
        "a.example.test",
        &cfg,
        |f| vec![f.to_vec()],
        Duration::ZERO,
    )
    .unwrap();
    assert_eq!(who(&mut c), "route for a\n", "two records");
    let mut c = connect_framed(
        env.srv.addr,
        "a.example.test",
        &cfg,
        one_record,
        Duration::ZERO,
    )
    .expect("rustls takes a ClientHello record under 18,432 bytes");
    assert_eq!(
        who(&mut c),
        "route for a\n",
        "the name rustls chose the certificate by is the name routes see"
    );
}

/// A ClientHello split into records of one to seven bytes (the message header itself split),
/// and one sent a byte per segment: joined as rustls joins them.
#[test]
fn sni_of_a_hello_split_into_tiny_records_and_segments() {
    let env = env("tiny", FAST);
    let cfg = env.h1();
    for chunk in [1usize, 3, 7] {
        let mut c = connect_framed(
            env.srv.addr,
            "a.example.test",
            &cfg,
            |f| vec![frame(22, &hello_payload(f), chunk)],
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(who(&mut c), "route for a\n", "records of {chunk} bytes");
    }
    let mut c = connect_framed(
        env.srv.addr,
        "b.example.test",
        &cfg,
        |f| f.iter().map(|b| vec![*b]).collect(),
        Duration::from_micros(300),
    )
    .unwrap();
    assert_eq!(who(&mut c), "route for b\n", "a byte per segment");
    // Records of a byte, each its own segment.
    let mut c = connect_framed(
        env.srv.addr,
        "a.example.test",
        &cfg,
        |f| {
            frame(22, &hello_payload(f), 1)
                .chunks(6)
                .map(<[u8]>::to_vec)
                .collect()
        },
        Duration::from_micros(200),
    )
    .unwrap();
    assert_eq!(
        who(&mut c),
        "route for a\n",
        "a one-byte record per segment"
    );
}

/// A ClientHello of over 16 KiB in rustls' own framing (two records), and one over 32 KiB.
#[test]
fn sni_of_hellos_over_16k_and_32k() {
    let env = env("bighello", FAST);
    for extra in [70usize, 140] {
        let cfg = padded_config(&env, extra);
        assert!(hello_len(&cfg) > extra * 250);
        let mut c = tlskit::connect(env.srv.addr, "b.example.test", &cfg).unwrap();
        assert_eq!(who(&mut c), "route for b\n", "{extra} padding protocols");
    }
}

/// A HelloRetryRequest (the client's first key share is for a group the server lacks): the
/// second ClientHello keeps the name, and routes see it.
#[test]
fn sni_survives_a_hello_retry_request() {
    let env = env("hrr", FAST);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(env.pki.ca_der.clone()).unwrap();
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![
        rustls::crypto::aws_lc_rs::kx_group::MLKEM1024,
        rustls::crypto::aws_lc_rs::kx_group::X25519,
    ];
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let cfg = Arc::new(cfg);
    let mut c = tlskit::connect(env.srv.addr, "a.example.test", &cfg).unwrap();
    assert_eq!(
        c.conn.handshake_kind(),
        Some(rustls::HandshakeKind::FullWithHelloRetryRequest)
    );
    assert_eq!(who(&mut c), "route for a\n");
    // And split into records of 5 bytes.
    let mut c = connect_framed(
        env.srv.addr,
        "b.example.test",
        &cfg,
        |f| vec![frame(22, &hello_payload(f), 5)],
        Duration::ZERO,
    )
    .unwrap();
    assert_eq!(who(&mut c), "route for b\n");
}

/// Not TLS after the first byte, a ClientHello header claiming more than rustls allows, and a
/// truncated hello followed by the end: each refused or closed, and the server still serves.
#[test]
fn malformed_hellos_are_refused_and_the_server_carries_on() {
    let env = env("badhello", FAST);
    let cases: Vec<Vec<u8>> = vec![
        vec![0x16, 0x02, 0x00, 0x00, 0x05, 1, 0, 0, 1, 0],
        vec![0x16, 0x03, 0x01, 0x48, 0x00],
        {
            let mut v = vec![0x16, 0x03, 0x01, 0x00, 0x08, 1, 0xff, 0xff, 0xff];
            v.extend([3, 3, 0, 0]);
            v
        },
        {
            // A hello whose body is one byte longer than its records carry, then the end.
            let mut v = frame(22, &[1, 0, 0, 40], 4);
            v.extend(frame(22, &[3u8; 20], 20));
            v
        },
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let mut s = common::connect(env.srv.addr);
        s.write_all(bytes).unwrap();
        let _ = s.shutdown(Shutdown::Write);
        assert!(
            common::closed_within(&mut s, Duration::from_secs(3)),
            "case {i}"
        );
    }
    let mut c = env.connect("a.example.test");
    assert_eq!(who(&mut c), "route for a\n");
}

// ---------------------------------------------------------------------------------------------
// 2. The stream.

/// Requests split a byte per record (and a record per segment), many pipelined in one record
/// and many across records in one segment, on TLS 1.3 and 1.2.
#[test]
fn requests_split_and_pipelined_across_records() {
    let env = env("split", FAST);
    for cfg in [env.h1(), env.tls12()] {
        let mut c = tlskit::connect(env.srv.addr, "a.example.test", &cfg).unwrap();
        for b in WHO.as_bytes() {
            let rec = seal(&mut c, &[*b]);
            c.sock.write_all(&rec).unwrap();
        }
        assert_eq!(
            common::read_response_to(&mut c, false).text(),
            "route for a\n"
        );
        // The ciphertext of one request a byte per segment.
        let rec = seal(&mut c, WHO.as_bytes());
        for b in &rec {
            c.sock.write_all(&[*b]).unwrap();
            // paces: a segment per byte.
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(
            common::read_response_to(&mut c, false).text(),
            "route for a\n"
        );
        // 300 requests in one record (about 9 KB), then 300 in 300 records in one write.
        let many = WHO.repeat(300);
        let rec = seal(&mut c, many.as_bytes());
        assert_eq!(records(&rec).len(), 1);
        c.sock.write_all(&rec).unwrap();
        for i in 0..300 {
            let r = common::read_response_to(&mut c, false);
            assert_eq!(r.text(), "route for a\n", "one record, response {i}");
        }
        let mut flight = Vec::new();
        for _ in 0..300 {
            flight.extend(seal(&mut c, WHO.as_bytes()));
        }
        c.sock.write_all(&flight).unwrap();
        for i in 0..300 {
            let r = common::read_response_to(&mut c, false);
            assert_eq!(r.text(), "route for a\n", "many records, response {i}");
        }
        // A request whose head ends in a record that also starts the next request.
        let (one, two) = WHO.split_at(20);
        let mut flight = seal(&mut c, one.as_bytes());
        flight.extend(seal(&mut c, format!("{two}{one}").as_bytes()));
        c.sock.write_all(&flight).unwrap();
        assert_eq!(
            common::read_response_to(&mut c, false).text(),
            "route for a\n"
        );
        // paces: the rest of the second request comes after the first was answered.
        std::thread::sleep(Duration::from_millis(50));
        let rec = seal(&mut c, two.as_bytes());
        c.sock.write_all(&rec).unwrap();
        assert_eq!(
            common::read_response_to(&mut c, false).text(),
            "route for a\n"
        );
    }
}

fn upload_head(len: Option<usize>) -> String {
    match len {
        Some(n) => format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {n}\r\n\r\n"),
        None => "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
    }
}

/// Uploads of 4 MiB with Content-Length and chunked, through TLS 1.3 and 1.2, reach the upstream
/// whole.
#[test]
fn large_uploads_arrive_whole() {
    let env = env("upload", "{ header: 2s, keepalive: 5s }");
    let body = &env.big;
    let want = format!("len={} sum={:x}", body.len(), fnv(body));
    for cfg in [env.h1(), env.tls12()] {
        let mut c = tlskit::connect(env.srv.addr, "a.example.test", &cfg).unwrap();
        c.write_all(upload_head(Some(body.len())).as_bytes())
            .unwrap();
        for part in body.chunks(100_000) {
            c.write_all(part).unwrap();
        }
        c.flush().unwrap();
        assert_eq!(common::read_response_to(&mut c, false).text(), want);
        c.write_all(upload_head(None).as_bytes()).unwrap();
        for part in body.chunks(77_777) {
            c.write_all(format!("{:x}\r\n", part.len()).as_bytes())
                .unwrap();
            c.write_all(part).unwrap();
            c.write_all(b"\r\n").unwrap();
        }
        c.write_all(b"0\r\n\r\n").unwrap();
        c.flush().unwrap();
        assert_eq!(common::read_response_to(&mut c, false).text(), want);
    }
}

/// A 4 MiB static file to a client reading 4 KiB at a time with pauses, then the next request
/// on the same connection; TLS 1.3 and 1.2.
#[test]
fn large_downloads_to_slow_readers() {
    let env = env("download", "{ header: 2s, keepalive: 5s }");
    for cfg in [env.h1(), env.tls12()] {
        let mut c = tlskit::connect(env.srv.addr, "a.example.test", &cfg).unwrap();
        c.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        c.flush().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            c.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"));
        let mut got = vec![0u8; BIG];
        let mut at = 0;
        let mut reads = 0;
        while at < BIG {
            let n = (BIG - at).min(4096);
            let n = c.read(&mut got[at..at + n]).unwrap();
            assert!(n > 0);
            at += n;
            reads += 1;
            if reads % 64 == 0 {
                // paces: a reader a little slower than the sender.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        assert!(got == env.big, "the body differs");
        assert_eq!(who(&mut c), "route for a\n");
    }
}

/// Key updates (the client asks the server to update too): between requests, in the middle of a
/// request's head, and while a large response is being read; the server's own update comes
/// back and the connection goes on.
#[test]
fn key_updates_between_and_within_requests_and_downloads() {
    let env = env("keyupdate", "{ header: 2s, keepalive: 5s }");
    let mut c = env.connect("a.example.test");
    for _ in 0..3 {
        c.conn.refresh_traffic_keys().unwrap();
        assert_eq!(who(&mut c), "route for a\n");
    }
    // Mid-head: a record of the head, a key update, the rest.
    let (one, two) = WHO.split_at(12);
    let mut flight = seal(&mut c, one.as_bytes());
    c.conn.refresh_traffic_keys().unwrap();
    flight.extend(seal(&mut c, two.as_bytes()));
    c.sock.write_all(&flight).unwrap();
    assert_eq!(
        common::read_response_to(&mut c, false).text(),
        "route for a\n"
    );
    // While a 4 MiB response comes.
    c.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    c.flush().unwrap();
    let mut got = Vec::with_capacity(BIG + 1024);
    let mut buf = vec![0u8; 65536];
    let mut updates = 0;
    while got.len() < BIG {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
        if got.len() > updates * (BIG / 4) && updates < 4 {
            c.conn.refresh_traffic_keys().unwrap();
            c.conn.complete_io(&mut c.sock).unwrap();
            updates += 1;
        }
    }
    let start = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    while got.len() < start + BIG {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got[start..] == env.big[..], "the body differs");
    assert_eq!(who(&mut c), "route for a\n");
    // Many updates in a row in one flight (rustls refuses more than 32 without data between),
    // then a request.
    let mut flight = Vec::new();
    for _ in 0..20 {
        c.conn.refresh_traffic_keys().unwrap();
        while c.conn.wants_write() {
            c.conn.write_tls(&mut flight).unwrap();
        }
    }
    flight.extend(seal(&mut c, WHO.as_bytes()));
    c.sock.write_all(&flight).unwrap();
    assert_eq!(
        common::read_response_to(&mut c, false).text(),
        "route for a\n"
    );
}

/// A client's close_notify in the middle of a request head, in the middle of a body, and with a
/// complete request before it: the first two close without an answer, the last is answered and
/// then the server closes; none hangs.
#[test]
fn close_notify_mid_request() {
    let env = env("closenotify", FAST);
    let mut c = env.connect("a.example.test");
    let mut flight = seal(&mut c, b"GET /who HTTP/1.1\r\nHo");
    c.conn.send_close_notify();
    while c.conn.wants_write() {
        c.conn.write_tls(&mut flight).unwrap();
    }
    c.sock.write_all(&flight).unwrap();
    assert!(
        common::closed_within(&mut c.sock, Duration::from_secs(3)),
        "mid-head"
    );

    let mut c = env.connect("a.example.test");
    let mut flight = seal(&mut c, upload_head(Some(1000)).as_bytes());
    flight.extend(seal(&mut c, &[7u8; 400]));
    c.conn.send_close_notify();
    while c.conn.wants_write() {
        c.conn.write_tls(&mut flight).unwrap();
    }
    c.sock.write_all(&flight).unwrap();
    assert!(
        common::closed_within(&mut c.sock, Duration::from_secs(3)),
        "mid-body"
    );

    let mut c = env.connect("a.example.test");
    let mut flight = seal(&mut c, WHO.as_bytes());
    c.conn.send_close_notify();
    while c.conn.wants_write() {
        c.conn.write_tls(&mut flight).unwrap();
    }
    c.sock.write_all(&flight).unwrap();
    let r = common::read_response_to(&mut c, false);
    assert_eq!(
        r.text(),
        "route for a\n",
        "answered after the client's close_notify"
    );
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty());
    until("connections released", Duration::from_secs(5), || {
        env.open() <= 1.0
    });
}

/// Abrupt ends: half a record then FIN, half a record then RST, a whole record of half a request
/// then FIN; the connections are released and the server carries on.
#[test]
fn abrupt_ends_with_partial_records() {
    let env = env("abrupt", FAST);
    for how in 0..3 {
        let mut c = env.connect("a.example.test");
        assert_eq!(who(&mut c), "route for a\n");
        let rec = seal(&mut c, WHO.as_bytes());
        match how {
            0 => {
                c.sock.write_all(&rec[..rec.len() / 2]).unwrap();
                c.sock.shutdown(Shutdown::Write).unwrap();
                assert!(common::closed_within(&mut c.sock, Duration::from_secs(3)));
            }
            1 => {
                c.sock.write_all(&rec[..rec.len() / 2]).unwrap();
                socket2::SockRef::from(&c.sock)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
                drop(c);
            }
            _ => {
                let rec = seal(&mut c, b"GET /who HTTP/1.1\r\n");
                c.sock.write_all(&rec).unwrap();
                c.sock.shutdown(Shutdown::Write).unwrap();
                assert!(common::closed_within(&mut c.sock, Duration::from_secs(3)));
            }
        }
    }
    until("connections released", Duration::from_secs(5), || {
        env.open() <= 1.0
    });
    let mut c = env.connect("b.example.test");
    assert_eq!(who(&mut c), "route for b\n");
}

/// Garbage after the handshake: a record that does not decrypt, plaintext HTTP, a record header
/// claiming 18 KB and more, an unknown content type, and an empty application-data record; the
/// first four end the connection (with an alert), the last is harmless.
#[test]
fn garbage_after_the_handshake() {
    let env = env("garbage", FAST);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("bad mac", {
            let mut v = vec![0x17, 3, 3, 0, 40];
            v.extend([0x5a; 40]);
            v
        }),
        ("plaintext", WHO.as_bytes().to_vec()),
        ("oversized", {
            let mut v = vec![0x17, 3, 3, 0x48, 0x01];
            v.extend(vec![0u8; 0x4801]);
            v
        }),
        ("unknown type", vec![0x42, 3, 3, 0, 3, 1, 2, 3]),
    ];
    for (what, bytes) in cases {
        let mut c = env.connect("a.example.test");
        assert_eq!(who(&mut c), "route for a\n");
        let _ = c.sock.write_all(&bytes);
        assert!(
            common::closed_within(&mut c.sock, Duration::from_secs(3)),
            "{what}: closed"
        );
    }
    until("connections released", Duration::from_secs(5), || {
        env.open() <= 1.0
    });
    let mut c = env.connect("a.example.test");
    assert_eq!(who(&mut c), "route for a\n");
}

/// A record that fails to decrypt after the handshake: the server's fatal alert
/// (`bad_record_mac`) reaches the client before the connection ends, as tokio-rustls sent it
/// (its last-gasp write) and as the handshake path here does; and the server does not hit
/// rustls' debug assertion against a second fatal alert (a panic in debug builds) doing so.
#[test]
fn a_bad_record_gets_its_fatal_alert_and_no_panic() {
    let env = env("alert", FAST);
    let panics = || metric(env.admin, "weir_panics_total");
    let before = panics();
    let mut c = env.connect("a.example.test");
    assert_eq!(who(&mut c), "route for a\n");
    let mut bad = vec![0x17, 3, 3, 0, 40];
    bad.extend([0x5a; 40]);
    c.sock.write_all(&bad).unwrap();
    let mut got = Vec::new();
    let _ = c.sock.read_to_end(&mut got);
    // What came is records encrypted under the server's key: let the client read them.
    let mut rd: &[u8] = &got;
    let mut alert = None;
    while !rd.is_empty() {
        if c.conn.read_tls(&mut rd).unwrap() == 0 {
            break;
        }
        if let Err(e) = c.conn.process_new_packets() {
            alert = Some(e);
            break;
        }
    }
    assert_eq!(panics(), before, "a panic while failing the connection");
    assert!(
        matches!(
            alert,
            Some(rustls::Error::AlertReceived(
                rustls::AlertDescription::BadRecordMac
            ))
        ),
        "the client got {} bytes and {alert:?}, not the server's bad_record_mac alert",
        got.len()
    );
}

fn block_on<F: std::future::Future>(limit: Duration, f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async { tokio::time::timeout(limit, f).await.expect("hung") })
}

/// HTTP/2 over TLS: 64 concurrent streams each downloading the 4 MiB file through windows of
/// 64 KiB read slowly, and 8 uploads of 1 MiB, on one connection.
#[test]
fn h2_many_streams_with_small_windows() {
    let env = env("h2", "{ header: 5s, keepalive: 10s }");
    let cfg = tlskit::client_config(&env.pki.ca_der, &["h2"], None);
    let addr = env.srv.addr;
    let big_sum = fnv(&env.big);
    let up: Vec<u8> = env.big[..1 << 20].to_vec();
    let up_want = format!("len={} sum={:x}", up.len(), fnv(&up));
    block_on(Duration::from_secs(60), async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("a.example.test").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (client, conn) = h2::client::Builder::new()
            .initial_window_size(65_535)
            .initial_connection_window_size(256 * 1024)
            .handshake::<_, bytes::Bytes>(tls)
            .await
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                tokio::task::spawn_local(async move {
                    let _ = conn.await;
                });
                let mut tasks = Vec::new();
                for i in 0..24usize {
                    let client = client.clone();
                    let up = up.clone();
                    tasks.push(tokio::task::spawn_local(async move {
                        let upload = i % 3 == 0;
                        let req = http::Request::builder()
                            .method(if upload { "POST" } else { "GET" })
                            .uri(if upload {
                                "https://a.example.test/up"
                            } else {
                                "https://a.example.test/static/big.bin"
                            })
                            .body(())
                            .unwrap();
                        let mut c = client.ready().await.unwrap();
                        let (resp, mut stream) = c.send_request(req, !upload).unwrap();
                        if upload {
                            let mut rest = bytes::Bytes::from(up);
                            while !rest.is_empty() {
                                stream.reserve_capacity(rest.len().min(16384));
                                let n = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                                    .await
                                    .unwrap()
                                    .unwrap();
                                let piece = rest.split_to(n.min(rest.len()));
                                stream.send_data(piece, rest.is_empty()).unwrap();
                            }
                        }
                        let resp = resp.await.unwrap();
                        assert_eq!(resp.status(), 200);
                        let mut body = resp.into_body();
                        let mut out = Vec::new();
                        while let Some(chunk) = body.data().await {
                            let chunk = chunk.unwrap();
                            out.extend_from_slice(&chunk);
                            if out.len() % (1 << 20) < chunk.len() {
                                // paces: a reader that pauses every MiB.
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                            let _ = body.flow_control().release_capacity(chunk.len());
                        }
                        (upload, out)
                    }));
                }
                for t in tasks {
                    let (upload, out) = t.await.unwrap();
                    if upload {
                        assert_eq!(String::from_utf8(out).unwrap(), up_want);
                    } else {
                        assert_eq!(out.len(), BIG);
                        assert_eq!(fnv(&out), big_sum);
                    }
                }
            })
            .await;
    });
}

/// A WebSocket tunnel over TLS carries 4 MiB each way while both directions run at once.
#[test]
fn websocket_tunnel_over_tls_carries_megabytes_both_ways() {
    let env = env("ws", "{ header: 5s, keepalive: 10s }");
    let cfg = env.h1();
    let addr = env.srv.addr;
    let data = env.big.clone();
    block_on(Duration::from_secs(60), async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("a.example.test").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        tls.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n").await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tls.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        let (mut r, mut w) = tokio::io::split(tls);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            for part in sent.chunks(50_000) {
                w.write_all(part).await.unwrap();
            }
            w.flush().await.unwrap();
            w
        });
        let mut got = vec![0u8; data.len()];
        r.read_exact(&mut got).await.unwrap();
        assert!(got == data, "echoed bytes differ");
        let _w = writer.await.unwrap();
    });
}

/// A TCP listener terminating TLS relays 4 MiB each way at once to an echo backend, and the
/// client's close_notify ends the relay.
#[test]
fn tcp_listener_with_tls_relays_megabytes() {
    let pki = Pki::new("tse-tcp");
    let cert = pki.issue("tcp", "tcp.example", &["tcp.example"]);
    let backend = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s.shutdown(Shutdown::Write);
                });
            }
        });
        addr
    };
    let srv = start_config(&format!(
        "upstreams:\n  b: {{ servers: ['{backend}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls: {{ certificates: [{{ cert: '{}', key: '{}' }}] }}\n    tcp: {{ upstream: b }}\n",
        cert.cert.display(),
        cert.key.display()
    ));
    let cfg = tlskit::client_config(&pki.ca_der, &[], None);
    let addr = srv.addr;
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 253) as u8).collect();
    block_on(Duration::from_secs(60), async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from("tcp.example").unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .unwrap();
        let (mut r, mut w) = tokio::io::split(tls);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            for part in sent.chunks(30_000) {
                w.write_all(part).await.unwrap();
            }
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "relayed bytes differ");
        writer.await.unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// 3. Idle and parked connections.

/// After a request, an idle TLS connection that gets half a record (and nothing more) must not
/// outlive the keep-alive and header timeouts: a plain connection with half a request head
/// is cut at the header timeout. Checked before parking and once parked.
#[test]
fn half_a_record_after_idle_is_timed_out() {
    let env = env("idlehalf", "{ header: 1s, keepalive: 2s }");
    let mut open = Vec::new();
    for parked in [false, true] {
        let mut c = env.connect("a.example.test");
        assert_eq!(who(&mut c), "route for a\n");
        if parked {
            wait_parked(env.admin, 1.0);
        }
        let rec = seal(&mut c, WHO.as_bytes());
        c.sock.write_all(&rec[..3]).unwrap();
        if !common::closed_within(&mut c.sock, Duration::from_secs(6)) {
            open.push(if parked { "parked" } else { "idle in its task" });
        }
    }
    assert!(
        open.is_empty(),
        "still open 6 s after half a record (header 1s, keepalive 2s): {open:?}"
    );
}

/// A TLS 1.3 key update alone (no request after it) wakes an idle or parked connection; the
/// connection must still be closed by the keep-alive timeout (2 s), not kept for ever.
#[test]
fn a_lone_key_update_does_not_defeat_the_idle_timeout() {
    let env = env("idleku", "{ header: 1s, keepalive: 2s }");
    let mut open = Vec::new();
    for parked in [false, true] {
        let mut c = env.connect("a.example.test");
        assert_eq!(who(&mut c), "route for a\n");
        if parked {
            wait_parked(env.admin, 1.0);
        } else {
            // paces: idle a moment, not long enough to park.
            std::thread::sleep(Duration::from_millis(50));
        }
        c.conn.refresh_traffic_keys().unwrap();
        while c.conn.wants_write() {
            c.conn.write_tls(&mut c.sock).unwrap();
        }
        if !common::closed_within(&mut c.sock, Duration::from_secs(6)) {
            open.push(if parked { "parked" } else { "idle in its task" });
        }
    }
    assert!(
        open.is_empty(),
        "still open 6 s after a lone key update (keepalive 2s): {open:?}"
    );
}

/// Parked TLS 1.3 and 1.2 connections woken by: a key update with a request, 300 pipelined
/// requests in separate records, a request split over two writes 100 ms apart; each answered,
/// and each parks again afterwards.
#[test]
fn parked_connections_woken_by_odd_flights() {
    let env = env("wake", "{ header: 400ms, keepalive: 30s }");
    let mut c13 = env.connect("a.example.test");
    let mut c12 = tlskit::connect(env.srv.addr, "b.example.test", &env.tls12()).unwrap();
    assert_eq!(who(&mut c13), "route for a\n");
    assert_eq!(who(&mut c12), "route for b\n");
    wait_parked(env.admin, 2.0);
    // A key update and a request in one flight.
    c13.conn.refresh_traffic_keys().unwrap();
    assert_eq!(who(&mut c13), "route for a\n");
    wait_parked(env.admin, 2.0);
    // 300 requests, a record each, in one write.
    for (c, body) in [(&mut c13, "route for a\n"), (&mut c12, "route for b\n")] {
        let mut flight = Vec::new();
        for _ in 0..300 {
            flight.extend(seal(c, WHO.as_bytes()));
        }
        c.sock.write_all(&flight).unwrap();
        for i in 0..300 {
            assert_eq!(
                common::read_response_to(c, false).text(),
                body,
                "response {i}"
            );
        }
    }
    wait_parked(env.admin, 2.0);
    // Half a record, then the rest 100 ms later.
    for (c, body) in [(&mut c13, "route for a\n"), (&mut c12, "route for b\n")] {
        let rec = seal(c, WHO.as_bytes());
        c.sock.write_all(&rec[..7]).unwrap();
        // paces: the rest of the record 100 ms later.
        std::thread::sleep(Duration::from_millis(100));
        c.sock.write_all(&rec[7..]).unwrap();
        assert_eq!(common::read_response_to(c, false).text(), body);
    }
    wait_parked(env.admin, 2.0);
    // A large download right at wake-up.
    c13.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    c13.flush().unwrap();
    let r = common::read_response_to(&mut c13, false);
    assert!(r.body == env.big);
    wait_parked(env.admin, 2.0);
    assert_eq!(
        metric(env.admin, "weir_connections_closed_total{reason=\"idle\"}"),
        0.0
    );
}

/// After its first park a connection's records are weir's own (`tls/records.rs`, rustls hands
/// the keys over): each cipher suite rustls offers, TLS 1.3 and 1.2, carries a 4 MiB download
/// and a 4 MiB upload, parked between them, with a key update the client asks for on TLS 1.3;
/// then its `close_notify` closes it.
#[test]
fn every_cipher_suite_after_parking() {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    let env = env("suites", "{ header: 400ms, keepalive: 30s }");
    let suites = [
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    let mut conns: Vec<TlsStream> = suites
        .iter()
        .map(|s| {
            let cfg = tlskit::suite_config(&env.pki.ca_der, *s);
            tlskit::connect(env.srv.addr, "a.example.test", &cfg).unwrap()
        })
        .collect();
    for (c, s) in conns.iter_mut().zip(suites) {
        assert_eq!(c.conn.negotiated_cipher_suite(), Some(s));
        assert_eq!(who(c), "route for a\n");
    }
    let want = format!("len={} sum={:x}", env.big.len(), fnv(&env.big));
    for round in 0..2 {
        wait_parked(env.admin, suites.len() as f64);
        for (c, s) in conns.iter_mut().zip(suites) {
            if matches!(s, rustls::SupportedCipherSuite::Tls13(_)) {
                c.conn.refresh_traffic_keys().unwrap();
            }
            c.write_all(b"GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            c.flush().unwrap();
            let r = common::read_response_to(c, false);
            assert!(
                r.body == env.big,
                "{s:?} round {round}: the download differs"
            );
        }
        wait_parked(env.admin, suites.len() as f64);
        for (c, s) in conns.iter_mut().zip(suites) {
            c.write_all(upload_head(Some(env.big.len())).as_bytes())
                .unwrap();
            for part in env.big.chunks(100_000) {
                c.write_all(part).unwrap();
            }
            c.flush().unwrap();
            let r = common::read_response_to(c, false);
            assert_eq!(r.text(), want, "{s:?} round {round}: the upload");
        }
    }
    wait_parked(env.admin, suites.len() as f64);
    for mut c in conns {
        c.conn.send_close_notify();
        c.conn.write_tls(&mut c.sock).unwrap();
        assert!(tlskit::drain(&mut c).is_empty(), "nothing but the end");
    }
    wait_parked(env.admin, 0.0);
    assert_eq!(
        metric(env.admin, "weir_connections_closed_total{reason=\"idle\"}"),
        0.0
    );
}

/// Garbage, a bad record and plaintext sent to parked connections: each closes, nothing stays
/// parked or open.
#[test]
fn parked_connections_given_garbage_close() {
    let env = env("parkgarbage", "{ header: 400ms, keepalive: 30s }");
    let payloads: Vec<Vec<u8>> = vec![
        {
            let mut v = vec![0x17, 3, 3, 0, 40];
            v.extend([0x5a; 40]);
            v
        },
        WHO.as_bytes().to_vec(),
        vec![0x15, 3, 3, 0, 2, 2, 10],
    ];
    let mut conns: Vec<TlsStream> = (0..payloads.len())
        .map(|_| {
            let mut c = env.connect("a.example.test");
            assert_eq!(who(&mut c), "route for a\n");
            c
        })
        .collect();
    wait_parked(env.admin, 3.0);
    for (c, p) in conns.iter_mut().zip(&payloads) {
        c.sock.write_all(p).unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert!(
            common::closed_within(&mut c.sock, Duration::from_secs(3)),
            "case {i}"
        );
    }
    wait_parked(env.admin, 0.0);
    until("connections released", Duration::from_secs(5), || {
        env.open() <= 1.0
    });
}

/// Parked TLS connections are closed by the keep-alive timeout (counted `idle`, released), and
/// those parked at shutdown let the server stop promptly.
#[test]
fn parked_tls_times_out_and_shutdown_does_not_wait_for_it() {
    let mut env = env("parktimeout", "{ header: 300ms, keepalive: 1500ms }");
    let mut conns: Vec<TlsStream> = (0..4)
        .map(|_| {
            let mut c = env.connect("a.example.test");
            assert_eq!(who(&mut c), "route for a\n");
            c
        })
        .collect();
    wait_parked(env.admin, 4.0);
    for c in &mut conns {
        assert!(common::closed_within(&mut c.sock, Duration::from_secs(4)));
    }
    wait_parked(env.admin, 0.0);
    until("connections released", Duration::from_secs(5), || {
        env.open() <= 1.0
    });
    assert_eq!(
        metric(env.admin, "weir_connections_closed_total{reason=\"idle\"}"),
        4.0
    );
    let mut conns: Vec<TlsStream> = (0..4)
        .map(|_| {
            let mut c = env.connect("b.example.test");
            assert_eq!(who(&mut c), "route for b\n");
            c
        })
        .collect();
    wait_parked(env.admin, 4.0);
    let t = Instant::now();
    env.srv.stop();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        t.elapsed()
    );
    for c in &mut conns {
        assert!(common::closed_within(&mut c.sock, Duration::from_secs(2)));
    }
}

/// A reload while TLS connections are parked: each is served again, with its server name.
#[test]
fn parked_tls_survives_a_reload() {
    let pki = Pki::new("tse-reload");
    let a = pki.issue("a", "a.example.test", &["a.example.test", "b.example.test"]);
    let yaml = |body: &str| {
        format!(
            "workers: 1\ntimeouts: {{ header: 400ms, keepalive: 30s }}\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls:\n      certificates: [{{ cert: '{}', key: '{}' }}]\n    routes:\n      - match: {{ path: /who, sni: a.example.test }}\n        respond: {{ body: \"{body}\" }}\n      - match: {{ path: /who }}\n        respond: {{ body: anyone }}\n",
            a.cert.display(),
            a.key.display()
        )
    };
    let srv = start_config(&yaml("first"));
    let handle = srv.handle.as_ref().unwrap();
    let admin = handle.admin_addr().unwrap();
    let cfg = tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let mut a1 = tlskit::connect(srv.addr, "a.example.test", &cfg).unwrap();
    let mut b1 = tlskit::connect(srv.addr, "b.example.test", &cfg).unwrap();
    assert_eq!(tlskit::exchange(&mut a1, WHO).text(), "first");
    assert_eq!(tlskit::exchange(&mut b1, WHO).text(), "anyone");
    wait_parked(admin, 2.0);
    let next = weir::runtime::compile_str(
        &yaml("second"),
        std::path::Path::new("."),
        |_| None,
        &handle.registry(),
    )
    .unwrap();
    handle.reload(next).unwrap();
    until("served after the reload", Duration::from_secs(5), || {
        tlskit::exchange(&mut a1, WHO).text() == "second"
    });
    assert_eq!(tlskit::exchange(&mut b1, WHO).text(), "anyone");
}

// ---------------------------------------------------------------------------------------------
// 4. Work and memory a client can force.

/// A client that pipelines requests for a 4 MiB file and never reads: the server must stop
/// reading once its output waits (bounded buffers), so the client's writes soon block.
#[test]
fn a_client_that_never_reads_cannot_make_the_server_buffer_without_bound() {
    let env = env("noread", "{ header: 5s, keepalive: 10s }");
    let mut c = env.connect("a.example.test");
    let req = "GET /static/big.bin HTTP/1.1\r\nHost: x\r\n\r\n";
    let rec = seal(&mut c, req.repeat(50).as_bytes());
    c.sock
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut sent = 0usize;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        match c.sock.write(&rec) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    // 50 requests per write: at 4 MiB each, what the server accepted, answered, would be
    // sent * 4 MiB / 42 bytes. A few MB of socket buffers is fine; 64 MB of requests is not.
    assert!(
        sent < 64 << 20,
        "the client wrote {sent} bytes of requests without reading"
    );
}

/// Many tiny records (a byte of request each) and records with empty payloads: answered, and
/// quickly (no quadratic work per record).
#[test]
fn many_tiny_records_are_cheap() {
    let env = env("tiny-records", FAST);
    let mut c = env.connect("a.example.test");
    // A request with a 7 KB header section sent a byte per record: 7 K records, 160 KB.
    let head = format!(
        "GET /who HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(7000)
    );
    let mut flight = Vec::new();
    for b in head.as_bytes() {
        flight.extend(seal(&mut c, &[*b]));
    }
    let t = Instant::now();
    c.sock.write_all(&flight).unwrap();
    let r = common::read_response_to(&mut c, false);
    assert_eq!(r.text(), "route for a\n");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
}
