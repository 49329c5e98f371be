//! TCP listeners (`tcp:`, `crate::tcp`): bytes relayed both ways with half-close kept, routing by
//! TLS server name without terminating, terminating TLS, the PROXY header to the upstream,
//! retries to the next server, the upstream's connection cap, the idle timeout, the access log
//! line, and the config's errors. Every backend is a real socket server in a thread.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{free_port, Running, WEIR};

/// A backend that echoes every byte until the client finishes sending, then closes its side.
fn echo_backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

/// A backend that answers `name`, then the first byte it received in hex, and closes.
fn named_backend(name: &'static str) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut first = [0u8; 1];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read_exact(&mut first);
            // One write, then FIN, then the rest of what the client sent is read: a socket
            // closed with unread bytes sends a reset, which could discard the answer in flight
            // (it once arrived as "B" alone on a loaded machine).
            let _ = s.write_all(format!("{name} {:02x}", first[0]).as_bytes());
            let _ = s.shutdown(Shutdown::Write);
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    addr
}

/// Sends `data`, finishes sending, and reads everything until the server closes.
fn send_all_read_all(s: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = s.try_clone().unwrap();
    let got = std::thread::spawn(move || {
        let mut out = Vec::new();
        reader.read_to_end(&mut out).map(|_| out)
    });
    s.write_all(data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    got.join().unwrap().unwrap()
}

/// A new connection to `addr` is closed before any byte arrives (a reset or an end, whichever
/// the client sees).
fn assert_closed_without_a_byte(addr: SocketAddr, what: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut [0u8; 1]);
    assert!(
        matches!(r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{what}: {r:?}"
    );
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn tcp_config(upstreams: &str, tcp: &str) -> String {
    format!("upstreams:\n{upstreams}listeners:\n  - address: 127.0.0.1:0\n    defer_accept: false\n    tcp: {tcp}\n")
}

/// A ClientHello asking for `name`, as a TLS client's first bytes.
fn client_hello(name: &str) -> Vec<u8> {
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut c = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let mut out = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut out).unwrap();
    }
    out
}

/// What a backend answered to `bytes` through the listener.
fn answer(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The example contract: `examples/tcp.yaml` as written, with its two variables, relays a MiB
/// each way, keeps the half-close (the backend answers after the client finished sending), and
/// logs one line for the connection.
#[test]
fn the_tcp_example_relays_both_ways_and_keeps_half_close() {
    let backend = echo_backend();
    let port = free_port();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut child = Running(
        Command::new(WEIR)
            .args(["run", "-c", "examples/tcp.yaml"])
            .env("WEIR_TCP_LISTEN", format!("127.0.0.1:{port}"))
            .env("WEIR_TCP_UPSTREAM", backend.to_string())
            .current_dir(root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    common::until("the example listens", Duration::from_secs(10), || {
        TcpStream::connect(addr).is_ok()
    });
    let data = pattern(1 << 20);
    let mut s = TcpStream::connect(addr).unwrap();
    let back = send_all_read_all(&mut s, &data);
    assert_eq!(back.len(), data.len());
    assert!(back == data, "the bytes came back changed");
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("an access log line for the relayed connection");
        if l.contains(" TCP ") && l.contains(" 1048576 1048576 ") {
            break l;
        }
    };
    assert!(
        line.contains(" TCP 200 1048576 1048576 ") && line.ends_with(&backend.to_string()),
        "{line}"
    );
}

/// Many connections at once, each moving a different amount both ways at the same time (the
/// client writes while it reads), through `splice` under back-pressure.
#[test]
fn concurrent_connections_move_their_own_bytes() {
    let backend = echo_backend();
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{backend}'] }}\n"),
        "{ upstream: b }",
    ));
    let addr = srv.addr;
    let workers: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let data = pattern((3 << 20) + i * 7919);
                let mut s = TcpStream::connect(addr).unwrap();
                let back = send_all_read_all(&mut s, &data);
                back == data
            })
        })
        .collect();
    for w in workers {
        assert!(
            w.join().unwrap(),
            "a connection got bytes that were not its own"
        );
    }
}

