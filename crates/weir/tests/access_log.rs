//! The access log over real sockets: formats, per-route choices, the request id, syslog.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::origin::{http_origin, ok};

fn temp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("weir-alog-{name}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The file's lines once it holds `n` (workers hand lines over at least once a second).
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn formats_routes_and_the_request_id_over_the_wire() {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let s = seen.clone();
    let origin = http_origin(move |req| {
        s.lock()
            .unwrap()
            .push(req.header("x-request-id").map(str::to_string));
        ok("from origin")
    });
    let (combined, json, template) = (temp("combined"), temp("json"), temp("template"));
    let server = common::start_config(&format!(
        r#"
workers: 1
upstreams: {{ o: {{ servers: ['{origin}'] }} }}
listeners:
  - address: 127.0.0.1:0
    access_log: {{ path: '{combined}', format: combined }}
    routes:
      - name: hello
        match: {{ path: /hello }}
        respond: {{ body: "hi\n" }}
      - name: quiet
        match: {{ path: /health }}
        access_log: off
        respond: {{ body: "ok\n" }}
      - name: api
        match: {{ path_prefix: /api }}
        access_log: {{ path: '{json}', format: json }}
        proxy: {{ upstream: o }}
      - name: tpl
        match: {{ path_prefix: /tpl }}
        access_log: {{ path: '{template}', format: '$status $route $request_id $sent_http_content_type $upstream_addr $bytes_received $http_x_tenant' }}
        proxy: {{ upstream: o }}
"#,
        origin = origin.addr,
        combined = combined.display(),
        json = json.display(),
        template = template.display(),
    ));
    let mut c = server.connect();
    common::roundtrip(
        &mut c,
        b"GET /hello?x=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: t/1 \"q\"\r\nReferer: http://r/\r\n\r\n",
    );
    common::roundtrip(&mut c, b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n");
    common::roundtrip(&mut c, b"GET /missing HTTP/1.1\r\nHost: a\r\n\r\n");
    common::roundtrip(
        &mut c,
        b"GET /api/x HTTP/1.1\r\nHost: a\r\nX-Request-Id: spoofed\r\n\r\n",
    );
    common::roundtrip(
        &mut c,
        b"POST /tpl HTTP/1.1\r\nHost: a\r\nX-Tenant: blue\r\nContent-Length: 5\r\n\r\nhello",
    );

    let lines = wait_lines(&combined, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let re = regex::Regex::new(
        r#"^127\.0\.0\.1 - - \[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /hello\?x=1 HTTP/1\.1" 200 3 "http://r/" "t/1 \\x22q\\x22"$"#,
    )
    .unwrap();
    assert!(re.is_match(&lines[0]), "{}", lines[0]);
    assert!(
        lines[1].contains("\"GET /missing HTTP/1.1\" 404 "),
        "unrouted requests use the listener's log: {}",
        lines[1]
    );

    let lines = wait_lines(&json, 1);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["path"], "/api/x");
    assert_eq!(v["status"], 200);
    assert_eq!(v["route"], "api");
    assert_eq!(v["upstream_addr"], origin.addr.to_string());
    assert!(v["upstream_time"].as_f64().unwrap() >= 0.0);
    // Absent values are null, as the docs say (not cached, no TLS), never the text "-".
    for absent in ["cache", "tls_protocol", "tls_sni", "referer"] {
        assert!(v[absent].is_null(), "{absent}: {}", v[absent]);
    }
    let id = v["request_id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 32, "an untrusted client's id is replaced: {id}");

    let lines = wait_lines(&template, 1);
    let fields: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(fields[0], "200");
    assert_eq!(fields[1], "tpl");
    assert_eq!(fields[3], "text/plain");
    assert_eq!(fields[4], origin.addr.to_string());
    assert_eq!(fields[5], "5", "request body bytes");
    assert_eq!(fields[6], "blue");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.as_slice(),
        [Some(id), Some(fields[2].to_string())],
        "the id sent upstream is the one logged"
    );
}

#[test]
fn a_trusted_peer_keeps_its_request_id() {
    let origin = http_origin(|req| ok(req.header("x-request-id").unwrap_or("none")));
    let server = common::start_config(&format!(
        "workers: 1\nrequest_id: {{ trust_from: [127.0.0.1] }}\nupstreams: {{ o: {{ servers: ['{}'] }} }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - proxy: {{ upstream: o }}\n",
        origin.addr
    ));
    let mut c = server.connect();
    let r = common::roundtrip(
        &mut c,
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: lb-1234\r\n\r\n",
    );
    assert_eq!(r.text(), "lb-1234");
}

#[test]
fn syslog_gets_one_rfc5424_message_per_request() {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let server = common::start_config(&format!(
        "workers: 1\naccess_log: {{ syslog: 'udp://{}', format: common }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n",
        sock.local_addr().unwrap()
    ));
    common::get(server.addr, "/a");
    common::get(server.addr, "/b");
    let mut got = Vec::new();
    for _ in 0..2 {
        let mut buf = [0u8; 2048];
        let n = sock.recv(&mut buf).unwrap();
        got.push(String::from_utf8_lossy(&buf[..n]).to_string());
    }
    for (msg, path) in got.iter().zip(["/a", "/b"]) {
        assert!(msg.starts_with("<134>1 20"), "{msg}");
        assert!(msg.contains(" weir "), "{msg}");
        assert!(
            msg.contains(&format!("\"GET {path} HTTP/1.1\" 200 2")),
            "{msg}"
        );
    }
}

#[test]
fn bad_access_log_settings_are_config_errors_naming_the_key() {
    let load = |text: &str| {
        weir::runtime::load_str(text, Path::new("."), |_| None)
            .unwrap_err()
            .to_string()
    };
    let e = load(
        "listeners:\n  - address: 127.0.0.1:0\n    access_log: { path: /nonexistent-dir/x.log }\n",
    );
    assert!(
        e.contains(":3: listeners[0].access_log.path") && e.contains("/nonexistent-dir/x.log"),
        "{e}"
    );
    let e = load("access_log: { path: stdout, format: '$status $bogus' }\nlisteners: []\n");
    assert!(
        e.contains("access_log.format") && e.contains("$bogus"),
        "{e}"
    );
    let e = load("log: { level: 'loud' }\nlisteners: []\n");
    assert!(e.contains("log.level"), "{e}");
}

#[test]
fn syslog_over_a_unix_datagram_socket() {
    let path = std::env::temp_dir().join(format!("weir-syslog-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let server = common::start_config(&format!(
        "workers: 1\nlisteners:\n  - address: 127.0.0.1:0\n    access_log: {{ syslog: 'unix://{}', format: json }}\n    routes:\n      - respond: {{ body: hi }}\n",
        path.display()
    ));
    common::get(server.addr, "/unix");
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).unwrap();
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.starts_with("<134>1 "), "{msg}");
    let json = &msg[msg.find('{').unwrap()..];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["path"], "/unix");
    let _ = std::fs::remove_file(&path);
}

/// Issue 33 §6: `$uri` (nginx users type it) was refused in log templates; it is the normal
/// path without the query.
#[test]
fn uri_in_a_log_template_is_the_normal_path() {
    let log = temp("uri");
    let s = common::start_config(&format!(
        "workers: 1\naccess_log: {{ path: '{}', format: '$uri|$request_uri' }}\nlisteners:\n  - address: 127.0.0.1:0\n    routes:\n      - respond: {{ body: hi }}\n",
        log.display()
    ));
    assert_eq!(common::get(s.addr, "/a/./b/../c?x=1").status, 200);
    let lines = wait_lines(&log, 1);
    assert_eq!(lines[0], "/a/c|/a/c?x=1");
}
