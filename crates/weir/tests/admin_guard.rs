//! The admin API refuses what a web page in the operator's browser could send it (issue 18,
//! item 6): foreign Host names (DNS rebinding), cross-site unsafe requests, requests without
//! the bearer token when one is set, and methods an endpoint does not take (405 with Allow).
//! Reload errors name a variable, never its value; admin requests stay out of the access log.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::Command;

use common::process::{free_port, signal, spawn_serving, write_config, WEIR};

fn request(addr: std::net::SocketAddr, raw: &str) -> common::Response {
    let mut c = common::connect(addr);
    common::roundtrip(&mut c, raw.as_bytes())
}

fn admin_server(admin_extra: &str) -> (common::TestServer, std::net::SocketAddr) {
    let server = common::start_config(&format!(
        "workers: 1\nadmin: {{ address: 127.0.0.1:0{admin_extra} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n"
    ));
    let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
    (server, admin)
}

#[test]
fn only_loopback_own_and_allowed_hosts_are_answered() {
    let (_s, admin) = admin_server(", allowed_hosts: [ops.example.internal]");
    let port = admin.port();
    for (host, status) in [
        ("localhost".to_string(), 200),
        (format!("localhost:{port}"), 200),
        (format!("127.0.0.1:{port}"), 200),
        ("127.9.9.9".to_string(), 200),
        ("[::1]".to_string(), 200),
        ("OPS.example.internal".to_string(), 200),
        ("ops.example.internal.".to_string(), 200),
        // A rebinding page keeps its own name in Host.
        (format!("attacker.example:{port}"), 403),
        ("localhost.attacker.example".to_string(), 403),
        ("10.1.2.3".to_string(), 403),
    ] {
        for path in ["/metrics", "/stats", "/"] {
            let r = request(
                admin,
                &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            );
            assert_eq!(r.status, status, "{path} with Host {host}");
        }
    }
}

