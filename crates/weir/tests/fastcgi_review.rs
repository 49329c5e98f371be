//! What the outside review of the FastCGI work (issue 53) found, each kept as a test that
//! failed before its fix: slow uploads held every php-fpm child (the body is now whole before
//! the application is asked), `%2F` became a separator no route saw, a site's body limit was
//! lost when a route set another limit, flushed output was held back, the script cache
//! answered across roots, and `Front-End-Https` reached PHP; and, of the native exchange (no
//! probe before a GET), a kept connection out of step answered a client with the previous
//! client's response.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::inproc;
use common::phpfpm::PhpFpm;

fn root(tag: &str) -> std::path::PathBuf {
    let root = inproc::dir("fcgi-review", tag);
    let w = |name: &str, text: &str| {
        let p = root.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("index.php", "<?php echo 'index';");
    w("secret.php", "<?php echo 'secret ran';");
    w("uploads/evil.php", "<?php echo 'UPLOADED PHP EXECUTED';");
    w("private/file.txt", "private file");
    w("sub/ok.php", "<?php echo 'sub ok';");
    w(
        "env.php",
        "<?php echo 'FEH=', $_SERVER['HTTP_FRONT_END_HTTPS'] ?? '-', ' HTTPS=', $_SERVER['HTTPS'] ?? '-';",
    );
    w(
        "flush.php",
        "<?php while (ob_get_level()) { ob_end_flush(); } echo 'first'; flush(); sleep(2); echo 'second';",
    );
    std::os::unix::fs::symlink(root.join("secret.php"), root.join("sub/esc.php")).unwrap();
    assert!(std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&root)
        .status()
        .unwrap()
        .success());
    root
}

fn get(addr: SocketAddr, raw: &str) -> common::Response {
    let mut s = common::connect(addr);
    common::roundtrip(&mut s, raw.as_bytes())
}

#[test]
fn slow_uploads_hold_no_php_fpm_child() {
    let Some(fpm) = PhpFpm::start("review-slow", false, 2, "") else {
        return;
    };
    let root = root("slow");
    let handle = inproc::start(&format!(
        r#"workers: 1
limits: {{ max_body_bytes: 2m }}
timeouts: {{ body: 30s }}
upstreams:
  php: {{ servers: ['{}'], protocol: fastcgi, fastcgi: {{ root: '{}' }} }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: php }}
"#,
        fpm.server,
        root.display()
    ));
    let addr = handle.local_addrs()[0];
    // Four uploads (twice the pool), each stalled after its first kilobyte.
    let uploads: Vec<_> = (0..4)
        .map(|_| {
            let mut s = common::connect(addr);
            s.write_all(b"POST /index.php HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n")
                .unwrap();
            s.write_all(&[b'x'; 1000]).unwrap();
            s
        })
        .collect();
    // paces: the uploads are under way when the site is asked.
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let r = get(addr, "GET /index.php HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "index"));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the site waited {:?} behind stalled uploads",
        t.elapsed()
    );
    drop(uploads);
    inproc::stop(handle);
}

