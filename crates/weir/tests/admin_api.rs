//! The admin API and the operator's surface over real sockets: `/metrics` (checked by
//! `promtool` when installed; CI installs it), `/openapi.json` against the real endpoints,
//! `POST /reload`, SIGUSR1 log reopening, `--log-level`, and systemd's READY notification.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::process::{free_port, signal, spawn_run, spawn_serving, write_config, WEIR};

const CONFIG: &str = r#"
workers: 2
admin: { address: 127.0.0.1:0 }
cache_zones: { z: { max_size: 1m } }
listeners:
  - address: 127.0.0.1:0
    routes:
      - name: hello
        match: { path: /hello }
        respond: { body: "hi\n" }
"#;

fn request(addr: std::net::SocketAddr, raw: &str) -> common::Response {
    let mut c = common::connect(addr);
    common::roundtrip(&mut c, raw.as_bytes())
}

/// The value of the sample `name{labels}` in a text scrape.
fn sample(scrape: &str, prefix: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn metrics_count_what_happened_and_promtool_accepts_them() {
    let disk = std::env::temp_dir().join(format!("weir-admin-disk-{}", std::process::id()));
    // Zone `d` has a disk tier: its families are part of what promtool checks (issue 33 §6).
    let config = CONFIG.replace(
        "cache_zones: { z: { max_size: 1m } }",
        &format!(
            "cache_zones:\n  z: {{ max_size: 1m }}\n  d: {{ max_size: 1m, disk: {{ path: \"{}\", max_size: 8m }} }}",
            disk.display()
        ),
    );
    assert_ne!(config, CONFIG);
    let server = common::start_config(&config);
    let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
    for _ in 0..3 {
        common::get(server.addr, "/hello");
    }
    common::get(server.addr, "/nope");
    let r = request(admin, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text();
    // Listeners are labelled by their configured address.
    let listener = "127.0.0.1:0";
    let hello =
        format!("weir_http_requests_total{{listener=\"{listener}\",route=\"hello\",code=\"200\"}}");
    assert_eq!(sample(&text, &hello), Some(3.0), "{text}");
    let missing =
        format!("weir_http_requests_total{{listener=\"{listener}\",route=\"-\",code=\"404\"}}");
    assert_eq!(sample(&text, &missing), Some(1.0));
    let count = format!(
        "weir_http_request_duration_seconds_count{{listener=\"{listener}\",route=\"hello\"}}"
    );
    assert_eq!(sample(&text, &count), Some(3.0));
    assert!(sample(&text, "weir_connections_accepted_total").unwrap() >= 4.0);
    assert_eq!(sample(&text, "weir_cache_objects{zone=\"z\"}"), Some(0.0));
    assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 0.0);
    assert!(text.contains("# TYPE weir_http_requests_total counter"));

    // OpenMetrics when asked for, as Prometheus does.
    let r = request(
        admin,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
    );
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    assert!(r.text().ends_with("# EOF\n"));

    assert!(text.contains("weir_cache_disk_ready{zone=\"d\"}"), "{text}");
    if common::process::have_all_or_skip(&["promtool"], "apt-get install prometheus") {
        use std::io::Write;
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(server);
    std::fs::remove_dir_all(&disk).ok();
}

#[test]
fn the_openapi_document_matches_the_real_endpoints() {
    let server = common::start_config(CONFIG);
    let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let r = request(
        admin,
        "GET /openapi.json HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let doc: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            let query = if path == "/purge" { "?all=1" } else { "" };
            let raw = format!(
                "{} {path}{query} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
                method.to_uppercase()
            );
            let r = request(admin, &raw);
            let documented: Vec<u16> = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.parse().unwrap())
                .collect();
            assert!(
                documented.contains(&r.status),
                "{method} {path} answered {} (documented: {documented:?})",
                r.status
            );
            let content = op["responses"][r.status.to_string()]["content"]
                .as_object()
                .unwrap();
            let ct = r.header("content-type").unwrap();
            assert!(
                content.keys().any(|k| ct.starts_with(k.as_str())
                    || (k == "application/openmetrics-text" && ct.starts_with("text/plain"))),
                "{method} {path}: content type {ct} not documented"
            );
            if ct.starts_with("application/json") {
                let body: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
                let schema = &content["application/json"]["schema"];
                let schema = match schema["$ref"].as_str() {
                    Some(r) => &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
                    None => schema,
                };
                for key in schema["required"].as_array().into_iter().flatten() {
                    assert!(
                        body.get(key.as_str().unwrap()).is_some(),
                        "{method} {path}: {body} lacks {key}"
                    );
                }
            }
        }
    }
    // And nothing undocumented answers.
    assert_eq!(
        request(admin, "GET /secret HTTP/1.1\r\nHost: localhost\r\n\r\n").status,
        404
    );
}

fn admin_of(
    addr_line_cfg: &std::path::Path,
) -> (
    common::process::Running,
    std::net::SocketAddr,
    std::net::SocketAddr,
) {
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"]).arg(addr_line_cfg);
    let (child, addr) = spawn_serving(cmd);
    // The admin address: ask the main listener's process via /proc is overkill; the config
    // pins it.
    let text = std::fs::read_to_string(addr_line_cfg).unwrap();
    let admin = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("admin: { address: "))
        .and_then(|a| a.strip_suffix(" }"))
        .unwrap()
        .parse()
        .unwrap();
    (child, addr, admin)
}

