//! Hostile probes of the HTTP/3 server, written by an outside review (2026-11-26) and kept as
//! regression tests: each asserts the correct behaviour. Eight of them failed on the first
//! HTTP/3 build (smuggling past `content-length`, frames buffered without bound, datagrams,
//! PINGs defeating the keep-alive timeout, 0-RTT handshakes past `timeouts.header`, a client
//! certificate lost with 0-RTT on, connection-specific fields dropped instead of refused).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::h3::{self as h3c, Client};
use common::h3raw::{frame, qpack, read_varint, varint};
use common::inproc;
use common::tlskit::Pki;

/// What the origin saw: request line, headers, body, per request.
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>, Vec<u8>)>>>;

struct Setup {
    handle: weir::server::ServerHandle,
    addr: SocketAddr,
    pki: Pki,
    seen: Seen,
    #[allow(dead_code)]
    dir: std::path::PathBuf,
    _origin: common::origin::Origin,
}

/// A server with one QUIC listener (`listener_extra` under its `tls:`), a recording origin
/// behind `/proxied`, and `extra` top-level config.
fn setup(tag: &str, extra: &str, tls_extra: &str, routes_extra: &str) -> Setup {
    setup_with(
        Pki::new(&format!("h3p-{tag}")),
        tag,
        extra,
        tls_extra,
        routes_extra,
    )
}

