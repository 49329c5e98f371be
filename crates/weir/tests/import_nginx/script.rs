//! Issue 53: the rewrite-module idioms of real configurations (tests/fixtures/nginx/
//! if-idioms.conf), served by nginx and by weir from `weir import` of the same file against
//! one origin: Django's flag built by three `if`s (a redirect only when all three hold),
//! `break`, a SPA's `@rewrites`, an identity rewrite, upgrades only where the location sends
//! `Upgrade`, nginx's `Host: $proxy_host`, `expires max` with `add_header Cache-Control` on
//! files only, and `if`s on a header or an argument. Status, body, `Location`, the caching
//! fields and what the origin saw must be the same.

use std::io::{BufReader, Write};
use std::net::SocketAddr;

use super::common;
use super::common::process::{free_port, have_all_or_skip};
use super::{copy, import, main_conf, side_by_side};

/// What is compared of one answer.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    body: String,
    location: Option<String>,
    cache_control: Vec<String>,
    expires: Option<String>,
}

fn ask(port: u16, raw: &str) -> Seen {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut s = common::connect(addr);
    let r = common::roundtrip(&mut s, raw.replace("PORT", &port.to_string()).as_bytes());
    // nginx makes a relative redirect absolute (`absolute_redirect on`), weir sends it as
    // written: compared relative (a difference the corpus lists).
    let location = r.header("location").map(|l| {
        l.strip_prefix(&format!("http://localhost:{port}"))
            .unwrap_or(l)
            .to_string()
    });
    Seen {
        status: r.status,
        body: if (200..300).contains(&r.status) {
            r.text()
        } else {
            String::new()
        },
        location,
        cache_control: r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
            .map(|(_, v)| v.clone())
            .collect(),
        expires: r.header("expires").map(String::from),
    }
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n")
}

#[test]
fn if_set_break_and_rewrite_idioms_answer_as_nginx_after_import() {
    if !have_all_or_skip(&["nginx"], "apt-get install nginx-light") {
        return;
    }
    // Says what it was asked and with which Host; answers an upgrade with 101 (and closes), so
    // whether the upgrade reached it shows.
    let origin = common::origin::origin(|conn| {
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        while let Some(req) = common::origin::read_request(&mut r) {
            if req.header("upgrade").is_some() {
                let _ = w.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
                );
                return;
            }
            let target = req.line.split(' ').nth(1).unwrap_or("-").to_string();
            let body = format!(
                "app {target} host={} upgrade={}\n",
                req.header("host").unwrap_or("-"),
                req.header("upgrade").unwrap_or("-")
            );
            if w.write_all(&common::origin::ok(&body)).is_err() {
                return;
            }
        }
    });
    let (pn, pw) = (free_port(), free_port());
    let public =
        std::env::temp_dir().join(format!("weir-import-idioms-public-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&public);
    std::fs::create_dir_all(public.join("spa")).unwrap();
    std::fs::create_dir_all(public.join("assets")).unwrap();
    std::fs::write(public.join("robots.txt"), "User-agent: *\n").unwrap();
    std::fs::write(public.join("spa/index.html"), "<p>spa</p>\n").unwrap();
    std::fs::write(public.join("spa/about.txt"), "about\n").unwrap();
    std::fs::write(public.join("assets/app.css"), "a{}\n").unwrap();
    let edits = vec![
        ("listen 80;".to_string(), format!("listen 127.0.0.1:{pn};")),
        ("/srv/app/public".to_string(), public.display().to_string()),
        ("127.0.0.1:3000".to_string(), origin.addr.to_string()),
    ];
    let dir = copy("if-idioms.conf", "idioms", &edits);
    let site = dir.join("if-idioms.conf");
    let main = main_conf(&dir, &site);
    let (yaml, stderr, ok) = import(&site);
    assert!(ok, "{stderr}");
    // Each idiom translated, none refused.
    assert!(!yaml.contains("answers 503"), "{yaml}");
    assert!(!stderr.contains("the location answers 503"), "{stderr}");
    for want in [
        "$http_x_forwarded_proto: '!https'",
        "$http_user_agent: '!~(?i)ELB-HealthChecker'",
        "$http_host: ~app.example.com",
        "upgrade: false",
        "expires: max",
        "value: public",
    ] {
        assert!(yaml.contains(want), "{want}:\n{yaml}");
    }
    let (_n, _w) = side_by_side(&dir, &main, &yaml, pn, pw);
    let cases: Vec<(&str, String)> = vec![
        ("a file", get("/robots.txt", "")),
        ("the app", get("/blog/post?p=1", "")),
        // All three conditions: the redirect; any one missing: the app.
        (
            "flag 111",
            get("/x?y=1", "Host: app.example.com\r\n").replace("Host: localhost\r\n", ""),
        ),
        (
            "flag 011",
            get(
                "/x?y=1",
                "Host: app.example.com\r\nX-Forwarded-Proto: https\r\n",
            )
            .replace("Host: localhost\r\n", ""),
        ),
        (
            "flag 101",
            get(
                "/x",
                "Host: app.example.com\r\nUser-Agent: ELB-HealthChecker/2.0\r\n",
            )
            .replace("Host: localhost\r\n", ""),
        ),
        ("flag 110", get("/x", "")),
        ("spa file", get("/spa/about.txt", "")),
        ("spa fallback", get("/spa/deep/link", "")),
        ("identity rewrite", get("/api/users?id=1", "")),
        (
            "no upgrade here",
            get(
                "/api/stream",
                "Upgrade: websocket\r\nConnection: Upgrade\r\n",
            ),
        ),
        (
            "upgrade relayed",
            get("/ws", "Upgrade: websocket\r\nConnection: Upgrade\r\n"),
        ),
        ("asset file", get("/assets/app.css", "")),
        ("asset from the app", get("/assets/missing.css", "")),
        ("if on a header", get("/teapot", "X-Mode: teapot\r\n")),
        ("if on an argument", get("/teapot?go=1", "")),
        ("if with 0", get("/teapot?go=0", "")),
        ("no if holds", get("/teapot", "")),
    ];
    for (what, raw) in &cases {
        let (n, w) = (ask(pn, raw), ask(pw, raw));
        eprintln!("{what}: nginx {n:?}\n{what}: weir  {w:?}");
        // nginx's date for `expires max` is fixed; the rest is compared as it came.
        assert_eq!(w, n, "{what}:\n{yaml}");
    }
    let _ = std::fs::remove_dir_all(&public);
    let _ = std::fs::remove_dir_all(&dir);
}
