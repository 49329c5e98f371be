//! Upstream servers on unix-domain sockets (`unix:/run/app.sock`): HTTP/1.1 with connection reuse
//! and the desync probe, HTTP/2 (`protocol: h2`), active health checks, TCP listeners relaying to
//! one, and the config's errors. Every origin is a real server on a socket file.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A socket path of this test's own.
fn sock(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("weir-unix-{tag}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// An HTTP/1.1 keep-alive origin on a unix socket: answers each request with `body` and the
/// Host it got; counts connections. With `stray`, a second response follows each one (an origin
/// that desynchronises its connection).
fn unix_origin(
    path: &PathBuf,
    body: &'static str,
    stray: bool,
) -> (Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let l = UnixListener::bind(path).unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let (c, h) = (conns.clone(), hosts.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            c.fetch_add(1, Ordering::SeqCst);
            let h = h.clone();
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                loop {
                    let mut host = String::new();
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut f = String::new();
                        if r.read_line(&mut f).unwrap_or(0) == 0 {
                            return;
                        }
                        if f.trim_end().is_empty() {
                            break;
                        }
                        if let Some(v) = f.strip_prefix("Host:").or_else(|| f.strip_prefix("host:"))
                        {
                            host = v.trim().to_string();
                        }
                    }
                    h.lock().unwrap().push(host);
                    let mut out = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stray {
                        out.push_str("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED");
                    }
                    if w.write_all(out.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (conns, hosts)
}

fn proxy_config(upstream: &str) -> String {
    format!(
        "upstreams:\n  app: {upstream}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: app }}\n"
    )
}

/// The example contract: a `unix:/path` server reaches the HTTP server on that socket; the
/// client's Host goes through, and the connection is reused.
#[test]
fn a_unix_socket_server_answers_and_its_connection_is_reused() {
    let path = sock("h1");
    let (conns, hosts) = unix_origin(&path, "from the socket", false);
    let srv = common::start_config(&proxy_config(&format!(
        "{{ servers: ['unix:{}'] }}",
        path.display()
    )));
    let mut s = srv.connect();
    for _ in 0..3 {
        let r = common::roundtrip(&mut s, b"GET /x HTTP/1.1\r\nHost: app.example\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "from the socket");
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1, "one connection, reused");
    assert!(hosts.lock().unwrap().iter().all(|h| h == "app.example"));
    // HTTP/1.0 without Host: the upstream still gets one (`localhost` for a socket).
    let mut s = srv.connect();
    s.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(hosts.lock().unwrap().last().unwrap(), "localhost");
    let _ = std::fs::remove_file(&path);
}

/// Bytes after a complete response on a unix socket are caught as on TCP: that connection is
/// not reused, so no client gets the injected response.
#[test]
fn stray_bytes_on_a_unix_socket_are_not_served() {
    let path = sock("desync");
    let (conns, _) = unix_origin(&path, "real", true);
    let srv = common::start_config(&proxy_config(&format!(
        "{{ servers: ['unix:{}'] }}",
        path.display()
    )));
    for _ in 0..4 {
        let r = common::get(srv.addr, "/x");
        assert_eq!(r.text(), "real");
    }
    assert_eq!(conns.load(Ordering::SeqCst), 4, "never reused");
    let _ = std::fs::remove_file(&path);
}

/// A socket file with nobody listening is a 502, and the client is told so.
#[test]
fn a_missing_socket_is_a_502() {
    let path = sock("missing");
    let srv = common::start_config(&proxy_config(&format!(
        "{{ servers: ['unix:{}'] }}",
        path.display()
    )));
    assert_eq!(common::get(srv.addr, "/").status, 502);
}

/// Active health checks reach the socket too: a server answering 503 to them is marked down
/// (503 for requests), the other serves.
#[test]
fn health_checks_reach_a_unix_socket() {
    let (good, bad) = (sock("good"), sock("bad"));
    unix_origin(&good, "good", false);
    let l = UnixListener::bind(&bad).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbad");
        }
    });
    let srv = common::start_config(&proxy_config(&format!(
        "{{ servers: ['unix:{}', 'unix:{}'], active_health: {{ path: /health, interval: 100ms, fall: 1, rise: 1 }} }}",
        good.display(),
        bad.display()
    )));
    common::until(
        "the failing socket is marked down",
        Duration::from_secs(10),
        || (0..4).all(|_| common::get(srv.addr, "/").text() == "good"),
    );
    let _ = std::fs::remove_file(&good);
    let _ = std::fs::remove_file(&bad);
}

/// `protocol: h2` over a unix socket (gRPC servers often listen on one).
#[test]
fn http2_reaches_a_unix_socket() {
    let path = sock("h2");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::UnixListener::from_std(l).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(s).await.unwrap();
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        let body = format!(
                            "h2 {} {}",
                            req.uri().authority().map_or("-", |a| a.as_str()),
                            req.uri().path()
                        );
                        let resp = http::Response::builder().status(200).body(()).unwrap();
                        let mut send = respond.send_response(resp, false).unwrap();
                        send.send_data(bytes::Bytes::from(body), true).unwrap();
                    }
                });
            }
        });
    });
    let srv = common::start_config(&proxy_config(&format!(
        "{{ servers: ['unix:{}'], protocol: h2 }}",
        path.display()
    )));
    let r = common::get(srv.addr, "/over/h2");
    assert_eq!(r.status, 200);
    assert!(
        r.text().starts_with("h2 ") && r.text().ends_with(" /over/h2"),
        "{}",
        r.text()
    );
    let _ = std::fs::remove_file(&path);
}

/// A TCP listener relays to a server on a unix socket (bytes both ways, half-close kept).
#[test]
fn a_tcp_listener_relays_to_a_unix_socket() {
    let path = sock("tcp");
    let l = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut all = Vec::new();
            let _ = s.read_to_end(&mut all);
            let _ = s.write_all(format!("got {} bytes", all.len()).as_bytes());
        }
    });
    let srv = common::start_config(&format!(
        "upstreams:\n  app: {{ servers: ['unix:{}'] }}\nlisteners:\n  - address: 127.0.0.1:0\n    defer_accept: false\n    tcp: {{ upstream: app }}\n",
        path.display()
    ));
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&vec![7u8; 100_000]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert_eq!(out, "got 100000 bytes");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn unix_server_errors_name_the_key() {
    for (upstream, want) in [
        ("{ servers: ['unix:run/app.sock'] }", "absolute path"),
        (
            "{ servers: ['unix:/run/app.sock'], tls: {} }",
            "cannot be in an upstream that speaks TLS",
        ),
    ] {
        let e = common::config_error(&proxy_config(upstream));
        assert!(
            e.contains("upstreams.app.servers[0]") && e.contains(want),
            "{e}"
        );
    }
}