fn setup_with(pki: Pki, tag: &str, extra: &str, tls_extra: &str, routes_extra: &str) -> Setup {
    let cert = pki.issue("leaf", "leaf", &["leaf.test"]);
    let dir = inproc::dir("h3p", tag);
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let origin = common::origin::http_origin(move |req| {
        s2.lock()
            .unwrap()
            .push((req.line.clone(), req.headers.clone(), req.body.clone()));
        let body = format!(
            "origin saw {} early={} len={}",
            req.line.trim_end(),
            req.header("early-data").unwrap_or("-"),
            req.body.len()
        );
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let port = common::process::free_port();
    let yaml = format!(
        r#"workers: 1
{extra}
upstreams: {{ o: {{ servers: ['{origin}'] }} }}
listeners:
  - address: 127.0.0.1:{port}
    quic: true
    tls:
      certificates: [{{ cert: '{cert}', key: '{key}' }}]
{tls_extra}
    routes:
{routes_extra}
      - match: {{ path: /hello }}
        respond: {{ body: "Hello, World\n" }}
      - match: {{ path_prefix: /echo }}
        echo: {{}}
      - match: {{ path_prefix: /proxied }}
        proxy: {{ upstream: o }}
"#,
        origin = origin.addr,
        cert = cert.cert.display(),
        key = cert.key.display(),
    );
    let handle = inproc::start(&yaml);
    let addr = handle.local_addrs()[0];
    Setup {
        handle,
        addr,
        pki,
        seen,
        dir,
        _origin: origin,
    }
}

fn lines(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().iter().map(|r| r.0.clone()).collect()
}

/// Client connections open, less the admin scrape's own connection.
fn open_clients(admin: SocketAddr) -> i64 {
    metric(admin, "weir_connections_open") - 1
}

fn metric(admin: SocketAddr, name: &str) -> i64 {
    let text = common::get(admin, "/metrics").text();
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as i64)
        .unwrap_or_else(|| panic!("no {name} in metrics"))
}

// ---------------------------------------------------------------------------------------
// 1. Request smuggling into the HTTP/1.1 upstream: DATA longer than content-length.
// ---------------------------------------------------------------------------------------

#[test]
fn body_longer_than_content_length_is_not_smuggled_to_the_origin() {
    let s = setup("smuggle", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let smuggled = b"helloGET /proxied/SMUGGLED HTTP/1.1\r\nhost: leaf.test\r\nx-evil: 1\r\n\r\n";
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/upload",
        &[("content-length", "5")],
        smuggled,
    );
    eprintln!("client got: {r:?}");
    // paces: a smuggled request would have reached the origin on its keep-alive connection.
    std::thread::sleep(Duration::from_millis(500));
    let seen = lines(&s.seen);
    eprintln!("origin saw: {seen:?}");
    assert!(
        !seen.iter().any(|l| l.contains("SMUGGLED")),
        "a second request was smuggled to the origin inside a body longer than its \
         content-length: {seen:?}"
    );
    // RFC 9114 §4.1.2: a body whose length differs from content-length is malformed: a stream
    // error (H3_MESSAGE_ERROR, checked in h3_messages.rs), no answer.
    assert!(r.is_err(), "a malformed message was answered: {r:?}");
    inproc::stop(s.handle);
}

/// The smuggled request also reaches an origin through a pooled connection another client's
/// request then uses: the origin answers the smuggled one first, so the *next* client gets
/// the response meant for the smuggled request (response queue poisoning).
#[test]
fn a_smuggled_request_does_not_poison_the_next_clients_response() {
    let s = setup("poison", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let smuggled = b"helloGET /proxied/SMUGGLED HTTP/1.1\r\nhost: leaf.test\r\n\r\n";
    let _ = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/upload",
        &[("content-length", "5")],
        smuggled,
    );
    // paces: a smuggled request would have been answered into the pooled connection.
    std::thread::sleep(Duration::from_millis(300));
    let victim = c.get(s.addr, "leaf.test", "/proxied/victim");
    eprintln!("victim got {} {:?}", victim.status, victim.text());
    assert!(
        !victim.text().contains("SMUGGLED"),
        "another client received the smuggled request's response: {}",
        victim.text()
    );
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 2. DATA shorter than content-length: the stream ends early.
// ---------------------------------------------------------------------------------------

#[test]
fn body_shorter_than_content_length_is_refused_not_forwarded_truncated() {
    let s = setup("short", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let t = Instant::now();
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/short",
        &[("content-length", "100")],
        b"short",
    );
    eprintln!("after {:?}: {r:?}", t.elapsed());
    // Malformed (RFC 9114 §4.1.2): a stream error (H3_MESSAGE_ERROR, checked in
    // h3_messages.rs) as soon as the stream ends, not a wait for the rest.
    assert!(r.is_err(), "a malformed message was answered: {r:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the stream error came after {:?}",
        t.elapsed()
    );
    assert!(lines(&s.seen).is_empty(), "{:?}", lines(&s.seen));
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 3. QUIC DATAGRAM frames: advertised, never read, buffered per connection.
// ---------------------------------------------------------------------------------------

#[test]
fn the_server_does_not_accept_datagrams_it_never_reads() {
    let s = setup("dgram", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let pid = std::process::id();
    let before = common::proc_status_bytes(pid, "VmRSS");
    let mut conns = Vec::new();
    let mut advertised = None;
    for _ in 0..16 {
        let conn = c.connect(s.addr, "leaf.test").unwrap();
        advertised = conn.max_datagram_size();
        if let Some(max) = advertised {
            let chunk = Bytes::from(vec![0x5a; max.min(1100)]);
            c.rt.block_on(async {
                // ~1.2 MB each, sent at a pace the path takes.
                for _ in 0..1100 {
                    let _ = conn.send_datagram_wait(chunk.clone()).await;
                }
                // paces: 50 ms between connections.
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
        conns.push(conn);
    }
    // paces: the server takes in the datagrams before RSS is read.
    c.rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    let after = common::proc_status_bytes(pid, "VmRSS");
    eprintln!(
        "max_datagram_size advertised: {advertised:?}; RSS {} KiB -> {} KiB (+{} KiB for 16 connections)",
        before / 1024,
        after / 1024,
        after.saturating_sub(before) / 1024
    );
    assert!(
        advertised.is_none(),
        "the server advertises max_datagram_frame_size (quinn's default 1.25 MB receive buffer): \
         a client parks ~1.25 MB of unread datagrams on every connection"
    );
    drop(conns);
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 4. timeouts.keepalive: a connection with no request, kept open by QUIC PINGs.
// ---------------------------------------------------------------------------------------

fn pinging_client(ca: &rustls::pki_types::CertificateDer<'static>) -> Client {
    let mut cfg = h3c::client_config(ca, false);
    let mut t = quinn::TransportConfig::default();
    t.keep_alive_interval(Some(Duration::from_millis(200)));
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(Duration::from_secs(60)).unwrap(),
    ));
    cfg.transport_config(Arc::new(t));
    Client::new(cfg)
}

#[test]
fn an_idle_connection_closes_at_keepalive_even_if_the_client_pings() {
    let s = setup(
        "ping",
        "admin: { address: 127.0.0.1:0 }\ntimeouts: { keepalive: 1s }\n",
        "",
        "",
    );
    let admin = s.handle.admin_addr().unwrap();
    let c = pinging_client(&s.pki.ca_der);
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let r = h3c::request(&mut send, "leaf.test", "GET", "/hello", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        // paces: nothing more but QUIC PINGs (the client's keep-alive) for 4 keepalive periods.
        tokio::time::sleep(Duration::from_secs(4)).await;
        std::mem::forget(send);
    });
    let open = open_clients(admin);
    eprintln!(
        "close_reason {:?}, weir_connections_open {open}",
        conn.close_reason()
    );
    assert!(
        conn.close_reason().is_some(),
        "an HTTP/3 connection with no request for 4 s is still open with timeouts.keepalive 1s \
         (only QUIC's idle timeout closes it, and every PING resets it); open={open}"
    );
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 5. The handshake bound (timeouts.header) with http3.early_data on.
// ---------------------------------------------------------------------------------------

/// A UDP relay in front of `server` that forwards the client's packets for `window` and
/// nothing back: the server gets a ClientHello and never a Finished.
fn black_hole_relay(server: SocketAddr, window: Duration) -> SocketAddr {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut buf = [0u8; 65536];
        while start.elapsed() < Duration::from_secs(60) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                if from != server && start.elapsed() < window {
                    let _ = sock.send_to(&buf[..n], server);
                }
            }
        }
    });
    addr
}

fn stalled_handshake_holds_slot(tag: &str, early: bool) -> i64 {
    let extra = format!(
        "admin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ header: 1s, keepalive: 30s }}\nhttp3: {{ early_data: {early} }}\n"
    );
    let s = setup(tag, &extra, "", "");
    let admin = s.handle.admin_addr().unwrap();
    assert_eq!(open_clients(admin), 0, "baseline");
    let relay = black_hole_relay(s.addr, Duration::from_millis(300));
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let r = c.rt.block_on(async {
        let connecting = c.endpoint.connect(relay, "leaf.test").unwrap();
        tokio::time::timeout(Duration::from_millis(400), connecting).await
    });
    assert!(r.is_err(), "the handshake went through the black hole");
    c.endpoint.close(quinn::VarInt::from_u32(0), b"");
    let accepted = metric(admin, "weir_http3_connections_total{event=\"accepted\"}");
    assert_eq!(accepted, 1, "the server accepted the stalled connection");
    // Dropped at the header timeout (1 s): within 10 s, a third of the keep-alive timeout.
    let started = Instant::now();
    let mut open = open_clients(admin);
    while open != 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        open = open_clients(admin);
    }
    eprintln!(
        "early_data={early}: weir_connections_open {open} after {:?}",
        started.elapsed()
    );
    inproc::stop(s.handle);
    open
}

#[test]
fn a_stalled_handshake_is_dropped_at_the_header_timeout() {
    assert_eq!(stalled_handshake_holds_slot("stall-off", false), 0);
}

#[test]
fn a_stalled_handshake_is_dropped_at_the_header_timeout_with_early_data_on() {
    let open = stalled_handshake_holds_slot("stall-on", true);
    assert_eq!(
        open, 0,
        "with http3.early_data on, a client that never finishes its handshake holds a \
         connection slot (and its shield count) for timeouts.keepalive, not timeouts.header"
    );
}

// ---------------------------------------------------------------------------------------
// 6. mTLS + early_data: the client certificate's subject.
// ---------------------------------------------------------------------------------------

fn mtls_client(pki: &Pki, alice: &common::tlskit::Issued) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca_der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(alice.chain.clone(), alice.key_der.clone_key())
        .unwrap();
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg).unwrap();
    Client::new(quinn::ClientConfig::new(Arc::new(quic)))
}