/// Routing by server name without terminating: the backend gets the ClientHello untouched (its
/// first byte is a TLS handshake record's), exact names and wildcards pick their upstream, and
/// everything else (another name, no TLS at all) goes to the default.
#[test]
fn server_names_pick_the_upstream_without_terminating() {
    let (a, b, other) = (named_backend("A"), named_backend("B"), named_backend("D"));
    let srv = common::start_config(&tcp_config(
        &format!("  a: {{ servers: ['{a}'] }}\n  b: {{ servers: ['{b}'] }}\n  d: {{ servers: ['{other}'] }}\n"),
        "{ upstream: d, routes: [ { sni: a.example, upstream: a }, { sni: ['*.b.example'], upstream: b } ] }",
    ));
    assert_eq!(answer(srv.addr, &client_hello("a.example")), "A 16");
    assert_eq!(answer(srv.addr, &client_hello("x.B.example")), "B 16");
    assert_eq!(answer(srv.addr, &client_hello("b.example")), "D 16");
    assert_eq!(answer(srv.addr, b"SSH-2.0-OpenSSH_9.2\r\n"), "D 53");
    // A ClientHello that arrives in pieces is joined before routing.
    let hello = client_hello("a.example");
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for part in hello.chunks(40) {
        s.write_all(part).unwrap();
        // paces: a piece every 15 ms.
        std::thread::sleep(Duration::from_millis(15));
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(out, "A 16");
}

/// Without a default upstream, a name no route takes is closed at once (nothing relayed).
#[test]
fn a_name_no_route_takes_is_closed_without_a_default() {
    let a = named_backend("A");
    let srv = common::start_config(&tcp_config(
        &format!("  a: {{ servers: ['{a}'] }}\n"),
        "{ routes: [ { sni: a.example, upstream: a } ] }",
    ));
    let started = Instant::now();
    assert_eq!(answer(srv.addr, &client_hello("z.example")), "");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(answer(srv.addr, &client_hello("a.example")), "A 16");
}

/// Terminating TLS: the client speaks TLS to weir, the backend gets plaintext, ALPN settles
/// nothing (the client's protocol is relayed as it is), and the client's close_notify reaches
/// the backend as a half-close.
#[test]
fn a_tls_listener_terminates_and_relays_plaintext() {
    let pki = common::tlskit::Pki::new("tcp-terminate");
    let cert = pki.issue("tcp", "tcp.example", &["tcp.example"]);
    let backend = echo_backend();
    let yaml = format!(
        "upstreams:\n  b: {{ servers: ['{backend}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls: {{ certificates: [{{ cert: '{}', key: '{}' }}] }}\n    tcp: {{ upstream: b }}\n",
        cert.cert.display(),
        cert.key.display()
    );
    let srv = common::start_config(&yaml);
    let cfg = common::tlskit::client_config(&pki.ca_der, &["h2", "http/1.1"], None);
    let mut s = common::tlskit::connect(srv.addr, "tcp.example", &cfg).unwrap();
    assert_eq!(
        s.conn.alpn_protocol(),
        None,
        "a TCP listener settles no ALPN"
    );
    s.write_all(b"plain bytes through TLS").unwrap();
    s.flush().unwrap();
    let mut got = [0u8; 23];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"plain bytes through TLS");
    s.conn.send_close_notify();
    s.flush().unwrap();
    // The backend saw the end, closed its side, and weir passed that on.
    let rest = common::tlskit::drain(&mut s);
    assert!(rest.is_empty(), "{rest:?}");
}

/// `send_proxy`: the backend first gets a PROXY header naming the client and the address it
/// connected to, v1 and v2, then the client's bytes.
#[test]
fn the_proxy_header_names_the_client() {
    let backend = echo_backend();
    for v in ["v1", "v2"] {
        let srv = common::start_config(&tcp_config(
            &format!("  b: {{ servers: ['{backend}'] }}\n"),
            &format!("{{ upstream: b, send_proxy: {v} }}"),
        ));
        let mut s = TcpStream::connect(srv.addr).unwrap();
        let me = s.local_addr().unwrap();
        let back = send_all_read_all(&mut s, b"after");
        assert!(back.ends_with(b"after"), "{v}: {back:?}");
        let header = &back[..back.len() - 5];
        if v == "v1" {
            assert_eq!(
                String::from_utf8_lossy(header),
                format!(
                    "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
                    me.port(),
                    srv.addr.port()
                )
            );
        } else {
            assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n");
            assert_eq!(header[12..14], [0x21, 0x11], "v2, PROXY, TCP over IPv4");
            assert_eq!(header.len(), 16 + 12);
            assert_eq!(&header[16..20], &[127, 0, 0, 1]);
            assert_eq!(u16::from_be_bytes([header[24], header[25]]), me.port());
            assert_eq!(
                u16::from_be_bytes([header[26], header[27]]),
                srv.addr.port()
            );
        }
    }
}