#[test]
fn cross_site_unsafe_requests_are_refused() {
    let (_s, admin) = admin_server("");
    let port = admin.port();
    let purge = |extra: &str| {
        request(
            admin,
            &format!("POST /purge?all=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n{extra}\r\n"),
        )
        .status
    };
    // What a page's form or fetch sends.
    assert_eq!(purge("Origin: http://attacker.example\r\n"), 403);
    assert_eq!(purge("Origin: null\r\n"), 403);
    assert_eq!(purge("Sec-Fetch-Site: cross-site\r\n"), 403);
    assert_eq!(
        purge(&format!("Origin: http://127.0.0.1:{}\r\n", port + 1)),
        403
    );
    // The dashboard itself (same origin), and tools that send no Origin.
    assert_eq!(
        purge(&format!(
            "Origin: http://127.0.0.1:{port}\r\nSec-Fetch-Site: same-origin\r\n"
        )),
        200
    );
    assert_eq!(purge(""), 200);
    // Reading is not a change: a GET with a foreign Origin is answered (the browser keeps the
    // answer from the page).
    let r = request(
        admin,
        "GET /stats HTTP/1.1\r\nHost: localhost\r\nOrigin: http://attacker.example\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn every_endpoint_answers_405_with_allow_for_other_methods() {
    let (_s, admin) = admin_server("");
    for (method, path, allow) in [
        ("DELETE", "/metrics", "GET, HEAD"),
        ("POST", "/stats", "GET, HEAD"),
        ("PUT", "/", "GET, HEAD"),
        ("POST", "/health", "GET, HEAD"),
        ("GET", "/reload", "POST"),
        ("GET", "/purge", "POST, PURGE"),
        ("POST", "/openapi.json", "GET, HEAD"),
    ] {
        let r = request(
            admin,
            &format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"),
        );
        assert_eq!(
            (r.status, r.header("allow")),
            (405, Some(allow)),
            "{method} {path}"
        );
    }
}

#[test]
fn a_token_is_required_when_configured() {
    std::env::set_var("WEIR_TEST_ADMIN_TOKEN_G", "s3cret-token-0123456789");
    let (_s, admin) = admin_server(", token_env: WEIR_TEST_ADMIN_TOKEN_G");
    let r = request(admin, "GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"weir admin\"")
    );
    let wrong = request(
        admin,
        "GET /stats HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret-token-0123456780\r\n\r\n",
    );
    assert_eq!(wrong.status, 401);
    let ok = request(
        admin,
        "GET /stats HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret-token-0123456789\r\n\r\n",
    );
    assert_eq!(ok.status, 200);
    // Liveness needs no token.
    let health = request(admin, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(health.status, 200);
    // A short token is a config error.
    std::env::set_var("WEIR_TEST_ADMIN_TOKEN_SHORT", "short");
    let e = weir::runtime::load_str(
        "admin: { address: 127.0.0.1:0, token_env: WEIR_TEST_ADMIN_TOKEN_SHORT }\nlisteners: []\n",
        std::path::Path::new("."),
        |_| None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("admin.token_env"), "{e}");
    assert!(!e.to_string().contains("short\""), "{e}");
}

#[test]
fn admin_requests_stay_out_of_the_access_log_unless_asked() {
    let dir = std::env::temp_dir().join(format!("weir-admin-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (asked, want) in [(false, 0), (true, 1)] {
        let log = dir.join(format!("access-{asked}.log"));
        let _ = std::fs::remove_file(&log);
        let server = common::start_config(&format!(
            "workers: 1\naccess_log: {{ path: '{}' }}\nadmin: {{ address: 127.0.0.1:0, access_log: {asked} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n",
            log.display()
        ));
        let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
        request(admin, "GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n");
        common::get(server.addr, "/main");
        drop(server);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(text.matches("/stats").count(), want, "{text}");
        assert_eq!(text.matches("/main").count(), 1, "{text}");
    }
}

#[test]
fn reload_errors_name_the_variable_never_its_value() {
    let port = free_port();
    let good = format!("admin: {{ address: 127.0.0.1:{port} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: one }}\n");
    let cfg = write_config("reload-secret", &good);
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(&cfg);
    cmd.env("WEIR_TEST_DB_PASSWORD", "hunter2-very-secret");
    let (mut child, _addr) = spawn_serving(cmd);
    let admin: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // A secret used where a number belongs, by mistake.
    std::fs::write(
        &cfg,
        good.replace(
            "listeners:",
            "workers: ${WEIR_TEST_DB_PASSWORD}\nlisteners:",
        ),
    )
    .unwrap();
    let r = request(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(!r.text().contains("hunter2"), "{}", r.text());
    assert!(
        r.text().contains("${WEIR_TEST_DB_PASSWORD}"),
        "{}",
        r.text()
    );
    // The log line is the same error's text (cli/mod.rs logs `error = %e`).
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn check_warns_about_an_open_admin_listener_without_a_token() {
    let check = |admin: &str| {
        let p = write_config(
            "admin-warn",
            &format!("admin: {{ address: '{admin}' }}\nlisteners: []\n"),
        );
        let out = Command::new(WEIR)
            .args(["check", "-c"])
            .arg(&p)
            .env("WEIR_TEST_CHECK_TOKEN", "a-token-long-enough-1234")
            .output()
            .unwrap();
        assert!(out.status.success(), "a warning, not a failure");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(check("0.0.0.0:0").contains("warning: admin.address 0.0.0.0:0 is not on loopback"));
    assert!(!check("127.0.0.1:0").contains("warning"));
    let p = write_config(
        "admin-token",
        "admin: { address: '0.0.0.0:0', token_env: WEIR_TEST_CHECK_TOKEN }\nlisteners: []\n",
    );
    let out = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(&p)
        .env("WEIR_TEST_CHECK_TOKEN", "a-token-long-enough-1234")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

/// PURGE on a cached route: `purge_from: []` refuses everyone, loopback included; behind a
/// trusted proxy the client is the one `X-Forwarded-For` names, not the proxy's loopback.
#[test]
fn purge_from_can_refuse_loopback_and_follows_trusted_proxies() {
    let o = common::origin::http_origin(|_| {
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let server = |route_extra: &str, cache_extra: &str| {
        common::start_config(&format!(
            "workers: 1\ncache_zones: {{ z: {{ max_size: 1m }} }}\nupstreams: {{ o: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o{route_extra} }}\n        cache: {{ zone: z{cache_extra} }}\n",
            o.addr
        ))
    };
    let purge = |srv: &common::TestServer, extra: &str| {
        common::get(srv.addr, "/p");
        let mut s = srv.connect();
        common::roundtrip(
            &mut s,
            format!("PURGE /p HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n").as_bytes(),
        )
        .status
    };
    let default = server("", "");
    assert_eq!(purge(&default, ""), 200, "loopback may purge by default");
    let nobody = server("", ", purge_from: []");
    assert_eq!(purge(&nobody, ""), 403, "[] refuses loopback too");
    let behind = server(", forwarded: { trusted_proxies: [127.0.0.1] }", "");
    assert_eq!(
        purge(&behind, "X-Forwarded-For: 203.0.113.9\r\n"),
        403,
        "the client behind the proxy is not loopback"
    );
    assert_eq!(
        purge(&behind, "X-Forwarded-For: 203.0.113.9, 127.0.0.1\r\n"),
        403,
        "trusted hops are skipped from the right"
    );
    assert_eq!(purge(&behind, ""), 200, "the proxy's own request");
    let office = server(
        ", forwarded: { trusted_proxies: [127.0.0.1] }",
        ", purge_from: [203.0.113.0/24]",
    );
    assert_eq!(purge(&office, "X-Forwarded-For: 203.0.113.9\r\n"), 200);
    assert_eq!(purge(&office, ""), 403, "loopback is not listed");
}