fn who(early: bool, tag: &str) -> String {
    let pki = Pki::new(&format!("h3p-{tag}"));
    let alice = pki.issue("alice", "alice", &[]);
    let extra = format!("http3: {{ early_data: {early} }}\n");
    let tls_extra = format!(
        "      client_auth: {{ ca: '{}', mode: optional }}",
        pki.ca_file().display()
    );
    let routes = "      - match: { path: /who, client_subject: '^CN=alice' }\n        respond: { body: \"hello alice\\n\" }\n      - match: { path: /who }\n        respond: { body: \"anyone\\n\" }";
    let s = setup_with(pki, tag, &extra, &tls_extra, routes);
    let c = mtls_client(&s.pki, &alice);
    let r = c.request(s.addr, "leaf.test", "GET", "/who", &[], b"");
    inproc::stop(s.handle);
    r.unwrap().text()
}

#[test]
fn the_client_certificate_subject_is_known_with_early_data_off() {
    assert_eq!(who(false, "mtls-off"), "hello alice\n");
}

#[test]
fn the_client_certificate_subject_is_known_with_early_data_on() {
    assert_eq!(
        who(true, "mtls-on"),
        "hello alice\n",
        "with http3.early_data on, a full handshake's client certificate is not seen: \
         `client_subject` routes do not match and $tls_client_subject is empty"
    );
}