/// With a TLS upstream, the PROXY header goes first in clear, before the handshake (as
/// HAProxy's `send-proxy` with `ssl`; what nginx's `listen ... ssl proxy_protocol` expects).
#[test]
fn the_proxy_header_precedes_an_upstream_tls_handshake() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = l.local_addr().unwrap();
    let (tx, first) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        if let Some(Ok(mut s)) = l.incoming().next() {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 16];
            let _ = s.read_exact(&mut buf);
            let _ = tx.send(buf.to_vec());
        }
    });
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{backend}'], tls: {{ insecure_skip_verify: true, sni: b.example }}, retries: {{ attempts: 0 }} }}\n"),
        "{ upstream: b, send_proxy: v1 }",
    ));
    let _c = TcpStream::connect(srv.addr).unwrap();
    let got = first.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        got.starts_with(b"PROXY TCP4 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

/// A server that refuses connections is skipped for the next (the upstream's retries), and with
/// none reachable the client is closed at once rather than left hanging.
#[test]
fn a_dead_server_is_skipped_and_none_closes_the_client() {
    let live = echo_backend();
    let dead = format!("127.0.0.1:{}", free_port());
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{dead}', '{live}'] }}\n"),
        "{ upstream: b }",
    ));
    for _ in 0..6 {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        assert_eq!(send_all_read_all(&mut s, b"ping"), b"ping");
    }
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{dead}'] }}\n"),
        "{ upstream: b }",
    ));
    let started = Instant::now();
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(out.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// The upstream's `limits.max_connections` holds for relayed connections: one over is closed,
/// and its place is free again once the first ends.
#[test]
fn the_upstream_connection_cap_holds() {
    let backend = echo_backend();
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{backend}'], limits: {{ max_connections: 1 }} }}\n"),
        "{ upstream: b }",
    ));
    let mut first = TcpStream::connect(srv.addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    first.write_all(b"hold").unwrap();
    let mut got = [0u8; 4];
    first.read_exact(&mut got).unwrap();
    // Over the cap: closed without a byte (a reset or an end, whichever the client sees).
    assert_closed_without_a_byte(srv.addr, "over the cap");
    assert_eq!(send_all_read_all(&mut first, b"!"), b"!");
    common::until("the place is free again", Duration::from_secs(5), || {
        let mut third = TcpStream::connect(srv.addr).unwrap();
        send_all_read_all(&mut third, b"again") == b"again"
    });
}

/// A reload keeps the live count under the upstream's cap: the connection open before it
/// still holds its place (else each reload would let another full cap through).
#[test]
fn a_reload_keeps_the_cap_s_count() {
    let backend = echo_backend();
    let yaml = tcp_config(
        &format!("  b: {{ servers: ['{backend}'], limits: {{ max_connections: 1 }} }}\n"),
        "{ upstream: b }",
    );
    let srv = common::start_config(&yaml);
    let mut first = TcpStream::connect(srv.addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    first.write_all(b"hold").unwrap();
    first.read_exact(&mut [0u8; 4]).unwrap();
    let handle = srv.handle.as_ref().unwrap();
    let cfg = weir::runtime::compile_str(
        &yaml,
        std::path::Path::new("."),
        |_| None,
        &handle.registry(),
    )
    .unwrap();
    handle.reload(cfg).unwrap();
    assert_closed_without_a_byte(srv.addr, "over the cap after a reload");
    assert_eq!(send_all_read_all(&mut first, b"!"), b"!");
}

/// A server that answers and closes while the client still uploads: the answer reaches the
/// client (the failed upload direction does not cancel the download).
#[test]
fn an_answer_sent_before_the_server_closes_is_delivered() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(10) {
            let Ok(mut s) = s else { return };
            let mut some = [0u8; 100];
            let _ = s.read_exact(&mut some);
            let _ = s.write_all(&[b'a'; 2000]);
            // Closing with unread bytes queued sends a reset after the answer.
        }
    });
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{backend}'] }}\n"),
        "{ upstream: b }",
    ));
    for _ in 0..10 {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reader = s.try_clone().unwrap();
        let got = std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            out.len()
        });
        // Keep uploading well past what the server reads.
        for _ in 0..200 {
            if s.write_all(&[b'u'; 4096]).is_err() {
                break;
            }
        }
        assert_eq!(got.join().unwrap(), 2000, "the answer arrived whole");
    }
}