#[test]
fn post_reload_swaps_the_config_or_reports_why_not() {
    let port = free_port();
    let body = |b: &str| {
        format!("admin: {{ address: 127.0.0.1:{port} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: {b} }}\n")
    };
    let cfg = write_config("post-reload", &body("one"));
    let (mut child, addr, admin) = admin_of(&cfg);
    assert_eq!(common::get(addr, "/").text(), "one");
    std::fs::write(&cfg, body("two")).unwrap();
    let r = request(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, r#"{"reloaded":true}"#));
    assert_eq!(common::get(addr, "/").text(), "two");
    std::fs::write(&cfg, body("three").replace("body:", "bdoy:")).unwrap();
    let r = request(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 500);
    assert!(r.text().contains("unknown field `bdoy`"), "{}", r.text());
    assert_eq!(
        common::get(addr, "/").text(),
        "two",
        "the running config stays"
    );
    // Reloads show in the metrics.
    let m = request(admin, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").text();
    assert_eq!(sample(&m, "weir_config_reloads_total"), Some(1.0), "{m}");
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_in_process_server_has_nothing_to_reload_from() {
    let server = common::start_config(CONFIG);
    let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let r = request(
        admin,
        "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 503);
    assert_eq!(
        request(admin, "GET /reload HTTP/1.1\r\nHost: localhost\r\n\r\n").status,
        405
    );
}

#[test]
fn sigusr1_reopens_the_access_log_after_rotation() {
    let log = std::env::temp_dir().join(format!("weir-rotate-{}.log", std::process::id()));
    let rotated = log.with_extension("log.1");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&rotated);
    let cfg = write_config(
        "usr1",
        &format!("access_log: {{ path: '{}', format: common }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n", log.display()),
    );
    let (mut child, addr) = spawn_run(&cfg);
    let wait_for = |p: &std::path::Path, needle: &str| {
        common::until(
            &format!("{needle} in {}", p.display()),
            Duration::from_secs(10),
            || {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .contains(needle)
            },
        );
    };
    common::get(addr, "/before");
    wait_for(&log, "/before");
    std::fs::rename(&log, &rotated).unwrap();
    signal(&child, "-USR1");
    // The signal taken: the next lines go to a new file at the old path (probes until then go
    // to the rotated one).
    common::until("the access log reopened", Duration::from_secs(10), || {
        common::get(addr, "/probe");
        log.exists()
    });
    common::get(addr, "/after");
    wait_for(&log, "/after");
    assert!(!std::fs::read_to_string(&rotated)
        .unwrap()
        .contains("/after"));
    signal(&child, "-TERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn log_levels_are_checked_and_applied() {
    let out = Command::new(WEIR)
        .args(["--log-level", "loud", "check", "-c", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-level"));
    let cfg = write_config("loglevel", "log: { level: verbose }\nlisteners: []\n");
    let out = Command::new(WEIR)
        .args(["check", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":1: log.level") && err.contains("verbose"),
        "{err}"
    );
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let dir = std::env::temp_dir().join(format!("weir-notify-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&path);
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let cfg = write_config(
        "notify",
        "listeners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: { body: hi }\n",
    );
    let mut cmd = Command::new(WEIR);
    cmd.args(["run", "-c"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &path);
    let (mut child, _addr) = spawn_serving(cmd);
    let next = || {
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    };
    let pid = format!("MAINPID={}", child.id());
    let ready = next();
    assert!(
        ready.starts_with("READY=1") && ready.contains(&pid),
        "{ready}"
    );
    signal(&child, "-HUP");
    assert!(next().starts_with("RELOADING=1"));
    assert!(next().starts_with("READY=1"));
    signal(&child, "-TERM");
    assert!(next().starts_with("STOPPING=1"));
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dashboard_is_one_self_contained_page_fed_by_the_admin_api() {
    let server = common::start_config(CONFIG);
    let admin = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let r = request(admin, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let page = r.text();
    for external in ["src=\"http", "href=\"http", "src='http", "@import", "//cdn"] {
        assert!(
            !page.contains(external),
            "the page loads {external}…: weir runs offline"
        );
    }
    for uses in [
        "api(\"/dashboard.json\"",
        "\"/reload\"",
        "\"/purge?all=1\"",
        "\"/upstreams/\"",
    ] {
        assert!(page.contains(uses), "the page should use {uses}");
    }
}

#[test]
fn a_health_route_on_the_main_listener_follows_upstream_health_and_shutdown() {
    let origin = common::origin::http_origin(|_| common::origin::ok("fine"));
    let server = common::start_config(&format!(
        r#"
workers: 1
upstreams:
  live: {{ servers: ['{origin}'] }}
  dead:
    servers: ['127.0.0.1:1']
    active_health: {{ path: /, interval: 100ms, timeout: 100ms, fall: 1, rise: 1 }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - match: {{ path: /healthz }}
        health: {{ upstreams: [live] }}
      - match: {{ path: /healthz-all }}
        health: {{}}
"#,
        origin = origin.addr
    ));
    let r = common::until_value(
        "the dead upstream made /healthz-all fail",
        Duration::from_secs(10),
        || common::get(server.addr, "/healthz-all"),
        |r| r.status == 503,
    );
    assert!(r.text().contains("dead"), "{}", r.text());
    let mut kept = server.connect();
    let r = common::roundtrip(
        &mut kept,
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, r#"{"ready":true,"upstreams_without_servers_up":[]}"#)
    );
    assert_eq!(
        common::roundtrip(
            &mut kept,
            b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
        )
        .status,
        405
    );
    // Draining: the kept connection's next check says so, so a load balancer stops sending
    // (once the worker took the drain: checks before then still say ready, on the connection).
    server.handle.as_ref().unwrap().drain();
    let r = common::until_value(
        "the kept connection's check says draining",
        Duration::from_secs(10),
        || {
            common::roundtrip(
                &mut kept,
                b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
            )
        },
        |r| r.status != 200,
    );
    assert_eq!(r.status, 503);
    assert!(r.text().contains("shutting_down"), "{}", r.text());
}