// ---------------------------------------------------------------------------------------
// 7. Forged Early-Data on a 1-RTT request; duplicate content-length.
// ---------------------------------------------------------------------------------------

#[test]
fn a_forged_early_data_field_is_stripped() {
    let s = setup("forge", "http3: { early_data: true }\n", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let r = c
        .request(
            s.addr,
            "leaf.test",
            "GET",
            "/proxied/f",
            &[("early-data", "1")],
            b"",
        )
        .unwrap();
    assert!(r.text().contains("early=-"), "{}", r.text());
    inproc::stop(s.handle);
}

#[test]
fn contradicting_content_lengths_are_refused() {
    let s = setup("dupcl", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/proxied/d",
        &[("content-length", "5"), ("content-length", "10")],
        b"helloworld",
    );
    // Malformed: a stream error, H3_MESSAGE_ERROR (h3_messages.rs), never forwarded.
    assert!(r.is_err(), "answered: {r:?}");
    assert!(lines(&s.seen).is_empty(), "{:?}", lines(&s.seen));
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 8. Hand-made HEADERS frames (static-free QPACK literals).
// ---------------------------------------------------------------------------------------

fn huffman_digits(b: &[u8]) -> String {
    let mut bits: Vec<u8> = Vec::new();
    for byte in b {
        for i in (0..8).rev() {
            bits.push((byte >> i) & 1);
        }
    }
    let mut out = String::new();
    let mut i = 0;
    while i + 5 <= bits.len() {
        let code5 = bits[i..i + 5].iter().fold(0u8, |a, b| (a << 1) | b);
        if code5 <= 2 {
            out.push((b'0' + code5) as char);
            i += 5;
        } else if i + 6 <= bits.len() {
            let code6 = bits[i..i + 6].iter().fold(0u8, |a, b| (a << 1) | b);
            if (0x19..=0x1f).contains(&code6) {
                out.push((b'3' + code6 - 0x19) as char);
                i += 6;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    out
}

/// The status of a response's HEADERS frame block (as `h3` encodes it: static table only).
fn status_of(block: &[u8]) -> Option<u16> {
    let b = block.get(2..)?;
    let first = *b.first()?;
    if first & 0xc0 == 0xc0 {
        let mut idx = first & 0x3f;
        if idx == 0x3f {
            idx += *b.get(1)?;
        }
        let table: &[(u8, u16)] = &[
            (24, 103),
            (25, 200),
            (26, 304),
            (27, 404),
            (28, 503),
            (63, 100),
            (64, 204),
            (65, 206),
            (66, 302),
            (67, 400),
            (68, 403),
            (69, 421),
            (70, 425),
            (71, 500),
        ];
        return table.iter().find(|(i, _)| *i == idx).map(|(_, s)| *s);
    }
    if first & 0xc0 == 0x40 {
        // literal with static name ref :status (24: 0x5f 0x09), then the value
        let mut at = 1;
        if first & 0x0f == 0x0f {
            at += 1;
        }
        let vfirst = *b.get(at)?;
        let len = (vfirst & 0x7f) as usize;
        let v = b.get(at + 1..at + 1 + len)?;
        let text = if vfirst & 0x80 != 0 {
            huffman_digits(v)
        } else {
            String::from_utf8_lossy(v).into_owned()
        };
        return text.parse().ok();
    }
    None
}

/// A raw request stream: `frames` as sent; the response's status (None: reset or no HEADERS)
/// and DATA bytes.
async fn raw(
    conn: &quinn::Connection,
    frames: &[u8],
    finish: bool,
) -> (Option<u16>, Vec<u8>, String) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(frames).await.unwrap();
    if finish {
        let _ = send.finish();
    }
    let got = tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(1 << 20)).await;
    let bytes = match got {
        Err(_) => return (None, Vec::new(), "timeout".into()),
        Ok(Err(e)) => return (None, Vec::new(), e.to_string()),
        Ok(Ok(b)) => b,
    };
    let mut at = 0;
    let mut status = None;
    let mut body = Vec::new();
    while at < bytes.len() {
        let Some(ty) = read_varint(&bytes, &mut at) else {
            break;
        };
        let Some(len) = read_varint(&bytes, &mut at) else {
            break;
        };
        let end = (at + len as usize).min(bytes.len());
        let payload = &bytes[at..end];
        match ty {
            0x01 if status.is_none() => status = status_of(payload),
            0x00 => body.extend_from_slice(payload),
            _ => {}
        }
        at = end;
    }
    (status, body, "ok".into())
}

fn req(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    frame(0x01, &qpack(fields))
}

#[test]
fn raw_headers_probe_matrix() {
    let s = setup("raw", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let out = c.rt.block_on(async {
        let _send = h3c::session(&conn).await.unwrap();
        let base =
            |path: &'static [u8], method: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
                vec![
                    (b":method", method),
                    (b":scheme", b"https"),
                    (b":authority", b"leaf.test"),
                    (b":path", path),
                ]
            };
        let mut results = Vec::new();
        type Fields = Vec<(&'static [u8], &'static [u8])>;
        let cases: Vec<(&str, Fields)> = vec![
            ("sanity", base(b"/proxied/ok", b"GET")),
            ("path without slash", base(b"proxied/x", b"GET")),
            ("asterisk GET", base(b"*", b"GET")),
            ("dotdot", base(b"/proxied/../hello", b"GET")),
            ("pct dotdot", base(b"/proxied/%2e%2e/hello", b"GET")),
            ("double slash", base(b"//proxied/x", b"GET")),
            ("absolute path", base(b"http://evil.test/proxied/x", b"GET")),
            ("scheme ftp", {
                let mut v = base(b"/proxied/x", b"GET");
                v[1] = (b":scheme", b"ftp");
                v
            }),
            ("uppercase name", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"X-Up", b"1"));
                v
            }),
            ("name with space", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"x a", b"1"));
                v
            }),
            ("value CRLF", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"x-a", b"1\r\nx-injected: 1"));
                v
            }),
            ("value NUL", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"x-a", b"1\0"));
                v
            }),
            ("transfer-encoding", {
                let mut v = base(b"/proxied/x", b"POST");
                v.push((b"transfer-encoding", b"chunked"));
                v
            }),
            ("te gzip", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"te", b"gzip"));
                v
            }),
            ("connection header", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"connection", b"x-secret"));
                v.push((b"x-secret", b"1"));
                v
            }),
            ("authority vs host", {
                let mut v = base(b"/proxied/x", b"GET");
                v.push((b"host", b"other.test"));
                v
            }),
            (
                "two hosts no authority",
                vec![
                    (b":method", b"GET"),
                    (b":scheme", b"https"),
                    (b":path", b"/proxied/x"),
                    (b"host", b"leaf.test"),
                    (b"host", b"other.test"),
                ],
            ),
            ("duplicate :path", {
                let mut v = base(b"/hello", b"GET");
                v.push((b":path", b"/proxied/dup"));
                v
            }),
            (
                "CONNECT",
                vec![(b":method", b"CONNECT"), (b":authority", b"127.0.0.1:22")],
            ),
            (
                "ext CONNECT",
                vec![
                    (b":method", b"CONNECT"),
                    (b":protocol", b"websocket"),
                    (b":scheme", b"https"),
                    (b":authority", b"leaf.test"),
                    (b":path", b"/proxied/ws"),
                ],
            ),
            ("method lowercase get", base(b"/proxied/x", b"get")),
            (
                "no method",
                vec![
                    (b":scheme", b"https"),
                    (b":authority", b"leaf.test"),
                    (b":path", b"/proxied/x"),
                ],
            ),
            ("authority with userinfo", {
                let mut v = base(b"/proxied/x", b"GET");
                v[2] = (b":authority", b"user@leaf.test");
                v
            }),
        ];
        for (name, fields) in cases {
            let before = lines(&s.seen).len();
            let (status, body, how) = raw(&conn, &req(&fields), true).await;
            // paces: a refused request forwarded anyway would have reached the origin by now.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let origin: Vec<_> = s.seen.lock().unwrap()[before..]
                .iter()
                .map(|r| format!("{} {:?}", r.0, r.1))
                .collect();
            results.push((
                name,
                status,
                origin.len(),
                format!(
                    "{name:28} -> {status:?} {how} body={:?} origin={origin:?}",
                    String::from_utf8_lossy(&body[..body.len().min(60)])
                ),
            ));
        }
        results
    });
    for (.., l) in &out {
        eprintln!("{l}");
    }
    // Malformed requests (RFC 9114 §4.1.2, §4.2, §4.3.1) are refused (a 4xx/5xx or a reset)
    // and never reach the origin; the rest are served, normalised.
    let refused = [
        "path without slash",
        "asterisk GET",
        "absolute path",
        "scheme ftp",
        "uppercase name",
        "name with space",
        "value CRLF",
        "value NUL",
        "transfer-encoding",
        "te gzip",
        "connection header",
        "authority vs host",
        "two hosts no authority",
        "CONNECT",
        "ext CONNECT",
        "no method",
        "authority with userinfo",
        "duplicate :path",
    ];
    for (name, status, origin, line) in &out {
        if refused.contains(name) {
            assert!(
                *origin == 0 && status.is_none_or(|s| s >= 400),
                "not refused: {line}"
            );
        } else {
            assert!(status.is_some_and(|s| s < 400), "not served: {line}");
        }
    }
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 9. Limits: body without content-length past max_body_bytes; trailers.
// ---------------------------------------------------------------------------------------