/// A backend that says `name` when a connection opens and keeps it until the client closes;
/// with the count of its connections open.
fn greeting_backend(name: &'static str) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = open.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let count = count.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(name.as_bytes());
                let _ = s.read_to_end(&mut Vec::new());
                drop(s);
                count.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

/// `least_conn` sees the relayed connections: with A's closed and B's still open, the next
/// connections go to A.
#[test]
fn least_conn_counts_open_connections() {
    let ((a, a_open), (b, _)) = (greeting_backend("A"), greeting_backend("B"));
    let srv = common::start_config(&format!(
        "workers: 1\nadmin: {{ address: 127.0.0.1:0 }}\nupstreams:\n  p: {{ servers: ['{a}', '{b}'], policy: least_conn }}\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: {{ upstream: p }}\n"
    ));
    let admin = srv.handle.as_ref().unwrap().admin_addr().unwrap();
    let on_a_now = || {
        common::parked::metric(
            admin,
            &format!("weir_upstream_in_flight{{upstream=\"p\",server=\"{a}\"}}"),
        )
    };
    let open = || {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut who = [0u8; 1];
        s.read_exact(&mut who).unwrap();
        (who[0], s)
    };
    let held: Vec<(u8, TcpStream)> = (0..6).map(|_| open()).collect();
    let on_a = held.iter().filter(|(w, _)| *w == b'A').count();
    assert_eq!(on_a, 3, "least_conn spreads 6 connections 3 and 3");
    assert_eq!(on_a_now(), 3.0, "A's relays counted");
    let (on_a, on_b): (Vec<_>, Vec<_>) = held.into_iter().partition(|(w, _)| *w == b'A');
    drop(on_a);
    common::until("A's connections closed", Duration::from_secs(5), || {
        a_open.load(std::sync::atomic::Ordering::SeqCst) == 0
    });
    // The backend closed its side; weir's relay ends when that close reaches it, and stops
    // counting the connection against A.
    common::until("A's relays ended", Duration::from_secs(10), || {
        on_a_now() == 0.0
    });
    let next: Vec<u8> = (0..3).map(|_| open().0).collect();
    assert_eq!(next, b"AAA", "A had none open, B three");
    drop(on_b);
}

/// `active_health: { tcp: true }` marks a server that refuses connections down, so no
/// connection is sent to it (no retries, no passive health here to hide it).
#[test]
fn a_connect_check_takes_a_dead_server_out() {
    let live = echo_backend();
    let dead = format!("127.0.0.1:{}", free_port());
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{dead}', '{live}'], retries: {{ attempts: 0 }}, passive_health: {{ max_fails: 0 }}, active_health: {{ tcp: true, interval: 100ms, fall: 1, rise: 1 }} }}\n"),
        "{ upstream: b }",
    ));
    common::until(
        "the dead server marked down",
        Duration::from_secs(10),
        || {
            // A connection sent to the dead server is closed at once: any error is a miss.
            (0..6).all(|_| {
                let Ok(mut s) = TcpStream::connect(srv.addr) else {
                    return false;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut got = Vec::new();
                s.write_all(b"ping").is_ok()
                    && s.shutdown(Shutdown::Write).is_ok()
                    && s.read_to_end(&mut got).is_ok()
                    && got == b"ping"
            })
        },
    );
    let e = common::config_error(
        "upstreams: { b: { servers: ['127.0.0.1:9'], active_health: { tcp: true, path: /h } } }\nlisteners: []\n",
    );
    assert!(e.contains("upstreams.b.active_health"), "{e}");
    let e = common::config_error(
        "upstreams: { b: { servers: ['127.0.0.1:9'], active_health: { interval: 1s } } }\nlisteners: []\n",
    );
    assert!(e.contains("upstreams.b.active_health.path"), "{e}");
}

