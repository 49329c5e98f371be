//! Listeners on unix-domain sockets (`address: unix:/run/weir/http.sock`, `unix_mode`): HTTP/1.1
//! with keep-alive, files sent with `sendfile`, proxying (`X-Forwarded-For: unix:`), TLS,
//! the PROXY protocol, the socket file's mode, stale files replaced and live ones refused,
//! reloads adding and removing them, the file removed at shutdown, and the config's errors.
//! Every client is a real unix socket.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::inproc::{start, start_error, unix_connect};

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use common::origin::http_origin;

fn exchange(s: &mut UnixStream, raw: &str) -> common::Response {
    s.write_all(raw.as_bytes()).unwrap();
    common::read_response_to(s, false)
}

#[test]
fn http_over_a_unix_socket_keeps_alive_sends_files_and_proxies() {
    let d = common::inproc::dir("ulisten", "http");
    let sock = d.join("http.sock");
    let log = d.join("access.log");
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/big.bin"), &big).unwrap();
    let origin = http_origin(|req| {
        let xff = req.header("x-forwarded-for").unwrap_or("-").to_string();
        let fwd = req.header("forwarded").unwrap_or("-").to_string();
        common::origin::ok(&format!("xff={xff} fwd={fwd}"))
    });
    let h = start(&format!(
        r#"workers: 2
upstreams: {{ app: {{ servers: ["{origin}"] }} }}
listeners:
  - address: "unix:{sock}"
    unix_mode: "0660"
    access_log: {{ path: "{log}", format: "$remote_addr $status $request_uri" }}
    routes:
      - match: {{ path: /hello }}
        respond: {{ body: "hello from $remote_addr\n" }}
      - match: {{ path_prefix: /files/ }}
        static: {{ root: "{www}", strip_prefix: true }}
      - match: {{ path_prefix: /app }}
        proxy: {{ upstream: app, forwarded: {{ forwarded: true }} }}
"#,
        origin = origin.addr,
        sock = sock.display(),
        log = log.display(),
        www = d.join("www").display(),
    ));
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "the socket file has unix_mode");
    assert!(
        h.local_urls()
            .contains(&format!("unix:{} (http)", sock.display())),
        "{:?}",
        h.local_urls()
    );

    let mut c = unix_connect(&sock);
    let r = exchange(&mut c, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello from unix:\n");
    // The same connection again: keep-alive, then a 1 MiB file through sendfile.
    let r = exchange(&mut c, "GET /files/big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body == big, "the file arrives whole");
    let r = exchange(&mut c, "GET /app/x HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "xff=unix: fwd=for=unknown;proto=http;host=\"a\"");
    // Connections spread over the two workers, which share the one socket.
    let many: Vec<_> = (0..16)
        .map(|_| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut c = unix_connect(&sock);
                exchange(&mut c, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n").status
            })
        })
        .collect();
    for t in many {
        assert_eq!(t.join().unwrap(), 200);
    }
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    common::until("the access log lines", Duration::from_secs(10), || {
        read_log().lines().count() >= 19
    });
    let logged = read_log();
    assert!(logged.contains("unix: 200 /hello"), "log: {logged:?}");
    assert!(logged.contains("unix: 200 /files/big.bin"), "{logged}");
    drop(c);
    h.shutdown();
    h.join();
    assert!(!sock.exists(), "the socket file is removed at shutdown");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tls_and_the_proxy_protocol_work_on_unix_sockets() {
    let d = common::inproc::dir("ulisten", "tls");
    let tls_sock = d.join("tls.sock");
    let pp_sock = d.join("pp.sock");
    let pki = common::tlskit::Pki::new("ulisten");
    let cert = pki.issue("site", "site.test", &["site.test"]);
    let h = start(&format!(
        r#"workers: 1
listeners:
  - address: "unix:{tls}"
    tls: {{ certificates: [ {{ cert: "{cert}", key: "{key}" }} ] }}
    routes:
      - respond: {{ body: "secure $scheme\n" }}
  - address: "unix:{pp}"
    proxy_protocol: {{ trusted: [127.0.0.1/32] }}
    routes:
      - respond: {{ body: "client $remote_addr\n" }}
"#,
        tls = tls_sock.display(),
        pp = pp_sock.display(),
        cert = cert.cert.display(),
        key = cert.key.display(),
    ));
    let cfg = common::tlskit::client_config(&pki.ca_der, &["http/1.1"], None);
    let name = rustls::pki_types::ServerName::try_from("site.test").unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, unix_connect(&tls_sock));
    s.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let r = common::read_response_to(&mut s, false);
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "secure https\n");

    // On a unix socket every client may send the header (the file's mode decides who
    // connects); the address it names is the client's.
    let mut c = unix_connect(&pp_sock);
    let r = exchange(
        &mut c,
        "PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "client 203.0.113.7\n");
    let mut c = unix_connect(&pp_sock);
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "no PROXY header: closed without an answer, got {:?}",
        String::from_utf8_lossy(&rest)
    );
    h.shutdown();
    h.join();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_stale_socket_file_is_replaced_and_anything_else_is_refused() {
    let d = common::inproc::dir("ulisten", "stale");
    let sock = d.join("s.sock");
    let config = |p: &Path| {
        format!(
            "workers: 1\nlisteners:\n  - address: \"unix:{}\"\n    routes:\n      - respond: {{ body: ok }}\n",
            p.display()
        )
    };
    // Left by a process that died: nobody answers on it.
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let h = start(&config(&sock));
    let r = exchange(
        &mut unix_connect(&sock),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(r.text(), "ok");

    // Somebody (this weir) listens there: a second server is refused and the first goes on.
    let e = start_error(&config(&sock));
    assert!(
        e.contains("listeners[0].address") && e.contains("a process is listening"),
        "{e}"
    );
    let r = exchange(
        &mut unix_connect(&sock),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(r.text(), "ok");
    h.shutdown();
    h.join();

    // A regular file is never removed.
    let file = d.join("data.txt");
    std::fs::write(&file, "keep me").unwrap();
    let e = start_error(&config(&file));
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // Nor a directory that does not exist created.
    let e = start_error(&config(&d.join("missing/s.sock")));
    assert!(e.contains("cannot listen on unix:"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn reloads_add_and_remove_unix_listeners() {
    let d = common::inproc::dir("ulisten", "reload");
    let sock = d.join("r.sock");
    let tcp_only = "workers: 2\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { body: tcp }\n";
    let h = start(tcp_only);
    let with_unix = format!(
        "{tcp_only}  - address: \"unix:{}\"\n    routes:\n      - respond: {{ body: unix }}\n",
        sock.display()
    );
    let cfg =
        weir::runtime::compile_str(&with_unix, Path::new("."), |_| None, &h.registry()).unwrap();
    h.reload(cfg).unwrap();
    let r = exchange(
        &mut unix_connect(&sock),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    );
    assert_eq!(r.text(), "unix");
    // A kept connection answers the request it is on, then closes; the file goes at once.
    let mut kept = unix_connect(&sock);
    let r = exchange(&mut kept, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.text(), "unix");
    let cfg =
        weir::runtime::compile_str(tcp_only, Path::new("."), |_| None, &h.registry()).unwrap();
    h.reload(cfg).unwrap();
    assert!(!sock.exists(), "a removed unix listener's file is removed");
    let r = exchange(&mut kept, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(UnixStream::connect(&sock).is_err());
    assert_eq!(common::get(h.local_addrs()[0], "/").text(), "tcp");
    h.shutdown();
    h.join();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn unix_listener_config_errors_name_the_key() {
    let cases = [
        (
            "listeners:\n  - address: unix:run/weir.sock\n    routes: [ { respond: { body: x } } ]\n",
            "listeners[0].address",
            "must be absolute",
        ),
        (
            "listeners:\n  - address: 127.0.0.1:0\n    unix_mode: \"0660\"\n    routes: [ { respond: { body: x } } ]\n",
            "listeners[0].unix_mode",
            "only a unix listener",
        ),
        (
            "listeners:\n  - address: unix:/tmp/x.sock\n    unix_mode: \"0999\"\n    routes: [ { respond: { body: x } } ]\n",
            "listeners[0].unix_mode",
            "not a file mode",
        ),
        (
            "listeners:\n  - address: unix:/tmp/x.sock\n    routes: [ { respond: { body: x } } ]\n  - address: unix:/tmp/x.sock\n    routes: [ { respond: { body: y } } ]\n",
            "listeners[1].address",
            "listed twice",
        ),
        (
            "listeners:\n  - address: unix:/tmp/x.sock\n    defer_accept: true\n    routes: [ { respond: { body: x } } ]\n",
            "listeners[0].defer_accept",
            "TCP listeners",
        ),
    ];
    for (yaml, key, says) in cases {
        let e = common::config_error(yaml);
        assert!(e.contains(key) && e.contains(says), "{yaml}\n→ {e}");
    }
    let long = format!("/tmp/{}.sock", "x".repeat(110));
    let e = common::config_error(&format!(
        "listeners:\n  - address: unix:{long}\n    routes: [ {{ respond: {{ body: x }} }} ]\n"
    ));
    assert!(e.contains("at most 107 bytes"), "{e}");
}

/// `weir check` looks at a unix listener's path without creating it.
#[test]
fn weir_check_reports_a_unix_path_in_use() {
    let d = common::inproc::dir("ulisten", "check");
    let sock = d.join("busy.sock");
    let _held = UnixListener::bind(&sock).unwrap();
    let cfg = common::process::write_config(
        "ulisten-check",
        &format!(
            "listeners:\n  - address: \"unix:{}\"\n    routes: [ {{ respond: {{ body: x }} }} ]\n",
            sock.display()
        ),
    );
    let out = std::process::Command::new(common::process::WEIR)
        .args(["check", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("cannot bind unix:{}", sock.display()))
            && err.contains("a process is listening"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// An idle unix connection parks (its task and registration freed) like a TCP one, and is
/// served again when its next request comes.
#[test]
fn idle_unix_connections_park_and_wake() {
    let d = common::inproc::dir("ulisten", "park");
    let sock = d.join("p.sock");
    let h = start(&format!(
        "workers: 1\ntimeouts: {{ header: 2s }}\nadmin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: \"unix:{}\"\n    routes:\n      - respond: {{ body: \"again $remote_addr\\n\" }}\n",
        sock.display()
    ));
    let admin = h.admin_addr().unwrap();
    let mut c = unix_connect(&sock);
    let r = exchange(&mut c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.text(), "again unix:\n");
    common::parked::wait_parked(admin, 1.0);
    for _ in 0..3 {
        let r = exchange(&mut c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "again unix:\n");
    }
    h.shutdown();
    h.join();
    let _ = std::fs::remove_dir_all(&d);
}
