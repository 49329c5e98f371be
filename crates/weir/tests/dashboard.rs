//! The operator's live view over real sockets: per upstream server metrics (status classes,
//! latency histogram, bytes, in flight), `GET /dashboard.json` (figures on the first request,
//! agreeing with `/metrics`), and draining a server through the admin API.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::origin::{http_origin, ok};

fn admin(addr: SocketAddr, method: &str, path: &str) -> common::Response {
    let mut c = common::connect(addr);
    let raw = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    common::roundtrip(&mut c, raw.as_bytes())
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let r = admin(addr, "GET", path);
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_str(&r.text()).unwrap()
}

/// The sum of every sample whose line starts with `prefix` (a name and some labels).
fn metric(admin_addr: SocketAddr, prefix: &str) -> f64 {
    admin(admin_addr, "GET", "/metrics")
        .text()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn servers_are_counted_shown_and_drained() {
    let a = http_origin(|_| ok("from a"));
    let b = http_origin(|req| {
        if req.line.contains("/api/missing") {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec()
        } else {
            ok("from b")
        }
    });
    let server = common::start_config(&format!(
        r#"
workers: 2
admin: {{ address: 127.0.0.1:0 }}
cache_zones: {{ z: {{ max_size: 1m }} }}
upstreams: {{ pool: {{ servers: ["{}", "{}"], policy: round_robin }} }}
listeners:
  - address: 127.0.0.1:0
    routes:
      - name: api
        match: {{ path_prefix: /api/ }}
        proxy: {{ upstream: pool }}
      - name: hello
        match: {{ path: /hello, methods: [GET] }}
        respond: {{ body: "hi" }}
"#,
        a.addr, b.addr
    ));
    let admin_addr = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let (sa, sb) = (a.addr.to_string(), b.addr.to_string());
    for i in 0..20 {
        assert_eq!(common::get(server.addr, &format!("/api/{i}")).status, 200);
    }
    common::get(server.addr, "/hello");

    // /metrics: classes, histogram, bytes and in flight per server.
    let l = |s: &str| format!("upstream=\"pool\",server=\"{s}\"");
    let twos = |s: &str| {
        metric(
            admin_addr,
            &format!("weir_upstream_responses_total{{{},class=\"2xx\"}}", l(s)),
        )
    };
    assert_eq!(twos(&sa) + twos(&sb), 20.0);
    assert!(twos(&sa) >= 5.0 && twos(&sb) >= 5.0, "both served");
    let count = |s: &str| {
        metric(
            admin_addr,
            &format!("weir_upstream_request_duration_seconds_count{{{}}}", l(s)),
        )
    };
    assert_eq!(count(&sa) + count(&sb), 20.0);
    let sent = metric(
        admin_addr,
        &format!("weir_upstream_sent_bytes_total{{{}}}", l(&sa)),
    );
    assert!(
        sent >= twos(&sa) * "from a".len() as f64,
        "response bytes counted: {sent}"
    );
    assert_eq!(metric(admin_addr, "weir_upstream_in_flight{"), 0.0);

    // The dashboard's figures, on the very first request, agree with /metrics.
    let d = json(admin_addr, "/dashboard.json");
    assert_eq!(d["traffic"]["requests"], 21, "{d}");
    assert!(
        d["traffic"]["rps"].as_f64().unwrap() > 0.0,
        "a rate at once"
    );
    assert!(d["traffic"]["p99"].as_f64().is_some(), "a p99 at once");
    let servers = d["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    for s in servers {
        let name = s["server"].as_str().unwrap();
        assert_eq!(s["requests"].as_f64().unwrap(), count(name), "{s}");
        assert_eq!(s["health"], "up");
    }
    let routes = d["routes"].as_array().unwrap();
    let api = routes.iter().find(|r| r["route"] == "api").unwrap();
    assert_eq!(api["match"], "path /api/*");
    assert_eq!(api["action"], "proxy pool");
    assert_eq!(api["requests"], 20);
    let hello = routes.iter().find(|r| r["route"] == "hello").unwrap();
    assert_eq!(hello["action"], "respond 200");
    assert_eq!(hello["methods"], serde_json::json!(["HEAD", "GET"]));
    assert_eq!(d["zones"][0]["zone"], "z");
    // Bytes both ways per server, and a mean beside the quantiles.
    for s in servers {
        assert!(s["sent_bytes"].as_u64().unwrap() > 0, "{s}");
        assert!(s["received_bytes"].as_u64().is_some(), "{s}");
    }
    let mean = d["traffic"]["mean"].as_f64().unwrap();
    assert!(mean > 0.0, "{mean}");
    let d = json(admin_addr, "/dashboard.json");
    assert_eq!(
        d["series"]["t"].as_array().unwrap().len(),
        d["series"]["rps"].as_array().unwrap().len()
    );

    // Error classes: a 404 from b counts as b's 4xx.
    for _ in 0..4 {
        common::get(server.addr, "/api/missing");
    }
    let fours = metric(
        admin_addr,
        &format!("weir_upstream_responses_total{{{},class=\"4xx\"}}", l(&sb)),
    );
    assert!(fours >= 1.0, "b answered some of the 404s: {fours}");
    let d = json(admin_addr, "/dashboard.json");
    assert_eq!(
        d["traffic"]["4xx"].as_f64().unwrap(),
        fours,
        "b's 404s, a answers 200"
    );
    // Requests no route matched have their own row.
    for _ in 0..3 {
        assert_eq!(common::get(server.addr, "/nowhere").status, 404);
    }
    let d = json(admin_addr, "/dashboard.json");
    let unmatched = d["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "(no route matched)")
        .unwrap()
        .clone();
    assert_eq!(unmatched["requests"], 3, "{unmatched}");
    assert_eq!(unmatched["4xx"], 3, "{unmatched}");

    // Drain a: every request goes to b, a's health says drained, readiness still holds.
    let r = admin(
        admin_addr,
        "POST",
        &format!("/upstreams/drain?upstream=pool&server={sa}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let body: serde_json::Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(
        (body["drained"].clone(), body["changed"].clone()),
        (true.into(), true.into())
    );
    let before = count(&sa);
    for i in 0..10 {
        let r = common::get(server.addr, &format!("/api/d{i}"));
        assert_eq!(r.text(), "from b");
    }
    assert_eq!(count(&sa), before, "a drained server gets nothing new");
    assert_eq!(
        metric(
            admin_addr,
            &format!("weir_upstream_server_drained{{{}}}", l(&sa))
        ),
        1.0
    );
    assert_eq!(
        metric(
            admin_addr,
            &format!("weir_upstream_server_up{{{}}}", l(&sa))
        ),
        0.0
    );
    let d = json(admin_addr, "/dashboard.json");
    let health = |d: &serde_json::Value, s: &str| {
        d["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["server"] == s)
            .unwrap()["health"]
            .clone()
    };
    assert_eq!(health(&d, &sa), "drained");
    assert_eq!(admin(admin_addr, "GET", "/ready").status, 200);

    // Enable it again: it takes requests.
    let r = admin(
        admin_addr,
        "POST",
        &format!("/upstreams/enable?upstream=pool&server={sa}"),
    );
    assert_eq!(r.status, 200);
    for i in 0..6 {
        common::get(server.addr, &format!("/api/e{i}"));
    }
    assert!(count(&sa) > before);
    assert_eq!(health(&json(admin_addr, "/dashboard.json"), &sa), "up");

    // Clear errors for names that do not exist, and for a GET.
    assert_eq!(
        admin(
            admin_addr,
            "POST",
            "/upstreams/drain?upstream=nope&server=x"
        )
        .status,
        404
    );
    let r = admin(
        admin_addr,
        "POST",
        "/upstreams/drain?upstream=pool&server=x",
    );
    assert_eq!(r.status, 404);
    assert!(
        r.text().contains(&sa),
        "the error lists the servers: {}",
        r.text()
    );
    assert_eq!(admin(admin_addr, "POST", "/upstreams/drain").status, 400);
    assert_eq!(admin(admin_addr, "GET", "/upstreams/drain").status, 405);
}

#[test]
fn the_history_gives_per_second_series() {
    let server = common::start_config(
        r#"
admin: { address: 127.0.0.1:0 }
listeners:
  - address: 127.0.0.1:0
    routes:
      - respond: { body: "hi" }
"#,
    );
    let admin_addr = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_millis(2600);
    while std::time::Instant::now() < deadline {
        common::get(server.addr, "/");
        // paces: traffic every 20 ms for 2.6 s, across the dashboard's one-second points.
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = json(admin_addr, "/dashboard.json");
    let rps = d["series"]["rps"].as_array().unwrap();
    assert!(rps.len() >= 2, "a point a second: {d}");
    assert!(
        rps.iter().filter(|v| v.as_f64().unwrap() > 5.0).count() >= 1,
        "the series shows the traffic: {rps:?}"
    );
    let total = d["traffic"]["requests"].as_f64().unwrap();
    assert!(total >= 20.0);
}

/// The certificates a TLS listener serves, with their expiry, on the dashboard.
#[test]
fn certificates_are_listed_with_their_expiry() {
    let pki = common::tlskit::Pki::new("dash-certs");
    let c = pki.issue(
        "site",
        "site.example",
        &["site.example", "www.site.example"],
    );
    let server = common::start_config(&format!(
        "admin: {{ address: 127.0.0.1:0 }}\nlisteners:\n  - address: 127.0.0.1:0\n    tls: {{ certificates: [ {{ cert: '{}', key: '{}' }} ] }}\n    routes: [ {{ respond: {{ body: ok }} }} ]\n",
        c.cert.display(),
        c.key.display()
    ));
    let admin_addr = server.handle.as_ref().unwrap().admin_addr().unwrap();
    let d = json(admin_addr, "/dashboard.json");
    let certs = d["certificates"].as_array().unwrap();
    assert_eq!(certs.len(), 1, "{d}");
    assert_eq!(
        certs[0]["names"],
        serde_json::json!(["site.example", "www.site.example"])
    );
    assert_eq!(
        certs[0]["listener"], "127.0.0.1:0",
        "as configured, like the routes"
    );
    assert_eq!(certs[0]["source"], "file");
    // rcgen's default validity ends in 4096: thousands of days left.
    assert!(
        certs[0]["days_left"].as_i64().unwrap() > 300,
        "{}",
        certs[0]
    );
}