#[test]
fn escaped_slashes_site_limits_flushes_roots_and_claims() {
    let Some(fpm) = PhpFpm::start("review-misc", false, 4, "") else {
        return;
    };
    let root = root("misc");
    let handle = inproc::start(&format!(
        r#"workers: 1
limits: {{ encoded_slashes: keep }}
upstreams:
  php: {{ servers: ['{fpm}'], protocol: fastcgi, fastcgi: {{ root: '{root}' }} }}
  sub: {{ servers: ['{fpm}'], protocol: fastcgi, fastcgi: {{ root: '{root}/sub' }} }}
listeners:
  - address: 127.0.0.1:0
    sites:
      - hosts: sub.test
        routes:
          - proxy: {{ upstream: sub }}
      - hosts: limits.test
        limits: {{ max_body_bytes: 10 }}
        routes:
          - match: {{ path_prefix: /a/ }}
            limits: {{ body_timeout: 60s }}
            echo: {{}}
      - default: true
        routes:
          - match: {{ path_prefix: /uploads/ }}
            static: {{ root: '{root}' }}
          - match: {{ path_prefix: /private/ }}
            respond: {{ status: 403 }}
          - match: {{ path_regex: '\.php' }}
            proxy: {{ upstream: php }}
          - static: {{ root: '{root}' }}
"#,
        fpm = fpm.server,
        root = root.display()
    ));
    let addr = handle.local_addrs()[0];
    // An escaped slash never becomes a separator past the routes.
    let r = get(addr, "GET /uploads%2Fevil.php HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(!r.text().contains("EXECUTED"), "{} {}", r.status, r.text());
    let r = get(addr, "GET /private%2Ffile.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(
        !r.text().contains("private file"),
        "{} {}",
        r.status,
        r.text()
    );
    // A site's body limit holds on a route that sets another limit.
    let body = "x".repeat(1000);
    let r = get(
        addr,
        &format!(
            "POST /a/ HTTP/1.1\r\nHost: limits.test\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    );
    assert_eq!(r.status, 413);
    // One upstream's answer for a script is not another's (a symlink inside `sub` to a
    // script outside it runs under the parent root only).
    assert_eq!(
        get(addr, "GET /sub/esc.php HTTP/1.1\r\nHost: t\r\n\r\n").text(),
        "secret ran"
    );
    let r = get(addr, "GET /esc.php HTTP/1.1\r\nHost: sub.test\r\n\r\n");
    assert_eq!(r.status, 404, "{}", r.text());
    // A client's claim of TLS does not reach PHP.
    let r = get(
        addr,
        "GET /env.php HTTP/1.1\r\nHost: t\r\nFront-End-Https: on\r\n\r\n",
    );
    assert_eq!(r.text(), "FEH=- HTTPS=-");
    // Flushed output reaches the client as it is written.
    let mut s = common::connect(addr);
    s.write_all(b"GET /flush.php HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut seen = Vec::new();
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("first")
        && t.elapsed() < Duration::from_millis(1500)
    {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    assert!(
        String::from_utf8_lossy(&seen).contains("first"),
        "the flushed part was held back: {:?}",
        String::from_utf8_lossy(&seen)
    );
    assert!(!String::from_utf8_lossy(&seen).contains("second"));
    inproc::stop(handle);
}

/// A FastCGI responder on loopback that answers each request on a kept connection with
/// `resp-for:QUERY`; for `?stale` it writes a second response (another STDOUT and END_REQUEST
/// of the same request) 200 ms after its END_REQUEST, as a broken application might.
fn stale_responder() -> SocketAddr {
    fn record(kind: u8, id: u16, content: &[u8]) -> Vec<u8> {
        let mut r = vec![1, kind];
        r.extend_from_slice(&id.to_be_bytes());
        r.extend_from_slice(&(content.len() as u16).to_be_bytes());
        r.extend_from_slice(&[0, 0]);
        r.extend_from_slice(content);
        r
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || loop {
                // One request: its records until the empty STDIN.
                let mut query = String::new();
                let mut id;
                loop {
                    let mut h = [0u8; 8];
                    if c.read_exact(&mut h).is_err() {
                        return;
                    }
                    let len = u16::from_be_bytes([h[4], h[5]]) as usize + h[6] as usize;
                    let mut body = vec![0u8; len];
                    if c.read_exact(&mut body).is_err() {
                        return;
                    }
                    id = u16::from_be_bytes([h[2], h[3]]);
                    let content = &body[..len - h[6] as usize];
                    if h[1] == 4 {
                        let text = String::from_utf8_lossy(content);
                        if let Some(q) = text.split("QUERY_STRING").nth(1) {
                            query = q
                                .chars()
                                .take_while(|c| c.is_ascii_alphanumeric())
                                .collect();
                        }
                    }
                    if h[1] == 5 && content.is_empty() {
                        break;
                    }
                }
                let text = format!("Content-Type: text/plain\r\n\r\nresp-for:{query}");
                let mut out = record(6, id, text.as_bytes());
                out.extend(record(3, id, &[0; 8]));
                if c.write_all(&out).is_err() {
                    return;
                }
                if query == "stale" {
                    std::thread::sleep(Duration::from_millis(200));
                    let mut late = record(
                        6,
                        id,
                        b"Content-Type: text/plain\r\n\r\nSTALE-from-previous",
                    );
                    late.extend(record(3, id, &[0; 8]));
                    let _ = c.write_all(&late);
                }
            });
        }
    });
    addr
}

/// The outside review of the native FastCGI exchange: a GET takes a kept connection without a
/// probe, and an application that wrote after its END_REQUEST had each later client read the
/// previous client's response (B got STALE, C got B's, D got C's). Each request now has an id
/// of its own: a record of another request shows the connection out of step, and the GET goes
/// again on a new connection.
#[test]
fn a_kept_connection_out_of_step_answers_no_one_else_s_response() {
    let app = stale_responder();
    let root = inproc::dir("fcgi-review", "stale");
    let h = inproc::start(&format!(
        r#"workers: 1
upstreams:
  app:
    servers: ['{app}']
    protocol: fastcgi
    fastcgi: {{ root: '{root}', keep_conn: true, require_file: false }}
    keepalive: {{ max_idle: 8 }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - proxy: {{ upstream: app }}
"#,
        root = root.display()
    ));
    let addr = h.local_addrs()[0];
    let ask = |q: &str| {
        get(
            addr,
            &format!("GET /x.php?{q} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        )
    };
    assert_eq!(ask("stale").text(), "resp-for:stale");
    // paces: the application's late response reaches the kept connection meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    for q in ["B", "C", "D"] {
        let r = ask(q);
        assert_eq!((r.status, r.text()), (200, format!("resp-for:{q}")));
    }
    inproc::stop(h);
}