#[test]
fn a_body_past_max_body_bytes_without_length_gets_413() {
    let s = setup("maxbody", "limits: { max_body_bytes: 10k }\n", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let r = c.request(
        s.addr,
        "leaf.test",
        "POST",
        "/echo/x",
        &[],
        &vec![b'a'; 200_000],
    );
    eprintln!("{:?}", r.as_ref().map(|r| r.status));
    assert_eq!(r.unwrap().status, 413);
    inproc::stop(s.handle);
}

#[test]
fn forbidden_trailer_fields_do_not_reach_the_origin() {
    let s = setup("trail", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let req = http::Request::builder()
            .method("POST")
            .uri("https://leaf.test/proxied/t")
            .body(())
            .unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        stream.send_data(Bytes::from_static(b"body")).await.unwrap();
        let mut t = http::HeaderMap::new();
        t.insert("content-length", "999".parse().unwrap());
        t.insert("host", "evil.test".parse().unwrap());
        // (`transfer-encoding` here is malformed: a stream error, in h3_messages.rs.)
        t.insert("x-fine", "1".parse().unwrap());
        stream.send_trailers(t).await.unwrap();
        // `h3` hands trailers over once the stream ends: a client that never finishes it
        // waits `timeouts.body` for its answer (and the request goes without them).
        stream.finish().await.unwrap();
        let resp = stream.recv_response().await.unwrap();
        while let Some(mut d) = stream.recv_data().await.unwrap() {
            d.advance(d.remaining());
        }
        assert_eq!(resp.status(), 200);
    });
    let seen = s.seen.lock().unwrap();
    let (_, headers, body) = &seen[0];
    eprintln!(
        "origin headers {headers:?} body {:?}",
        String::from_utf8_lossy(body)
    );
    assert_eq!(body, b"body");
    drop(seen);
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 10. A frame announced longer than anything the server takes is buffered whole.
// ---------------------------------------------------------------------------------------

/// Sends `total` bytes of a frame of type `ty` announced 2^40 bytes long on `send`, paced by
/// QUIC; returns how many went out within `within`.
async fn stream_huge_frame(
    send: &mut quinn::SendStream,
    prefix: &[u8],
    ty: u64,
    total: usize,
    within: Duration,
) -> usize {
    let mut head = prefix.to_vec();
    varint(&mut head, ty);
    varint(&mut head, 1 << 40);
    send.write_all(&head).await.unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let start = Instant::now();
    let mut sent = 0;
    while sent < total && start.elapsed() < within {
        match tokio::time::timeout(Duration::from_secs(2), send.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            _ => break,
        }
    }
    sent
}

fn rss() -> u64 {
    common::proc_status_bytes(std::process::id(), "VmRSS")
}

#[test]
fn an_endless_frame_on_the_control_stream_is_not_buffered_without_bound() {
    let s = setup("ctl-frame", "", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let before = rss();
    let (sent, grown) = c.rt.block_on(async {
        let mut ctl = conn.open_uni().await.unwrap();
        // Control stream (0x00), an empty SETTINGS frame, then a reserved frame type
        // (0x21 = 0x1f * 0 + 0x21) announced 1 TiB long.
        let prefix = [0x00, 0x04, 0x00];
        let sent =
            stream_huge_frame(&mut ctl, &prefix, 0x21, 256 << 20, Duration::from_secs(40)).await;
        // paces: the server takes in what was sent before RSS is read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let grown = rss().saturating_sub(before);
        std::mem::forget(ctl);
        (sent, grown)
    });
    eprintln!(
        "sent {} MiB of one reserved control frame; RSS grew {} MiB; connection {:?}",
        sent >> 20,
        grown >> 20,
        conn.close_reason()
    );
    assert!(
        grown < 64 << 20,
        "the server buffered an endless control-stream frame: {} MiB of RSS for {} MiB sent",
        grown >> 20,
        sent >> 20
    );
    inproc::stop(s.handle);
}

#[test]
fn an_endless_headers_frame_is_not_buffered_past_the_field_section_limit() {
    let s = setup("hdr-frame", "timeouts: { header: 60s }\n", "", "");
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let before = rss();
    let (sent, grown) = c.rt.block_on(async {
        let _send = h3c::session(&conn).await.unwrap();
        let (mut req, _recv) = conn.open_bi().await.unwrap();
        let sent = stream_huge_frame(&mut req, &[], 0x01, 256 << 20, Duration::from_secs(40)).await;
        // paces: the server takes in what was sent before RSS is read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let grown = rss().saturating_sub(before);
        std::mem::forget(req);
        (sent, grown)
    });
    eprintln!(
        "sent {} MiB of one HEADERS frame (max_field_section_size 32 KiB); RSS grew {} MiB",
        sent >> 20,
        grown >> 20
    );
    assert!(
        grown < 64 << 20,
        "the server buffered a HEADERS frame far past http3.max_field_section_size: {} MiB of \
         RSS for {} MiB sent",
        grown >> 20,
        sent >> 20
    );
    inproc::stop(s.handle);
}

// ---------------------------------------------------------------------------------------
// 11. A client that never reads its response: timeouts.write.
// ---------------------------------------------------------------------------------------

#[test]
fn a_client_that_never_reads_is_cut_at_the_write_timeout() {
    let s = setup(
        "stall",
        "admin: { address: 127.0.0.1:0 }\ntimeouts: { write: 1s }\nlimits: { max_body_bytes: 16m }\n",
        "",
        "",
    );
    let admin = s.handle.admin_addr().unwrap();
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let body = vec![b'e'; 6 << 20];
    let got = c.rt.block_on(async {
        let mut send = h3c::session(&conn).await.unwrap();
        let req = http::Request::builder()
            .method("POST")
            .uri("https://leaf.test/echo/big")
            .body(())
            .unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        stream.send_data(Bytes::from(body)).await.unwrap();
        stream.finish().await.unwrap();
        // paces: read nothing for 5 write timeouts.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut total = 0usize;
        let r = tokio::time::timeout(Duration::from_secs(20), async {
            stream.recv_response().await.map_err(|e| e.to_string())?;
            while let Some(mut d) = stream.recv_data().await.map_err(|e| e.to_string())? {
                total += d.remaining();
                d.advance(d.remaining());
            }
            Ok::<_, String>(())
        })
        .await;
        (total, r)
    });
    eprintln!("read {} bytes after the stall: {:?}", got.0, got.1);
    let failed = metric(admin, "weir_http3_requests_total");
    eprintln!("h3 requests {failed}");
    assert!(
        !matches!(got.1, Ok(Ok(()))) || got.0 < 6 << 20,
        "the whole 6 MiB response arrived after a 5 s stall with timeouts.write 1s"
    );
    inproc::stop(s.handle);
}

/// How the server closed a connection after the client sent `bytes` on a new unidirectional
/// stream (finished when `finish`): the application error code.
fn closed_with(s: &Setup, bytes: &[u8], finish: bool) -> Option<u64> {
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut tx = conn.open_uni().await.unwrap();
        tx.write_all(bytes).await.unwrap();
        if finish {
            tx.finish().unwrap();
        }
        match tokio::time::timeout(Duration::from_secs(5), conn.closed()).await {
            Ok(quinn::ConnectionError::ApplicationClosed(a)) => Some(a.error_code.into_inner()),
            _ => None,
        }
    })
}