/// Nothing moving either way for `idle_timeout` closes the connection; traffic keeps it.
#[test]
fn an_idle_connection_is_closed() {
    let backend = echo_backend();
    let srv = common::start_config(&tcp_config(
        &format!("  b: {{ servers: ['{backend}'] }}\n"),
        "{ upstream: b, idle_timeout: 400ms }",
    ));
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Traffic every 200 ms for a second keeps it open.
    for _ in 0..5 {
        s.write_all(b"k").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        // paces: traffic every 200 ms, within the 400 ms idle timeout.
        std::thread::sleep(Duration::from_millis(200));
    }
    let quiet = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let waited = quiet.elapsed();
    assert!(rest.is_empty());
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn tcp_config_errors_name_the_key() {
    let cases = [
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'] } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { upstream: b }\n    routes: [ { respond: { status: 200 } } ]\n",
            "listeners[0].routes",
        ),
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'] } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { upstream: nope }\n",
            "listeners[0].tcp.upstream",
        ),
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'], protocol: h2 } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { upstream: b }\n",
            "HTTP/2",
        ),
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'] } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { upstream: b, send_proxy: v3 }\n",
            "listeners[0].tcp.send_proxy",
        ),
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'] } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { routes: [ { upstream: b } ] }\n",
            "listeners[0].tcp.routes[0].sni",
        ),
        (
            "upstreams: { b: { servers: ['127.0.0.1:9'], policy: consistent_hash } }\nlisteners:\n  - address: 127.0.0.1:0\n    tcp: { upstream: b }\n",
            "hash_key: ip",
        ),
        (
            "listeners:\n  - address: 127.0.0.1:0\n    tcp: {}\n",
            "listeners[0].tcp",
        ),
    ];
    for (yaml, want) in cases {
        let e = common::config_error(yaml);
        assert!(e.contains(want), "{want:?} not in {e}");
    }
}

/// Issue 52: ten bytes of a ClientHello and then a FIN on a listener that routes by server
/// name. The hello can never complete, and the end of stream stays readable, so the peek used
/// to loop without sleeping until `timeouts.header` (8.6 s of CPU in 12 s). Now the wait ends
/// at the FIN: the connection is routed as one without a name (to the default upstream), at
/// once, and the process spends next to no CPU while eight such clients sit there.
#[test]
fn a_partial_hello_then_fin_costs_no_cpu() {
    let (a, other) = (named_backend("A"), named_backend("D"));
    let port = free_port();
    let cfg = common::process::write_config(
        "sni-fin",
        &format!(
            "workers: 1\ntimeouts: {{ header: 20s }}\n{}",
            tcp_config(
                &format!("  a: {{ servers: ['{a}'] }}\n  d: {{ servers: ['{other}'] }}\n"),
                "{ upstream: d, routes: [ { sni: a.example, upstream: a } ] }",
            )
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
        ),
    );
    let child = Running(
        Command::new(WEIR)
            .args(["run", "-c"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    common::until("weir listens", Duration::from_secs(10), || {
        TcpStream::connect(addr).is_ok()
    });
    let hello = client_hello("a.example");
    let before = common::process::cpu_secs(child.id());
    let started = Instant::now();
    let conns: Vec<_> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            s.write_all(&hello[..10]).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            s
        })
        .collect();
    // Each is relayed to the default upstream as soon as its FIN arrives.
    for mut s in conns {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert_eq!(out, "D 16", "a partial hello routes as no name");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "routing waited for the header timeout: {:?}",
        started.elapsed()
    );
    // Four more that send part of a hello, then one byte of urgent data, and stall: urgent data
    // makes the socket readable but a peek skips it (review of issue 52: the peek spun on it,
    // 0.9 s of CPU a second).
    let stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            (&s).write_all(&hello[..10]).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: a live socket's descriptor and a one-byte buffer that outlives the call.
            #[allow(unsafe_code)]
            let sent = unsafe { libc::send(s.as_raw_fd(), b"!".as_ptr().cast(), 1, libc::MSG_OOB) };
            assert_eq!(sent, 1);
            s
        })
        .collect();
    // A second of quiet: the worker is idle, not spinning on the closed or stalled sockets.
    // paces: the second the CPU time is measured over.
    std::thread::sleep(Duration::from_secs(1));
    drop(stalled);
    let spent = common::process::cpu_secs(child.id()) - before;
    assert!(spent < 0.5, "the process spent {spent:.2} s of CPU");
    // A whole hello still routes by its name.
    assert_eq!(answer(addr, &client_hello("a.example")), "A 16");
    let _ = std::fs::remove_file(cfg);
}