/// Issue 52: what `h3` 0.0.8 let pass on the client's unidirectional streams is a connection
/// error, with the code RFC 9114 and RFC 9204 name: a push stream from the client, a decreasing
/// MAX_PUSH_ID, a QPACK encoder stream setting a table weir never advertised, a decoder
/// stream's Insert Count Increment (zero) and Section Acknowledgment, a QPACK stream that ends,
/// and a second encoder stream. The allowed ones (a capacity of 0, a stream cancellation) keep
/// the connection, and requests go on.
#[test]
fn client_stream_errors_close_the_connection_with_the_rfcs_codes() {
    let s = setup("uni-errors", "", "", "");
    let cases: [(&str, Vec<u8>, bool, u64); 8] = [
        ("a push stream", vec![0x01], false, 0x103),
        (
            "MAX_PUSH_ID decreasing",
            vec![0x00, 0x04, 0x00, 0x0D, 0x01, 0x0A, 0x0D, 0x01, 0x05],
            false,
            0x108,
        ),
        (
            "a table capacity of 4096",
            vec![0x02, 0x3F, 0xE1, 0x1F],
            false,
            0x201,
        ),
        (
            "an Insert Count Increment of 0",
            vec![0x03, 0x00],
            false,
            0x202,
        ),
        ("a Section Acknowledgment", vec![0x03, 0x84], false, 0x202),
        (
            "a Stream Cancellation whose integer never ends",
            [vec![0x03, 0x7F], vec![0xFF; 12]].concat(),
            false,
            0x202,
        ),
        ("a QPACK stream that ends", vec![0x02], true, 0x104),
        ("two encoder streams", vec![0x02, 0x20], false, 0),
    ];
    for (what, bytes, finish, code) in cases {
        if code == 0 {
            continue;
        }
        assert_eq!(closed_with(&s, &bytes, finish), Some(code), "{what}");
    }
    // Two encoder streams on one connection.
    let c = Client::new(h3c::client_config(&s.pki.ca_der, false));
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    let code = c.rt.block_on(async {
        for _ in 0..2 {
            let mut tx = conn.open_uni().await.unwrap();
            tx.write_all(&[0x02, 0x20]).await.unwrap();
            std::mem::forget(tx);
        }
        match tokio::time::timeout(Duration::from_secs(5), conn.closed()).await {
            Ok(quinn::ConnectionError::ApplicationClosed(a)) => Some(a.error_code.into_inner()),
            _ => None,
        }
    });
    assert_eq!(code, Some(0x103), "two encoder streams");
    // What is allowed keeps the connection: capacity 0, a stream cancellation, and requests.
    let conn = c.connect(s.addr, "leaf.test").unwrap();
    c.rt.block_on(async {
        let mut enc = conn.open_uni().await.unwrap();
        enc.write_all(&[0x02, 0x20]).await.unwrap();
        let mut dec = conn.open_uni().await.unwrap();
        dec.write_all(&[0x03, 0x40, 0x7F, 0x85, 0x01])
            .await
            .unwrap();
        // A GET /hello by hand (the h3 client would open QPACK streams of its own): HEADERS
        // with :method GET, :scheme https, :authority and :path from QPACK's static table.
        let mut block = vec![0x00, 0x00, 0xD1, 0xD7];
        for (index, value) in [(0u8, "leaf.test"), (1, "/hello")] {
            block.push(0x50 | index);
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        let mut frame = vec![0x01, block.len() as u8];
        frame.extend_from_slice(&block);
        let (mut tx, mut rx) = conn.open_bi().await.unwrap();
        tx.write_all(&frame).await.unwrap();
        tx.finish().unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), rx.read_to_end(64 * 1024))
            .await
            .expect("an answer within 5 s")
            .expect("the request stream answered");
        assert_eq!(answer.first(), Some(&0x01), "a HEADERS frame: {answer:?}");
        assert!(conn.close_reason().is_none(), "{:?}", conn.close_reason());
        std::mem::forget((enc, dec));
    });
    inproc::stop(s.handle);
}
